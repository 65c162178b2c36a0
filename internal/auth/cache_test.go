package auth_test

import (
	"errors"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/jetway-gateway/jetway/internal/auth"
	"github.com/jetway-gateway/jetway/internal/auth/authtest"
)

// lookups counts the verifier's cache hits and misses.
type lookups struct{ hits, misses atomic.Int64 }

func (l *lookups) observe(hit bool) {
	if hit {
		l.hits.Add(1)
	} else {
		l.misses.Add(1)
	}
}

func (l *lookups) want(t *testing.T, hits, misses int64) {
	t.Helper()
	if h, m := l.hits.Load(), l.misses.Load(); h != hits || m != misses {
		t.Fatalf("cache hits %d, misses %d; want %d, %d", h, m, hits, misses)
	}
}

// A verified token is answered from the cache with the same principal; a
// different token, even one differing from it by a byte of signature,
// never is.
func TestVerifiedTokenIsCached(t *testing.T) {
	iss := authtest.NewIssuer(t)
	var l lookups
	v := newVerifier(t, iss, func(c *auth.Config) { c.CacheLookup = l.observe })
	tok := iss.Token(t, authtest.Claims{Subject: "u-1", Tenant: "contoso"})
	first, err := v.Verify(t.Context(), tok)
	if err != nil {
		t.Fatal(err)
	}
	again, err := v.Verify(t.Context(), tok)
	if err != nil || !reflect.DeepEqual(again, first) {
		t.Fatalf("cached %+v, %v; want %+v", again, err, first)
	}
	l.want(t, 1, 1)

	other := iss.Token(t, authtest.Claims{Subject: "u-2", Tenant: "contoso"})
	if p, err := v.Verify(t.Context(), other); err != nil || p.Subject != "u-2" {
		t.Fatalf("other token: %+v, %v", p, err)
	}
	l.want(t, 1, 2)
	i, c := len(tok)-10, byte('A') // a byte inside the signature
	if tok[i] == c {
		c = 'B'
	}
	forged := tok[:i] + string(c) + tok[i+1:]
	if _, err := v.Verify(t.Context(), forged); !errors.Is(err, auth.ErrBadSignature) {
		t.Fatalf("forged token: %v, want a bad signature", err)
	}
	l.want(t, 1, 3)
}

// A cached token is refused once its exp (with the leeway) passes, as a
// token verified afresh would be.
func TestCachedTokenRefusedAtExp(t *testing.T) {
	iss := authtest.NewIssuer(t)
	clock := newFakeClock()
	var l lookups
	v := newVerifier(t, iss, func(c *auth.Config) { c.Now = clock.Now; c.CacheLookup = l.observe }) // leeway 5s
	// exp is in whole seconds.
	exp := clock.Now().Add(10 * time.Minute).Truncate(time.Second)
	tok := iss.Token(t, authtest.Claims{Tenant: "contoso", IssuedAt: clock.Now(), ExpiresAt: exp})
	if _, err := v.Verify(t.Context(), tok); err != nil {
		t.Fatal(err)
	}
	clock.Advance(exp.Add(auth.DefaultLeeway - time.Millisecond).Sub(clock.Now()))
	if _, err := v.Verify(t.Context(), tok); err != nil {
		t.Fatalf("just before exp + leeway: %v", err)
	}
	l.want(t, 1, 1)
	clock.Advance(time.Millisecond)
	for range 2 {
		if _, err := v.Verify(t.Context(), tok); !errors.Is(err, auth.ErrExpired) {
			t.Fatalf("at exp + leeway: %v, want ErrExpired", err)
		}
	}
	l.want(t, 1, 3)
}

// Refusals are not cached: a token refused for a reason that passes (nbf
// ahead) is accepted once it has, and a bad token costs a full check
// every time.
func TestRefusalsAreNotCached(t *testing.T) {
	iss := authtest.NewIssuer(t)
	clock := newFakeClock()
	var l lookups
	v := newVerifier(t, iss, func(c *auth.Config) { c.Now = clock.Now; c.CacheLookup = l.observe })
	early := iss.Token(t, authtest.Claims{Tenant: "contoso", IssuedAt: clock.Now(), NotBefore: clock.Now().Add(time.Minute)})
	if _, err := v.Verify(t.Context(), early); !errors.Is(err, auth.ErrNotYetValid) {
		t.Fatalf("nbf ahead: %v", err)
	}
	clock.Advance(time.Minute)
	if _, err := v.Verify(t.Context(), early); err != nil {
		t.Fatalf("nbf passed: %v", err)
	}
	stranger := iss.Token(t, authtest.Claims{Tenant: "fabrikam"}) // tenant mismatch
	for range 2 {
		if _, err := v.Verify(t.Context(), stranger); !errors.Is(err, auth.ErrTenantMismatch) {
			t.Fatalf("stranger: %v", err)
		}
	}
	l.want(t, 0, 4)
}

// A key that leaves the JWKS ends its cached tokens when the key set is
// loaded again.
func TestCachedTokenEndsWithItsKey(t *testing.T) {
	iss := authtest.NewIssuer(t)
	var l lookups
	v := newVerifier(t, iss, func(c *auth.Config) { c.CacheLookup = l.observe })
	oldKid := iss.KeyID()
	old := iss.Token(t, authtest.Claims{Tenant: "contoso"})
	for range 2 {
		if _, err := v.Verify(t.Context(), old); err != nil {
			t.Fatal(err)
		}
	}
	l.want(t, 1, 1)
	iss.Rotate()
	iss.Retire(oldKid)
	// A token of the new key makes the verifier load the key set again.
	if _, err := v.Verify(t.Context(), iss.Token(t, authtest.Claims{Tenant: "contoso"})); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(t.Context(), old); !errors.Is(err, auth.ErrUnknownKey) {
		t.Fatalf("token of a retired key: %v, want ErrUnknownKey", err)
	}
	l.want(t, 1, 3)
}

// The cache holds CacheEntries tokens, the least recently used leaving
// first; a negative size turns it off.
func TestTokenCacheBound(t *testing.T) {
	iss := authtest.NewIssuer(t)
	var l lookups
	v := newVerifier(t, iss, func(c *auth.Config) { c.CacheEntries = 2; c.CacheLookup = l.observe })
	toks := []string{iss.Token(t, authtest.Claims{Subject: "a", Tenant: "contoso"}),
		iss.Token(t, authtest.Claims{Subject: "b", Tenant: "contoso"}),
		iss.Token(t, authtest.Claims{Subject: "c", Tenant: "contoso"})}
	for _, tok := range append(toks, toks[0]) { // a, b, c, then a: evicted by c
		if _, err := v.Verify(t.Context(), tok); err != nil {
			t.Fatal(err)
		}
	}
	l.want(t, 0, 4)

	var off lookups
	none := newVerifier(t, iss, func(c *auth.Config) { c.CacheEntries = -1; c.CacheLookup = off.observe })
	for range 2 {
		if _, err := none.Verify(t.Context(), toks[0]); err != nil {
			t.Fatal(err)
		}
	}
	off.want(t, 0, 0)
}

// BenchmarkVerify is one verification of a Cognito-shaped access token:
// the full check (the cache off), and a token the cache holds.
func BenchmarkVerify(b *testing.B) {
	iss := authtest.NewIssuer(b)
	tok := iss.Token(b, authtest.Claims{Tenant: "contoso"})
	for _, c := range []struct {
		name    string
		entries int
	}{{"uncached", -1}, {"cached", 0}} {
		b.Run(c.name, func(b *testing.B) {
			cfg := iss.Config()
			cfg.CacheEntries = c.entries
			v, err := auth.NewVerifier(b.Context(), cfg, testDir, zap.NewNop())
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := v.Verify(b.Context(), tok); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// Cached answers only a token Verify has verified, as Verify would (a
// hit), and never one past its expiry.
func TestCachedAnswersOnlyVerifiedTokens(t *testing.T) {
	iss := authtest.NewIssuer(t)
	var l lookups
	now := time.Now()
	v := newVerifier(t, iss, func(c *auth.Config) {
		c.CacheLookup = l.observe
		c.Now = func() time.Time { return now }
	})
	tok := iss.Token(t, authtest.Claims{Subject: "u-1", Tenant: "contoso"})
	if p, ok := v.Cached(tok); ok {
		t.Fatalf("an unverified token is cached: %+v", p)
	}
	l.want(t, 0, 0)
	first, err := v.Verify(t.Context(), tok)
	if err != nil {
		t.Fatal(err)
	}
	p, ok := v.Cached(tok)
	if !ok || !reflect.DeepEqual(p, first) {
		t.Fatalf("Cached %+v, %v; want %+v", p, ok, first)
	}
	l.want(t, 1, 1)
	if _, ok := v.Cached(tok[:len(tok)-1]); ok {
		t.Fatal("another token is cached")
	}
	now = first.ExpiresAt.Add(time.Hour)
	if _, ok := v.Cached(tok); ok {
		t.Fatal("an expired token is cached")
	}
}
