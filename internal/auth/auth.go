// Package auth verifies the Cognito JWTs that clients present to Jetway and
// turns them into a Principal (user, tenant, app). It follows Cognito's rules:
// RS256 signatures from the user pool's JWKS (cached, refreshed on a schedule
// and when an unknown key id shows up), the pool's issuer, access tokens (app
// client in client_id) or id tokens (app client in aud), and a tenant taken
// from a claim or a group. It also holds the dev issuer, a local stand-in for
// Cognito used when Jetway runs without AWS.
//
// Every rejection wraps exactly one of the sentinel errors below; callers map
// them with errors.Is (IsForbidden tells 403 from 401).
package auth

import (
	"errors"
	"time"
)

// Principal is the verified identity behind a token.
type Principal struct {
	// Subject is the token's sub: the stable user id.
	Subject string
	// Username is the Cognito user name (username or cognito:username), if present.
	Username string
	// Tenant is the tenant the user acts for; always the app's tenant.
	Tenant string
	// App is the app that owns the token's app client.
	App string
	// ClientID is the Cognito app client id the token was issued to.
	ClientID string
	// TokenUse is "access" or "id".
	TokenUse string
	// ExpiresAt is the token's exp.
	ExpiresAt time.Time
	// Groups are the token's cognito:groups (roles of the admin API).
	Groups []string
}

// Owner is the key of what the principal owns on the gateway: its request
// ids (live logs and request records) and its per-user caps. It is the
// tenant, the app and the user, so the same person (one sub) in two tenant
// groups or two apps owns separate requests, answers and caps. Tenant and
// app ids never hold '/' (the tenants file's id rule), so the key is
// unambiguous whatever the sub holds.
func (p Principal) Owner() string { return p.Tenant + "/" + p.App + "/" + p.Subject }

// Directory maps a Cognito app client id to the tenant and app that own it.
// *config.Config satisfies it.
type Directory interface {
	// AppForClient returns ok=false for a client id that belongs to no app.
	AppForClient(clientID string) (tenant, app string, ok bool)
}

// Sentinel errors returned (wrapped) by Verifier.Verify. All of them mean 401
// except ErrNoTenant and ErrTenantMismatch, which mean 403 (see IsForbidden).
var (
	// ErrMissingToken: no token was presented.
	ErrMissingToken = errors.New("missing token")
	// ErrMalformed: the token is not a well-formed compact JWS carrying a
	// JWT with the claims Cognito always sets.
	ErrMalformed = errors.New("malformed token")
	// ErrBadSignature: the signature does not verify, or the token uses an
	// algorithm other than RS256 (none, HS256, ...).
	ErrBadSignature = errors.New("bad token signature")
	// ErrUnknownKey: the token's kid is not in the issuer's key set, even
	// after the refresh it was allowed to trigger.
	ErrUnknownKey = errors.New("unknown signing key")
	// ErrExpired: exp is in the past (beyond the leeway).
	ErrExpired = errors.New("token expired")
	// ErrNotYetValid: nbf or iat is in the future (beyond the leeway).
	ErrNotYetValid = errors.New("token not yet valid")
	// ErrWrongIssuer: iss is not the configured issuer.
	ErrWrongIssuer = errors.New("wrong token issuer")
	// ErrWrongTokenUse: token_use is neither "access" nor "id".
	ErrWrongTokenUse = errors.New("wrong token use")
	// ErrUnknownClient: the app client id belongs to no app.
	ErrUnknownClient = errors.New("unknown app client")
	// ErrNoTenant: the user has no tenant (no tenant claim, no tenant group).
	ErrNoTenant = errors.New("user has no tenant")
	// ErrTenantMismatch: the user's tenant is not the tenant of the app.
	ErrTenantMismatch = errors.New("user tenant does not own the app")
)

// refusalReasons are what a client is told of each 401 sentinel: what is
// wrong with its own token, never a key id, an issuer's address or the
// tenants file's contents, which it may not know.
var refusalReasons = []struct {
	err    error
	reason string
}{
	{ErrMissingToken, "missing token"},
	{ErrMalformed, "malformed token: want a JWT (header.payload.signature) with Cognito's claims"},
	{ErrBadSignature, "token signature does not verify"},
	{ErrUnknownKey, "token signed by an unknown key"},
	{ErrExpired, "token expired"},
	{ErrNotYetValid, "token not yet valid (check the clock)"},
	{ErrWrongIssuer, "token from another issuer"},
	{ErrWrongTokenUse, "token_use must be access or id"},
	{ErrUnknownClient, "token's app client is not configured"},
}

// RefusalReason is the client's message for a Verify error that means 401:
// which of the sentinels it is ("token expired", "token signed by an unknown
// key", ...), or "invalid token" for anything else (a key set that could not
// be fetched is the gateway's problem, told only to the log).
func RefusalReason(err error) string {
	for _, r := range refusalReasons {
		if errors.Is(err, r.err) {
			return r.reason
		}
	}
	return "invalid token"
}

// IsForbidden reports whether a Verify error means 403 (the token is genuine
// but the user may not use this app) rather than 401.
func IsForbidden(err error) bool {
	return errors.Is(err, ErrNoTenant) || errors.Is(err, ErrTenantMismatch)
}
