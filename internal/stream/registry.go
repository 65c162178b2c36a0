package stream

import (
	"context"
	"sync"
	"time"
)

// DefaultRetention is how long a finished request stays resumable.
const DefaultRetention = 10 * time.Minute

// Registry holds the logs of this server's requests, keyed by owner and
// request id, and forgets finished ones after the retention window.
type Registry struct {
	retention time.Duration
	now       func() time.Time

	mu   sync.Mutex
	logs map[key]*Log
}

type key struct{ owner, requestID string }

// RegistryOptions configure a Registry; zero values mean the defaults.
type RegistryOptions struct {
	Retention time.Duration    // default DefaultRetention
	Now       func() time.Time // default time.Now
}

// NewRegistry returns an empty registry.
func NewRegistry(o RegistryOptions) *Registry {
	if o.Retention <= 0 {
		o.Retention = DefaultRetention
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Registry{retention: o.Retention, now: o.Now, logs: make(map[key]*Log)}
}

// Create registers a new log for (owner, requestID), or returns the existing
// one with created=false. A rejected log never blocks a new attempt.
func (r *Registry) Create(owner, requestID, bodyHash string) (l *Log, created bool) {
	k := key{owner, requestID}
	r.mu.Lock()
	defer r.mu.Unlock()
	if old, ok := r.logs[k]; ok && !old.Rejected() && !r.expired(old) {
		return old, false
	}
	l = NewLog(owner, requestID, bodyHash)
	r.logs[k] = l
	return l, true
}

// Get returns the owner's log for requestID, if it is known and not expired.
func (r *Registry) Get(owner, requestID string) (*Log, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	l, ok := r.logs[key{owner, requestID}]
	if !ok || l.Rejected() || r.expired(l) {
		return nil, false
	}
	return l, true
}

// Forget drops a log (a rejected request) if it is still the registered one.
func (r *Registry) Forget(l *Log) {
	k := key{l.Owner, l.RequestID}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.logs[k] == l {
		delete(r.logs, k)
	}
}

// Len is the number of logs held.
func (r *Registry) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.logs)
}

func (r *Registry) expired(l *Log) bool {
	ended := l.Ended()
	return !ended.IsZero() && r.now().Sub(ended) > r.retention
}

// Sweep drops every log whose retention has passed and returns how many.
func (r *Registry) Sweep() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for k, l := range r.logs {
		if r.expired(l) || l.Rejected() {
			delete(r.logs, k)
			n++
		}
	}
	return n
}

// Run sweeps on an interval until ctx ends.
func (r *Registry) Run(ctx context.Context) error {
	interval := r.retention / 10
	if interval > time.Minute {
		interval = time.Minute
	}
	if interval < time.Second {
		interval = time.Second
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			r.Sweep()
		}
	}
}
