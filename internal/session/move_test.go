package session

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/jetway-gateway/jetway/internal/call"
	"github.com/jetway-gateway/jetway/internal/fleet"
	"github.com/jetway-gateway/jetway/internal/gateway"
	"github.com/jetway-gateway/jetway/internal/protocol"
	"github.com/jetway-gateway/jetway/internal/socket"
	"github.com/jetway-gateway/jetway/internal/stream"
	"github.com/jetway-gateway/jetway/internal/telemetry"
)

// logsByID answers each request id with its own log (accepted at once),
// and refuses the ids in busy with a busy at this server's capacity.
type logsByID struct {
	mu   sync.Mutex
	logs map[string]*stream.Log
	busy map[string]bool
}

func (g *logsByID) gateway() fakeGateway {
	return fakeGateway{submit: func(_ gateway.Caller, r gateway.Request) (*stream.Log, int, error) {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.busy[r.RequestID] {
			return nil, 0, fmt.Errorf("%w: server at its in-flight cap of 1", gateway.ErrAtCapacity)
		}
		l := stream.NewLog("u1", r.RequestID, "", time.Now())
		l.Accept(stream.NewAccepted(call.Accepted{RequestID: r.RequestID}))
		g.logs[r.RequestID] = l
		return l, 0, nil
	}}
}

func finish(l *stream.Log) {
	l.Append("hello")
	l.Finish(stream.DoneTerminal(call.Done{RequestID: l.RequestID, Chunks: 1, Text: "hello"}), time.Now())
}

// waitStaying polls until the hub counts n sessions staying.
func waitStaying(t *testing.T, h *testHub, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for h.Staying() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d sessions staying, want %d", h.Staying(), n)
		}
		time.Sleep(5 * time.Millisecond) // poll
	}
}

// laterClock is the real clock plus an offset a test moves on: time
// still runs (the order of events holds) and a test can skip ahead past
// the move bounds.
type laterClock struct{ offset atomic.Int64 }

func (c *laterClock) Now() time.Time                          { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *laterClock) skip(d time.Duration)                    { c.offset.Add(int64(d)) }
func (c *laterClock) options(o socket.Options) socket.Options { o.Now = c.Now; return o }

// MoveIdle moves idle sessions only, those idle longest first, each with a
// draining frame and then a close with 1001, as at shutdown.
func TestMoveIdleMovesIdleLongestFirst(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	g := &logsByID{logs: map[string]*stream.Log{}}
	clock := &laterClock{}
	h, url := serve(t, g.gateway(), zap.New(core), clock.options(socket.Options{}))
	oldest := dial(t, url)
	busy := dial(t, url)
	newest := dial(t, url)
	if err := busy.WriteJSON(request("move-busy-1")); err != nil {
		t.Fatal(err)
	}
	if f := read(t, busy); f["type"] != protocol.TypeAccepted {
		t.Fatalf("got %v, want accepted", f)
	}
	at := fleet.Spread{Sessions: 3, Mean: 1, Members: 3}
	if n := h.MoveIdle(3, telemetry.MoveBalance, at); n != 0 {
		t.Fatalf("MoveIdle moved %d sessions younger than the move bound", n)
	}
	clock.skip(socket.DefaultMoveMinAge)

	if n := h.MoveIdle(1, telemetry.MoveBalance, at); n != 1 {
		t.Fatalf("MoveIdle(1) moved %d", n)
	}
	if f := read(t, oldest); f["type"] != protocol.TypeDraining {
		t.Fatalf("the session idle longest got %v, want draining", f)
	}
	if code := closeCode(t, oldest); code != socket.DisconnectShutdown.Code {
		t.Fatalf("moved idle session closed with %d, want 1001", code)
	}
	// One idle session is left; the one delivering a request is not moved.
	if n := h.MoveIdle(5, telemetry.MoveBalance, at); n != 1 {
		t.Fatalf("MoveIdle(5) moved %d, want the 1 idle session left", n)
	}
	if f := read(t, newest); f["type"] != protocol.TypeDraining {
		t.Fatalf("got %v, want draining", f)
	}
	if code := closeCode(t, newest); code != socket.DisconnectShutdown.Code {
		t.Fatalf("closed with %d, want 1001", code)
	}
	waitStaying(t, h, 1)
	if n := h.MoveIdle(5, telemetry.MoveBalance, at); n != 0 {
		t.Fatalf("moved %d sessions with a request in flight", n)
	}
	// Its request still finishes there, and the session stays.
	finish(g.logs["move-busy-1"])
	if f := read(t, busy); f["type"] != protocol.TypeChunk {
		t.Fatalf("got %v, want the chunk", f)
	}
	if f := read(t, busy); f["type"] != protocol.TypeDone {
		t.Fatalf("got %v, want done", f)
	}
	moved := logs.FilterMessage("session_moved").All()
	if len(moved) != 2 {
		t.Fatalf("%d session_moved lines, want 2", len(moved))
	}
	f := moved[0].ContextMap()
	if f["reason"] != telemetry.MoveBalance || f["sessions"] != int64(3) || f["fleet_mean"] != 1.0 || f["session_id"] == "" {
		t.Fatalf("session_moved line %v", f)
	}
}

// A request refused busy at this server's capacity while another server
// has room moves its session: the draining frame, then busy with a short
// retry_after_ms; the request it was delivering still finishes there, then
// the session is closed with 1001. Without room, busy is as before.
func TestBusyWithRoomElsewhereMovesTheSession(t *testing.T) {
	g := &logsByID{logs: map[string]*stream.Log{}, busy: map[string]bool{"busy-req-2": true, "busy-req-3": true}}
	var mu sync.Mutex
	room := false
	h, url := serve(t, g.gateway(), nil, socket.Options{RoomElsewhere: func() (fleet.Spread, bool) {
		mu.Lock()
		defer mu.Unlock()
		return fleet.Spread{Sessions: 1, Mean: 0.5, Members: 2}, room
	}})
	ws := dial(t, url)
	if err := ws.WriteJSON(request("busy-req-1")); err != nil {
		t.Fatal(err)
	}
	if f := read(t, ws); f["type"] != protocol.TypeAccepted {
		t.Fatalf("got %v, want accepted", f)
	}
	// No room elsewhere: the usual busy, the session stays.
	if err := ws.WriteJSON(request("busy-req-2")); err != nil {
		t.Fatal(err)
	}
	if f := read(t, ws); f["code"] != protocol.CodeBusy || f["retry_after_ms"] != float64(gateway.RetryAfterBusyMs) {
		t.Fatalf("got %v, want busy with retry_after_ms %d", f, gateway.RetryAfterBusyMs)
	}
	mu.Lock()
	room = true
	mu.Unlock()
	if err := ws.WriteJSON(request("busy-req-3")); err != nil {
		t.Fatal(err)
	}
	if f := read(t, ws); f["type"] != protocol.TypeDraining {
		t.Fatalf("got %v, want draining before the busy", f)
	}
	if f := read(t, ws); f["code"] != protocol.CodeBusy || f["retryable"] != true || f["retry_after_ms"] != float64(gateway.RetryAfterMovedMs) {
		t.Fatalf("got %v, want busy, retryable, retry_after_ms %d", f, gateway.RetryAfterMovedMs)
	}
	waitStaying(t, h, 0)
	finish(g.logs["busy-req-1"])
	if f := read(t, ws); f["type"] != protocol.TypeChunk {
		t.Fatalf("got %v, want the chunk of the request in flight", f)
	}
	if f := read(t, ws); f["type"] != protocol.TypeDone {
		t.Fatalf("got %v, want done", f)
	}
	if code := closeCode(t, ws); code != socket.DisconnectShutdown.Code {
		t.Fatalf("closed with %d, want 1001 once its request ended", code)
	}
}

// A frame the server has begun to read when the balancer decides keeps
// its session: the move passes it by, and the frame is answered there.
func TestMoveSparesASessionWhoseFrameIsBeingHandled(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	g := fakeGateway{submit: func(_ gateway.Caller, r gateway.Request) (*stream.Log, int, error) {
		once.Do(func() { close(entered) })
		<-release // the frame is read, not yet followed
		l := stream.NewLog("u1", r.RequestID, "", time.Now())
		l.Accept(stream.NewAccepted(call.Accepted{RequestID: r.RequestID}))
		finish(l)
		return l, 0, nil
	}}
	clock := &laterClock{}
	h, url := serve(t, g, nil, clock.options(socket.Options{}))
	ws := dial(t, url)
	clock.skip(socket.DefaultMoveMinAge + socket.DefaultMoveQuiet)
	if err := ws.WriteJSON(request("race-before-1")); err != nil {
		t.Fatal(err)
	}
	<-entered
	clock.skip(socket.DefaultMoveQuiet) // even once quiet by the clock, the frame in hand keeps it
	if n := h.MoveIdle(1, telemetry.MoveBalance, fleet.Spread{Sessions: 1, Members: 2}); n != 0 {
		t.Fatalf("moved %d sessions with a frame being handled", n)
	}
	close(release)
	for _, want := range []string{protocol.TypeAccepted, protocol.TypeChunk, protocol.TypeDone} {
		if f := read(t, ws); f["type"] != want {
			t.Fatalf("got %v, want %s", f, want)
		}
	}
}

// Frames the client sent before it read `draining` (it sent them as the
// move was decided) are answered before the move's close: the resume is
// served, the new request refused `draining`; then 1001.
func TestFramesRacingAMoveAreAnswered(t *testing.T) {
	done := stream.NewLog("u1", "race-resume-1", "", time.Now())
	done.Accept(stream.NewAccepted(call.Accepted{RequestID: "race-resume-1"}))
	finish(done)
	g := fakeGateway{resume: func(_ gateway.Caller, id string) (*stream.Log, error) {
		if id == done.RequestID {
			return done, nil
		}
		return nil, errNoSuchRequest
	}}
	for range 5 {
		clock := &laterClock{}
		h, url := serve(t, g, nil, clock.options(socket.Options{}))
		ws := dial(t, url)
		clock.skip(socket.DefaultMoveMinAge + socket.DefaultMoveQuiet)
		if n := h.MoveIdle(1, telemetry.MoveBalance, fleet.Spread{Sessions: 1, Members: 2}); n != 1 {
			t.Fatalf("moved %d, want the idle session", n)
		}
		// Written without reading first: the client has not seen draining.
		if err := ws.WriteJSON(map[string]any{"type": "resume", "request_id": "race-resume-1", "after_seq": 0}); err != nil {
			t.Fatal(err)
		}
		if err := ws.WriteJSON(request("race-new-1")); err != nil {
			t.Fatal(err)
		}
		got := map[string]bool{}
		for !got["done"] || !got["draining-error"] {
			f := read(t, ws)
			switch {
			case f["type"] == protocol.TypeDraining:
				got["draining"] = true
			case f["type"] == protocol.TypeDone && f["request_id"] == "race-resume-1":
				got["done"] = true
			case f["type"] == protocol.TypeError && f["request_id"] == "race-new-1":
				if f["code"] != protocol.CodeDraining {
					t.Fatalf("the new request got %v, want error draining", f)
				}
				got["draining-error"] = true
			}
		}
		if !got["draining"] {
			t.Fatal("no draining frame")
		}
		if code := closeCode(t, ws); code != socket.DisconnectShutdown.Code {
			t.Fatalf("closed with %d, want 1001", code)
		}
	}
}
