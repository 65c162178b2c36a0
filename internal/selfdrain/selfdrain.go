// Package selfdrain notices that the load balancer has stopped health
// checking this server, which is how a deregistration looks from inside a
// task: the ALB stops checking a target as soon as it starts draining it, and
// ECS sends SIGTERM only after the deregistration delay. Draining at the first
// missed checks, not at SIGTERM, lets in-flight streams finish and clients
// move while the load balancer still carries their connections.
//
// Only the load balancer's own checks count: a request to /readyz arms the
// watch only when its User-Agent starts with the load balancer's (the ALB
// sends "ELB-HealthChecker/2.0"). A person, a start-up script or a test
// harness waiting for readiness gets its answer but never arms the watch,
// so a server nobody deregistered never drains when they stop asking.
package selfdrain

import (
	"context"
	"strings"
	"sync"
	"time"
)

// Options configure a Watcher. Zero values mean the documented defaults.
type Options struct {
	// Interval is the load balancer's health check interval
	// (JETWAY_HEALTH_CHECK_INTERVAL, default 10s).
	Interval time.Duration
	// Misses is how many intervals without a check mean "deregistered"
	// (JETWAY_SELF_DRAIN_MISSES, default 3). Negative turns self-drain off.
	Misses int
	// UserAgent is the prefix of the User-Agent the load balancer's health
	// checks carry (JETWAY_HEALTH_CHECK_USER_AGENT, default
	// "ELB-HealthChecker/"). Other requests never count as checks.
	UserAgent string
	// Now and After replace the clock in tests (default time.Now, time.After).
	Now   func() time.Time
	After func(time.Duration) <-chan time.Time
}

// Default values of Options.
const (
	DefaultInterval = 10 * time.Second
	DefaultMisses   = 3
	// DefaultUserAgent is what an AWS load balancer's health check sends
	// ("ELB-HealthChecker/2.0"); a target group cannot change it.
	DefaultUserAgent = "ELB-HealthChecker/"
)

// Watcher records health checks and reports when they stopped.
type Watcher struct {
	interval time.Duration
	misses   int
	agent    string
	now      func() time.Time
	after    func(time.Duration) <-chan time.Time

	mu   sync.Mutex
	last time.Time // zero until the first check
}

// New returns a Watcher; it watches nothing until Run.
func New(o Options) *Watcher {
	w := &Watcher{interval: o.Interval, misses: o.Misses, agent: o.UserAgent, now: o.Now, after: o.After}
	if w.interval <= 0 {
		w.interval = DefaultInterval
	}
	if w.misses == 0 {
		w.misses = DefaultMisses
	}
	if w.agent == "" {
		w.agent = DefaultUserAgent
	}
	if w.now == nil {
		w.now = time.Now
	}
	if w.after == nil {
		w.after = time.After
	}
	return w
}

// Checked records a readiness request with the given User-Agent. It counts
// as a health check only when userAgent starts with the load balancer's;
// first is true for the first check that counts (the watch is armed from
// then on). With self-drain off nothing counts.
func (w *Watcher) Checked(userAgent string) (first bool) {
	if w.misses < 0 || !strings.HasPrefix(userAgent, w.agent) {
		return false
	}
	now := w.now()
	w.mu.Lock()
	first = w.last.IsZero()
	w.last = now
	w.mu.Unlock()
	return first
}

// Silence is how long no check may arrive before Missed reports true:
// Misses intervals.
func (w *Watcher) Silence() time.Duration { return time.Duration(w.misses) * w.interval }

// Missed reports whether health checks had been arriving and none came for
// Silence. A server that never saw the load balancer's check (dev mode,
// tests, no load balancer, only people and scripts polling /readyz) never
// misses one.
func (w *Watcher) Missed() bool {
	if w.misses < 0 {
		return false
	}
	w.mu.Lock()
	last := w.last
	w.mu.Unlock()
	return !last.IsZero() && w.now().Sub(last) >= w.Silence()
}

// Run checks once per interval until the checks stop, then calls drain once
// and returns nil; it returns ctx's error if ctx ends first.
func (w *Watcher) Run(ctx context.Context, drain func()) error {
	if w.misses < 0 {
		<-ctx.Done()
		return ctx.Err()
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-w.after(w.interval):
		}
		if w.Missed() {
			drain()
			return nil
		}
	}
}
