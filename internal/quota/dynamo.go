package quota

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jetway-gateway/jetway/internal/dynamotable"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Attribute names of the quota table (see the package documentation).
const (
	attrPK       = dynamotable.PK
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
	table *dynamotable.Table
}

// NewDynamoStore returns a Store on the given table (see CreateTable). The
// client's endpoint comes from the SDK's configuration (for local use,
// AWS_ENDPOINT_URL_DYNAMODB).
func NewDynamoStore(client *dynamodb.Client, table string) *DynamoStore {
	return &DynamoStore{table: dynamotable.NewTable(client, table, dynamotable.TableQuota)}
}

// SetObserver reports every call from now on to obs (table role "quota",
// ops reserve|add|get|lease|reclaim); call it before the store is used.
func (s *DynamoStore) SetObserver(obs dynamotable.Observer) { s.table.SetObserver(obs) }

// Reserve implements Store with one conditional UpdateItem:
//
//	ADD used :used, requests :requests, micro_usd :micro_usd SET expires_at = :expires_at
//	condition, per limited metric: (attribute_not_exists(used) OR used <= :max_used)
//
// where :max_used = limit - n, so the check and the add are one atomic step.
func (s *DynamoStore) Reserve(ctx context.Context, it Item, n, limit Amount) (Amount, error) {
	// A request larger than a cap can never fit; checked here because the
	// condition would let it through on an item that does not exist yet.
	if (limit.Tokens > 0 && n.Tokens > limit.Tokens) || (limit.Requests > 0 && n.Requests > limit.Requests) ||
		(limit.MicroUSD > 0 && n.MicroUSD > limit.MicroUSD) {
		used, _ := s.Get(ctx, it) // best effort, for the error's Used
		return used, ErrExceeded
	}
	u := update(it, n)
	underLimits(u, n, limit, false)
	attrs, err := s.table.Update(ctx, "reserve", u)
	// DynamoDB returns the refusing item with the error; dynalite does
	// not, and then Reserve reads it.
	if item, refused := dynamotable.Refused(err); refused {
		if item != nil {
			return decodeAmount(item), ErrExceeded
		}
		used, _ := s.Get(ctx, it)
		return used, ErrExceeded
	}
	if err != nil {
		return Amount{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return decodeAmount(attrs), nil
}

// Add implements Store with one unconditional UpdateItem (ADD).
func (s *DynamoStore) Add(ctx context.Context, it Item, delta Amount) (Amount, error) {
	attrs, err := s.table.Update(ctx, "add", update(it, delta))
	if err != nil {
		return Amount{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return decodeAmount(attrs), nil
}

// Get implements Store with one strongly consistent GetItem: the item's
// counters, as ReadItem reads them.
func (s *DynamoStore) Get(ctx context.Context, it Item) (Amount, error) {
	st, err := s.ReadItem(ctx, it)
	return st.Used, err
}

// update is the UpdateItem that adds delta to the item's counters and
// (re)sets its expiry.
func update(it Item, delta Amount) *dynamotable.Update {
	u := dynamotable.NewUpdate(it.Key()).
		Name("#used", attrUsed).Name("#requests", attrRequests).Name("#micro_usd", attrMicroUSD).Name("#expires_at", attrExpires).
		Value(":used", dynamotable.N(delta.Tokens)).Value(":requests", dynamotable.N(delta.Requests)).
		Value(":micro_usd", dynamotable.N(delta.MicroUSD)).Value(":expires_at", dynamotable.N(it.Expires().Unix())).
		Add("#used :used, #requests :requests, #micro_usd :micro_usd").Set("#expires_at = :expires_at")
	u.Return = types.ReturnValueUpdatedNew
	return u
}

// underLimits makes u conditional on every metric of n (only the
// positive ones when positive is set) fitting under its cap in limit (0:
// no cap): used <= cap - n.
func underLimits(u *dynamotable.Update, n, limit Amount, positive bool) {
	for _, m := range [...]struct {
		capv, want int64
		ph, cond   string
	}{
		{limit.Tokens, n.Tokens, ":max_used", "attribute_not_exists(#used) OR #used <= :max_used"},
		{limit.Requests, n.Requests, ":max_requests", "attribute_not_exists(#requests) OR #requests <= :max_requests"},
		{limit.MicroUSD, n.MicroUSD, ":max_micro_usd", "attribute_not_exists(#micro_usd) OR #micro_usd <= :max_micro_usd"},
	} {
		if m.capv <= 0 || (positive && m.want <= 0) {
			continue
		}
		u.Value(m.ph, dynamotable.N(m.capv-m.want)).If(m.cond)
	}
}

func decodeAmount(item dynamotable.Item) Amount {
	var a Amount
	a.Tokens, _ = dynamotable.Int(item, attrUsed)
	a.Requests, _ = dynamotable.Int(item, attrRequests)
	a.MicroUSD, _ = dynamotable.Int(item, attrMicroUSD)
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
//	ADD used :used, requests :requests, micro_usd :micro_usd
//	SET expires_at = :expires_at, lease_<owner> = :lease
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
	u := update(it, w.Grant).Name("#l", leasePrefix+w.Lease.Owner).Value(":lease", encodeLease(w.Lease)).Set("#l = :lease")
	u.Return = types.ReturnValueAllNew
	if w.PrevSeq != 0 {
		u.Name("#seq", attrLeaseSeq).Value(":prev", dynamotable.N(w.PrevSeq)).If(leaseCondition)
	} else {
		u.If("attribute_not_exists(#l)")
	}
	if !w.Force {
		underLimits(u, w.Grant, w.Limit, true)
	}
	attrs, err := s.table.Update(ctx, "lease", u)
	if item, refused := dynamotable.Refused(err); refused {
		st, rerr := s.refusedState(ctx, it, item)
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
		return ItemState{}, fmt.Errorf("%w: lease: %w", ErrUnavailable, err)
	}
	return decodeState(attrs), nil
}

// ReclaimLease implements Store with one conditional UpdateItem:
//
//	ADD used :-(granted - keep) ... REMOVE lease_<owner>
//	condition: lease_<owner>.seq = :seq AND lease_<owner>.expires_ms < :now
func (s *DynamoStore) ReclaimLease(ctx context.Context, it Item, l Lease, now time.Time, keep Amount) (ItemState, error) {
	u := update(it, Amount{}.Sub(l.Granted.Sub(keep))).
		Name("#l", leasePrefix+l.Owner).Name("#seq", attrLeaseSeq).Name("#x", attrLeaseExp).Remove("#l").
		Value(":prev", dynamotable.N(l.Seq)).Value(":now", dynamotable.N(now.UnixMilli())).
		If(leaseCondition).If("#l.#x < :now")
	u.Return = types.ReturnValueAllNew
	attrs, err := s.table.Update(ctx, "reclaim", u)
	if item, refused := dynamotable.Refused(err); refused {
		st, rerr := s.refusedState(ctx, it, item)
		if rerr != nil {
			return ItemState{}, rerr
		}
		return st, ErrLeaseConflict
	}
	if err != nil {
		return ItemState{}, fmt.Errorf("%w: reclaim: %w", ErrUnavailable, err)
	}
	return decodeState(attrs), nil
}

// ReadItem implements Store with one strongly consistent GetItem. TTL
// deletion lags (up to days), so an expired item reads as empty here, as
// MemoryStore forgets it.
func (s *DynamoStore) ReadItem(ctx context.Context, it Item) (ItemState, error) {
	item, err := s.table.Get(ctx, "get", it.Key(), true)
	if err != nil {
		return ItemState{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if exp, ok := dynamotable.Int(item, attrExpires); ok && exp <= time.Now().Unix() {
		return ItemState{}, nil
	}
	return decodeState(item), nil
}

// refusedState is the item a refused condition saw: DynamoDB returns it
// with the error, dynalite does not, and then it is read.
func (s *DynamoStore) refusedState(ctx context.Context, it Item, item dynamotable.Item) (ItemState, error) {
	if item != nil {
		return decodeState(item), nil
	}
	return s.ReadItem(ctx, it)
}

func ptr[T any](v T) *T { return &v }

func encodeAmountMap(a Amount) types.AttributeValue {
	return dynamotable.M(dynamotable.Item{
		attrAmountTok: dynamotable.N(a.Tokens), attrAmountReq: dynamotable.N(a.Requests), attrAmountUSD: dynamotable.N(a.MicroUSD),
	})
}

func decodeAmountMap(m dynamotable.Item) Amount {
	var a Amount
	a.Tokens, _ = dynamotable.Int(m, attrAmountTok)
	a.Requests, _ = dynamotable.Int(m, attrAmountReq)
	a.MicroUSD, _ = dynamotable.Int(m, attrAmountUSD)
	return a
}

func encodeLease(l Lease) types.AttributeValue {
	return dynamotable.M(dynamotable.Item{
		attrGranted:    encodeAmountMap(l.Granted),
		attrCommitted:  encodeAmountMap(l.Committed),
		attrSpent:      encodeAmountMap(l.Spent),
		attrLeaseExp:   dynamotable.N(l.Expires.UnixMilli()),
		attrLeaseSeq:   dynamotable.N(l.Seq),
		attrLeaseEpoch: dynamotable.N(l.Epoch),
		attrLeaseAt:    dynamotable.N(l.At.UnixMilli()),
	})
}

func decodeState(item dynamotable.Item) ItemState {
	st := ItemState{Used: decodeAmount(item)}
	for name := range item {
		owner, ok := strings.CutPrefix(name, leasePrefix)
		m := dynamotable.Map(item, name)
		if !ok || m == nil {
			continue
		}
		exp, _ := dynamotable.Int(m, attrLeaseExp)
		seq, _ := dynamotable.Int(m, attrLeaseSeq)
		epoch, _ := dynamotable.Int(m, attrLeaseEpoch)
		at, _ := dynamotable.Int(m, attrLeaseAt)
		if st.Leases == nil {
			st.Leases = make(map[string]Lease)
		}
		st.Leases[owner] = Lease{Owner: owner, Granted: decodeAmountMap(dynamotable.Map(m, attrGranted)),
			Committed: decodeAmountMap(dynamotable.Map(m, attrCommitted)), Expires: time.UnixMilli(exp), Seq: seq,
			Spent: decodeAmountMap(dynamotable.Map(m, attrSpent)), Epoch: epoch, At: time.UnixMilli(at)}
	}
	return st
}
