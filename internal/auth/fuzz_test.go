package auth_test

import (
	"context"
	"encoding/base64"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/jetway-gateway/jetway/internal/auth"
	"github.com/jetway-gateway/jetway/internal/auth/authtest"
)

// FuzzVerify feeds arbitrary strings to the JWT front door: Verify must never
// panic, and every rejection must wrap exactly one sentinel. Seeds are live
// tokens from a dev issuer (valid and each kind of broken) plus the committed
// corpus in testdata/fuzz/FuzzVerify.
func FuzzVerify(f *testing.F) {
	d, err := auth.LoadOrCreateDevIssuer(filepath.Join(f.TempDir(), "key.pem"), devIssuerURL)
	if err != nil {
		f.Fatalf("LoadOrCreateDevIssuer: %v", err)
	}
	v, err := auth.NewVerifier(context.Background(), auth.Config{Issuer: d.Issuer(), KeySet: d.KeySet()}, testDir, zap.NewNop())
	if err != nil {
		f.Fatalf("NewVerifier: %v", err)
	}
	mint := func(o auth.MintOptions) string {
		tok, err := d.Mint(o)
		if err != nil {
			f.Fatalf("Mint: %v", err)
		}
		return tok
	}
	access := mint(auth.MintOptions{Subject: "s", Tenant: "contoso", ClientID: authtest.DefaultClientID})
	f.Add(access)
	f.Add(mint(auth.MintOptions{Subject: "s", Tenant: "contoso", ClientID: authtest.DefaultClientID, TokenUse: "id"}))
	f.Add(mint(auth.MintOptions{Subject: "s", ClientID: authtest.DefaultClientID}))
	f.Add(mint(auth.MintOptions{Subject: "s", Tenant: "fabrikam", ClientID: authtest.DefaultClientID}))
	f.Add(mint(auth.MintOptions{Subject: "s", Tenant: "contoso", ClientID: "stranger"}))
	parts := strings.Split(access, ".")
	b64 := base64.RawURLEncoding.EncodeToString
	f.Add(b64([]byte(`{"alg":"none","kid":"`+d.KeyID()+`"}`)) + "." + parts[1] + ".")
	f.Add(b64([]byte(`{"alg":"HS256","kid":"`+d.KeyID()+`"}`)) + "." + parts[1] + "." + parts[2])
	f.Add(parts[0] + "." + parts[1] + ".")

	f.Fuzz(func(t *testing.T, token string) {
		p, err := v.Verify(context.Background(), token)
		if err == nil {
			if p.Subject == "" || p.Tenant == "" || p.App == "" || p.ClientID == "" {
				t.Fatalf("accepted token with incomplete principal %+v", p)
			}
			return
		}
		if got := matchedSentinels(err); len(got) != 1 {
			t.Fatalf("Verify error %q matches sentinels %v, want exactly one", err, got)
		}
		if !reflect.DeepEqual(p, auth.Principal{}) {
			t.Fatalf("Principal %+v returned with error %v", p, err)
		}
	})
}
