package alert

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/jetway-gateway/jetway/internal/telemetry"
)

// recorder is a Sink keeping every body; send, when set, answers instead
// (after the body is kept).
type recorder struct {
	name   string
	mu     sync.Mutex
	bodies [][]byte
	send   func(ctx context.Context) error
}

func (r *recorder) Name() string { return r.name }

func (r *recorder) Send(ctx context.Context, body []byte) error {
	r.mu.Lock()
	r.bodies = append(r.bodies, body)
	r.mu.Unlock()
	if r.send != nil {
		return r.send(ctx)
	}
	return nil
}

func (r *recorder) events(t *testing.T) []Event {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Event
	for _, b := range r.bodies {
		var e Event
		if err := json.Unmarshal(b, &e); err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	return out
}

// claimFunc is a Claimer of one func.
type claimFunc func(ctx context.Context, key string, expires time.Time) (bool, error)

func (f claimFunc) Claim(ctx context.Context, key string, expires time.Time) (bool, error) {
	return f(ctx, key, expires)
}

// closeWithin closes n, failing the test if what was queued is not sent
// within 10 s.
func closeWithin(t *testing.T, n *Notifier) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
}

// alertCount reads jetway_quota_alerts_total{labels} from reg.
func alertCount(t *testing.T, reg *prometheus.Registry, labels map[string]string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, f := range fams {
		if f.GetName() != "jetway_quota_alerts_total" {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue next
				}
			}
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

func hourly(threshold int) Observation {
	start := time.Now().UTC().Truncate(time.Hour) // claims of a window long gone have expired
	return Observation{Tenant: "contoso", App: "support", User: "alice", Scope: ScopeUser, Window: "hour",
		WindowStart: start, WindowResetsAt: start.Add(time.Hour), Measure: MeasureTokens,
		Limit: 1000, Before: int64(threshold)*10 - 1, After: int64(threshold) * 10}
}

// 50 admissions observing the same crossing at once: one event, in one
// process and across two sharing a claimer.
func TestExactlyOnce(t *testing.T) {
	t.Run("one process", func(t *testing.T) {
		reg := prometheus.NewRegistry()
		sink := &recorder{name: "rec"}
		n := New(Options{}, NewMemoryClaimer(), []Sink{sink}, telemetry.NewMetrics(reg), nil)
		var wg sync.WaitGroup
		for range 50 {
			wg.Go(func() { n.Observe(hourly(80)) })
		}
		wg.Wait()
		closeWithin(t, n)
		if ev := sink.events(t); len(ev) != 1 || ev[0].Threshold != 80 {
			t.Fatalf("events %+v, want one at 80", ev)
		}
		if got := alertCount(t, reg, map[string]string{"outcome": "sent", "sink": "rec", "scope": "user", "threshold": "80"}); got != 1 {
			t.Errorf("sent %v, want 1", got)
		}
	})
	t.Run("two servers", func(t *testing.T) {
		reg := prometheus.NewRegistry()
		m := telemetry.NewMetrics(reg)
		claims := NewMemoryClaimer()
		// A claimer that every claim passes through slowly, so both servers
		// claim while the other's claim is under way.
		var started sync.WaitGroup
		started.Add(2)
		var once [2]sync.Once
		var seen atomic.Int32
		slow := claimFunc(func(ctx context.Context, key string, exp time.Time) (bool, error) {
			if strings.HasSuffix(key, "#90") {
				if i := seen.Add(1) - 1; i < 2 {
					once[i].Do(started.Done)
					started.Wait()
				}
			}
			return claims.Claim(ctx, key, exp)
		})
		a, b := &recorder{name: "a"}, &recorder{name: "b"}
		na := New(Options{}, slow, []Sink{a}, m, nil)
		nb := New(Options{}, slow, []Sink{b}, m, nil)
		var wg sync.WaitGroup
		for i := range 50 {
			n := na
			if i%2 == 1 {
				n = nb
			}
			wg.Go(func() { n.Observe(hourly(90)) })
		}
		wg.Wait()
		closeWithin(t, na)
		closeWithin(t, nb)
		// At 90 % the use is past 80 % too: one event for each threshold.
		if got := len(a.events(t)) + len(b.events(t)); got != 2 {
			t.Fatalf("%d events across two servers, want 2 (80 and 90)", got)
		}
		if got := alertCount(t, reg, map[string]string{"outcome": "claimed_elsewhere"}); got != 2 {
			t.Errorf("claimed_elsewhere %v, want 2 (each server claims each threshold once)", got)
		}
	})
}

// Every threshold an observation passes is one event, each to every sink;
// the log line carries the event's fields.
func TestEveryThresholdEverySink(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	a, b := &recorder{name: "a"}, &recorder{name: "b"}
	n := New(Options{}, nil, []Sink{a, b}, nil, zap.New(core))
	o := hourly(80)
	o.Before, o.After = 0, 1000 // 80, 90 and 100 at once
	o.Thresholds = []int{50, 80, 90, 100}
	n.Observe(o)
	closeWithin(t, n)
	for _, s := range []*recorder{a, b} {
		seen := map[int]bool{}
		for _, e := range s.events(t) {
			seen[e.Threshold] = true
		}
		if len(seen) != 4 || !seen[50] || !seen[100] {
			t.Errorf("sink %s got thresholds %v, want 50, 80, 90, 100", s.name, seen)
		}
	}
	lines := logs.FilterMessage("quota_alert").All()
	if len(lines) != 4 {
		t.Fatalf("%d quota_alert lines, want 4", len(lines))
	}
	f := lines[0].ContextMap()
	if f["tenant"] != "contoso" || f["user"] != "alice" || f["scope"] != "user" || f["window"] != "hour" || f["measure"] != "tokens" ||
		f["limit"] != int64(1000) || f["used"] != int64(1000) {
		t.Errorf("quota_alert fields %v", f)
	}
	if sent, _ := f["sent"].([]any); len(sent) != 2 {
		t.Errorf("sent %v, want both sinks", f["sent"])
	}
}

// The default thresholds are 80, 90 and 100, and a refusal is 100 once.
func TestDefaultsAndRefusal(t *testing.T) {
	sink := &recorder{name: "rec"}
	n := New(Options{}, nil, []Sink{sink}, nil, nil)
	o := hourly(80)
	o.Before, o.After = 0, 950
	n.Observe(o)
	r := hourly(80)
	r.Before, r.After, r.Refused = 950, 950, true
	for range 5 {
		n.Observe(r) // every refused request reaches 100: sent once
	}
	closeWithin(t, n)
	got := map[int]int{}
	for _, e := range sink.events(t) {
		got[e.Threshold]++
	}
	if len(got) != 3 || got[80] != 1 || got[90] != 1 || got[100] != 1 {
		t.Errorf("thresholds sent %v, want 80, 90, 100 once each", got)
	}
}

// A claim that fails is not sent (it may have been made elsewhere) and is
// counted; a later observation of the same crossing claims again.
func TestClaimErrorNotSent(t *testing.T) {
	reg := prometheus.NewRegistry()
	core, logs := observer.New(zap.WarnLevel)
	memory := NewMemoryClaimer()
	var down sync.Mutex
	failing := true
	claims := claimFunc(func(ctx context.Context, key string, exp time.Time) (bool, error) {
		down.Lock()
		defer down.Unlock()
		if failing {
			return false, errors.New("table unavailable")
		}
		return memory.Claim(ctx, key, exp)
	})
	sink := &recorder{name: "rec"}
	n := New(Options{Workers: 1}, claims, []Sink{sink}, telemetry.NewMetrics(reg), zap.New(core))
	n.Observe(hourly(80))
	waitFor(t, func() bool { return alertCount(t, reg, map[string]string{"outcome": "claim_failed"}) == 1 })
	if len(sink.events(t)) != 0 {
		t.Fatal("sent without a claim")
	}
	if logs.FilterMessage("quota_alert_claim_failed").Len() != 1 {
		t.Error("no quota_alert_claim_failed line")
	}
	down.Lock()
	failing = false
	down.Unlock()
	n.Observe(hourly(80))
	n.Observe(hourly(80))
	closeWithin(t, n)
	if got := len(sink.events(t)); got != 1 {
		t.Errorf("%d events once the claimer is back, want 1", got)
	}
}

// A full queue drops and counts; Observe never waits for a sink.
func TestQueueFullDrops(t *testing.T) {
	reg := prometheus.NewRegistry()
	sending := make(chan struct{}, 1)
	release := make(chan struct{})
	sink := &recorder{name: "rec", send: func(ctx context.Context) error {
		sending <- struct{}{}
		<-release
		return nil
	}}
	n := New(Options{Workers: 1, QueueSize: 1}, nil, []Sink{sink}, telemetry.NewMetrics(reg), nil)
	o := hourly(80)
	o.Thresholds = []int{80}
	n.Observe(o) // taken by the worker, which then waits in the sink
	<-sending
	o.Measure = MeasureRequests
	n.Observe(o) // queued
	o.Measure = MeasureUSD
	n.Observe(o) // dropped
	if got := alertCount(t, reg, map[string]string{"outcome": "dropped", "sink": "none"}); got != 1 {
		t.Errorf("dropped %v, want 1", got)
	}
	close(release)
	go func() {
		for range sending {
		}
	}()
	closeWithin(t, n)
	close(sending)
	if got := len(sink.events(t)); got != 2 {
		t.Errorf("%d sent, want 2", got)
	}
	late := hourly(90)
	late.Thresholds = []int{90}
	n.Observe(late) // after Close: dropped
	if got := alertCount(t, reg, map[string]string{"outcome": "dropped"}); got != 2 {
		t.Errorf("dropped %v after Close, want 2", got)
	}
}

// Close is bounded by its context: a sink that does not answer is cut,
// what is still queued is counted dropped, and a second Close is safe.
func TestCloseBounded(t *testing.T) {
	reg := prometheus.NewRegistry()
	sending := make(chan struct{}, 8)
	sink := &recorder{name: "rec", send: func(ctx context.Context) error {
		sending <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	}}
	n := New(Options{Workers: 1}, nil, []Sink{sink}, telemetry.NewMetrics(reg), nil)
	n.Observe(hourly(80), hourly(90))
	<-sending
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := n.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("close: %v, want its deadline", err)
	}
	waitFor(t, func() bool {
		return alertCount(t, reg, map[string]string{"outcome": "failed"}) == 1 &&
			alertCount(t, reg, map[string]string{"outcome": "dropped"}) == 1
	})
	if err := n.Close(context.Background()); err != nil {
		t.Errorf("second close: %v", err)
	}
}

// No sink: nothing is claimed or queued.
func TestDisabled(t *testing.T) {
	claimed := false
	n := New(Options{}, claimFunc(func(context.Context, string, time.Time) (bool, error) { claimed = true; return true, nil }), nil, nil, nil)
	if n.Enabled() {
		t.Fatal("enabled with no sink")
	}
	n.Observe(hourly(80))
	closeWithin(t, n)
	if claimed {
		t.Error("claimed with no sink")
	}
	var none *Notifier
	none.Observe(hourly(80))
	if none.Enabled() || none.Close(context.Background()) != nil {
		t.Error("a nil Notifier is not a quiet one")
	}
}

// waitFor polls cond until it holds, failing after 10 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
