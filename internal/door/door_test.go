package door

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jetway-gateway/jetway/internal/auth"
	"github.com/jetway-gateway/jetway/internal/protocol"
)

// verifier takes "good" and refuses "nobody" as a user with no tenant.
type verifier struct{ seen []string }

func (v *verifier) Verify(_ context.Context, token string) (auth.Principal, error) {
	v.seen = append(v.seen, token)
	switch token {
	case "good":
		return auth.Principal{Subject: "u1", Tenant: "t", App: "a"}, nil
	case "nobody":
		return auth.Principal{}, fmt.Errorf("no tenant: %w", auth.ErrNoTenant)
	case "expired":
		return auth.Principal{}, fmt.Errorf("verify: %w", auth.ErrExpired)
	case "other-client":
		return auth.Principal{}, fmt.Errorf("client contoso-x: %w", auth.ErrUnknownClient)
	case "other-key":
		return auth.Principal{}, fmt.Errorf("kid k-secret-7: %w", auth.ErrUnknownKey)
	}
	return auth.Principal{}, errors.New("bad signature")
}

var header = Source{Describe: "the x-test header", Find: func(r *http.Request) string { return r.Header.Get("x-test") }}

func TestSignIn(t *testing.T) {
	for _, tc := range []struct {
		name     string
		target   string
		headers  map[string]string
		status   int    // 0: signed in
		message  string // a part of the refusal's message
		verified string // the token verified, if any
	}{
		{name: "bearer", target: "/", headers: map[string]string{"Authorization": "Bearer good"}, verified: "good"},
		{name: "scheme in any case", target: "/", headers: map[string]string{"Authorization": "bearer  good "}, verified: "good"},
		{name: "the door's other place", target: "/", headers: map[string]string{"x-test": "good"}, verified: "good"},
		{name: "the header before the other place", target: "/", headers: map[string]string{"Authorization": "Bearer good", "x-test": "other"}, verified: "good"},
		{name: "missing", target: "/", status: 401, message: `send "Authorization: Bearer <JWT>" or the x-test header`},
		{name: "not a bearer", target: "/", headers: map[string]string{"Authorization": "Basic dTpw"}, status: 401, message: "Bearer <JWT>"},
		{name: "empty bearer", target: "/", headers: map[string]string{"Authorization": "Bearer  "}, status: 401, message: "Bearer <JWT>"},
		{name: "token in the query string", target: "/?access_token=good", headers: map[string]string{"Authorization": "Bearer good"}, status: 401, message: "query string"},
		{name: "api key in the query string", target: "/?x-api-key=good", status: 401, message: "query string"},
		{name: "api key in the query string, another case", target: "/?X-Api-Key=good", status: 401, message: "query string"},
		{name: "token in the query string, upper case", target: "/?TOKEN=good", status: 401, message: "query string"},
		{name: "forged", target: "/", headers: map[string]string{"Authorization": "Bearer forged"}, status: 401, message: "invalid token", verified: "forged"},
		{name: "expired", target: "/", headers: map[string]string{"Authorization": "Bearer expired"}, status: 401, message: "token expired", verified: "expired"},
		{name: "unknown app client", target: "/", headers: map[string]string{"Authorization": "Bearer other-client"}, status: 401, message: "token's app client is not configured", verified: "other-client"},
		{name: "unknown signing key", target: "/", headers: map[string]string{"Authorization": "Bearer other-key"}, status: 401, message: "token signed by an unknown key", verified: "other-key"},
		{name: "no tenant", target: "/", headers: map[string]string{"Authorization": "Bearer nobody"}, status: 403, message: "no tenant or app", verified: "nobody"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := &verifier{}
			s := &SignIn{Verifier: v, Door: "test"}
			r := httptest.NewRequest(http.MethodGet, tc.target, nil)
			for k, val := range tc.headers {
				r.Header.Set(k, val)
			}
			p, ref := s.Caller(r, header)
			switch {
			case tc.status == 0 && (ref != nil || p.Subject != "u1"):
				t.Fatalf("refused %+v, want signed in", ref)
			case tc.status != 0 && (ref == nil || ref.Status != tc.status || !strings.Contains(ref.Message, tc.message)):
				t.Fatalf("refusal %+v, want %d with %q", ref, tc.status, tc.message)
			case ref != nil && (ref.Code != protocol.CodeUnauthorized) != (ref.Status == 403):
				t.Fatalf("refusal code %q with status %d", ref.Code, ref.Status)
			case ref != nil && (strings.Contains(ref.Message, "k-secret-7") || strings.Contains(ref.Message, "contoso-x")):
				t.Fatalf("refusal %q tells the client the log's details", ref.Message)
			case ref != nil && tc.verified != "" && ref.Cause == nil:
				t.Fatal("a refused token's refusal has no cause for the log")
			}
			if got := strings.Join(v.seen, ","); got != tc.verified {
				t.Fatalf("verified %q, want %q", got, tc.verified)
			}
		})
	}
}

func TestHTTPStatus(t *testing.T) {
	for code, want := range map[string]int{protocol.CodeModelNotAllowed: 404, protocol.CodeQuotaExceeded: 429,
		protocol.CodeBusy: 503, protocol.CodeInvalidRequest: 400, "unknown": 500} {
		if got := HTTPStatus(code); got != want {
			t.Errorf("HTTPStatus(%s) = %d, want %d", code, got, want)
		}
	}
	if id := NewID(); !protocol.ValidID(id) || id == NewID() {
		t.Fatalf("NewID %q", id)
	}
}
