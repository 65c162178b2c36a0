package stream_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/jetway-gateway/jetway/internal/call"
	"github.com/jetway-gateway/jetway/internal/dynalitetest"
	"github.com/jetway-gateway/jetway/internal/stream"
)

// newDynamoStore creates a fresh table on client's dynalite.
func newDynamoStore(t *testing.T, client *dynamodb.Client) (*stream.DynamoStore, string) {
	t.Helper()
	table := dynalitetest.TableName(t)
	if err := stream.CreateTable(testCtx(t), client, table); err != nil {
		t.Fatalf("CreateTable: %v", err)
	}
	return stream.NewDynamoStore(client, table), table
}

func TestDynamoStoreContract(t *testing.T) {
	client := dynalitetest.Client(t, dynalitetest.Start(t))
	testStoreContract(t, func(t *testing.T) stream.Store {
		s, _ := newDynamoStore(t, client)
		return s
	})
}

// The stored item is the schema documented in store.go.
func TestDynamoItemSchema(t *testing.T) {
	client := dynalitetest.Client(t, dynalitetest.Start(t))
	s, table := newDynamoStore(t, client)
	ctx := testCtx(t)
	expires := time.Unix(1_900_000_600, 0)
	r := stream.Record{Owner: "us-east-1:abc#def", RequestID: "req-schema", BodyHash: "h", Server: serverA, Expires: expires,
		Accepted: []byte(`{"type":"accepted"}`), Reservation: []byte(`{"v":1}`)}
	mustCreate(t, s, r)
	if err := s.Checkpoint(ctx, r.Owner, r.RequestID, serverA, 0, []string{"a", "b"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Cancel(ctx, r.Owner, r.RequestID); err != nil {
		t.Fatal(err)
	}
	if err := s.Finish(ctx, r.Owner, r.RequestID, serverA, 2, []string{"c"}, stream.StateDone, []byte(`{"type":"done"}`), expires); err != nil {
		t.Fatal(err)
	}
	out, err := client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(table),
		Key:       map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "req#us-east-1:abc#def#req-schema"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	item := out.Item
	wantS := map[string]string{"server": serverA, "state": "done", "body_hash": "h"}
	wantN := map[string]string{"seq": "3", "expires_at": "1900000600"}
	wantB := map[string]string{"accepted": `{"type":"accepted"}`, "reservation": `{"v":1}`, "terminal": `{"type":"done"}`}
	for name, v := range wantS {
		if got, ok := item[name].(*types.AttributeValueMemberS); !ok || got.Value != v {
			t.Errorf("%s = %#v, want S %q", name, item[name], v)
		}
	}
	for name, v := range wantN {
		if got, ok := item[name].(*types.AttributeValueMemberN); !ok || got.Value != v {
			t.Errorf("%s = %#v, want N %s", name, item[name], v)
		}
	}
	for name, v := range wantB {
		if got, ok := item[name].(*types.AttributeValueMemberB); !ok || string(got.Value) != v {
			t.Errorf("%s = %#v, want B %s", name, item[name], v)
		}
	}
	chunks, ok := item["chunks"].(*types.AttributeValueMemberL)
	if !ok || len(chunks.Value) != 3 {
		t.Fatalf("chunks = %#v", item["chunks"])
	}
	for i, want := range []string{"a", "b", "c"} {
		if got, ok := chunks.Value[i].(*types.AttributeValueMemberS); !ok || got.Value != want {
			t.Errorf("chunks[%d] = %#v, want S %q", i, chunks.Value[i], want)
		}
	}
	if _, ok := item["item_bytes"].(*types.AttributeValueMemberN); !ok {
		t.Errorf("item_bytes = %#v", item["item_bytes"])
	}
	if c, ok := item["cancel"].(*types.AttributeValueMemberBOOL); !ok || !c.Value {
		t.Errorf("cancel = %#v, want BOOL true", item["cancel"])
	}
	if e, ok := item["ended_ms"].(*types.AttributeValueMemberN); !ok || e.Value == "9999999999999" {
		t.Errorf("ended_ms = %#v, want the end", item["ended_ms"])
	}
	if n := len(wantS) + len(wantN) + len(wantB) + 5; len(item) != n { // + pk, chunks, item_bytes, cancel, ended_ms
		t.Errorf("item has %d attributes, want %d: %v", len(item), n, item)
	}
	got := mustGet(t, s, r.Owner, r.RequestID)
	if got.Owner != r.Owner || got.RequestID != r.RequestID {
		t.Errorf("Get = %+v", got)
	}
}

// Two stores on one table are two gateway tasks: the same request sent to
// both makes one record, and a task that lost its lease cannot write.
func TestDynamoTwoServers(t *testing.T) {
	client := dynalitetest.Client(t, dynalitetest.Start(t))
	a, table := newDynamoStore(t, client)
	b := stream.NewDynamoStore(client, table)
	ctx := testCtx(t)

	const callers = 10
	var created atomic.Int64
	var wg sync.WaitGroup
	for i := range callers {
		s, server := stream.Store(a), serverA
		if i%2 == 1 {
			s, server = b, serverB
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := running("req-twice")
			r.Server = server
			existing, err := s.Create(ctx, r)
			switch {
			case err == nil:
				created.Add(1)
			case errors.Is(err, stream.ErrExists) && existing != nil && existing.RequestID == "req-twice":
			default:
				t.Errorf("Create: %v (%+v)", err, existing)
			}
		}()
	}
	wg.Wait()
	if created.Load() != 1 {
		t.Fatalf("%d Creates won, want 1", created.Load())
	}
	owner := mustGet(t, a, alice, "req-twice").Server
	other, otherStore := serverB, stream.Store(b)
	if owner == serverB {
		other, otherStore = serverA, a
	}
	if err := otherStore.Interrupt(ctx, alice, "req-twice", owner, []byte("interrupted"), time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "owner's Checkpoint", a.Checkpoint(ctx, alice, "req-twice", owner, 0, []string{"x"}), stream.ErrLostLease)
	wantErr(t, "other's Checkpoint", a.Checkpoint(ctx, alice, "req-twice", other, 0, []string{"x"}), stream.ErrLostLease)
}

func TestDynamoUnreachableIsUnavailableQuickly(t *testing.T) {
	endpoint := dynalitetest.UnreachableEndpoint(t)

	s := stream.NewDynamoStore(dynalitetest.Client(t, endpoint, dynalitetest.SmallRetryBudget), "requests")
	ctx := testCtx(t)
	now := time.Now()
	calls := map[string]func() error{
		"Create": func() error { _, err := s.Create(ctx, running("req-1")); return err },
		"Get":    func() error { _, err := s.Get(ctx, alice, "req-1"); return err },
		"Checkpoint": func() error {
			return s.Checkpoint(ctx, alice, "req-1", serverA, 0, []string{"x"})
		},
		"Finish": func() error {
			return s.Finish(ctx, alice, "req-1", serverA, 0, nil, stream.StateDone, []byte("d"), now)
		},
		"Interrupt": func() error { return s.Interrupt(ctx, alice, "req-1", serverA, []byte("i"), now) },
	}
	for name, call := range calls {
		begin := time.Now()
		err := call()
		took := time.Since(begin)
		if !errors.Is(err, stream.ErrUnavailable) {
			t.Errorf("%s = %v, want ErrUnavailable", name, err)
		}
		if took > time.Second {
			t.Errorf("%s took %v, want quick", name, took)
		}
		t.Logf("%s: ErrUnavailable after %v", name, took)
	}
}

// Throttling is retried by the SDK within its budget, then reported as
// ErrUnavailable.
func TestDynamoThrottledIsUnavailable(t *testing.T) {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"__type":"com.amazonaws.dynamodb.v20120810#ThrottlingException","message":"Rate of requests exceeds the allowed throughput."}`))
	}))
	defer srv.Close()
	s := stream.NewDynamoStore(dynalitetest.Client(t, srv.URL, dynalitetest.SmallRetryBudget), "requests")
	var observed []string
	s.SetObserver(observerFunc(func(table, op, outcome string, _ time.Duration) {
		observed = append(observed, table+" "+op+" "+outcome)
	}))
	err := s.Checkpoint(testCtx(t), alice, "req-1", serverA, 0, []string{"x"})
	wantErr(t, "Checkpoint", err, stream.ErrUnavailable)
	if got := calls.Load(); got != 3 {
		t.Errorf("DynamoDB saw %d calls, want 3 (the SDK's retry budget)", got)
	}
	// One observation per store call (the SDK's retries inside it), in the shared vocabulary.
	if strings.Join(observed, ",") != "requests checkpoint throttled" {
		t.Errorf("observed %q, want one throttled checkpoint on the requests table", observed)
	}
}

// DynamoDB (unlike dynalite) returns the refusing item with a failed
// condition; the store then explains the refusal without a second call.
func TestDynamoRefusalWithReturnedItem(t *testing.T) {
	var mu sync.Mutex
	var targets []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		targets = append(targets, r.Header.Get("X-Amz-Target"))
		mu.Unlock()
		if !strings.Contains(string(body), `"ReturnValuesOnConditionCheckFailure":"ALL_OLD"`) {
			t.Errorf("request without ReturnValuesOnConditionCheckFailure: %s", body)
		}
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"__type":"com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException",
			"message":"The conditional request failed",
			"Item":{"pk":{"S":"req#alice-sub#req-1"},"server":{"S":"task-b"},"state":{"S":"error"},
			"ended_ms":{"N":"9999999999999"},"seq":{"N":"1"},"chunks":{"L":[{"S":"saved"}]},"item_bytes":{"N":"300"},
			"terminal":{"B":"aW50ZXJydXB0ZWQ="},"body_hash":{"S":"h"}}}`))
	}))
	defer srv.Close()
	s := stream.NewDynamoStore(dynalitetest.Client(t, srv.URL, dynalitetest.SmallRetryBudget), "requests")
	ctx := testCtx(t)

	existing, err := s.Create(ctx, running("req-1"))
	wantErr(t, "Create", err, stream.ErrExists)
	if existing == nil || existing.Server != serverB || existing.State != stream.StateError ||
		string(existing.Terminal) != "interrupted" || len(existing.Chunks) != 1 || existing.Chunks[0] != "saved" {
		t.Fatalf("existing = %+v", existing)
	}
	wantErr(t, "Checkpoint", s.Checkpoint(ctx, alice, "req-1", serverA, 1, []string{"x"}), stream.ErrLostLease)
	wantErr(t, "Finish", s.Finish(ctx, alice, "req-1", serverA, 1, nil, stream.StateDone, []byte("d"), time.Now()), stream.ErrLostLease)
	mu.Lock()
	defer mu.Unlock()
	want := []string{"DynamoDB_20120810.PutItem", "DynamoDB_20120810.UpdateItem", "DynamoDB_20120810.UpdateItem"}
	if strings.Join(targets, ",") != strings.Join(want, ",") {
		t.Errorf("calls = %v, want %v (no GetItem)", targets, want)
	}
}

type observerFunc func(table, op, outcome string, d time.Duration)

func (f observerFunc) ObserveDynamoDB(table, op, outcome string, d time.Duration) {
	f(table, op, outcome, d)
}

// On DynamoDB the owner learns of a Cancel from its refused checkpoint
// alone: the refusal carries the item, so no GetItem follows.
func TestDynamoCancelSeenFromTheRefusal(t *testing.T) {
	var mu sync.Mutex
	var targets []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		targets = append(targets, r.Header.Get("X-Amz-Target"))
		mu.Unlock()
		if !strings.Contains(string(body), "attribute_not_exists(#cancel)") {
			t.Errorf("checkpoint not conditional on the cancel flag: %s", body)
		}
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"__type":"com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException",
			"message":"The conditional request failed",
			"Item":{"pk":{"S":"req#alice-sub#req-1"},"server":{"S":"task-a"},"state":{"S":"running"},
			"ended_ms":{"N":"9999999999999"},"seq":{"N":"1"},"chunks":{"L":[{"S":"saved"}]},"item_bytes":{"N":"300"},
			"cancel":{"BOOL":true},"body_hash":{"S":"h"}}}`))
	}))
	defer srv.Close()
	s := stream.NewDynamoStore(dynalitetest.Client(t, srv.URL, dynalitetest.SmallRetryBudget), "requests")
	wantErr(t, "Checkpoint", s.Checkpoint(testCtx(t), alice, "req-1", serverA, 1, []string{"x"}), stream.ErrCancelled)
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(targets, ",") != "DynamoDB_20120810.UpdateItem" {
		t.Errorf("calls = %v, want one UpdateItem", targets)
	}
}

// A record's pieces are stored in the store's format, v1 by default (what
// the previous release reads: its marked pieces are JSON), and read in
// the item's: a v1 store and a v2 store on one table read each other's
// records piece for piece, and a text-only answer is stored alike in both.
func TestDynamoRecordFormats(t *testing.T) {
	client := dynalitetest.Client(t, dynalitetest.Start(t))
	v1, table := newDynamoStore(t, client)
	v2 := stream.NewDynamoStore(client, table)
	v2.SetFormat(call.FormatV2)
	ctx := testCtx(t)
	pieces := []string{
		call.Encode(call.Piece{Kind: call.KindReasoning, Reasoning: "think <hard>"}),
		call.Encode(call.Piece{Block: 1, Text: "Let me look."}),
		call.Encode(call.Piece{Block: 2, Kind: call.KindToolUse, ID: "tooluse_1", Name: "lookup"}),
		call.Encode(call.Piece{Block: 2, Kind: call.KindToolUse, Input: `{"q":"Paris"}`}),
		call.TextPiece("plain"),
	}
	stored := func(id string) []string {
		out, err := client.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table),
			Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "req#" + alice + "#" + id}}})
		if err != nil {
			t.Fatal(err)
		}
		var chunks []string
		for _, v := range out.Item["chunks"].(*types.AttributeValueMemberL).Value {
			chunks = append(chunks, v.(*types.AttributeValueMemberS).Value)
		}
		if _, ok := out.Item["format"]; ok != (id == "req-format-v2") {
			t.Errorf("%s: format attribute %v", id, out.Item["format"])
		}
		return chunks
	}
	for _, c := range []struct {
		id             string
		writer, reader *stream.DynamoStore
		server         string
	}{{"req-format-v1", v1, v2, serverA}, {"req-format-v2", v2, v1, serverB}} {
		r := running(c.id)
		r.Server = c.server
		mustCreate(t, c.writer, r)
		if err := c.writer.Checkpoint(ctx, alice, c.id, c.server, 0, pieces[:2]); err != nil {
			t.Fatal(err)
		}
		// A retried checkpoint is recognised whatever the stored form.
		if err := c.writer.Checkpoint(ctx, alice, c.id, c.server, 0, pieces[:2]); err != nil {
			t.Fatalf("%s: retried checkpoint: %v", c.id, err)
		}
		if err := c.writer.Finish(ctx, alice, c.id, c.server, 2, pieces[2:], stream.StateDone, []byte(`{"type":"done"}`), time.Time{}); err != nil {
			t.Fatal(err)
		}
		for _, s := range []*stream.DynamoStore{c.writer, c.reader} {
			if got := mustGet(t, s, alice, c.id).Chunks; strings.Join(got, "|") != strings.Join(pieces, "|") {
				t.Errorf("%s read back\n got %q\nwant %q", c.id, got, pieces)
			}
		}
		raw := stored(c.id)
		if raw[4] != "plain" {
			t.Errorf("%s: text piece stored as %q", c.id, raw[4])
		}
		if v1Form := strings.HasPrefix(raw[1], "\x00\"text\":\"Let me look.\",\"block\":1"); v1Form != (c.writer == v1) {
			t.Errorf("%s: block piece stored as %q", c.id, raw[1])
		}
	}
}
