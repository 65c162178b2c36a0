// Package door is what every door shares at its edge: signing the caller
// in from an HTTP request (the WebSocket upgrade, the OpenAI and the
// Anthropic doors), request ids, the one table from an outcome's
// protocol code to its HTTP status, and the HTTP doors' one request
// lifecycle (Lifecycle). An HTTP door is a Dialect over that lifecycle
// plus its routes: it turns its wire format into the core's
// gateway.Request (naming the core's field paths in its own terms), and
// the core's events back into its wire format (a stream.Codec). Doors
// import this package, never each other.
package door

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"net/http"
	"strings"
	"time"

	"github.com/jetway-gateway/jetway/internal/auth"
	"github.com/jetway-gateway/jetway/internal/gateway"
	"github.com/jetway-gateway/jetway/internal/protocol"
	"github.com/jetway-gateway/jetway/internal/telemetry"
)

// Verifier checks a bearer token.
type Verifier interface {
	Verify(ctx context.Context, token string) (auth.Principal, error)
}

// VerifyTimeout bounds one token's verification (a JWKS fetch included).
const VerifyTimeout = 5 * time.Second

// Refusal is a sign-in that failed: what the caller is told, and the
// cause for the log.
type Refusal struct {
	Status  int
	Code    string // protocol.CodeUnauthorized or protocol.CodeForbidden
	Message string // safe to show
	Cause   error  // why the token was refused; nil when none was sent
}

// Source is a place other than the Authorization header where a door
// takes the token: Describe names it in refusals ("the x-api-key header").
type Source struct {
	Describe string
	Find     func(r *http.Request) string
}

// APIKey is Anthropic's header (the Anthropic door's SDKs send the key there).
var APIKey = Source{Describe: "the x-api-key header", Find: func(r *http.Request) string {
	return strings.TrimSpace(r.Header.Get("x-api-key"))
}}

// queryTokens are the query-string names a token is refused under: a
// token in a URL ends up in access logs and browser history.
var queryTokens = []string{"token", "access_token", "id_token", "jwt", "authorization", "bearer", "api_key", "apikey", "x-api-key", "key"}

// SignIn is the one sign-in of every door.
type SignIn struct {
	Verifier Verifier
	Door     string             // the door's name, for the metric
	Metrics  *telemetry.Metrics // may be nil
}

// Caller signs in the caller of r: the token is the Authorization
// header's bearer token, else the first of also that is present. Tokens
// in the query string are refused. Every refusal is counted
// (jetway_unauthenticated_refusals_total{door}); the door logs it, on a
// sampled logger (telemetry.UnauthenticatedLogger: anyone can send bad
// tokens, as often as they like).
func (s *SignIn) Caller(r *http.Request, also ...Source) (auth.Principal, *Refusal) {
	p, ref := s.caller(r, also)
	if ref != nil {
		s.Metrics.UnauthenticatedRefusal(s.Door)
	}
	return p, ref
}

// cachedVerifier is a Verifier with a cache of verified tokens
// (*auth.Verifier): Cached answers for a token in it, with no I/O.
type cachedVerifier interface {
	Cached(token string) (auth.Principal, bool)
}

func (s *SignIn) caller(r *http.Request, also []Source) (auth.Principal, *Refusal) {
	where := func() string {
		w := `"Authorization: Bearer <JWT>"`
		for _, src := range also {
			w += " or " + src.Describe
		}
		return w
	}
	// Names are compared case-insensitively: ?X-Api-Key= is the same leak.
	if r.URL.RawQuery != "" {
		for name := range r.URL.Query() {
			for _, k := range queryTokens {
				if strings.EqualFold(name, k) {
					return auth.Principal{}, &Refusal{Status: http.StatusUnauthorized, Code: protocol.CodeUnauthorized,
						Message: "tokens in the query string are refused: send " + where()}
				}
			}
		}
	}
	var token string
	if hv := r.Header.Get("Authorization"); hv != "" {
		scheme, tok, ok := strings.Cut(hv, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(tok) == "" {
			return auth.Principal{}, &Refusal{Status: http.StatusUnauthorized, Code: protocol.CodeUnauthorized,
				Message: `Authorization header must be "Bearer <JWT>"`}
		}
		token = strings.TrimSpace(tok)
	}
	for _, src := range also {
		if token != "" {
			break
		}
		token = src.Find(r)
	}
	if token == "" {
		return auth.Principal{}, &Refusal{Status: http.StatusUnauthorized, Code: protocol.CodeUnauthorized,
			Message: "missing credentials: send " + where() + " (the JWT is the API key)"}
	}
	// A token verified before is answered from the verifier's cache, with
	// no I/O and so no timeout to set.
	if c, ok := s.Verifier.(cachedVerifier); ok {
		if p, ok := c.Cached(token); ok {
			return p, nil
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), VerifyTimeout)
	defer cancel()
	p, err := s.Verifier.Verify(ctx, token)
	if err != nil {
		if gateway.Failure(err).Code == protocol.CodeForbidden {
			return auth.Principal{}, &Refusal{Status: http.StatusForbidden, Code: protocol.CodeForbidden,
				Message: "user has no tenant or app here", Cause: err}
		}
		return auth.Principal{}, &Refusal{Status: http.StatusUnauthorized, Code: protocol.CodeUnauthorized,
			Message: auth.RefusalReason(err), Cause: err}
	}
	return p, nil
}

// NewID returns a random id of protocol.ValidID's alphabet (a request or
// session id the client did not choose).
func NewID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// HTTPStatus is the status an HTTP door answers an outcome's error code
// with: the protocol's (protocol.Status), except a model the app may not
// use, which is 404 (OpenAI's and Anthropic's answer for a model the key
// cannot see). Each door names the status in its own error shape.
func HTTPStatus(code string) int {
	if code == protocol.CodeModelNotAllowed {
		return http.StatusNotFound
	}
	return protocol.Status(code)
}
