package fleet

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/jetway-gateway/jetway/internal/dynamotable"
)

// The members table (JETWAY_MEMBERS_TABLE): one item per server process,
// partition key only.
//
//	pk            S     the server's instance id
//	started_ms    N     process start, epoch milliseconds
//	heartbeat_ms  N     last renewal, epoch milliseconds (the owner's clock)
//	sessions      N     load: open sessions
//	streams       N     load: model calls in flight
//	in_flight     N     load: accepted requests not ended
//	draining      BOOL  the server takes no new sessions
//	serving       BOOL  the server is seen serving (checked by the load balancer, or held a session)
//	gone          BOOL  left (clean stop) or judged dead; Put never clears it
//	expires_at    N     TTL, epoch seconds: an hour past the last write
//
// Writes: one PutItem per heartbeat per server, whatever the load; one
// UpdateItem when a server leaves or is judged gone; one DeleteItem per
// gone item GoneRetention after it was seen gone. Reads: one Scan per
// heartbeat per server (the table holds one item per live server plus the
// gone ones of the last GoneRetention).
const (
	attrPK        = dynamotable.PK
	attrStarted   = "started_ms"
	attrHeartbeat = "heartbeat_ms"
	attrSessions  = "sessions"
	attrStreams   = "streams"
	attrInFlight  = "in_flight"
	attrDraining  = "draining"
	attrServing   = "serving"
	attrGone      = "gone"
	attrExpires   = "expires_at"
)

// DynamoStore is the Store in a DynamoDB table.
type DynamoStore struct {
	table *dynamotable.Table
}

// NewDynamoStore returns a Store on table. The client should be the
// fleet's own (its own retry budget), so heartbeats never wait behind
// request writes.
func NewDynamoStore(client *dynamodb.Client, table string) *DynamoStore {
	return &DynamoStore{table: dynamotable.NewTable(client, table, dynamotable.TableMembers)}
}

// SetObserver reports every call to obs (table role "members", ops
// put|list|mark_gone|forget); call it before the store is used.
func (s *DynamoStore) SetObserver(obs dynamotable.Observer) { s.table.SetObserver(obs) }

// Put implements Store: PutItem IF attribute_not_exists(gone).
func (s *DynamoStore) Put(ctx context.Context, it Item) error {
	item := dynamotable.Item{
		attrPK:        dynamotable.S(it.ID),
		attrStarted:   dynamotable.N(it.Started.UnixMilli()),
		attrHeartbeat: dynamotable.N(it.Heartbeat.UnixMilli()),
		attrSessions:  dynamotable.N(int64(it.Load.Sessions)),
		attrStreams:   dynamotable.N(int64(it.Load.Streams)),
		attrInFlight:  dynamotable.N(int64(it.Load.InFlight)),
		attrDraining:  dynamotable.BOOL(it.Draining),
		attrServing:   dynamotable.BOOL(it.Serving),
		attrExpires:   dynamotable.N(it.Expires.Unix()),
	}
	err := s.table.Put(ctx, "put", item, "attribute_not_exists(#gone)", map[string]string{"#gone": attrGone}, nil)
	if _, refused := dynamotable.Refused(err); refused {
		return fmt.Errorf("put %s: %w", it.ID, ErrGone)
	}
	if err != nil {
		return fmt.Errorf("put %s: %w: %w", it.ID, ErrUnavailable, err)
	}
	return nil
}

// List implements Store with a strongly consistent Scan, all pages.
func (s *DynamoStore) List(ctx context.Context) ([]Item, error) {
	var items []Item
	now := time.Now()
	err := s.table.Scan(ctx, "list", func(page []dynamotable.Item) {
		for _, raw := range page {
			it := decode(raw)
			if !it.Expires.IsZero() && it.Expires.Before(now) {
				continue // TTL deletion lags
			}
			items = append(items, it)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("list: %w: %w", ErrUnavailable, err)
	}
	return items, nil
}

// MarkGone implements Store: UpdateItem SET gone = true, expires_at
// IF heartbeat_ms = :hb (or unconditionally for a zero heartbeat).
func (s *DynamoStore) MarkGone(ctx context.Context, id string, heartbeat, expires time.Time) error {
	u := dynamotable.NewUpdate(id).SetValue(attrGone, dynamotable.BOOL(true)).SetValue(attrExpires, dynamotable.N(expires.Unix()))
	if !heartbeat.IsZero() {
		u.Name("#hb", attrHeartbeat).Value(":hb", dynamotable.N(heartbeat.UnixMilli())).If("#hb = :hb")
	}
	_, err := s.table.Update(ctx, "mark_gone", u)
	if _, refused := dynamotable.Refused(err); refused {
		return fmt.Errorf("mark %s gone: %w", id, ErrChanged)
	}
	if err != nil {
		return fmt.Errorf("mark %s gone: %w: %w", id, ErrUnavailable, err)
	}
	return nil
}

// Forget implements Store: DeleteItem IF gone = true.
func (s *DynamoStore) Forget(ctx context.Context, id string) error {
	err := s.table.Delete(ctx, "forget", id, "#gone = :t", map[string]string{"#gone": attrGone},
		dynamotable.Item{":t": dynamotable.BOOL(true)})
	if _, refused := dynamotable.Refused(err); refused {
		return fmt.Errorf("forget %s: %w", id, ErrChanged)
	}
	if err != nil {
		return fmt.Errorf("forget %s: %w: %w", id, ErrUnavailable, err)
	}
	return nil
}

func decode(item dynamotable.Item) Item {
	it := Item{Gone: dynamotable.Bool(item, attrGone)}
	it.ID, it.Draining = dynamotable.String(item, attrPK), dynamotable.Bool(item, attrDraining)
	it.Serving = dynamotable.Bool(item, attrServing)
	ms := func(name string) time.Time {
		if n, ok := dynamotable.Int(item, name); ok && n > 0 {
			return time.UnixMilli(n)
		}
		return time.Time{}
	}
	it.Started, it.Heartbeat = ms(attrStarted), ms(attrHeartbeat)
	load := func(name string) int {
		n, ok := dynamotable.Int(item, name)
		if !ok || n < -1 || n > MaxLoad+1 {
			return MaxLoad + 1 // malformed: caught by the bounds check
		}
		return int(n)
	}
	it.Load = Load{Sessions: load(attrSessions), Streams: load(attrStreams), InFlight: load(attrInFlight)}
	if n, ok := dynamotable.Int(item, attrExpires); ok {
		it.Expires = time.Unix(n, 0)
	}
	return it
}

// CreateTable creates the members table (partition key pk, on-demand, TTL
// on expires_at) if it does not exist. For local and test use (`gateway
// tables create`); production tables come from Terraform.
func CreateTable(ctx context.Context, client *dynamodb.Client, table string) error {
	return dynamotable.Create(ctx, client, table, attrPK, attrExpires)
}
