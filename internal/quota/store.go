package quota

import (
	"context"
	"errors"
	"time"
)

// Store keeps usage counters, one item per (scope, window, window start),
// each with one counter per metric. Every method changes or reads exactly
// one item, atomically; Quota builds multi-item reservations on top.
// Direct admission uses Reserve and Add, leases WriteLease, ReclaimLease
// and ReadItem (see admitter). MemoryStore and DynamoStore implement it
// with identical semantics.
type Store interface {
	// Reserve adds n to the item's counters if, for every metric whose
	// limit is positive, used+n <= limit, and returns the counters after
	// the add. When the item does not fit it changes nothing and returns
	// an error matching ErrExceeded together with the counters as they
	// were (best effort: zero when the store could not tell). Any other
	// error means the store failed; nothing was added.
	Reserve(ctx context.Context, it Item, n, limit Amount) (Amount, error)
	// Add adds delta (negative to refund) unconditionally and returns the
	// counters after.
	Add(ctx context.Context, it Item, delta Amount) (Amount, error)
	// Get returns the item's counters; zero for an unknown or expired item.
	Get(ctx context.Context, it Item) (Amount, error)

	// WriteLease applies w (see LeaseWrite) in one atomic step and returns
	// the item's state after it. When w's condition on the lease fails it
	// returns ErrLeaseConflict, when a grant does not fit ErrExceeded, each
	// with the state as it was (best effort). Any other error may or may
	// not have applied (an ambiguous failure): the caller reads the item
	// and compares the lease's Seq.
	WriteLease(ctx context.Context, it Item, w LeaseWrite) (ItemState, error)
	// ReclaimLease removes the lease l of another owner if it still has
	// l.Seq and expired before now, subtracting Granted - Committed from
	// the item's counters; ErrLeaseConflict (with the state) otherwise.
	ReclaimLease(ctx context.Context, it Item, l Lease, now time.Time, keep Amount) (ItemState, error)
	// ReadItem returns the item's counters and leases; zero for an
	// unknown or expired item.
	ReadItem(ctx context.Context, it Item) (ItemState, error)
}

// ErrLeaseConflict: a lease write's condition on the owner's lease failed:
// the lease is not at the sequence number the writer expected (another
// attempt of the same write applied, or another server reclaimed it).
// The store returns the item's state with it.
var ErrLeaseConflict = errors.New("quota lease changed")

// Lease is one server's block of an item's counters (see "Leases" in the
// package documentation). Granted is in the item's counters (used) in full;
// Committed, a part of Granted, is what the owner may have spent without a
// further write, so a reclaimer returns Granted - Committed and never a
// token that may have been used.
type Lease struct {
	Owner     string
	Granted   Amount
	Committed Amount
	Expires   time.Time
	// Seq counts the owner's writes of this lease; every write is
	// conditioned on the previous value, which makes a retried write
	// detectable (hence idempotent).
	Seq int64
	// Spent is what the owner had charged plus held in reservations in
	// flight when it planned this write (the write's own reservation
	// included): every request admitted before the write is in it, at
	// its reservation or its settled usage.
	Spent Amount
	// Epoch numbers the owner's plans of lease writes: a request admitted
	// from the lease after this write's plan carries an epoch >= Epoch in
	// its reservation (ReservedItem.LeaseEpoch), one counted in Spent a
	// smaller one. With Spent it lets a survivor settle a gone owner's
	// lease at what its requests used (see Quota.ReclaimGone).
	Epoch int64
	// At is when the write was planned (the owner's clock).
	At time.Time
}

// ItemState is an item's counters with the leases held on it.
type ItemState struct {
	Used   Amount
	Leases map[string]Lease
}

// LeaseWrite is one atomic change of one owner's lease and of the item's
// counters: used += Grant, and the lease becomes Lease.
type LeaseWrite struct {
	// PrevSeq is the lease's current Seq; 0 means the owner holds no
	// lease on the item. Lease.Seq must be PrevSeq + 1.
	PrevSeq int64
	Lease   Lease
	// Grant is added to the item's counters (negative to return tokens).
	Grant Amount
	// Limit: unless Force, every positive grant of a limited metric must
	// fit, used + grant <= limit, or nothing changes (ErrExceeded).
	Limit Amount
	// Force grants without the limit check: usage that happened.
	Force bool
}

// grantFits reports whether used + grant stays within limit for every
// positive grant of a limited metric.
func grantFits(used, grant, limit Amount) bool {
	ok := func(u, g, l int64) bool { return l <= 0 || g <= 0 || u+g <= l }
	return ok(used.Tokens, grant.Tokens, limit.Tokens) && ok(used.Requests, grant.Requests, limit.Requests) &&
		ok(used.MicroUSD, grant.MicroUSD, limit.MicroUSD)
}

// applyLease changes st as w does, or says why it does not (memory store;
// the DynamoDB store's conditions say the same).
func applyLease(st *ItemState, w LeaseWrite) error {
	cur, held := st.Leases[w.Lease.Owner]
	if (w.PrevSeq == 0 && held) || (w.PrevSeq != 0 && (!held || cur.Seq != w.PrevSeq)) {
		return ErrLeaseConflict
	}
	if !w.Force && !grantFits(st.Used, w.Grant, w.Limit) {
		return ErrExceeded
	}
	st.Used = st.Used.Add(w.Grant)
	if st.Leases == nil {
		st.Leases = make(map[string]Lease)
	}
	st.Leases[w.Lease.Owner] = w.Lease
	return nil
}

// applyReclaim removes an expired lease, returning all of it but keep.
func applyReclaim(st *ItemState, l Lease, now time.Time, keep Amount) error {
	cur, held := st.Leases[l.Owner]
	if !held || cur.Seq != l.Seq || !cur.Expires.Before(now) {
		return ErrLeaseConflict
	}
	st.Used = st.Used.Sub(cur.Granted.Sub(keep))
	delete(st.Leases, l.Owner)
	return nil
}

func cloneState(st ItemState) ItemState {
	out := ItemState{Used: st.Used}
	if len(st.Leases) > 0 {
		out.Leases = make(map[string]Lease, len(st.Leases))
		for k, v := range st.Leases {
			out.Leases[k] = v
		}
	}
	return out
}
