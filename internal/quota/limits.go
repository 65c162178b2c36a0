package quota

import "github.com/jetway-gateway/jetway/internal/config"

// LimitsFor returns the limits that apply to a request by user (the JWT
// sub) through app of tenant, as configured: the tenant's limits, the app's
// limits, and the app's user_limits for this user (none when user is
// empty). The configuration must have been validated (windows are known).
func LimitsFor(tenant *config.Tenant, app *config.App, user string) []Limit {
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
		add(UserScope(tenant.ID, app.ID, user), app.UserLimits)
	}
	return out
}
