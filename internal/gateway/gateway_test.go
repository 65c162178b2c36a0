package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jetway-gateway/jetway/internal/call"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/jetway-gateway/jetway/internal/auth"
	"github.com/jetway-gateway/jetway/internal/config"
	"github.com/jetway-gateway/jetway/internal/gateway"
	"github.com/jetway-gateway/jetway/internal/protocol"
	"github.com/jetway-gateway/jetway/internal/quota"
	"github.com/jetway-gateway/jetway/internal/router"
	"github.com/jetway-gateway/jetway/internal/stream"
	"github.com/jetway-gateway/jetway/internal/telemetry"
)

// Two models with different prices, so a fallback's charge is visible.
const testConfig = `
models:
  - {id: cheap, bedrock_id: cheap, price: {input_per_1k: 0.001, output_per_1k: 0.002}, capabilities: [images, tools]}
  - {id: dear, bedrock_id: dear, price: {input_per_1k: 0.01, output_per_1k: 0.03}}
  - {id: thinker, bedrock_id: thinker, price: {input_per_1k: 0.01, output_per_1k: 0.03}, capabilities: [tools, reasoning]}
tenants:
  - id: t
    apps:
      - id: chat
        client_ids: [chat-client]
        models: {default: cheap, fallbacks: [dear]}
        limits: [{window: hour, tokens: 1000000, usd: 100}]
      - id: cached
        client_ids: [cached-client]
        models: {default: cheap}
        cache: {ttl: 1h}
      - id: solo
        client_ids: [solo-client]
        models: {default: cheap}
      - id: dearfirst
        client_ids: [dearfirst-client]
        models: {default: dear, fallbacks: [cheap]}
      - id: think
        client_ids: [think-client]
        models: {default: thinker, fallbacks: [cheap]}
`

// waitBound bounds every wait in these tests; nothing sleeps.
const waitBound = 10 * time.Second

// streamFunc is a Router.
type streamFunc func(ctx context.Context, chain []router.Target, c router.Call, onDelta func(string)) (router.Outcome, error)

func (f streamFunc) Stream(ctx context.Context, chain []router.Target, c router.Call, onDelta func(string)) (router.Outcome, error) {
	return f(ctx, chain, c, onDelta)
}

// ledger is Quotas: the real quota logic on its in-memory store, with every
// settlement and release written down.
type ledger struct {
	*quota.Quota
	mu       sync.Mutex
	settled  map[string][]quota.Amount // by request id
	released map[string]int
}

func newLedger() *ledger {
	return &ledger{Quota: quota.New(quota.NewMemoryStore(), quota.Options{}), settled: map[string][]quota.Amount{},
		released: map[string]int{}}
}

func (l *ledger) Settle(ctx context.Context, r *quota.Reservation, actual quota.Amount) error {
	l.mu.Lock()
	l.settled[r.RequestID()] = append(l.settled[r.RequestID()], actual)
	l.mu.Unlock()
	return l.Quota.Settle(ctx, r, actual)
}

func (l *ledger) Release(ctx context.Context, r *quota.Reservation) error {
	l.mu.Lock()
	l.released[r.RequestID()]++
	l.mu.Unlock()
	return l.Quota.Release(ctx, r)
}

// usageLog is a UsageRecorder.
type usageLog struct {
	mu   sync.Mutex
	recs []telemetry.UsageRecord
}

func (u *usageLog) Record(r telemetry.UsageRecord) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.recs = append(u.recs, r)
}

func (u *usageLog) all() []telemetry.UsageRecord {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]telemetry.UsageRecord(nil), u.recs...)
}

// memCache is a Cache.
type memCache struct {
	mu sync.Mutex
	m  map[string]router.CachedAnswer
}

func (c *memCache) Get(_ context.Context, key string) (*router.CachedAnswer, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	a, ok := c.m[key]
	return &a, ok
}

func (c *memCache) Put(_ context.Context, key string, a router.CachedAnswer, _ time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m[key] = a
}

// failingCreate is Records whose Create fails: a store outage at acceptance.
type failingCreate struct{ gateway.Records }

func (failingCreate) Create(context.Context, stream.Record) (*stream.Record, error) {
	return nil, stream.ErrUnavailable
}

type env struct {
	t       *testing.T
	cfg     *config.Config
	quotas  *ledger
	usage   *usageLog
	records gateway.Records
	cache   *memCache
	fleet   *fakeFleet
	logger  *zap.Logger  // nil: the test's log
	tracer  trace.Tracer // nil: no spans
}

// fakeFleet is the fleet's membership: the servers named gone are gone.
type fakeFleet struct {
	mu        sync.Mutex
	gone      map[string]bool
	unhealthy bool
}

func (f *fakeFleet) Gone(server string, _ time.Time) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.gone[server]
}

func (f *fakeFleet) Healthy() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return !f.unhealthy
}

func (f *fakeFleet) kill(server string) {
	f.mu.Lock()
	f.gone[server] = true
	f.mu.Unlock()
}

func newEnv(t *testing.T) *env {
	cfg, err := config.Parse("test.yaml", []byte(testConfig))
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, cfg: cfg, quotas: newLedger(), usage: &usageLog{}, cache: &memCache{m: map[string]router.CachedAnswer{}},
		fleet: &fakeFleet{gone: map[string]bool{}}}
}

func (e *env) gateway(r gateway.Router, o gateway.Options) *gateway.Gateway {
	e.t.Helper()
	if o.ServerID == "" {
		o.ServerID = "server-1"
	}
	logs := stream.NewRegistry(stream.RegistryOptions{})
	logger := e.logger
	if logger == nil {
		logger = zaptest.NewLogger(e.t)
	}
	g := gateway.New(gateway.Deps{Config: config.NewLive(e.cfg), Logs: logs, Router: r, Quotas: e.quotas, Records: e.records, Fleet: e.fleet,
		Cache: e.cache, Usage: e.usage, Tracer: e.tracer, Logger: logger}, o)
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitBound)
		defer cancel()
		if err := g.Wait(ctx); err != nil {
			e.t.Errorf("gateway did not stop: %v", err)
		}
	})
	return g
}

func caller(app string) gateway.Caller {
	return gateway.Caller{Principal: auth.Principal{Subject: "user-1", Tenant: "t", App: app, ClientID: app + "-client"},
		SessionID: "session-1"}
}

func request(id, model string) gateway.Request {
	zero := 0.0
	return gateway.Request{ReceivedAt: time.Now(), RequestID: id, IsRequest: true, Request: call.Request{
		Options: call.Options{Model: model, Temperature: &zero}, Messages: []call.Message{{Role: "user", Content: "hello there"}}}}
}

// frameRequest is the gateway's request for a jetway.v1 frame, as the
// session translates it.
func frameRequest(in protocol.Inbound) gateway.Request {
	return gateway.Request{Request: in.Call(), RequestID: in.RequestID, AfterSeq: in.AfterSeq,
		IsRequest: in.Type == protocol.TypeRequest, ReceivedAt: time.Now()}
}

// terminal waits for the log's terminal frame.
func terminal(t *testing.T, log *stream.Log) map[string]any {
	t.Helper()
	deadline := time.After(waitBound)
	for {
		s := log.Read(0)
		if s.Terminal != nil {
			var f map[string]any
			if err := json.Unmarshal(s.Terminal.Stored(), &f); err != nil {
				t.Fatalf("terminal %s: %v", s.Terminal.Stored(), err)
			}
			return f
		}
		select {
		case <-s.Changed:
		case <-deadline:
			t.Fatalf("no terminal for %s", log.RequestID)
		}
	}
}

// settle waits for every settlement, then checks the one promise: exactly
// one usage record and one settlement (or release, for a rejection) per
// request, charging exactly the record's cost_usd.
func (e *env) settle(gs ...*gateway.Gateway) []telemetry.UsageRecord {
	e.t.Helper()
	recs := e.settleAttempts(gs...)
	e.quotas.mu.Lock()
	defer e.quotas.mu.Unlock()
	seen := map[string]bool{}
	for _, r := range recs {
		if seen[r.RequestID] {
			e.t.Errorf("%s: two usage records", r.RequestID)
		}
		seen[r.RequestID] = true
		s, rel := e.quotas.settled[r.RequestID], e.quotas.released[r.RequestID]
		switch {
		case len(s) == 1 && rel == 0:
			if s[0].MicroUSD != quota.MicroUSD(r.CostUSD) || s[0].Tokens != r.InputTokens+r.OutputTokens {
				e.t.Errorf("%s: charged %+v, usage record says %d tokens, $%v", r.RequestID, s[0],
					r.InputTokens+r.OutputTokens, r.CostUSD)
			}
		case len(s) == 0 && rel <= 1:
			if r.CostUSD != 0 || r.Outcome == telemetry.OutcomeDone {
				e.t.Errorf("%s: released, but recorded %s at $%v", r.RequestID, r.Outcome, r.CostUSD)
			}
		default:
			e.t.Errorf("%s: %d settlements and %d releases", r.RequestID, len(s), rel)
		}
	}
	for id := range e.quotas.settled {
		if !seen[id] {
			e.t.Errorf("%s settled without a usage record", id)
		}
	}
	return recs
}

func reply(model string, chunks ...string) streamFunc {
	return func(ctx context.Context, chain []router.Target, c router.Call, onDelta func(string)) (router.Outcome, error) {
		for _, ch := range chunks {
			onDelta(ch)
		}
		return router.Outcome{Model: model, Result: router.Result{Usage: router.Usage{InputTokens: 1200, OutputTokens: 700},
			UsageReported: true, StopReason: "end_turn"}}, nil
	}
}

func TestDoneChargesWhatItRecords(t *testing.T) {
	e := newEnv(t)
	g := e.gateway(reply("cheap", "Hel", "lo"), gateway.Options{})
	log, _, err := g.Submit(context.Background(), caller("chat"), request("req-done-1", ""))
	if err != nil {
		t.Fatal(err)
	}
	f := terminal(t, log)
	if f["type"] != "done" || f["text"] != "Hello" || f["model"] != "cheap" {
		t.Errorf("terminal %v", f)
	}
	recs := e.settle(g)
	if len(recs) != 1 || recs[0].Outcome != "done" || recs[0].CostUSD != 0.0026 {
		t.Errorf("usage records %+v, want one done at $0.0026 (1200 in, 700 out on cheap)", recs)
	}
}

func TestFallbackChargesTheModelThatAnswered(t *testing.T) {
	e := newEnv(t)
	g := e.gateway(streamFunc(func(ctx context.Context, chain []router.Target, c router.Call, onDelta func(string)) (router.Outcome, error) {
		out, err := reply("dear", "ok")(ctx, chain, c, onDelta)
		out.FallbackFrom = "cheap"
		return out, err
	}), gateway.Options{})
	log, _, _ := g.Submit(context.Background(), caller("chat"), request("req-fallback", ""))
	if f := terminal(t, log); f["model"] != "dear" {
		t.Errorf("terminal %v", f)
	}
	recs := e.settle(g)
	if len(recs) != 1 || recs[0].Model != "dear" || recs[0].FallbackFrom != "cheap" || recs[0].CostUSD != 0.033 {
		t.Errorf("usage records %+v, want dear at $0.033 (1200 in, 700 out)", recs)
	}
}

func TestCachedAnswerEndsOnce(t *testing.T) {
	e := newEnv(t)
	calls := 0
	g := e.gateway(streamFunc(func(ctx context.Context, chain []router.Target, c router.Call, onDelta func(string)) (router.Outcome, error) {
		calls++
		return reply("cheap", "same", " answer")(ctx, chain, c, onDelta)
	}), gateway.Options{})
	first, _, _ := g.Submit(context.Background(), caller("cached"), request("req-cache-1", ""))
	terminal(t, first)
	second, _, _ := g.Submit(context.Background(), caller("cached"), request("req-cache-2", ""))
	f := terminal(t, second)
	if f["type"] != "done" || f["cached"] != true || f["text"] != "same answer" || calls != 1 {
		t.Errorf("second terminal %v after %d model calls, want a cache hit", f, calls)
	}
	recs := e.settle(g)
	hit := recs[len(recs)-1]
	if len(recs) == 2 && recs[0].RequestID == "req-cache-2" {
		hit = recs[0]
	}
	if len(recs) != 2 || hit.RequestID != "req-cache-2" || !hit.Cached || hit.OutputTokens != 0 {
		t.Errorf("usage records %+v, want the hit charged only its input estimate", recs)
	}
	// Its chunks were sent, so its time to the first one is not "no chunk"
	// (0), however quick the cache was.
	if hit.Chunks != 2 || hit.TTFTMs < 1 || hit.TTFTMs > hit.LatencyMs+1 {
		t.Errorf("cache hit: chunks %d, ttft_ms %d, latency_ms %d; want 2 chunks and 1 <= ttft_ms", hit.Chunks, hit.TTFTMs, hit.LatencyMs)
	}
}

// TestRefusedByEveryModelChargesNothing: a call every model refused before
// its first chunk (throttled, unavailable, invalid) costs nothing at
// Bedrock, so the request is charged nothing; a call a model may have
// started on (its first token came too late) keeps the input estimate.
func TestRefusedByEveryModelChargesNothing(t *testing.T) {
	refused := func(kinds ...router.ErrorKind) streamFunc {
		return func(ctx context.Context, chain []router.Target, c router.Call, onDelta func(string)) (router.Outcome, error) {
			var err error
			for i, k := range kinds {
				err = &router.ModelError{Kind: k, Model: chain[i].ID, Err: errors.New(string(k))}
			}
			if len(kinds) > 1 {
				err = fmt.Errorf("%w: %w", router.ErrAllUnavailable, err)
			}
			return router.Outcome{Model: chain[len(kinds)-1].ID, FallbackFrom: chain[0].ID}, err
		}
	}
	cases := []struct {
		name    string
		router  streamFunc
		code    string
		charged bool
	}{
		{"all throttled", refused(router.KindThrottled, router.KindThrottled), protocol.CodeModelUnavailable, false},
		{"throttled then unavailable", refused(router.KindThrottled, router.KindUnavailable), protocol.CodeModelUnavailable, false},
		{"invalid", refused(router.KindValidation), protocol.CodeInvalidRequest, false},
		{"no first token in time", refused(router.KindTimeout), protocol.CodeTimeout, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			g := e.gateway(c.router, gateway.Options{})
			log, _, _ := g.Submit(context.Background(), caller("chat"), request("req-refused", ""))
			if f := terminal(t, log); f["code"] != c.code || f["chunks"] != 0.0 {
				t.Errorf("terminal %v, want %s with no chunk", f, c.code)
			}
			recs := e.settle(g) // also: settled exactly the record's tokens and cost
			if len(recs) != 1 {
				t.Fatalf("usage records %+v", recs)
			}
			r := recs[0]
			if got := r.InputTokens > 0 && r.CostUSD > 0; got != c.charged || r.OutputTokens != 0 || r.TTFTMs != 0 {
				t.Errorf("record %+v: charged %v, want %v (and no output, ttft_ms 0)", r, got, c.charged)
			}
		})
	}
}

func TestRejectionsEndOnce(t *testing.T) {
	e := newEnv(t)
	g := e.gateway(reply("cheap", "never"), gateway.Options{})
	log, _, _ := g.Submit(context.Background(), caller("chat"), request("req-not-allowed", "someone-elses-model"))
	if f := terminal(t, log); f["code"] != protocol.CodeModelNotAllowed || f["text"] != nil ||
		f["message"] != `model "someone-elses-model" is not allowed for app chat` {
		t.Errorf("terminal %v", f)
	}
	if !log.Rejected() || log.Read(0).Accepted != nil {
		t.Error("a rejected request must have no accepted frame")
	}

	// Refused after its reservation: the reservation is released.
	e.records = failingCreate{stream.NewMemoryStore(nil)}
	g2 := e.gateway(reply("cheap", "never"), gateway.Options{})
	log, _, _ = g2.Submit(context.Background(), caller("chat"), request("req-store-down", ""))
	if f := terminal(t, log); f["code"] != protocol.CodeBusy {
		t.Errorf("terminal %v", f)
	}
	recs := e.settle(g, g2) // Submit ended both before returning: records in order
	if len(recs) != 2 || recs[0].Outcome != protocol.CodeModelNotAllowed || recs[1].Outcome != protocol.CodeBusy {
		t.Errorf("usage records %+v", recs)
	}
	if e.quotas.released["req-store-down"] != 1 {
		t.Errorf("releases %v, want the refused request's reservation released once", e.quotas.released)
	}
}

func TestFailuresAfterAcceptanceEndOnce(t *testing.T) {
	blockAfter := func(chunk string, failure func(ctx context.Context) error) streamFunc {
		return func(ctx context.Context, chain []router.Target, c router.Call, onDelta func(string)) (router.Outcome, error) {
			onDelta(chunk)
			return router.Outcome{Model: chain[0].ID}, failure(ctx)
		}
	}
	untilDone := func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }
	cases := []struct {
		name   string
		router streamFunc
		opts   gateway.Options
		cancel bool
		code   string
	}{
		{"model error mid-stream", blockAfter("par", func(context.Context) error {
			return &router.ModelError{Kind: router.KindMidStream, Model: "cheap", Streamed: true, Err: router.ErrMidStream}
		}), gateway.Options{}, false, protocol.CodeModelError},
		{"cancel", blockAfter("par", untilDone), gateway.Options{}, true, protocol.CodeCancelled},
		{"timeout", blockAfter("par", untilDone), gateway.Options{RequestTimeout: 50 * time.Millisecond}, false, protocol.CodeTimeout},
		{"panic", blockAfter("par", func(context.Context) error { panic("bug in the model adapter") }), gateway.Options{}, false, protocol.CodeInternal},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			e.records = stream.NewMemoryStore(nil)
			g := e.gateway(c.router, c.opts)
			log, _, _ := g.Submit(context.Background(), caller("chat"), request("req-fails", ""))
			if c.cancel {
				for s := log.Read(0); len(s.Chunks) == 0 && s.Terminal == nil; s = log.Read(0) {
					<-s.Changed
				}
				if err := g.Cancel(context.Background(), caller("chat"), "req-fails"); err != nil {
					t.Fatal(err)
				}
			}
			f := terminal(t, log)
			if f["code"] != c.code || f["text"] != "par" || f["chunks"] != 1.0 {
				t.Errorf("terminal %v, want %s with the streamed text", f, c.code)
			}
			recs := e.settle(g)
			if len(recs) != 1 || recs[0].Outcome != c.code || recs[0].OutputTokens == 0 || recs[0].CostUSD == 0 {
				t.Errorf("usage records %+v", recs)
			}
			rec, err := e.records.Get(context.Background(), caller("chat").Principal.Owner(), "req-fails")
			if err != nil || rec.State != stream.StateError || string(rec.Terminal) != string(log.Read(0).Terminal.Stored()) {
				t.Errorf("stored record %+v, %v: want the same terminal", rec, err)
			}
		})
	}
}

// TestLostLeaseAndInterruptEndOnce: the fleet judges server A gone (while
// it runs on, as after a long pause); B, asked to resume, interrupts the
// record; A then learns it lost the record.
// Between them: one terminal (the same on both), one usage record, one
// settlement.
func TestLostLeaseAndInterruptEndOnce(t *testing.T) {
	e := newEnv(t)
	e.records = stream.NewMemoryStore(nil)
	next := make(chan struct{})
	a := e.gateway(streamFunc(func(ctx context.Context, chain []router.Target, c router.Call, onDelta func(string)) (router.Outcome, error) {
		onDelta("saved")
		<-next
		onDelta(" lost") // its checkpoint finds the lease lost and cancels this call
		<-ctx.Done()
		return router.Outcome{Model: "cheap"}, ctx.Err()
	}), gateway.Options{ServerID: "a", CheckpointChunks: 1, CheckpointInterval: time.Hour})
	e.fleet.kill("a") // B judges A gone: A never learns it until its next write
	b := e.gateway(reply("cheap", "never"), gateway.Options{ServerID: "b", PollInterval: 5 * time.Millisecond})

	logA, _, _ := a.Submit(context.Background(), caller("chat"), request("req-lease", ""))
	deadline := time.Now().Add(waitBound)
	for rec, _ := e.records.Get(context.Background(), caller("chat").Principal.Owner(), "req-lease"); rec == nil || rec.Seq() == 0; rec, _ = e.records.Get(context.Background(), caller("chat").Principal.Owner(), "req-lease") {
		if time.Now().After(deadline) {
			t.Fatal("A never checkpointed")
		}
		<-time.After(time.Millisecond) // polling the store with a deadline
	}
	logB, err := b.Resume(context.Background(), caller("chat"), "req-lease")
	if err != nil {
		t.Fatal(err)
	}
	fb := terminal(t, logB)
	close(next)
	fa := terminal(t, logA)
	if fb["code"] != protocol.CodeInterrupted || fb["text"] != "saved" {
		t.Errorf("B's terminal %v", fb)
	}
	if string(logA.Read(0).Terminal.Stored()) != string(logB.Read(0).Terminal.Stored()) {
		t.Errorf("A delivered %v, B %v: one request, two terminals", fa, fb)
	}
	recs := e.settle(a, b)
	if len(recs) != 1 || recs[0].Server != "b" {
		t.Fatalf("usage records %+v, want only B's", recs)
	}
	if recs[0].Outcome != protocol.CodeInterrupted || recs[0].Model != "cheap" || recs[0].CostUSD == 0 ||
		recs[0].User != "user-1" || recs[0].Tenant != "t" || recs[0].App != "chat" || recs[0].Door != gateway.DoorWS {
		t.Errorf("usage record %+v", recs[0])
	}
}

func TestErrorTextIsCarriedNotCut(t *testing.T) {
	err := errors.Join(errors.New("store: down"), call.Errorf(call.ErrInvalid, "max_tokens 9 is over: 8"))
	if e := gateway.Failure(err); e.Code != protocol.CodeInvalidRequest || e.Message != "max_tokens 9 is over: 8" {
		t.Errorf("Failure = %+v", e)
	}
}

// gatedCreate is Records whose Create waits for release: a slow put.
type gatedCreate struct {
	gateway.Records
	started chan struct{} // closed when Create was called
	release chan struct{}
}

func (g gatedCreate) Create(ctx context.Context, r stream.Record) (*stream.Record, error) {
	close(g.started)
	<-g.release
	return g.Records.Create(ctx, r)
}

// TestRecordBesideTheModelCall: the model call starts while the record is
// being stored, and nothing (accepted, chunks) reaches the log before the
// put has succeeded.
func TestRecordBesideTheModelCall(t *testing.T) {
	e := newEnv(t)
	gate := gatedCreate{Records: stream.NewMemoryStore(nil), started: make(chan struct{}), release: make(chan struct{})}
	e.records = gate
	called, delivered := make(chan struct{}), make(chan struct{})
	g := e.gateway(streamFunc(func(ctx context.Context, chain []router.Target, c router.Call, onDelta func(string)) (router.Outcome, error) {
		close(called)
		onDelta("first") // waits for the record
		close(delivered)
		return reply("cheap", "second")(ctx, chain, c, onDelta)
	}), gateway.Options{})
	type submitted struct{ log *stream.Log }
	got := make(chan submitted, 1)
	go func() {
		log, _, err := g.Submit(context.Background(), caller("chat"), request("req-beside", ""))
		if err != nil {
			t.Error(err)
		}
		got <- submitted{log}
	}()
	<-gate.started
	select {
	case <-called: // the model was called before the put answered
	case <-time.After(waitBound):
		t.Fatal("the model call waited for the record's put")
	}
	select {
	case <-delivered:
		t.Fatal("a chunk was delivered before the record was stored")
	default:
	}
	close(gate.release)
	s := <-got
	if f := terminal(t, s.log); f["type"] != "done" || f["text"] != "firstsecond" {
		t.Fatalf("terminal %v", f)
	}
	if snap := s.log.Read(0); snap.Accepted == nil || len(snap.Chunks) != 2 {
		t.Fatalf("log %+v", snap)
	}
	e.settle(g)
}

// TestRecordOwnedElsewhereStopsTheLocalCall: the put finds the request
// stored by another server: the local call is stopped before it delivers
// anything, its reservation released, and the log follows the owner's
// record (the owner ends and charges it).
func TestRecordOwnedElsewhereStopsTheLocalCall(t *testing.T) {
	e := newEnv(t)
	store := stream.NewMemoryStore(nil)
	e.records = store
	other := e.gateway(reply("cheap", "owner's ", "answer"), gateway.Options{ServerID: "server-0"})
	first, _, err := other.Submit(context.Background(), caller("chat"), request("req-owned", ""))
	if err != nil {
		t.Fatal(err)
	}
	if f := terminal(t, first); f["text"] != "owner's answer" {
		t.Fatalf("owner's terminal %v", f)
	}
	stopped := make(chan error, 1)
	g := e.gateway(streamFunc(func(ctx context.Context, chain []router.Target, c router.Call, onDelta func(string)) (router.Outcome, error) {
		onDelta("local") // dropped: the request did not land here
		<-ctx.Done()
		stopped <- ctx.Err()
		return router.Outcome{}, ctx.Err()
	}), gateway.Options{ServerID: "server-1"})
	log, _, err := g.Submit(context.Background(), caller("chat"), request("req-owned", ""))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-stopped:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("local call ended with %v, want cancelled", err)
		}
	case <-time.After(waitBound):
		t.Fatal("the local model call was not stopped")
	}
	if f := terminal(t, log); f["text"] != "owner's answer" {
		t.Fatalf("follower's terminal %v", f)
	}
	if snap := log.Read(0); len(snap.Chunks) != 2 || snap.Chunks[0] != "owner's " {
		t.Fatalf("follower's chunks %q", snap.Chunks)
	}
	for _, gw := range []*gateway.Gateway{other, g} {
		ctx, cancel := context.WithTimeout(context.Background(), waitBound)
		err := gw.Wait(ctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	recs := e.usage.all()
	e.quotas.mu.Lock()
	defer e.quotas.mu.Unlock()
	if len(recs) != 1 || e.quotas.released["req-owned"] != 1 || len(e.quotas.settled["req-owned"]) != 1 {
		t.Fatalf("usage records %+v, releases %v: want the owner's one record and settlement, the follower's release",
			recs, e.quotas.released)
	}
}

// TestCancelOnAnotherServerEndsOnce: the client reconnected from A (which
// runs the model call) to B and cancels there. A sees the flag at its next
// checkpoint and stops its model call; both servers deliver the same one
// `cancelled` terminal with what was streamed; A alone records and settles.
func TestCancelOnAnotherServerEndsOnce(t *testing.T) {
	e := newEnv(t)
	e.records = stream.NewMemoryStore(nil)
	stopped := make(chan struct{})
	a := e.gateway(streamFunc(func(ctx context.Context, chain []router.Target, c router.Call, onDelta func(string)) (router.Outcome, error) {
		onDelta("par")
		<-ctx.Done() // only the cancel ends this call
		close(stopped)
		return router.Outcome{Model: "cheap"}, ctx.Err()
	}), gateway.Options{ServerID: "a", CheckpointInterval: 10 * time.Millisecond})
	b := e.gateway(reply("cheap", "never"), gateway.Options{ServerID: "b", PollInterval: 5 * time.Millisecond})

	logA, _, _ := a.Submit(context.Background(), caller("chat"), request("req-cancel-b", ""))
	logB, err := b.Resume(context.Background(), caller("chat"), "req-cancel-b")
	if err != nil {
		t.Fatal(err)
	}
	for s := logB.Read(0); len(s.Chunks) == 0; s = logB.Read(0) {
		<-s.Changed // B follows A's record: "par" arrived through a checkpoint
	}
	if err := b.Cancel(context.Background(), caller("chat"), "req-cancel-b"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-stopped:
	case <-time.After(waitBound):
		t.Fatal("A's model call never stopped")
	}
	fa, fb := terminal(t, logA), terminal(t, logB)
	if fb["code"] != protocol.CodeCancelled || fb["text"] != "par" || fb["chunks"] != 1.0 {
		t.Errorf("B's terminal %v, want cancelled with the streamed text", fb)
	}
	if string(logA.Read(0).Terminal.Stored()) != string(logB.Read(0).Terminal.Stored()) {
		t.Errorf("A delivered %v, B %v: one request, two terminals", fa, fb)
	}
	recs := e.settle(a, b)
	if len(recs) != 1 || recs[0].Server != "a" || recs[0].Outcome != protocol.CodeCancelled || recs[0].OutputTokens == 0 {
		t.Fatalf("usage records %+v, want A's one cancelled record charging the streamed text", recs)
	}
	// Cancelling again, anywhere, changes nothing; an unknown id is not_found.
	for _, g := range []*gateway.Gateway{a, b} {
		if err := g.Cancel(context.Background(), caller("chat"), "req-cancel-b"); err != nil {
			t.Errorf("second cancel: %v", err)
		}
	}
	if err := b.Cancel(context.Background(), caller("chat"), "req-never-sent"); gateway.Failure(err).Code != protocol.CodeNotFound {
		t.Errorf("cancel of an unknown id: %v, want not_found", err)
	}
}

// TestCancelOfADeadOwnerEndsCancelled: the owner stopped renewing its
// lease before it could see the cancel; the server that ends its record
// ends it as `cancelled`, not `interrupted`.
func TestCancelOfADeadOwnerEndsCancelled(t *testing.T) {
	e := newEnv(t)
	e.records = stream.NewMemoryStore(nil)
	next := make(chan struct{})
	a := e.gateway(streamFunc(func(ctx context.Context, chain []router.Target, c router.Call, onDelta func(string)) (router.Outcome, error) {
		onDelta("saved")
		<-next
		onDelta(" late")
		<-ctx.Done()
		return router.Outcome{Model: "cheap"}, ctx.Err()
	}), gateway.Options{ServerID: "a", CheckpointChunks: 1, CheckpointInterval: time.Hour})
	e.fleet.kill("a") // B judges A gone: A never learns it until its next write
	b := e.gateway(reply("cheap", "never"), gateway.Options{ServerID: "b", PollInterval: 5 * time.Millisecond})

	logA, _, _ := a.Submit(context.Background(), caller("chat"), request("req-cancel-dead", ""))
	deadline := time.Now().Add(waitBound)
	for rec, _ := e.records.Get(context.Background(), caller("chat").Principal.Owner(), "req-cancel-dead"); rec == nil || rec.Seq() == 0; rec, _ = e.records.Get(context.Background(), caller("chat").Principal.Owner(), "req-cancel-dead") {
		if time.Now().After(deadline) {
			t.Fatal("A never checkpointed")
		}
		<-time.After(time.Millisecond) // polling the store with a deadline
	}
	if err := b.Cancel(context.Background(), caller("chat"), "req-cancel-dead"); err != nil {
		t.Fatal(err)
	}
	logB, err := b.Resume(context.Background(), caller("chat"), "req-cancel-dead")
	if err != nil {
		t.Fatal(err)
	}
	fb := terminal(t, logB)
	close(next)
	terminal(t, logA)
	if fb["code"] != protocol.CodeCancelled || fb["text"] != "saved" {
		t.Errorf("B's terminal %v, want cancelled with the saved text", fb)
	}
	if string(logA.Read(0).Terminal.Stored()) != string(logB.Read(0).Terminal.Stored()) {
		t.Errorf("A and B delivered different terminals")
	}
	recs := e.settle(a, b)
	if len(recs) != 1 || recs[0].Server != "b" || recs[0].Outcome != protocol.CodeCancelled {
		t.Fatalf("usage records %+v, want B's one cancelled record", recs)
	}
}

// TestCancelElsewhereBeforeTheFirstToken: with nothing to checkpoint yet,
// the owner's bare lease renewals still learn of a cancel sent to another
// server, and the request ends `cancelled` with no text, charged its input.
func TestCancelElsewhereBeforeTheFirstToken(t *testing.T) {
	e := newEnv(t)
	e.records = stream.NewMemoryStore(nil)
	a := e.gateway(streamFunc(func(ctx context.Context, chain []router.Target, c router.Call, onDelta func(string)) (router.Outcome, error) {
		<-ctx.Done() // the model never answers; only the cancel ends this call
		return router.Outcome{Model: "cheap"}, ctx.Err()
	}), gateway.Options{ServerID: "a", CheckpointInterval: 10 * time.Millisecond})
	b := e.gateway(reply("cheap", "never"), gateway.Options{ServerID: "b", PollInterval: 5 * time.Millisecond})

	logA, _, _ := a.Submit(context.Background(), caller("chat"), request("req-cancel-early", ""))
	logB, err := b.Resume(context.Background(), caller("chat"), "req-cancel-early")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Cancel(context.Background(), caller("chat"), "req-cancel-early"); err != nil {
		t.Fatal(err)
	}
	fb := terminal(t, logB)
	if fb["code"] != protocol.CodeCancelled || fb["text"] != "" || fb["chunks"] != 0.0 {
		t.Errorf("B's terminal %v, want cancelled with no text", fb)
	}
	if string(terminalFrame(t, logA)) != string(logB.Read(0).Terminal.Stored()) {
		t.Errorf("A and B delivered different terminals")
	}
	recs := e.settle(a, b)
	if len(recs) != 1 || recs[0].Server != "a" || recs[0].Outcome != protocol.CodeCancelled || recs[0].OutputTokens != 0 || recs[0].InputTokens == 0 {
		t.Fatalf("usage records %+v, want A's one cancelled record charging the input estimate", recs)
	}
}

func terminalFrame(t *testing.T, log *stream.Log) []byte {
	t.Helper()
	terminal(t, log)
	return log.Read(0).Terminal.Stored()
}
