package fleet

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
)

// memStore is a Store in memory with an outage switch.
type memStore struct {
	mu    sync.Mutex
	items map[string]Item
	down  bool
}

func newMemStore() *memStore { return &memStore{items: map[string]Item{}} }

func (s *memStore) Put(_ context.Context, it Item) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		return ErrUnavailable
	}
	if s.items[it.ID].Gone {
		return ErrGone
	}
	s.items[it.ID] = it
	return nil
}

func (s *memStore) List(context.Context) ([]Item, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		return nil, ErrUnavailable
	}
	var out []Item
	for _, it := range s.items {
		out = append(out, it)
	}
	return out, nil
}

func (s *memStore) MarkGone(_ context.Context, id string, hb, exp time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		return ErrUnavailable
	}
	it := s.items[id]
	if !hb.IsZero() && !it.Heartbeat.Equal(hb) {
		return ErrChanged
	}
	it.ID, it.Gone, it.Expires = id, true, exp
	s.items[id] = it
	return nil
}

func (s *memStore) Forget(_ context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		return ErrUnavailable
	}
	if !s.items[id].Gone {
		return ErrChanged
	}
	delete(s.items, id)
	return nil
}

func (s *memStore) setDown(d bool) {
	s.mu.Lock()
	s.down = d
	s.mu.Unlock()
}

// clock is a fake clock shared by the members of a test.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func member(t *testing.T, s Store, c *clock, id string) *Membership {
	t.Helper()
	m := NewMembership(s, Options{ID: id, Heartbeat: time.Second, StaleAfter: 5 * time.Second, Now: c.Now,
		Load: func() Load { return Load{Sessions: len(id)} }}, zaptest.NewLogger(t))
	if err := m.Join(context.Background()); err != nil {
		t.Fatal(err)
	}
	return m
}

func ids(ms []Member) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.ID)
	}
	slices.Sort(out)
	return out
}

// rounds runs n heartbeat rounds of every member, advancing the clock one
// heartbeat before each.
func rounds(c *clock, n int, ms ...*Membership) {
	for range n {
		c.advance(time.Second)
		for _, m := range ms {
			m.Refresh(context.Background())
		}
	}
}

func TestKilledMemberIsGoneAfterTheStaleBound(t *testing.T) {
	s, c := newMemStore(), &clock{now: time.Unix(1_900_000_000, 0)}
	a, b := member(t, s, c, "a"), member(t, s, c, "bb")
	var gone []string
	a.OnGone(func(id string) { gone = append(gone, id) })
	rounds(c, 2, a, b)
	if got := ids(a.Members()); !slices.Equal(got, []string{"a", "bb"}) {
		t.Fatalf("members = %v", got)
	}
	since := c.Now()
	rounds(c, 4, a) // b is killed: only a runs
	if a.Gone("bb", since) || len(gone) != 0 {
		t.Fatalf("bb gone after 4 s of a 5 s bound")
	}
	rounds(c, 2, a)
	if !a.Gone("bb", since) || !slices.Equal(gone, []string{"bb"}) {
		t.Fatalf("gone = %v; Gone(bb) = %v, want bb gone once", gone, a.Gone("bb", since))
	}
	rounds(c, 3, a)
	if len(gone) != 1 {
		t.Fatalf("OnGone called %d times", len(gone))
	}
	if got := ids(a.Members()); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("members = %v", got)
	}
	// b was alive after all (a long pause): it learns it was expelled.
	expelled := false
	b.OnExpelled(func() { expelled = true })
	b.Refresh(context.Background())
	if !expelled || b.Healthy() {
		t.Fatalf("expelled = %v, healthy = %v: want expelled and unhealthy", expelled, b.Healthy())
	}
}

func TestAStoreStallMakesNobodyGone(t *testing.T) {
	s, c := newMemStore(), &clock{now: time.Unix(1_900_000_000, 0)}
	a, b := member(t, s, c, "a"), member(t, s, c, "bb")
	var gone []string
	a.OnGone(func(id string) { gone = append(gone, id) })
	b.OnGone(func(id string) { gone = append(gone, id) })
	rounds(c, 2, a, b)
	s.setDown(true)
	rounds(c, 12, a, b) // every call fails for 12 s: more than the bound
	if a.Healthy() || b.Healthy() {
		t.Fatal("a server that cannot renew its item must not admit")
	}
	s.setDown(false)
	// The first good read after the stall sees old heartbeats: that restarts the clock.
	rounds(c, 1, a)
	rounds(c, 4, a, b)
	if len(gone) != 0 || a.Gone("bb", c.Now().Add(-time.Hour)) || b.Gone("a", c.Now().Add(-time.Hour)) {
		t.Fatalf("gone after a stall: %v", gone)
	}
	if !a.Healthy() || !b.Healthy() {
		t.Fatal("healthy again after the stall")
	}
}

func TestCleanLeaveIsGoneAtOnce(t *testing.T) {
	s, c := newMemStore(), &clock{now: time.Unix(1_900_000_000, 0)}
	a, b := member(t, s, c, "a"), member(t, s, c, "bb")
	rounds(c, 1, a, b)
	if err := b.Leave(context.Background()); err != nil {
		t.Fatal(err)
	}
	rounds(c, 1, a)
	if !a.Gone("bb", c.Now()) {
		t.Fatal("a member that left is gone at the next read")
	}
}

func TestUnknownMemberIsGoneOnlyAfterTheStaleBound(t *testing.T) {
	s, c := newMemStore(), &clock{now: time.Unix(1_900_000_000, 0)}
	a := member(t, s, c, "a")
	rounds(c, 1, a)
	if a.Gone("ghost", c.Now()) {
		t.Fatal("no read since the question: not known gone")
	}
	if a.Gone("ghost", c.Now().Add(-2*time.Second)) {
		t.Fatal("absent from reads covering 2 s of a 5 s bound: not yet gone")
	}
	rounds(c, 5, a)
	if !a.Gone("ghost", c.Now().Add(-6*time.Second)) {
		t.Fatal("absent from every read for the stale bound: gone")
	}
}

// A live member's item deleted (by hand, or by anyone with write access
// to the table) is not a death: the member rewrites it at its next
// heartbeat, and nobody judges it gone, nor ends what it owns, meanwhile.
func TestDeletedItemIsNotGoneBeforeTheStaleBound(t *testing.T) {
	s, c := newMemStore(), &clock{now: time.Unix(1_900_000_000, 0)}
	a, b := member(t, s, c, "a"), member(t, s, c, "bb")
	var gone []string
	a.OnGone(func(id string) { gone = append(gone, id) })
	rounds(c, 2, a, b)
	since := c.Now().Add(-time.Second)
	s.mu.Lock()
	delete(s.items, "bb")
	s.mu.Unlock()
	rounds(c, 1, a) // a reads before b renews
	if a.Gone("bb", since) || len(gone) != 0 {
		t.Fatal("bb judged gone at the first read without its item")
	}
	rounds(c, 8, a, b) // b renews: its item is back
	if a.Gone("bb", since) || len(gone) != 0 || !b.Healthy() {
		t.Fatalf("bb gone = %v (%v), healthy %v", a.Gone("bb", since), gone, b.Healthy())
	}
	// Deleted and silent for the stale bound: gone, once.
	s.mu.Lock()
	delete(s.items, "bb")
	s.mu.Unlock()
	rounds(c, 7, a)
	if !a.Gone("bb", since) || !slices.Equal(gone, []string{"bb"}) {
		t.Fatalf("gone = %v: a deleted, silent member is gone after the stale bound", gone)
	}
}

// A member seen serving (the load balancer checks it, or it held a
// session) is marked so in the roster; one that only heartbeats is not.
func TestServingIsSticky(t *testing.T) {
	s, c := newMemStore(), &clock{now: time.Unix(1_900_000_000, 0)}
	a := member(t, s, c, "a")
	now := c.Now()
	s.items["idle"] = Item{Member: Member{ID: "idle", Started: now, Heartbeat: now}}
	s.items["busy"] = Item{Member: Member{ID: "busy", Started: now, Heartbeat: now, Load: Load{Sessions: 3}}}
	rounds(c, 1, a)
	s.items["busy"] = Item{Member: Member{ID: "busy", Started: now, Heartbeat: c.Now()}}
	s.items["idle"] = Item{Member: Member{ID: "idle", Started: now, Heartbeat: c.Now()}}
	rounds(c, 1, a)
	serving := map[string]bool{}
	for _, m := range a.Members() {
		serving[m.ID] = m.Serving
	}
	if !serving["a"] || !serving["busy"] || serving["idle"] {
		t.Fatalf("serving = %v, want a and busy (sticky), not idle", serving)
	}
}

func TestMalformedItemsAreIgnored(t *testing.T) {
	s, c := newMemStore(), &clock{now: time.Unix(1_900_000_000, 0)}
	a := member(t, s, c, "a")
	now := c.Now()
	for _, it := range []Item{
		{Member: Member{ID: "future", Started: now, Heartbeat: now.Add(time.Hour)}},
		{Member: Member{ID: "huge", Started: now, Heartbeat: now, Load: Load{Sessions: MaxLoad + 1}}},
		{Member: Member{ID: "empty"}},
	} {
		s.items[it.ID] = it
	}
	rounds(c, 1, a)
	if got := ids(a.Members()); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("members = %v, want only a", got)
	}
}

func TestFleetOfOne(t *testing.T) {
	m := NewMembership(nil, Options{ID: "solo"}, zaptest.NewLogger(t))
	if err := m.Join(context.Background()); err != nil || !m.Healthy() || m.Gone("x", time.Time{}) {
		t.Fatalf("a fleet of one: join %v, healthy %v", err, m.Healthy())
	}
	if got := ids(m.Members()); !slices.Equal(got, []string{"solo"}) {
		t.Fatalf("members = %v", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := m.Run(ctx); !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
}

// Gone items do not stay in the table for the TTL's hour: GoneRetention
// after a server saw one gone, it deletes it, MarksPerRead a read; the
// live ones stay.
func TestGoneItemsAreForgotten(t *testing.T) {
	s, c := newMemStore(), &clock{now: time.Unix(1_900_000_000, 0)}
	a := member(t, s, c, "a")
	now := c.Now()
	const gone = 3 * MarksPerRead
	for i := range gone {
		id := "left-" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		s.items[id] = Item{Member: Member{ID: id, Started: now, Heartbeat: now}, Gone: true}
	}
	rounds(c, 4, a) // all in the view (64 new ids a read)
	c.advance(GoneRetention)
	reads := 0
	for {
		s.mu.Lock()
		n := len(s.items)
		s.mu.Unlock()
		if n == 1 {
			break
		}
		if reads++; reads > 10 {
			t.Fatalf("%d items left after %d reads", n, reads)
		}
		rounds(c, 1, a)
	}
	if reads < gone/MarksPerRead {
		t.Fatalf("forgot %d items in %d reads: more than %d a read", gone, reads, MarksPerRead)
	}
	if _, ok := s.items["a"]; !ok {
		t.Fatal("the live item was deleted")
	}
}
