package auth

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/lestrrat-go/jwx/v2/jwa"
	"github.com/lestrrat-go/jwx/v2/jwk"
	"github.com/lestrrat-go/jwx/v2/jws"
	"github.com/lestrrat-go/jwx/v2/jwt"
	"go.uber.org/zap"

	"github.com/jetway-gateway/jetway/internal/protocol"
)

// Defaults for Config fields left at their zero value, and fixed bounds.
const (
	// DefaultTenantClaim is the claim that names the user's tenant.
	DefaultTenantClaim = "custom:tenant"
	// DefaultTenantGroupPrefix marks the cognito:groups entry that names the
	// user's tenant ("tenant:contoso").
	DefaultTenantGroupPrefix = "tenant:"
	// DefaultLeeway is the clock skew allowed on exp, nbf and iat.
	DefaultLeeway = 5 * time.Second
	// DefaultRefreshInterval is how often the JWKS is fetched on schedule.
	DefaultRefreshInterval = 15 * time.Minute
	// DefaultMinRefreshInterval is the least time between two JWKS fetches
	// triggered by unknown key ids.
	DefaultMinRefreshInterval = time.Minute
	// MaxTokenBytes is the largest token Verify parses; larger ones are
	// ErrMalformed without further work.
	MaxTokenBytes = 16 << 10
	// MaxJWKSBytes is the largest JWKS response body accepted.
	MaxJWKSBytes = 1 << 20
	// JWKSFetchTimeout bounds one JWKS fetch.
	JWKSFetchTimeout = 10 * time.Second
	// DefaultCacheEntries is how many verified tokens are remembered.
	DefaultCacheEntries = 10000
)

// minRefreshInterval is the floor for Config.RefreshInterval: the cache's
// scheduler works in whole seconds.
const minRefreshInterval = time.Second

// Config configures a Verifier. Zero values mean the documented defaults.
type Config struct {
	// Issuer is the user pool's issuer URL
	// (https://cognito-idp.<region>.amazonaws.com/<pool id>); required.
	// Tokens whose iss differs are ErrWrongIssuer.
	Issuer string
	// JWKSURL is where the signing keys are fetched; default
	// Issuer + "/.well-known/jwks.json".
	JWKSURL string
	// TenantClaim names the claim holding the user's tenant; default
	// DefaultTenantClaim.
	TenantClaim string
	// TenantGroupPrefix marks the cognito:groups entries naming the user's
	// tenants, used when TenantClaim is absent; default DefaultTenantGroupPrefix.
	TenantGroupPrefix string
	// Leeway is the clock skew allowed on exp, nbf and iat; default
	// DefaultLeeway, negative means none.
	Leeway time.Duration
	// RefreshInterval is the period of the scheduled JWKS refresh; default
	// DefaultRefreshInterval, at least one second.
	RefreshInterval time.Duration
	// MinRefreshInterval is the least time between two JWKS fetches triggered
	// by tokens with an unknown kid, so a flood of bad kids cannot hammer the
	// issuer; default DefaultMinRefreshInterval, negative means no limit.
	MinRefreshInterval time.Duration
	// HTTPClient fetches the JWKS; default a client with JWKSFetchTimeout.
	HTTPClient *http.Client
	// KeySet, when set, is the fixed set of verification keys (the dev
	// issuer's); nothing is fetched and JWKSURL is ignored.
	KeySet jwk.Set
	// Now is the clock; default time.Now.
	Now func() time.Time
	// CacheEntries bounds the verified-token cache (see Verify); default
	// DefaultCacheEntries, negative means no cache.
	CacheEntries int
	// CacheLookup, when set, is called by every Verify that looks in the
	// cache, with whether it found the token there (a hit/miss metric).
	CacheLookup func(hit bool)
}

func (c Config) withDefaults() Config {
	if c.JWKSURL == "" && c.Issuer != "" {
		c.JWKSURL = strings.TrimSuffix(c.Issuer, "/") + "/.well-known/jwks.json"
	}
	if c.TenantClaim == "" {
		c.TenantClaim = DefaultTenantClaim
	}
	if c.TenantGroupPrefix == "" {
		c.TenantGroupPrefix = DefaultTenantGroupPrefix
	}
	switch {
	case c.Leeway == 0:
		c.Leeway = DefaultLeeway
	case c.Leeway < 0:
		c.Leeway = 0
	}
	switch {
	case c.RefreshInterval == 0:
		c.RefreshInterval = DefaultRefreshInterval
	case c.RefreshInterval < minRefreshInterval:
		c.RefreshInterval = minRefreshInterval
	}
	if c.MinRefreshInterval == 0 {
		c.MinRefreshInterval = DefaultMinRefreshInterval
	}
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{Timeout: JWKSFetchTimeout}
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.CacheEntries == 0 {
		c.CacheEntries = DefaultCacheEntries
	}
	if c.CacheLookup == nil {
		c.CacheLookup = func(bool) {}
	}
	return c
}

// Verifier verifies Cognito tokens. It is safe for concurrent use.
type Verifier struct {
	cfg    Config
	dir    Directory
	logger *zap.Logger

	// keys is the current key set: the static one, or the latest fetched
	// by either the scheduled refresh or an unknown-kid refresh.
	keys atomic.Pointer[keyring]

	// kidRefresh serializes unknown-kid refreshes (a one-slot semaphore, so
	// waiting respects ctx) and guards lastKidFetch.
	kidRefresh   chan struct{}
	lastKidFetch time.Time

	// stopCache ends the JWKS cache's goroutines; the ctx given to
	// NewVerifier ending does too. Kept so the cancel func is not lost.
	stopCache context.CancelFunc

	// verified remembers tokens that verified, by their SHA-256 (never
	// the token itself); nil when Config.CacheEntries is negative.
	verified *lru.Cache[[sha256.Size]byte, verifiedToken]
}

// keyring is one key set as loaded: every fetch (scheduled or for an
// unknown kid) makes a new one, which ends every cached verification.
type keyring struct{ set jwk.Set }

// verifiedToken is a cached verification: the principal, valid until its
// exp (with the leeway) while ring is the current key set.
type verifiedToken struct {
	p    Principal
	ring *keyring
}

// NewVerifier returns a Verifier for cfg. Unless cfg.KeySet is set, it
// fetches the JWKS from cfg.JWKSURL before returning (an error naming the URL
// if that fails), then keeps it fresh in the background until ctx ends:
// every RefreshInterval, and when a token names an unknown kid (at most once
// per MinRefreshInterval).
func NewVerifier(ctx context.Context, cfg Config, dir Directory, logger *zap.Logger) (*Verifier, error) {
	if dir == nil {
		return nil, errors.New("auth: NewVerifier: nil Directory")
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	cfg = cfg.withDefaults()
	if cfg.Issuer == "" {
		return nil, errors.New("auth: NewVerifier: Config.Issuer is required")
	}
	v := &Verifier{
		cfg:        cfg,
		dir:        dir,
		logger:     logger,
		kidRefresh: make(chan struct{}, 1),
		stopCache:  func() {},
	}
	if cfg.CacheEntries > 0 {
		var err error
		if v.verified, err = lru.New[[sha256.Size]byte, verifiedToken](cfg.CacheEntries); err != nil {
			return nil, fmt.Errorf("auth: NewVerifier: token cache: %w", err)
		}
	}
	if cfg.KeySet != nil {
		v.keys.Store(&keyring{set: cfg.KeySet})
		return v, nil
	}

	// jwk.Cache runs the scheduled refresh. Unknown-kid refreshes bypass it
	// (see refreshForKid), because httprc v1 schedules one more perpetual
	// periodic refresh for every forced Cache.Refresh.
	cacheCtx, stop := context.WithCancel(ctx)
	v.stopCache = stop
	cache := jwk.NewCache(cacheCtx,
		jwk.WithRefreshWindow(refreshWindow(cfg.RefreshInterval)),
		jwk.WithErrSink(refreshErrSink{logger: logger}),
	)
	err := cache.Register(cfg.JWKSURL,
		jwk.WithHTTPClient(jwksGetter{ctx: cacheCtx, v: v}),
		jwk.WithRefreshInterval(cfg.RefreshInterval),
		jwk.WithPostFetcher(jwk.PostFetchFunc(func(u string, set jwk.Set) (jwk.Set, error) {
			v.keys.Store(&keyring{set: set})
			logger.Debug("JWKS refreshed", zap.String("url", u), zap.Int("keys", set.Len()))
			return set, nil
		})),
	)
	if err != nil {
		stop()
		return nil, fmt.Errorf("auth: register JWKS %s: %w", cfg.JWKSURL, err)
	}
	set, err := cache.Refresh(ctx, cfg.JWKSURL)
	if err != nil {
		stop()
		return nil, fmt.Errorf("auth: fetch JWKS %s: %w", cfg.JWKSURL, err)
	}
	v.keys.Store(&keyring{set: set}) // PostFetch did too; this makes it plain
	logger.Info("JWKS loaded", zap.String("url", cfg.JWKSURL), zap.Int("keys", set.Len()),
		zap.Duration("refresh_interval", cfg.RefreshInterval))
	return v, nil
}

// refreshWindow is how often the cache's scheduler wakes up to look for due
// refreshes: a fraction of the interval, so a refresh is at most that late.
func refreshWindow(interval time.Duration) time.Duration {
	return min(max(interval/4, time.Second), time.Minute)
}

type refreshErrSink struct{ logger *zap.Logger }

func (s refreshErrSink) Error(err error) {
	s.logger.Warn("JWKS refresh failed; keeping the previous keys", zap.Error(err))
}

// Verify checks token by Cognito's rules and returns its Principal. Errors
// wrap exactly one sentinel (ErrMissingToken ... ErrTenantMismatch); an
// unknown kid may block on one JWKS fetch, bounded by ctx and JWKSFetchTimeout.
//
// A token that verified is remembered (an LRU of Config.CacheEntries,
// keyed by the token's SHA-256) and answered from memory, without the
// signature check, until its exp (with the leeway, as verification
// counts it) or until the key set is loaded again, whichever comes first:
// a key removed from the JWKS ends its tokens at the next refresh. Only
// successes are kept: a refusal may not last (an unknown kid before the
// refresh, nbf in the future), and tokens that verify cannot be made up,
// so no stream of junk can evict the good ones.
func (v *Verifier) Verify(ctx context.Context, token string) (Principal, error) {
	if token == "" {
		return Principal{}, fmt.Errorf("verify: %w", ErrMissingToken)
	}
	if len(token) > MaxTokenBytes {
		return Principal{}, fmt.Errorf("verify: %w: %d bytes, over the %d-byte limit", ErrMalformed, len(token), MaxTokenBytes)
	}
	if v.verified == nil {
		return v.verify(ctx, token)
	}
	key := sha256.Sum256([]byte(token))
	ring := v.keys.Load() // before verifying: a refresh meanwhile ends the entry
	if p, ok := v.cached(key, ring); ok {
		return p, nil
	}
	v.cfg.CacheLookup(false)
	p, err := v.verify(ctx, token)
	if err == nil {
		v.verified.Add(key, verifiedToken{p: p, ring: ring})
	}
	return p, err
}

// Cached is Verify for a token whose verification is cached (and still
// good): ok is false for any other, which Verify must check. It does no
// I/O, so it needs no context: a door tries it before it sets the
// verification's timeout.
func (v *Verifier) Cached(token string) (p Principal, ok bool) {
	if v.verified == nil || token == "" || len(token) > MaxTokenBytes {
		return Principal{}, false
	}
	return v.cached(sha256.Sum256([]byte(token)), v.keys.Load())
}

// cached is the cache's entry for key under ring, counted as a hit, or
// ok false (an entry of another ring or past its expiry is removed).
func (v *Verifier) cached(key [sha256.Size]byte, ring *keyring) (Principal, bool) {
	t, ok := v.verified.Get(key)
	if !ok {
		return Principal{}, false
	}
	if t.ring == ring && v.cfg.Now().Before(t.p.ExpiresAt.Add(v.cfg.Leeway)) {
		v.cfg.CacheLookup(true)
		return t.p, true
	}
	v.verified.Remove(key)
	return Principal{}, false
}

// VerifyAdmin checks token as Verify does, except that it needs no app:
// an admin token may come from any app client of the issuer (ADMIN-API.md,
// "Where and who"). The Principal has no Tenant or App; its Groups are
// the token's cognito:groups, from which the admin API reads roles.
func (v *Verifier) VerifyAdmin(ctx context.Context, token string) (Principal, error) {
	if token == "" {
		return Principal{}, fmt.Errorf("verify: %w", ErrMissingToken)
	}
	if len(token) > MaxTokenBytes {
		return Principal{}, fmt.Errorf("verify: %w: %d bytes, over the %d-byte limit", ErrMalformed, len(token), MaxTokenBytes)
	}
	return v.verifyAs(ctx, token, false)
}

// verify is Verify without the cache.
func (v *Verifier) verify(ctx context.Context, token string) (Principal, error) {
	return v.verifyAs(ctx, token, true)
}

// verifyAs verifies token; withApp maps its app client to an app and
// its user to that app's tenant.
func (v *Verifier) verifyAs(ctx context.Context, token string, withApp bool) (Principal, error) {
	msg, err := jws.Parse([]byte(token), jws.WithCompact())
	if err != nil {
		return Principal{}, fmt.Errorf("verify: %w: %v", ErrMalformed, err)
	}
	sigs := msg.Signatures()
	if len(sigs) != 1 {
		return Principal{}, fmt.Errorf("verify: %w: %d signatures", ErrMalformed, len(sigs))
	}
	hdr := sigs[0].ProtectedHeaders()
	if alg := hdr.Algorithm(); alg != jwa.RS256 {
		return Principal{}, fmt.Errorf("verify: %w: algorithm %q not accepted", ErrBadSignature, protocol.Clip(alg.String()))
	}
	kid := hdr.KeyID()
	if kid == "" {
		return Principal{}, fmt.Errorf("verify: %w: no kid in header", ErrMalformed)
	}
	key, err := v.key(ctx, kid)
	if err != nil {
		return Principal{}, err
	}
	payload, err := jws.Verify([]byte(token), jws.WithKey(jwa.RS256, key), jws.WithCompact())
	if err != nil {
		return Principal{}, fmt.Errorf("verify: %w: %v", ErrBadSignature, err)
	}
	// Decode the signed payload directly: jwt.Parse would guess its format
	// and could unwrap a nested JWS.
	tok := jwt.New()
	if err := json.Unmarshal(payload, tok); err != nil {
		return Principal{}, fmt.Errorf("verify: %w: claims: %v", ErrMalformed, err)
	}
	return v.principal(tok, withApp)
}

// key returns the RS256 verification key named kid, refreshing the key set
// once if kid is unknown and a refresh is permitted.
func (v *Verifier) key(ctx context.Context, kid string) (jwk.Key, error) {
	k, ok := v.keys.Load().set.LookupKeyID(kid)
	if !ok && v.cfg.KeySet == nil {
		if err := v.refreshForKid(ctx, kid); err != nil {
			return nil, fmt.Errorf("verify: %w: kid %q: refresh: %w", ErrUnknownKey, protocol.Clip(kid), err)
		}
		k, ok = v.keys.Load().set.LookupKeyID(kid)
	}
	if !ok {
		return nil, fmt.Errorf("verify: %w: kid %q", ErrUnknownKey, protocol.Clip(kid)) // unsigned: the client's
	}
	if k.KeyType() != jwa.RSA {
		return nil, fmt.Errorf("verify: %w: kid %q is a %s key, not RSA", ErrUnknownKey, kid, k.KeyType())
	}
	if use := k.KeyUsage(); use != "" && use != jwk.ForSignature.String() {
		return nil, fmt.Errorf("verify: %w: kid %q has use %q", ErrUnknownKey, kid, use)
	}
	if alg := k.Algorithm().String(); alg != "" && alg != jwa.RS256.String() {
		return nil, fmt.Errorf("verify: %w: kid %q is for %s", ErrUnknownKey, kid, alg)
	}
	return k, nil
}

// refreshForKid fetches the JWKS because kid is unknown, unless another
// caller just did (and found kid) or the last unknown-kid fetch was less than
// MinRefreshInterval ago. Concurrent callers share one fetch.
func (v *Verifier) refreshForKid(ctx context.Context, kid string) error {
	select {
	case v.kidRefresh <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-v.kidRefresh }()

	if _, ok := v.keys.Load().set.LookupKeyID(kid); ok {
		return nil
	}
	now := v.cfg.Now()
	if !v.lastKidFetch.IsZero() && now.Sub(v.lastKidFetch) < v.cfg.MinRefreshInterval {
		return nil
	}
	// Failed fetches count too: a down issuer is not hammered either.
	v.lastKidFetch = now
	set, err := v.fetchSet(ctx)
	if err != nil {
		v.logger.Warn("JWKS refresh for unknown kid failed", zap.String("kid", kid), zap.Error(err))
		return err
	}
	v.keys.Store(&keyring{set: set})
	_, found := set.LookupKeyID(kid)
	v.logger.Info("JWKS refreshed for unknown kid", zap.String("kid", kid), zap.Bool("found", found),
		zap.Int("keys", set.Len()))
	return nil
}

// principal applies Cognito's claim rules to a token whose signature is good.
func (v *Verifier) principal(tok jwt.Token, withApp bool) (Principal, error) {
	if err := v.checkTimes(tok); err != nil {
		return Principal{}, err
	}
	if iss := tok.Issuer(); iss != v.cfg.Issuer {
		return Principal{}, fmt.Errorf("verify: %w: %q", ErrWrongIssuer, iss)
	}
	use, err := stringClaim(tok, "token_use")
	if err != nil {
		return Principal{}, err
	}
	var client string
	switch use {
	case "access":
		if client, err = stringClaim(tok, "client_id"); err != nil {
			return Principal{}, err
		}
		if client == "" {
			return Principal{}, fmt.Errorf("verify: %w: access token without client_id", ErrMalformed)
		}
	case "id":
		aud := tok.Audience()
		if len(aud) != 1 || aud[0] == "" {
			return Principal{}, fmt.Errorf("verify: %w: id token needs exactly one aud, has %d", ErrMalformed, len(aud))
		}
		client = aud[0]
	default:
		return Principal{}, fmt.Errorf("verify: %w: %q", ErrWrongTokenUse, use)
	}
	sub := tok.Subject()
	if sub == "" {
		return Principal{}, fmt.Errorf("verify: %w: no sub", ErrMalformed)
	}
	groups, err := stringsClaim(tok, "cognito:groups")
	if err != nil {
		return Principal{}, err
	}
	if !withApp {
		username, _ := stringClaim(tok, "username")
		return Principal{Subject: sub, Username: username, ClientID: client, TokenUse: use,
			ExpiresAt: tok.Expiration(), Groups: groups}, nil
	}
	appTenant, app, ok := v.dir.AppForClient(client)
	if !ok {
		return Principal{}, fmt.Errorf("verify: %w: %q", ErrUnknownClient, client)
	}
	tenants, err := v.userTenants(tok)
	if err != nil {
		return Principal{}, err
	}
	if len(tenants) == 0 {
		return Principal{}, fmt.Errorf("verify: %w: user %q", ErrNoTenant, sub)
	}
	if !slices.Contains(tenants, appTenant) {
		return Principal{}, fmt.Errorf("verify: %w: user %q of tenant %q, app %q of tenant %q",
			ErrTenantMismatch, sub, strings.Join(tenants, ","), app, appTenant)
	}
	username, err := stringClaim(tok, "username")
	if err != nil {
		return Principal{}, err
	}
	if username == "" {
		if username, err = stringClaim(tok, "cognito:username"); err != nil {
			return Principal{}, err
		}
	}
	return Principal{
		Subject:   sub,
		Username:  username,
		Tenant:    appTenant,
		App:       app,
		ClientID:  client,
		TokenUse:  use,
		ExpiresAt: tok.Expiration(),
		Groups:    groups,
	}, nil
}

// checkTimes checks exp (required), nbf and iat with the leeway. It does not
// use jwt.Validate, which treats exp=0 as "no expiry".
func (v *Verifier) checkTimes(tok jwt.Token) error {
	now := v.cfg.Now()
	leeway := v.cfg.Leeway
	exp := tok.Expiration()
	if exp.IsZero() {
		return fmt.Errorf("verify: %w: no exp", ErrMalformed)
	}
	if !now.Before(exp.Add(leeway)) {
		return fmt.Errorf("verify: %w: at %s", ErrExpired, exp.UTC().Format(time.RFC3339))
	}
	if nbf := tok.NotBefore(); !nbf.IsZero() && now.Add(leeway).Before(nbf) {
		return fmt.Errorf("verify: %w: nbf %s", ErrNotYetValid, nbf.UTC().Format(time.RFC3339))
	}
	if iat := tok.IssuedAt(); !iat.IsZero() && now.Add(leeway).Before(iat) {
		return fmt.Errorf("verify: %w: issued in the future (%s)", ErrNotYetValid, iat.UTC().Format(time.RFC3339))
	}
	return nil
}

// userTenants returns the tenant from TenantClaim or, when that claim is
// absent or empty, every tenant named by a cognito:groups entry.
// stringsClaim is a claim holding a list of strings (nil when absent).
func stringsClaim(tok jwt.Token, name string) ([]string, error) {
	raw, ok := tok.Get(name)
	if !ok {
		return nil, nil
	}
	list, ok := raw.([]any)
	if !ok {
		return nil, fmt.Errorf("verify: %w: %s is %T, not a list", ErrMalformed, name, raw)
	}
	out := make([]string, 0, len(list))
	for _, g := range list {
		s, ok := g.(string)
		if !ok {
			return nil, fmt.Errorf("verify: %w: %s entry is %T, not a string", ErrMalformed, name, g)
		}
		out = append(out, s)
	}
	return out, nil
}

func (v *Verifier) userTenants(tok jwt.Token) ([]string, error) {
	t, err := stringClaim(tok, v.cfg.TenantClaim)
	if err != nil {
		return nil, err
	}
	if t != "" {
		return []string{t}, nil
	}
	groups, err := stringsClaim(tok, "cognito:groups")
	if err != nil {
		return nil, err
	}
	var tenants []string
	for _, s := range groups {
		if t, ok := strings.CutPrefix(s, v.cfg.TenantGroupPrefix); ok && t != "" {
			tenants = append(tenants, t)
		}
	}
	return tenants, nil
}

// stringClaim returns a claim that must be a string when present ("" when
// absent).
func stringClaim(tok jwt.Token, name string) (string, error) {
	raw, ok := tok.Get(name)
	if !ok {
		return "", nil
	}
	s, ok := raw.(string)
	if !ok {
		return "", fmt.Errorf("verify: %w: claim %q is %T, not a string", ErrMalformed, name, raw)
	}
	return s, nil
}
