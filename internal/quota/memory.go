package quota

import (
	"context"
	"sync"
	"time"
)

// memorySweepInterval is how often MemoryStore drops expired items.
const memorySweepInterval = time.Minute

// MemoryStore is a Store in process memory, for the embedded default (one
// gateway process) and tests. It has DynamoStore's semantics: one counter
// set per item, conditional reservations, unconditional adjustments, and
// items forgotten after Item.Expires (by the wall clock).
type MemoryStore struct {
	mu        sync.Mutex
	items     map[string]memoryItem
	lastSweep time.Time
}

type memoryItem struct {
	used    Amount
	leases  map[string]Lease
	expires time.Time
}

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore() *MemoryStore {
	return &MemoryStore{items: make(map[string]memoryItem), lastSweep: time.Now()}
}

// Reserve implements Store.
func (s *MemoryStore) Reserve(ctx context.Context, it Item, n, limit Amount) (Amount, error) {
	if err := ctx.Err(); err != nil {
		return Amount{}, unavailable(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	key, e := s.load(it)
	if !fits(e.used, n, limit) {
		return e.used, ErrExceeded
	}
	e.used = e.used.Add(n)
	s.items[key] = e
	return e.used, nil
}

// Add implements Store.
func (s *MemoryStore) Add(ctx context.Context, it Item, delta Amount) (Amount, error) {
	if err := ctx.Err(); err != nil {
		return Amount{}, unavailable(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	key, e := s.load(it)
	e.used = e.used.Add(delta)
	s.items[key] = e
	return e.used, nil
}

// Get implements Store.
func (s *MemoryStore) Get(ctx context.Context, it Item) (Amount, error) {
	if err := ctx.Err(); err != nil {
		return Amount{}, unavailable(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, e := s.load(it)
	return e.used, nil
}

// WriteLease implements Store.
func (s *MemoryStore) WriteLease(ctx context.Context, it Item, w LeaseWrite) (ItemState, error) {
	return s.change(ctx, it, func(st *ItemState) error { return applyLease(st, w) })
}

// ReclaimLease implements Store.
func (s *MemoryStore) ReclaimLease(ctx context.Context, it Item, l Lease, now time.Time, keep Amount) (ItemState, error) {
	return s.change(ctx, it, func(st *ItemState) error { return applyReclaim(st, l, now, keep) })
}

// ReadItem implements Store.
func (s *MemoryStore) ReadItem(ctx context.Context, it Item) (ItemState, error) {
	if err := ctx.Err(); err != nil {
		return ItemState{}, unavailable(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, e := s.load(it)
	return cloneState(ItemState{Used: e.used, Leases: e.leases}), nil
}

// change applies f to the item's state atomically; when f fails nothing
// changes and the state as it was comes back with the error.
func (s *MemoryStore) change(ctx context.Context, it Item, f func(*ItemState) error) (ItemState, error) {
	if err := ctx.Err(); err != nil {
		return ItemState{}, unavailable(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	key, e := s.load(it)
	st := cloneState(ItemState{Used: e.used, Leases: e.leases})
	if err := f(&st); err != nil {
		return cloneState(ItemState{Used: e.used, Leases: e.leases}), err
	}
	e.used, e.leases = st.Used, st.Leases
	s.items[key] = e
	return cloneState(st), nil
}

// Len returns the number of items held (expired ones included until the
// next sweep).
func (s *MemoryStore) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.items)
}

// load returns the item's key and state, treating an expired item as new,
// and now and then sweeps every expired item. s.mu is held.
func (s *MemoryStore) load(it Item) (string, memoryItem) {
	now := time.Now()
	if now.Sub(s.lastSweep) >= memorySweepInterval {
		for k, e := range s.items {
			if !now.Before(e.expires) {
				delete(s.items, k)
			}
		}
		s.lastSweep = now
	}
	key := it.Key()
	e, ok := s.items[key]
	if !ok || !now.Before(e.expires) {
		e = memoryItem{expires: it.Expires()}
	}
	return key, e
}
