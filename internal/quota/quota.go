package quota

import (
	"context"
	"errors"
	"fmt"
	"math"
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

// Scope kinds.
const (
	KindTenant = "tenant"
	KindApp    = "app"
	KindUser   = "user"
)

// Scope is what a limit applies to: a tenant, an app of a tenant, or one
// user of an app.
type Scope struct {
	// Kind is KindTenant, KindApp or KindUser.
	Kind string
	// Key identifies the scope within its kind; see TenantScope, AppScope
	// and UserScope.
	Key string
}

// TenantScope is the scope of a whole tenant.
func TenantScope(tenant string) Scope { return Scope{Kind: KindTenant, Key: tenant} }

// AppScope is the scope of one app of a tenant. Tenant and app ids never
// contain '/' (internal/config checks), so keys cannot collide.
func AppScope(tenant, app string) Scope { return Scope{Kind: KindApp, Key: tenant + "/" + app} }

// UserScope is the scope of one user (the JWT sub) of an app.
func UserScope(tenant, app, user string) Scope {
	return Scope{Kind: KindUser, Key: tenant + "/" + app + "/" + user}
}

// String formats the scope as "kind:key".
func (s Scope) String() string { return s.Kind + ":" + s.Key }

// rank orders scopes narrowest first.
func (s Scope) rank() int {
	switch s.Kind {
	case KindUser:
		return 0
	case KindApp:
		return 1
	case KindTenant:
		return 2
	}
	return 3
}

// Amount is a quantity of each metric: tokens (input + output), requests,
// and cost in micro-dollars (1 USD = 1,000,000).
type Amount struct {
	Tokens   int64
	Requests int64
	MicroUSD int64
}

// Add returns a+b.
func (a Amount) Add(b Amount) Amount {
	return Amount{a.Tokens + b.Tokens, a.Requests + b.Requests, a.MicroUSD + b.MicroUSD}
}

// Sub returns a-b.
func (a Amount) Sub(b Amount) Amount {
	return Amount{a.Tokens - b.Tokens, a.Requests - b.Requests, a.MicroUSD - b.MicroUSD}
}

// IsZero reports whether every metric is zero.
func (a Amount) IsZero() bool { return a == Amount{} }

func (a Amount) negative() bool { return a.Tokens < 0 || a.Requests < 0 || a.MicroUSD < 0 }

// MicroUSD converts dollars (as in the configuration's usd limits and
// model prices) to micro-dollars, rounding to the nearest.
func MicroUSD(usd float64) int64 { return int64(math.Round(usd * 1e6)) }

// Limit caps a scope's usage per window. A zero metric is not limited; at
// least one must be positive.
type Limit struct {
	Scope    Scope
	Window   Window
	Tokens   int64
	Requests int64
	MicroUSD int64
}

// Max returns the limit's caps as an Amount (zero = not limited).
func (l Limit) Max() Amount { return Amount{l.Tokens, l.Requests, l.MicroUSD} }

func (l Limit) validate() error {
	switch {
	case !l.Window.Valid():
		return fmt.Errorf("%w: %s: unknown window %q", ErrInvalidLimit, l.Scope, l.Window)
	case l.Scope.Kind == "" || l.Scope.Key == "" || strings.Contains(l.Scope.Kind, "#"):
		return fmt.Errorf("%w: bad scope %q", ErrInvalidLimit, l.Scope)
	case l.Max().negative():
		return fmt.Errorf("%w: %s %s: negative limit", ErrInvalidLimit, l.Scope, l.Window)
	case l.Max().IsZero():
		return fmt.Errorf("%w: %s %s: limit sets no metric", ErrInvalidLimit, l.Scope, l.Window)
	}
	return nil
}

// fits reports whether used+n stays within every positive cap of limit.
func fits(used, n, limit Amount) bool {
	return (limit.Tokens <= 0 || used.Tokens+n.Tokens <= limit.Tokens) &&
		(limit.Requests <= 0 || used.Requests+n.Requests <= limit.Requests) &&
		(limit.MicroUSD <= 0 || used.MicroUSD+n.MicroUSD <= limit.MicroUSD)
}

// ExpiryGrace is how long after its window ends a counter item may be
// forgotten (the DynamoDB TTL attribute is window end + ExpiryGrace).
const ExpiryGrace = 24 * time.Hour

// Item names one counter: a scope's usage in one window instance.
type Item struct {
	Scope  Scope
	Window Window
	// Start is the window instance's start (UTC), see Window.Bounds.
	Start time.Time
}

// Key is the item's storage key, for example
// "tenant#contoso#hour#2026-11-29T19" or
// "user#contoso/support-assistant/alice#minute#2026-11-29T19:07".
// Kind never contains '#' and the last two fields have fixed forms, so
// keys are unambiguous whatever the scope key holds.
func (it Item) Key() string {
	return it.Scope.Kind + "#" + it.Scope.Key + "#" + string(it.Window) + "#" + it.Window.label(it.Start)
}

// End is when the item's window ends and its usage resets.
func (it Item) End() time.Time {
	_, end := it.Window.Bounds(it.Start)
	return end
}

// Expires is when a store may forget the item.
func (it Item) Expires() time.Time { return it.End().Add(ExpiryGrace) }

// Store keeps usage counters, one item per (scope, window, window start),
// each with one counter per metric. Every method changes or reads exactly
// one item, atomically; Quota builds multi-item reservations on top.
// MemoryStore and DynamoStore implement it with identical semantics.
type Store interface {
	// Reserve adds n to the item's counters if, for every metric whose
	// limit is positive, used+n <= limit, and returns the counters after
	// the add. When the item does not fit it changes nothing and returns
	// an error matching ErrExceeded together with the counters as they
	// were (best effort: zero when the store could not tell). Any other
	// error means the store failed; nothing was added.
	Reserve(ctx context.Context, it Item, n, limit Amount) (Amount, error)
	// Add adds delta (negative to refund) unconditionally and returns the
	// counters after.
	Add(ctx context.Context, it Item, delta Amount) (Amount, error)
	// Get returns the item's counters; zero for an unknown or expired item.
	Get(ctx context.Context, it Item) (Amount, error)

	// WriteLease applies w (see LeaseWrite) in one atomic step and returns
	// the item's state after it. When w's condition on the lease fails it
	// returns ErrLeaseConflict, when a grant does not fit ErrExceeded, each
	// with the state as it was (best effort). Any other error may or may
	// not have applied (an ambiguous failure): the caller reads the item
	// and compares the lease's Seq.
	WriteLease(ctx context.Context, it Item, w LeaseWrite) (ItemState, error)
	// ReclaimLease removes the lease l of another owner if it still has
	// l.Seq and expired before now, subtracting Granted - Committed from
	// the item's counters; ErrLeaseConflict (with the state) otherwise.
	ReclaimLease(ctx context.Context, it Item, l Lease, now time.Time, keep Amount) (ItemState, error)
	// ReadItem returns the item's counters and leases; zero for an
	// unknown or expired item.
	ReadItem(ctx context.Context, it Item) (ItemState, error)
}

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
	leases *leases // nil: leases are off
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
	if opts.Lease.Owner != "" {
		q.leases = newLeases(q, opts.Lease)
		q.opts.Lease = q.leases.opts
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
	leases      []*lease // per item: the lease it was admitted from, in this process; nil otherwise
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
	r.leases = make([]*lease, 0, len(planned))
	for _, p := range planned {
		if l := q.leaseFor(p); l != nil {
			used, epoch, err := l.reserve(ctx, a)
			if err != nil {
				q.compensate(ctx, r)
				if errors.Is(err, ErrExceeded) {
					return nil, exceeded(p, a, used, now)
				}
				return nil, fmt.Errorf("reserve %s: %w", requestID, err)
			}
			r.items = append(r.items, ReservedItem{Limit: p.limit, Item: p.item, UsedAfter: used, LeaseOwner: q.opts.Lease.Owner,
				LeaseEpoch: epoch})
			r.leases = append(r.leases, l)
			continue
		}
		var used Amount
		err := q.call(ctx, func(ctx context.Context) (err error) {
			used, err = q.store.Reserve(ctx, p.item, a, p.limit.Max())
			return err
		})
		if err != nil {
			q.compensate(ctx, r)
			if errors.Is(err, ErrExceeded) {
				return nil, exceeded(p, a, used, now)
			}
			return nil, fmt.Errorf("reserve %s: %s: %w", requestID, p.item.Key(), unavailable(err))
		}
		r.items = append(r.items, ReservedItem{Limit: p.limit, Item: p.item, UsedAfter: used})
		r.leases = append(r.leases, nil)
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
	neg := Amount{}.Sub(r.amount)
	for i, it := range r.items {
		if l := r.leases[i]; l != nil {
			l.release(r.amount) // local: the lease's room
			continue
		}
		err := q.retry(cctx, r.requestID, "release", it.Item, func(ctx context.Context) error {
			_, err := q.store.Add(ctx, it.Item, neg)
			return err
		})
		if err != nil && !errors.Is(err, errWindowEnded) {
			q.log.Error("quota_compensation_failed", zap.String("request_id", r.requestID),
				zap.String("item", it.Item.Key()), zap.Int64("tokens", r.amount.Tokens), zap.Error(err))
		}
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
	delta := r.actual.Sub(r.amount)
	for i, it := range r.items {
		if r.itemSettled[i] {
			continue
		}
		if l := r.leaseOf(i); l != nil {
			if err := l.settle(ctx, r.amount, *r.actual); err != nil {
				return fmt.Errorf("settle %s: %s: %w", r.requestID, it.Item.Key(), err)
			}
			r.itemSettled[i] = true
			continue
		}
		// Restored from another server's lease (the gateway restores
		// only the reservations of servers the fleet knows are gone): the
		// whole reservation is in that lease's committed amount, which
		// its owner will never spend, so the refund goes to the item.
		if !delta.IsZero() {
			err := q.retry(ctx, r.requestID, "settle", it.Item, func(ctx context.Context) error {
				_, err := q.store.Add(ctx, it.Item, delta)
				return err
			})
			switch {
			case errors.Is(err, errWindowEnded):
				q.log.Info("quota_settle_skipped", zap.String("request_id", r.requestID),
					zap.String("item", it.Item.Key()), zap.String("reason", "window ended"))
			case err != nil:
				return fmt.Errorf("settle %s: %s: %w", r.requestID, it.Item.Key(), err)
			}
		}
		r.itemSettled[i] = true
	}
	r.settled.Store(true)
	return nil
}

// leaseOf is the lease item i was admitted from, in this process.
func (r *Reservation) leaseOf(i int) *lease {
	if i < len(r.leases) {
		return r.leases[i]
	}
	return nil
}

// leaseFor is this server's lease on p's item, nil when leases are off,
// draining or full.
func (q *Quota) leaseFor(p plannedItem) *lease {
	if q.leases == nil {
		return nil
	}
	return q.leases.get(p)
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

// HeldLease is a lease a server holds on an item, as read from the store.
type HeldLease struct {
	Item  Item
	Lease Lease
}

// GoneLeases reads the leases that owner, a server the fleet judged gone,
// holds on items and on every item this server leases: what ReclaimGone
// takes. Items that cannot be read are logged and left out (their lease
// is reclaimed when it expires).
func (q *Quota) GoneLeases(ctx context.Context, owner string, items []Item) []HeldLease {
	seen := map[string]Item{}
	for _, it := range items {
		seen[it.Key()] = it
	}
	if q.leases != nil {
		q.leases.mu.Lock()
		for _, l := range q.leases.items {
			seen[l.item.Key()] = l.item
		}
		q.leases.mu.Unlock()
	}
	var out []HeldLease
	for _, it := range seen {
		var st ItemState
		err := q.call(ctx, func(ctx context.Context) (err error) {
			st, err = q.store.ReadItem(ctx, it)
			return err
		})
		if err != nil {
			q.log.Warn("quota_gone_lease_read_failed", zap.String("item", it.Key()), zap.String("owner", owner), zap.Error(err))
			continue
		}
		if x, held := st.Leases[owner]; held {
			out = append(out, HeldLease{Item: it, Lease: x})
		}
	}
	return out
}

// ReclaimGone removes the lease h of a server the fleet judged gone, at
// once, keeping in the item's usage only keep: what its requests used
// (the caller counts them: h.Lease.Spent plus the requests it admitted in
// epoch h.Lease.Epoch or later), at most what it committed; the rest of
// the lease goes back. One conditional write on the lease's seq, so of
// several servers reclaiming the same lease exactly one does; the others
// get nil too (the lease is gone) or ErrUnavailable.
func (q *Quota) ReclaimGone(ctx context.Context, h HeldLease, keep Amount) error {
	keep = maxAmount(minAmount(keep, h.Lease.Committed), Amount{})
	at := q.opts.Now()
	if !h.Lease.Expires.Before(at) {
		// Its owner is gone: reclaim it as if it had expired (the seq
		// condition still guards against a renewal).
		at = h.Lease.Expires.Add(time.Millisecond)
	}
	err := q.call(ctx, func(ctx context.Context) error {
		_, err := q.store.ReclaimLease(ctx, h.Item, h.Lease, at, keep)
		return err
	})
	switch {
	case errors.Is(err, ErrLeaseConflict):
		return nil // another server reclaimed it first
	case err != nil:
		return fmt.Errorf("reclaim %s of %s: %w", h.Item.Key(), h.Lease.Owner, err)
	}
	q.log.Info("quota_lease_reclaimed", zap.String("item", h.Item.Key()), zap.String("owner", h.Lease.Owner),
		zap.Int64("tokens", h.Lease.Granted.Tokens-keep.Tokens), zap.Int64("kept", keep.Tokens), zap.String("why", "gone"))
	return nil
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
