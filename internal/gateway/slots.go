package gateway

import (
	"fmt"
	"sync"

	"github.com/jetway-gateway/jetway/internal/call"
	"github.com/jetway-gateway/jetway/internal/telemetry"
)

// slots are the in-flight slots: admit takes a request's (acquire), the
// terminal gives them back (release), whichever stage ends the flight.
type slots struct {
	opts    *Options // the caps
	fleet   Fleet    // nil: a fleet of one
	metrics *telemetry.Metrics

	mu        sync.Mutex
	draining  bool
	inflight  int
	byTenant  map[string]int
	byUser    map[string]int
	bySession map[string]int
}

// slotKey is whose slots a request holds.
type slotKey struct{ tenant, user, session string }

// slotKey is whose in-flight slots the request takes: its tenant, its
// user (auth.Principal.Owner) and its session.
func (f *flight) slotKey() slotKey {
	p := f.caller.Principal
	return slotKey{tenant: p.Tenant, user: p.Owner(), session: p.Owner() + "/" + f.caller.SessionID}
}

func newSlots(o *Options, fleet Fleet, metrics *telemetry.Metrics) *slots {
	return &slots{opts: o, fleet: fleet, metrics: metrics,
		byTenant: map[string]int{}, byUser: map[string]int{}, bySession: map[string]int{}}
}

// acquire takes the in-flight slots of k or says which cap is full.
func (s *slots) acquire(k slotKey) error {
	// The fleet is asked before the lock is taken: the membership reads
	// this server's load (count) under its own lock, so asking it under
	// s.mu would order the two locks both ways (a deadlock that froze a
	// server's admission and its drain).
	healthy := s.fleet == nil || s.fleet.Healthy()
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.draining:
		return errDraining
	case !healthy:
		// Other servers may soon judge this one gone and give back what it
		// holds: admit nothing until its membership is current again.
		return fmt.Errorf("%w: this server cannot renew its fleet membership", errBusy)
	case s.bySession[k.session] >= s.opts.MaxInflightPerSession:
		return call.Errorf(errRateLimited, "%d requests in flight on this session", s.opts.MaxInflightPerSession)
	case s.byUser[k.user] >= s.opts.MaxInflightPerUser:
		return call.Errorf(errRateLimited, "%d requests in flight for this user", s.opts.MaxInflightPerUser)
	case s.opts.MaxInflightPerTenant > 0 && s.byTenant[k.tenant] >= s.opts.MaxInflightPerTenant:
		return fmt.Errorf("%w: tenant at its in-flight cap", ErrAtCapacity)
	case s.inflight >= s.opts.MaxInflight:
		return fmt.Errorf("%w: server at its in-flight cap of %d", ErrAtCapacity, s.opts.MaxInflight)
	}
	s.inflight++
	s.byTenant[k.tenant]++
	s.byUser[k.user]++
	s.bySession[k.session]++
	return nil
}

// release gives back the slots acquire took.
func (s *slots) release(k slotKey) {
	s.metrics.RequestFinished()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inflight--
	dec(s.byTenant, k.tenant)
	dec(s.byUser, k.user)
	dec(s.bySession, k.session)
}

// drain refuses every acquire from now on (errDraining).
func (s *slots) drain() {
	s.mu.Lock()
	s.draining = true
	s.mu.Unlock()
}

// count is the number of slots held: the model calls running here.
func (s *slots) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inflight
}

func dec(m map[string]int, k string) {
	if m[k] <= 1 {
		delete(m, k)
		return
	}
	m[k]--
}
