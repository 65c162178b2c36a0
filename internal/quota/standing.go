package quota

import (
	"context"
	"fmt"
)

// Standing is one limit's usage in the window instance holding now: what
// Reserve would reserve against for the same limits.
type Standing struct {
	Limit Limit
	// Item is the counter: Item.End() is when its usage resets.
	Item Item
	// Used is the item's usage: settled usage, reservations in flight at
	// their reserved amount, and every other server's lease in full
	// (granted, spent or not). This server's own lease counts at what it
	// has charged plus holds in flight, so only other servers' unspent
	// leases make Used high (Limit - Used low).
	Used Amount
}

// Standings returns the standing of each limit, in the order given, with
// one ReadItem per distinct item (limits on one scope and window share
// their item, as in Reserve). Errors wrap ErrUnavailable (the store could
// not be read) or ErrInvalidLimit.
func (q *Quota) Standings(ctx context.Context, limits []Limit) ([]Standing, error) {
	now := q.opts.Now()
	out := make([]Standing, 0, len(limits))
	read := make(map[string]Amount)
	for _, l := range limits {
		if err := l.validate(); err != nil {
			return nil, fmt.Errorf("standings: %w", err)
		}
		start, _ := l.Window.Bounds(now)
		it := Item{Scope: l.Scope, Window: l.Window, Start: start}
		used, ok := read[it.Key()]
		if !ok {
			var st ItemState
			err := q.call(ctx, func(ctx context.Context) (err error) {
				st, err = q.store.ReadItem(ctx, it)
				return err
			})
			if err != nil {
				return nil, fmt.Errorf("standings %s: %w", it.Key(), unavailable(err))
			}
			used = st.Used.Sub(q.ownUnspent(it, st))
			read[it.Key()] = used
		}
		out = append(out, Standing{Limit: l, Item: it, Used: used})
	}
	return out, nil
}

// ownUnspent is what this server's lease on it, as st holds it, has
// granted beyond what the server charged and holds in flight on it
// (zero without a lease).
func (q *Quota) ownUnspent(it Item, st ItemState) Amount {
	if q.leases == nil {
		return Amount{}
	}
	mine, ok := st.Leases[q.leases.opts.Owner]
	if !ok {
		return Amount{}
	}
	q.leases.mu.Lock()
	l := q.leases.items[it.Key()]
	q.leases.mu.Unlock()
	if l == nil {
		return Amount{}
	}
	l.mu.Lock()
	spent := l.charged.Add(l.inflight)
	l.mu.Unlock()
	return maxAmount(mine.Granted.Sub(spent), Amount{})
}
