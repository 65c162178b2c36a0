package fleet

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/jetway-gateway/jetway/internal/telemetry"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// loaded is a live member with sessions and requests in flight.
func loaded(id string, sessions, inflight int) Member {
	return Member{ID: id, Started: t0.Add(-time.Hour), Heartbeat: t0.Add(-time.Second),
		Load: Load{Sessions: sessions, InFlight: inflight, Streams: inflight}, Serving: true}
}

func TestDecide(t *testing.T) {
	draining := loaded("d", 0, 0)
	draining.Draining = true
	huge := loaded("h", MaxLoad+1, 0)
	negative := loaded("n", -5, 0)
	noID := loaded("", 0, 0)
	unseen := loaded("u", 0, 0)
	unseen.Serving = false
	// Moves of this server: 100 after the siblings' heartbeats (in
	// transit: not in their reports yet), 50 before (already counted).
	inTransit := []moved{{at: t0.Add(-10 * time.Second), n: 50}, {at: t0, n: 100}}

	cases := []struct {
		name     string
		staying  int
		members  []Member
		recent   []moved
		moving   bool // a confirmed excess is being moved
		excess   int
		mean     float64
		room     bool
		nIgnored int
	}{
		{name: "alone: nothing moves", staying: 300, members: []Member{loaded("me", 300, 50)}, mean: 300},
		{name: "not in the roster yet, alone", staying: 300, mean: 300},
		{name: "scale-out: 300 here, two empty siblings", staying: 300,
			members: []Member{loaded("me", 300, 50), loaded("a", 0, 0), loaded("b", 0, 0)}, excess: 200, mean: 100, room: true},
		{name: "not in the roster yet: its live count stands in", staying: 300,
			members: []Member{loaded("a", 0, 0), loaded("b", 0, 0)}, excess: 200, mean: 100, room: true},
		{name: "within the margin (109 of mean 100)", staying: 109,
			members: []Member{loaded("me", 109, 1), loaded("a", 96, 1), loaded("b", 95, 1)}, mean: 100},
		{name: "past the margin, within a uniform spread's noise (115 of mean 100): nothing starts", staying: 115,
			members: []Member{loaded("me", 115, 1), loaded("a", 93, 1), loaded("b", 92, 1)}, mean: 100},
		{name: "past the noise: moves down to the mean", staying: 125,
			members: []Member{loaded("me", 125, 1), loaded("a", 88, 1), loaded("b", 87, 1)}, excess: 25, mean: 100},
		{name: "moving: past the margin, down to the mean", staying: 115, moving: true,
			members: []Member{loaded("me", 115, 1), loaded("a", 93, 1), loaded("b", 92, 1)}, excess: 15, mean: 100},
		{name: "past 10% but within the absolute minimum", staying: 14,
			members: []Member{loaded("me", 14, 0), loaded("a", 8, 0)}, mean: 11},
		{name: "stale siblings: its moves since their heartbeats count as in transit", staying: 200,
			members: []Member{loaded("me", 200, 0), loaded("a", 0, 0), loaded("b", 0, 0)}, recent: inTransit, excess: 100, mean: 100},
		{name: "below the mean: nothing", staying: 50,
			members: []Member{loaded("me", 50, 0), loaded("a", 125, 0), loaded("b", 125, 0)}, mean: 100},
		{name: "a draining sibling takes no sessions and is not counted", staying: 150,
			members: []Member{loaded("me", 150, 10), loaded("a", 150, 20), draining}, mean: 150},
		{name: "a sibling never seen serving is not counted", staying: 150,
			members: []Member{loaded("me", 150, 10), loaded("a", 150, 20), unseen}, mean: 150},
		{name: "bad items are ignored", staying: 300,
			members: []Member{loaded("me", 300, 5), loaded("a", 0, 0), huge, negative, noID},
			excess:  150, mean: 150, room: true, nIgnored: 3},
		{name: "room: a sibling has fewer in flight", staying: 100,
			members: []Member{loaded("me", 100, 2000), loaded("a", 100, 1999)}, mean: 100, room: true},
		{name: "no room: siblings as busy", staying: 100,
			members: []Member{loaded("me", 100, 2000), loaded("a", 100, 2000)}, mean: 100},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := decide("me", c.staying, c.members, c.recent, DefaultBalanceMargin, c.moving)
			if v.excess != c.excess || v.spread.Mean != c.mean || v.room != c.room || len(v.ignored) != c.nIgnored {
				t.Fatalf("decide = excess %d mean %v room %v ignored %v; want excess %d mean %v room %v, %d ignored",
					v.excess, v.spread.Mean, v.room, v.ignored, c.excess, c.mean, c.room, c.nIgnored)
			}
			if v.spread.Sessions != c.staying {
				t.Fatalf("spread sessions %d, want the live count %d", v.spread.Sessions, c.staying)
			}
		})
	}
}

// fakeRoster and fakeHub are the balancer's world: a roster the test sets,
// and a hub whose sessions leave when asked to move.
// Unless frozen, every read of the roster is a fresh view: each sibling's
// heartbeat is a nanosecond newer (the siblings renew), while its load
// stays as set (older than any move).
type fakeRoster struct {
	mu      sync.Mutex
	members []Member
	frozen  bool
	reads   time.Duration
}

func (r *fakeRoster) Self() string { return "me" }
func (r *fakeRoster) Members() []Member {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.frozen {
		r.reads++
	}
	out := append([]Member(nil), r.members...)
	for i := range out {
		out[i].Heartbeat = out[i].Heartbeat.Add(r.reads)
	}
	return out
}

type fakeHub struct {
	mu      sync.Mutex
	staying int
	idle    int // of staying, how many have nothing in flight
	moves   []int
	reasons []string
}

func (h *fakeHub) Staying() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.staying
}

func (h *fakeHub) MoveIdle(n int, reason string, _ Spread) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n = min(n, h.idle)
	h.staying -= n
	h.idle -= n
	h.moves = append(h.moves, n)
	h.reasons = append(h.reasons, reason)
	return n
}

func newClock() *clock { return &clock{now: t0} }
func sum(xs []int) (s int) {
	for _, x := range xs {
		s += x
	}
	return s
}
func roster(ms ...Member) *fakeRoster { return &fakeRoster{members: ms} }
func hub(staying, idle int) *fakeHub  { return &fakeHub{staying: staying, idle: idle} }

// The rate: 300 sessions over a mean of 100 move at MovesPerSecond, one
// interval's allowance per step, and stop at the mean, although the
// siblings' reports never change (their heartbeats are older than every
// move): the moves in transit keep the mean at 100.
func TestBalancerMovesAtTheRateUntilTheMean(t *testing.T) {
	clk := newClock()
	r := roster(loaded("me", 300, 0), loaded("a", 0, 0), loaded("b", 0, 0))
	h := hub(300, 300)
	b := NewBalancer(r, h, zaptest.NewLogger(t), BalanceOptions{Interval: time.Second, MovesPerSecond: 20, Now: clk.Now})
	var steps []int
	clk.advance(time.Second)
	if n := b.step(); n != 0 {
		t.Fatalf("moved %d on the first fresh view, want none before %d views", n, ConfirmViews)
	}
	for i := 0; i < 30; i++ {
		clk.advance(time.Second)
		steps = append(steps, b.step())
	}
	for i, n := range steps {
		if n > 20 {
			t.Fatalf("step %d moved %d sessions, over 20 a second: %v", i, n, steps)
		}
	}
	if got := sum(steps); got != 200 {
		t.Fatalf("moved %d sessions in all, want 200 (down to the mean of 100): %v", got, steps)
	}
	if h.staying != 100 {
		t.Fatalf("%d sessions stay, want the mean 100", h.staying)
	}
	for _, reason := range h.reasons {
		if reason != telemetry.MoveBalance {
			t.Fatalf("reason %q, want %q", reason, telemetry.MoveBalance)
		}
	}
}

// A reconnect storm is bounded: however long the balancer was quiet (a
// long pause, a slow tick), one step never moves more than one interval's
// allowance.
func TestBalancerBurstIsOneInterval(t *testing.T) {
	clk := newClock()
	h := hub(3000, 3000)
	b := NewBalancer(roster(loaded("me", 3000, 0), loaded("a", 0, 0)), h, zaptest.NewLogger(t),
		BalanceOptions{Interval: 500 * time.Millisecond, MovesPerSecond: 20, Now: clk.Now})
	b.step() // the first fresh view
	clk.advance(time.Hour)
	if n := b.step(); n != 10 {
		t.Fatalf("after an hour's pause one step moved %d, want one interval's 10", n)
	}
	clk.advance(100 * time.Millisecond)
	if n := b.step(); n != 2 {
		t.Fatalf("100 ms later a step moved %d, want 2", n)
	}
}

// Sessions with requests in flight are not moved by the balancer; the
// allowance they did not use stays for the next step.
func TestBalancerMovesOnlyIdleSessions(t *testing.T) {
	clk := newClock()
	h := hub(300, 5)
	b := NewBalancer(roster(loaded("me", 300, 0), loaded("a", 0, 0), loaded("b", 0, 0)), h, zaptest.NewLogger(t),
		BalanceOptions{Interval: time.Second, MovesPerSecond: 20, Now: clk.Now})
	clk.advance(time.Second)
	b.step() // the first fresh view
	if n := b.step(); n != 5 {
		t.Fatalf("moved %d, want the 5 idle sessions", n)
	}
	h.mu.Lock()
	h.idle = 100 // their requests finished
	h.mu.Unlock()
	clk.advance(100 * time.Millisecond)
	if n := b.step(); n != 17 {
		t.Fatalf("moved %d, want the 15 left of the last allowance plus 2 earned", n)
	}
}

// busy moves share the rate with balance moves, and need a sibling with
// fewer requests in flight.
func TestRoomElsewhere(t *testing.T) {
	clk := newClock()
	r := roster(loaded("me", 100, 2000), loaded("a", 100, 2000))
	b := NewBalancer(r, hub(100, 0), zaptest.NewLogger(t), BalanceOptions{Interval: time.Second, MovesPerSecond: 5, Now: clk.Now})
	clk.advance(time.Second)
	b.step()
	if _, ok := b.RoomElsewhere(); ok {
		t.Fatal("room elsewhere while every sibling is as busy")
	}
	r.mu.Lock()
	r.members[1].Load.InFlight = 10
	r.mu.Unlock()
	clk.advance(time.Second)
	b.step()
	allowed := 0
	for i := 0; i < 100; i++ {
		if at, ok := b.RoomElsewhere(); ok {
			allowed++
			if at.Mean != 100 || at.Sessions != 100 {
				t.Fatalf("spread %+v", at)
			}
		}
	}
	if allowed != 5 {
		t.Fatalf("%d busy moves allowed at once, want the bucket's 5", allowed)
	}
	clk.advance(200 * time.Millisecond)
	if _, ok := b.RoomElsewhere(); !ok {
		t.Fatal("no busy move 200 ms later at 5 a second")
	}
}

// A bad item is logged once, not every step, and again only when its
// member comes back bad after leaving.
func TestIgnoredMemberLoggedOnce(t *testing.T) {
	core, logs := observer.New(zap.WarnLevel)
	clk := newClock()
	huge := loaded("h", MaxLoad+1, 0)
	r := roster(loaded("me", 10, 0), huge)
	b := NewBalancer(r, hub(10, 10), zap.New(core), BalanceOptions{Now: clk.Now})
	for i := 0; i < 5; i++ {
		clk.advance(time.Second)
		b.step()
	}
	if n := logs.FilterMessage("fleet_member_ignored").Len(); n != 1 {
		t.Fatalf("%d fleet_member_ignored lines, want 1", n)
	}
}

// An excess seen on one view only, or on views whose siblings' loads were
// already judged (no new heartbeat), moves nothing: a reconnect storm
// against a stale roster is not an imbalance.
func TestBalancerMovesOnlyOnConsecutiveFreshViews(t *testing.T) {
	clk := newClock()
	r := roster(loaded("me", 300, 0), loaded("a", 0, 0), loaded("b", 0, 0))
	h := hub(300, 300)
	b := NewBalancer(r, h, zaptest.NewLogger(t), BalanceOptions{Now: clk.Now})
	clk.advance(time.Second)
	b.step() // one fresh view
	r.mu.Lock()
	r.frozen = true // the siblings' heartbeats stop: every view is the one already seen
	r.mu.Unlock()
	for range 20 {
		clk.advance(time.Second)
		if n := b.step(); n != 0 {
			t.Fatalf("moved %d on a view with no new heartbeat", n)
		}
	}
	// Fresh again, but the excess is gone on that view: still nothing.
	h.mu.Lock()
	h.staying = 0
	h.mu.Unlock()
	r.mu.Lock()
	r.frozen = false
	r.mu.Unlock()
	clk.advance(time.Second)
	if n := b.step(); n != 0 {
		t.Fatalf("moved %d with no excess", n)
	}
	h.mu.Lock()
	h.staying = 300
	h.mu.Unlock()
	clk.advance(time.Second)
	if n := b.step(); n != 0 {
		t.Fatalf("moved %d on the first fresh view of a new excess", n)
	}
	clk.advance(time.Second)
	if n := b.step(); n == 0 {
		t.Fatal("an excess on two consecutive fresh views moved nothing")
	}
}

// comebackHub is a hub whose moved sessions all come back (a sibling
// that takes none, or a load balancer that sends every reconnect here).
type comebackHub struct{ fakeHub }

func (h *comebackHub) MoveIdle(n int, reason string, at Spread) int {
	n = h.fakeHub.MoveIdle(n, reason, at)
	h.mu.Lock()
	h.staying += n
	h.idle += n
	h.mu.Unlock()
	return n
}

// 200 members that heartbeat with 0 sessions (never seen serving) draw
// nothing; when they claim to serve but every moved session comes back,
// the balancer backs off: far fewer moves than its rate allows.
func TestBalancerBacksOffWhenMovesComeBack(t *testing.T) {
	members := []Member{loaded("me", 300, 0)}
	for i := range 200 {
		m := loaded(fmt.Sprintf("empty-%d", i), 0, 0)
		m.Serving = false
		members = append(members, m)
	}
	clk := newClock()
	r := roster(members...)
	h := &comebackHub{fakeHub{staying: 300, idle: 300}}
	b := NewBalancer(r, h, zap.NewNop(), BalanceOptions{Now: clk.Now})
	for range 60 {
		clk.advance(time.Second)
		b.step()
	}
	if moved := sum(h.moves); moved != 0 {
		t.Fatalf("moved %d sessions toward members never seen serving", moved)
	}
	r.mu.Lock()
	for i := range r.members {
		r.members[i].Serving = true
	}
	r.mu.Unlock()
	for range 120 {
		clk.advance(time.Second)
		b.step()
	}
	t.Logf("moves %v", h.moves)
	// Unchecked, 20 a second for 2 minutes: 2,400.
	if moved := sum(h.moves); moved == 0 || moved > 200 {
		t.Fatalf("moved %d sessions in 2 minutes of moves that all came back, want some but few (back-off)", moved)
	}
}
