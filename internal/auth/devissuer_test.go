package auth_test

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/jetway-gateway/jetway/internal/auth"
	"github.com/jetway-gateway/jetway/internal/auth/authtest"
)

const devIssuerURL = "http://127.0.0.1:8080/dev"

func newDevVerifier(t *testing.T, d *auth.DevIssuer) *auth.Verifier {
	t.Helper()
	v, err := auth.NewVerifier(t.Context(), auth.Config{Issuer: d.Issuer(), KeySet: d.KeySet()}, testDir, zaptest.NewLogger(t))
	if err != nil {
		t.Fatalf("NewVerifier: %v", err)
	}
	return v
}

func TestDevIssuerRoundTrip(t *testing.T) {
	d, err := auth.LoadOrCreateDevIssuer(filepath.Join(t.TempDir(), "key.pem"), devIssuerURL)
	if err != nil {
		t.Fatalf("LoadOrCreateDevIssuer: %v", err)
	}
	v := newDevVerifier(t, d)
	for _, use := range []string{"", "access", "id"} {
		tok, err := d.Mint(auth.MintOptions{Subject: "dev-user", Username: "dev", Tenant: "contoso",
			ClientID: authtest.DefaultClientID, TokenUse: use, TTL: 10 * time.Minute})
		if err != nil {
			t.Fatalf("Mint(%q): %v", use, err)
		}
		p, err := v.Verify(t.Context(), tok)
		if err != nil {
			t.Fatalf("Verify(%q token): %v", use, err)
		}
		wantUse := use
		if wantUse == "" {
			wantUse = "access"
		}
		if p.Subject != "dev-user" || p.Username != "dev" || p.Tenant != "contoso" || p.App != "support-assistant" ||
			p.TokenUse != wantUse || p.ClientID != authtest.DefaultClientID {
			t.Errorf("Principal = %+v", p)
		}
		if d := time.Until(p.ExpiresAt); d < 9*time.Minute || d > 10*time.Minute {
			t.Errorf("expires in %v, want about 10m", d)
		}
	}

	noTenant, err := d.Mint(auth.MintOptions{Subject: "dev-user", ClientID: authtest.DefaultClientID})
	if err != nil {
		t.Fatalf("Mint: %v", err)
	}
	if _, err := v.Verify(t.Context(), noTenant); !errors.Is(err, auth.ErrNoTenant) {
		t.Errorf("Verify token without tenant: %v, want ErrNoTenant", err)
	}

	for _, bad := range []auth.MintOptions{
		{ClientID: "c"},
		{Subject: "s"},
		{Subject: "s", ClientID: "c", TokenUse: "refresh"},
	} {
		if _, err := d.Mint(bad); err == nil {
			t.Errorf("Mint(%+v) succeeded", bad)
		}
	}
}

// TestDevIssuerTokenShape pins the claim sets to Cognito's.
func TestDevIssuerTokenShape(t *testing.T) {
	d, err := auth.LoadOrCreateDevIssuer(filepath.Join(t.TempDir(), "key.pem"), devIssuerURL)
	if err != nil {
		t.Fatalf("LoadOrCreateDevIssuer: %v", err)
	}
	tests := []struct {
		use    string
		claims []string
	}{
		{"access", []string{"auth_time", "client_id", "cognito:groups", "exp", "iat", "iss", "jti", "scope", "sub", "token_use", "username"}},
		{"id", []string{"aud", "auth_time", "cognito:username", "custom:tenant", "email_verified", "exp", "iat", "iss", "sub", "token_use"}},
	}
	for _, tc := range tests {
		tok, err := d.Mint(auth.MintOptions{Subject: "s", Tenant: "contoso", ClientID: "c", TokenUse: tc.use})
		if err != nil {
			t.Fatalf("Mint: %v", err)
		}
		header, claims := decodeToken(t, tok)
		if got := slices.Sorted(maps.Keys(claims)); !slices.Equal(got, tc.claims) {
			t.Errorf("%s token claims = %v, want %v", tc.use, got, tc.claims)
		}
		if header["alg"] != "RS256" || header["kid"] != d.KeyID() || len(header) != 2 {
			t.Errorf("header = %v, want alg RS256 and kid %s only", header, d.KeyID())
		}
		if claims["token_use"] != tc.use || claims["iss"] != devIssuerURL {
			t.Errorf("claims = %v", claims)
		}
	}
}

func TestDevIssuerKeyReusedAcrossLoads(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state", "dev")
	path := filepath.Join(dir, "issuer.pem")
	first, err := auth.LoadOrCreateDevIssuer(path, devIssuerURL)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	for p, want := range map[string]os.FileMode{dir: 0o700, filepath.Dir(dir): 0o700, path: 0o600} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s mode = %v, want %v", p, got, want)
		}
	}
	pem, err := os.ReadFile(path)
	if err != nil || !strings.HasPrefix(string(pem), "-----BEGIN PRIVATE KEY-----") {
		t.Fatalf("key file: %v %.30q", err, pem)
	}

	// A second process (the token CLI) loads the same file...
	second, err := auth.LoadOrCreateDevIssuer(path, devIssuerURL)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	if first.KeyID() != second.KeyID() {
		t.Fatalf("kid changed across loads: %s != %s", first.KeyID(), second.KeyID())
	}
	after, _ := os.ReadFile(path)
	if string(after) != string(pem) {
		t.Error("loading rewrote the key file")
	}
	// ...and what it mints, the server (first) accepts.
	tok, err := second.Mint(auth.MintOptions{Subject: "s", Tenant: "contoso", ClientID: authtest.DefaultClientID})
	if err != nil {
		t.Fatalf("Mint: %v", err)
	}
	if _, err := newDevVerifier(t, first).Verify(t.Context(), tok); err != nil {
		t.Fatalf("Verify across loads: %v", err)
	}

	// A different key file is a different key: its tokens are refused.
	other, err := auth.LoadOrCreateDevIssuer(filepath.Join(dir, "other.pem"), devIssuerURL)
	if err != nil {
		t.Fatalf("create other: %v", err)
	}
	tok, err = other.Mint(auth.MintOptions{Subject: "s", Tenant: "contoso", ClientID: authtest.DefaultClientID})
	if err != nil {
		t.Fatalf("Mint: %v", err)
	}
	if _, err := newDevVerifier(t, first).Verify(t.Context(), tok); !errors.Is(err, auth.ErrUnknownKey) {
		t.Errorf("Verify token from another key: %v, want ErrUnknownKey", err)
	}
}

func TestDevIssuerRejectsBadKeyFile(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{
		"garbage.pem": "not a key",
		"cert.pem":    "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
	} {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := auth.LoadOrCreateDevIssuer(path, devIssuerURL)
		if err == nil || !strings.Contains(err.Error(), path) {
			t.Errorf("LoadOrCreateDevIssuer(%s) error = %v, want one naming the file", name, err)
		}
	}
	if _, err := auth.LoadOrCreateDevIssuer(filepath.Join(dir, "k.pem"), ""); err == nil {
		t.Error("LoadOrCreateDevIssuer without issuer succeeded")
	}
}

// decodeToken returns a compact JWS's header and claims, unverified.
func decodeToken(t *testing.T, tok string) (header, claims map[string]any) {
	t.Helper()
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		t.Fatalf("token has %d parts", len(parts))
	}
	for i, dst := range []*map[string]any{&header, &claims} {
		raw, err := base64.RawURLEncoding.DecodeString(parts[i])
		if err != nil {
			t.Fatalf("part %d: %v", i, err)
		}
		if err := json.Unmarshal(raw, dst); err != nil {
			t.Fatalf("part %d: %v", i, err)
		}
	}
	return header, claims
}
