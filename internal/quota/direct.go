package quota

import (
	"context"
	"errors"
	"fmt"

	"go.uber.org/zap"
)

// direct is the admitter without leases: every reservation is one
// conditional write to the item (Store.Reserve), every release and
// settlement one unconditional add, retried with backoff. Leases fall
// back to it (draining, MaxItems held), and it settles reservations
// restored from elsewhere.
type direct struct{ q *Quota }

// admit implements admitter.
func (d *direct) admit(ctx context.Context, p plannedItem, a Amount) (ReservedItem, settler, error) {
	q := d.q
	var used Amount
	err := q.call(ctx, func(ctx context.Context) (err error) {
		used, err = q.store.Reserve(ctx, p.item, a, p.limit.Max())
		return err
	})
	it := ReservedItem{Limit: p.limit, Item: p.item, UsedAfter: used}
	switch {
	case errors.Is(err, ErrExceeded):
		return it, nil, err
	case err != nil:
		return it, nil, fmt.Errorf("%s: %w", p.item.Key(), unavailable(err))
	}
	return it, d, nil
}

// release implements settler: it subtracts a from the item, retried
// until ctx ends.
func (d *direct) release(ctx context.Context, requestID string, it Item, a Amount) {
	q := d.q
	neg := Amount{}.Sub(a)
	err := q.retry(ctx, requestID, "release", it, func(ctx context.Context) error {
		_, err := q.store.Add(ctx, it, neg)
		return err
	})
	if err != nil && !errors.Is(err, errWindowEnded) {
		q.log.Error("quota_compensation_failed", zap.String("request_id", requestID),
			zap.String("item", it.Key()), zap.Int64("tokens", a.Tokens), zap.Error(err))
	}
}

// settle implements settler: one add of actual - reserved (none when
// they are equal), retried until it succeeds, the window ends or ctx ends.
func (d *direct) settle(ctx context.Context, requestID string, it Item, reserved, actual Amount) error {
	q := d.q
	delta := actual.Sub(reserved)
	if delta.IsZero() {
		return nil
	}
	err := q.retry(ctx, requestID, "settle", it, func(ctx context.Context) error {
		_, err := q.store.Add(ctx, it, delta)
		return err
	})
	if errors.Is(err, errWindowEnded) {
		q.log.Info("quota_settle_skipped", zap.String("request_id", requestID),
			zap.String("item", it.Key()), zap.String("reason", "window ended"))
		return nil
	}
	return err
}
