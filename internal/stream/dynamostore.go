package stream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jetway-gateway/jetway/internal/dynamotable"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
)

// Attribute names of the requests table (see the comment at the top of store.go).
const (
	attrPK          = "pk"
	attrServer      = "server"
	attrEndedMS     = "ended_ms"
	attrState       = "state"
	attrBodyHash    = "body_hash"
	attrAccepted    = "accepted"
	attrReservation = "reservation"
	attrChunks      = "chunks"
	attrSeq         = "seq"
	attrTerminal    = "terminal"
	attrItemBytes   = "item_bytes"
	attrExpires     = "expires_at"
	attrCancel      = "cancel"
	attrTrace       = "trace"
)

// createAttempts bounds Create's retries when the record it collided with
// vanished before it could be read (deleted or expired in between).
const createAttempts = 3

// DynamoStore is a Store in a DynamoDB table shared by every gateway task.
// Every write is one single-item conditional PutItem or UpdateItem (no
// transactions, so it runs unchanged on DynamoDB and on
// dynalite); Get is one strongly consistent GetItem.
//
// Throttling and unreachable endpoints are retried by the SDK client's
// retryer, whose budget the caller sizes when building the client; ctx
// bounds each call. Such failures wrap ErrUnavailable.
type DynamoStore struct {
	client *dynamodb.Client
	table  string
	now    func() time.Time // expiry checks (TTL deletion lags)
	meter  dynamotable.Meter
}

// NewDynamoStore returns a Store on the given table (see CreateTable). The
// client's endpoint comes from the SDK's configuration (for local use,
// AWS_ENDPOINT_URL_DYNAMODB).
func NewDynamoStore(client *dynamodb.Client, table string) *DynamoStore {
	return &DynamoStore{client: client, table: table, now: time.Now}
}

// SetObserver reports every call from now on to obs (table role
// "requests", ops create|checkpoint|finish|interrupt|cancel|get); call it before
// the store is used.
func (s *DynamoStore) SetObserver(obs dynamotable.Observer) {
	s.meter = dynamotable.NewMeter(dynamotable.TableRequests, obs)
}

// Create implements Store with one conditional PutItem.
func (s *DynamoStore) Create(ctx context.Context, r Record) (*Record, error) {
	if err := checkOwnerCall(r.Owner, r.RequestID, r.Server); err != nil {
		return nil, fmt.Errorf("create: %w", err)
	}
	r.State, r.Chunks, r.Terminal = StateRunning, nil, nil
	r.Accepted, r.Reservation = nonEmpty(r.Accepted), nonEmpty(r.Reservation)
	r.Expires = expiryTime(expirySeconds(r.Expires))
	size := recordBytes(&r)
	if size > MaxRecordBytes {
		return nil, fmt.Errorf("create: %w", ErrTooLarge)
	}
	item := map[string]types.AttributeValue{
		attrPK:        str(recordKey(r.Owner, r.RequestID)),
		attrServer:    str(r.Server),
		attrEndedMS:   num(runningEndedMS),
		attrState:     str(StateRunning),
		attrChunks:    &types.AttributeValueMemberL{Value: []types.AttributeValue{}},
		attrSeq:       num(0),
		attrItemBytes: num(int64(size)),
	}
	if r.BodyHash != "" {
		item[attrBodyHash] = str(r.BodyHash)
	}
	if r.Accepted != nil {
		item[attrAccepted] = &types.AttributeValueMemberB{Value: r.Accepted}
	}
	if r.Reservation != nil {
		item[attrReservation] = &types.AttributeValueMemberB{Value: r.Reservation}
	}
	if r.Trace != "" {
		item[attrTrace] = str(r.Trace)
	}
	if exp := expirySeconds(r.Expires); exp != 0 {
		item[attrExpires] = num(exp)
	}
	for range createAttempts {
		start := time.Now()
		_, err := s.client.PutItem(ctx, &dynamodb.PutItemInput{
			TableName: aws.String(s.table),
			Item:      item,
			// An expired record that TTL has not deleted yet counts as absent.
			ConditionExpression:                 aws.String("attribute_not_exists(#pk) OR #exp <= :now_s"),
			ExpressionAttributeNames:            map[string]string{"#pk": attrPK, "#exp": attrExpires},
			ExpressionAttributeValues:           map[string]types.AttributeValue{":now_s": num(s.now().Unix())},
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		})
		s.meter.Observe("create", start, err)
		if err == nil {
			return &r, nil
		}
		cur, err := s.refused(ctx, err, r.Owner, r.RequestID)
		if err != nil {
			return nil, fmt.Errorf("create %s: %w", r.RequestID, err)
		}
		if cur != nil {
			return cur, fmt.Errorf("create %s: %w", r.RequestID, ErrExists)
		}
	}
	return nil, fmt.Errorf("create %s: %w: the existing record kept vanishing", r.RequestID, ErrConflict)
}

// Checkpoint implements Store with one conditional UpdateItem:
//
//	SET chunks = list_append(if_not_exists(chunks, :empty), :new), seq = :seq,
//	    item_bytes = item_bytes + :add
//	IF server = :server AND state = running AND seq = :prev AND item_bytes <= :room
//	   AND attribute_not_exists(cancel)
//
// A refusal costs nothing more on DynamoDB, which returns the item with it
// (one GetItem on dynalite): that is how the owner learns of a Cancel.
func (s *DynamoStore) Checkpoint(ctx context.Context, owner, requestID, server string, prevSeq int, chunks []string) error {
	if err := checkOwnerCall(owner, requestID, server); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if err := checkAppend(prevSeq); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	u := s.newUpdate(owner, requestID)
	u.ownedBy(server)
	u.appendChunks(prevSeq, chunks)
	u.cond("attribute_not_exists(#cancel)", map[string]string{"#cancel": attrCancel}, nil)
	if len(chunks) == 0 {
		// A bare check for a Cancel still needs something to SET.
		u.set(attrSeq, num(int64(prevSeq)))
	}
	return s.update(ctx, "checkpoint", u, func(cur *Record, size int) error {
		return appendRefusal(cur, size, server, prevSeq, chunks, "", nil)
	})
}

// Finish implements Store with one conditional UpdateItem, Checkpoint's
// plus SET state, terminal, expires_at.
func (s *DynamoStore) Finish(ctx context.Context, owner, requestID, server string, prevSeq int, chunks []string, state string, terminal []byte, expires time.Time) error {
	if err := checkOwnerCall(owner, requestID, server); err != nil {
		return fmt.Errorf("finish: %w", err)
	}
	if err := checkAppend(prevSeq); err != nil {
		return fmt.Errorf("finish: %w", err)
	}
	if err := checkTerminal(state, terminal); err != nil {
		return fmt.Errorf("finish: %w", err)
	}
	u := s.newUpdate(owner, requestID)
	u.ownedBy(server)
	u.appendChunks(prevSeq, chunks)
	u.end(state, terminal, expires, s.now())
	return s.update(ctx, "finish", u, func(cur *Record, size int) error {
		return appendRefusal(cur, size, server, prevSeq, chunks, state, terminal)
	})
}

// Get implements Store with one strongly consistent GetItem.
func (s *DynamoStore) Get(ctx context.Context, owner, requestID string) (*Record, error) {
	if err := checkIDs(owner, requestID); err != nil {
		return nil, fmt.Errorf("get: %w", err)
	}
	r, _, err := s.get(ctx, owner, requestID)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", requestID, err)
	}
	if r == nil {
		return nil, fmt.Errorf("get %s: %w", requestID, ErrNotFound)
	}
	return r, nil
}

// Interrupt implements Store with one conditional UpdateItem:
//
//	SET state = error, terminal = :t, expires_at = :exp, ended_ms = :now
//	IF state = running AND server = :server
func (s *DynamoStore) Interrupt(ctx context.Context, owner, requestID, server string, terminal []byte, expires time.Time) error {
	if err := checkIDs(owner, requestID); err != nil {
		return fmt.Errorf("interrupt: %w", err)
	}
	if err := checkTerminal(StateError, terminal); err != nil {
		return fmt.Errorf("interrupt: %w", err)
	}
	if server == "" {
		return fmt.Errorf("interrupt: %w: empty server", ErrInvalid)
	}
	u := s.newUpdate(owner, requestID)
	u.ownedBy(server)
	u.end(StateError, terminal, expires, s.now())
	return s.update(ctx, "interrupt", u, func(cur *Record, size int) error {
		if cur == nil {
			return ErrNotFound
		}
		if cur.State != StateRunning || cur.Server != server {
			return fmt.Errorf("%w: state %s, owner %s", ErrConflict, cur.State, cur.Server)
		}
		return fmt.Errorf("%w: about %d bytes stored, %d more, limit %d", ErrTooLarge, size, len(terminal), MaxRecordBytes)
	})
}

// Cancel implements Store with one conditional UpdateItem:
//
//	SET cancel = true IF state = running
func (s *DynamoStore) Cancel(ctx context.Context, owner, requestID string) error {
	if err := checkIDs(owner, requestID); err != nil {
		return fmt.Errorf("cancel: %w", err)
	}
	u := s.newUpdate(owner, requestID)
	u.cond("#state = :running", map[string]string{"#state": attrState}, map[string]types.AttributeValue{":running": str(StateRunning)})
	u.set(attrCancel, &types.AttributeValueMemberBOOL{Value: true})
	return s.update(ctx, "cancel", u, func(cur *Record, _ int) error {
		if cur == nil {
			return ErrNotFound
		}
		if cur.State != StateRunning {
			return fmt.Errorf("%w: state %s", ErrConflict, cur.State)
		}
		if cur.Cancelled {
			return nil // a retry whose first attempt was applied
		}
		return fmt.Errorf("%w: refused while running", ErrConflict)
	})
}

// update is one conditional UpdateItem under construction. Every update
// is conditional on the record being live (present and not expired).
type update struct {
	key    map[string]types.AttributeValue
	sets   []string
	remove []string
	conds  []string
	names  map[string]string
	values map[string]types.AttributeValue
	add    int // bytes the update grows the record by
}

func (s *DynamoStore) newUpdate(owner, requestID string) *update {
	u := &update{
		key:    map[string]types.AttributeValue{attrPK: str(recordKey(owner, requestID))},
		names:  map[string]string{},
		values: map[string]types.AttributeValue{},
	}
	u.cond("attribute_exists(#pk) AND (attribute_not_exists(#exp) OR #exp > :now_s)",
		map[string]string{"#pk": attrPK, "#exp": attrExpires},
		map[string]types.AttributeValue{":now_s": num(s.now().Unix())})
	return u
}

func (u *update) cond(expr string, names map[string]string, values map[string]types.AttributeValue) {
	u.conds = append(u.conds, expr)
	for k, v := range names {
		u.names[k] = v
	}
	for k, v := range values {
		u.values[k] = v
	}
}

// ownedBy makes the update conditional on server owning the running record.
func (u *update) ownedBy(server string) {
	u.cond("#server = :server AND #state = :running", map[string]string{"#server": attrServer, "#state": attrState},
		map[string]types.AttributeValue{":server": str(server), ":running": str(StateRunning)})
}

// set adds SET name = v.
func (u *update) set(name string, v types.AttributeValue) {
	ph := "#" + name
	u.names[ph] = name
	u.values[":"+name] = v
	u.sets = append(u.sets, ph+" = :"+name)
}

// setBytes sets a binary attribute, or removes it when b is empty
// (DynamoDB binary values may not be empty on every engine).
func (u *update) setBytes(name string, b []byte) {
	if len(b) == 0 {
		u.names["#"+name] = name
		u.remove = append(u.remove, "#"+name)
		return
	}
	u.set(name, &types.AttributeValueMemberB{Value: b})
}

// grow accounts for n more bytes in the record.
func (u *update) grow(n int) { u.add += n }

// appendChunks appends chunks after prevSeq, conditional on the stored seq.
func (u *update) appendChunks(prevSeq int, chunks []string) {
	u.cond("#seq = :prev", map[string]string{"#seq": attrSeq}, map[string]types.AttributeValue{":prev": num(int64(prevSeq))})
	if len(chunks) == 0 {
		return
	}
	list := make([]types.AttributeValue, len(chunks))
	for i, c := range chunks {
		list[i] = str(c)
	}
	u.names["#chunks"] = attrChunks
	u.values[":empty"] = &types.AttributeValueMemberL{Value: []types.AttributeValue{}}
	u.values[":new"] = &types.AttributeValueMemberL{Value: list}
	u.sets = append(u.sets, "#chunks = list_append(if_not_exists(#chunks, :empty), :new)")
	u.set(attrSeq, num(int64(prevSeq+len(chunks))))
	u.grow(chunksBytes(chunks))
}

// end stores the terminal outcome, and when it ended (which takes the
// record out of its server's running records).
func (u *update) end(state string, terminal []byte, expires, now time.Time) {
	u.set(attrState, str(state))
	u.set(attrEndedMS, num(now.UnixMilli()))
	u.set(attrTerminal, &types.AttributeValueMemberB{Value: terminal})
	u.grow(len(terminal))
	if exp := expirySeconds(expires); exp != 0 {
		u.set(attrExpires, num(exp))
	} else {
		u.names["#"+attrExpires] = attrExpires
		u.remove = append(u.remove, "#"+attrExpires)
	}
}

// input builds the UpdateItem, adding the size guard.
func (u *update) input(table string) *dynamodb.UpdateItemInput {
	u.names["#bytes"] = attrItemBytes
	u.values[":add"] = num(int64(u.add))
	u.values[":room"] = num(int64(MaxRecordBytes - u.add))
	u.conds = append(u.conds, "#bytes <= :room")
	expr := "SET " + strings.Join(append(u.sets, "#bytes = #bytes + :add"), ", ")
	if len(u.remove) > 0 {
		expr += " REMOVE " + strings.Join(u.remove, ", ")
	}
	return &dynamodb.UpdateItemInput{
		TableName:                           aws.String(table),
		Key:                                 u.key,
		UpdateExpression:                    aws.String(expr),
		ConditionExpression:                 aws.String(strings.Join(u.conds, " AND ")),
		ExpressionAttributeNames:            u.names,
		ExpressionAttributeValues:           u.values,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}
}

// update runs u. When its condition fails, explain gets the record as it
// is now (nil when absent) and its size estimate, and returns why the
// write was refused, or nil when it had in fact already been applied.
func (s *DynamoStore) update(ctx context.Context, op string, u *update, explain func(cur *Record, size int) error) error {
	if u.add > MaxRecordBytes {
		return fmt.Errorf("%s: %w: %d bytes in one write, limit %d", op, ErrTooLarge, u.add, MaxRecordBytes)
	}
	key := u.key[attrPK].(*types.AttributeValueMemberS).Value
	start := time.Now()
	_, err := s.client.UpdateItem(ctx, u.input(s.table))
	s.meter.Observe(op, start, err)
	if err == nil {
		return nil
	}
	var refused *types.ConditionalCheckFailedException
	if !errors.As(err, &refused) {
		return fmt.Errorf("%s %s: %w", op, key, s.failure(err))
	}
	var cur *Record
	size := 0
	if refused.Item != nil {
		cur, size = s.decodeLive(refused.Item, key)
	} else if cur, size, err = s.getKey(ctx, key); err != nil {
		return fmt.Errorf("%s %s: %w", op, key, err)
	}
	if err := explain(cur, size); err != nil {
		return fmt.Errorf("%s %s: %w", op, key, err)
	}
	return nil
}

// refused handles a failed conditional PutItem: the record
// as it is now (nil when absent), or the store's failure.
func (s *DynamoStore) refused(ctx context.Context, err error, owner, requestID string) (*Record, error) {
	var refused *types.ConditionalCheckFailedException
	if !errors.As(err, &refused) {
		return nil, s.failure(err)
	}
	if refused.Item != nil {
		cur, _ := s.decodeLive(refused.Item, recordKey(owner, requestID))
		return cur, nil
	}
	cur, _, err := s.get(ctx, owner, requestID)
	return cur, err
}

// failure classifies an error that is not a refused condition.
func (s *DynamoStore) failure(err error) error {
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode() == "ValidationException" {
		if strings.Contains(strings.ToLower(apiErr.ErrorMessage()), "size") {
			return fmt.Errorf("%w: %w", ErrTooLarge, err)
		}
		return fmt.Errorf("dynamodb: %w", err)
	}
	return fmt.Errorf("%w: dynamodb: %w", ErrUnavailable, err)
}

func (s *DynamoStore) get(ctx context.Context, owner, requestID string) (*Record, int, error) {
	return s.getKey(ctx, recordKey(owner, requestID))
}

// getKey reads the live record (nil when absent or expired) and its size estimate.
func (s *DynamoStore) getKey(ctx context.Context, key string) (*Record, int, error) {
	start := time.Now()
	out, err := s.client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      aws.String(s.table),
		Key:            map[string]types.AttributeValue{attrPK: str(key)},
		ConsistentRead: aws.Bool(true),
	})
	s.meter.Observe("get", start, err)
	if err != nil {
		return nil, 0, s.failure(err)
	}
	if out.Item == nil {
		return nil, 0, nil
	}
	r, size := s.decodeLive(out.Item, key)
	return r, size, nil
}

// decodeLive decodes an item, or returns nil for an expired one.
func (s *DynamoStore) decodeLive(item map[string]types.AttributeValue, key string) (*Record, int) {
	exp, _ := intAttr(item, attrExpires)
	if expired(exp, s.now()) {
		return nil, 0
	}
	owner, requestID := splitKey(key)
	r := &Record{
		Owner:       owner,
		RequestID:   requestID,
		BodyHash:    strAttr(item, attrBodyHash),
		Server:      strAttr(item, attrServer),
		State:       strAttr(item, attrState),
		Accepted:    bytesAttr(item, attrAccepted),
		Terminal:    bytesAttr(item, attrTerminal),
		Reservation: bytesAttr(item, attrReservation),
		Trace:       strAttr(item, attrTrace),
		Expires:     expiryTime(exp),
	}
	if c, ok := item[attrCancel].(*types.AttributeValueMemberBOOL); ok {
		r.Cancelled = c.Value
	}
	if ms, ok := intAttr(item, attrEndedMS); ok && ms != runningEndedMS {
		r.EndedAt = time.UnixMilli(ms)
	}
	if l, ok := item[attrChunks].(*types.AttributeValueMemberL); ok && len(l.Value) > 0 {
		r.Chunks = make([]string, len(l.Value))
		for i, v := range l.Value {
			if sv, ok := v.(*types.AttributeValueMemberS); ok {
				r.Chunks[i] = sv.Value
			}
		}
	}
	size, _ := intAttr(item, attrItemBytes)
	return r, int(size)
}

// splitKey inverts recordKey; request ids never hold '#'.
func splitKey(key string) (owner, requestID string) {
	rest := strings.TrimPrefix(key, "req#")
	i := strings.LastIndexByte(rest, '#')
	if i < 0 {
		return rest, ""
	}
	return rest[:i], rest[i+1:]
}

func str(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }

func num(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}

func strAttr(item map[string]types.AttributeValue, name string) string {
	if v, ok := item[name].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

// bytesAttr reads a frame stored as B (or S, accepted for hand-written items).
func bytesAttr(item map[string]types.AttributeValue, name string) []byte {
	switch v := item[name].(type) {
	case *types.AttributeValueMemberB:
		return nonEmpty(v.Value)
	case *types.AttributeValueMemberS:
		return nonEmpty([]byte(v.Value))
	}
	return nil
}

func intAttr(item map[string]types.AttributeValue, name string) (int64, bool) {
	v, ok := item[name].(*types.AttributeValueMemberN)
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(v.Value, 10, 64)
	return n, err == nil
}

// nonEmpty maps an empty slice to nil, so both stores report "absent" alike.
func nonEmpty(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

// Owned implements Store with a Query of the by_server index (keys only,
// eventually consistent: a record created a moment ago may be missing,
// one that just ended may still be listed as running; callers read each
// record before acting on it), all pages.
func (s *DynamoStore) Owned(ctx context.Context, server string, since time.Time) ([]RecordKey, error) {
	if server == "" {
		return nil, fmt.Errorf("owned: %w: empty server", ErrInvalid)
	}
	in := &dynamodb.QueryInput{
		TableName:                aws.String(s.table),
		IndexName:                aws.String(IndexByServer),
		KeyConditionExpression:   aws.String("#server = :server AND #ended >= :since"),
		ExpressionAttributeNames: map[string]string{"#server": attrServer, "#ended": attrEndedMS},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":server": str(server), ":since": num(since.UnixMilli())},
	}
	var keys []RecordKey
	p := dynamodb.NewQueryPaginator(s.client, in)
	for p.HasMorePages() {
		start := time.Now()
		out, err := p.NextPage(ctx)
		s.meter.Observe("owned", start, err)
		if err != nil {
			return keys, fmt.Errorf("owned %s: %w", server, s.failure(err))
		}
		for _, item := range out.Items {
			owner, id := splitKey(strAttr(item, attrPK))
			if owner != "" && id != "" {
				keys = append(keys, RecordKey{Owner: owner, RequestID: id})
			}
		}
	}
	return keys, nil
}

// IndexByServer is the requests table's global secondary index on
// (server, ended_ms), keys only: a server's running records are those
// with ended_ms = runningEndedMS.
const IndexByServer = "by_server"

// CreateTable creates the requests table (partition key pk, on-demand
// billing, the by_server index) if it does not exist, waits until it is
// ACTIVE, and enables TTL on expires_at. It is idempotent. It is for local
// and test use (`gateway tables create`); production tables come from
// Terraform. dynalite has no TTL API, which is tolerated: reads ignore
// expired records.
func CreateTable(ctx context.Context, client *dynamodb.Client, table string) error {
	return dynamotable.Create(ctx, client, table, attrPK, attrExpires, dynamotable.Index{
		Name: IndexByServer, Hash: attrServer, HashType: types.ScalarAttributeTypeS,
		Range: attrEndedMS, RangeType: types.ScalarAttributeTypeN})
}
