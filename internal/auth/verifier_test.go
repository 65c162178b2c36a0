package auth_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"

	"github.com/jetway-gateway/jetway/internal/auth"
	"github.com/jetway-gateway/jetway/internal/auth/authtest"
)

// directory is a fixed client -> (tenant, app) table.
type directory map[string][2]string

func (d directory) AppForClient(client string) (string, string, bool) {
	v, ok := d[client]
	return v[0], v[1], ok
}

const fabrikamClient = "fabrikam-client"

var testDir = directory{
	authtest.DefaultClientID: {"contoso", "support-assistant"},
	fabrikamClient:           {"fabrikam", "research"},
}

// sentinels are every error Verify may wrap, in declaration order.
var sentinels = []error{
	auth.ErrMissingToken, auth.ErrMalformed, auth.ErrBadSignature, auth.ErrUnknownKey,
	auth.ErrExpired, auth.ErrNotYetValid, auth.ErrWrongIssuer, auth.ErrWrongTokenUse,
	auth.ErrUnknownClient, auth.ErrNoTenant, auth.ErrTenantMismatch,
}

// matchedSentinels returns the sentinels err wraps.
func matchedSentinels(err error) []error {
	var out []error
	for _, s := range sentinels {
		if errors.Is(err, s) {
			out = append(out, s)
		}
	}
	return out
}

// fakeClock is a settable clock for Config.Now.
type fakeClock struct{ ns atomic.Int64 }

func newFakeClock() *fakeClock {
	c := &fakeClock{}
	c.ns.Store(time.Now().UnixNano())
	return c
}
func (c *fakeClock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

func newVerifier(t *testing.T, iss *authtest.Issuer, edit func(*auth.Config)) *auth.Verifier {
	t.Helper()
	cfg := iss.Config()
	if edit != nil {
		edit(&cfg)
	}
	v, err := auth.NewVerifier(t.Context(), cfg, testDir, zaptest.NewLogger(t))
	if err != nil {
		t.Fatalf("NewVerifier: %v", err)
	}
	return v
}

func TestVerifyAcceptsAccessToken(t *testing.T) {
	iss := authtest.NewIssuer(t)
	v := newVerifier(t, iss, nil)
	exp := time.Now().Add(30 * time.Minute).Truncate(time.Second)
	tok := iss.Token(t, authtest.Claims{Subject: "u-42", Username: "alice", Tenant: "contoso", ExpiresAt: exp})

	p, err := v.Verify(t.Context(), tok)
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	want := auth.Principal{
		Subject: "u-42", Username: "alice", Tenant: "contoso", App: "support-assistant",
		ClientID: authtest.DefaultClientID, TokenUse: "access", ExpiresAt: exp,
	}
	if !p.ExpiresAt.Equal(want.ExpiresAt) {
		t.Errorf("ExpiresAt = %v, want %v", p.ExpiresAt, want.ExpiresAt)
	}
	p.ExpiresAt = want.ExpiresAt
	want.Groups = p.Groups
	if !reflect.DeepEqual(p, want) {
		t.Errorf("Principal = %+v, want %+v", p, want)
	}
}

func TestVerifyAcceptsIDToken(t *testing.T) {
	iss := authtest.NewIssuer(t)
	v := newVerifier(t, iss, nil)
	tok := iss.Token(t, authtest.Claims{
		Subject: "u-7", Username: "bob", TokenUse: "id", ClientID: fabrikamClient, Tenant: "fabrikam",
	})
	p, err := v.Verify(t.Context(), tok)
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if p.Subject != "u-7" || p.Username != "bob" || p.TokenUse != "id" || p.ClientID != fabrikamClient ||
		p.Tenant != "fabrikam" || p.App != "research" {
		t.Errorf("Principal = %+v", p)
	}
}

func TestTenantFromClaimOrGroups(t *testing.T) {
	iss := authtest.NewIssuer(t)
	v := newVerifier(t, iss, nil)
	custom := newVerifier(t, iss, func(c *auth.Config) {
		c.TenantClaim = "custom:org"
		c.TenantGroupPrefix = "org:"
	})
	tests := []struct {
		name    string
		v       *auth.Verifier
		claims  authtest.Claims
		wantErr error
	}{
		{"access token, tenant group", v, authtest.Claims{Tenant: "contoso"}, nil},
		{"access token, tenant claim", v, authtest.Claims{Tenant: "contoso", TenantVia: authtest.ViaClaim}, nil},
		{"id token, tenant claim", v, authtest.Claims{TokenUse: "id", Tenant: "contoso"}, nil},
		{"id token, tenant group", v, authtest.Claims{TokenUse: "id", Tenant: "contoso", TenantVia: authtest.ViaGroup}, nil},
		{"app tenant among several tenant groups", v,
			authtest.Claims{Groups: []string{"admins", "tenant:fabrikam", "tenant:contoso"}}, nil},
		{"claim wins over groups", v, authtest.Claims{
			Groups: []string{"tenant:contoso"}, Extra: map[string]any{"custom:tenant": "fabrikam"},
		}, auth.ErrTenantMismatch},
		{"empty claim falls back to groups", v, authtest.Claims{
			Groups: []string{"tenant:contoso"}, Extra: map[string]any{"custom:tenant": ""},
		}, nil},
		{"groups without a tenant group", v, authtest.Claims{Groups: []string{"admins", "tenant:"}}, auth.ErrNoTenant},
		{"other tenant's group", v, authtest.Claims{Tenant: "fabrikam"}, auth.ErrTenantMismatch},
		{"configured claim", custom, authtest.Claims{Extra: map[string]any{"custom:org": "contoso"}}, nil},
		{"configured prefix", custom, authtest.Claims{Groups: []string{"org:contoso"}}, nil},
		{"default prefix not used when configured", custom, authtest.Claims{Tenant: "contoso"}, auth.ErrNoTenant},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := tc.v.Verify(t.Context(), iss.Token(t, tc.claims))
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("Verify: %v", err)
				}
				if p.Tenant != "contoso" || p.App != "support-assistant" {
					t.Errorf("Principal = %+v", p)
				}
				return
			}
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Verify error = %v, want %v", err, tc.wantErr)
			}
			if !auth.IsForbidden(err) {
				t.Errorf("IsForbidden(%v) = false", err)
			}
		})
	}
}

func TestVerifyRejects(t *testing.T) {
	iss := authtest.NewIssuer(t)
	v := newVerifier(t, iss, nil)
	now := time.Now()
	good := iss.Token(t, authtest.Claims{Tenant: "contoso"})
	parts := strings.Split(good, ".")
	other := strings.Split(iss.Token(t, authtest.Claims{Subject: "someone-else", Tenant: "contoso"}), ".")
	none := strings.Split(iss.Token(t, authtest.Claims{Tenant: "contoso", Alg: "none"}), ".")

	tests := []struct {
		name  string
		token string
		want  error
	}{
		{"empty", "", auth.ErrMissingToken},
		{"not a JWT", "not-a-jwt", auth.ErrMalformed},
		{"three junk parts", "a.b.c", auth.ErrMalformed},
		{"JWE-shaped", "a.b.c.d.e", auth.ErrMalformed},
		{"JSON serialization", `{"payload":"e30","signatures":[{"protected":"eyJhbGciOiJSUzI1NiJ9","signature":"AA"}]}`, auth.ErrMalformed},
		{"too big", parts[0] + "." + strings.Repeat("A", auth.MaxTokenBytes) + "." + parts[2], auth.ErrMalformed},
		{"alg none", iss.Token(t, authtest.Claims{Tenant: "contoso", Alg: "none"}), auth.ErrBadSignature},
		{"alg none, good signature attached", none[0] + "." + parts[1] + "." + parts[2], auth.ErrBadSignature},
		{"HS256 keyed with the public key", iss.Token(t, authtest.Claims{Tenant: "contoso", Alg: "HS256"}), auth.ErrBadSignature},
		{"RS512", iss.Token(t, authtest.Claims{Tenant: "contoso", Alg: "RS512"}), auth.ErrBadSignature},
		{"PS256", iss.Token(t, authtest.Claims{Tenant: "contoso", Alg: "PS256"}), auth.ErrBadSignature},
		{"payload swapped", parts[0] + "." + other[1] + "." + parts[2], auth.ErrBadSignature},
		{"signature truncated", parts[0] + "." + parts[1] + "." + parts[2][:20], auth.ErrBadSignature},
		{"signed by a stranger under a known kid", iss.Token(t, authtest.Claims{Tenant: "contoso", UnknownKey: true, KeyID: iss.KeyID()}), auth.ErrBadSignature},
		{"unknown kid", iss.Token(t, authtest.Claims{Tenant: "contoso", UnknownKey: true}), auth.ErrUnknownKey},
		{"no kid", iss.Token(t, authtest.Claims{Tenant: "contoso", KeyID: "-"}), auth.ErrMalformed},
		{"wrong issuer", iss.Token(t, authtest.Claims{Tenant: "contoso", Issuer: "https://cognito-idp.us-east-1.amazonaws.com/us-east-1_other"}), auth.ErrWrongIssuer},
		{"issuer with trailing slash", iss.Token(t, authtest.Claims{Tenant: "contoso", Issuer: iss.URL + "/"}), auth.ErrWrongIssuer},
		{"expired", iss.Token(t, authtest.Claims{Tenant: "contoso", IssuedAt: now.Add(-2 * time.Hour), ExpiresAt: now.Add(-time.Minute)}), auth.ErrExpired},
		{"exp zero", iss.Token(t, authtest.Claims{Tenant: "contoso", Extra: map[string]any{"exp": 0}}), auth.ErrExpired},
		{"no exp", iss.Token(t, authtest.Claims{Tenant: "contoso", Extra: map[string]any{"exp": nil}}), auth.ErrMalformed},
		{"exp not a number", iss.Token(t, authtest.Claims{Tenant: "contoso", Extra: map[string]any{"exp": "tomorrow"}}), auth.ErrMalformed},
		{"nbf in the future", iss.Token(t, authtest.Claims{Tenant: "contoso", NotBefore: now.Add(time.Minute)}), auth.ErrNotYetValid},
		{"iat in the future", iss.Token(t, authtest.Claims{Tenant: "contoso", IssuedAt: now.Add(time.Minute)}), auth.ErrNotYetValid},
		{"refresh token_use", iss.Token(t, authtest.Claims{Tenant: "contoso", TokenUse: "refresh"}), auth.ErrWrongTokenUse},
		{"no token_use", iss.Token(t, authtest.Claims{Tenant: "contoso", Extra: map[string]any{"token_use": nil}}), auth.ErrWrongTokenUse},
		{"token_use not a string", iss.Token(t, authtest.Claims{Tenant: "contoso", Extra: map[string]any{"token_use": 1}}), auth.ErrMalformed},
		{"access token without client_id", iss.Token(t, authtest.Claims{Tenant: "contoso", Extra: map[string]any{"client_id": nil}}), auth.ErrMalformed},
		{"id token with two audiences", iss.Token(t, authtest.Claims{Tenant: "contoso", TokenUse: "id", Extra: map[string]any{"aud": []string{"a", "b"}}}), auth.ErrMalformed},
		{"access token's client in aud only", iss.Token(t, authtest.Claims{Tenant: "contoso", Extra: map[string]any{"client_id": nil, "aud": authtest.DefaultClientID}}), auth.ErrMalformed},
		{"unknown client", iss.Token(t, authtest.Claims{Tenant: "contoso", ClientID: "stranger-client"}), auth.ErrUnknownClient},
		{"unknown client in id token", iss.Token(t, authtest.Claims{Tenant: "contoso", TokenUse: "id", ClientID: "stranger-client"}), auth.ErrUnknownClient},
		{"no sub", iss.Token(t, authtest.Claims{Tenant: "contoso", Extra: map[string]any{"sub": nil}}), auth.ErrMalformed},
		{"no tenant", iss.Token(t, authtest.Claims{}), auth.ErrNoTenant},
		{"no tenant in id token", iss.Token(t, authtest.Claims{TokenUse: "id"}), auth.ErrNoTenant},
		{"tenant mismatch", iss.Token(t, authtest.Claims{Tenant: "fabrikam"}), auth.ErrTenantMismatch},
		{"groups not a list", iss.Token(t, authtest.Claims{Extra: map[string]any{"cognito:groups": "tenant:contoso"}}), auth.ErrMalformed},
		{"tenant claim not a string", iss.Token(t, authtest.Claims{Extra: map[string]any{"custom:tenant": []string{"contoso"}}}), auth.ErrMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := v.Verify(t.Context(), tc.token)
			if err == nil {
				t.Fatalf("Verify accepted the token: %+v", p)
			}
			if got := matchedSentinels(err); len(got) != 1 || got[0] != tc.want {
				t.Fatalf("Verify error %q matches %v, want exactly [%v]", err, got, tc.want)
			}
			if !strings.HasPrefix(err.Error(), "verify: ") {
				t.Errorf("error %q lacks the verify: context", err)
			}
			forbidden := tc.want == auth.ErrNoTenant || tc.want == auth.ErrTenantMismatch
			if auth.IsForbidden(err) != forbidden {
				t.Errorf("IsForbidden(%v) = %v, want %v", err, !forbidden, forbidden)
			}
			if !reflect.DeepEqual(p, auth.Principal{}) {
				t.Errorf("Principal = %+v on error", p)
			}
		})
	}
}

func TestLeeway(t *testing.T) {
	iss := authtest.NewIssuer(t)
	clock := newFakeClock()
	v := newVerifier(t, iss, func(c *auth.Config) { c.Now = clock.Now }) // default leeway 5s
	strict := newVerifier(t, iss, func(c *auth.Config) { c.Now = clock.Now; c.Leeway = -1 })
	now := clock.Now()
	tests := []struct {
		name   string
		claims authtest.Claims
		want   error // from v; strict always rejects
	}{
		{"expired 2s ago", authtest.Claims{IssuedAt: now.Add(-time.Hour), ExpiresAt: now.Add(-2 * time.Second)}, nil},
		{"expired 10s ago", authtest.Claims{IssuedAt: now.Add(-time.Hour), ExpiresAt: now.Add(-10 * time.Second)}, auth.ErrExpired},
		{"issued 2s ahead", authtest.Claims{IssuedAt: now.Add(2 * time.Second)}, nil},
		{"issued 10s ahead", authtest.Claims{IssuedAt: now.Add(10 * time.Second)}, auth.ErrNotYetValid},
		{"nbf 2s ahead", authtest.Claims{IssuedAt: now.Add(-time.Second), NotBefore: now.Add(2 * time.Second)}, nil},
		{"nbf 10s ahead", authtest.Claims{IssuedAt: now.Add(-time.Second), NotBefore: now.Add(10 * time.Second)}, auth.ErrNotYetValid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.claims.Tenant = "contoso"
			tok := iss.Token(t, tc.claims)
			if _, err := v.Verify(t.Context(), tok); !errors.Is(err, tc.want) {
				t.Errorf("Verify error = %v, want %v", err, tc.want)
			}
			if _, err := strict.Verify(t.Context(), tok); err == nil {
				t.Errorf("Verify without leeway accepted the token")
			}
		})
	}
}

func TestRotationPickedUpByUnknownKidRefresh(t *testing.T) {
	iss := authtest.NewIssuer(t)
	v := newVerifier(t, iss, nil)
	old := iss.Token(t, authtest.Claims{Tenant: "contoso"})
	if got := iss.Fetches(); got != 1 {
		t.Fatalf("fetches after start = %d, want 1", got)
	}

	iss.Rotate()
	rotated := iss.Token(t, authtest.Claims{Tenant: "contoso"})
	if _, err := v.Verify(t.Context(), rotated); err != nil {
		t.Fatalf("Verify token signed with the rotated key: %v", err)
	}
	if got := iss.Fetches(); got != 2 {
		t.Errorf("fetches = %d, want 2 (one refresh for the new kid)", got)
	}
	// Both keys are known now: no more fetches.
	for _, tok := range []string{old, rotated} {
		if _, err := v.Verify(t.Context(), tok); err != nil {
			t.Errorf("Verify: %v", err)
		}
	}
	if got := iss.Fetches(); got != 2 {
		t.Errorf("fetches = %d, want still 2", got)
	}
}

func TestUnknownKidFloodIsRateLimited(t *testing.T) {
	iss := authtest.NewIssuer(t)
	clock := newFakeClock()
	v := newVerifier(t, iss, func(c *auth.Config) { c.Now = clock.Now }) // MinRefreshInterval 1m
	var n atomic.Int64
	flood := func() {
		t.Helper()
		var wg sync.WaitGroup
		errs := make(chan error, 8*20)
		for range 8 {
			wg.Go(func() {
				for range 20 {
					tok := iss.Token(t, authtest.Claims{Tenant: "contoso", KeyID: fmt.Sprintf("bogus-%d", n.Add(1))})
					if _, err := v.Verify(t.Context(), tok); !errors.Is(err, auth.ErrUnknownKey) {
						errs <- err
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("Verify error = %v, want ErrUnknownKey", err)
		}
	}

	flood()
	if got := iss.Fetches(); got != 2 {
		t.Fatalf("fetches after 160 unknown kids = %d, want 2 (start + one refresh)", got)
	}
	clock.Advance(59 * time.Second)
	flood()
	if got := iss.Fetches(); got != 2 {
		t.Fatalf("fetches 59s later = %d, want still 2", got)
	}
	clock.Advance(2 * time.Second)
	flood()
	if got := iss.Fetches(); got != 3 {
		t.Fatalf("fetches 61s later = %d, want 3", got)
	}
}

func TestFailedKidRefreshCountsAndKeepsKeys(t *testing.T) {
	iss := authtest.NewIssuer(t)
	clock := newFakeClock()
	v := newVerifier(t, iss, func(c *auth.Config) { c.Now = clock.Now })
	good := iss.Token(t, authtest.Claims{Tenant: "contoso"})
	bogus := iss.Token(t, authtest.Claims{Tenant: "contoso", UnknownKey: true})

	iss.SetFailing(true)
	for range 3 {
		_, err := v.Verify(t.Context(), bogus)
		if got := matchedSentinels(err); len(got) != 1 || got[0] != auth.ErrUnknownKey {
			t.Fatalf("Verify error = %v, want ErrUnknownKey", err)
		}
	}
	if got := iss.Fetches(); got != 2 {
		t.Errorf("fetches = %d, want 2: a failed fetch counts against the limit", got)
	}
	if _, err := v.Verify(t.Context(), good); err != nil {
		t.Errorf("Verify with a known key while the issuer is down: %v", err)
	}
}

func TestScheduledRefreshPicksUpNewKeys(t *testing.T) {
	iss := authtest.NewIssuer(t)
	v := newVerifier(t, iss, func(c *auth.Config) {
		c.RefreshInterval = time.Second
		c.MinRefreshInterval = time.Hour
	})
	// Spend the unknown-kid refresh, so only the schedule can fetch again.
	if _, err := v.Verify(t.Context(), iss.Token(t, authtest.Claims{Tenant: "contoso", UnknownKey: true})); !errors.Is(err, auth.ErrUnknownKey) {
		t.Fatalf("Verify error = %v, want ErrUnknownKey", err)
	}
	// The first fetch and the unknown kid's; a scheduled one may have come
	// too, on a machine slow enough that a second passed since the first.
	before := iss.Fetches()
	if before < 2 {
		t.Fatalf("fetches = %d, want at least 2", before)
	}

	iss.Rotate()
	rotated := iss.Token(t, authtest.Claims{Tenant: "contoso"})
	deadline := time.Now().Add(15 * time.Second)
	for {
		_, err := v.Verify(t.Context(), rotated)
		if err == nil {
			break
		}
		if !errors.Is(err, auth.ErrUnknownKey) {
			t.Fatalf("Verify error = %v, want ErrUnknownKey until the refresh", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("rotated key not picked up by the scheduled refresh (fetches %d)", iss.Fetches())
		}
		time.Sleep(20 * time.Millisecond) // polling interval, not a wait for an event
	}
	if got := iss.Fetches(); got <= before {
		t.Errorf("fetches = %d, want more than the %d before the rotation", got, before)
	}
}

func TestNewVerifierFirstFetchFails(t *testing.T) {
	iss := authtest.NewIssuer(t)
	iss.SetFailing(true)
	_, err := auth.NewVerifier(t.Context(), iss.Config(), testDir, zaptest.NewLogger(t))
	if err == nil || !strings.Contains(err.Error(), iss.JWKSURL) {
		t.Fatalf("NewVerifier error = %v, want one naming %s", err, iss.JWKSURL)
	}

	cfg := iss.Config()
	cfg.JWKSURL = iss.URL + "/nowhere.json"
	_, err = auth.NewVerifier(t.Context(), cfg, testDir, zaptest.NewLogger(t))
	if err == nil || !strings.Contains(err.Error(), cfg.JWKSURL) {
		t.Fatalf("NewVerifier error = %v, want one naming %s", err, cfg.JWKSURL)
	}
}

func TestNewVerifierConfigErrors(t *testing.T) {
	iss := authtest.NewIssuer(t)
	if _, err := auth.NewVerifier(t.Context(), auth.Config{}, testDir, nil); err == nil {
		t.Error("NewVerifier without Issuer succeeded")
	}
	if _, err := auth.NewVerifier(t.Context(), iss.Config(), nil, nil); err == nil {
		t.Error("NewVerifier without Directory succeeded")
	}
}

func TestDefaultJWKSURL(t *testing.T) {
	iss := authtest.NewIssuer(t)
	cfg := iss.Config()
	cfg.JWKSURL = ""
	v, err := auth.NewVerifier(t.Context(), cfg, testDir, zaptest.NewLogger(t))
	if err != nil {
		t.Fatalf("NewVerifier: %v", err)
	}
	if _, err := v.Verify(t.Context(), iss.Token(t, authtest.Claims{Tenant: "contoso"})); err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if got := iss.Fetches(); got != 1 {
		t.Errorf("fetches = %d, want 1 from Issuer + /.well-known/jwks.json", got)
	}
}

func TestCacheGoroutinesEndWithContext(t *testing.T) {
	iss := authtest.NewIssuer(t)
	before := goleak.IgnoreCurrent()
	ctx, cancel := context.WithCancel(t.Context())
	cfg := iss.Config()
	cfg.RefreshInterval = time.Second
	v, err := auth.NewVerifier(ctx, cfg, testDir, zaptest.NewLogger(t))
	if err != nil {
		t.Fatalf("NewVerifier: %v", err)
	}
	if _, err := v.Verify(ctx, iss.Token(t, authtest.Claims{Tenant: "contoso"})); err != nil {
		t.Fatalf("Verify: %v", err)
	}
	cancel()
	iss.Client().CloseIdleConnections()
	goleak.VerifyNone(t, before)
}

// An unsigned, client-chosen kid reaches the error (and so the log) cut to
// protocol.MaxEchoBytes.
func TestUnknownKidIsClippedInTheError(t *testing.T) {
	iss := authtest.NewIssuer(t)
	v := newVerifier(t, iss, nil)
	tok := iss.Token(t, authtest.Claims{Tenant: "contoso", KeyID: strings.Repeat("k", 8000)})
	_, err := v.Verify(t.Context(), tok)
	if !errors.Is(err, auth.ErrUnknownKey) || len(err.Error()) > 300 {
		t.Fatalf("Verify error of %d bytes: %.200v", len(err.Error()), err)
	}
}
