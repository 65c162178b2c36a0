package quota

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
)

// writeKind says what a lease write is for.
type writeKind int

const (
	writeTopUp  writeKind = iota // commit Ahead and grant Block beyond the reservations (capped by Fraction)
	writeExact                   // grant and commit exactly what the reservations need
	writeCharge                  // record usage past the committed amount, without the limit check
	writeReturn                  // give back everything not in flight (drain, idle)
)

// plan builds the write of kind for a reservation of need on top of the
// lease's state, in a new epoch. l.mu is held.
func (l *lease) plan(kind writeKind, need Amount, now time.Time) LeaseWrite {
	o := l.ls.opts
	l.epoch++
	base := l.charged.Add(l.inflight).Add(need)
	committed, granted := maxAmount(l.committed, base), maxAmount(l.granted, base)
	force := false
	switch kind {
	case writeTopUp:
		unit := l.unit
		if !need.IsZero() {
			unit = need
		}
		committed = maxAmount(committed, base.Add(scale(unit, l.requests(o.Ahead))))
		granted = maxAmount(granted, maxAmount(committed, base.Add(scale(unit, l.requests(o.Block)))))
		// Cap the grant at a fraction of the headroom, but never below
		// what the reservations need.
		head := l.limit.Sub(l.seenUsed)
		capAt := func(g, need, h, lim int64) int64 {
			if lim <= 0 {
				return g
			}
			return max(min(g, int64(float64(max(h, 0))*o.Fraction)), need)
		}
		gr, nd := granted.Sub(l.granted), maxAmount(base.Sub(l.granted), Amount{})
		gr = Amount{capAt(gr.Tokens, nd.Tokens, head.Tokens, l.limit.Tokens), capAt(gr.Requests, nd.Requests, head.Requests, l.limit.Requests),
			capAt(gr.MicroUSD, nd.MicroUSD, head.MicroUSD, l.limit.MicroUSD)}
		granted = l.granted.Add(maxAmount(gr, Amount{}))
		committed = maxAmount(minAmount(committed, granted), l.committed)
		// Unlimited metrics are only counted, never leased ahead.
		exact := func(c, g *int64, b, cur, lim int64) {
			if lim <= 0 {
				*c, *g = max(b, cur), max(b, cur)
			}
		}
		exact(&committed.Tokens, &granted.Tokens, base.Tokens, max(l.granted.Tokens, l.committed.Tokens), l.limit.Tokens)
		exact(&committed.Requests, &granted.Requests, base.Requests, max(l.granted.Requests, l.committed.Requests), l.limit.Requests)
		exact(&committed.MicroUSD, &granted.MicroUSD, base.MicroUSD, max(l.granted.MicroUSD, l.committed.MicroUSD), l.limit.MicroUSD)
	case writeCharge:
		force = true
	case writeReturn:
		committed, granted = base, base
	}
	return LeaseWrite{
		PrevSeq: l.seq,
		Lease: Lease{Owner: o.Owner, Granted: granted, Committed: committed, Expires: now.Add(o.TTL).Truncate(time.Millisecond), Seq: l.seq + 1,
			Spent: base, Epoch: l.epoch, At: now.Truncate(time.Millisecond)},
		Grant: granted.Sub(l.granted),
		Limit: l.limit,
		Force: force,
	}
}

// adopt takes the store's view of the item after a write. l.mu is held.
func (l *lease) adopt(st ItemState) {
	l.seenUsed = st.Used
	l.others = l.others[:0]
	for owner, x := range st.Leases {
		if owner != l.ls.opts.Owner {
			l.others = append(l.others, x)
		}
	}
	mine, ok := st.Leases[l.ls.opts.Owner]
	if !ok {
		// Reclaimed by another server: it returned granted - committed,
		// so what this server committed is still counted; a new lease
		// starts from it. (After an unresolved ambiguous write the
		// smaller, older committed is the safe one.)
		l.seq, l.granted = 0, l.committed
		l.expires = time.Time{}
		return
	}
	l.seq, l.granted, l.committed, l.expires = mine.Seq, mine.Granted, mine.Committed, mine.Expires
}

// sameLease reports whether a and b are the same write of a lease.
func sameLease(a, b Lease) bool {
	return a.Owner == b.Owner && a.Seq == b.Seq && a.Granted == b.Granted && a.Committed == b.Committed && a.Expires.Equal(b.Expires)
}

// errLeaseClosed: the lease was drained while a reservation waited to write.
var errLeaseClosed = errors.New("quota lease returned (draining)")

// store writes a lease change of kind, for a reservation of need (zero for
// a refill), and on success adds need to inflight and returns the epoch
// need was admitted in. One write at a time per lease. Conflicts are
// resolved by adopting the store's lease (a write whose earlier attempt
// applied is recognised by its Seq, so no write is ever applied twice), an
// ambiguous failure by reading the item back.
func (l *lease) store(ctx context.Context, kind writeKind, need Amount) (int64, error) {
	select {
	case l.write <- struct{}{}:
	case <-ctx.Done():
		return 0, unavailable(ctx.Err())
	}
	defer func() { <-l.write }()
	q := l.ls.q
	for attempt := 1; ; attempt++ {
		now := q.opts.Now()
		l.mu.Lock()
		if l.closed && kind != writeReturn && kind != writeCharge {
			l.mu.Unlock()
			return 0, unavailable(errLeaseClosed)
		}
		if kind != writeReturn && kind != writeCharge && !l.resize && fitsRoom(l.room(), need, l.limit) && now.Before(l.expires) && !need.IsZero() {
			// Another write made room meanwhile.
			l.inflight = l.inflight.Add(need)
			l.noteUse(need, now)
			epoch := l.epoch
			l.mu.Unlock()
			return epoch, nil
		}
		w := l.plan(kind, need, now)
		l.mu.Unlock()

		var st ItemState
		err := q.call(ctx, func(ctx context.Context) (err error) {
			st, err = q.store.WriteLease(ctx, l.item, w)
			return err
		})
		if err != nil && !errors.Is(err, ErrExceeded) && !errors.Is(err, ErrLeaseConflict) {
			// Ambiguous: did it apply? Read the lease back.
			rerr := q.call(context.WithoutCancel(ctx), func(ctx context.Context) (err error) {
				st, err = q.store.ReadItem(ctx, l.item)
				return err
			})
			if rerr != nil {
				return 0, fmt.Errorf("lease %s: %w", l.item.Key(), unavailable(err))
			}
			if mine, ok := st.Leases[w.Lease.Owner]; ok && sameLease(mine, w.Lease) {
				q.log.Info("quota_lease_write_ambiguous", zap.String("item", l.item.Key()), zap.String("outcome", "applied"), zap.Error(err))
				err = nil
			} else {
				q.log.Info("quota_lease_write_ambiguous", zap.String("item", l.item.Key()), zap.String("outcome", "not applied"), zap.Error(err))
				l.mu.Lock()
				l.adopt(st)
				l.mu.Unlock()
				return 0, fmt.Errorf("lease %s: %w", l.item.Key(), unavailable(err))
			}
		}
		if mine, ok := st.Leases[w.Lease.Owner]; errors.Is(err, ErrLeaseConflict) && ok && sameLease(mine, w.Lease) {
			err = nil // an earlier attempt of this write applied (the SDK retried it)
		}
		l.mu.Lock()
		switch {
		case err == nil:
			l.adopt(st)
			if kind == writeReturn && w.Limit == l.limit {
				l.resize = false // it holds no room granted under an older limit
			}
			if !need.IsZero() {
				l.inflight = l.inflight.Add(need)
				l.noteUse(need, now)
			}
			l.mu.Unlock()
			// need is in the write's Spent: an epoch below the write's.
			return w.Lease.Epoch - 1, nil
		case errors.Is(err, ErrLeaseConflict) && attempt < leaseWriteAttempts:
			if mine, ok := st.Leases[w.Lease.Owner]; ok && w.PrevSeq == 0 && l.granted.IsZero() && l.committed.IsZero() {
				// A lease of this owner that this process does not know
				// (the owner id was reused after a restart): all it
				// committed counts as spent.
				l.charged = l.charged.Add(mine.Committed)
			}
			l.adopt(st)
			l.mu.Unlock()
			continue
		case errors.Is(err, ErrExceeded):
			l.adopt(st)
			l.mu.Unlock()
			return 0, err
		}
		l.adopt(st)
		l.mu.Unlock()
		return 0, fmt.Errorf("lease %s: %w", l.item.Key(), unavailable(err))
	}
}
