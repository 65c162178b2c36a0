package quota_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/jetway-gateway/jetway/internal/dynalitetest"
	"github.com/jetway-gateway/jetway/internal/dynamotable"
	"github.com/jetway-gateway/jetway/internal/quota"
)

func newDynamoStore(t testing.TB, client *dynamodb.Client) *quota.DynamoStore {
	t.Helper()
	table := dynalitetest.TableName(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := quota.CreateTable(ctx, client, table); err != nil {
		t.Fatalf("CreateTable: %v", err)
	}
	return quota.NewDynamoStore(client, table)
}

func TestDynamoStoreContract(t *testing.T) {
	client := dynalitetest.Client(t, dynalitetest.Start(t))
	testStoreContract(t, func(t *testing.T) quota.Store { return newDynamoStore(t, client) })
}

// The stored item is exactly the documented schema.
func TestDynamoItemSchema(t *testing.T) {
	client := dynalitetest.Client(t, dynalitetest.Start(t))
	store := newDynamoStore(t, client)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	now := time.Date(2031, 11, 29, 19, 7, 3, 0, time.UTC)
	q := quota.New(store, quota.Options{Now: func() time.Time { return now }})
	limits := []quota.Limit{
		{Scope: quota.TenantScope("contoso"), Window: quota.Hour, Tokens: 1000, MicroUSD: 5000},
		{Scope: alice, Window: quota.Minute, Tokens: 1000},
	}
	r, err := q.Reserve(ctx, "req-1", limits, quota.Amount{Tokens: 314, Requests: 1, MicroUSD: 42})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Settle(ctx, r, quota.Amount{Tokens: 300, Requests: 1, MicroUSD: 40}); err != nil {
		t.Fatal(err)
	}
	for key, exp := range map[string]time.Time{
		"tenant#contoso#hour#2031-11-29T19":                            time.Date(2031, 11, 30, 20, 0, 0, 0, time.UTC),
		"user#contoso/support-assistant/alice#minute#2031-11-29T19:07": time.Date(2031, 11, 30, 19, 8, 0, 0, time.UTC),
	} {
		out, err := client.GetItem(ctx, &dynamodb.GetItemInput{
			TableName: aws.String(storeTable(t, client)),
			Key:       map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: key}},
		})
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{"used": "300", "requests": "1", "micro_usd": "40", "expires_at": strconv.FormatInt(exp.Unix(), 10)}
		if len(out.Item) != len(want)+1 {
			t.Errorf("%s: item has %d attributes, want %d: %v", key, len(out.Item), len(want)+1, out.Item)
		}
		for name, v := range want {
			n, ok := out.Item[name].(*types.AttributeValueMemberN)
			if !ok || n.Value != v {
				t.Errorf("%s: %s = %v, want N %s", key, name, out.Item[name], v)
			}
		}
	}
}

// storeTable finds the only table on a dynalite instance.
func storeTable(t *testing.T, client *dynamodb.Client) string {
	t.Helper()
	out, err := client.ListTables(context.Background(), &dynamodb.ListTablesInput{})
	if err != nil || len(out.TableNames) != 1 {
		t.Fatalf("ListTables = %v, %v; want one table", out, err)
	}
	return out.TableNames[0]
}

func TestDynamoUnreachableIsUnavailableQuickly(t *testing.T) {
	endpoint := dynalitetest.UnreachableEndpoint(t)

	client := dynalitetest.Client(t, endpoint, dynalitetest.SmallRetryBudget)
	q := quota.New(quota.NewDynamoStore(client, "quota"), quota.Options{})
	begin := time.Now()
	_, err := q.Reserve(context.Background(), "req", []quota.Limit{{Scope: support, Window: quota.Hour, Tokens: 10}}, tokens(1))
	took := time.Since(begin)
	if !errors.Is(err, quota.ErrUnavailable) || errors.Is(err, quota.ErrExceeded) {
		t.Fatalf("Reserve = %v, want ErrUnavailable", err)
	}
	if took > quota.DefaultStoreTimeout {
		t.Errorf("Reserve took %v, want well under the %v store timeout", took, quota.DefaultStoreTimeout)
	}
	t.Logf("unreachable endpoint: ErrUnavailable after %v", took)
}

// A throttling DynamoDB is retried by the SDK within its budget, then
// reported as ErrUnavailable.
func TestDynamoThrottledIsRetriedThenUnavailable(t *testing.T) {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"__type":"com.amazonaws.dynamodb.v20120810#ThrottlingException","message":"Rate of requests exceeds the allowed throughput."}`))
	}))
	defer srv.Close()
	client := dynalitetest.Client(t, srv.URL, dynalitetest.SmallRetryBudget)
	q := quota.New(quota.NewDynamoStore(client, "quota"), quota.Options{})
	_, err := q.Reserve(context.Background(), "req", []quota.Limit{{Scope: support, Window: quota.Hour, Tokens: 10}}, tokens(1))
	if !errors.Is(err, quota.ErrUnavailable) {
		t.Fatalf("Reserve = %v, want ErrUnavailable", err)
	}
	if got := calls.Load(); got != 3 {
		t.Errorf("DynamoDB saw %d calls, want 3 (the SDK's retry budget)", got)
	}
}

// An endpoint that accepts but never answers is cut off by StoreTimeout.
func TestDynamoHungIsUnavailableAfterStoreTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)
	client := dynalitetest.Client(t, srv.URL, dynalitetest.SmallRetryBudget)
	var observed atomic.Int64
	store := quota.NewDynamoStore(client, "quota")
	store.SetObserver(observerFunc(func(table, op, outcome string, _ time.Duration) {
		if table == dynamotable.TableQuota && op == "reserve" && outcome == dynamotable.OutcomeTimeout {
			observed.Add(1)
		}
	}))
	q := quota.New(store, quota.Options{StoreTimeout: 100 * time.Millisecond})
	begin := time.Now()
	_, err := q.Reserve(context.Background(), "req", []quota.Limit{{Scope: support, Window: quota.Hour, Tokens: 10}}, tokens(1))
	if !errors.Is(err, quota.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Reserve = %v, want ErrUnavailable (deadline exceeded)", err)
	}
	if took := time.Since(begin); took > 2*time.Second {
		t.Errorf("Reserve took %v with a 100ms store timeout", took)
	}
	if observed.Load() != 1 {
		t.Errorf("the observer saw %d timed-out reserves, want 1", observed.Load())
	}
}

type observerFunc func(table, op, outcome string, d time.Duration)

func (f observerFunc) ObserveDynamoDB(table, op, outcome string, d time.Duration) {
	f(table, op, outcome, d)
}

func TestDynamoStoreLeases(t *testing.T) {
	client := dynalitetest.Client(t, dynalitetest.Start(t))
	testLeaseContract(t, func(t *testing.T) quota.Store { return newDynamoStore(t, client) })
}

// ambiguousClient forwards every request and, while armed, answers chosen
// UpdateItem calls with an error after DynamoDB applied them: the
// ambiguous failure of a timeout after the write.
type ambiguousClient struct {
	http    *http.Client
	armed   atomic.Int64 // fail this many UpdateItem calls
	applied atomic.Int64 // UpdateItem calls that failed after applying
}

var errAmbiguous = errors.New("injected: connection lost after the request was sent")

func (c *ambiguousClient) Do(r *http.Request) (*http.Response, error) {
	resp, err := c.http.Do(r)
	if err != nil || r.Header.Get("X-Amz-Target") != "DynamoDB_20120810.UpdateItem" {
		return resp, err
	}
	for {
		n := c.armed.Load()
		if n <= 0 {
			return resp, nil
		}
		if c.armed.CompareAndSwap(n, n-1) {
			break
		}
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		c.applied.Add(1)
	}
	return nil, errAmbiguous
}

// A lease write that applied but whose caller saw an error is recognised
// by its sequence number: neither the SDK's retry nor the lease's own
// applies it twice, so nothing is granted or charged twice.
func TestDynamoLeaseWriteAmbiguousFailure(t *testing.T) {
	endpoint := dynalitetest.Start(t)
	for _, sdkRetries := range []int{1, 3} {
		t.Run(fmt.Sprint("sdk attempts ", sdkRetries), func(t *testing.T) {
			amb := &ambiguousClient{http: &http.Client{}}
			client := dynalitetest.Client(t, endpoint, func(o *dynamodb.Options) {
				o.HTTPClient = amb
				o.RetryMaxAttempts = sdkRetries
			})
			store := newDynamoStore(t, client)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			now := func() time.Time { return midMonth }
			q := leaseServer(t, store, "server-a", now, quota.LeaseOptions{Ahead: time.Second, Block: time.Second, MinRequests: 1})
			limit := quota.Limit{Scope: support, Window: quota.Hour, Tokens: 100_000}
			it := itemOf(limit, midMonth)

			amb.armed.Store(1) // the lease's first write
			r, err := q.Reserve(ctx, "r1", []quota.Limit{limit}, tokens(1000))
			if err != nil {
				t.Fatalf("Reserve after an ambiguous failure of its write = %v, want the write recognised as applied", err)
			}
			if amb.applied.Load() != 1 {
				t.Fatalf("injected %d ambiguous failures, want 1", amb.applied.Load())
			}
			st := readItem(t, store, it)
			if l := st.Leases["server-a"]; st.Used.Tokens != l.Granted.Tokens {
				t.Errorf("used %d != the lease's granted %d: a write applied twice", st.Used.Tokens, l.Granted.Tokens)
			}

			amb.armed.Store(1) // the settle's write of usage past the committed amount
			if err := q.Settle(ctx, r, tokens(2600)); err != nil {
				t.Fatalf("Settle: %v", err)
			}
			if err := q.Drain(ctx); err != nil {
				t.Fatal(err)
			}
			if amb.applied.Load() != 2 {
				t.Errorf("injected %d ambiguous failures, want 2", amb.applied.Load())
			}
			if got := readItem(t, store, it).Used.Tokens; got != 2600 {
				t.Errorf("used after settle and drain = %d, want exactly 2600 (charged once)", got)
			}
		})
	}
}
