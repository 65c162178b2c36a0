package fleet

import (
	"context"
	"math"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/jetway-gateway/jetway/internal/telemetry"
)

// The balancer's defaults, written once: the gateway's settings and
// docs/configuration.md use these.
const (
	// DefaultBalanceInterval is how often a server compares its sessions
	// with the fleet's. Reading the roster is a copy in memory, so a short
	// interval costs nothing; the move rate, not the interval, bounds the
	// moves.
	DefaultBalanceInterval = time.Second
	// DefaultBalanceMargin: a server moves sessions only while it holds
	// more than the mean by this fraction (10%): within it the fleet is
	// even enough, and servers do not trade sessions back and forth.
	DefaultBalanceMargin = 0.10
	// DefaultMovesPerSecond bounds the sessions one server asks to move per
	// second (a token bucket holding at most one interval's worth). A move
	// costs its client one new WebSocket and one token check on another
	// server; 20 a second moves 1,000 excess sessions in under a minute,
	// and N hot servers send the fleet at most 20 x N reconnects a second.
	DefaultMovesPerSecond = 20.0
)

// Fixed bounds of the balance rule (not settings).
const (
	// BalanceMinExcess: a server also moves sessions only while it holds
	// more than the mean plus this many, so a small fleet with a handful of
	// sessions is left alone (10% of 8 is less than one session).
	BalanceMinExcess = 5
	// movesRemembered is how long the balancer counts its own moves as in
	// transit (see decide): far longer than any live member's heartbeat
	// age, and it bounds the memory to one entry per step or busy move.
	movesRemembered = time.Minute
	// ConfirmViews: the balancer moves only on an excess seen in this many
	// consecutive fresh views (every counted sibling's heartbeat newer
	// than in the view before). A reconnect storm shows this server's live
	// count against siblings' counts a heartbeat old; an imbalance that
	// is only that lag is gone by the next fresh view.
	ConfirmViews = 2
	// BackoffFirst and BackoffMost bound the balancer's back-off: when a
	// fresh view after its moves shows an excess no smaller (the moved
	// sessions came back: a sibling that takes none, or a load balancer
	// that sends them here), it pauses its balance moves for BackoffFirst,
	// doubling each time up to BackoffMost, until its moves reduce the
	// excess again.
	BackoffFirst = 5 * time.Second
	BackoffMost  = 2 * time.Minute
)

// Spread is this server's sessions against the fleet's, as the balancer
// last read them: the facts of a move's log line.
type Spread struct {
	// Sessions is this server's sessions that stay (not asked to move).
	Sessions int
	// Mean is the fleet's sessions per live, non-draining member, this
	// server included.
	Mean float64
	// Members is how many members the mean counts.
	Members int
}

// Mover is the session hub as the balancer uses it.
type Mover interface {
	// Staying is the number of open sessions not asked to move.
	Staying() int
	// MoveIdle asks up to n idle sessions (nothing in flight) to move to
	// another server, idle longest first, and returns how many it asked.
	// reason is telemetry.MoveBalance or telemetry.MoveBusy; at is logged
	// with each move.
	MoveIdle(n int, reason string, at Spread) int
}

// BalanceOptions bound the balancer. Zero values mean the Default constants.
type BalanceOptions struct {
	Interval       time.Duration // how often the roster is read and moves decided
	Margin         float64       // move only while above mean x (1 + Margin)
	MovesPerSecond float64       // sessions asked to move per second, at most
	Now            func() time.Time
}

func (o *BalanceOptions) defaults() {
	if o.Interval <= 0 {
		o.Interval = DefaultBalanceInterval
	}
	if o.Margin <= 0 {
		o.Margin = DefaultBalanceMargin
	}
	if o.MovesPerSecond <= 0 {
		o.MovesPerSecond = DefaultMovesPerSecond
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// Balancer spreads sessions over the fleet: every interval it compares this
// server's sessions with the fleet's mean (from the roster) and, while this
// server is above it by the margin, asks idle sessions to move, at most
// enough to reach the mean and at most MovesPerSecond a second. A moved
// session's client reconnects through the load balancer, which sends it
// wherever it sends new connections. It also says whether a `busy` answer
// can move its session (RoomElsewhere), from the same rate.
type Balancer struct {
	roster Roster
	mover  Mover
	logger *zap.Logger
	o      BalanceOptions

	mu     sync.Mutex
	tokens float64   // moves allowed now
	filled time.Time // when tokens was last refilled
	last   verdict   // the latest decision
	recent []moved   // this server's moves within movesRemembered, oldest first
	warned map[string]string

	beats      map[string]time.Time // the siblings' heartbeats at the last fresh view
	confirmed  int                  // consecutive fresh views that showed an excess
	freshAt    int                  // the excess at the last fresh view
	movedSince bool                 // balance moves since the last fresh view
	backoff    time.Duration        // the current back-off; 0 while moves reduce the excess
	pausedTill time.Time            // no balance moves before this
}

// moved is n sessions asked to move at a time.
type moved struct {
	at time.Time
	n  int
}

// NewBalancer returns a balancer of mover's sessions over roster's members.
func NewBalancer(roster Roster, mover Mover, logger *zap.Logger, o BalanceOptions) *Balancer {
	o.defaults()
	return &Balancer{roster: roster, mover: mover, logger: logger, o: o, filled: o.Now(), warned: map[string]string{},
		beats: map[string]time.Time{}}
}

// Run decides and moves every interval until ctx ends; it returns nil.
func (b *Balancer) Run(ctx context.Context) error {
	t := time.NewTicker(b.o.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			b.step()
		}
	}
}

// step reads the roster, decides, and moves what the rate allows; it
// returns how many sessions it asked to move.
func (b *Balancer) step() int {
	now := b.o.Now()
	staying, members := b.mover.Staying(), b.roster.Members()
	b.mu.Lock()
	b.forget(now)
	v := decide(b.roster.Self(), staying, members, b.recent, b.o.Margin, b.confirmed >= ConfirmViews)
	b.last = v
	b.refill(now)
	b.noteIgnored(v.ignored)
	if b.fresh(members) {
		b.judgeView(v, now)
	}
	n := 0
	if b.confirmed >= ConfirmViews && !now.Before(b.pausedTill) {
		n = min(v.excess, int(b.tokens))
	}
	b.tokens -= float64(n)
	b.mu.Unlock()
	if n == 0 {
		return 0
	}
	k := b.mover.MoveIdle(n, telemetry.MoveBalance, v.spread)
	b.mu.Lock()
	if k > 0 {
		b.recent = append(b.recent, moved{at: now, n: k})
		b.movedSince = true
	}
	if k < n {
		// Fewer idle sessions than allowed: the rest of the allowance stays.
		b.tokens = min(b.capacity(), b.tokens+float64(n-k))
	}
	b.mu.Unlock()
	return k
}

// fresh reports whether members is a fresh view: every counted sibling
// (live, not draining, seen serving) has a heartbeat newer than at the
// last fresh view, so none of its load figures is one already judged. It
// then remembers these heartbeats. Call with mu held.
func (b *Balancer) fresh(members []Member) bool {
	self := b.roster.Self()
	for _, m := range members {
		if joinsMean(self, m) && !m.Heartbeat.After(b.beats[m.ID]) {
			return false
		}
	}
	clear(b.beats)
	for _, m := range members {
		if joinsMean(self, m) {
			b.beats[m.ID] = m.Heartbeat
		}
	}
	return true
}

// judgeView counts a fresh view's excess toward ConfirmViews and backs
// off when the moves since the last fresh view did not reduce it. Call
// with mu held.
func (b *Balancer) judgeView(v verdict, now time.Time) {
	switch {
	case v.excess == 0:
		b.confirmed, b.backoff = 0, 0
	case b.movedSince && v.excess >= b.freshAt:
		b.backoff = min(BackoffMost, max(BackoffFirst, 2*b.backoff))
		b.pausedTill = now.Add(b.backoff)
		b.logger.Warn("fleet_balance_backoff", zap.Int("excess", v.excess), zap.Int("excess_before", b.freshAt),
			zap.Duration("pause", b.backoff))
	default:
		b.confirmed++
		if b.movedSince {
			b.backoff = 0
		}
	}
	b.freshAt, b.movedSince = v.excess, false
}

// forget drops the moves older than movesRemembered. Call with mu held.
func (b *Balancer) forget(now time.Time) {
	i := 0
	for i < len(b.recent) && now.Sub(b.recent[i].at) > movesRemembered {
		i++
	}
	b.recent = append(b.recent[:0], b.recent[i:]...)
}

// RoomElsewhere reports whether a session answered `busy` here should move:
// at the latest decision a live, non-draining sibling had fewer requests in
// flight than this server, and the move rate allows one more move (it is
// taken). The Spread is for the move's log line.
func (b *Balancer) RoomElsewhere() (Spread, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.last.room {
		return b.last.spread, false
	}
	now := b.o.Now()
	b.refill(now)
	if b.tokens < 1 {
		return b.last.spread, false
	}
	b.tokens--
	b.recent = append(b.recent, moved{at: now, n: 1})
	return b.last.spread, true
}

// capacity is the token bucket's size: one interval's moves, at least one.
func (b *Balancer) capacity() float64 {
	return max(1, b.o.MovesPerSecond*b.o.Interval.Seconds())
}

// refill adds the tokens earned since the last refill. Call with mu held.
func (b *Balancer) refill(now time.Time) {
	if d := now.Sub(b.filled); d > 0 {
		b.tokens = min(b.capacity(), b.tokens+d.Seconds()*b.o.MovesPerSecond)
		b.filled = now
	}
}

// noteIgnored logs each ignored member once (again only if the reason
// changes); members no longer in the roster are forgotten, so the set is
// bounded by the fleet. Call with mu held.
func (b *Balancer) noteIgnored(ignored map[string]string) {
	for id, why := range ignored {
		if b.warned[id] == why {
			continue
		}
		b.warned[id] = why
		b.logger.Warn("fleet_member_ignored", zap.String("member", id), zap.String("why", why))
	}
	for id := range b.warned {
		if _, ok := ignored[id]; !ok {
			delete(b.warned, id)
		}
	}
}

// verdict is one decision of the balance rule.
type verdict struct {
	spread  Spread
	excess  int               // sessions to move to reach the mean; 0 within the margin
	room    bool              // a sibling has fewer requests in flight than this server
	ignored map[string]string // member id -> why its item was not counted
}

// decide is the balance rule, a pure function of what the balancer read:
// self is this server's id, staying its live sessions not asked to move,
// members the roster (self included or not yet), recent this server's own
// moves (oldest first), margin the fraction above the mean tolerated,
// balancing whether a confirmed excess is being moved. An excess starts
// counting only past the noise of a uniform spread (see noise); once
// confirmed, it is moved down to the mean (within margin), so a real
// imbalance ends near the mean while a chance one never starts moves.
//
// Siblings' loads are as old as their last heartbeat, while this server's
// count is live: a session it moved is no longer counted here but not yet
// in any sibling's report. So its moves since the oldest sibling
// heartbeat count as in transit in the fleet's total; otherwise a stale
// roster would show a mean too low and make it move more than its excess.
// The estimate errs high (a moved session that came back is counted
// twice), which only slows the balance: the next step, on fresher
// reports, moves the rest. Draining members take no new sessions and are
// left out; so are members never seen serving, and items with no id or an
// impossible load.
func decide(self string, staying int, members []Member, recent []moved, margin float64, balancing bool) verdict {
	v := verdict{}
	total, counted := staying, 1
	selfInFlight, selfSeen := 0, false
	minSiblingInFlight := math.MaxInt
	var oldest time.Time
	for _, m := range members {
		if why := implausible(m); why != "" {
			if v.ignored == nil {
				v.ignored = map[string]string{}
			}
			v.ignored[m.ID] = why
			continue
		}
		if m.ID == self {
			selfSeen, selfInFlight = true, m.Load.InFlight
			continue
		}
		if !joinsMean(self, m) {
			continue
		}
		total += m.Load.Sessions
		counted++
		minSiblingInFlight = min(minSiblingInFlight, m.Load.InFlight)
		if oldest.IsZero() || m.Heartbeat.Before(oldest) {
			oldest = m.Heartbeat
		}
	}
	for _, r := range recent {
		if counted > 1 && !r.at.Before(oldest) {
			total += r.n
		}
	}
	mean := float64(total) / float64(counted)
	v.spread = Spread{Sessions: staying, Mean: mean, Members: counted}
	v.room = counted > 1 && (minSiblingInFlight < selfInFlight || !selfSeen)
	over := float64(staying)
	if counted > 1 && over > mean*(1+margin) && over > mean+BalanceMinExcess && (balancing || over > mean+noise(mean)) {
		v.excess = staying - int(math.Ceil(mean))
	}
	return v
}

// noise is the excess over the mean that sessions spread uniformly at
// random (each new connection to any server alike, as a load balancer's
// round robin over reconnects at random moments gives) reach by chance:
// two standard deviations of a count with that mean (a Poisson count's
// is its square root), and at least BalanceMinExcess. Under it an excess
// is noise, which moves would only stir: a server of a fleet whose mean
// is 100 starts moving past 120 (10,000: past 11,000, the margin), and
// then moves down to the mean.
func noise(mean float64) float64 {
	return max(BalanceMinExcess, 2*math.Sqrt(mean))
}

// joinsMean reports whether sibling m joins the mean: live (the roster has
// only those), not draining, and seen serving. A member that heartbeats
// but was never seen serving (not registered with the load balancer, or
// an item written by hand) would take no sessions that moved to it.
func joinsMean(self string, m Member) bool {
	return m.ID != self && !m.Draining && m.Serving && implausible(m) == ""
}

// implausible says why a member's item cannot be counted, or "". The
// roster leaves out malformed items already; this only keeps one that
// slipped through from skewing the mean.
func implausible(m Member) string {
	switch {
	case m.ID == "":
		return "no server id"
	case m.Load.Sessions < 0 || m.Load.Streams < 0 || m.Load.InFlight < 0 ||
		m.Load.Sessions > MaxLoad || m.Load.Streams > MaxLoad || m.Load.InFlight > MaxLoad:
		return "load out of bounds"
	}
	return ""
}
