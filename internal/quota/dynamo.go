package quota

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
)

// Attribute names of the quota table (see the package documentation).
const (
	attrPK       = "pk"
	attrUsed     = "used"
	attrRequests = "requests"
	attrMicroUSD = "micro_usd"
	attrExpires  = "expires_at"
)

// DynamoStore is a Store in a DynamoDB table shared by every gateway task.
// Every call it makes is a single-item UpdateItem or GetItem: no
// transactions, so it works unchanged on DynamoDB and on dynalite.
//
// Throttling and unreachable endpoints are retried by the SDK client's
// retryer; the caller sizes that budget when building the client (for
// example retry.AddWithMaxAttempts(retry.NewStandard(), 3) with a small
// MaxBackoff), and Options.StoreTimeout bounds each call on top of it.
// Errors other than a refused condition wrap ErrUnavailable. Every call is
// reported to the observer set with SetObserver (table role "quota").
type DynamoStore struct {
	client *dynamodb.Client
	table  string
	meter  dynamotable.Meter
}

// NewDynamoStore returns a Store on the given table (see CreateTable). The
// client's endpoint comes from the SDK's configuration (for local use,
// AWS_ENDPOINT_URL_DYNAMODB).
func NewDynamoStore(client *dynamodb.Client, table string) *DynamoStore {
	return &DynamoStore{client: client, table: table}
}

// SetObserver reports every call from now on to obs (table role "quota",
// ops reserve|add|get|lease|reclaim); call it before the store is used.
func (s *DynamoStore) SetObserver(obs dynamotable.Observer) {
	s.meter = dynamotable.NewMeter(dynamotable.TableQuota, obs)
}

// Reserve implements Store with one conditional UpdateItem:
//
//	ADD used :t, requests :r, micro_usd :c SET expires_at = :exp
//	condition, per limited metric: (attribute_not_exists(used) OR used <= :max_t)
//
// where :max_t = limit - n, so the check and the add are one atomic step.
func (s *DynamoStore) Reserve(ctx context.Context, it Item, n, limit Amount) (Amount, error) {
	// A request larger than a cap can never fit; checked here because the
	// condition would let it through on an item that does not exist yet.
	if (limit.Tokens > 0 && n.Tokens > limit.Tokens) || (limit.Requests > 0 && n.Requests > limit.Requests) ||
		(limit.MicroUSD > 0 && n.MicroUSD > limit.MicroUSD) {
		used, _ := s.Get(ctx, it) // best effort, for the error's Used
		return used, ErrExceeded
	}
	in := s.update(it, n)
	var conds []string
	addCond := func(name, attr string, capv, asked int64) {
		if capv <= 0 {
			return
		}
		ph := ":max_" + attr
		conds = append(conds, fmt.Sprintf("(attribute_not_exists(%s) OR %s <= %s)", name, name, ph))
		in.ExpressionAttributeValues[ph] = number(capv - asked)
	}
	addCond("#u", attrUsed, limit.Tokens, n.Tokens)
	addCond("#r", attrRequests, limit.Requests, n.Requests)
	addCond("#c", attrMicroUSD, limit.MicroUSD, n.MicroUSD)
	if len(conds) > 0 {
		in.ConditionExpression = aws.String(strings.Join(conds, " AND "))
		// DynamoDB returns the refusing item with the error; dynalite does
		// not, and then Reserve reads it.
		in.ReturnValuesOnConditionCheckFailure = types.ReturnValuesOnConditionCheckFailureAllOld
	}
	start := time.Now()
	out, err := s.client.UpdateItem(ctx, in)
	s.meter.Observe("reserve", start, err)
	var refused *types.ConditionalCheckFailedException
	if errors.As(err, &refused) {
		if refused.Item != nil {
			return decodeAmount(refused.Item), ErrExceeded
		}
		used, _ := s.Get(ctx, it)
		return used, ErrExceeded
	}
	if err != nil {
		return Amount{}, fmt.Errorf("%w: dynamodb UpdateItem %s: %w", ErrUnavailable, it.Key(), err)
	}
	return decodeAmount(out.Attributes), nil
}

// Add implements Store with one unconditional UpdateItem (ADD).
func (s *DynamoStore) Add(ctx context.Context, it Item, delta Amount) (Amount, error) {
	start := time.Now()
	out, err := s.client.UpdateItem(ctx, s.update(it, delta))
	s.meter.Observe("add", start, err)
	if err != nil {
		return Amount{}, fmt.Errorf("%w: dynamodb UpdateItem %s: %w", ErrUnavailable, it.Key(), err)
	}
	return decodeAmount(out.Attributes), nil
}

// Get implements Store with one strongly consistent GetItem: the item's
// counters, as ReadItem reads them.
func (s *DynamoStore) Get(ctx context.Context, it Item) (Amount, error) {
	st, err := s.ReadItem(ctx, it)
	return st.Used, err
}

// update builds the UpdateItem that adds delta to the item's counters and
// (re)sets its expiry.
func (s *DynamoStore) update(it Item, delta Amount) *dynamodb.UpdateItemInput {
	return &dynamodb.UpdateItemInput{
		TableName:        aws.String(s.table),
		Key:              map[string]types.AttributeValue{attrPK: &types.AttributeValueMemberS{Value: it.Key()}},
		UpdateExpression: aws.String("ADD #u :t, #r :r, #c :c SET #e = :exp"),
		ExpressionAttributeNames: map[string]string{
			"#u": attrUsed, "#r": attrRequests, "#c": attrMicroUSD, "#e": attrExpires,
		},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":t":   number(delta.Tokens),
			":r":   number(delta.Requests),
			":c":   number(delta.MicroUSD),
			":exp": number(it.Expires().Unix()),
		},
		ReturnValues: types.ReturnValueUpdatedNew,
	}
}

func number(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}

func intAttr(item map[string]types.AttributeValue, name string) (int64, bool) {
	v, ok := item[name].(*types.AttributeValueMemberN)
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(v.Value, 10, 64)
	return n, err == nil
}

func decodeAmount(item map[string]types.AttributeValue) Amount {
	var a Amount
	a.Tokens, _ = intAttr(item, attrUsed)
	a.Requests, _ = intAttr(item, attrRequests)
	a.MicroUSD, _ = intAttr(item, attrMicroUSD)
	return a
}

// CreateTable creates the quota table (partition key pk, on-demand
// billing) if it does not exist, waits until it is ACTIVE, and enables TTL
// on expires_at. It is idempotent. It is for local and test use
// (`gateway tables create`); production tables come from Terraform.
// dynalite has no TTL API, which is tolerated: items are keyed by window
// start, so expired items are never read as current usage.
func CreateTable(ctx context.Context, client *dynamodb.Client, table string) error {
	return dynamotable.Create(ctx, client, table, attrPK, attrExpires)
}

// Lease attributes: one map attribute per owner, lease_<owner> =
// {granted: {t, r, c}, committed: {t, r, c}, spent: {t, r, c}, expires_ms,
// seq, epoch, at_ms}.
const (
	leasePrefix    = "lease_"
	attrGranted    = "granted"
	attrCommitted  = "committed"
	attrSpent      = "spent"
	attrLeaseExp   = "expires_ms"
	attrLeaseSeq   = "seq"
	attrLeaseEpoch = "epoch"
	attrLeaseAt    = "at_ms"
	attrAmountTok  = "t"
	attrAmountReq  = "r"
	attrAmountUSD  = "c"
	leaseCondition = "#l.#seq = :prev"
)

// WriteLease implements Store with one conditional UpdateItem:
//
//	ADD used :t, requests :r, micro_usd :c  SET expires_at = :exp, lease_<owner> = :lease
//	condition: lease_<owner>.seq = :prev (attribute_not_exists for a new lease)
//	           AND, per positive grant of a limited metric, used <= limit - grant
func (s *DynamoStore) WriteLease(ctx context.Context, it Item, w LeaseWrite) (ItemState, error) {
	// A grant larger than a limit can never fit; checked here because the
	// condition would let it through on an item that does not exist yet.
	if !w.Force && !grantFits(Amount{}, w.Grant, w.Limit) {
		st, err := s.ReadItem(ctx, it)
		if err != nil {
			return ItemState{}, err
		}
		return st, ErrExceeded
	}
	in := s.update(it, w.Grant)
	in.UpdateExpression = aws.String(*in.UpdateExpression + ", #l = :lease")
	in.ExpressionAttributeNames["#l"] = leasePrefix + w.Lease.Owner
	in.ExpressionAttributeValues[":lease"] = encodeLease(w.Lease)
	in.ReturnValues = types.ReturnValueAllNew
	in.ReturnValuesOnConditionCheckFailure = types.ReturnValuesOnConditionCheckFailureAllOld
	conds := []string{"attribute_not_exists(#l)"}
	if w.PrevSeq != 0 {
		conds[0] = leaseCondition
		in.ExpressionAttributeNames["#seq"] = attrLeaseSeq
		in.ExpressionAttributeValues[":prev"] = number(w.PrevSeq)
	}
	addCond := func(name, attr string, capv, grant int64) {
		if w.Force || capv <= 0 || grant <= 0 {
			return
		}
		ph := ":max_" + attr
		conds = append(conds, fmt.Sprintf("(attribute_not_exists(%s) OR %s <= %s)", name, name, ph))
		in.ExpressionAttributeValues[ph] = number(capv - grant)
	}
	addCond("#u", attrUsed, w.Limit.Tokens, w.Grant.Tokens)
	addCond("#r", attrRequests, w.Limit.Requests, w.Grant.Requests)
	addCond("#c", attrMicroUSD, w.Limit.MicroUSD, w.Grant.MicroUSD)
	in.ConditionExpression = aws.String(strings.Join(conds, " AND "))
	start := time.Now()
	out, err := s.client.UpdateItem(ctx, in)
	s.meter.Observe("lease", start, err)
	var refused *types.ConditionalCheckFailedException
	if errors.As(err, &refused) {
		st, rerr := s.refusedState(ctx, it, refused)
		if rerr != nil {
			return ItemState{}, rerr
		}
		// Which condition failed: the lease's, or a limit.
		if applyLease(ptr(cloneState(st)), w) == ErrLeaseConflict {
			return st, ErrLeaseConflict
		}
		return st, ErrExceeded
	}
	if err != nil {
		return ItemState{}, fmt.Errorf("%w: dynamodb UpdateItem %s (lease): %w", ErrUnavailable, it.Key(), err)
	}
	return decodeState(out.Attributes), nil
}

// ReclaimLease implements Store with one conditional UpdateItem:
//
//	ADD used :-(granted - keep) ... REMOVE lease_<owner>
//	condition: lease_<owner>.seq = :seq AND lease_<owner>.expires_ms < :now
func (s *DynamoStore) ReclaimLease(ctx context.Context, it Item, l Lease, now time.Time, keep Amount) (ItemState, error) {
	in := s.update(it, Amount{}.Sub(l.Granted.Sub(keep)))
	in.UpdateExpression = aws.String(*in.UpdateExpression + " REMOVE #l")
	in.ExpressionAttributeNames["#l"] = leasePrefix + l.Owner
	in.ExpressionAttributeNames["#seq"] = attrLeaseSeq
	in.ExpressionAttributeNames["#x"] = attrLeaseExp
	in.ExpressionAttributeValues[":prev"] = number(l.Seq)
	in.ExpressionAttributeValues[":now"] = number(now.UnixMilli())
	in.ConditionExpression = aws.String(leaseCondition + " AND #l.#x < :now")
	in.ReturnValues = types.ReturnValueAllNew
	in.ReturnValuesOnConditionCheckFailure = types.ReturnValuesOnConditionCheckFailureAllOld
	start := time.Now()
	out, err := s.client.UpdateItem(ctx, in)
	s.meter.Observe("reclaim", start, err)
	var refused *types.ConditionalCheckFailedException
	if errors.As(err, &refused) {
		st, rerr := s.refusedState(ctx, it, refused)
		if rerr != nil {
			return ItemState{}, rerr
		}
		return st, ErrLeaseConflict
	}
	if err != nil {
		return ItemState{}, fmt.Errorf("%w: dynamodb UpdateItem %s (reclaim): %w", ErrUnavailable, it.Key(), err)
	}
	return decodeState(out.Attributes), nil
}

// ReadItem implements Store with one strongly consistent GetItem. TTL
// deletion lags (up to days), so an expired item reads as empty here, as
// MemoryStore forgets it.
func (s *DynamoStore) ReadItem(ctx context.Context, it Item) (ItemState, error) {
	start := time.Now()
	out, err := s.client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      aws.String(s.table),
		Key:            map[string]types.AttributeValue{attrPK: &types.AttributeValueMemberS{Value: it.Key()}},
		ConsistentRead: aws.Bool(true),
	})
	s.meter.Observe("get", start, err)
	if err != nil {
		return ItemState{}, fmt.Errorf("%w: dynamodb GetItem %s: %w", ErrUnavailable, it.Key(), err)
	}
	if exp, ok := intAttr(out.Item, attrExpires); ok && exp <= time.Now().Unix() {
		return ItemState{}, nil
	}
	return decodeState(out.Item), nil
}

// refusedState is the item a refused condition saw: DynamoDB returns it
// with the error, dynalite does not, and then it is read.
func (s *DynamoStore) refusedState(ctx context.Context, it Item, refused *types.ConditionalCheckFailedException) (ItemState, error) {
	if refused.Item != nil {
		return decodeState(refused.Item), nil
	}
	return s.ReadItem(ctx, it)
}

func ptr[T any](v T) *T { return &v }

func encodeAmountMap(a Amount) types.AttributeValue {
	return &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
		attrAmountTok: number(a.Tokens), attrAmountReq: number(a.Requests), attrAmountUSD: number(a.MicroUSD),
	}}
}

func decodeAmountMap(v types.AttributeValue) Amount {
	m, ok := v.(*types.AttributeValueMemberM)
	if !ok {
		return Amount{}
	}
	var a Amount
	a.Tokens, _ = intAttr(m.Value, attrAmountTok)
	a.Requests, _ = intAttr(m.Value, attrAmountReq)
	a.MicroUSD, _ = intAttr(m.Value, attrAmountUSD)
	return a
}

func encodeLease(l Lease) types.AttributeValue {
	return &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
		attrGranted:    encodeAmountMap(l.Granted),
		attrCommitted:  encodeAmountMap(l.Committed),
		attrSpent:      encodeAmountMap(l.Spent),
		attrLeaseExp:   number(l.Expires.UnixMilli()),
		attrLeaseSeq:   number(l.Seq),
		attrLeaseEpoch: number(l.Epoch),
		attrLeaseAt:    number(l.At.UnixMilli()),
	}}
}

func decodeState(item map[string]types.AttributeValue) ItemState {
	st := ItemState{Used: decodeAmount(item)}
	for name, v := range item {
		owner, ok := strings.CutPrefix(name, leasePrefix)
		m, isMap := v.(*types.AttributeValueMemberM)
		if !ok || !isMap {
			continue
		}
		exp, _ := intAttr(m.Value, attrLeaseExp)
		seq, _ := intAttr(m.Value, attrLeaseSeq)
		epoch, _ := intAttr(m.Value, attrLeaseEpoch)
		at, _ := intAttr(m.Value, attrLeaseAt)
		if st.Leases == nil {
			st.Leases = make(map[string]Lease)
		}
		st.Leases[owner] = Lease{Owner: owner, Granted: decodeAmountMap(m.Value[attrGranted]),
			Committed: decodeAmountMap(m.Value[attrCommitted]), Expires: time.UnixMilli(exp), Seq: seq,
			Spent: decodeAmountMap(m.Value[attrSpent]), Epoch: epoch, At: time.UnixMilli(at)}
	}
	return st
}
