// Package authtest runs a local stand-in for a Cognito user pool in tests: an
// HTTP server publishing a JWKS at /.well-known/jwks.json under its issuer
// URL, and tokens shaped like Cognito's, with knobs to make every kind of bad
// token. It signs with the standard library, independently of the jwx code
// under test.
package authtest

import (
	"crypto"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	_ "crypto/sha256" // registers SHA-256 for crypto.Hash.New
	_ "crypto/sha512" // registers SHA-384 and SHA-512
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetway-gateway/jetway/internal/auth"
)

// Defaults used by Token for Claims fields left empty.
const (
	// DefaultSubject is the sub of tokens that name no Subject.
	DefaultSubject = "user-1"
	// DefaultClientID is the app client of tokens that name no ClientID.
	DefaultClientID = "test-client"
	// DefaultTTL is the lifetime of tokens that set no ExpiresAt.
	DefaultTTL = time.Hour
	// PoolID is the user pool id at the end of the issuer URL.
	PoolID = "us-east-1_jetwaytest"
	// jwksPath is where Cognito publishes a pool's keys, under the issuer.
	jwksPath = "/.well-known/jwks.json"
	keyBits  = 2048
)

// Where Token puts Claims.Tenant.
const (
	// ViaDefault follows Cognito's shape: a "tenant:<t>" group in access
	// tokens, the custom:tenant attribute in id tokens.
	ViaDefault = ""
	// ViaGroup puts the tenant in cognito:groups as "tenant:<t>".
	ViaGroup = "group"
	// ViaClaim puts the tenant in the custom:tenant claim.
	ViaClaim = "claim"
)

// Claims describes a token for Issuer.Token. The zero value is a valid
// access token for DefaultSubject and DefaultClientID without a tenant.
type Claims struct {
	// Subject is the sub; default DefaultSubject.
	Subject string
	// Username is username (access) or cognito:username (id); default Subject.
	Username string
	// ClientID is client_id (access) or aud (id); default DefaultClientID.
	// Use one the Directory does not know for an unknown client.
	ClientID string
	// Tenant is the user's tenant, placed as TenantVia says; empty means
	// the user has no tenant.
	Tenant string
	// TenantVia is ViaDefault, ViaGroup or ViaClaim.
	TenantVia string
	// Groups are more cognito:groups entries.
	Groups []string
	// TokenUse is "access" (default), "id", or anything else to make a
	// wrong token_use.
	TokenUse string
	// Issuer overrides iss (default the issuer's URL).
	Issuer string
	// IssuedAt is iat and auth_time; default now. In the future: not yet valid.
	IssuedAt time.Time
	// ExpiresAt is exp; default IssuedAt + DefaultTTL. In the past: expired.
	ExpiresAt time.Time
	// NotBefore is nbf; zero means none (Cognito sets none).
	NotBefore time.Time
	// Alg is the header alg and how the token is signed: "" or "RS256" (the
	// real thing), "RS384", "RS512", "PS256" (signed with the issuer's key
	// under an algorithm Cognito never uses), "HS256" (HMAC keyed with the
	// issuer's public key PEM: the key-confusion attack) or "none" (no
	// signature).
	Alg string
	// KeyID overrides the header kid; "-" omits it.
	KeyID string
	// UnknownKey signs with a key the issuer never publishes.
	UnknownKey bool
	// Extra claims are set last; a nil value removes the claim.
	Extra map[string]any
}

// Issuer is a local Cognito user pool. Its methods are safe for concurrent use.
type Issuer struct {
	// URL is the issuer (iss), like https://cognito-idp.<region>.amazonaws.com/<pool>.
	URL string
	// JWKSURL is URL + "/.well-known/jwks.json".
	JWKSURL string

	srv     *httptest.Server
	fetches atomic.Int64
	failing atomic.Bool

	mu       sync.Mutex
	keys     []signingKey // published; the last one signs
	stranger *signingKey  // never published
}

type signingKey struct {
	kid  string
	priv *rsa.PrivateKey
}

// NewIssuer starts an issuer whose server stops when the test ends.
func NewIssuer(t testing.TB) *Issuer {
	t.Helper()
	iss := &Issuer{}
	iss.keys = []signingKey{newKey()}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /"+PoolID+jwksPath, iss.serveJWKS)
	iss.srv = httptest.NewServer(mux)
	t.Cleanup(iss.srv.Close)
	iss.URL = iss.srv.URL + "/" + PoolID
	iss.JWKSURL = iss.URL + jwksPath
	return iss
}

// Config returns a verifier configuration for this issuer.
func (i *Issuer) Config() auth.Config {
	return auth.Config{Issuer: i.URL, JWKSURL: i.JWKSURL, HTTPClient: i.srv.Client()}
}

// Client returns an HTTP client for the issuer's server.
func (i *Issuer) Client() *http.Client { return i.srv.Client() }

// Fetches returns how many times the JWKS has been requested.
func (i *Issuer) Fetches() int { return int(i.fetches.Load()) }

// SetFailing makes the JWKS endpoint answer 503 (true) or work again (false).
func (i *Issuer) SetFailing(failing bool) { i.failing.Store(failing) }

// Rotate adds a new signing key: the JWKS publishes it (next to the old
// ones) and tokens made from now on are signed with it. It returns its kid.
func (i *Issuer) Rotate() string {
	k := newKey()
	i.mu.Lock()
	defer i.mu.Unlock()
	i.keys = append(i.keys, k)
	return k.kid
}

// Retire stops publishing the key kid (a key rotated out, or revoked);
// the current signing key cannot be retired.
func (i *Issuer) Retire(kid string) {
	i.mu.Lock()
	defer i.mu.Unlock()
	signer := i.keys[len(i.keys)-1]
	kept := slices.DeleteFunc(slices.Clone(i.keys[:len(i.keys)-1]), func(k signingKey) bool { return k.kid == kid })
	i.keys = append(kept, signer)
}

// KeyID returns the kid of the current signing key.
func (i *Issuer) KeyID() string {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.keys[len(i.keys)-1].kid
}

func (i *Issuer) serveJWKS(w http.ResponseWriter, _ *http.Request) {
	i.fetches.Add(1)
	if i.failing.Load() {
		http.Error(w, `{"message":"unavailable"}`, http.StatusServiceUnavailable)
		return
	}
	type jwk struct {
		Alg string `json:"alg"`
		E   string `json:"e"`
		Kid string `json:"kid"`
		Kty string `json:"kty"`
		N   string `json:"n"`
		Use string `json:"use"`
	}
	var set struct {
		Keys []jwk `json:"keys"`
	}
	i.mu.Lock()
	for _, k := range i.keys {
		set.Keys = append(set.Keys, jwk{
			Alg: "RS256",
			E:   b64(big.NewInt(int64(k.priv.E)).Bytes()),
			Kid: k.kid,
			Kty: "RSA",
			N:   b64(k.priv.N.Bytes()),
			Use: "sig",
		})
	}
	i.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(set)
}

// Token returns a token described by c, shaped like Cognito's: an access
// token carries sub, iss, client_id, token_use, scope, auth_time, iat, exp,
// jti, username and cognito:groups; an id token carries sub, iss, aud,
// token_use, auth_time, iat, exp, cognito:username, custom:tenant and
// email_verified.
func (i *Issuer) Token(t testing.TB, c Claims) string {
	t.Helper()
	key := i.signer(c.UnknownKey)

	if c.Subject == "" {
		c.Subject = DefaultSubject
	}
	if c.Username == "" {
		c.Username = c.Subject
	}
	if c.ClientID == "" {
		c.ClientID = DefaultClientID
	}
	if c.TokenUse == "" {
		c.TokenUse = "access"
	}
	if c.Issuer == "" {
		c.Issuer = i.URL
	}
	if c.IssuedAt.IsZero() {
		c.IssuedAt = time.Now()
	}
	if c.ExpiresAt.IsZero() {
		c.ExpiresAt = c.IssuedAt.Add(DefaultTTL)
	}
	claims := map[string]any{
		"sub":       c.Subject,
		"iss":       c.Issuer,
		"token_use": c.TokenUse,
		"auth_time": c.IssuedAt.Unix(),
		"iat":       c.IssuedAt.Unix(),
		"exp":       c.ExpiresAt.Unix(),
	}
	if !c.NotBefore.IsZero() {
		claims["nbf"] = c.NotBefore.Unix()
	}
	groups := append([]string(nil), c.Groups...)
	id := c.TokenUse == "id"
	if id {
		claims["aud"] = c.ClientID
		claims["cognito:username"] = c.Username
		claims["email_verified"] = true
	} else {
		claims["client_id"] = c.ClientID
		claims["scope"] = "aws.cognito.signin.user.admin"
		claims["jti"] = rand.Text()
		claims["username"] = c.Username
	}
	if c.Tenant != "" {
		via := c.TenantVia
		if via == ViaDefault {
			via = ViaGroup
			if id {
				via = ViaClaim
			}
		}
		switch via {
		case ViaGroup:
			groups = append(groups, auth.DefaultTenantGroupPrefix+c.Tenant)
		case ViaClaim:
			claims[auth.DefaultTenantClaim] = c.Tenant
		default:
			t.Fatalf("authtest: unknown TenantVia %q", c.TenantVia)
		}
	}
	if len(groups) > 0 {
		claims["cognito:groups"] = groups
	}
	for k, v := range c.Extra {
		if v == nil {
			delete(claims, k)
			continue
		}
		claims[k] = v
	}

	alg := c.Alg
	if alg == "" {
		alg = "RS256"
	}
	header := map[string]any{"alg": alg}
	switch c.KeyID {
	case "":
		header["kid"] = key.kid
	case "-":
	default:
		header["kid"] = c.KeyID
	}
	h, err := json.Marshal(header)
	if err != nil {
		t.Fatalf("authtest: header: %v", err)
	}
	p, err := json.Marshal(claims)
	if err != nil {
		t.Fatalf("authtest: claims: %v", err)
	}
	input := b64(h) + "." + b64(p)
	return input + "." + b64(sign(t, alg, key.priv, input))
}

// signer returns the current signing key, or the never-published one.
func (i *Issuer) signer(unknown bool) signingKey {
	i.mu.Lock()
	defer i.mu.Unlock()
	if !unknown {
		return i.keys[len(i.keys)-1]
	}
	if i.stranger == nil {
		k := newKey()
		i.stranger = &k
	}
	return *i.stranger
}

func sign(t testing.TB, alg string, priv *rsa.PrivateKey, input string) []byte {
	t.Helper()
	hashes := map[string]crypto.Hash{"256": crypto.SHA256, "384": crypto.SHA384, "512": crypto.SHA512}
	if alg == "none" {
		return nil
	}
	if len(alg) != 5 || hashes[alg[2:]] == 0 {
		t.Fatalf("authtest: unsupported alg %q", alg)
	}
	hash := hashes[alg[2:]]
	var (
		sig []byte
		err error
	)
	switch alg[:2] {
	case "RS":
		sig, err = rsa.SignPKCS1v15(rand.Reader, priv, hash, digest(hash, input))
	case "PS":
		sig, err = rsa.SignPSS(rand.Reader, priv, hash, digest(hash, input), nil)
	case "HS":
		// The classic key-confusion attack: HMAC keyed with the public key,
		// which a verifier that trusts the header alg would accept.
		der, merr := x509.MarshalPKIXPublicKey(&priv.PublicKey)
		if merr != nil {
			t.Fatalf("authtest: %v", merr)
		}
		secret := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
		mac := hmac.New(hash.New, secret)
		mac.Write([]byte(input))
		sig = mac.Sum(nil)
	default:
		t.Fatalf("authtest: unsupported alg %q", alg)
	}
	if err != nil {
		t.Fatalf("authtest: sign %s: %v", alg, err)
	}
	return sig
}

func digest(hash crypto.Hash, input string) []byte {
	h := hash.New()
	h.Write([]byte(input))
	return h.Sum(nil)
}

// newKey makes a signing key. crypto/rand does not fail (it crashes the
// program first), so neither does this.
func newKey() signingKey {
	priv, err := rsa.GenerateKey(rand.Reader, keyBits)
	if err != nil {
		panic("authtest: generate key: " + err.Error())
	}
	// Cognito's kids are base64 (standard alphabet, padded).
	return signingKey{kid: base64.StdEncoding.EncodeToString([]byte(rand.Text())), priv: priv}
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }
