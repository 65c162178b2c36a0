package quota

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
)

// reclaimExpired returns the uncommitted tokens of other servers' expired
// leases seen at the last write. It reports whether any came back.
func (l *lease) reclaimExpired(ctx context.Context) bool {
	q := l.ls.q
	now := q.opts.Now()
	l.mu.Lock()
	var expired []Lease
	for _, x := range l.others {
		if x.Expires.Before(now) {
			expired = append(expired, x)
		}
	}
	l.mu.Unlock()
	any := false
	for _, x := range expired {
		err := q.call(ctx, func(ctx context.Context) error {
			_, err := q.store.ReclaimLease(ctx, l.item, x, now, x.Committed)
			return err
		})
		if err == nil {
			any = true
			q.log.Info("quota_lease_reclaimed", zap.String("item", l.item.Key()), zap.String("owner", x.Owner),
				zap.Int64("tokens", x.Granted.Tokens-x.Committed.Tokens))
		}
	}
	return any
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
