package quota_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/jetway-gateway/jetway/internal/quota"
)

// clock is an injectable clock for Options.Now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock(t time.Time) *clock { return &clock{t: t} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

func (c *clock) Add(d time.Duration) { c.Set(c.Now().Add(d)) }

// faultyStore wraps a Store and fails chosen calls, to test compensation,
// retries and ErrUnavailable against both stores.
type faultyStore struct {
	quota.Store
	mu            sync.Mutex
	reserveCalls  int
	failReserveAt int // fail the Nth Reserve call (1-based); 0 = none
	failAdds      int // fail this many Add calls, then succeed
	failAll       bool
	adds          int // Add calls that reached the store
}

var errInjected = errors.New("injected store failure")

func (f *faultyStore) Reserve(ctx context.Context, it quota.Item, n, limit quota.Amount) (quota.Amount, error) {
	f.mu.Lock()
	f.reserveCalls++
	fail := f.failAll || f.reserveCalls == f.failReserveAt
	f.mu.Unlock()
	if fail {
		return quota.Amount{}, errInjected
	}
	return f.Store.Reserve(ctx, it, n, limit)
}

func (f *faultyStore) Add(ctx context.Context, it quota.Item, delta quota.Amount) (quota.Amount, error) {
	f.mu.Lock()
	fail := f.failAll || f.failAdds > 0
	if f.failAdds > 0 {
		f.failAdds--
	}
	if !fail {
		f.adds++
	}
	f.mu.Unlock()
	if fail {
		return quota.Amount{}, errInjected
	}
	return f.Store.Add(ctx, it, delta)
}

func (f *faultyStore) set(fn func(f *faultyStore)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

// A mid-month, mid-day time, so every window has a different time left:
// minute 30s, hour 39m30s, day 13h39m30s, month 16d13h39m30s.
var midMonth = time.Date(2031, 1, 15, 10, 20, 30, 0, time.UTC)

var (
	contoso = quota.TenantScope("contoso")
	support = quota.AppScope("contoso", "support-assistant")
	devApp  = quota.AppScope("contoso", "developer-assistant")
	alice   = quota.UserScope("contoso", "support-assistant", "alice")
)

func tokens(n int64) quota.Amount { return quota.Amount{Tokens: n, Requests: 1} }

type env struct {
	t     *testing.T
	store quota.Store
	clock *clock
	q     *quota.Quota
	ctx   context.Context
}

func (e *env) usage(s quota.Scope, w quota.Window) quota.Amount {
	e.t.Helper()
	a, err := e.q.Usage(e.ctx, s, w)
	if err != nil {
		e.t.Fatalf("Usage(%s, %s): %v", s, w, err)
	}
	return a
}

func (e *env) wantUsage(s quota.Scope, w quota.Window, want int64) {
	e.t.Helper()
	if got := e.usage(s, w).Tokens; got != want {
		e.t.Errorf("usage %s %s = %d tokens, want %d", s, w, got, want)
	}
}

func (e *env) reserve(limits []quota.Limit, a quota.Amount) *quota.Reservation {
	e.t.Helper()
	r, err := e.q.Reserve(e.ctx, "req", limits, a)
	if err != nil {
		e.t.Fatalf("Reserve(%+v): %v", a, err)
	}
	return r
}

func (e *env) refuse(limits []quota.Limit, a quota.Amount) *quota.ExceededError {
	e.t.Helper()
	r, err := e.q.Reserve(e.ctx, "req", limits, a)
	var ex *quota.ExceededError
	if !errors.As(err, &ex) || !errors.Is(err, quota.ErrExceeded) || r != nil {
		e.t.Fatalf("Reserve(%+v) = %v, %v; want an *ExceededError", a, r, err)
	}
	return ex
}

// testStoreContract is the one contract suite every Store runs.
// newStore returns an empty store for one subtest.
func testStoreContract(t *testing.T, newStore func(t *testing.T) quota.Store) {
	setup := func(t *testing.T, at time.Time, opts ...func(*quota.Options)) *env {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		t.Cleanup(cancel)
		e := &env{t: t, store: newStore(t), clock: newClock(at), ctx: ctx}
		o := quota.Options{Now: e.clock.Now, Logger: zaptest.NewLogger(t), RetryBackoff: time.Millisecond, RetryMaxBackoff: 5 * time.Millisecond}
		for _, fn := range opts {
			fn(&o)
		}
		e.q = quota.New(e.store, o)
		return e
	}

	t.Run("fits and does not fit", func(t *testing.T) {
		e := setup(t, midMonth)
		limits := []quota.Limit{{Scope: support, Window: quota.Hour, Tokens: 1000}}
		r := e.reserve(limits, tokens(600))
		if w, l, rem := r.Tightest(); w != quota.Hour || l != 1000 || rem != 400 {
			t.Errorf("Tightest = %s %d %d, want hour 1000 400", w, l, rem)
		}
		if items := r.Items(); len(items) != 1 || items[0].UsedAfter.Tokens != 600 || items[0].UsedAfter.Requests != 1 {
			t.Errorf("Items = %+v", items)
		}
		ex := e.refuse(limits, tokens(500))
		want := quota.ExceededError{Scope: support, Window: quota.Hour, Metric: quota.MetricTokens,
			RetryAfter: 39*time.Minute + 30*time.Second, Limit: 1000, Used: 600, Requested: 500}
		if *ex != want {
			t.Errorf("refusal = %+v\nwant %+v", *ex, want)
		}
		e.wantUsage(support, quota.Hour, 600) // the refusal left nothing behind
		r = e.reserve(limits, tokens(400))    // exactly up to the limit fits
		if _, _, rem := r.Tightest(); rem != 0 {
			t.Errorf("remaining = %d, want 0", rem)
		}
		e.refuse(limits, tokens(1))
		e.wantUsage(support, quota.Hour, 1000)
		if got := e.usage(support, quota.Hour).Requests; got != 2 {
			t.Errorf("requests = %d, want 2", got)
		}
	})

	t.Run("request larger than the limit", func(t *testing.T) {
		e := setup(t, midMonth)
		ex := e.refuse([]quota.Limit{{Scope: support, Window: quota.Hour, Tokens: 1000}}, tokens(1001))
		if ex.Used != 0 || ex.Requested != 1001 || ex.Limit != 1000 {
			t.Errorf("refusal = %+v", ex)
		}
		e.wantUsage(support, quota.Hour, 0)
	})

	t.Run("every window and scope", func(t *testing.T) {
		e := setup(t, midMonth)
		left := map[quota.Window]time.Duration{
			quota.Minute: 30 * time.Second,
			quota.Hour:   39*time.Minute + 30*time.Second,
			quota.Day:    13*time.Hour + 39*time.Minute + 30*time.Second,
			quota.Month:  16*24*time.Hour + 13*time.Hour + 39*time.Minute + 30*time.Second,
		}
		for _, s := range []quota.Scope{contoso, support, alice} {
			for _, w := range quota.Windows() {
				limits := []quota.Limit{{Scope: s, Window: w, Tokens: 100}}
				e.reserve(limits, tokens(60))
				ex := e.refuse(limits, tokens(60))
				if ex.Scope != s || ex.Window != w || ex.RetryAfter != left[w] || ex.Used != 60 {
					t.Errorf("%s %s: refusal = %+v, want retry after %v", s, w, ex, left[w])
				}
				e.wantUsage(s, w, 60)
			}
		}
		// Other scopes of the same kind have their own counters.
		bob := quota.UserScope("contoso", "support-assistant", "bob")
		e.reserve([]quota.Limit{{Scope: bob, Window: quota.Minute, Tokens: 100}}, tokens(100))
		e.reserve([]quota.Limit{{Scope: devApp, Window: quota.Minute, Tokens: 100}}, tokens(100))
		e.wantUsage(alice, quota.Minute, 60)
		e.wantUsage(support, quota.Minute, 60)
	})

	t.Run("window rollover", func(t *testing.T) {
		e := setup(t, time.Date(2031, 1, 15, 10, 20, 59, 0, time.UTC))
		limits := []quota.Limit{
			{Scope: alice, Window: quota.Minute, Tokens: 100},
			{Scope: support, Window: quota.Hour, Tokens: 150},
		}
		e.reserve(limits, tokens(100))
		if ex := e.refuse(limits, tokens(1)); ex.Window != quota.Minute || ex.RetryAfter != time.Second {
			t.Errorf("refusal = %+v, want the minute, resetting in 1s", ex)
		}
		e.clock.Add(time.Second) // 10:21:00: a new minute, the same hour
		e.wantUsage(alice, quota.Minute, 0)
		e.reserve(limits, tokens(50))
		if ex := e.refuse(limits, tokens(1)); ex.Window != quota.Hour || ex.Scope != support || ex.Used != 150 {
			t.Errorf("refusal = %+v, want the hour at 150", ex)
		}
		e.clock.Set(time.Date(2031, 1, 15, 11, 0, 0, 0, time.UTC)) // a new hour
		e.reserve(limits, tokens(100))
		e.wantUsage(support, quota.Hour, 100)
	})

	t.Run("rollover of day and month at the year's end", func(t *testing.T) {
		e := setup(t, time.Date(2031, 12, 31, 23, 59, 59, 0, time.UTC))
		var limits []quota.Limit
		for _, w := range quota.Windows() {
			limits = append(limits, quota.Limit{Scope: contoso, Window: w, Tokens: 100})
		}
		e.reserve(limits, tokens(100))
		ex := e.refuse(limits, tokens(1))
		if ex.Window != quota.Minute || ex.RetryAfter != time.Second {
			t.Errorf("refusal = %+v", ex)
		}
		e.clock.Add(time.Second) // 2032-01-01T00:00:00Z: every window is new
		r := e.reserve(limits, tokens(100))
		for _, it := range r.Items() {
			if it.UsedAfter.Tokens != 100 {
				t.Errorf("%s: used after = %d, want 100 (a fresh window)", it.Item.Key(), it.UsedAfter.Tokens)
			}
		}
		e.clock.Set(time.Date(2031, 12, 31, 12, 0, 0, 0, time.UTC)) // back in the old month: still full
		e.wantUsage(contoso, quota.Month, 100)
	})

	t.Run("settle refunds", func(t *testing.T) {
		e := setup(t, midMonth)
		limits := []quota.Limit{{Scope: contoso, Window: quota.Month, Tokens: 5000}, {Scope: support, Window: quota.Hour, Tokens: 1000}}
		r := e.reserve(limits, tokens(1000))
		e.refuse(limits, tokens(1))
		if err := e.q.Settle(e.ctx, r, tokens(300)); err != nil {
			t.Fatal(err)
		}
		if !r.Settled() {
			t.Error("Settled() = false after Settle")
		}
		e.wantUsage(support, quota.Hour, 300)
		e.wantUsage(contoso, quota.Month, 300)
		e.reserve(limits, tokens(700))
	})

	t.Run("partial charge", func(t *testing.T) {
		// A stream that broke before usage arrived is charged the input
		// estimate plus the output streamed.
		e := setup(t, midMonth)
		limits := []quota.Limit{{Scope: contoso, Window: quota.Month, Tokens: 5000}, {Scope: support, Window: quota.Hour, Tokens: 2000}}
		r := e.reserve(limits, quota.Amount{Tokens: 314 + 1024, Requests: 1, MicroUSD: 20000})
		if err := e.q.Settle(e.ctx, r, quota.Amount{Tokens: 314 + 57, Requests: 1, MicroUSD: 1800}); err != nil {
			t.Fatal(err)
		}
		for _, s := range []quota.Scope{contoso, support} {
			w := quota.Month
			if s == support {
				w = quota.Hour
			}
			if got, want := e.usage(s, w), (quota.Amount{Tokens: 371, Requests: 1, MicroUSD: 1800}); got != want {
				t.Errorf("usage %s = %+v, want %+v", s, got, want)
			}
		}
	})

	t.Run("extra charge", func(t *testing.T) {
		e := setup(t, midMonth)
		limits := []quota.Limit{{Scope: support, Window: quota.Hour, Tokens: 150}}
		r := e.reserve(limits, tokens(100))
		if err := e.q.Settle(e.ctx, r, tokens(180)); err != nil {
			t.Fatal(err)
		}
		e.wantUsage(support, quota.Hour, 180) // usage that happened is recorded, even past the limit
		if ex := e.refuse(limits, tokens(1)); ex.Used != 180 {
			t.Errorf("refusal = %+v, want used 180", ex)
		}
	})

	t.Run("release", func(t *testing.T) {
		e := setup(t, midMonth)
		limits := []quota.Limit{{Scope: support, Window: quota.Hour, Tokens: 150, Requests: 10}}
		r := e.reserve(limits, tokens(100))
		if err := e.q.Release(e.ctx, r); err != nil {
			t.Fatal(err)
		}
		if got := e.usage(support, quota.Hour); !got.IsZero() {
			t.Errorf("usage after release = %+v, want zero", got)
		}
	})

	t.Run("settle is idempotent", func(t *testing.T) {
		f := &faultyStore{}
		e := setup(t, midMonth)
		f.Store = e.store
		e.q = quota.New(f, quota.Options{Now: e.clock.Now})
		limits := []quota.Limit{{Scope: contoso, Window: quota.Month, Tokens: 5000}, {Scope: support, Window: quota.Hour, Tokens: 1000}}
		r := e.reserve(limits, tokens(1000))
		var wg sync.WaitGroup
		for i := range 10 {
			wg.Go(func() {
				if err := e.q.Settle(e.ctx, r, tokens(int64(100+i))); err != nil {
					t.Errorf("Settle: %v", err)
				}
			})
		}
		wg.Wait()
		if err := e.q.Release(e.ctx, r); err != nil {
			t.Fatal(err)
		}
		u := e.usage(support, quota.Hour).Tokens
		if u < 100 || u > 109 || e.usage(contoso, quota.Month).Tokens != u {
			t.Errorf("usage = %d (tenant %d), want one settlement of 100..109", u, e.usage(contoso, quota.Month).Tokens)
		}
		if f.adds != 2 {
			t.Errorf("store Add calls = %d, want 2 (one per item, once)", f.adds)
		}
	})

	t.Run("settle with nothing to change writes nothing", func(t *testing.T) {
		f := &faultyStore{}
		e := setup(t, midMonth)
		f.Store = e.store
		e.q = quota.New(f, quota.Options{Now: e.clock.Now})
		r := e.reserve([]quota.Limit{{Scope: support, Window: quota.Hour, Tokens: 1000}}, tokens(500))
		if err := e.q.Settle(e.ctx, r, tokens(500)); err != nil {
			t.Fatal(err)
		}
		if f.adds != 0 {
			t.Errorf("Add calls = %d, want 0", f.adds)
		}
	})

	t.Run("compensation when the second of three refuses", func(t *testing.T) {
		e := setup(t, midMonth)
		// Order: user, app, tenant. The app's hour is nearly full.
		e.reserve([]quota.Limit{{Scope: support, Window: quota.Hour, Tokens: 1000}}, tokens(950))
		limits := []quota.Limit{
			{Scope: contoso, Window: quota.Month, Tokens: 100000},
			{Scope: support, Window: quota.Hour, Tokens: 1000},
			{Scope: alice, Window: quota.Minute, Tokens: 500},
		}
		ex := e.refuse(limits, tokens(100))
		if ex.Scope != support || ex.Window != quota.Hour || ex.Used != 950 {
			t.Errorf("refusal = %+v", ex)
		}
		e.wantUsage(alice, quota.Minute, 0) // reserved first, then released
		e.wantUsage(support, quota.Hour, 950)
		e.wantUsage(contoso, quota.Month, 0) // never reached
		if got := e.usage(alice, quota.Minute).Requests; got != 0 {
			t.Errorf("alice requests = %d, want 0", got)
		}
	})

	t.Run("compensation when the second of three fails", func(t *testing.T) {
		f := &faultyStore{failReserveAt: 2}
		e := setup(t, midMonth)
		f.Store = e.store
		e.q = quota.New(f, quota.Options{Now: e.clock.Now, Logger: zaptest.NewLogger(t)})
		limits := []quota.Limit{
			{Scope: contoso, Window: quota.Month, Tokens: 100000},
			{Scope: support, Window: quota.Hour, Tokens: 1000},
			{Scope: alice, Window: quota.Minute, Tokens: 500},
		}
		_, err := e.q.Reserve(e.ctx, "req", limits, tokens(100))
		if !errors.Is(err, quota.ErrUnavailable) || errors.Is(err, quota.ErrExceeded) || !errors.Is(err, errInjected) {
			t.Fatalf("Reserve = %v, want ErrUnavailable wrapping the store error", err)
		}
		for _, s := range []quota.Scope{alice, support, contoso} {
			for _, w := range []quota.Window{quota.Minute, quota.Hour, quota.Month} {
				if got := e.usage(s, w); !got.IsZero() {
					t.Errorf("usage %s %s = %+v, want zero (no leak)", s, w, got)
				}
			}
		}
		f.set(func(f *faultyStore) { f.failReserveAt = 0 })
		e.reserve(limits, tokens(100)) // the store is fine again
	})

	t.Run("requests and cost limits", func(t *testing.T) {
		e := setup(t, midMonth)
		reqs := []quota.Limit{{Scope: alice, Window: quota.Minute, Requests: 2}}
		e.reserve(reqs, tokens(10))
		e.reserve(reqs, tokens(10))
		if ex := e.refuse(reqs, tokens(10)); ex.Metric != quota.MetricRequests || ex.Limit != 2 || ex.Used != 2 || ex.Requested != 1 {
			t.Errorf("refusal = %+v, want requests 2/2", ex)
		}
		usd := []quota.Limit{{Scope: contoso, Window: quota.Month, Tokens: 1000000, MicroUSD: quota.MicroUSD(0.001)}}
		e.reserve(usd, quota.Amount{Tokens: 10, Requests: 1, MicroUSD: 600})
		ex := e.refuse(usd, quota.Amount{Tokens: 10, Requests: 1, MicroUSD: 600})
		if ex.Metric != quota.MetricUSD || ex.Limit != 1000 || ex.Used != 600 {
			t.Errorf("refusal = %+v, want usd 600/1000", ex)
		}
		if w, l, rem := e.reserve(usd, quota.Amount{Tokens: 5, MicroUSD: 400}).Tightest(); w != quota.Month || l != 1000000 || rem != 1000000-15 {
			t.Errorf("Tightest = %s %d %d", w, l, rem)
		}
	})

	t.Run("tightest window", func(t *testing.T) {
		e := setup(t, midMonth)
		e.reserve([]quota.Limit{{Scope: support, Window: quota.Hour, Tokens: 20000}}, tokens(19000))
		r := e.reserve([]quota.Limit{
			{Scope: contoso, Window: quota.Month, Tokens: 100000000},
			{Scope: support, Window: quota.Hour, Tokens: 20000},
			{Scope: alice, Window: quota.Minute, Requests: 5},
		}, tokens(314))
		if w, l, rem := r.Tightest(); w != quota.Hour || l != 20000 || rem != 20000-19314 {
			t.Errorf("Tightest = %s %d %d, want hour 20000 686", w, l, rem)
		}
		var used int64
		for _, it := range r.Items() {
			if it.Item.Scope == support {
				used = it.UsedAfter.Tokens
			}
		}
		if used != 19314 {
			t.Errorf("used after = %d, want 19314", used)
		}
		if w, l, rem := e.reserve(nil, tokens(1)).Tightest(); w != "" || l != 0 || rem != 0 {
			t.Errorf("Tightest with no limits = %q %d %d", w, l, rem)
		}
	})

	t.Run("limits on one item are merged", func(t *testing.T) {
		e := setup(t, midMonth)
		r := e.reserve([]quota.Limit{
			{Scope: support, Window: quota.Hour, Tokens: 100},
			{Scope: support, Window: quota.Hour, Tokens: 60, Requests: 3},
		}, tokens(50))
		if items := r.Items(); len(items) != 1 || items[0].Limit.Tokens != 60 || items[0].Limit.Requests != 3 {
			t.Errorf("items = %+v, want one item capped at 60 tokens, 3 requests", items)
		}
		e.refuse([]quota.Limit{{Scope: support, Window: quota.Hour, Tokens: 100}, {Scope: support, Window: quota.Hour, Tokens: 60}}, tokens(20))
	})

	t.Run("invalid limits", func(t *testing.T) {
		e := setup(t, midMonth)
		for _, l := range []quota.Limit{
			{Scope: support, Window: "week", Tokens: 1},
			{Scope: support, Window: quota.Hour},
			{Scope: support, Window: quota.Hour, Tokens: -1},
			{Scope: quota.Scope{Kind: "app"}, Window: quota.Hour, Tokens: 1},
		} {
			if _, err := e.q.Reserve(e.ctx, "req", []quota.Limit{l}, tokens(1)); !errors.Is(err, quota.ErrInvalidLimit) {
				t.Errorf("Reserve with %+v = %v, want ErrInvalidLimit", l, err)
			}
		}
		if _, err := e.q.Reserve(e.ctx, "req", nil, tokens(-1)); !errors.Is(err, quota.ErrInvalidLimit) {
			t.Errorf("Reserve of a negative amount = %v, want ErrInvalidLimit", err)
		}
	})

	t.Run("concurrent reservations never pass a limit", func(t *testing.T) {
		e := setup(t, midMonth)
		const n, each = 50, 100
		limitsFor := func(i int) []quota.Limit {
			app := []quota.Scope{support, devApp}[i%2]
			return []quota.Limit{
				{Scope: contoso, Window: quota.Month, Tokens: 1500},
				{Scope: app, Window: quota.Hour, Tokens: 1000},
				{Scope: quota.UserScope("contoso", "x", fmt.Sprint("u", i)), Window: quota.Minute, Tokens: 100},
			}
		}
		var ok [2]atomic.Int64
		var refused atomic.Int64
		reservations := make(chan *quota.Reservation, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				<-start
				r, err := e.q.Reserve(e.ctx, fmt.Sprint("r", i), limitsFor(i), tokens(each))
				switch {
				case err == nil:
					ok[i%2].Add(1)
					for _, it := range r.Items() {
						if it.UsedAfter.Tokens > it.Limit.Tokens {
							t.Errorf("%s: used after %d > limit %d", it.Item.Key(), it.UsedAfter.Tokens, it.Limit.Tokens)
						}
					}
					reservations <- r
				case errors.Is(err, quota.ErrExceeded):
					refused.Add(1)
				default:
					t.Errorf("Reserve: %v", err)
				}
			})
		}
		close(start)
		wg.Wait()
		close(reservations)
		total := ok[0].Load() + ok[1].Load()
		// The tenant's 1500 binds: exactly 15 fit, whatever the interleaving.
		if total != 15 || refused.Load() != n-15 {
			t.Errorf("admitted %d (%d + %d), refused %d; want 15 and %d", total, ok[0].Load(), ok[1].Load(), refused.Load(), n-15)
		}
		e.wantUsage(contoso, quota.Month, total*each)
		e.wantUsage(support, quota.Hour, ok[0].Load()*each) // compensated items left nothing
		e.wantUsage(devApp, quota.Hour, ok[1].Load()*each)
		var users int64
		for i := range n {
			users += e.usage(quota.UserScope("contoso", "x", fmt.Sprint("u", i)), quota.Minute).Tokens
		}
		if users != total*each {
			t.Errorf("sum of user usage = %d, want %d", users, total*each)
		}
		// Settle them all concurrently too.
		var sg sync.WaitGroup
		for r := range reservations {
			sg.Go(func() {
				if err := e.q.Settle(e.ctx, r, tokens(40)); err != nil {
					t.Errorf("Settle: %v", err)
				}
			})
		}
		sg.Wait()
		e.wantUsage(contoso, quota.Month, total*40)
	})

	t.Run("store failure is ErrUnavailable", func(t *testing.T) {
		f := &faultyStore{failAll: true}
		e := setup(t, midMonth)
		f.Store = e.store
		e.q = quota.New(f, quota.Options{Now: e.clock.Now})
		_, err := e.q.Reserve(e.ctx, "req", []quota.Limit{{Scope: support, Window: quota.Hour, Tokens: 10}}, tokens(1))
		if !errors.Is(err, quota.ErrUnavailable) || errors.Is(err, quota.ErrExceeded) {
			t.Errorf("Reserve = %v, want ErrUnavailable", err)
		}
		// So is a context that has ended, with the real store.
		q := quota.New(e.store, quota.Options{Now: e.clock.Now})
		ctx, cancel := context.WithCancel(e.ctx)
		cancel()
		if _, err := q.Reserve(ctx, "req", []quota.Limit{{Scope: support, Window: quota.Hour, Tokens: 10}}, tokens(1)); !errors.Is(err, quota.ErrUnavailable) {
			t.Errorf("Reserve with a cancelled context = %v, want ErrUnavailable", err)
		}
	})

	t.Run("settle retries until the store answers", func(t *testing.T) {
		f := &faultyStore{}
		e := setup(t, midMonth)
		f.Store = e.store
		e.q = quota.New(f, quota.Options{Now: e.clock.Now, Logger: zaptest.NewLogger(t), RetryBackoff: time.Millisecond, RetryMaxBackoff: 2 * time.Millisecond})
		r := e.reserve([]quota.Limit{{Scope: support, Window: quota.Hour, Tokens: 1000}}, tokens(500))
		f.set(func(f *faultyStore) { f.failAdds = 3 })
		if err := e.q.Settle(e.ctx, r, tokens(200)); err != nil {
			t.Fatal(err)
		}
		e.wantUsage(support, quota.Hour, 200)
	})

	t.Run("settle stops when its context ends and can be resumed", func(t *testing.T) {
		f := &faultyStore{}
		e := setup(t, midMonth)
		f.Store = e.store
		e.q = quota.New(f, quota.Options{Now: e.clock.Now, RetryBackoff: time.Millisecond, RetryMaxBackoff: 2 * time.Millisecond})
		r := e.reserve([]quota.Limit{{Scope: contoso, Window: quota.Month, Tokens: 5000}, {Scope: support, Window: quota.Hour, Tokens: 1000}}, tokens(500))
		f.set(func(f *faultyStore) { f.failAll = true })
		ctx, cancel := context.WithTimeout(e.ctx, 50*time.Millisecond)
		defer cancel()
		if err := e.q.Settle(ctx, r, tokens(200)); !errors.Is(err, quota.ErrUnavailable) {
			t.Fatalf("Settle = %v, want ErrUnavailable", err)
		}
		if r.Settled() {
			t.Fatal("Settled() = true after a failed Settle")
		}
		f.set(func(f *faultyStore) { f.failAll = false })
		if err := e.q.Settle(e.ctx, r, tokens(999)); err != nil { // the first actual stands
			t.Fatal(err)
		}
		e.wantUsage(support, quota.Hour, 200)
		e.wantUsage(contoso, quota.Month, 200)
	})

	t.Run("settle gives up once the window has ended", func(t *testing.T) {
		f := &faultyStore{}
		e := setup(t, midMonth)
		f.Store = e.store
		e.q = quota.New(f, quota.Options{Now: e.clock.Now, Logger: zaptest.NewLogger(t)})
		r := e.reserve([]quota.Limit{{Scope: alice, Window: quota.Minute, Tokens: 1000}}, tokens(500))
		f.set(func(f *faultyStore) { f.failAll = true })
		e.clock.Add(time.Minute)
		if err := e.q.Settle(e.ctx, r, tokens(100)); err != nil { // e.ctx has 20s: returning proves it gave up
			t.Fatalf("Settle = %v, want nil (nothing left to correct)", err)
		}
		if !r.Settled() {
			t.Error("Settled() = false")
		}
	})
}

func TestMemoryStoreContract(t *testing.T) {
	testStoreContract(t, func(t *testing.T) quota.Store { return quota.NewMemoryStore() })
}

func TestMemoryStoreForgetsExpiredItems(t *testing.T) {
	ctx := context.Background()
	s := quota.NewMemoryStore()
	old := quota.Item{Scope: support, Window: quota.Minute, Start: time.Now().Add(-48 * time.Hour).Truncate(time.Minute)}
	if _, err := s.Add(ctx, old, tokens(5)); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Get(ctx, old); !got.IsZero() {
		t.Errorf("expired item = %+v, want zero", got)
	}
	if used, err := s.Reserve(ctx, old, tokens(10), tokens(10)); err != nil || used != tokens(10) {
		t.Errorf("Reserve on an expired item = %+v, %v; want a fresh count", used, err)
	}
}
