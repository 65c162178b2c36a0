package selfdrain

import (
	"context"
	"sync"
	"testing"
	"time"
)

// fakeClock is a clock the test moves; After fires when the clock passes it.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []waiter
	waiting chan struct{} // a value per After call
}

type waiter struct {
	at time.Time
	c  chan time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), waiting: make(chan struct{}, 100)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	c.waiters = append(c.waiters, waiter{at: c.now.Add(d), c: ch})
	c.waiting <- struct{}{}
	return ch
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if !w.at.After(c.now) {
			w.c <- c.now
		} else {
			kept = append(kept, w)
		}
	}
	c.waiters = kept
}

// alb is the User-Agent an AWS load balancer's health check sends.
const alb = "ELB-HealthChecker/2.0"

func TestMissed(t *testing.T) {
	for _, tc := range []struct {
		name    string
		misses  int
		checks  []time.Duration // offsets of health checks from the start
		at      time.Duration
		drained bool
	}{
		{name: "never checked", misses: 3, at: time.Hour},
		{name: "checks arriving", misses: 3, checks: []time.Duration{0, 10 * time.Second, 20 * time.Second}, at: 29 * time.Second},
		{name: "just under the silence", misses: 3, checks: []time.Duration{0}, at: 29 * time.Second},
		{name: "three intervals silent", misses: 3, checks: []time.Duration{0}, at: 30 * time.Second, drained: true},
		{name: "silent after a run of checks", misses: 3, checks: []time.Duration{0, 10 * time.Second, 20 * time.Second}, at: 50 * time.Second, drained: true},
		{name: "one miss", misses: 1, checks: []time.Duration{0}, at: 10 * time.Second, drained: true},
		{name: "off", misses: -1, checks: []time.Duration{0}, at: time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newFakeClock()
			start := clk.Now()
			w := New(Options{Interval: 10 * time.Second, Misses: tc.misses, Now: clk.Now, After: clk.After})
			for _, c := range tc.checks {
				clk.Advance(start.Add(c).Sub(clk.Now()))
				w.Checked(alb)
			}
			clk.Advance(start.Add(tc.at).Sub(clk.Now()))
			if got := w.Missed(); got != tc.drained {
				t.Fatalf("Missed() = %v at %s, want %v", got, tc.at, tc.drained)
			}
		})
	}
}

// TestOnlyTheLoadBalancerArms: readiness requests from anyone but the load
// balancer (curl, a Go client, a browser, a harness, no User-Agent at all)
// never arm the watch, however many arrive and however long they stop for;
// the load balancer's check does, once, and a custom prefix replaces the
// default one.
func TestOnlyTheLoadBalancerArms(t *testing.T) {
	for _, tc := range []struct {
		name   string
		prefix string
		agents []string
		armed  bool
	}{
		{name: "curl", agents: []string{"curl/8.5.0", "curl/8.5.0"}},
		{name: "go and browsers", agents: []string{"Go-http-client/1.1", "Mozilla/5.0 (X11; Linux x86_64)", "", "kube-probe/1.29"}},
		{name: "lookalikes", agents: []string{"elb-healthchecker/2.0", " ELB-HealthChecker/2.0", "ELB-HealthChecker", "my ELB-HealthChecker/2.0"}},
		{name: "the ALB", agents: []string{"curl/8.5.0", alb}, armed: true},
		{name: "another load balancer", prefix: "HAProxy-Check/", agents: []string{alb, "HAProxy-Check/1.0"}, armed: true},
		{name: "not that load balancer", prefix: "HAProxy-Check/", agents: []string{alb, "curl/8.5.0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newFakeClock()
			w := New(Options{Interval: 10 * time.Second, Misses: 3, UserAgent: tc.prefix, Now: clk.Now, After: clk.After})
			firsts := 0
			for _, a := range tc.agents {
				if w.Checked(a) {
					firsts++
				}
				clk.Advance(time.Second)
			}
			clk.Advance(time.Hour)
			if got := w.Missed(); got != tc.armed {
				t.Fatalf("Missed() = %v an hour after %q, want %v", got, tc.agents, tc.armed)
			}
			if want := map[bool]int{true: 1}[tc.armed]; firsts != want {
				t.Fatalf("Checked reported the first check %d times, want %d", firsts, want)
			}
		})
	}
	// Checked reports the arming check only once.
	w := New(Options{})
	if !w.Checked(alb) || w.Checked(alb) {
		t.Fatal("Checked: want true for the first load balancer check only")
	}
}

func TestDefaults(t *testing.T) {
	w := New(Options{})
	if w.Silence() != DefaultMisses*DefaultInterval || w.Silence() != 30*time.Second {
		t.Fatalf("default silence %s, want 30s (3 x 10s)", w.Silence())
	}
}

// TestRunDrainsOnceWhenChecksStop drives Run with the fake clock: checks
// every interval keep it running; when they stop it drains once and returns.
func TestRunDrainsOnceWhenChecksStop(t *testing.T) {
	clk := newFakeClock()
	w := New(Options{Interval: 10 * time.Second, Misses: 3, Now: clk.Now, After: clk.After})
	drained := make(chan struct{}, 2)
	done := make(chan error, 1)
	go func() { done <- w.Run(context.Background(), func() { drained <- struct{}{} }) }()
	tick := func() {
		t.Helper()
		select {
		case <-clk.waiting: // Run is waiting for its next tick
		case <-time.After(10 * time.Second):
			t.Fatal("Run never waited for a tick")
		}
		clk.Advance(10 * time.Second)
	}
	for range 10 { // healthy: a check per interval
		w.Checked(alb)
		tick()
	}
	select {
	case <-drained:
		t.Fatal("drained while health checks were arriving")
	default:
	}
	// Deregistered: no more checks. The last one came one interval ago, so
	// two more silent intervals make three.
	for range 2 {
		tick()
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run returned %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after three silent intervals")
	}
	if len(drained) != 1 {
		t.Fatalf("drain called %d times, want 1", len(drained))
	}
}

func TestRunNeverDrainsWithoutChecks(t *testing.T) {
	clk := newFakeClock()
	w := New(Options{Interval: 10 * time.Second, Now: clk.Now, After: clk.After})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx, func() { t.Error("drained without ever seeing a health check") }) }()
	for range 100 {
		<-clk.waiting
		clk.Advance(10 * time.Second)
	}
	cancel()
	if err := <-done; err != context.Canceled {
		t.Fatalf("Run returned %v, want context.Canceled", err)
	}
}
