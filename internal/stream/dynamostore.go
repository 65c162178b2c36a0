package stream

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jetway-gateway/jetway/internal/call"
	"github.com/jetway-gateway/jetway/internal/dynamotable"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Attribute names of the requests table (see the comment at the top of store.go).
const (
	attrPK          = dynamotable.PK
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
	attrFormat      = "format"
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
//
// A record is written in the store's format (SetFormat; call.FormatV1 by
// default, what earlier releases read) and read in whichever its item
// says: an item of format v2 carries format = 2, one without is v1.
type DynamoStore struct {
	table  *dynamotable.Table
	now    func() time.Time // expiry checks (TTL deletion lags)
	format call.Format      // of the records this store creates
}

// NewDynamoStore returns a Store on the given table (see CreateTable). The
// client's endpoint comes from the SDK's configuration (for local use,
// AWS_ENDPOINT_URL_DYNAMODB).
func NewDynamoStore(client *dynamodb.Client, table string) *DynamoStore {
	return &DynamoStore{table: dynamotable.NewTable(client, table, dynamotable.TableRequests), now: time.Now,
		format: call.FormatV1}
}

// SetFormat makes the records this store creates and appends to use
// format f; call it before the store is used.
func (s *DynamoStore) SetFormat(f call.Format) { s.format = f }

// SetObserver reports every call from now on to obs (table role
// "requests", ops create|checkpoint|finish|interrupt|cancel|get); call it before
// the store is used.
func (s *DynamoStore) SetObserver(obs dynamotable.Observer) { s.table.SetObserver(obs) }

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
	item := dynamotable.Item{
		attrPK:        dynamotable.S(recordKey(r.Owner, r.RequestID)),
		attrServer:    dynamotable.S(r.Server),
		attrEndedMS:   dynamotable.N(runningEndedMS),
		attrState:     dynamotable.S(StateRunning),
		attrChunks:    dynamotable.L(nil),
		attrSeq:       dynamotable.N(0),
		attrItemBytes: dynamotable.N(int64(size)),
	}
	if s.format >= call.FormatV2 {
		item[attrFormat] = dynamotable.N(int64(s.format))
	}
	if r.BodyHash != "" {
		item[attrBodyHash] = dynamotable.S(r.BodyHash)
	}
	if r.Accepted != nil {
		item[attrAccepted] = dynamotable.B(r.Accepted)
	}
	if r.Reservation != nil {
		item[attrReservation] = dynamotable.B(r.Reservation)
	}
	if r.Trace != "" {
		item[attrTrace] = dynamotable.S(r.Trace)
	}
	if exp := expirySeconds(r.Expires); exp != 0 {
		item[attrExpires] = dynamotable.N(exp)
	}
	for range createAttempts {
		// An expired record that TTL has not deleted yet counts as absent.
		err := s.table.Put(ctx, "create", item, "attribute_not_exists(#pk) OR #exp <= :now_s",
			map[string]string{"#pk": attrPK, "#exp": attrExpires},
			dynamotable.Item{":now_s": dynamotable.N(s.now().Unix())})
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
	u.appendChunks(prevSeq, call.StoredPieces(s.format, chunks))
	u.Name("#cancel", attrCancel).If("attribute_not_exists(#cancel)")
	if len(chunks) == 0 {
		// A bare check for a Cancel still needs something to SET.
		u.Value(":seq", dynamotable.N(int64(prevSeq))).Set("#seq = :seq")
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
	u.appendChunks(prevSeq, call.StoredPieces(s.format, chunks))
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

// Withdraw implements Store with one conditional UpdateItem:
//
//	SET expires_at = :now_s - 1, ended_ms = :now_ms
//	IF server = :server AND state = running AND seq = 0 AND body_hash = :body
//
// An expired record counts as absent everywhere (and Create may write
// over it), so the request id is as if it never arrived.
func (s *DynamoStore) Withdraw(ctx context.Context, owner, requestID, server, bodyHash string) error {
	if err := checkOwnerCall(owner, requestID, server); err != nil {
		return fmt.Errorf("withdraw: %w", err)
	}
	now := s.now()
	u := s.newUpdate(owner, requestID)
	u.ownedBy(server)
	u.Name("#seq", attrSeq).Value(":zero", dynamotable.N(0)).If("#seq = :zero")
	u.Name("#body", attrBodyHash).Value(":body", dynamotable.S(bodyHash)).If("#body = :body")
	u.SetValue(attrExpires, dynamotable.N(now.Unix()-1))
	u.SetValue(attrEndedMS, dynamotable.N(now.UnixMilli()))
	return s.update(ctx, "withdraw", u, func(cur *Record, _ int) error {
		if cur == nil {
			return ErrNotFound
		}
		return withdrawRefusal(cur, server, bodyHash)
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
	u.Name("#state", attrState).Value(":running", dynamotable.S(StateRunning)).If("#state = :running")
	u.SetValue(attrCancel, dynamotable.BOOL(true))
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

// update is one conditional UpdateItem under construction, and the bytes
// it grows the record by. Every update is conditional on the record being
// live (present and not expired).
type update struct {
	*dynamotable.Update
	add int
}

func (s *DynamoStore) newUpdate(owner, requestID string) *update {
	u := &update{Update: dynamotable.NewUpdate(recordKey(owner, requestID))}
	u.Name("#pk", attrPK).Name("#exp", attrExpires).Value(":now_s", dynamotable.N(s.now().Unix())).
		If("attribute_exists(#pk) AND (attribute_not_exists(#exp) OR #exp > :now_s)")
	return u
}

// ownedBy makes the update conditional on server owning the running record.
func (u *update) ownedBy(server string) {
	u.Name("#server", attrServer).Name("#state", attrState).
		Value(":server", dynamotable.S(server)).Value(":running", dynamotable.S(StateRunning)).
		If("#server = :server AND #state = :running")
}

// appendChunks appends chunks after prevSeq, conditional on the stored seq.
func (u *update) appendChunks(prevSeq int, chunks []string) {
	u.Name("#seq", attrSeq).Value(":prev", dynamotable.N(int64(prevSeq))).If("#seq = :prev")
	if len(chunks) == 0 {
		return
	}
	u.Name("#chunks", attrChunks).Value(":empty", dynamotable.L(nil)).Value(":new", dynamotable.L(chunks)).
		Set("#chunks = list_append(if_not_exists(#chunks, :empty), :new)")
	u.Value(":seq", dynamotable.N(int64(prevSeq+len(chunks)))).Set("#seq = :seq")
	u.add += chunksBytes(chunks)
}

// end stores the terminal outcome, and when it ended (which takes the
// record out of its server's running records).
func (u *update) end(state string, terminal []byte, expires, now time.Time) {
	u.SetValue(attrState, dynamotable.S(state))
	u.SetValue(attrEndedMS, dynamotable.N(now.UnixMilli()))
	u.SetValue(attrTerminal, dynamotable.B(terminal))
	u.add += len(terminal)
	if exp := expirySeconds(expires); exp != 0 {
		u.SetValue(attrExpires, dynamotable.N(exp))
	} else {
		u.RemoveAttr(attrExpires)
	}
}

// guard adds the size guard: the record's byte count grows by what the
// update adds, and it applies only while the record stays under the bound.
func (u *update) guard() {
	u.Name("#bytes", attrItemBytes).Value(":add", dynamotable.N(int64(u.add))).
		Value(":room", dynamotable.N(int64(MaxRecordBytes-u.add))).
		Set("#bytes = #bytes + :add").If("#bytes <= :room")
}

// update runs u. When its condition fails, explain gets the record as it
// is now (nil when absent) and its size estimate, and returns why the
// write was refused, or nil when it had in fact already been applied.
func (s *DynamoStore) update(ctx context.Context, op string, u *update, explain func(cur *Record, size int) error) error {
	if u.add > MaxRecordBytes {
		return fmt.Errorf("%s: %w: %d bytes in one write, limit %d", op, ErrTooLarge, u.add, MaxRecordBytes)
	}
	key := u.Key()
	u.guard()
	_, err := s.table.Update(ctx, op, u.Update)
	if err == nil {
		return nil
	}
	item, refused := dynamotable.Refused(err)
	if !refused {
		return fmt.Errorf("%s: %w", op, failure(err))
	}
	var cur *Record
	size := 0
	if item != nil {
		cur, size = s.decodeLive(item, key)
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
	item, refused := dynamotable.Refused(err)
	if !refused {
		return nil, failure(err)
	}
	if item != nil {
		cur, _ := s.decodeLive(item, recordKey(owner, requestID))
		return cur, nil
	}
	cur, _, err := s.get(ctx, owner, requestID)
	return cur, err
}

// failure classifies an error that is not a refused condition.
func failure(err error) error {
	switch {
	case dynamotable.TooLarge(err):
		return fmt.Errorf("%w: %w", ErrTooLarge, err)
	case dynamotable.Invalid(err):
		return err
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}

func (s *DynamoStore) get(ctx context.Context, owner, requestID string) (*Record, int, error) {
	return s.getKey(ctx, recordKey(owner, requestID))
}

// getKey reads the live record (nil when absent or expired) and its size estimate.
func (s *DynamoStore) getKey(ctx context.Context, key string) (*Record, int, error) {
	item, err := s.table.Get(ctx, "get", key, true)
	if err != nil {
		return nil, 0, failure(err)
	}
	if item == nil {
		return nil, 0, nil
	}
	r, size := s.decodeLive(item, key)
	return r, size, nil
}

// decodeLive decodes an item, or returns nil for an expired one.
func (s *DynamoStore) decodeLive(item dynamotable.Item, key string) (*Record, int) {
	exp, _ := dynamotable.Int(item, attrExpires)
	if expired(exp, s.now()) {
		return nil, 0
	}
	owner, requestID := splitKey(key)
	r := &Record{
		Owner:       owner,
		RequestID:   requestID,
		BodyHash:    dynamotable.String(item, attrBodyHash),
		Server:      dynamotable.String(item, attrServer),
		State:       dynamotable.String(item, attrState),
		Accepted:    dynamotable.Bytes(item, attrAccepted),
		Terminal:    dynamotable.Bytes(item, attrTerminal),
		Reservation: dynamotable.Bytes(item, attrReservation),
		Cancelled:   dynamotable.Bool(item, attrCancel),
		Chunks:      call.LoadPieces(itemFormat(item), dynamotable.Strings(item, attrChunks)),
		Trace:       dynamotable.String(item, attrTrace),
		Expires:     expiryTime(exp),
	}
	if ms, ok := dynamotable.Int(item, attrEndedMS); ok && ms != runningEndedMS {
		r.EndedAt = time.UnixMilli(ms)
	}
	size, _ := dynamotable.Int(item, attrItemBytes)
	return r, int(size)
}

// itemFormat is the format of a record's item: v1 when it names none.
func itemFormat(item dynamotable.Item) call.Format {
	if f, ok := dynamotable.Int(item, attrFormat); ok {
		return call.Format(f)
	}
	return call.FormatV1
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
		IndexName:                aws.String(IndexByServer),
		KeyConditionExpression:   aws.String("#server = :server AND #ended >= :since"),
		ExpressionAttributeNames: map[string]string{"#server": attrServer, "#ended": attrEndedMS},
		ExpressionAttributeValues: dynamotable.Item{
			":server": dynamotable.S(server), ":since": dynamotable.N(since.UnixMilli())},
	}
	var keys []RecordKey
	err := s.table.Query(ctx, "owned", in, func(items []dynamotable.Item) {
		for _, item := range items {
			owner, id := splitKey(dynamotable.String(item, attrPK))
			if owner != "" && id != "" {
				keys = append(keys, RecordKey{Owner: owner, RequestID: id})
			}
		}
	})
	if err != nil {
		return keys, fmt.Errorf("owned %s: %w", server, failure(err))
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
