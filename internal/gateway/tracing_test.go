package gateway_test

import (
	"context"
	"errors"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/jetway-gateway/jetway/internal/gateway"
	"github.com/jetway-gateway/jetway/internal/protocol"
	"github.com/jetway-gateway/jetway/internal/router"
	"github.com/jetway-gateway/jetway/internal/stream"
	"github.com/jetway-gateway/jetway/internal/tracing"
)

// traced gives e's gateways a tracer that samples everything and records
// every ended span.
func traced(e *env) *tracetest.SpanRecorder {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	e.t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	e.tracer = tp.Tracer("test")
	return rec
}

// ended returns the ended span named name, waiting for it.
func ended(t *testing.T, rec *tracetest.SpanRecorder, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	var found sdktrace.ReadOnlySpan
	waitFor(t, "span "+name, func() bool {
		for _, s := range rec.Ended() {
			if s.Name() == name {
				found = s
				return true
			}
		}
		return false
	})
	return found
}

// TestCancelAndTakeoverJoinTheTrace: a cancel sent through the record from
// another server, and the takeover of a gone server's request, are spans
// of the request's own trace (children of its root, found through the
// record's traceparent), and the takeover's usage record names that trace.
func TestCancelAndTakeoverJoinTheTrace(t *testing.T) {
	t.Run("cancel", func(t *testing.T) {
		e := newEnv(t)
		e.records = stream.NewMemoryStore(nil)
		rec := traced(e)
		a := e.gateway(streamFunc(func(ctx context.Context, chain []router.Target, c router.Call, onDelta func(string)) (router.Outcome, error) {
			onDelta("par")
			<-ctx.Done()
			return router.Outcome{Model: "cheap"}, ctx.Err()
		}), gateway.Options{ServerID: "a", CheckpointInterval: 10 * time.Millisecond})
		b := e.gateway(reply("cheap", "never"), gateway.Options{ServerID: "b", PollInterval: 5 * time.Millisecond})
		logA, _, _ := a.Submit(context.Background(), caller("chat"), request("req-trace-cancel", ""))
		for s := logA.Read(0); len(s.Chunks) == 0; s = logA.Read(0) {
			<-s.Changed
		}
		if err := b.Cancel(context.Background(), caller("chat"), "req-trace-cancel"); err != nil {
			t.Fatal(err)
		}
		if f := terminal(t, logA); f["code"] != protocol.CodeCancelled {
			t.Fatalf("terminal %v", f)
		}
		root, cancel := ended(t, rec, "jetway.request"), ended(t, rec, "jetway.cancel")
		if cancel.Parent().SpanID() != root.SpanContext().SpanID() || cancel.SpanContext().TraceID() != root.SpanContext().TraceID() {
			t.Fatalf("the cancel's parent %v, want the request's root %v", cancel.Parent(), root.SpanContext())
		}
		if !hasEvent(root, "cancelled_elsewhere") {
			t.Fatalf("the root lacks the cancelled_elsewhere event")
		}
		e.settle(a, b)
	})
	t.Run("takeover", func(t *testing.T) {
		e := newEnv(t)
		e.records = stream.NewMemoryStore(nil)
		rec := traced(e)
		stuck := make(chan struct{})
		a := e.gateway(streamFunc(func(ctx context.Context, chain []router.Target, c router.Call, onDelta func(string)) (router.Outcome, error) {
			onDelta("saved")
			select {
			case <-stuck:
			case <-ctx.Done():
			}
			return router.Outcome{Model: "cheap"}, errors.New("the server died")
		}), gateway.Options{ServerID: "a", CheckpointChunks: 1, CheckpointInterval: time.Hour})
		b := e.gateway(reply("cheap", "never"), gateway.Options{ServerID: "b", PollInterval: 5 * time.Millisecond})
		const parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
		req := request("req-trace-orphan", "")
		req.Trace = tracing.Parse(parent)
		if _, _, err := a.Submit(context.Background(), caller("chat"), req); err != nil {
			t.Fatal(err)
		}
		owner := caller("chat").Principal.Owner()
		waitFor(t, "the checkpoint", func() bool {
			r, err := e.records.Get(context.Background(), owner, "req-trace-orphan")
			return err == nil && r.Seq() == 1
		})
		e.fleet.kill("a")
		b.Sweep("a")
		takeover, follow := ended(t, rec, "jetway.takeover"), ended(t, rec, "jetway.follow")
		close(stuck)
		recs := e.settle(a, b)
		root := ended(t, rec, "jetway.request")
		if root.Parent().SpanID().String() != "b7ad6b7169203331" || root.SpanContext().TraceID().String() != "0af7651916cd43dd8448eb211c80319c" {
			t.Fatalf("root %v under %v, want the client's trace", root.SpanContext(), root.Parent())
		}
		if follow.Parent().SpanID() != root.SpanContext().SpanID() || takeover.Parent().SpanID() != follow.SpanContext().SpanID() {
			t.Fatalf("follow under %v, takeover under %v; want root %v then follow", follow.Parent(), takeover.Parent(), root.SpanContext())
		}
		if len(recs) != 1 || recs[0].Server != "b" || recs[0].TraceID != "0af7651916cd43dd8448eb211c80319c" {
			t.Fatalf("usage records %+v, want B's with the request's trace id", recs)
		}
	})
}

func hasEvent(s sdktrace.ReadOnlySpan, name string) bool {
	for _, e := range s.Events() {
		if e.Name == name {
			return true
		}
	}
	return false
}
