package fleet_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/jetway-gateway/jetway/internal/dynalitetest"
	"github.com/jetway-gateway/jetway/internal/fleet"
)

// watchedStore is a Store that records when its server renewed its own
// item and how many MarkGone calls were in flight at once.
type watchedStore struct {
	fleet.Store
	self string

	mu       sync.Mutex
	puts     []time.Time
	marking  int
	maxMarks int
	marks    atomic.Int64
}

func (s *watchedStore) Put(ctx context.Context, it fleet.Item) error {
	err := s.Store.Put(ctx, it)
	if err == nil && it.ID == s.self {
		s.mu.Lock()
		s.puts = append(s.puts, time.Now())
		s.mu.Unlock()
	}
	return err
}

func (s *watchedStore) MarkGone(ctx context.Context, id string, hb, exp time.Time) error {
	s.mu.Lock()
	s.marking++
	s.maxMarks = max(s.maxMarks, s.marking)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.marking--
		s.mu.Unlock()
	}()
	s.marks.Add(1)
	return s.Store.MarkGone(ctx, id, hb, exp)
}

// longestGap is the longest time between two renewals of the server's own item.
func (s *watchedStore) longestGap() (gap time.Duration, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := 1; i < len(s.puts); i++ {
		gap = max(gap, s.puts[i].Sub(s.puts[i-1]))
	}
	return gap, len(s.puts)
}

// The fleet judge against a table full of stale items (a crashed
// deploy's leftovers, or forged), on dynalite with a round trip added to
// every call: the two live servers keep renewing their own items on their
// period while they judge, mark at most MarkConcurrency at a time, and
// neither is judged gone nor expelled.
func TestForgedStaleItemsDoNotStarveTheHeartbeat(t *testing.T) {
	if testing.Short() {
		t.Skip("2,000 forged items")
	}
	const (
		forged    = 2000
		heartbeat = time.Second
		stale     = 4 * time.Second
	)
	endpoint := dynalitetest.StartDelayed(t, dynalitetest.RoundTripDelay/2+time.Millisecond) // ~7 ms a call
	client := dynalitetest.Client(t, endpoint)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	table := dynalitetest.TableName(t)
	if err := fleet.CreateTable(ctx, client, table); err != nil {
		t.Fatal(err)
	}
	raw := fleet.NewDynamoStore(client, table)

	// The leftovers: 2,000 items whose heartbeat stopped a minute ago.
	old := time.UnixMilli(time.Now().Add(-time.Minute).UnixMilli())
	writeItems(t, forged, func(i int) error {
		return raw.Put(ctx, fleet.Item{Member: fleet.Member{ID: fmt.Sprintf("leftover-%04d", i), Started: old.Add(-time.Minute), Heartbeat: old},
			Expires: time.Now().Add(time.Hour)})
	})

	ids := []string{"judge-a", "judge-b"}
	stores := map[string]*watchedStore{}
	members := map[string]*fleet.Membership{}
	var goneA atomic.Int64
	var expelled atomic.Bool
	goneLive := make(chan string, 2)
	for _, id := range ids {
		st := &watchedStore{Store: raw, self: id}
		m := fleet.NewMembership(st, fleet.Options{ID: id, Heartbeat: heartbeat, StaleAfter: stale,
			Load: func() fleet.Load { return fleet.Load{Sessions: 1} }}, zaptest.NewLogger(t))
		m.OnExpelled(func() { expelled.Store(true) })
		m.OnGone(func(gone string) {
			for _, live := range ids {
				if gone == live {
					goneLive <- gone
				}
			}
			if id == "judge-a" {
				goneA.Add(1)
			}
		})
		if err := m.Join(ctx); err != nil {
			t.Fatal(err)
		}
		stores[id], members[id] = st, m
	}
	runCtx, stop := context.WithCancel(ctx)
	var running sync.WaitGroup
	for _, m := range members {
		running.Add(1)
		go func() { defer running.Done(); _ = m.Run(runCtx) }()
	}
	defer func() { stop(); running.Wait() }()

	// Both stay healthy while every leftover is judged (polled).
	start := time.Now()
	unhealthy := 0
	for goneA.Load() < forged {
		if time.Since(start) > 2*time.Minute {
			t.Fatalf("judge-a judged %d of %d leftovers gone in %s", goneA.Load(), forged, time.Since(start))
		}
		for id, m := range members {
			if !m.Healthy() {
				unhealthy++
				t.Errorf("%s unhealthy at %s", id, time.Since(start).Round(time.Millisecond))
			}
		}
		select {
		case id := <-goneLive:
			t.Fatalf("live server %s judged gone", id)
		case <-time.After(100 * time.Millisecond): // poll
		}
	}
	took := time.Since(start)
	stop()
	running.Wait()
	if expelled.Load() {
		t.Fatal("a live server was expelled")
	}
	for _, id := range ids {
		gap, n := stores[id].longestGap()
		t.Logf("%s: %d renewals in %s, longest gap %s (heartbeat %s); marks %d, at most %d at once",
			id, n, took.Round(time.Millisecond), gap.Round(time.Millisecond), heartbeat, stores[id].marks.Load(), stores[id].maxMarks)
		if gap >= stale/2 {
			t.Errorf("%s went %s without renewing: past half the stale bound", id, gap)
		}
		if stores[id].maxMarks > fleet.MarkConcurrency {
			t.Errorf("%s had %d marks in flight, above %d", id, stores[id].maxMarks, fleet.MarkConcurrency)
		}
	}
	for _, id := range ids {
		for _, other := range ids {
			if members[id].Gone(other, time.Time{}) {
				t.Errorf("%s judges %s gone", id, other)
			}
		}
	}
}

// The heartbeat's Scan with 5,000 gone items in the table (a crashed
// deploy's leftovers, marked gone), before and after the members forget
// them: the table shrinks back to the live items. The durations are
// logged for docs/benchmarks.md, not asserted.
func TestGoneItemsLeaveTheScan(t *testing.T) {
	if testing.Short() {
		t.Skip("5,000 gone items")
	}
	const gone = 5000
	client := dynalitetest.Client(t, dynalitetest.Start(t))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	table := dynalitetest.TableName(t)
	if err := fleet.CreateTable(ctx, client, table); err != nil {
		t.Fatal(err)
	}
	store := fleet.NewDynamoStore(client, table)
	writeItems(t, gone, func(i int) error {
		return store.MarkGone(ctx, fmt.Sprintf("left-%04d", i), time.Time{}, time.Now().Add(time.Hour))
	})
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	skip := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	m := fleet.NewMembership(store, fleet.Options{ID: "scan-a", Now: clock}, zaptest.NewLogger(t))
	if err := m.Join(ctx); err != nil {
		t.Fatal(err)
	}
	scan := func() (time.Duration, int) {
		var took []time.Duration
		n := 0
		for range 5 {
			start := time.Now()
			items, err := store.List(ctx)
			if err != nil {
				t.Fatal(err)
			}
			took = append(took, time.Since(start))
			n = len(items)
		}
		slices.Sort(took)
		return took[2], n
	}
	before, items := scan()
	reads := 0
	for {
		skip(fleet.DefaultHeartbeat)
		m.Refresh(ctx)
		reads++
		if reads%20 == 0 {
			skip(fleet.GoneRetention) // the retention passes for what the view holds
		}
		got, err := store.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 1 {
			break
		}
		if reads > 2*gone/fleet.MarksPerRead+100 {
			t.Fatalf("%d items left after %d reads", len(got), reads)
		}
	}
	after, left := scan()
	t.Logf("Scan of %d items: median %s; after %d reads forgot the gone ones, Scan of %d: median %s",
		items, before.Round(10*time.Microsecond), reads, left, after.Round(10*time.Microsecond))
}

// writeItems calls write for 0..n-1, 16 at a time, and fails t on the
// first error.
func writeItems(t *testing.T, n int, write func(i int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 16 {
				if err := write(i); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}
