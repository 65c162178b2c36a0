package fleet

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"
)

// Defaults of Options, written once.
const (
	// DefaultHeartbeat is how often a server renews its membership item
	// and reads the others'.
	DefaultHeartbeat = 2 * time.Second
	// DefaultStaleAfter is how long a member's heartbeat may stay
	// unchanged, while this server reads the table without a failure,
	// before the member is gone. Five heartbeats: a slow store or a long
	// pause of a few seconds never makes a live server look dead, and a
	// killed server's requests are resolved within about 12 s.
	DefaultStaleAfter = 10 * time.Second
	// MaxLoad bounds each load figure an item may claim; a larger one is
	// a malformed item and is ignored.
	MaxLoad = 1_000_000
	// NewMembersPerRead bounds the ids one read takes into the view that
	// it did not know: a table filled with thousands of items (a crashed
	// deploy's leftovers, or forged) enters the view, and is judged, a
	// bounded slice per heartbeat, never all at once.
	NewMembersPerRead = 64
	// MarksPerRead bounds the members one read marks gone (and hands to
	// OnGone); the rest wait for the next read.
	MarksPerRead = 64
	// MarkConcurrency bounds the MarkGone (and Forget) calls in flight at
	// once.
	MarkConcurrency = 4
	// GoneRetention is how long a gone item stays in the table once this
	// server has seen it gone; then this server deletes it (Forget), at
	// most MarksPerRead a read. Every heartbeat's Scan reads every item,
	// so gone items must not pile up for the TTL's hour (or the days
	// DynamoDB may take to act on it). Far longer than any pause of a live
	// server judged gone: it learns from its item that it was expelled.
	GoneRetention = 10 * time.Minute
)

// Errors of a Store. Match them with errors.Is.
var (
	// ErrGone: the member's item says it is gone (another server judged
	// it dead, or it left); Put refuses to revive it.
	ErrGone = errors.New("fleet member declared gone")
	// ErrChanged: MarkGone's condition failed: the member renewed its
	// heartbeat since it was read.
	ErrChanged = errors.New("fleet member changed")
	// ErrUnavailable: the store failed (throttled, unreachable, timed out).
	ErrUnavailable = errors.New("fleet store unavailable")
)

// Item is one membership item as stored.
type Item struct {
	Member
	// Gone: the member left (a clean stop) or was judged dead.
	Gone bool
	// Expires is the item's TTL, long past any use of it.
	Expires time.Time
}

// Store keeps the membership items. DynamoStore is the one
// implementation; Membership without a store is a fleet of one.
type Store interface {
	// Put writes the item unless the stored item says it is gone
	// (ErrGone).
	Put(ctx context.Context, it Item) error
	// List reads every item (strongly consistent).
	List(ctx context.Context) ([]Item, error)
	// MarkGone marks id gone, conditional on its stored heartbeat still
	// being heartbeat (ErrChanged otherwise); a zero heartbeat marks it
	// unconditionally (a clean stop). expires is the item's new TTL.
	MarkGone(ctx context.Context, id string, heartbeat, expires time.Time) error
	// Forget deletes id's item if it is marked gone (ErrChanged if not).
	Forget(ctx context.Context, id string) error
}

// Options configure a Membership. Zero values mean the defaults.
type Options struct {
	// ID is this server's instance id (unique per process).
	ID string
	// Started is when this process started (default: now).
	Started time.Time
	// Heartbeat is the renewal interval (JETWAY_FLEET_HEARTBEAT).
	Heartbeat time.Duration
	// StaleAfter is the stale bound (JETWAY_FLEET_STALE_AFTER); at least
	// three heartbeats.
	StaleAfter time.Duration
	// Load reports this server's load for its item (default: zero).
	Load func() Load
	// Serving reports whether this server is seen serving (the load
	// balancer checks it, or it has held a session) for its item
	// (default: true).
	Serving func() bool
	// Now replaces the clock in tests.
	Now func() time.Time
}

// Membership keeps this server's item current and judges the others'.
// Liveness is decided by observation: a member is gone when its item says
// so, when it is missing from a successful read made after the moment
// the caller asks about, or when its heartbeat has not changed for
// StaleAfter during which every read of the table succeeded. A read that
// fails restarts that clock, so a store that stalls for everyone (or for
// this server alone) never makes live members look dead.
type Membership struct {
	store  Store
	o      Options
	logger *zap.Logger

	mu        sync.Mutex
	members   map[string]*seen
	observing time.Time // first successful read since the last failed one
	listedAt  time.Time // start of the last successful read
	readAt    time.Time // end of the last successful read
	wroteAt   time.Time // last successful write of our own item
	gone      map[string]bool
	draining  bool
	expelled  bool
	onGone    []func(id string)
	onExpel   []func()
}

// seen is what this server knows of one member.
type seen struct {
	item      Item
	changedAt time.Time // local time its heartbeat was seen to change
	missing   bool      // absent from the last read (deleted): judged as a heartbeat that stopped
	served    bool      // it has been seen serving (Member.Serving or a session): it joins the mean
	malformed string    // why its item is not trusted for the load view; "" when it is
	warned    bool      // a malformed item was logged
}

// NewMembership returns a Membership over store; a nil store is a fleet of
// one (this server, never gone).
func NewMembership(store Store, o Options, logger *zap.Logger) *Membership {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Heartbeat <= 0 {
		o.Heartbeat = DefaultHeartbeat
	}
	if o.StaleAfter <= 0 {
		o.StaleAfter = DefaultStaleAfter
	}
	o.StaleAfter = max(o.StaleAfter, 3*o.Heartbeat)
	if o.Started.IsZero() {
		o.Started = o.Now()
	}
	if o.Load == nil {
		o.Load = func() Load { return Load{} }
	}
	if o.Serving == nil {
		o.Serving = func() bool { return true }
	}
	return &Membership{store: store, o: o, logger: logger, members: map[string]*seen{}, gone: map[string]bool{}}
}

// Self implements Roster.
func (m *Membership) Self() string { return m.o.ID }

// StaleAfter is the bound after which a silent member is gone.
func (m *Membership) StaleAfter() time.Duration { return m.o.StaleAfter }

// OnGone calls f (in Run's goroutine, once per member) when a member is
// judged gone. Call before Run.
func (m *Membership) OnGone(f func(id string)) { m.onGone = append(m.onGone, f) }

// OnExpelled calls f once when this server learns that the fleet judged
// it gone (its item was marked gone while it ran): it must stop taking
// work, since other servers have ended its requests. Call before Run.
func (m *Membership) OnExpelled(f func()) { m.onExpel = append(m.onExpel, f) }

// SetDraining marks this server draining in its next heartbeat.
func (m *Membership) SetDraining() {
	m.mu.Lock()
	m.draining = true
	m.mu.Unlock()
}

// Healthy reports whether this server's own item was renewed within half
// the stale bound: past that it must admit nothing new (other servers may
// soon judge it gone and give back what it holds). Always true without a
// store.
func (m *Membership) Healthy() bool {
	if m.store == nil {
		return true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return !m.expelled && m.o.Now().Sub(m.wroteAt) < m.o.StaleAfter/2
}

// Members implements Roster: the members not gone, this server included,
// with sane items.
func (m *Membership) Members() []Member {
	load := m.o.Load() // not under m.mu: the load's own locks may ask this membership (Healthy)
	m.mu.Lock()
	defer m.mu.Unlock()
	self := Member{ID: m.o.ID, Started: m.o.Started, Heartbeat: m.wroteAt, Load: load, Draining: m.draining, Serving: true}
	out := []Member{self}
	if m.store == nil {
		return out
	}
	now := m.o.Now()
	for id, s := range m.members {
		if id == m.o.ID || s.missing || s.malformed != "" || s.item.Gone || m.gone[id] || m.staleLocked(s, now) {
			continue
		}
		mem := s.item.Member
		mem.Serving = s.served
		out = append(out, mem)
	}
	return out
}

// Gone reports whether server is known to be gone, for a question about
// something it owned since `since` (by the owner's clock: it wrote its
// item before that). A member whose item disappeared (deleted by hand, or
// never seen) is gone only once reads that did not list it have covered
// the stale bound: a deleted item is rewritten by a live owner at its
// next heartbeat, so one read without it proves nothing.
func (m *Membership) Gone(server string, since time.Time) bool {
	if m.store == nil || server == m.o.ID {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.gone[server] {
		return true
	}
	now := m.o.Now()
	s, ok := m.members[server]
	if !ok {
		if m.listedAt.IsZero() || !m.listedAt.After(since) {
			return false
		}
		from := since
		if m.observing.After(from) {
			from = m.observing
		}
		return now.Sub(from) >= m.o.StaleAfter
	}
	return s.item.Gone || m.staleLocked(s, now)
}

// staleLocked: the heartbeat stayed unchanged for StaleAfter of
// uninterrupted observation. m.mu is held.
func (m *Membership) staleLocked(s *seen, now time.Time) bool {
	from := s.changedAt
	if m.observing.After(from) {
		from = m.observing
	}
	return !from.IsZero() && now.Sub(from) >= m.o.StaleAfter
}

// Join writes this server's first item; a server serves nothing before
// it is a member, so any record it owns is younger than its item.
func (m *Membership) Join(ctx context.Context) error {
	if m.store == nil {
		return nil
	}
	if err := m.beat(ctx); err != nil {
		return fmt.Errorf("join the fleet: %w", err)
	}
	return nil
}

// Leave marks this server gone at a clean stop, after its requests ended:
// the others need not wait for the stale bound.
func (m *Membership) Leave(ctx context.Context) error {
	if m.store == nil {
		return nil
	}
	now := m.o.Now()
	if err := m.store.MarkGone(ctx, m.o.ID, time.Time{}, now.Add(time.Hour)); err != nil {
		return fmt.Errorf("leave the fleet: %w", err)
	}
	return nil
}

// Run renews this server's item and reads and judges the others' every
// heartbeat until ctx ends. Renewing and judging run on separate
// goroutines on purpose: however long judging takes (a table full of
// stale items, a slow store), this server's own renewal keeps its period,
// and a failed write does not stop the reads, nor the reverse.
func (m *Membership) Run(ctx context.Context) error {
	if m.store == nil {
		<-ctx.Done()
		return ctx.Err()
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		every(ctx, m.o.Heartbeat, func() {
			if err := m.beat(ctx); err != nil {
				m.logger.Warn("fleet_heartbeat_failed", zap.Error(err))
			}
		})
	}()
	every(ctx, m.o.Heartbeat, func() { m.judge(ctx) })
	wg.Wait()
	return ctx.Err()
}

// every calls f each period until ctx ends; a call longer than the
// period delays only the next call of f.
func every(ctx context.Context, period time.Duration, f func()) {
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		f()
	}
}

// Refresh does one round of Run in order: renew, then read and judge.
func (m *Membership) Refresh(ctx context.Context) {
	if err := m.beat(ctx); err != nil {
		m.logger.Warn("fleet_heartbeat_failed", zap.Error(err))
	}
	m.judge(ctx)
}

// judge reads the table, marks the members newly judged gone, and hands
// each to OnGone.
func (m *Membership) judge(ctx context.Context) {
	for _, id := range m.read(ctx) {
		m.logger.Warn("fleet_member_gone", zap.String("member", id))
		for _, f := range m.onGone {
			f(id)
		}
	}
}

// callTimeout bounds one store call: a heartbeat.
func (m *Membership) callTimeout() time.Duration { return m.o.Heartbeat }

func (m *Membership) beat(ctx context.Context) error {
	now := m.o.Now()
	load, serving := m.o.Load(), m.o.Serving() // not under m.mu (see Members)
	m.mu.Lock()
	it := Item{Member: Member{ID: m.o.ID, Started: m.o.Started, Heartbeat: now, Load: load, Draining: m.draining, Serving: serving},
		Expires: now.Add(time.Hour)}
	expelled := m.expelled
	m.mu.Unlock()
	if expelled {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, m.callTimeout())
	err := m.store.Put(cctx, it)
	cancel()
	switch {
	case errors.Is(err, ErrGone):
		m.mu.Lock()
		m.expelled = true
		m.mu.Unlock()
		m.logger.Error("fleet_expelled", zap.String("member", m.o.ID))
		for _, f := range m.onExpel {
			f()
		}
		return err
	case err != nil:
		return err
	}
	m.mu.Lock()
	m.wroteAt = now
	m.mu.Unlock()
	return nil
}

// read lists the items and returns the members newly judged gone (each
// marked gone in the store, so that a server judged dead while alive
// learns it). It takes at most NewMembersPerRead unknown ids into the
// view and judges at most MarksPerRead members, MarkConcurrency marks at
// a time. It judges nobody while this server's own item is not renewed
// in time, or after a gap in its reads: then the slowness may be this
// server's or the store's, not the others'.
func (m *Membership) read(ctx context.Context) []string {
	start := m.o.Now()
	cctx, cancel := context.WithTimeout(ctx, m.callTimeout())
	items, err := m.store.List(cctx)
	cancel()
	now := m.o.Now()
	m.mu.Lock()
	if err != nil {
		m.observing = time.Time{} // the clock restarts at the next good read
		m.mu.Unlock()
		m.logger.Warn("fleet_read_failed", zap.Error(err))
		return nil
	}
	if m.observing.IsZero() || now.Sub(m.readAt) > 2*m.o.Heartbeat+m.callTimeout() {
		// Not observed in between (this server was busy or paused): a
		// heartbeat unchanged across the gap proves nothing.
		m.observing = now
	}
	m.listedAt, m.readAt = start, now
	present := make(map[string]bool, len(m.members))
	admitted := 0
	for _, it := range items {
		if it.ID == "" || it.ID == m.o.ID {
			continue
		}
		s := m.members[it.ID]
		if s == nil {
			if admitted == NewMembersPerRead {
				continue // the next read takes it
			}
			admitted++
			s = &seen{changedAt: now}
			m.members[it.ID] = s
		}
		present[it.ID] = true
		if !it.Heartbeat.Equal(s.item.Heartbeat) || it.Gone != s.item.Gone {
			s.changedAt = now
		}
		s.item, s.missing = it, false
		// A malformed item still tells whether its server renews it (so
		// liveness holds), but its load and start are not trusted.
		s.malformed = malformed(it, now, m.o.StaleAfter)
		if s.malformed != "" && !s.warned {
			s.warned = true
			m.logger.Warn("fleet_member_ignored", zap.String("member", it.ID), zap.String("why", s.malformed))
		}
		if s.malformed == "" && !it.Gone && (it.Serving || it.Load.Sessions > 0) {
			s.served = true
		}
	}
	for id, s := range m.members {
		if present[id] {
			continue
		}
		// Missing: its heartbeat is as stopped; it is judged at the stale
		// bound like any silent member, and forgotten once long gone.
		s.missing = true
		if m.gone[id] && now.Sub(s.changedAt) > 2*m.o.StaleAfter {
			delete(m.members, id)
			delete(m.gone, id)
		}
	}
	judging := m.o.Now().Sub(m.wroteAt) < m.o.StaleAfter/2
	var newlyGone []string
	var marks []Item
	for id, s := range m.members {
		if !judging || len(newlyGone) == MarksPerRead {
			break
		}
		if m.gone[id] {
			continue
		}
		if s.item.Gone || m.staleLocked(s, now) {
			m.gone[id] = true
			newlyGone = append(newlyGone, id)
			if !s.item.Gone {
				it := s.item
				if s.missing {
					it = Item{Member: Member{ID: id}} // no item to match: mark it unconditionally
				}
				marks = append(marks, it)
			}
		}
	}
	var forget []string
	for id, s := range m.members {
		if len(forget) == MarksPerRead {
			break
		}
		if !s.missing && s.item.Gone && m.gone[id] && now.Sub(s.changedAt) >= GoneRetention {
			forget = append(forget, id)
		}
	}
	m.mu.Unlock()
	changed := m.mark(ctx, marks, now.Add(time.Hour))
	for _, id := range changed {
		newlyGone = remove(newlyGone, id)
	}
	m.forget(ctx, forget)
	return newlyGone
}

// forget deletes long-gone items, MarkConcurrency at a time.
func (m *Membership) forget(ctx context.Context, ids []string) {
	bounded(len(ids), func(i int) {
		cctx, cancel := context.WithTimeout(ctx, m.callTimeout())
		err := m.store.Forget(cctx, ids[i])
		cancel()
		if err != nil && !errors.Is(err, ErrChanged) {
			m.logger.Warn("fleet_forget_failed", zap.String("member", ids[i]), zap.Error(err))
		}
	})
}

// bounded calls f(0) ... f(n-1), MarkConcurrency at a time, and returns
// when all have returned.
func bounded(n int, f func(i int)) {
	var wg sync.WaitGroup
	slots := make(chan struct{}, MarkConcurrency)
	for i := range n {
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			f(i)
		}()
	}
	wg.Wait()
}

// mark marks items gone, MarkConcurrency at a time, and returns the ids
// that renewed after all (not gone).
func (m *Membership) mark(ctx context.Context, marks []Item, expires time.Time) []string {
	var (
		mu      sync.Mutex
		changed []string
	)
	bounded(len(marks), func(i int) {
		it := marks[i]
		cctx, cancel := context.WithTimeout(ctx, m.callTimeout())
		err := m.store.MarkGone(cctx, it.ID, it.Heartbeat, expires)
		cancel()
		switch {
		case errors.Is(err, ErrChanged):
			// It renewed after all: not gone.
			m.mu.Lock()
			delete(m.gone, it.ID)
			m.mu.Unlock()
			mu.Lock()
			changed = append(changed, it.ID)
			mu.Unlock()
		case err != nil:
			m.logger.Warn("fleet_mark_gone_failed", zap.String("member", it.ID), zap.Error(err))
		}
	})
	return changed
}

func remove(ids []string, id string) []string {
	out := ids[:0]
	for _, x := range ids {
		if x != id {
			out = append(out, x)
		}
	}
	return out
}

// malformed says why an item cannot be trusted ("" when it can): a
// heartbeat or start from the future, or a load past MaxLoad.
func malformed(it Item, now time.Time, stale time.Duration) string {
	switch {
	case it.Heartbeat.IsZero() || it.Started.IsZero():
		return "no heartbeat or start"
	case it.Heartbeat.After(now.Add(stale)) || it.Started.After(now.Add(stale)):
		return "from the future"
	case it.Load.Sessions < 0 || it.Load.Streams < 0 || it.Load.InFlight < 0 ||
		it.Load.Sessions > MaxLoad || it.Load.Streams > MaxLoad || it.Load.InFlight > MaxLoad:
		return "load out of bounds"
	}
	return ""
}
