package quota

import (
	"context"
	"errors"
	"math"
	"sync"
	"time"

	"go.uber.org/zap"
)

// Defaults for LeaseOptions.
const (
	DefaultLeaseTTL         = 30 * time.Second
	DefaultLeaseAhead       = 2 * time.Second
	DefaultLeaseBlock       = 10 * time.Second
	DefaultLeaseFraction    = 0.1
	DefaultLeaseMinRequests = 4
	DefaultLeaseMaxItems    = 10000
	// leaseRateHalfLife is the half-life of the request-rate average that
	// sizes leases.
	leaseRateHalfLife = 5 * time.Second
	// leaseWriteAttempts bounds the attempts of one lease write that meets
	// conflicts (a reclaimed lease is re-created, an ambiguous write read back).
	leaseWriteAttempts = 3
)

// LeaseOptions turn on quota leases (see "Leases" in the package
// documentation). The zero value leaves them off: every reservation is a
// conditional write, as before.
type LeaseOptions struct {
	// Owner is this server's id, unique among live servers (the server
	// id); empty turns leases off.
	Owner string
	// TTL is a lease's life after its last write: an owner that stops
	// writing (killed) has its uncommitted tokens reclaimed by another
	// server after it; an active lease is renewed when half of it is
	// left, an idle one returned (Run). A server admits from its lease
	// only while the lease lives. Default 30s.
	TTL time.Duration
	// Ahead is how much a lease write commits beyond the reservations in
	// flight, in time at the recent request rate (at least MinRequests
	// requests of the current size). Committed tokens are lost until the
	// window ends if the server is killed. Default 2s.
	Ahead time.Duration
	// Block is how much a lease write takes from the limit beyond the
	// reservations in flight, in time at the recent rate (at least Ahead's
	// amount). Default 10s.
	Block time.Duration
	// Fraction caps one write's grant at this fraction of the headroom
	// left (limit - used), so a lease never starves other servers; near
	// the limit leases shrink to exact per-request grants. Default 0.1.
	Fraction float64
	// MinRequests is the smallest commit, in requests of the current
	// request's size (and the smallest grant is MinRequests * Block/Ahead).
	// Default 4.
	MinRequests int
	// MaxItems bounds the items this server holds leases on; a request on
	// another item is reserved with one conditional write, without lease.
	// Default 10000.
	MaxItems int
}

func (o *LeaseOptions) defaults() {
	if o.TTL <= 0 {
		o.TTL = DefaultLeaseTTL
	}
	if o.Ahead <= 0 {
		o.Ahead = DefaultLeaseAhead
	}
	if o.Block <= 0 {
		o.Block = DefaultLeaseBlock
	}
	o.Block = max(o.Block, o.Ahead)
	if o.Fraction <= 0 || o.Fraction > 1 {
		o.Fraction = DefaultLeaseFraction
	}
	if o.MinRequests <= 0 {
		o.MinRequests = DefaultLeaseMinRequests
	}
	if o.MaxItems <= 0 {
		o.MaxItems = DefaultLeaseMaxItems
	}
}

// leases is the admitter with leases on: a server's set of leases, one
// per item, each admitting locally from a block of its item. An item it
// holds no lease on (draining, MaxItems held) is admitted directly.
type leases struct {
	q    *Quota
	opts LeaseOptions

	mu       sync.Mutex
	items    map[string]*lease
	draining bool
	bg       sync.WaitGroup // background writes
}

// lease is this server's lease on one item. Admission is local: a
// request fits when, for every limited metric, charged + inflight + a <=
// committed, the committed amount last written to the store.
type lease struct {
	ls    *leases
	item  Item
	limit Amount
	write chan struct{} // one store write at a time

	mu sync.Mutex
	// As last confirmed by the store.
	seq                int64
	granted, committed Amount
	expires            time.Time
	seenUsed           Amount // the item's used at the last write (all servers)
	others             []Lease
	// Local.
	epoch             int64 // see Lease.Epoch: incremented by every plan
	charged, inflight Amount
	unit              Amount // the last request's amount: the unit of lease sizes
	rate              float64
	rateAt, lastUse   time.Time
	refilling         bool
	closed            bool // drained: tokens returned, nothing admitted
	// resize: the limit was lowered, and the room was granted under the
	// old one; nothing is admitted from it until it is returned (the next
	// reservation returns it before it asks for more).
	resize bool
}

func (l *lease) room() Amount { return l.committed.Sub(l.charged).Sub(l.inflight) }

// lowered reports whether next caps any metric below old (a metric
// that was not limited and now is counts as lowered).
func lowered(old, next Amount) bool {
	low := func(o, n int64) bool { return n > 0 && (o <= 0 || n < o) }
	return low(old.Tokens, next.Tokens) || low(old.Requests, next.Requests) || low(old.MicroUSD, next.MicroUSD)
}

// fitsRoom reports whether a fits room on every limited metric.
func fitsRoom(room, a, limit Amount) bool {
	ok := func(r, n, l int64) bool { return l <= 0 || n <= r }
	return ok(room.Tokens, a.Tokens, limit.Tokens) && ok(room.Requests, a.Requests, limit.Requests) &&
		ok(room.MicroUSD, a.MicroUSD, limit.MicroUSD)
}

func newLeases(q *Quota, o LeaseOptions) *leases {
	o.defaults()
	return &leases{q: q, opts: o, items: make(map[string]*lease)}
}

// get returns the lease on p's item, creating it; nil when MaxItems are
// held or the server is draining.
func (s *leases) get(p plannedItem) *lease {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draining {
		return nil
	}
	key := p.item.Key()
	if l, ok := s.items[key]; ok {
		l.mu.Lock()
		if next := p.limit.Max(); next != l.limit { // the configuration changed
			l.resize = l.resize || lowered(l.limit, next)
			l.limit = next
		}
		l.mu.Unlock()
		return l
	}
	if len(s.items) >= s.opts.MaxItems {
		return nil
	}
	l := &lease{ls: s, item: p.item, limit: p.limit.Max(), write: make(chan struct{}, 1)}
	s.items[key] = l
	return l
}

// admit implements admitter: from the lease on p's item, or directly
// when there is none.
func (s *leases) admit(ctx context.Context, p plannedItem, a Amount) (ReservedItem, settler, error) {
	l := s.get(p)
	if l == nil {
		return s.q.direct.admit(ctx, p, a)
	}
	used, epoch, err := l.reserve(ctx, a)
	it := ReservedItem{Limit: p.limit, Item: p.item, UsedAfter: used}
	if err != nil {
		return it, nil, err
	}
	it.LeaseOwner, it.LeaseEpoch = s.opts.Owner, epoch
	return it, l, nil
}

// admit takes a from the lease's room without a store call. It reports
// whether it did, the epoch it admitted it in, and whether a background
// refill should start.
func (l *lease) admit(a Amount, now time.Time) (ok bool, epoch int64, refill bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || l.resize || !now.Before(l.expires) || !fitsRoom(l.room(), a, l.limit) {
		return false, 0, false
	}
	l.inflight = l.inflight.Add(a)
	l.noteUse(a, now)
	return true, l.epoch, l.lowLocked(now)
}

// noteUse counts a request in the rate average: an exponentially
// decaying count of requests with half-life leaseRateHalfLife. l.mu is held.
func (l *lease) noteUse(a Amount, now time.Time) {
	if !l.rateAt.IsZero() {
		l.rate *= math.Exp2(-now.Sub(l.rateAt).Seconds() / leaseRateHalfLife.Seconds())
	}
	l.rate++
	l.rateAt, l.lastUse, l.unit = now, now, a
}

// perSecond is the recent request rate.
func (l *lease) perSecond() float64 { return l.rate * math.Ln2 / leaseRateHalfLife.Seconds() }

// lowLocked reports whether the room is below the low-water mark (half
// the commit allowance) or the lease is past half its life. l.mu is held.
func (l *lease) lowLocked(now time.Time) bool {
	if l.refilling || l.closed {
		return false
	}
	ahead := l.requests(l.ls.opts.Ahead)
	low := scale(l.unit, ahead/2)
	room := l.room()
	lowOn := func(r, w, lim int64) bool { return lim > 0 && w > 0 && r < w }
	if lowOn(room.Tokens, low.Tokens, l.limit.Tokens) || lowOn(room.Requests, low.Requests, l.limit.Requests) ||
		lowOn(room.MicroUSD, low.MicroUSD, l.limit.MicroUSD) {
		return true
	}
	return l.expires.Sub(now) < l.ls.opts.TTL/2
}

// requests is how many requests d of the recent rate is, at least
// MinRequests per Ahead (a cold lease: MinRequests ahead committed,
// MinRequests * Block/Ahead granted).
func (l *lease) requests(d time.Duration) float64 {
	o := l.ls.opts
	return max(float64(o.MinRequests)*d.Seconds()/o.Ahead.Seconds(), l.perSecond()*d.Seconds())
}

func scale(a Amount, k float64) Amount {
	f := func(v int64) int64 { return int64(math.Ceil(float64(v) * k)) }
	return Amount{f(a.Tokens), f(a.Requests), f(a.MicroUSD)}
}

// reserve admits need on the lease: locally when it fits, otherwise with
// a synchronous write (top-up, then exact, then exact again after
// reclaiming expired leases of other servers). It returns the used amount
// to report (Tightest) and the epoch need was admitted in, or ErrExceeded
// with the item's used.
func (l *lease) reserve(ctx context.Context, need Amount) (usedAfter Amount, epoch int64, err error) {
	now := l.ls.q.opts.Now()
	if ok, epoch, refill := l.admit(need, now); ok {
		if refill {
			l.refill()
		}
		return l.usedAfter(), epoch, nil
	}
	l.mu.Lock()
	resize := l.resize
	l.mu.Unlock()
	if resize {
		// The limit was lowered: what this lease holds was granted under
		// the old one. It goes back first, so every grant from now on is
		// checked against the new limit.
		if err := l.returnUnused(ctx); err != nil {
			return l.usedAfter(), 0, err
		}
	}
	epoch, err = l.store(ctx, writeTopUp, need)
	if errors.Is(err, ErrExceeded) {
		epoch, err = l.store(ctx, writeExact, need)
	}
	if errors.Is(err, ErrExceeded) && l.reclaimExpired(ctx) {
		epoch, err = l.store(ctx, writeExact, need)
	}
	if errors.Is(err, ErrExceeded) {
		// The limit is (nearly) spent: room left in this lease that is
		// smaller than a request would strand there while another
		// server's request could use it. Give it back to the item, where
		// any server's exact grant can take it.
		if rerr := l.returnUnused(ctx); rerr != nil {
			l.ls.q.log.Warn("quota_lease_return_failed", zap.String("item", l.item.Key()), zap.Error(rerr))
		}
	}
	if err != nil {
		l.mu.Lock()
		defer l.mu.Unlock()
		// The used this server sees, without its own unspent lease.
		return l.seenUsed.Sub(l.granted).Add(l.charged).Add(l.inflight), 0, err
	}
	return l.usedAfter(), epoch, nil
}

// usedAfter is the item's usage as this server knows it (see Tightest).
func (l *lease) usedAfter() Amount {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.seenUsed.Sub(l.granted).Add(l.charged).Add(l.inflight)
}

// refill tops the lease up in the background.
func (l *lease) refill() {
	l.mu.Lock()
	if l.refilling {
		l.mu.Unlock()
		return
	}
	l.refilling = true
	l.mu.Unlock()
	s := l.ls
	s.bg.Go(func() {
		defer func() {
			l.mu.Lock()
			l.refilling = false
			l.mu.Unlock()
		}()
		ctx, cancel := context.WithTimeout(context.Background(), s.q.opts.CompensateTimeout)
		defer cancel()
		_, err := l.store(ctx, writeTopUp, Amount{})
		if err != nil && !errors.Is(err, ErrExceeded) && !errors.Is(err, errLeaseClosed) {
			s.q.log.Warn("quota_lease_refill_failed", zap.String("item", l.item.Key()), zap.Error(err))
		}
		l.reclaimExpired(ctx)
	})
}

// settle implements settler: it replaces the reservation a by the usage
// actual on the lease: locally, unless the usage passed what is committed
// (then written at once, unconditionally) or the lease was returned (then
// the refund goes back at once).
func (l *lease) settle(ctx context.Context, _ string, _ Item, a, actual Amount) error {
	l.mu.Lock()
	l.inflight = l.inflight.Sub(a)
	l.charged = l.charged.Add(actual)
	// Usage past the committed amount of a limited metric is written at
	// once; unlimited metrics are only counted, with the next write.
	over := !fitsRoom(l.room(), Amount{}, l.limit)
	closed := l.closed
	l.mu.Unlock()
	if !l.ls.q.opts.Now().Before(l.item.End()) {
		return nil // the window is over: nothing left to correct
	}
	var err error
	switch {
	case closed:
		_, err = l.store(ctx, writeReturn, Amount{})
	case over:
		_, err = l.store(ctx, writeCharge, Amount{})
	}
	return err
}

// release implements settler: a goes back to the lease's room, locally.
func (l *lease) release(_ context.Context, _ string, _ Item, a Amount) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.inflight = l.inflight.Sub(a)
}

// drain returns every lease's unused tokens and stops admission from
// leases; later reservations take one conditional write each.
func (s *leases) drain(ctx context.Context) error {
	s.mu.Lock()
	s.draining = true
	all := make([]*lease, 0, len(s.items))
	for _, l := range s.items {
		all = append(all, l)
	}
	s.mu.Unlock()
	var errs []error
	for _, l := range all {
		l.mu.Lock()
		l.closed = true
		l.mu.Unlock()
		if err := l.returnUnused(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	s.bg.Wait()
	return errors.Join(errs...)
}

// returnUnused gives back what the lease holds beyond its reservations
// in flight (a no-op for a lease that holds nothing).
func (l *lease) returnUnused(ctx context.Context) error {
	l.mu.Lock()
	idle := l.seq == 0 || l.granted == l.charged.Add(l.inflight)
	if idle {
		l.resize = false // it holds nothing beyond its reservations
	}
	l.mu.Unlock()
	if idle {
		return nil
	}
	_, err := l.store(ctx, writeReturn, Amount{})
	return err
}

// tidy forgets leases of ended windows, returns idle leases and renews
// active ones; Run calls it.
func (s *leases) tidy(ctx context.Context) {
	now := s.q.opts.Now()
	s.mu.Lock()
	all := make([]*lease, 0, len(s.items))
	for _, l := range s.items {
		all = append(all, l)
	}
	s.mu.Unlock()
	for _, l := range all {
		l.mu.Lock()
		inflight, ended := !l.inflight.IsZero(), !now.Before(l.item.End())
		idle := now.Sub(l.lastUse) >= s.opts.TTL/2
		renew := l.seq != 0 && !l.closed && l.expires.Sub(now) < s.opts.TTL/2
		l.mu.Unlock()
		switch {
		case ended && !inflight:
			s.forget(l)
		case idle && !inflight && !ended:
			// The lease record stays (its committed is spent usage); the
			// next request here takes a new block with one write.
			if err := l.returnUnused(ctx); err != nil {
				s.q.log.Warn("quota_lease_return_failed", zap.String("item", l.item.Key()), zap.Error(err))
			}
		case renew && !ended:
			l.refill()
		}
	}
}

func (s *leases) forget(l *lease) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.items[l.item.Key()] == l {
		delete(s.items, l.item.Key())
	}
}

// Drain returns the unused tokens of every lease at once (a server that
// stops: SIGTERM) and stops admitting from leases: later reservations take
// one conditional write per item, and settlements of reservations in
// flight return their refunds at once. A no-op without leases.
func (q *Quota) Drain(ctx context.Context) error {
	if q.leases == nil {
		return nil
	}
	return q.leases.drain(ctx)
}

// Run keeps the leases tidy until ctx ends: it returns leases idle for
// half their TTL, renews active ones and forgets ended windows. Without
// Run leases are still renewed by the requests using them. Returns nil.
func (q *Quota) Run(ctx context.Context) error {
	if q.leases == nil {
		<-ctx.Done()
		return nil
	}
	t := time.NewTicker(q.leases.opts.TTL / 4)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			q.leases.tidy(ctx)
		}
	}
}
