package authtest_test

import (
	"encoding/base64"
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/jetway-gateway/jetway/internal/auth/authtest"
)

func TestTokenShapes(t *testing.T) {
	iss := authtest.NewIssuer(t)
	tests := []struct {
		claims authtest.Claims
		want   []string
	}{
		{authtest.Claims{Tenant: "contoso"}, []string{"auth_time", "client_id", "cognito:groups", "exp", "iat", "iss", "jti", "scope", "sub", "token_use", "username"}},
		{authtest.Claims{Tenant: "contoso", TokenUse: "id"}, []string{"aud", "auth_time", "cognito:username", "custom:tenant", "email_verified", "exp", "iat", "iss", "sub", "token_use"}},
	}
	for _, tc := range tests {
		header, claims := decode(t, iss.Token(t, tc.claims))
		if got := slices.Sorted(maps.Keys(claims)); !slices.Equal(got, tc.want) {
			t.Errorf("claims = %v, want %v", got, tc.want)
		}
		if header["alg"] != "RS256" || header["kid"] != iss.KeyID() {
			t.Errorf("header = %v", header)
		}
		if claims["iss"] != iss.URL || claims["sub"] != authtest.DefaultSubject {
			t.Errorf("claims = %v", claims)
		}
	}
}

func TestJWKSEndpoint(t *testing.T) {
	iss := authtest.NewIssuer(t)
	if !strings.HasSuffix(iss.JWKSURL, "/"+authtest.PoolID+"/.well-known/jwks.json") || !strings.HasPrefix(iss.JWKSURL, iss.URL) {
		t.Fatalf("JWKSURL = %s, URL = %s", iss.JWKSURL, iss.URL)
	}
	keys := func() []map[string]string {
		t.Helper()
		res, err := iss.Client().Get(iss.JWKSURL)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var set struct{ Keys []map[string]string }
		if err := json.NewDecoder(res.Body).Decode(&set); err != nil {
			t.Fatal(err)
		}
		return set.Keys
	}
	first := keys()
	if len(first) != 1 || first[0]["kid"] != iss.KeyID() || first[0]["kty"] != "RSA" || first[0]["alg"] != "RS256" || first[0]["use"] != "sig" {
		t.Fatalf("keys = %v", first)
	}
	old := iss.KeyID()
	kid := iss.Rotate()
	if kid == old || iss.KeyID() != kid {
		t.Fatalf("Rotate: kid %s, current %s, old %s", kid, iss.KeyID(), old)
	}
	if got := keys(); len(got) != 2 || got[0]["kid"] != old || got[1]["kid"] != kid {
		t.Fatalf("keys after rotation = %v", got)
	}
	if got := iss.Fetches(); got != 2 {
		t.Errorf("Fetches = %d, want 2", got)
	}
	iss.SetFailing(true)
	res, err := iss.Client().Get(iss.JWKSURL)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("status while failing = %d", res.StatusCode)
	}
}

func decode(t *testing.T, tok string) (header, claims map[string]any) {
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
