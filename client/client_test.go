package client

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/jetway-gateway/jetway/internal/protocol"
)

// server is a small WebSocket server that speaks the protocol: each
// connection gets ready, then runs the next script (the last one repeats).
type server struct {
	t       *testing.T
	url     string
	mu      sync.Mutex
	scripts []func(*peer)
	conns   int
	open    []*websocket.Conn
	closing atomic.Bool // the test is over: writes may fail
}

// peer is the server's side of one connection.
type peer struct {
	t  *testing.T
	s  *server
	ws *websocket.Conn
}

func newServer(t *testing.T, scripts ...func(*peer)) *server {
	t.Helper()
	s := &server{t: t, scripts: scripts}
	up := websocket.Upgrader{Subprotocols: []string{protocol.Subprotocol}}
	var wg sync.WaitGroup
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		s.mu.Lock()
		script := s.scripts[min(s.conns, len(s.scripts)-1)]
		s.conns++
		s.open = append(s.open, ws)
		s.mu.Unlock()
		wg.Add(1)
		defer wg.Done()
		defer ws.Close()
		p := &peer{t: t, s: s, ws: ws}
		p.send(protocol.Ready{Type: protocol.TypeReady, SessionID: r.URL.Query().Get("session_id"),
			Protocol: protocol.Subprotocol, HeartbeatS: 25, ExpiresAt: protocol.Timestamp(time.Now().Add(time.Hour))})
		script(p)
	}))
	t.Cleanup(func() {
		// End the scripts still waiting on a connection the client kept.
		s.closing.Store(true)
		s.mu.Lock()
		for _, ws := range s.open {
			_ = ws.NetConn().Close()
		}
		s.mu.Unlock()
		ts.Close()
		wg.Wait()
	})
	s.url = "ws" + strings.TrimPrefix(ts.URL, "http") + "/v1/ws"
	return s
}

func (p *peer) send(frame any) {
	if err := p.ws.WriteMessage(websocket.TextMessage, protocol.Encode(frame)); err != nil && !p.s.closing.Load() {
		p.t.Errorf("server write: %v", err)
	}
}

func (p *peer) chunk(id string, seq int, text string) {
	p.send(protocol.Chunk{Type: protocol.TypeChunk, RequestID: id, Seq: seq, Text: text})
}

// read returns the client's next frame (zero Inbound when the socket ended).
func (p *peer) read() protocol.Inbound {
	_ = p.ws.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, data, err := p.ws.ReadMessage()
	if err != nil {
		return protocol.Inbound{}
	}
	in, err := protocol.Decode(data)
	if err != nil {
		p.t.Errorf("client sent an invalid frame %s: %v", data, err)
	}
	return in
}

// drop ends the connection without a close frame, as a network fault would.
func (p *peer) drop() { _ = p.ws.NetConn().Close() }

// waitClose reads until the client goes away.
func (p *peer) waitClose() {
	for p.read().Type != "" {
	}
}

func accepted(id string) protocol.Accepted {
	return protocol.Accepted{Type: protocol.TypeAccepted, RequestID: id, Model: "m"}
}

func done(id string, chunks int, text string) protocol.Done {
	return protocol.Done{Type: protocol.TypeDone, RequestID: id, Chunks: chunks, Text: text, Model: "m"}
}

func dial(t *testing.T, s *server, mod func(*Options)) *Client {
	t.Helper()
	o := Options{URLs: []string{s.url}, Token: func(context.Context) (string, error) { return "tok", nil },
		MinBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond}
	if mod != nil {
		mod(&o)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, o)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func wait(t *testing.T, call *Call) (*Done, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := call.Wait(ctx)
	if ctx.Err() != nil {
		t.Fatalf("call %s did not finish", call.ID)
	}
	return d, err
}

// sendCollecting sends a request whose OnChunk records each seq delivered.
func sendCollecting(t *testing.T, c *Client, id string) (*Call, func() []int) {
	t.Helper()
	var mu sync.Mutex
	var got []int
	r := ask(id)
	r.OnChunk = func(seq int, _ string) { mu.Lock(); got = append(got, seq); mu.Unlock() }
	call, err := c.Send(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	return call, func() []int { mu.Lock(); defer mu.Unlock(); return slices.Clone(got) }
}

func ask(id string) Request {
	return Request{RequestID: id, Messages: []Message{{Role: "user", Content: "hi"}}}
}

// After a drop the client resumes from the last contiguous seq; chunks that
// arrived beyond a gap, and replays, are delivered once, in order.
func TestReconnectResumesFromLastContiguousSeq(t *testing.T) {
	const id = "resume-req-1"
	resumedAfter := make(chan int, 1)
	s := newServer(t,
		func(p *peer) {
			if in := p.read(); in.Type != protocol.TypeRequest || in.RequestID != id {
				t.Errorf("first frame %+v, want the request", in)
			}
			p.send(accepted(id))
			p.chunk(id, 1, "a")
			p.chunk(id, 2, "b")
			p.chunk(id, 4, "d") // 3 is lost
			p.drop()
		},
		func(p *peer) {
			in := p.read()
			if in.Type != protocol.TypeResume || in.RequestID != id {
				t.Errorf("after the reconnect %+v, want resume", in)
			}
			resumedAfter <- in.AfterSeq
			p.chunk(id, 3, "c")
			p.chunk(id, 4, "d") // a replay of what arrived beyond the gap
			p.chunk(id, 5, "e")
			p.send(done(id, 5, "abcde"))
			p.waitClose()
		})
	c := dial(t, s, func(o *Options) { o.Reconnect = true })
	call, seqs := sendCollecting(t, c, id)
	d, err := wait(t, call)
	if err != nil || d.Text != "abcde" {
		t.Fatalf("result %+v, %v", d, err)
	}
	if after := <-resumedAfter; after != 2 {
		t.Fatalf("resumed after seq %d, want 2 (the last contiguous)", after)
	}
	if got := seqs(); !slices.Equal(got, []int{1, 2, 3, 4, 5}) {
		t.Fatalf("OnChunk seqs %v, want 1..5 once each", got)
	}
	st := call.Stats()
	if st.Duplicates != 1 || st.OutOfOrder != 1 || st.Resumes != 1 || c.Reconnects.Load() != 1 || st.Mismatch {
		t.Fatalf("stats %+v, reconnects %d", st, c.Reconnects.Load())
	}
}

// A request the server never acknowledged is sent again, as a request, on
// the next connection.
func TestReconnectResendsUnacceptedRequest(t *testing.T) {
	const id = "resend-req-1"
	s := newServer(t,
		func(p *peer) {
			p.read() // the request is lost with the connection
			p.drop()
		},
		func(p *peer) {
			if in := p.read(); in.Type != protocol.TypeRequest || in.RequestID != id || len(in.Messages) != 1 {
				t.Errorf("after the reconnect %+v, want the request again", in)
			}
			p.send(accepted(id))
			p.chunk(id, 1, "ok")
			p.send(done(id, 1, "ok"))
			p.waitClose()
		})
	c := dial(t, s, func(o *Options) { o.Reconnect = true })
	call, err := c.Send(context.Background(), ask(id))
	if err != nil {
		t.Fatal(err)
	}
	if d, err := wait(t, call); err != nil || d.Text != "ok" {
		t.Fatalf("result %+v, %v", d, err)
	}
}

// A request with no accepted within AcceptTimeout is sent again on the same connection.
func TestAcceptTimeoutResends(t *testing.T) {
	const id = "resend-req-2"
	s := newServer(t, func(p *peer) {
		first, again := p.read(), p.read()
		if first.Type != protocol.TypeRequest || again.Type != protocol.TypeRequest || again.RequestID != id {
			t.Errorf("frames %+v then %+v, want the request twice", first, again)
		}
		p.send(accepted(id))
		p.send(done(id, 0, ""))
		p.waitClose()
	})
	c := dial(t, s, func(o *Options) { o.AcceptTimeout = 20 * time.Millisecond })
	call, err := c.Send(context.Background(), ask(id))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wait(t, call); err != nil {
		t.Fatal(err)
	}
	if st := call.Stats(); st.Resends < 1 {
		t.Fatalf("stats %+v, want a resend", st)
	}
}

// Replayed chunks and a doubled terminal reach the caller once.
func TestDedupesReplayedChunksAndTerminals(t *testing.T) {
	const id, next = "dedupe-req-1", "dedupe-req-2"
	s := newServer(t, func(p *peer) {
		p.read()
		p.send(accepted(id))
		p.chunk(id, 1, "a")
		p.chunk(id, 1, "a")
		p.chunk(id, 2, "b")
		p.send(done(id, 2, "ab"))
		p.send(done(id, 2, "ab"))
		p.send(protocol.Error{Type: protocol.TypeError, RequestID: id, Code: protocol.CodeInternal, Status: 500})
		// A second request: its answer, read after the frames above, marks them handled.
		p.read()
		p.send(accepted(next))
		p.send(done(next, 0, ""))
		p.waitClose()
	})
	c := dial(t, s, nil)
	call, seqs := sendCollecting(t, c, id)
	d, err := wait(t, call)
	if err != nil || d.Text != "ab" || d.Chunks != 2 {
		t.Fatalf("result %+v, %v", d, err)
	}
	after, err := c.Send(context.Background(), ask(next))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wait(t, after); err != nil {
		t.Fatal(err)
	}
	if got := seqs(); !slices.Equal(got, []int{1, 2}) || call.Text() != "ab" {
		t.Fatalf("OnChunk seqs %v, text %q", got, call.Text())
	}
	if st := call.Stats(); st.Duplicates != 1 || st.ChunksReceived != 3 || st.Terminals != 1 {
		t.Fatalf("stats %+v", st)
	}
	// The later terminals changed nothing.
	if d2, err := call.Wait(context.Background()); d2 != d || err != nil {
		t.Fatalf("Wait after the replayed terminals: %+v, %v", d2, err)
	}
}

// An error frame is the call's result, as *Error with its fields.
func TestErrorFrameIsTheResult(t *testing.T) {
	const id = "error-req-1"
	s := newServer(t, func(p *peer) {
		p.read()
		p.send(protocol.Error{Type: protocol.TypeError, RequestID: id, Code: protocol.CodeQuotaExceeded,
			Status: 429, Message: "Token quota exceeded", Retryable: true, RetryAfterMs: 1500, Window: "hour"})
		p.waitClose()
	})
	c := dial(t, s, nil)
	call, err := c.Send(context.Background(), ask(id))
	if err != nil {
		t.Fatal(err)
	}
	_, err = wait(t, call)
	var e *Error
	if !errors.As(err, &e) || e.Code != protocol.CodeQuotaExceeded || e.RetryAfter() != 1500*time.Millisecond || e.Window != "hour" {
		t.Fatalf("error %v (%+v)", err, e)
	}
}

// Without Reconnect a lost connection fails the unfinished calls.
func TestLostConnectionFailsCallsWithoutReconnect(t *testing.T) {
	s := newServer(t, func(p *peer) {
		p.read()
		p.drop()
	})
	c := dial(t, s, nil)
	call, err := c.Send(context.Background(), ask("lost-req-1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wait(t, call); !errors.Is(err, ErrDisconnected) {
		t.Fatalf("error %v, want ErrDisconnected", err)
	}
}

// A request refused with draining is sent again on the connection the
// client opens away from the draining server.
func TestDrainingRefusalIsSentAgainElsewhere(t *testing.T) {
	const id = "drain-req-1"
	s := newServer(t,
		func(p *peer) {
			p.read()
			p.send(protocol.Draining{Type: protocol.TypeDraining, ReconnectAfterMs: 1})
			p.send(protocol.Error{Type: protocol.TypeError, RequestID: id, Code: protocol.CodeDraining, Status: 503, Retryable: true})
			p.waitClose()
		},
		func(p *peer) {
			if in := p.read(); in.Type != protocol.TypeRequest || in.RequestID != id {
				t.Errorf("on the new connection %+v, want the request", in)
			}
			p.send(accepted(id))
			p.send(done(id, 0, ""))
			p.waitClose()
		})
	c := dial(t, s, func(o *Options) { o.Reconnect = true })
	call, err := c.Send(context.Background(), ask(id))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wait(t, call); err != nil {
		t.Fatalf("result: %v", err)
	}
	if st := call.Stats(); st.Resends != 1 {
		t.Fatalf("stats %+v, want one resend", st)
	}
}

// A busy server with room elsewhere moves the session: the draining frame,
// then busy. The client sends the request again on its new connection; a
// busy on a connection not asked to move stays the caller's error.
func TestBusyAfterDrainingIsSentAgainElsewhere(t *testing.T) {
	const id = "moved-busy-1"
	s := newServer(t,
		func(p *peer) {
			p.read()
			p.send(protocol.Draining{Type: protocol.TypeDraining, ReconnectAfterMs: 1})
			p.send(busy(id))
			p.waitClose()
		},
		func(p *peer) {
			if in := p.read(); in.Type != protocol.TypeRequest || in.RequestID != id {
				t.Errorf("on the new connection %+v, want the request", in)
			}
			p.send(accepted(id))
			p.send(done(id, 0, ""))
			p.waitClose()
		})
	c := dial(t, s, func(o *Options) { o.Reconnect = true })
	call, err := c.Send(context.Background(), ask(id))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wait(t, call); err != nil {
		t.Fatalf("result: %v", err)
	}
	if st := call.Stats(); st.Resends != 1 {
		t.Fatalf("stats %+v, want one resend", st)
	}
}

func busy(id string) protocol.Error {
	return protocol.Error{Type: protocol.TypeError, RequestID: id, Code: protocol.CodeBusy, Status: 503,
		Retryable: true, RetryAfterMs: 1}
}

// A retryable error without `chunks` answering the resume of an accepted
// request refused that attempt, not the request: the client resumes again
// and the request ends in its own terminal.
func TestRefusedResumeIsResumedAgain(t *testing.T) {
	const id = "refused-resume-1"
	resumes := make(chan int, 4)
	s := newServer(t,
		func(p *peer) {
			p.read()
			p.send(accepted(id))
			p.chunk(id, 1, "a")
			p.drop()
		},
		func(p *peer) {
			in := p.read()
			resumes <- in.AfterSeq
			p.send(busy(id)) // the server could not read the request's record in time
			in = p.read()
			resumes <- in.AfterSeq
			if in.Type != protocol.TypeResume {
				t.Errorf("after the refusal the client sent %+v, want a resume", in)
			}
			p.chunk(id, 2, "b")
			p.send(done(id, 2, "ab"))
			p.waitClose()
		})
	c := dial(t, s, func(o *Options) { o.Reconnect = true })
	call, err := c.Send(context.Background(), ask(id))
	if err != nil {
		t.Fatal(err)
	}
	d, err := wait(t, call)
	if err != nil || d.Text != "ab" || call.Text() != "ab" {
		t.Fatalf("result %+v %v, want done ab", d, err)
	}
	if a, b := <-resumes, <-resumes; a != 1 || b != 1 {
		t.Fatalf("resumed after seq %d then %d, want 1 both times", a, b)
	}
	if st := call.Stats(); st.Refusals != 1 || st.Terminals != 1 {
		t.Fatalf("stats %+v, want one refusal and one terminal", st)
	}
}

// Refusals of resumes are retried for RetryRefusedFor, then the call ends
// with the refusal.
func TestRefusedResumesGiveUpAfterTheirBound(t *testing.T) {
	const id = "refused-resume-2"
	s := newServer(t,
		func(p *peer) {
			p.read()
			p.send(accepted(id))
			p.drop()
		},
		func(p *peer) {
			for in := p.read(); in.Type == protocol.TypeResume; in = p.read() {
				p.send(busy(id))
			}
		})
	c := dial(t, s, func(o *Options) { o.Reconnect = true; o.RetryRefusedFor = 50 * time.Millisecond })
	call, err := c.Send(context.Background(), ask(id))
	if err != nil {
		t.Fatal(err)
	}
	_, err = wait(t, call)
	var e *Error
	if !errors.As(err, &e) || e.Code != protocol.CodeBusy {
		t.Fatalf("result %v, want busy once the bound passed", err)
	}
	if st := call.Stats(); st.Refusals < 1 || st.Terminals != 1 {
		t.Fatalf("stats %+v, want refusals, then one terminal", st)
	}
}

// An accepted request's terminal error carries `chunks`: it is final even
// when retryable, and so is a refusal that is not retryable.
func TestTerminalErrorsOfAcceptedCallsAreFinal(t *testing.T) {
	zero, empty := 0, ""
	for _, tc := range []struct {
		name  string
		frame protocol.Error
	}{
		{"terminal with chunks", protocol.Error{Code: protocol.CodeInterrupted, Status: 503, Retryable: true, Chunks: &zero, Text: &empty}},
		{"refusal not retryable", protocol.Error{Code: protocol.CodeForbidden, Status: 403}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := "final-" + tc.frame.Code
			f := tc.frame
			f.Type, f.RequestID = protocol.TypeError, id
			s := newServer(t, func(p *peer) {
				p.read()
				p.send(accepted(id))
				p.send(f)
				p.waitClose()
			})
			c := dial(t, s, func(o *Options) { o.Reconnect = true })
			call, err := c.Send(context.Background(), ask(id))
			if err != nil {
				t.Fatal(err)
			}
			_, err = wait(t, call)
			var e *Error
			if !errors.As(err, &e) || e.Code != f.Code {
				t.Fatalf("result %v, want %s", err, f.Code)
			}
			if st := call.Stats(); st.Refusals != 0 || st.Resumes != 0 {
				t.Fatalf("stats %+v, want no resume", st)
			}
		})
	}
}

// An interrupted terminal that saved less than the client received (the
// owner died between checkpoints; PROTOCOL.md v1.1) never shrinks the
// answer: the result keeps the client's five contiguous chunks, not the
// three saved ones, and says the call was interrupted and is retryable. A
// terminal that saved more than the client holds wins, and a chunk that came
// after a gap (seq 7 without seq 6) is not part of the kept text.
func TestInterruptedNeverShrinksTheAnswer(t *testing.T) {
	for _, tc := range []struct {
		name        string
		received    []int // seqs the server sends before the terminal
		savedChunks int
		wantText    string
		wantChunks  int
		kept        bool
	}{
		{name: "saved less", received: []int{1, 2, 3, 4, 5, 7}, savedChunks: 3, wantText: "c1 c2 c3 c4 c5 ", wantChunks: 5, kept: true},
		{name: "saved as much", received: []int{1, 2, 3}, savedChunks: 3, wantText: "c1 c2 c3 ", wantChunks: 3},
		{name: "saved more", received: []int{1, 2}, savedChunks: 4, wantText: "c1 c2 c3 c4 ", wantChunks: 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := "interrupted-" + strings.ReplaceAll(tc.name, " ", "-")
			saved := ""
			for i := 1; i <= tc.savedChunks; i++ {
				saved += "c" + string(rune('0'+i)) + " "
			}
			s := newServer(t, func(p *peer) {
				p.read()
				p.send(accepted(id))
				for _, seq := range tc.received {
					p.chunk(id, seq, "c"+string(rune('0'+seq))+" ")
				}
				n := tc.savedChunks
				p.send(protocol.Error{Type: protocol.TypeError, RequestID: id, Code: protocol.CodeInterrupted,
					Status: 503, Message: "the server that owned this answer stopped", Retryable: true, Chunks: &n, Text: &saved})
				p.waitClose()
			})
			c := dial(t, s, func(o *Options) { o.Reconnect = true })
			var shown []string
			var mu sync.Mutex
			r := ask(id)
			r.OnChunk = func(_ int, text string) { mu.Lock(); shown = append(shown, text); mu.Unlock() }
			call, err := c.Send(context.Background(), r)
			if err != nil {
				t.Fatal(err)
			}
			_, err = wait(t, call)
			e, ok := Interrupted(err)
			if !ok || !e.Retryable {
				t.Fatalf("result %v, want a retryable interrupted error", err)
			}
			if e.Text == nil || *e.Text != tc.wantText || e.Chunks == nil || *e.Chunks != tc.wantChunks {
				t.Fatalf("interrupted text %q chunks %v, want %q and %d", deref(e.Text), deref(e.Chunks), tc.wantText, tc.wantChunks)
			}
			if got := call.Text(); len(got) > len(*e.Text) {
				t.Fatalf("call text %q is longer than the result's %q", got, *e.Text)
			}
			if st := call.Stats(); st.KeptLonger != tc.kept || st.Terminals != 1 {
				t.Fatalf("stats %+v, want KeptLonger %v and one terminal", st, tc.kept)
			}
			mu.Lock()
			defer mu.Unlock()
			if joined := strings.Join(shown, ""); !strings.HasPrefix(*e.Text, joined) {
				t.Fatalf("chunks shown %q are not a prefix of the result %q", joined, *e.Text)
			}
		})
	}
	if _, ok := Interrupted(&Error{Code: protocol.CodeBusy}); ok {
		t.Fatal("Interrupted(busy) = true")
	}
	if _, ok := Interrupted(errors.New("x")); ok {
		t.Fatal("Interrupted(other error) = true")
	}
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

// A request refused busy on a connection asked to move, whose connection
// then ends, is sent again once: the re-send after the refusal and the
// resume after the end are one attempt, or the server would answer it twice.
func TestMovedAndEndedCallIsSentOnce(t *testing.T) {
	for i := range 30 {
		id := "moved-ended-" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		var requests atomic.Int32
		pinged := make(chan struct{})
		s := newServer(t,
			func(p *peer) {
				p.read()
				p.send(protocol.Draining{Type: protocol.TypeDraining, ReconnectAfterMs: 1})
				p.send(busy(id))
				p.drop()
			},
			func(p *peer) {
				for {
					in := p.read()
					switch {
					case in.Type == "":
						return
					case in.Type == protocol.TypePing:
						close(pinged)
						return
					case in.RequestID == id:
						if requests.Add(1) == 1 {
							p.send(accepted(id))
							p.chunk(id, 1, "hi")
							p.send(done(id, 1, "hi"))
						}
					}
				}
			})
		c := dial(t, s, func(o *Options) { o.Reconnect = true })
		call, err := c.Send(context.Background(), ask(id))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := wait(t, call); err != nil {
			t.Fatalf("result: %v", err)
		}
		if err := c.Ping(); err != nil {
			t.Fatal(err)
		}
		select { // every frame the client sent before the ping has been read
		case <-pinged:
		case <-time.After(10 * time.Second):
			t.Fatal("the ping never arrived")
		}
		_ = c.Close()
		if n := requests.Load(); n != 1 {
			t.Fatalf("round %d: the moved request went %d times on the new connection, want once (stats %+v)", i, n, call.Stats())
		}
	}
}
