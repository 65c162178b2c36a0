package router

import (
	"cmp"
	"slices"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
)

// Place is one placement of a target: where its calls go.
type Place struct {
	// Name names the placement in breakers, records and traces (its
	// region, or region/account); "": the target's own BedrockID in the
	// default region and account, the one place of a target without
	// placements.
	Name            string
	Region, RoleARN string // "": the default client's
	BedrockID       string // what Bedrock is called with there
	// Profile is the application inference profile ARN the call goes
	// to (then BedrockID), if any: the usage record names it.
	Profile string
}

// Placements is the target's placements, or its one implicit place (its
// BedrockID in the default region and account, named "").
func (t *Target) Placements() []Place {
	if len(t.Places) > 0 {
		return t.Places
	}
	return []Place{{BedrockID: t.BedrockID}}
}

// Defaults of the affinity table (Options.AffinityTTL, AffinityEntries).
const (
	// DefaultAffinityTTL is how long a conversation remembers the
	// placement that last answered it: Bedrock's prompt cache TTL (5
	// minutes), after which nothing is lost by choosing afresh.
	DefaultAffinityTTL = 5 * time.Minute
	// DefaultAffinityEntries bounds the conversations remembered.
	DefaultAffinityEntries = 100_000
)

// affinity keeps each conversation (Call.Affinity) on one placement per
// model, so its prompt cache keeps paying.
//
// A conversation's first choice is the same on every server: its
// placements ranked by rendezvous hashing of the conversation key, so no
// state is shared and a fleet agrees. A conversation moves when its
// placement fails before the first token (throttled, unavailable, or its
// breaker open); the placement that answered instead is remembered here
// (this server's memory, for AffinityTTL after its last answer). It comes
// back to its first choice when that placement's breaker closes again
// after the move (a recovery), or when the memory expires.
type affinity struct {
	moved  *lru.Cache[affinityKey, movedTo] // bounded; entries expire at their until
	ttl    time.Duration
	now    func() time.Time
	closes func(breaker string) uint64 // times a breaker closed after opening
}

type affinityKey struct{ conversation, model string }

// movedTo is where a conversation went, and how often its first choice's
// breaker had closed when it did.
type movedTo struct {
	place  string
	closes uint64
	until  time.Time
}

func newAffinity(ttl time.Duration, entries int, closes func(string) uint64) *affinity {
	moved, _ := lru.New[affinityKey, movedTo](entries) // entries > 0 (Options.defaults)
	return &affinity{moved: moved, ttl: ttl, now: time.Now, closes: closes}
}

// order is the placements of target t in the order a call with
// conversation key conv tries them, and the conversation's first choice.
func (a *affinity) order(t *Target, conv string) (order []Place, first Place) {
	ps := t.Placements()
	if len(ps) == 1 || conv == "" {
		return ps, ps[0] // one place, or no conversation: the configured order
	}
	ranked := slices.Clone(ps)
	slices.SortStableFunc(ranked, func(x, y Place) int {
		return cmp.Compare(rendezvous(conv, t.ID, y.Name), rendezvous(conv, t.ID, x.Name))
	})
	first = ranked[0]
	k := affinityKey{conv, t.ID}
	m, ok := a.moved.Get(k)
	if !ok {
		return ranked, first
	}
	if a.closes(breakerName(t.ID, first.Name)) > m.closes || a.now().After(m.until) {
		a.moved.Remove(k) // the first choice recovered, or the memory expired: back to it
		return ranked, first
	}
	if i := slices.IndexFunc(ranked, func(p Place) bool { return p.Name == m.place }); i > 0 {
		p := ranked[i]
		copy(ranked[1:i+1], ranked[:i])
		ranked[0] = p
	}
	return ranked, first
}

// answered records that place answered conversation conv on target t,
// whose first choice is first.
func (a *affinity) answered(t *Target, conv string, first, place Place) {
	if conv == "" || len(t.Places) < 2 {
		return
	}
	k := affinityKey{conv, t.ID}
	if place.Name == first.Name {
		a.moved.Remove(k) // on its first choice: nothing to remember
		return
	}
	a.moved.Add(k, movedTo{place: place.Name, closes: a.closes(breakerName(t.ID, first.Name)), until: a.now().Add(a.ttl)})
}

// rendezvous is the weight of a placement for a conversation: FNV-1a of
// the three strings, then a 64-bit finalizer (splitmix64), the same on
// every server and build.
func rendezvous(conv, model, place string) uint64 {
	h := uint64(14695981039346656037)
	for _, s := range [...]string{conv, model, place} {
		for i := 0; i < len(s); i++ {
			h ^= uint64(s[i])
			h *= 1099511628211
		}
		h ^= 0xff
		h *= 1099511628211
	}
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}

// breakerName is a placement's breaker: the model's own for its one
// implicit place (as before placements), else model@placement.
func breakerName(model, place string) string {
	if place == "" {
		return model
	}
	return model + "@" + place
}
