package quota_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/jetway-gateway/jetway/internal/quota"
)

// countingStore counts the store calls leases make.
type countingStore struct {
	quota.Store
	writes, reclaims, reads atomic.Int64
}

func (c *countingStore) WriteLease(ctx context.Context, it quota.Item, w quota.LeaseWrite) (quota.ItemState, error) {
	c.writes.Add(1)
	return c.Store.WriteLease(ctx, it, w)
}

func (c *countingStore) ReclaimLease(ctx context.Context, it quota.Item, l quota.Lease, now time.Time, keep quota.Amount) (quota.ItemState, error) {
	c.reclaims.Add(1)
	return c.Store.ReclaimLease(ctx, it, l, now, keep)
}

func (c *countingStore) ReadItem(ctx context.Context, it quota.Item) (quota.ItemState, error) {
	c.reads.Add(1)
	return c.Store.ReadItem(ctx, it)
}

// leaseServer is one gateway server's Quota with leases on a shared store.
func leaseServer(t *testing.T, store quota.Store, owner string, now func() time.Time, lo quota.LeaseOptions) *quota.Quota {
	t.Helper()
	lo.Owner = owner
	q := quota.New(store, quota.Options{Now: now, Logger: zaptest.NewLogger(t), RetryBackoff: time.Millisecond,
		RetryMaxBackoff: 5 * time.Millisecond, Lease: lo})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := q.Drain(ctx); err != nil {
			t.Errorf("Drain %s: %v", owner, err)
		}
	})
	return q
}

func itemOf(l quota.Limit, now time.Time) quota.Item {
	start, _ := l.Window.Bounds(now)
	return quota.Item{Scope: l.Scope, Window: l.Window, Start: start}
}

func readItem(t *testing.T, s quota.Store, it quota.Item) quota.ItemState {
	t.Helper()
	st, err := s.ReadItem(context.Background(), it)
	if err != nil {
		t.Fatalf("ReadItem: %v", err)
	}
	return st
}

// testLeaseContract is the lease suite every Store runs.
func testLeaseContract(t *testing.T, newStore func(t *testing.T) quota.Store) {
	ctx := func(t *testing.T) context.Context {
		c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		t.Cleanup(cancel)
		return c
	}

	t.Run("admits locally and settles exactly", func(t *testing.T) {
		c := ctx(t)
		store := &countingStore{Store: newStore(t)}
		clk := newClock(midMonth)
		q := leaseServer(t, store, "server-a", clk.Now, quota.LeaseOptions{})
		limit := quota.Limit{Scope: support, Window: quota.Hour, Tokens: 1_000_000}
		var want int64
		const n = 50
		for i := range n {
			r, err := q.Reserve(c, fmt.Sprint("req-", i), []quota.Limit{limit}, tokens(1338))
			if err != nil {
				t.Fatal(err)
			}
			if err := q.Settle(c, r, tokens(371)); err != nil {
				t.Fatal(err)
			}
			want += 371
			clk.Add(50 * time.Millisecond)
		}
		if w := store.writes.Load(); w > n/5 {
			t.Errorf("%d lease writes for %d requests, want <= %d", w, n, n/5)
		}
		st := readItem(t, store, itemOf(limit, clk.Now()))
		if st.Used.Tokens < want || st.Used.Tokens > limit.Tokens {
			t.Errorf("used = %d with the lease, want %d..%d", st.Used.Tokens, want, limit.Tokens)
		}
		if err := q.Drain(c); err != nil {
			t.Fatal(err)
		}
		st = readItem(t, store, itemOf(limit, clk.Now()))
		if st.Used.Tokens != want || st.Used.Requests != n {
			t.Errorf("used after drain = %+v, want %d tokens, %d requests (exactly what was settled)", st.Used, want, n)
		}
		t.Logf("%d requests: %d lease writes", n, store.writes.Load())
	})

	t.Run("a lowered limit is not passed from room granted under the old one", func(t *testing.T) {
		c := ctx(t)
		store := newStore(t)
		clk := newClock(midMonth)
		q := leaseServer(t, store, "server-a", clk.Now, quota.LeaseOptions{Fraction: 1})
		old := quota.Limit{Scope: support, Window: quota.Hour, Tokens: 100_000}
		for i := range 5 {
			r, err := q.Reserve(c, fmt.Sprint("before-", i), []quota.Limit{old}, tokens(1000))
			if err != nil {
				t.Fatal(err)
			}
			if err := q.Settle(c, r, tokens(1000)); err != nil {
				t.Fatal(err)
			}
		}
		if st := readItem(t, store, itemOf(old, clk.Now())); st.Used.Tokens <= 10_000 {
			t.Fatalf("the lease holds %d: too little room to test a lowered limit", st.Used.Tokens)
		}
		// Lowered to 10,000 with 5,000 spent: five more requests fit, the
		// sixth does not, whatever the lease held under the old limit.
		lowered := old
		lowered.Tokens = 10_000
		admitted := 0
		for i := range 8 {
			r, err := q.Reserve(c, fmt.Sprint("after-", i), []quota.Limit{lowered}, tokens(1000))
			if errors.Is(err, quota.ErrExceeded) {
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			admitted++
			if err := q.Settle(c, r, tokens(1000)); err != nil {
				t.Fatal(err)
			}
		}
		if admitted != 5 {
			t.Errorf("%d admitted under the lowered limit, want 5", admitted)
		}
		if err := q.Drain(c); err != nil {
			t.Fatal(err)
		}
		if st := readItem(t, store, itemOf(old, clk.Now())); st.Used.Tokens > lowered.Tokens {
			t.Errorf("used %d after the lowered limit %d", st.Used.Tokens, lowered.Tokens)
		}
	})

	t.Run("a request larger than the limit is refused on a new item", func(t *testing.T) {
		c := ctx(t)
		store := newStore(t)
		q := leaseServer(t, store, "server-a", newClock(midMonth).Now, quota.LeaseOptions{})
		limit := quota.Limit{Scope: support, Window: quota.Minute, Tokens: 100}
		if _, err := q.Reserve(c, "big", []quota.Limit{limit}, tokens(1034)); !errors.Is(err, quota.ErrExceeded) {
			t.Fatalf("Reserve of 1034 on a 100-token limit: %v, want ErrExceeded", err)
		}
		if st := readItem(t, store, itemOf(limit, midMonth)); !st.Used.IsZero() || len(st.Leases) != 0 {
			t.Errorf("item after the refusal: %+v, want untouched", st)
		}
	})

	t.Run("a refused server gives back the room another can use", func(t *testing.T) {
		c := ctx(t)
		store := newStore(t)
		clk := newClock(midMonth)
		lo := quota.LeaseOptions{Ahead: time.Second, Block: time.Second, MinRequests: 1, Fraction: 1}
		a := leaseServer(t, store, "server-a", clk.Now, lo)
		b := leaseServer(t, store, "server-b", clk.Now, lo)
		limit := quota.Limit{Scope: support, Window: quota.Hour, Tokens: 1000}
		spend := func(q *quota.Quota, id string, n int64) {
			t.Helper()
			r, err := q.Reserve(c, id, []quota.Limit{limit}, tokens(n))
			if err != nil {
				t.Fatalf("%s: %v", id, err)
			}
			if err := q.Settle(c, r, tokens(n)); err != nil {
				t.Fatal(err)
			}
		}
		// a leases 600 and spends 300; b's block does not fit, so b takes
		// exactly 300 and spends it: 300 free in a's lease, 100 in the item.
		spend(a, "a-1", 300)
		spend(b, "b-1", 300)
		if _, err := a.Reserve(c, "a-2", []quota.Limit{limit}, tokens(450)); !errors.Is(err, quota.ErrExceeded) {
			t.Fatalf("a-2: %v, want ErrExceeded (a holds 300, the item 100)", err)
		}
		// a gave its 300 back on the refusal: b fits 400.
		spend(b, "b-2", 400)
		if st := readItem(t, store, itemOf(limit, clk.Now())); st.Used.Tokens != 1000 {
			t.Errorf("used = %d, want the whole 1000", st.Used.Tokens)
		}
	})

	t.Run("near the limit grants are exact", func(t *testing.T) {
		c := ctx(t)
		store := newStore(t)
		clk := newClock(midMonth)
		q := leaseServer(t, store, "server-a", clk.Now, quota.LeaseOptions{})
		limits := []quota.Limit{{Scope: support, Window: quota.Hour, Tokens: 1000}}
		r, err := q.Reserve(c, "r1", limits, tokens(600))
		if err != nil {
			t.Fatal(err)
		}
		if w, l, rem := r.Tightest(); w != quota.Hour || l != 1000 || rem != 400 {
			t.Errorf("Tightest = %s %d %d, want hour 1000 400", w, l, rem)
		}
		if _, err := q.Reserve(c, "r2", limits, tokens(400)); err != nil {
			t.Fatalf("the last 400 tokens: %v", err)
		}
		_, err = q.Reserve(c, "r3", limits, tokens(1))
		var ex *quota.ExceededError
		if !errors.As(err, &ex) {
			t.Fatalf("Reserve past the limit = %v, want an *ExceededError", err)
		}
		want := quota.ExceededError{Scope: support, Window: quota.Hour, Metric: quota.MetricTokens,
			RetryAfter: 39*time.Minute + 30*time.Second, Limit: 1000, Used: 1000, Requested: 1}
		if *ex != want {
			t.Errorf("refusal = %+v\nwant %+v", *ex, want)
		}
		if err := q.Settle(c, r, tokens(100)); err != nil { // the refund goes back into the lease
			t.Fatal(err)
		}
		if _, err := q.Reserve(c, "r4", limits, tokens(500)); err != nil {
			t.Fatalf("after a refund of 500: %v", err)
		}
	})

	t.Run("windows, scopes, requests and cost", func(t *testing.T) {
		c := ctx(t)
		store := newStore(t)
		clk := newClock(time.Date(2031, 1, 15, 10, 20, 59, 0, time.UTC))
		q := leaseServer(t, store, "server-a", clk.Now, quota.LeaseOptions{})
		limits := []quota.Limit{
			{Scope: contoso, Window: quota.Month, Tokens: 1_000_000, MicroUSD: quota.MicroUSD(0.01)},
			{Scope: support, Window: quota.Hour, Tokens: 100_000},
			{Scope: alice, Window: quota.Minute, Requests: 3},
		}
		a := quota.Amount{Tokens: 100, Requests: 1, MicroUSD: 2000}
		for i := range 3 {
			if _, err := q.Reserve(c, fmt.Sprint("r", i), limits, a); err != nil {
				t.Fatal(err)
			}
		}
		_, err := q.Reserve(c, "r3", limits, a)
		var ex *quota.ExceededError
		if !errors.As(err, &ex) || ex.Scope != alice || ex.Window != quota.Minute || ex.Metric != quota.MetricRequests ||
			ex.RetryAfter != time.Second || ex.Used != 3 || ex.Limit != 3 {
			t.Fatalf("4th request = %v, want alice's minute, 3 requests, retry after 1s", err)
		}
		clk.Add(time.Second) // a new minute: alice may go on; the month's cost binds next
		for i := range 2 {
			if _, err := q.Reserve(c, fmt.Sprint("s", i), limits, a); err != nil {
				t.Fatal(err)
			}
		}
		_, err = q.Reserve(c, "s2", limits, a)
		if !errors.As(err, &ex) || ex.Scope != contoso || ex.Window != quota.Month || ex.Metric != quota.MetricUSD || ex.Used != 10000 {
			t.Fatalf("6th request = %v, want the tenant's month, usd 10000/10000", err)
		}
		if got := readItem(t, store, itemOf(limits[0], clk.Now())).Used.MicroUSD; got > 10000 {
			t.Errorf("month cost = %d, over the limit", got)
		}
	})

	t.Run("servers racing for one limit", func(t *testing.T) {
		c := ctx(t)
		store := newStore(t)
		const servers, sessions, limitTokens, estimate = 5, 4, 40_000, 300
		limit := quota.Limit{Scope: support, Window: quota.Hour, Tokens: limitTokens}
		it := itemOf(limit, midMonth)
		now := func() time.Time { return midMonth }
		var charged atomic.Int64
		stop := make(chan struct{})
		var watchWG sync.WaitGroup
		watchWG.Go(func() { // leased + charged never exceed the limit, at any moment
			for {
				if st := readItem(t, store, it); st.Used.Tokens > limitTokens {
					t.Errorf("used %d > limit %d", st.Used.Tokens, limitTokens)
				}
				select {
				case <-stop:
					return
				default:
				}
			}
		})
		qs := make([]*quota.Quota, servers)
		var wg sync.WaitGroup
		for s := range servers {
			qs[s] = leaseServer(t, store, fmt.Sprint("server-", s), now, quota.LeaseOptions{})
			for g := range sessions {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(s), uint64(g)))
					for i := 0; ; i++ {
						r, err := qs[s].Reserve(c, fmt.Sprint(s, "-", g, "-", i), []quota.Limit{limit}, tokens(estimate))
						if errors.Is(err, quota.ErrExceeded) {
							return
						}
						if err != nil {
							t.Errorf("Reserve: %v", err)
							return
						}
						actual := 100 + rng.Int64N(estimate-100+1)
						if err := qs[s].Settle(c, r, tokens(actual)); err != nil {
							t.Errorf("Settle: %v", err)
						}
						charged.Add(actual)
					}
				})
			}
		}
		wg.Wait()
		close(stop)
		watchWG.Wait()
		for _, q := range qs {
			if err := q.Drain(c); err != nil {
				t.Fatal(err)
			}
		}
		st := readItem(t, store, it)
		if st.Used.Tokens != charged.Load() {
			t.Errorf("used after drain = %d, want the %d charged", st.Used.Tokens, charged.Load())
		}
		if got := charged.Load(); got > limitTokens || got < limitTokens*95/100 {
			t.Errorf("charged %d of %d, want 95%%..100%%", got, limitTokens)
		}
		t.Logf("%d servers x %d sessions: charged %d of %d (%.1f%%)", servers, sessions, charged.Load(), limitTokens,
			100*float64(charged.Load())/limitTokens)
	})

	t.Run("a killed server's lease is reclaimed after it expires", func(t *testing.T) {
		c := ctx(t)
		store := newStore(t)
		clk := newClock(midMonth)
		lo := quota.LeaseOptions{TTL: 30 * time.Second, Ahead: time.Second, Block: 4 * time.Second, MinRequests: 1, Fraction: 1}
		limit := quota.Limit{Scope: support, Window: quota.Hour, Tokens: 10_000}
		it := itemOf(limit, midMonth)
		lo.Owner = "server-a"
		a := quota.New(store, quota.Options{Now: clk.Now, Logger: zaptest.NewLogger(t), Lease: lo}) // never drained: killed
		inflight, err := a.Reserve(c, "a-1", []quota.Limit{limit}, tokens(1000))
		if err != nil {
			t.Fatal(err)
		}
		st := readItem(t, store, it)
		la := st.Leases["server-a"]
		if st.Used.Tokens != 5000 || la.Granted.Tokens != 5000 || la.Committed.Tokens != 2000 {
			t.Fatalf("after a's first request: used %d, lease %+v; want a block of 5000 with 2000 committed", st.Used.Tokens, la)
		}
		saved, err := inflight.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		b := leaseServer(t, store, "server-b", clk.Now, lo)
		if _, err := b.Reserve(c, "b-1", []quota.Limit{limit}, tokens(6000)); !errors.Is(err, quota.ErrExceeded) {
			t.Fatalf("b's 6000 while a's lease lives = %v, want ErrExceeded", err)
		}
		clk.Add(lo.TTL + time.Second) // a is dead: its lease expires
		if _, err := b.Reserve(c, "b-2", []quota.Limit{limit}, tokens(6000)); err != nil {
			t.Fatalf("b's 6000 after a's lease expired: %v", err)
		}
		st = readItem(t, store, it)
		if _, held := st.Leases["server-a"]; held {
			t.Errorf("a's lease is still there: %+v", st.Leases["server-a"])
		}
		if st.Used.Tokens > limit.Tokens || st.Used.Tokens < 2000+6000 {
			t.Errorf("used = %d, want a's committed 2000 + b's 6000 (+ b's lease) <= 10000", st.Used.Tokens)
		}
		// b settles a's interrupted request: usage beyond its
		// reservation is charged.
		r, err := b.Restore(saved)
		if err != nil {
			t.Fatal(err)
		}
		before := readItem(t, store, it).Used.Tokens
		if err := b.Settle(c, r, tokens(1200)); err != nil {
			t.Fatal(err)
		}
		if got := readItem(t, store, it).Used.Tokens; got != before+200 {
			t.Errorf("used after settling a's request at 1200 = %d, want %d (the 200 beyond its reservation)", got, before+200)
		}
	})

	t.Run("a gone server's lease is reclaimed at what its requests used", func(t *testing.T) {
		c := ctx(t)
		store := newStore(t)
		clk := newClock(midMonth)
		lo := quota.LeaseOptions{TTL: 30 * time.Second, Ahead: time.Second, Block: 4 * time.Second, MinRequests: 2, Fraction: 1}
		limit := quota.Limit{Scope: support, Window: quota.Hour, Tokens: 100_000}
		it := itemOf(limit, midMonth)
		lo.Owner = "server-a"
		a := quota.New(store, quota.Options{Now: clk.Now, Logger: zaptest.NewLogger(t), Lease: lo}) // never drained: killed
		// The first request is admitted by a lease write (in its Spent),
		// the second locally after it (an epoch not below the write's).
		first, err := a.Reserve(c, "a-1", []quota.Limit{limit}, tokens(1000))
		if err != nil {
			t.Fatal(err)
		}
		second, err := a.Reserve(c, "a-2", []quota.Limit{limit}, tokens(1000))
		if err != nil {
			t.Fatal(err)
		}
		held := readItem(t, store, it).Leases["server-a"]
		e1, e2 := first.Items()[0].LeaseEpoch, second.Items()[0].LeaseEpoch
		if held.Spent.Tokens != 1000 || e1 >= held.Epoch || e2 < held.Epoch || held.Committed.Tokens < 2000 {
			t.Fatalf("lease %+v, epochs %d and %d: want the first request in Spent (epoch below), the second after", held, e1, e2)
		}
		// a dies. b, told a is gone, keeps what a's requests used: the
		// lease's Spent plus the second request's reservation.
		b := leaseServer(t, store, "server-b", clk.Now, lo)
		if _, err := b.Reserve(c, "b-1", []quota.Limit{limit}, tokens(500)); err != nil {
			t.Fatal(err)
		}
		leases := b.GoneLeases(c, "server-a", nil)
		if len(leases) != 1 || leases[0].Lease.Seq != held.Seq {
			t.Fatalf("gone leases %+v, want a's", leases)
		}
		before := readItem(t, store, it)
		keep := leases[0].Lease.Spent.Add(second.Amount())
		if err := b.ReclaimGone(c, leases[0], keep); err != nil {
			t.Fatal(err)
		}
		if err := b.ReclaimGone(c, leases[0], keep); err != nil { // another survivor, later: a no-op
			t.Fatal(err)
		}
		after := readItem(t, store, it)
		if _, still := after.Leases["server-a"]; still {
			t.Fatal("a's lease is still there")
		}
		if got, want := after.Used.Tokens, before.Used.Tokens-held.Granted.Tokens+2000; got != want {
			t.Fatalf("used %d after the reclaim, want %d: a's lease gone but its two requests' 2000", got, want)
		}
	})

	t.Run("a lease reclaimed from a live server", func(t *testing.T) {
		c := ctx(t)
		store := newStore(t)
		clk := newClock(midMonth)
		lo := quota.LeaseOptions{TTL: 30 * time.Second, Ahead: time.Second, Block: 4 * time.Second, MinRequests: 1, Fraction: 1}
		limit := quota.Limit{Scope: support, Window: quota.Hour, Tokens: 10_000}
		it := itemOf(limit, midMonth)
		a := leaseServer(t, store, "server-a", clk.Now, lo)
		b := leaseServer(t, store, "server-b", clk.Now, lo)
		r, err := a.Reserve(c, "a-1", []quota.Limit{limit}, tokens(1000)) // a holds 5000, 2000 committed
		if err != nil {
			t.Fatal(err)
		}
		clk.Add(lo.TTL + time.Second) // a is only slow: its lease expires all the same
		rb, err := b.Reserve(c, "b-1", []quota.Limit{limit}, tokens(6000))
		if err != nil {
			t.Fatalf("b after a's lease expired: %v", err)
		}
		if _, held := readItem(t, store, it).Leases["server-a"]; held {
			t.Fatal("a's expired lease was not reclaimed")
		}
		// a goes on: its request settles, it admits again, and nothing it
		// committed is counted twice or lost once it drains.
		if err := a.Settle(c, r, tokens(300)); err != nil {
			t.Fatal(err)
		}
		r2, err := a.Reserve(c, "a-2", []quota.Limit{limit}, tokens(500))
		if err != nil {
			t.Fatal(err)
		}
		if st := readItem(t, store, it); st.Used.Tokens > limit.Tokens {
			t.Errorf("used = %d > limit", st.Used.Tokens)
		}
		if err := a.Settle(c, r2, tokens(200)); err != nil {
			t.Fatal(err)
		}
		if err := b.Settle(c, rb, tokens(6000)); err != nil {
			t.Fatal(err)
		}
		for _, q := range []*quota.Quota{a, b} {
			if err := q.Drain(c); err != nil {
				t.Fatal(err)
			}
		}
		if got := readItem(t, store, it).Used.Tokens; got != 300+200+6000 {
			t.Errorf("used after both drained = %d, want %d", got, 300+200+6000)
		}
	})

	t.Run("drain returns unused tokens and in-flight refunds", func(t *testing.T) {
		c := ctx(t)
		store := newStore(t)
		clk := newClock(midMonth)
		q := leaseServer(t, store, "server-a", clk.Now, quota.LeaseOptions{})
		limit := quota.Limit{Scope: support, Window: quota.Hour, Tokens: 100_000}
		it := itemOf(limit, midMonth)
		done, err := q.Reserve(c, "r1", []quota.Limit{limit}, tokens(1000))
		if err != nil {
			t.Fatal(err)
		}
		open, err := q.Reserve(c, "r2", []quota.Limit{limit}, tokens(1000))
		if err != nil {
			t.Fatal(err)
		}
		if err := q.Settle(c, done, tokens(300)); err != nil {
			t.Fatal(err)
		}
		if err := q.Drain(c); err != nil {
			t.Fatal(err)
		}
		if got := readItem(t, store, it).Used.Tokens; got != 300+1000 {
			t.Errorf("used after drain = %d, want 1300 (300 settled + 1000 in flight)", got)
		}
		if err := q.Settle(c, open, tokens(100)); err != nil {
			t.Fatal(err)
		}
		if got := readItem(t, store, it).Used.Tokens; got != 400 {
			t.Errorf("used after the last settle = %d, want 400", got)
		}
		// A drained server still admits, one conditional write per request.
		r, err := q.Reserve(c, "r3", []quota.Limit{limit}, tokens(50))
		if err != nil {
			t.Fatal(err)
		}
		if err := q.Settle(c, r, tokens(50)); err != nil {
			t.Fatal(err)
		}
		if got := readItem(t, store, it).Used.Tokens; got != 450 {
			t.Errorf("used = %d, want 450", got)
		}
	})

	t.Run("Run returns an idle lease", func(t *testing.T) {
		c := ctx(t)
		store := newStore(t)
		q := leaseServer(t, store, "server-a", time.Now, quota.LeaseOptions{TTL: 200 * time.Millisecond})
		limit := quota.Limit{Scope: support, Window: quota.Day, Tokens: 1_000_000}
		r, err := q.Reserve(c, "r1", []quota.Limit{limit}, tokens(1000))
		if err != nil {
			t.Fatal(err)
		}
		if err := q.Settle(c, r, tokens(10)); err != nil {
			t.Fatal(err)
		}
		it := itemOf(limit, time.Now())
		if got := readItem(t, store, it).Used.Tokens; got <= 10 {
			t.Fatalf("used = %d, want a lease beyond the 10 settled", got)
		}
		runCtx, stop := context.WithCancel(c)
		ran := make(chan error, 1)
		go func() { ran <- q.Run(runCtx) }()
		deadline := time.Now().Add(20 * time.Second)
		for readItem(t, store, it).Used.Tokens != 10 {
			if time.Now().After(deadline) {
				t.Fatalf("used = %d after 20s, want the idle lease returned (10)", readItem(t, store, it).Used.Tokens)
			}
			time.Sleep(10 * time.Millisecond) // polling the store, with a deadline
		}
		stop()
		if err := <-ran; err != nil {
			t.Errorf("Run = %v", err)
		}
	})

	t.Run("usage past the committed amount is written at once", func(t *testing.T) {
		c := ctx(t)
		store := newStore(t)
		clk := newClock(midMonth)
		lo := quota.LeaseOptions{Ahead: time.Second, Block: time.Second, MinRequests: 1}
		q := leaseServer(t, store, "server-a", clk.Now, lo)
		limit := quota.Limit{Scope: support, Window: quota.Hour, Tokens: 2500}
		it := itemOf(limit, midMonth)
		r, err := q.Reserve(c, "r1", []quota.Limit{limit}, tokens(1000))
		if err != nil {
			t.Fatal(err)
		}
		if err := q.Settle(c, r, tokens(2800)); err != nil {
			t.Fatal(err)
		}
		if got := readItem(t, store, it).Used.Tokens; got < 2800 {
			t.Errorf("used = %d, want at least the 2800 that happened", got)
		}
		if _, err := q.Reserve(c, "r2", []quota.Limit{limit}, tokens(1)); !errors.Is(err, quota.ErrExceeded) {
			t.Errorf("Reserve over a spent limit = %v, want ErrExceeded", err)
		}
	})
}

func TestMemoryStoreLeases(t *testing.T) {
	testLeaseContract(t, func(t *testing.T) quota.Store { return quota.NewMemoryStore() })
}
