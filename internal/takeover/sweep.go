package takeover

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/jetway-gateway/jetway/internal/quota"
	"github.com/jetway-gateway/jetway/internal/stream"
)

// Sweep ends what a server the fleet judged gone left behind, so that its
// requests end and its quota comes back whether or not a client returns:
// each running record is followed here and the follower interrupts it
// (settled at what it generated, the rest of its reservation refunded);
// then its quota leases are reclaimed at what its requests used. Safe to
// call on every server for the same member: every record ends once and
// every lease is reclaimed once. The fleet's membership calls it; it
// returns at once.
func (s *Survivor) Sweep(server string) {
	s.d.Go(func(ctx context.Context) {
		// Many servers can be judged gone at once (a table of leftovers):
		// at most sweepConcurrency sweeps load the store at a time.
		select {
		case s.sweeps <- struct{}{}:
			defer func() { <-s.sweeps }()
		case <-ctx.Done():
			return
		}
		ctx, cancel := context.WithTimeout(ctx, sweepTimeout)
		defer cancel()
		keys, err := s.d.Records.Owned(ctx, server, stream.Running)
		if err != nil {
			s.d.Logger.Warn("sweep_failed", zap.String("member", server), zap.Error(err))
			return
		}
		items := map[string]quota.Item{}
		for _, k := range keys {
			s.leaseItems(ctx, k, server, items)
			log, err := s.Adopt(ctx, k.Owner, k.RequestID)
			if err != nil {
				if !errors.Is(err, stream.ErrNotFound) {
					s.d.Logger.Warn("sweep_record_failed", zap.String("member", server), zap.String("request_id", k.RequestID), zap.Error(err))
				}
				continue
			}
			if !waitEnded(ctx, log) {
				s.d.Logger.Warn("sweep_unfinished", zap.String("member", server), zap.String("request_id", k.RequestID))
				return // its lease is reclaimed when it expires
			}
		}
		s.d.Logger.Info("swept", zap.String("member", server), zap.Int("running", len(keys)))
		s.reclaimLeases(ctx, server, items)
	})
}

// leaseItems adds to items the quota items the record k reserved from
// server's leases.
func (s *Survivor) leaseItems(ctx context.Context, k stream.RecordKey, server string, items map[string]quota.Item) {
	sctx, cancel := s.storeCtx(ctx)
	rec, err := s.d.Records.Get(sctx, k.Owner, k.RequestID)
	cancel()
	if err != nil {
		return
	}
	f, err := s.d.Core.Facts(rec)
	if err != nil || f.Reservation == nil {
		return
	}
	for _, it := range f.Reservation.Items() {
		if it.LeaseOwner == server {
			items[it.Item.Key()] = it.Item
		}
	}
}

// settleLag bounds how long after its record's end stamp (taken as the
// terminal's write is sent) a request's settlement may come: the write's
// own timeout, plus a margin.
func (s *Survivor) settleLag() time.Duration { return s.o.StoreTimeout + time.Second }

// reclaimLeases takes back the quota leases of server, gone, keeping what
// its requests used. A lease's Spent counts every request admitted before
// its last write, at its settled usage if it was settled before the write
// was planned (At), else at its reservation. So the survivor adds, for
// every record of server admitted from the lease since (an epoch not
// below the lease's), what it was charged if it ended done (settled on
// the lease alone) or else its reservation (an interrupted one's own
// settlement refunds the rest); and for one admitted before that ended
// done after At, its usage less its reservation (settled after the plan,
// so counted at its reservation), or, when its end is too close to At to
// tell, only the usage past its reservation. Every record must have
// ended: otherwise nothing is reclaimed here and the leases expire as
// usual.
func (s *Survivor) reclaimLeases(ctx context.Context, server string, items map[string]quota.Item) {
	known := make([]quota.Item, 0, len(items))
	for _, it := range items {
		known = append(known, it)
	}
	held := s.d.Leases.GoneLeases(ctx, server, known)
	if len(held) == 0 {
		return
	}
	since := held[0].Lease.At
	keep := map[string]quota.Amount{}
	byItem := map[string]quota.HeldLease{}
	for _, h := range held {
		if h.Lease.At.Before(since) {
			since = h.Lease.At
		}
		keep[h.Item.Key()] = h.Lease.Spent
		byItem[h.Item.Key()] = h
	}
	keys, err := s.d.Records.Owned(ctx, server, since.Add(-s.settleLag()))
	if err != nil {
		s.d.Logger.Warn("quota_reclaim_skipped", zap.String("member", server), zap.Error(err))
		return
	}
	for _, k := range keys {
		sctx, cancel := s.storeCtx(ctx)
		rec, err := s.d.Records.Get(sctx, k.Owner, k.RequestID)
		cancel()
		switch {
		case errors.Is(err, stream.ErrNotFound):
			continue
		case err != nil:
			s.d.Logger.Warn("quota_reclaim_skipped", zap.String("member", server), zap.Error(err))
			return
		case !rec.Ended():
			// Missed by the first listing (the index lags): end it first.
			log, err := s.Adopt(ctx, k.Owner, k.RequestID)
			if err == nil && waitEnded(ctx, log) {
				rctx, cancel := s.storeCtx(ctx)
				rec, err = s.d.Records.Get(rctx, k.Owner, k.RequestID)
				cancel()
			}
			if err != nil || !rec.Ended() {
				s.d.Logger.Warn("quota_reclaim_skipped", zap.String("member", server), zap.String("request_id", k.RequestID),
					zap.String("why", "a record still runs"), zap.Error(err))
				return
			}
		}
		s.countUse(rec, server, byItem, keep)
	}
	for _, h := range held {
		if err := s.d.Leases.ReclaimGone(ctx, h, keep[h.Item.Key()]); err != nil {
			s.d.Logger.Warn("quota_reclaim_failed", zap.String("member", server), zap.Error(err))
		}
	}
}

// countUse adds to keep what rec, a record of the gone server, used on
// the leases in byItem its reservation was admitted from, beyond what the
// lease's Spent already counts (see reclaimLeases).
func (s *Survivor) countUse(rec *stream.Record, server string, byItem map[string]quota.HeldLease, keep map[string]quota.Amount) {
	f, err := s.d.Core.Facts(rec)
	if err != nil || f.Reservation == nil {
		return
	}
	res := f.Reservation
	reserved := res.Amount()
	used, done := s.d.Core.Charged(rec)
	for _, it := range res.Items() {
		h, ok := byItem[it.Item.Key()]
		if !ok || it.LeaseOwner != server {
			continue
		}
		k := it.Item.Key()
		after := it.LeaseEpoch >= h.Lease.Epoch
		switch {
		case after && done:
			// Settled by its server at what it used, on its lease alone.
			keep[k] = keep[k].Add(used)
		case after:
			// Interrupted (its own settlement refunds the rest of its
			// reservation), or ended otherwise: at most its reservation.
			keep[k] = keep[k].Add(reserved)
		case !done:
		case !rec.EndedAt.Before(h.Lease.At):
			// Settled after the plan: Spent counts its reservation.
			keep[k] = keep[k].Add(used.Sub(reserved))
		case rec.EndedAt.After(h.Lease.At.Add(-s.settleLag())):
			keep[k] = keep[k].Add(quota.MaxAmount(used.Sub(reserved), quota.Amount{}))
		}
	}
}
