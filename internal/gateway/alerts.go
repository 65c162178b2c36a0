package gateway

import (
	"errors"
	"time"

	"github.com/jetway-gateway/jetway/internal/alert"
	"github.com/jetway-gateway/jetway/internal/config"
	"github.com/jetway-gateway/jetway/internal/quota"
)

// Alerts takes each admission's view of its limits (alert.Notifier): it
// sends an alert the first time a scope's use in a window reaches a
// threshold. It must not block.
type Alerts interface {
	Enabled() bool
	Observe(obs ...alert.Observation)
}

// observeLimits hands the alerts what this admission saw: each measure
// of each limit it reserved against (used before and after its
// reservation, as this server counts it), or the limit that refused it.
func (f *flight) observeLimits(res *quota.Reservation, amount quota.Amount, err error) {
	a := f.g.alerts
	if a == nil || !a.Enabled() {
		return
	}
	p := f.caller.Principal
	base := func(s quota.Scope, w quota.Window, start time.Time) alert.Observation {
		o := alert.Observation{Tenant: p.Tenant, App: p.App, Scope: s.Kind, Window: string(w), WindowStart: start,
			Thresholds: f.alertsOf(s.Kind, w)}
		_, o.WindowResetsAt = w.Bounds(start)
		if s.Kind == quota.KindUser {
			o.User = p.Subject
		}
		return o
	}
	var exceeded *quota.ExceededError
	if errors.As(err, &exceeded) {
		start, _ := exceeded.Window.Bounds(time.Now())
		o := base(exceeded.Scope, exceeded.Window, start)
		o.Measure, o.Limit, o.Before, o.After, o.Refused = exceeded.Metric, exceeded.Limit, exceeded.Used, exceeded.Used, true
		a.Observe(o)
		return
	}
	if res == nil {
		return
	}
	var obs []alert.Observation
	for _, it := range res.Items() {
		for _, m := range []struct {
			name              string
			limit, used, took int64
		}{{quota.MetricTokens, it.Limit.Tokens, it.UsedAfter.Tokens, amount.Tokens},
			{quota.MetricRequests, it.Limit.Requests, it.UsedAfter.Requests, amount.Requests},
			{quota.MetricUSD, it.Limit.MicroUSD, it.UsedAfter.MicroUSD, amount.MicroUSD}} {
			if m.limit <= 0 {
				continue
			}
			o := base(it.Limit.Scope, it.Limit.Window, it.Item.Start)
			o.Measure, o.Limit, o.Before, o.After = m.name, m.limit, m.used-m.took, m.used
			obs = append(obs, o)
		}
	}
	a.Observe(obs...)
}

// alertsOf is the alerts of the configured limit of scope kind and window.
func (f *flight) alertsOf(kind string, w quota.Window) []int {
	var ls []config.Limit
	switch kind {
	case quota.KindTenant:
		ls = f.tenant.Limits
	case quota.KindApp:
		ls = f.app.Limits
	case quota.KindUser:
		ls = f.app.UserLimits
		if f.user != nil && len(f.user.Limits) > 0 {
			ls = f.user.Limits
		}
	}
	for _, l := range ls {
		if l.Window == string(w) {
			return l.Alerts
		}
	}
	return nil
}
