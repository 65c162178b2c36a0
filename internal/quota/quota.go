package quota

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/jetway-gateway/jetway/internal/backoff"
)

// Errors. Match them with errors.Is.
var (
	// ErrExceeded: the request does not fit a limit. Reserve returns it
	// as an *ExceededError naming the limit.
	ErrExceeded = errors.New("quota exceeded")
	// ErrUnavailable: the store could not be reached or did not answer in
	// time (after the SDK's own retries). Nothing stays reserved; the
	// request may be retried.
	ErrUnavailable = errors.New("quota store unavailable")
	// ErrInvalidLimit: a limit or amount is malformed (unknown window,
	// negative amount, empty scope).
	ErrInvalidLimit = errors.New("invalid quota limit")
)

// Metric names, as used in ExceededError.Metric.
const (
	MetricTokens   = "tokens"
	MetricRequests = "requests"
	MetricUSD      = "usd" // counted in micro-dollars
)

// ExceededError says which limit refused a reservation.
type ExceededError struct {
	Scope  Scope
	Window Window
	// Metric is MetricTokens, MetricRequests or MetricUSD.
	Metric string
	// RetryAfter is the time until the window resets.
	RetryAfter time.Duration
	// Limit is the cap of Metric; Used is the usage seen when the
	// reservation was refused (0 when the store could not tell), and
	// Requested what the request asked for (micro-dollars for MetricUSD).
	Limit, Used, Requested int64
}

// Error describes the refusal for logs; clients see the protocol's own message.
func (e *ExceededError) Error() string {
	return fmt.Sprintf("quota exceeded: %s %s %s: used %d + requested %d > limit %d (resets in %v)",
		e.Scope, e.Window, e.Metric, e.Used, e.Requested, e.Limit, e.RetryAfter.Round(time.Millisecond))
}

// Unwrap makes errors.Is(err, ErrExceeded) true.
func (e *ExceededError) Unwrap() error { return ErrExceeded }

// Defaults for Options.
const (
	DefaultStoreTimeout      = 2 * time.Second
	DefaultCompensateTimeout = 5 * time.Second
	DefaultRetryBackoff      = 50 * time.Millisecond
	DefaultRetryMaxBackoff   = 5 * time.Second
)

// Options tune a Quota. The zero value means the documented defaults.
type Options struct {
	// Now is the clock that picks window instances; default time.Now.
	Now func() time.Time
	// Logger receives retries, compensation failures and skipped
	// settlements; default zap.NewNop().
	Logger *zap.Logger
	// StoreTimeout bounds each store call, including the SDK's retries
	// within it, so a store that does not answer cannot hang a request;
	// default 2s.
	StoreTimeout time.Duration
	// CompensateTimeout bounds releasing the items already reserved when
	// a later one fails (retried within it, independent of the request's
	// context so a cancelled request still releases); default 5s.
	CompensateTimeout time.Duration
	// RetryBackoff is the first wait between retries of settlement and
	// compensation writes, doubling (with jitter) up to RetryMaxBackoff;
	// defaults 50ms and 5s.
	RetryBackoff    time.Duration
	RetryMaxBackoff time.Duration
	// Lease turns on quota leases (Lease.Owner set); off by default.
	Lease LeaseOptions
}

// Quota reserves and settles usage against limits in a Store.
// It is safe for concurrent use.
type Quota struct {
	store  Store
	opts   Options
	log    *zap.Logger
	admit  admitter // how reservations are paid for: direct, or leases
	direct *direct  // settles reservations restored from elsewhere
	leases *leases  // nil: leases are off
}

// New returns a Quota over store.
func New(store Store, opts Options) *Quota {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.StoreTimeout <= 0 {
		opts.StoreTimeout = DefaultStoreTimeout
	}
	if opts.CompensateTimeout <= 0 {
		opts.CompensateTimeout = DefaultCompensateTimeout
	}
	if opts.RetryBackoff <= 0 {
		opts.RetryBackoff = DefaultRetryBackoff
	}
	if opts.RetryMaxBackoff <= 0 {
		opts.RetryMaxBackoff = DefaultRetryMaxBackoff
	}
	opts.RetryMaxBackoff = max(opts.RetryMaxBackoff, opts.RetryBackoff)
	q := &Quota{store: store, opts: opts, log: opts.Logger}
	q.direct = &direct{q: q}
	q.admit = q.direct
	if opts.Lease.Owner != "" {
		q.leases = newLeases(q, opts.Lease)
		q.opts.Lease = q.leases.opts
		q.admit = q.leases
	}
	return q
}

// ReservedItem is one counter a Reservation holds amount on.
type ReservedItem struct {
	Limit Limit
	Item  Item
	// UsedAfter is the item's usage right after this reservation was
	// added (the "used" of the quota_reserved log line). With leases it
	// is the usage as this server last saw it in the store, counting other
	// servers' leases as used and its own lease's unspent tokens as free.
	UsedAfter Amount
	// LeaseOwner is the server whose lease the reservation was admitted
	// from; empty for a reservation written to the item directly.
	LeaseOwner string
	// LeaseEpoch is the lease's epoch when it admitted the reservation
	// (see Lease.Epoch).
	LeaseEpoch int64
}

// Reservation is usage held for one request until it is settled.
type Reservation struct {
	requestID string
	amount    Amount
	items     []ReservedItem

	lock        chan struct{} // held while settling; a channel so waiting honours ctx
	actual      *Amount       // fixed by the first Settle
	itemSettled []bool
	settled     atomic.Bool
	settlers    []settler // per item: what admitted it, in this process; nil for a restored reservation
}

// RequestID is the id given to Reserve.
func (r *Reservation) RequestID() string { return r.requestID }

// Amount is what was reserved on every item.
func (r *Reservation) Amount() Amount { return r.amount }

// Items returns the reserved items in reservation order.
func (r *Reservation) Items() []ReservedItem { return slices.Clone(r.items) }

// Settled reports whether Settle (or Release) has completed.
func (r *Reservation) Settled() bool { return r.settled.Load() }

// Tightest returns the token window with the least room left after this
// reservation (for the protocol's accepted.quota): its window, its token
// limit and the tokens remaining. The narrower window wins a tie. All zero
// when no token limit applies.
func (r *Reservation) Tightest() (window Window, limit, remaining int64) {
	found := false
	for _, it := range r.items {
		if it.Limit.Tokens <= 0 {
			continue
		}
		rem := max(it.Limit.Tokens-it.UsedAfter.Tokens, 0)
		if !found || rem < remaining {
			window, limit, remaining, found = it.Item.Window, it.Limit.Tokens, rem, true
		}
	}
	return window, limit, remaining
}

// plannedItem is one item to reserve, with the merged caps that apply.
type plannedItem struct {
	limit Limit
	item  Item
}

// plan validates limits, merges limits on the same (scope, window) into
// one item with the smallest cap of each metric, and orders the items
// deterministically: narrowest scope first (user, app, tenant), then
// narrowest window, then scope key. The narrow limits are the likeliest to
// refuse, so refusals cost the fewest writes and compensations, and the
// hot tenant-wide item is written last.
func plan(limits []Limit, now time.Time) ([]plannedItem, error) {
	items := make([]plannedItem, 0, len(limits))
	for _, l := range limits {
		if err := l.validate(); err != nil {
			return nil, err
		}
		start, _ := l.Window.Bounds(now)
		i := slices.IndexFunc(items, func(p plannedItem) bool {
			return p.limit.Scope == l.Scope && p.limit.Window == l.Window
		})
		if i < 0 {
			items = append(items, plannedItem{limit: l, item: Item{Scope: l.Scope, Window: l.Window, Start: start}})
			continue
		}
		m := &items[i].limit
		m.Tokens, m.Requests, m.MicroUSD = minCap(m.Tokens, l.Tokens), minCap(m.Requests, l.Requests), minCap(m.MicroUSD, l.MicroUSD)
	}
	slices.SortFunc(items, func(a, b plannedItem) int {
		if c := a.item.Scope.rank() - b.item.Scope.rank(); c != 0 {
			return c
		}
		if c := a.item.Window.rank() - b.item.Window.rank(); c != 0 {
			return c
		}
		return strings.Compare(a.item.Scope.Key, b.item.Scope.Key)
	})
	return items, nil
}

// minCap is the tighter of two caps where 0 means "no cap".
func minCap(a, b int64) int64 {
	switch {
	case a <= 0:
		return b
	case b <= 0:
		return a
	}
	return min(a, b)
}

// An admitter pays for one item's part of reservations. The limit logic
// (plan, Reserve, compensate, Settle, exceeded) is written once over it;
// direct (direct.go) writes each reservation to the item with one
// conditional write, leases (leases.go) admit from a block of the item
// this server holds.
type admitter interface {
	// admit holds a on p's item. It returns the reserved item with its
	// usage after (UsedAfter) and the settler that releases or settles
	// it. On refusal the error matches ErrExceeded and UsedAfter is the
	// usage seen (best effort); any other error wraps ErrUnavailable and
	// nothing is held.
	admit(ctx context.Context, p plannedItem, a Amount) (ReservedItem, settler, error)
}

// A settler ends one item's part of a reservation the way it was
// admitted. requestID is for logs.
type settler interface {
	// release gives back a reservation of a that was never used, for a
	// request refused at a later item (compensation). Best effort: a
	// failure is logged, and leaves usage over-counted, never overspent.
	release(ctx context.Context, requestID string, it Item, a Amount)
	// settle charges actual instead of reserved: it refunds the
	// difference or charges the extra unconditionally. Nothing is left
	// to correct once the item's window has ended. Errors wrap
	// ErrUnavailable.
	settle(ctx context.Context, requestID string, it Item, reserved, actual Amount) error
}

// Reserve holds a on every limit, or on none. Items are reserved one
// conditional write at a time in a fixed order; when one refuses (or the
// store fails), the items already reserved are released before Reserve
// returns, so a refused request leaves no usage behind. Concurrent
// reservations can never push a counter past its limit.
//
// Errors: an *ExceededError (errors.Is ErrExceeded) naming the first
// limit that refused; ErrUnavailable when the store failed or ctx ended;
// ErrInvalidLimit for malformed limits. requestID is used in logs only:
// the caller makes sure a request reserves once (re-sent requests are
// deduplicated before admission).
func (q *Quota) Reserve(ctx context.Context, requestID string, limits []Limit, a Amount) (*Reservation, error) {
	if a.negative() {
		return nil, fmt.Errorf("reserve %s: %w: negative amount %+v", requestID, ErrInvalidLimit, a)
	}
	now := q.opts.Now()
	planned, err := plan(limits, now)
	if err != nil {
		return nil, fmt.Errorf("reserve %s: %w", requestID, err)
	}
	r := &Reservation{
		requestID: requestID,
		amount:    a,
		items:     make([]ReservedItem, 0, len(planned)),
		lock:      make(chan struct{}, 1),
	}
	r.settlers = make([]settler, 0, len(planned))
	for _, p := range planned {
		it, s, err := q.admit.admit(ctx, p, a)
		if err != nil {
			q.compensate(ctx, r)
			if errors.Is(err, ErrExceeded) {
				return nil, exceeded(p, a, it.UsedAfter, now)
			}
			return nil, fmt.Errorf("reserve %s: %w", requestID, err)
		}
		r.items = append(r.items, it)
		r.settlers = append(r.settlers, s)
	}
	r.itemSettled = make([]bool, len(r.items))
	return r, nil
}

// exceeded builds the error for an item that refused a.
func exceeded(p plannedItem, a, used Amount, now time.Time) *ExceededError {
	e := &ExceededError{Scope: p.item.Scope, Window: p.item.Window, RetryAfter: max(p.item.End().Sub(now), 0)}
	limit := p.limit.Max()
	type metric struct {
		name              string
		used, asked, capv int64
	}
	metrics := []metric{
		{MetricTokens, used.Tokens, a.Tokens, limit.Tokens},
		{MetricRequests, used.Requests, a.Requests, limit.Requests},
		{MetricUSD, used.MicroUSD, a.MicroUSD, limit.MicroUSD},
	}
	// The metric that overflows; when the store could not say (or the
	// usage changed since), the first limited metric.
	pick := -1
	for i, m := range metrics {
		if m.capv > 0 && m.used+m.asked > m.capv {
			pick = i
			break
		}
	}
	if pick < 0 {
		pick = slices.IndexFunc(metrics, func(m metric) bool { return m.capv > 0 })
	}
	m := metrics[pick]
	e.Metric, e.Used, e.Requested, e.Limit = m.name, m.used, m.asked, m.capv
	return e
}

// compensate releases what r holds so far, on a context that survives the
// request's cancellation but is bounded by CompensateTimeout. A release
// that still fails leaves usage over-counted until the window ends: the
// error is on the side of refusing, never of overspending.
func (q *Quota) compensate(ctx context.Context, r *Reservation) {
	if len(r.items) == 0 {
		return
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), q.opts.CompensateTimeout)
	defer cancel()
	for i, it := range r.items {
		q.settlerOf(r, i).release(cctx, r.requestID, it.Item, r.amount)
	}
}

// Settle charges actual instead of the reserved amount on every item:
// it refunds the difference, or charges the extra unconditionally when
// actual is larger (usage that happened is always recorded). Each item
// needing a change takes one write, retried with backoff until it succeeds,
// its window has ended (nothing left to correct), or ctx ends (the caller
// passes a context ending at the window end). Settling a reservation again
// is a no-op; after a Settle that returned an error, calling it again
// retries the items left (with the first call's actual). Errors wrap
// ErrUnavailable.
func (q *Quota) Settle(ctx context.Context, r *Reservation, actual Amount) error {
	if r == nil || r.settled.Load() {
		return nil
	}
	select {
	case r.lock <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("settle %s: %w", r.requestID, unavailable(ctx.Err()))
	}
	defer func() { <-r.lock }()
	if r.settled.Load() {
		return nil
	}
	if r.actual == nil {
		a := Amount{max(actual.Tokens, 0), max(actual.Requests, 0), max(actual.MicroUSD, 0)}
		r.actual = &a
	}
	for i, it := range r.items {
		if r.itemSettled[i] {
			continue
		}
		if err := q.settlerOf(r, i).settle(ctx, r.requestID, it.Item, r.amount, *r.actual); err != nil {
			return fmt.Errorf("settle %s: %s: %w", r.requestID, it.Item.Key(), err)
		}
		r.itemSettled[i] = true
	}
	r.settled.Store(true)
	return nil
}

// settlerOf is what settles item i of r: what admitted it, in this
// process. A reservation restored from elsewhere is settled on the item
// directly, also when a lease admitted it: the gateway restores only the
// reservations of servers the fleet knows are gone, whose lease's
// committed amount counts the whole reservation and will never be spent,
// so the refund goes to the item.
func (q *Quota) settlerOf(r *Reservation, i int) settler {
	if i < len(r.settlers) {
		return r.settlers[i]
	}
	return q.direct
}

// Release gives back everything r holds (Settle with zero usage), for a
// request that never reached the model.
func (q *Quota) Release(ctx context.Context, r *Reservation) error {
	return q.Settle(ctx, r, Amount{})
}

// Usage returns the current usage of a scope in the window holding now.
func (q *Quota) Usage(ctx context.Context, scope Scope, w Window) (Amount, error) {
	if !w.Valid() {
		return Amount{}, fmt.Errorf("usage: %w: unknown window %q", ErrInvalidLimit, w)
	}
	start, _ := w.Bounds(q.opts.Now())
	var used Amount
	err := q.call(ctx, func(ctx context.Context) (err error) {
		used, err = q.store.Get(ctx, Item{Scope: scope, Window: w, Start: start})
		return err
	})
	if err != nil {
		return Amount{}, fmt.Errorf("usage %s %s: %w", scope, w, unavailable(err))
	}
	return used, nil
}

// call runs one store call bounded by StoreTimeout.
func (q *Quota) call(ctx context.Context, f func(context.Context) error) error {
	cctx, cancel := context.WithTimeout(ctx, q.opts.StoreTimeout)
	defer cancel()
	return f(cctx)
}

// errWindowEnded stops retrying a write whose window is over.
var errWindowEnded = errors.New("window ended")

// retry runs f until it succeeds, the item's window ends, or ctx ends.
func (q *Quota) retry(ctx context.Context, requestID, op string, it Item, f func(context.Context) error) error {
	p := backoff.Policy{Base: q.opts.RetryBackoff, Max: q.opts.RetryMaxBackoff, Jitter: backoff.Equal, Until: it.End(), Now: q.opts.Now}
	for attempt := 1; ; attempt++ {
		err := q.call(ctx, f)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return unavailable(err)
		}
		q.log.Warn("quota_store_retry", zap.String("request_id", requestID), zap.String("op", op),
			zap.String("item", it.Key()), zap.Int("attempt", attempt), zap.Error(err))
		if werr := p.Wait(ctx, attempt); errors.Is(werr, backoff.ErrExhausted) {
			return errWindowEnded
		} else if werr != nil {
			return unavailable(err)
		}
	}
}

// unavailable wraps a store failure (or an ended context) as ErrUnavailable.
func unavailable(err error) error {
	if errors.Is(err, ErrUnavailable) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}
