package stream

import (
	"container/list"
	"context"
	"sync"
	"time"
)

// DefaultRetention is how long a finished request stays resumable.
const DefaultRetention = 10 * time.Minute

// DefaultRetainedBytes bounds the memory of finished answers kept for
// resume on one server (256 MiB).
const DefaultRetainedBytes = 256 << 20

// RetentionObserver hears how much the registry retains; telemetry.Metrics
// implements it. Calls are made without the registry's lock and must not block.
type RetentionObserver interface {
	RetainedAnswerBytes(n int64)
	RetainedAnswerEvicted()
}

// Registry holds the logs of this server's requests, keyed by owner and
// request id, and forgets finished ones after the retention window, or
// sooner, oldest finished first, when the finished answers it holds pass
// its byte budget. With a requests table an evicted answer is still
// resumable from the table; without one it is not_found.
type Registry struct {
	retention time.Duration
	budget    int64
	now       func() time.Time
	observer  RetentionObserver

	mu       sync.Mutex
	logs     map[key]*Log
	finished *list.List // of *retained, oldest finished first
	retained int64      // bytes of the finished logs in the list
}

type key struct{ owner, requestID string }

// retained is one finished log in the eviction order.
type retained struct {
	log   *Log
	bytes int64
}

// RegistryOptions configure a Registry; zero values mean the defaults.
type RegistryOptions struct {
	Retention     time.Duration     // default DefaultRetention
	RetainedBytes int64             // budget of finished answers; default DefaultRetainedBytes
	Observer      RetentionObserver // may be nil
	Now           func() time.Time  // default time.Now
}

// NewRegistry returns an empty registry.
func NewRegistry(o RegistryOptions) *Registry {
	if o.Retention <= 0 {
		o.Retention = DefaultRetention
	}
	if o.RetainedBytes <= 0 {
		o.RetainedBytes = DefaultRetainedBytes
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Registry{retention: o.Retention, budget: o.RetainedBytes, now: o.Now, observer: o.Observer,
		logs: make(map[key]*Log), finished: list.New()}
}

// Create registers a new log for (owner, requestID), of a request that
// arrived at arrived, or returns the existing one with created=false. A
// rejected log never blocks a new attempt.
func (r *Registry) Create(owner, requestID, bodyHash string, arrived time.Time) (l *Log, created bool) {
	k := key{owner, requestID}
	r.mu.Lock()
	defer r.mu.Unlock()
	if old, ok := r.logs[k]; ok && !old.Rejected() && !r.expired(old) {
		return old, false
	}
	if old, ok := r.logs[k]; ok {
		r.unretain(old)
	}
	l = NewLog(owner, requestID, bodyHash, arrived)
	l.onFinish, l.onGrow = r.finish, r.grow
	r.logs[k] = l
	return l, true
}

// grow adds bytes a retained log's prepared events took (a replay in a
// door's encoding) and evicts the oldest finished logs past the budget.
func (r *Registry) grow(l *Log, bytes int64) {
	r.mu.Lock()
	if l.elem == nil {
		r.mu.Unlock()
		return
	}
	l.elem.Value.(*retained).bytes += bytes
	r.retained += bytes
	evicted := r.evict()
	n := r.retained
	r.mu.Unlock()
	r.observe(n, evicted)
}

// evict forgets the oldest finished logs while the budget is passed,
// keeping the newest. Callers hold mu.
func (r *Registry) evict() int {
	var evicted int
	for r.retained > r.budget && r.finished.Len() > 1 {
		old := r.finished.Front().Value.(*retained).log
		r.unretain(old)
		delete(r.logs, key{old.Owner, old.RequestID})
		evicted++
	}
	return evicted
}

// finish puts a log that just finished at the end of the eviction order
// and evicts the oldest finished logs while the budget is passed.
func (r *Registry) finish(l *Log) {
	r.mu.Lock()
	if r.logs[key{l.Owner, l.RequestID}] != l {
		r.mu.Unlock()
		return
	}
	// Read now, not when the log finished: a follower may have compacted
	// its encoding since (its report came before the log was retained).
	bytes := l.RetainedBytes()
	l.elem = r.finished.PushBack(&retained{log: l, bytes: bytes})
	r.retained += bytes
	evicted := r.evict()
	n := r.retained
	r.mu.Unlock()
	r.observe(n, evicted)
}

// unretain takes a log out of the eviction order. Callers hold mu.
func (r *Registry) unretain(l *Log) {
	if l.elem == nil {
		return
	}
	r.retained -= l.elem.Value.(*retained).bytes
	r.finished.Remove(l.elem)
	l.elem = nil
}

func (r *Registry) observe(n int64, evicted int) {
	if r.observer == nil {
		return
	}
	r.observer.RetainedAnswerBytes(n)
	for range evicted {
		r.observer.RetainedAnswerEvicted()
	}
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
	if r.logs[k] == l {
		r.unretain(l)
		delete(r.logs, k)
	}
	n := r.retained
	r.mu.Unlock()
	r.observe(n, 0)
}

// Len is the number of logs held.
func (r *Registry) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.logs)
}

// RetainedBytes is the estimated memory of the finished answers held.
func (r *Registry) RetainedBytes() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.retained
}

func (r *Registry) expired(l *Log) bool {
	ended := l.Ended()
	return !ended.IsZero() && r.now().Sub(ended) > r.retention
}

// Sweep drops every log whose retention has passed and returns how many.
func (r *Registry) Sweep() int {
	r.mu.Lock()
	n := 0
	for k, l := range r.logs {
		if r.expired(l) || l.Rejected() {
			r.unretain(l)
			delete(r.logs, k)
			n++
		}
	}
	bytes := r.retained
	r.mu.Unlock()
	r.observe(bytes, 0)
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
