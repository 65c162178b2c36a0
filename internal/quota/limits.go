package quota

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/jetway-gateway/jetway/internal/config"
)

// Scope kinds.
const (
	KindTenant = "tenant"
	KindApp    = "app"
	KindUser   = "user"
)

// Scope is what a limit applies to: a tenant, an app of a tenant, or one
// user of an app.
type Scope struct {
	// Kind is KindTenant, KindApp or KindUser.
	Kind string
	// Key identifies the scope within its kind; see TenantScope, AppScope
	// and UserScope.
	Key string
}

// TenantScope is the scope of a whole tenant.
func TenantScope(tenant string) Scope { return Scope{Kind: KindTenant, Key: tenant} }

// AppScope is the scope of one app of a tenant. Tenant and app ids never
// contain '/' (internal/config checks), so keys cannot collide.
func AppScope(tenant, app string) Scope { return Scope{Kind: KindApp, Key: tenant + "/" + app} }

// UserScope is the scope of one user (the JWT sub) of an app.
func UserScope(tenant, app, user string) Scope {
	return Scope{Kind: KindUser, Key: tenant + "/" + app + "/" + user}
}

// String formats the scope as "kind:key".
func (s Scope) String() string { return s.Kind + ":" + s.Key }

// rank orders scopes narrowest first.
func (s Scope) rank() int {
	switch s.Kind {
	case KindUser:
		return 0
	case KindApp:
		return 1
	case KindTenant:
		return 2
	}
	return 3
}

// Amount is a quantity of each metric: tokens (input + output), requests,
// and cost in micro-dollars (1 USD = 1,000,000).
type Amount struct {
	Tokens   int64
	Requests int64
	MicroUSD int64
}

// Add returns a+b.
func (a Amount) Add(b Amount) Amount {
	return Amount{a.Tokens + b.Tokens, a.Requests + b.Requests, a.MicroUSD + b.MicroUSD}
}

// Sub returns a-b.
func (a Amount) Sub(b Amount) Amount {
	return Amount{a.Tokens - b.Tokens, a.Requests - b.Requests, a.MicroUSD - b.MicroUSD}
}

// IsZero reports whether every metric is zero.
func (a Amount) IsZero() bool { return a == Amount{} }

func (a Amount) negative() bool { return a.Tokens < 0 || a.Requests < 0 || a.MicroUSD < 0 }

// MaxAmount is the larger of a and b on every metric.
func MaxAmount(a, b Amount) Amount { return maxAmount(a, b) }

func maxAmount(a, b Amount) Amount {
	return Amount{max(a.Tokens, b.Tokens), max(a.Requests, b.Requests), max(a.MicroUSD, b.MicroUSD)}
}

func minAmount(a, b Amount) Amount {
	return Amount{min(a.Tokens, b.Tokens), min(a.Requests, b.Requests), min(a.MicroUSD, b.MicroUSD)}
}

// MicroUSD converts dollars (as in the configuration's usd limits and
// model prices) to micro-dollars, rounding to the nearest.
func MicroUSD(usd float64) int64 { return int64(math.Round(usd * 1e6)) }

// Limit caps a scope's usage per window. A zero metric is not limited; at
// least one must be positive.
type Limit struct {
	Scope    Scope
	Window   Window
	Tokens   int64
	Requests int64
	MicroUSD int64
}

// Max returns the limit's caps as an Amount (zero = not limited).
func (l Limit) Max() Amount { return Amount{l.Tokens, l.Requests, l.MicroUSD} }

func (l Limit) validate() error {
	switch {
	case !l.Window.Valid():
		return fmt.Errorf("%w: %s: unknown window %q", ErrInvalidLimit, l.Scope, l.Window)
	case l.Scope.Kind == "" || l.Scope.Key == "" || strings.Contains(l.Scope.Kind, "#"):
		return fmt.Errorf("%w: bad scope %q", ErrInvalidLimit, l.Scope)
	case l.Max().negative():
		return fmt.Errorf("%w: %s %s: negative limit", ErrInvalidLimit, l.Scope, l.Window)
	case l.Max().IsZero():
		return fmt.Errorf("%w: %s %s: limit sets no metric", ErrInvalidLimit, l.Scope, l.Window)
	}
	return nil
}

// fits reports whether used+n stays within every positive cap of limit.
func fits(used, n, limit Amount) bool {
	return (limit.Tokens <= 0 || used.Tokens+n.Tokens <= limit.Tokens) &&
		(limit.Requests <= 0 || used.Requests+n.Requests <= limit.Requests) &&
		(limit.MicroUSD <= 0 || used.MicroUSD+n.MicroUSD <= limit.MicroUSD)
}

// ExpiryGrace is how long after its window ends a counter item may be
// forgotten (the DynamoDB TTL attribute is window end + ExpiryGrace).
const ExpiryGrace = 24 * time.Hour

// Item names one counter: a scope's usage in one window instance.
type Item struct {
	Scope  Scope
	Window Window
	// Start is the window instance's start (UTC), see Window.Bounds.
	Start time.Time
}

// Key is the item's storage key, for example
// "tenant#contoso#hour#2026-11-29T19" or
// "user#contoso/support-assistant/alice#minute#2026-11-29T19:07".
// Kind never contains '#' and the last two fields have fixed forms, so
// keys are unambiguous whatever the scope key holds.
func (it Item) Key() string {
	return it.Scope.Kind + "#" + it.Scope.Key + "#" + string(it.Window) + "#" + it.Window.label(it.Start)
}

// End is when the item's window ends and its usage resets.
func (it Item) End() time.Time {
	_, end := it.Window.Bounds(it.Start)
	return end
}

// Expires is when a store may forget the item.
func (it Item) Expires() time.Time { return it.End().Add(ExpiryGrace) }

// LimitsFor returns the limits that apply to a request by user (the JWT
// sub) through app of tenant, as configured: the tenant's limits, the app's
// limits, and the app's user_limits for this user (none when user is
// empty). The configuration must have been validated (windows are known).
//
// A user override (config.UserOverride, nil for none) replaces the app's
// user_limits for its user.
func LimitsFor(tenant *config.Tenant, app *config.App, user string, override *config.UserOverride) []Limit {
	var out []Limit
	add := func(s Scope, ls []config.Limit) {
		for _, l := range ls {
			out = append(out, Limit{
				Scope:    s,
				Window:   Window(l.Window),
				Tokens:   l.Tokens,
				Requests: l.Requests,
				MicroUSD: MicroUSD(l.USD),
			})
		}
	}
	add(TenantScope(tenant.ID), tenant.Limits)
	add(AppScope(tenant.ID, app.ID), app.Limits)
	if user != "" {
		ls := app.UserLimits
		if override != nil && len(override.Limits) > 0 {
			ls = override.Limits
		}
		add(UserScope(tenant.ID, app.ID, user), ls)
	}
	return out
}
