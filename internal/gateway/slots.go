package gateway

import (
	"fmt"

	"github.com/jetway-gateway/jetway/internal/protocol"
)

// In-flight slots: admit takes them (acquire), the terminal gives them
// back (release), whichever stage ends the flight.

// acquire takes the in-flight slots or says which cap is full.
func (g *Gateway) acquire(f *flight) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.draining:
		return errDraining
	case g.fleet != nil && !g.fleet.Healthy():
		// Other servers may soon judge this one gone and give back what it
		// holds: admit nothing until its membership is current again.
		return fmt.Errorf("%w: this server cannot renew its fleet membership", errBusy)
	case g.bySession[f.sessionKey()] >= g.opts.MaxInflightPerSession:
		return protocol.Errorf(errRateLimited, "%d requests in flight on this session", g.opts.MaxInflightPerSession)
	case g.byUser[f.userKey()] >= g.opts.MaxInflightPerUser:
		return protocol.Errorf(errRateLimited, "%d requests in flight for this user", g.opts.MaxInflightPerUser)
	case g.opts.MaxInflightPerTenant > 0 && g.byTenant[f.caller.Principal.Tenant] >= g.opts.MaxInflightPerTenant:
		return fmt.Errorf("%w: tenant at its in-flight cap", ErrAtCapacity)
	case g.inflight >= g.opts.MaxInflight:
		return fmt.Errorf("%w: server at its in-flight cap of %d", ErrAtCapacity, g.opts.MaxInflight)
	}
	g.inflight++
	g.byTenant[f.caller.Principal.Tenant]++
	g.byUser[f.userKey()]++
	g.bySession[f.sessionKey()]++
	return nil
}

// release gives back the slots acquire took.
func (g *Gateway) release(f *flight) {
	g.metrics.RequestFinished()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.inflight--
	dec(g.byTenant, f.caller.Principal.Tenant)
	dec(g.byUser, f.userKey())
	dec(g.bySession, f.sessionKey())
}

func dec(m map[string]int, k string) {
	if m[k] <= 1 {
		delete(m, k)
		return
	}
	m[k]--
}
