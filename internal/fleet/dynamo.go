package fleet

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

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
//	gone          BOOL  left (clean stop) or judged dead; Put never clears it
//	expires_at    N     TTL, epoch seconds: an hour past the last write
//
// Writes: one PutItem per heartbeat per server, whatever the load; one
// UpdateItem when a server leaves or is judged gone. Reads: one Scan per
// heartbeat per server (the table holds one item per live server plus the
// gone ones of the last hour).
const (
	attrPK        = "pk"
	attrStarted   = "started_ms"
	attrHeartbeat = "heartbeat_ms"
	attrSessions  = "sessions"
	attrStreams   = "streams"
	attrInFlight  = "in_flight"
	attrDraining  = "draining"
	attrGone      = "gone"
	attrExpires   = "expires_at"
)

// DynamoStore is the Store in a DynamoDB table.
type DynamoStore struct {
	client *dynamodb.Client
	table  string
	meter  dynamotable.Meter
}

// NewDynamoStore returns a Store on table. The client should be the
// fleet's own (its own retry budget), so heartbeats never wait behind
// request writes.
func NewDynamoStore(client *dynamodb.Client, table string) *DynamoStore {
	return &DynamoStore{client: client, table: table}
}

// SetObserver reports every call to obs (table role "members", ops
// put|list|mark_gone); call it before the store is used.
func (s *DynamoStore) SetObserver(obs dynamotable.Observer) {
	s.meter = dynamotable.NewMeter(dynamotable.TableMembers, obs)
}

// Put implements Store: PutItem IF attribute_not_exists(gone).
func (s *DynamoStore) Put(ctx context.Context, it Item) error {
	item := map[string]types.AttributeValue{
		attrPK:        dynamotable.S(it.ID),
		attrStarted:   dynamotable.N(it.Started.UnixMilli()),
		attrHeartbeat: dynamotable.N(it.Heartbeat.UnixMilli()),
		attrSessions:  dynamotable.N(int64(it.Load.Sessions)),
		attrStreams:   dynamotable.N(int64(it.Load.Streams)),
		attrInFlight:  dynamotable.N(int64(it.Load.InFlight)),
		attrDraining:  &types.AttributeValueMemberBOOL{Value: it.Draining},
		attrExpires:   dynamotable.N(it.Expires.Unix()),
	}
	start := time.Now()
	_, err := s.client.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:                aws.String(s.table),
		Item:                     item,
		ConditionExpression:      aws.String("attribute_not_exists(#gone)"),
		ExpressionAttributeNames: map[string]string{"#gone": attrGone},
	})
	s.meter.Observe("put", start, err)
	var refused *types.ConditionalCheckFailedException
	switch {
	case errors.As(err, &refused):
		return fmt.Errorf("put %s: %w", it.ID, ErrGone)
	case err != nil:
		return fmt.Errorf("put %s: %w: %w", it.ID, ErrUnavailable, err)
	}
	return nil
}

// List implements Store with a strongly consistent Scan, all pages.
func (s *DynamoStore) List(ctx context.Context) ([]Item, error) {
	p := dynamodb.NewScanPaginator(s.client, &dynamodb.ScanInput{TableName: aws.String(s.table), ConsistentRead: aws.Bool(true)})
	var items []Item
	now := time.Now()
	for p.HasMorePages() {
		start := time.Now()
		out, err := p.NextPage(ctx)
		s.meter.Observe("list", start, err)
		if err != nil {
			return nil, fmt.Errorf("list: %w: %w", ErrUnavailable, err)
		}
		for _, raw := range out.Items {
			it := decode(raw)
			if !it.Expires.IsZero() && it.Expires.Before(now) {
				continue // TTL deletion lags
			}
			items = append(items, it)
		}
	}
	return items, nil
}

// MarkGone implements Store: UpdateItem SET gone = true, expires_at
// IF heartbeat_ms = :hb (or unconditionally for a zero heartbeat).
func (s *DynamoStore) MarkGone(ctx context.Context, id string, heartbeat, expires time.Time) error {
	in := &dynamodb.UpdateItemInput{
		TableName:                 aws.String(s.table),
		Key:                       map[string]types.AttributeValue{attrPK: dynamotable.S(id)},
		UpdateExpression:          aws.String("SET #gone = :true, #exp = :exp"),
		ExpressionAttributeNames:  map[string]string{"#gone": attrGone, "#exp": attrExpires},
		ExpressionAttributeValues: map[string]types.AttributeValue{":true": &types.AttributeValueMemberBOOL{Value: true}, ":exp": dynamotable.N(expires.Unix())},
	}
	if !heartbeat.IsZero() {
		in.ConditionExpression = aws.String("#hb = :hb")
		in.ExpressionAttributeNames["#hb"] = attrHeartbeat
		in.ExpressionAttributeValues[":hb"] = dynamotable.N(heartbeat.UnixMilli())
	}
	start := time.Now()
	_, err := s.client.UpdateItem(ctx, in)
	s.meter.Observe("mark_gone", start, err)
	var refused *types.ConditionalCheckFailedException
	switch {
	case errors.As(err, &refused):
		return fmt.Errorf("mark %s gone: %w", id, ErrChanged)
	case err != nil:
		return fmt.Errorf("mark %s gone: %w: %w", id, ErrUnavailable, err)
	}
	return nil
}

func decode(item map[string]types.AttributeValue) Item {
	var it Item
	if v, ok := item[attrPK].(*types.AttributeValueMemberS); ok {
		it.ID = v.Value
	}
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
	if b, ok := item[attrDraining].(*types.AttributeValueMemberBOOL); ok {
		it.Draining = b.Value
	}
	if b, ok := item[attrGone].(*types.AttributeValueMemberBOOL); ok {
		it.Gone = b.Value
	}
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
