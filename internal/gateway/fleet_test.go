package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetway-gateway/jetway/internal/gateway"
	"github.com/jetway-gateway/jetway/internal/protocol"
	"github.com/jetway-gateway/jetway/internal/router"
	"github.com/jetway-gateway/jetway/internal/stream"
	"github.com/jetway-gateway/jetway/internal/telemetry"
)

// flakyRecords is Records whose owner writes (Checkpoint, Finish) fail
// while failing is set: a store that is slow or throttled for a while.
type flakyRecords struct {
	gateway.Records
	failing  atomic.Bool
	failures atomic.Int64
}

func (r *flakyRecords) Checkpoint(ctx context.Context, owner, id, server string, prev int, chunks []string) error {
	if r.failing.Load() {
		r.failures.Add(1)
		return stream.ErrUnavailable
	}
	return r.Records.Checkpoint(ctx, owner, id, server, prev, chunks)
}

func (r *flakyRecords) Finish(ctx context.Context, owner, id, server string, prev int, chunks []string, state string, terminal []byte, expires time.Time) error {
	if r.failing.Load() {
		r.failures.Add(1)
		return stream.ErrUnavailable
	}
	return r.Records.Finish(ctx, owner, id, server, prev, chunks, state, terminal, expires)
}

// TestSlowStoreNeverEndsALiveAnswer: the owner's checkpoints and its
// terminal's write fail for a while; its owner is alive, so B, following
// the record, never interrupts it: B delivers the owner's own `done` once
// the store answers again, with every chunk.
func TestSlowStoreNeverEndsALiveAnswer(t *testing.T) {
	e := newEnv(t)
	flaky := &flakyRecords{Records: stream.NewMemoryStore(nil)}
	e.records = flaky
	next := make(chan struct{})
	a := e.gateway(streamFunc(func(ctx context.Context, chain []router.Target, c router.Call, onDelta func(string)) (router.Outcome, error) {
		onDelta("one")
		<-next
		onDelta(" two")
		onDelta(" three")
		return router.Outcome{Model: "cheap", Result: router.Result{UsageReported: true}}, nil
	}), gateway.Options{ServerID: "a", CheckpointChunks: 1, CheckpointInterval: 5 * time.Millisecond})
	b := e.gateway(reply("cheap", "never"), gateway.Options{ServerID: "b", PollInterval: 5 * time.Millisecond})

	logA, _, err := a.Submit(context.Background(), caller("chat"), request("req-slow-store", ""))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the first checkpoint", func() bool {
		rec, err := e.records.Get(context.Background(), caller("chat").Principal.Owner(), "req-slow-store")
		return err == nil && rec.Seq() == 1
	})
	flaky.failing.Store(true)
	logB, err := b.Resume(context.Background(), caller("chat"), "req-slow-store")
	if err != nil {
		t.Fatal(err)
	}
	close(next)
	fa := terminal(t, logA)
	waitFor(t, "failed writes", func() bool { return flaky.failures.Load() >= 3 })
	if logB.Read(0).Terminal != nil {
		t.Fatalf("B ended the request while its owner was alive: %s", logB.Read(0).Terminal.Stored())
	}
	flaky.failing.Store(false) // the store answers again: the record catches up
	fb := terminal(t, logB)
	if fa["type"] != "done" || fb["type"] != "done" || fb["text"] != "one two three" || fb["chunks"] != float64(3) {
		t.Fatalf("A's terminal %v, B's %v: want the same done with all three chunks", fa, fb)
	}
	if recs := e.settle(a, b); len(recs) != 1 || recs[0].Server != "a" || recs[0].Outcome != "done" {
		t.Fatalf("usage records %+v, want A's done only", recs)
	}
}

// TestSweepEndsAGoneServersRequests: a server dies with a request running
// and no client comes back for it; once the fleet judges it gone, a
// survivor's Sweep ends it as interrupted with the saved text, writes its
// usage record and settles it (refunding the rest of its reservation).
func TestSweepEndsAGoneServersRequests(t *testing.T) {
	e := newEnv(t)
	e.records = stream.NewMemoryStore(nil)
	stuck := make(chan struct{})
	a := e.gateway(streamFunc(func(ctx context.Context, chain []router.Target, c router.Call, onDelta func(string)) (router.Outcome, error) {
		onDelta("saved")
		select {
		case <-stuck: // A "dies": it never writes again
		case <-ctx.Done():
		}
		return router.Outcome{Model: "cheap"}, errors.New("the server died")
	}), gateway.Options{ServerID: "a", CheckpointChunks: 1, CheckpointInterval: time.Hour})
	b := e.gateway(reply("cheap", "never"), gateway.Options{ServerID: "b", PollInterval: 5 * time.Millisecond})
	if _, _, err := a.Submit(context.Background(), caller("chat"), request("req-orphan", "")); err != nil {
		t.Fatal(err)
	}
	owner := caller("chat").Principal.Owner()
	waitFor(t, "the checkpoint", func() bool {
		rec, err := e.records.Get(context.Background(), owner, "req-orphan")
		return err == nil && rec.Seq() == 1
	})
	e.fleet.kill("a")
	b.Sweep("a")
	waitFor(t, "the record's end", func() bool {
		rec, err := e.records.Get(context.Background(), owner, "req-orphan")
		return err == nil && rec.Ended()
	})
	rec, _ := e.records.Get(context.Background(), owner, "req-orphan")
	if f := decode(t, rec.Terminal); f["code"] != protocol.CodeInterrupted || f["text"] != "saved" {
		t.Fatalf("terminal %v, want interrupted with the saved text", f)
	}
	close(stuck) // A's call ends; its Finish finds the record ended elsewhere
	recs := e.settle(a, b)
	if len(recs) != 1 || recs[0].Server != "b" || recs[0].Outcome != protocol.CodeInterrupted {
		t.Fatalf("usage records %+v, want B's interrupted one only", recs)
	}
}

// TestUnhealthyMembershipAdmitsNothing: a server that cannot renew its
// membership answers new requests busy (retryable), before any charge.
func TestUnhealthyMembershipAdmitsNothing(t *testing.T) {
	e := newEnv(t)
	e.records = stream.NewMemoryStore(nil)
	e.fleet.unhealthy = true
	g := e.gateway(reply("cheap", "never"), gateway.Options{})
	log, _, err := g.Submit(context.Background(), caller("chat"), request("req-cut-off", ""))
	if err == nil {
		f := terminal(t, log)
		if f["code"] != protocol.CodeBusy || f["retryable"] != true {
			t.Fatalf("terminal %v, want busy", f)
		}
	} else if pe := gateway.Failure(err); pe.Code != protocol.CodeBusy || !pe.Retryable {
		t.Fatalf("Submit = %v, want busy", err)
	}
	if recs := e.settle(g); len(recs) > 1 || (len(recs) == 1 && recs[0].CostUSD != 0) {
		t.Fatalf("usage records %+v: nothing may be charged", recs)
	}
}

func decode(t *testing.T, frame []byte) map[string]any {
	t.Helper()
	var f map[string]any
	if err := json.Unmarshal(frame, &f); err != nil {
		t.Fatalf("frame %s: %v", frame, err)
	}
	return f
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitBound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s", waitBound, what)
		}
		<-time.After(2 * time.Millisecond) // polling with a deadline
	}
}

// lateRecords applies the first checkpoint but reports it failed, as a
// write whose answer was lost in a stalled store and that landed late.
type lateRecords struct {
	gateway.Records
	lied atomic.Bool
}

func (r *lateRecords) Checkpoint(ctx context.Context, owner, id, server string, prev int, chunks []string) error {
	err := r.Records.Checkpoint(ctx, owner, id, server, prev, chunks)
	if err == nil && len(chunks) > 0 && r.lied.CompareAndSwap(false, true) {
		return stream.ErrUnavailable
	}
	return err
}

// TestALateCheckpointIsCaughtUp: the owner's next write conflicts with a
// checkpoint that landed after the owner gave up on it; the owner reads
// the record and continues from it, so the record ends with every chunk.
func TestALateCheckpointIsCaughtUp(t *testing.T) {
	e := newEnv(t)
	late := &lateRecords{Records: stream.NewMemoryStore(nil)}
	e.records = late
	next := make(chan struct{})
	a := e.gateway(streamFunc(func(ctx context.Context, chain []router.Target, c router.Call, onDelta func(string)) (router.Outcome, error) {
		onDelta("one")
		<-next
		onDelta(" two")
		onDelta(" three")
		return router.Outcome{Model: "cheap", Result: router.Result{UsageReported: true}}, nil
	}), gateway.Options{ServerID: "a", CheckpointChunks: 1, CheckpointInterval: 5 * time.Millisecond})
	log, _, err := a.Submit(context.Background(), caller("chat"), request("req-late", ""))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the late checkpoint", late.lied.Load)
	close(next)
	terminal(t, log)
	e.settle(a)
	rec, err := e.records.Get(context.Background(), caller("chat").Principal.Owner(), "req-late")
	if err != nil || rec.State != stream.StateDone || rec.Seq() != 3 {
		t.Fatalf("record %+v (%v), want done with 3 chunks", rec, err)
	}
}

// latePut is Records whose Create, while giving up is set, answers
// "unavailable" at once and keeps the record: land stores it, as a
// starved store applies a put after its caller gave up on it.
type latePut struct {
	gateway.Records
	givingUp atomic.Bool
	pending  chan stream.Record
}

func (r *latePut) Create(ctx context.Context, rec stream.Record) (*stream.Record, error) {
	if r.givingUp.Load() {
		r.pending <- rec
		return nil, stream.ErrUnavailable
	}
	return r.Records.Create(ctx, rec)
}

func (r *latePut) land(t *testing.T) {
	t.Helper()
	if _, err := r.Records.Create(context.Background(), <-r.pending); err != nil {
		t.Fatalf("the late put: %v", err)
	}
}

// TestALatePutIsWithdrawn: A's put does not answer in time, so A refuses
// the request busy; the put lands afterwards. The client's next attempt
// goes to B, which finds A's record and follows it. A, alive, withdraws
// its record untouched; B refuses only that attempt, retryably (no
// chunks), and the attempt after runs the request, once. Nobody waits on a
// record nobody runs.
func TestALatePutIsWithdrawn(t *testing.T) {
	e := newEnv(t)
	late := &latePut{Records: stream.NewMemoryStore(nil), pending: make(chan stream.Record, 1)}
	e.records = late
	a := e.gateway(reply("cheap", "never runs"), gateway.Options{ServerID: "a"})
	b := e.gateway(reply("cheap", "on", " b"), gateway.Options{ServerID: "b", PollInterval: 5 * time.Millisecond})
	late.givingUp.Store(true)
	logA, _, err := a.Submit(context.Background(), caller("chat"), request("req-late-put", ""))
	if err != nil {
		t.Fatal(err)
	}
	if f := terminal(t, logA); f["code"] != protocol.CodeBusy || f["chunks"] != nil {
		t.Fatalf("A's answer %v, want busy before acceptance", f)
	}
	late.givingUp.Store(false)
	late.land(t)
	logB, _, err := b.Submit(context.Background(), caller("chat"), request("req-late-put", ""))
	if err != nil {
		t.Fatal(err)
	}
	f := terminal(t, logB)
	if f["code"] != protocol.CodeBusy || f["retryable"] != true || f["chunks"] != nil {
		t.Fatalf("B's answer to the attempt %v, want a retryable busy refusing only the attempt", f)
	}
	logB, _, err = b.Submit(context.Background(), caller("chat"), request("req-late-put", ""))
	if err != nil {
		t.Fatal(err)
	}
	if f := terminal(t, logB); f["type"] != "done" || f["text"] != "on b" {
		t.Fatalf("the next attempt: %v, want B's done", f)
	}
	// Three attempts of one request: A's refusal (released), B's refused
	// attempt (it only followed: no record, released), B's done (settled).
	recs := e.settleAttempts(a, b)
	if len(recs) != 2 || recs[0].Outcome != protocol.CodeBusy || recs[0].Server != "a" || recs[1].Outcome != "done" || recs[1].Server != "b" {
		t.Fatalf("usage records %+v, want A's busy then B's done", recs)
	}
	e.quotas.mu.Lock()
	defer e.quotas.mu.Unlock()
	if s, rel := e.quotas.settled["req-late-put"], e.quotas.released["req-late-put"]; len(s) != 1 || rel != 2 {
		t.Fatalf("%d settlements and %d releases, want B's done settled and the two refused attempts released", len(s), rel)
	}
}

// TestALatePutRunsOnItsOwnServer: the client's next attempt comes back to
// A, whose late put has landed: A runs its own record, and the watch for
// the late put never withdraws it.
func TestALatePutRunsOnItsOwnServer(t *testing.T) {
	e := newEnv(t)
	late := &latePut{Records: stream.NewMemoryStore(nil), pending: make(chan stream.Record, 1)}
	e.records = late
	a := e.gateway(reply("cheap", "on", " a"), gateway.Options{ServerID: "a"})
	late.givingUp.Store(true)
	logA, _, err := a.Submit(context.Background(), caller("chat"), request("req-late-own", ""))
	if err != nil {
		t.Fatal(err)
	}
	if f := terminal(t, logA); f["code"] != protocol.CodeBusy {
		t.Fatalf("A's answer %v, want busy", f)
	}
	late.givingUp.Store(false)
	late.land(t)
	logA, _, err = a.Submit(context.Background(), caller("chat"), request("req-late-own", ""))
	if err != nil {
		t.Fatal(err)
	}
	if f := terminal(t, logA); f["type"] != "done" || f["text"] != "on a" {
		t.Fatalf("the next attempt: %v, want A's done", f)
	}
	if recs := e.settleAttempts(a); len(recs) != 2 || recs[0].Outcome != protocol.CodeBusy || recs[1].Outcome != "done" {
		t.Fatalf("usage records %+v, want the busy then the done", recs)
	}
	rec, err := e.records.Get(context.Background(), caller("chat").Principal.Owner(), "req-late-own")
	if err != nil || rec.State != stream.StateDone {
		t.Fatalf("record %+v, %v: want A's done", rec, err)
	}
}

// settleAttempts waits for the gateways' requests and returns the usage
// records (a request's several attempts each have theirs).
func (e *env) settleAttempts(gs ...*gateway.Gateway) []telemetry.UsageRecord {
	e.t.Helper()
	for _, g := range gs {
		ctx, cancel := context.WithTimeout(context.Background(), waitBound)
		err := g.Wait(ctx)
		cancel()
		if err != nil {
			e.t.Fatal(err)
		}
	}
	return e.usage.all()
}
