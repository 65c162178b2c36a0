package quota

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// ErrInvalidReservation: the data is not an encoded reservation this
// version can read.
var ErrInvalidReservation = errors.New("invalid encoded reservation")

// reservationVersion is the version of the encoding MarshalBinary writes.
// A change that an older reader would misread gets a new version; readers
// refuse versions they do not know.
const reservationVersion = 1

// leasedReservationVersion marks a reservation with items admitted from a
// lease (lease_owner): a version-1 reader would refund them, which the
// lease's reclaimer may already count.
const leasedReservationVersion = 2

// encodedReservation is the JSON form of a Reservation:
//
//	{"v":1,"request_id":"req-1","amount":{"tokens":1324,"requests":1,"micro_usd":9000},
//	 "items":[{"kind":"app","key":"contoso/support-assistant","window":"hour",
//	           "start":"2026-11-29T19:00:00Z","limit":{"tokens":20000},"used_after":{"tokens":1638,"requests":2}}],
//	 "settled":false}
type encodedReservation struct {
	V         int           `json:"v"`
	RequestID string        `json:"request_id"`
	Amount    encodedAmount `json:"amount"`
	Items     []encodedItem `json:"items"`
	Settled   bool          `json:"settled,omitempty"`
}

type encodedAmount struct {
	Tokens   int64 `json:"tokens,omitempty"`
	Requests int64 `json:"requests,omitempty"`
	MicroUSD int64 `json:"micro_usd,omitempty"`
}

// encodedItem is a ReservedItem; its limit and its counter share the
// scope and window (Reserve builds them so).
type encodedItem struct {
	Kind      string        `json:"kind"`
	Key       string        `json:"key"`
	Window    Window        `json:"window"`
	Start     time.Time     `json:"start"`
	Limit     encodedAmount `json:"limit"`
	UsedAfter encodedAmount `json:"used_after"`
	// LeaseOwner is the server whose lease admitted the item (version 2).
	LeaseOwner string `json:"lease_owner,omitempty"`
	// LeaseEpoch is the lease's epoch at admission (read by version-2
	// readers that know it; others ignore it).
	LeaseEpoch int64 `json:"lease_epoch,omitempty"`
}

func encodeAmount(a Amount) encodedAmount { return encodedAmount(a) }

func (a encodedAmount) amount() Amount { return Amount(a) }

// MarshalBinary encodes the reservation (versioned JSON) so that another
// gateway task can settle it after Quota.Restore: the request id, the
// amount reserved and every item with its scope, window, window start,
// caps and usage after reserving. It encodes whether the reservation is
// settled, but not the progress of a Settle in flight or one that failed
// part way: encode before settling (the gateway does at acceptance).
func (r *Reservation) MarshalBinary() ([]byte, error) {
	e := encodedReservation{
		V:         reservationVersion,
		RequestID: r.requestID,
		Amount:    encodeAmount(r.amount),
		Items:     make([]encodedItem, len(r.items)),
		Settled:   r.settled.Load(),
	}
	for i, it := range r.items {
		e.Items[i] = encodedItem{
			Kind:       it.Item.Scope.Kind,
			Key:        it.Item.Scope.Key,
			Window:     it.Item.Window,
			Start:      it.Item.Start.UTC(),
			Limit:      encodeAmount(it.Limit.Max()),
			UsedAfter:  encodeAmount(it.UsedAfter),
			LeaseOwner: it.LeaseOwner,
			LeaseEpoch: it.LeaseEpoch,
		}
		if it.LeaseOwner != "" {
			e.V = leasedReservationVersion
		}
	}
	return json.Marshal(e)
}

// UnmarshalBinary decodes what MarshalBinary encoded into r, which must
// be a new, unused Reservation. Errors wrap ErrInvalidReservation.
func (r *Reservation) UnmarshalBinary(data []byte) error {
	var e encodedReservation
	if err := json.Unmarshal(data, &e); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidReservation, err)
	}
	if e.V != reservationVersion && e.V != leasedReservationVersion {
		return fmt.Errorf("%w: version %d, this build reads versions %d and %d", ErrInvalidReservation, e.V, reservationVersion, leasedReservationVersion)
	}
	amount := e.Amount.amount()
	if amount.negative() {
		return fmt.Errorf("%w: negative amount %+v", ErrInvalidReservation, amount)
	}
	items := make([]ReservedItem, len(e.Items))
	for i, it := range e.Items {
		scope := Scope{Kind: it.Kind, Key: it.Key}
		limit := Limit{Scope: scope, Window: it.Window}
		limit.Tokens, limit.Requests, limit.MicroUSD = it.Limit.Tokens, it.Limit.Requests, it.Limit.MicroUSD
		if err := limit.validate(); err != nil {
			return fmt.Errorf("%w: item %d: %w", ErrInvalidReservation, i, err)
		}
		start := it.Start.UTC()
		if s, _ := it.Window.Bounds(start); !s.Equal(start) {
			return fmt.Errorf("%w: item %d: %s is not the start of a %s window", ErrInvalidReservation, i, start.Format(time.RFC3339), it.Window)
		}
		items[i] = ReservedItem{Limit: limit, Item: Item{Scope: scope, Window: it.Window, Start: start}, UsedAfter: it.UsedAfter.amount(), LeaseOwner: it.LeaseOwner,
			LeaseEpoch: it.LeaseEpoch}
	}
	r.requestID = e.RequestID
	r.amount = amount
	r.items = items
	r.lock = make(chan struct{}, 1)
	r.actual = nil
	r.itemSettled = make([]bool, len(items))
	r.settled.Store(e.Settled)
	return nil
}

// Restore decodes a reservation encoded by MarshalBinary, possibly on
// another gateway task, so that q can settle it (Settle, Release) exactly
// as the task that reserved it would have: refund or extra charge per item.
// q must use the same Store (table) as the reserving task. Errors wrap
// ErrInvalidReservation.
func (q *Quota) Restore(data []byte) (*Reservation, error) {
	r := new(Reservation)
	if err := r.UnmarshalBinary(data); err != nil {
		return nil, fmt.Errorf("restore: %w", err)
	}
	return r, nil
}
