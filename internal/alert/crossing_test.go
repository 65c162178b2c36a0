package alert

import (
	"encoding/json"
	"math"
	"testing"
	"time"
)

// The crossing rule: threshold t is reached first when Before <
// ceil(Limit*t/100) <= After, or on a refusal when t is 100.
func TestCrossingRule(t *testing.T) {
	for _, tt := range []struct {
		name                 string
		limit, before, after int64
		refused              bool
		threshold            int
		want                 bool
	}{
		{"reaches 80 exactly", 1000, 799, 800, false, 80, true},
		{"jumps past 80", 1000, 500, 950, false, 80, true},
		{"jumps past 90 too", 1000, 500, 950, false, 90, true},
		{"short of 100", 1000, 500, 950, false, 100, false},
		{"one below 80", 1000, 700, 799, false, 80, false},
		{"already past 80", 1000, 800, 900, false, 80, true},
		{"from nothing to the limit", 1000, 0, 1000, false, 100, true},
		{"at the limit already", 1000, 1000, 1000, false, 100, true},
		{"past the limit (usage after a reservation)", 1000, 990, 1200, false, 100, true},
		{"ceil: 80% of 7 is 6", 7, 5, 6, false, 80, true},
		{"ceil: 5 is below 80% of 7", 7, 4, 5, false, 80, false},
		{"ceil: 50% of 101 is 51", 101, 50, 51, false, 50, true},
		{"ceil: 50 is below 50% of 101", 101, 49, 50, false, 50, false},
		{"refused counts as 100", 1000, 850, 850, true, 100, true},
		{"refused, even far below the limit", 1000, 10, 10, true, 100, true},
		{"refused is no 80", 1000, 10, 10, true, 80, false},
		{"refused, 90 crossed on the numbers", 1000, 850, 950, true, 90, true},
		{"no limit on the measure", 0, 0, 10, false, 80, false},
		{"no limit, refused", 0, 0, 10, true, 100, false},
		{"threshold 0 never", 1000, 0, 1000, false, 0, false},
		{"threshold over 100 never", 1000, 0, 5000, false, 120, false},
		{"usd: 90% of $5 in micro-dollars", 5_000_000, 4_499_999, 4_500_000, false, 90, true},
		{"no overflow near MaxInt64", math.MaxInt64, math.MaxInt64 - 1, math.MaxInt64, false, 100, true},
		{"no overflow near MaxInt64, below", math.MaxInt64, 0, math.MaxInt64 - 1, false, 100, false},
	} {
		o := Observation{Limit: tt.limit, Before: tt.before, After: tt.after, Refused: tt.refused}
		if got := o.crosses(tt.threshold); got != tt.want {
			t.Errorf("%s: limit %d, %d -> %d, refused %v, %d%%: crosses = %v, want %v",
				tt.name, tt.limit, tt.before, tt.after, tt.refused, tt.threshold, got, tt.want)
		}
	}
}

// A key names the scope (not the request's app for a tenant limit), the
// window instance, the measure and the threshold.
func TestKey(t *testing.T) {
	start := time.Date(2026, 11, 29, 19, 0, 0, 0, time.FixedZone("x", 3600))
	base := Observation{Tenant: "contoso", App: "support", User: "alice", Window: "hour", WindowStart: start, Measure: MeasureTokens}
	for _, tt := range []struct {
		scope, want string
	}{
		{ScopeTenant, "tenant#contoso#hour#2026-11-29T18:00:00Z#tokens#80"},
		{ScopeApp, "app#contoso/support#hour#2026-11-29T18:00:00Z#tokens#80"},
		{ScopeUser, "user#contoso/support/alice#hour#2026-11-29T18:00:00Z#tokens#80"},
	} {
		o := base
		o.Scope = tt.scope
		if got := o.Key(80); got != tt.want {
			t.Errorf("%s: key %q, want %q", tt.scope, got, tt.want)
		}
	}
	a, b := base, base
	a.Scope, b.Scope, b.App, b.User = ScopeTenant, ScopeTenant, "other-app", ""
	if a.Key(90) != b.Key(90) {
		t.Errorf("a tenant limit's key differs by app: %q vs %q", a.Key(90), b.Key(90))
	}
	b = base
	b.Scope, a.Scope, b.Measure = ScopeUser, ScopeUser, MeasureRequests
	if a.Key(90) == b.Key(90) {
		t.Errorf("two measures share a key: %q", a.Key(90))
	}
	b = base
	b.Scope, b.WindowStart = ScopeUser, start.Add(time.Hour)
	if a.Key(90) == b.Key(90) {
		t.Errorf("two window instances share a key: %q", a.Key(90))
	}
}

// The event speaks each measure's natural unit: usd in dollars.
func TestEventJSON(t *testing.T) {
	resets := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	at := time.Date(2026, 11, 30, 12, 34, 56, 0, time.UTC)
	c := crossing{threshold: 90, at: at, obs: Observation{Tenant: "contoso", App: "support", Scope: ScopeApp, Window: "month",
		WindowStart: resets.AddDate(0, -1, 0), WindowResetsAt: resets, Measure: MeasureUSD, Limit: 25_000_000, Before: 22_400_000, After: 22_512_345}}
	body, err := json.Marshal(c.event())
	if err != nil {
		t.Fatal(err)
	}
	want := `{"type":"jetway.quota.threshold","tenant":"contoso","app":"support","scope":"app","window":"month","measure":"usd",` +
		`"limit":25,"used":22.512345,"threshold":90,"window_resets_at":"2026-12-01T00:00:00Z","at":"2026-11-30T12:34:56Z"}`
	if string(body) != want {
		t.Errorf("event\n%s\nwant\n%s", body, want)
	}
	c.obs.Measure, c.obs.Limit, c.obs.After, c.obs.Scope, c.obs.User = MeasureTokens, 100000, 90001, ScopeUser, "alice"
	body, _ = json.Marshal(c.event())
	var e map[string]any
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatal(err)
	}
	if e["limit"] != 100000.0 || e["used"] != 90001.0 || e["user"] != "alice" || e["measure"] != "tokens" {
		t.Errorf("tokens event: %s", body)
	}
}
