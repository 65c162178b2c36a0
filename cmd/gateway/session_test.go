package main

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/jetway-gateway/jetway/client"
	"github.com/jetway-gateway/jetway/internal/mockmodel"
)

func TestTokenExpiryCloses4001(t *testing.T) {
	w := newWorld(t, fastPace())
	g := w.start(nil)
	rc := w.raw(g, w.token("hank", "contoso", "contoso-support", 2*time.Second), nil)
	f, _ := rc.readUntil("error")
	if f["code"] != "unauthorized" {
		t.Fatalf("expiry frame %v", f)
	}
	if code := rc.closeCode(10 * time.Second); code != 4001 {
		t.Fatalf("close code %d, want 4001", code)
	}
}

func TestTokenRefreshKeepsSession(t *testing.T) {
	w := newWorld(t, fastPace())
	g := w.start(nil)
	rc := w.raw(g, w.token("ivan", "contoso", "contoso-support", 2*time.Second), nil)
	rc.send(map[string]any{"type": "auth", "token": w.token("ivan", "contoso", "contoso-support", time.Hour)})
	ok := rc.read()
	if ok["type"] != "auth_ok" {
		t.Fatalf("got %v, want auth_ok", ok)
	}
	exp, err := time.Parse(time.RFC3339, ok["expires_at"].(string))
	if err != nil || time.Until(exp) < 50*time.Minute {
		t.Fatalf("auth_ok expires_at %v", ok["expires_at"])
	}
	// Past the first token's expiry the session still serves requests.
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		rc.send(`{"type":"ping"}`)
		if f := rc.read(); f["type"] != "pong" {
			t.Fatalf("got %v after refresh", f)
		}
		time.Sleep(200 * time.Millisecond) // pacing the pings, not waiting for an event
	}
	// Another user's token is refused and closes the session.
	rc.send(map[string]any{"type": "auth", "token": w.token("someone-else", "contoso", "contoso-support", time.Hour)})
	if f := rc.read(); f["code"] != "unauthorized" {
		t.Fatalf("other user's refresh: %v", f)
	}
	if code := rc.closeCode(5 * time.Second); code != 4001 {
		t.Fatalf("close code %d, want 4001", code)
	}
}

func TestHeartbeatPingsAndClosesSilentClient(t *testing.T) {
	w := newWorld(t, fastPace())
	g := w.start(map[string]string{"JETWAY_HEARTBEAT": "200ms"})
	rc := w.raw(g, w.token("judy", "contoso", "contoso-support", time.Hour), nil)
	pings := make(chan struct{}, 16)
	// Swallow pings without answering: the server must give up after two heartbeats.
	rc.ws.SetPingHandler(func(string) error { pings <- struct{}{}; return nil })
	ended := make(chan error, 1)
	go func() {
		_ = rc.ws.SetReadDeadline(time.Now().Add(10 * time.Second))
		for {
			if _, _, err := rc.ws.ReadMessage(); err != nil {
				ended <- err
				return
			}
		}
	}()
	select {
	case <-pings:
	case <-time.After(5 * time.Second):
		t.Fatal("no WebSocket ping within 5s at a 200ms heartbeat")
	}
	select {
	case err := <-ended:
		if ce, ok := err.(*websocket.CloseError); ok && ce.Code != 1008 {
			t.Fatalf("closed with %d, want 1008", ce.Code)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a client that never answers pings was not closed")
	}
	// A client that answers (gorilla's default handler) stays connected across many heartbeats.
	alive := w.dial(g, "judy2", nil)
	time.Sleep(time.Second) // five heartbeats: the span being tested, not a wait for an event
	if err := alive.Ping(); err != nil {
		t.Fatalf("answering client was dropped: %v", err)
	}
}

func TestInflightCaps(t *testing.T) {
	w := newWorld(t, mockmodel.Options{TTFT: time.Millisecond, PerToken: 20 * time.Millisecond})
	g := w.start(map[string]string{"JETWAY_MAX_INFLIGHT_PER_SESSION": "2", "JETWAY_MAX_INFLIGHT_PER_USER": "3"})
	c1 := w.dial(g, "kate", nil)
	c2 := w.dial(g, "kate", nil)
	var calls []*client.Call
	send := func(c *client.Client, id string) *client.Call {
		call, err := c.Send(context.Background(), client.Request{RequestID: id, Messages: []client.Message{{Role: "user", Content: id}}})
		if err != nil {
			t.Fatal(err)
		}
		return call
	}
	for i := 0; i < 2; i++ {
		calls = append(calls, send(c1, fmt.Sprintf("cap-s1-%d", i)))
		<-calls[len(calls)-1].Accepted()
	}
	third := send(c1, "cap-s1-2")
	if _, err := waitCall(t, third, 5*time.Second); !isCode(err, "rate_limited") {
		t.Fatalf("3rd request on a session: %v, want rate_limited", err)
	}
	calls = append(calls, send(c2, "cap-s2-0"))
	<-calls[len(calls)-1].Accepted()
	fourth := send(c2, "cap-s2-1")
	_, err := waitCall(t, fourth, 5*time.Second)
	if !isCode(err, "rate_limited") || err.(*client.Error).RetryAfterMs <= 0 || !err.(*client.Error).Retryable {
		t.Fatalf("4th request of the user: %v, want retryable rate_limited", err)
	}
	for _, c := range calls {
		if _, err := waitCall(t, c, 30*time.Second); err != nil {
			t.Fatalf("admitted request %s failed: %v", c.ID, err)
		}
	}
	// Once they finish, the same ids that were refused can be sent again.
	again := send(c1, "cap-s1-2")
	if _, err := waitCall(t, again, 30*time.Second); err != nil {
		t.Fatalf("retry after the cap cleared: %v", err)
	}
}

func isCode(err error, code string) bool {
	e, ok := err.(*client.Error)
	return ok && e.Code == code
}

func TestModelFaultsEndInOneTerminal(t *testing.T) {
	w := newWorld(t, fastPace())
	g := w.start(map[string]string{"JETWAY_FIRST_TOKEN_TIMEOUT": "300ms"})
	tok := w.token("liam", "contoso", "contoso-nofallback", time.Hour)
	c := w.dial(g, "liam", func(o *client.Options) {
		o.Token = func(context.Context) (string, error) { return tok, nil }
	})
	cases := []struct {
		model, code string
		chunks      int
	}{
		{"mock-fail-after-5", "model_error", 5},
		{"mock-stall", "timeout", 0},
		{"mock-throttle", "model_unavailable", 0},
	}
	for _, tc := range cases {
		req := ask("fault " + tc.model)
		req.Model = tc.model
		call, err := c.Send(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		_, err = waitCall(t, call, 20*time.Second)
		e, ok := err.(*client.Error)
		if !ok || e.Code != tc.code || e.Chunks == nil || *e.Chunks != tc.chunks || e.Text == nil || !e.Retryable {
			t.Fatalf("%s: %v, want %s after %d chunks", tc.model, err, tc.code, tc.chunks)
		}
		if tc.chunks > 0 && *e.Text != expected(tc.model, "fault "+tc.model, 300)[:len(*e.Text)] {
			t.Fatalf("%s: partial text %q is not the streamed prefix", tc.model, *e.Text)
		}
		if call.Text() != *e.Text {
			t.Fatalf("%s: streamed %q but error.text %q", tc.model, call.Text(), *e.Text)
		}
	}
}

func TestFallbackBeforeFirstToken(t *testing.T) {
	w := newWorld(t, fastPace())
	g := w.start(map[string]string{"JETWAY_FIRST_TOKEN_TIMEOUT": "300ms"})
	c := w.dial(g, "mia", nil)
	for _, primary := range []string{"mock-stall", "mock-throttle", "mock-unavailable"} {
		req := ask("fallback from " + primary)
		req.Model = primary
		call, err := c.Send(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		done, err := waitCall(t, call, 20*time.Second)
		if err != nil || done.Model != "mock-b" || done.Text != expected("mock-b", "fallback from "+primary, 300) {
			t.Fatalf("%s: %+v %v, want mock-b's answer", primary, done, err)
		}
		if l := g.logs.Await("completed", call.ID, 1, 10*time.Second); len(l) != 1 || l[0]["fallback_from"] != primary {
			t.Fatalf("%s: completed log %v lacks fallback_from", primary, l)
		}
	}
}

// runTest1 is the article's Test 1: users x requests, one connection per
// session, requests reusing it. It returns the accounting.
type test1 struct {
	sent, done, incomplete, lost, unfinished, dups int
	refused                                        int // busy before acceptance, sent again (not a failure)
	ttfts                                          []time.Duration
}

func runTest1(t *testing.T, w *world, g *gw, users, perUser int) test1 {
	var mu sync.Mutex
	var res test1
	var wg sync.WaitGroup
	for u := 0; u < users; u++ {
		wg.Add(1)
		go func(u int) {
			defer wg.Done()
			c := w.dial(g, fmt.Sprintf("t1-user-%d", u), nil)
			for r := 0; r < perUser; r++ {
				prompt := fmt.Sprintf("user %d question %d", u, r)
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				call, done, refused, err := sendRetryingRefusals(ctx, c, ask(prompt))
				timedOut := ctx.Err() != nil
				cancel()
				if call == nil {
					t.Errorf("send: %v", err)
					return
				}
				st := call.Stats()
				mu.Lock()
				res.sent++
				res.refused += refused
				switch {
				case timedOut:
					res.unfinished++
				case err != nil:
					t.Errorf("request failed: %v", err)
				default:
					res.done++
					res.lost += done.Chunks - (st.ChunksReceived - st.Duplicates)
					res.dups += st.Duplicates
					if call.Text() != done.Text || done.Text != expected("mock-a", prompt, 300) {
						res.incomplete++
					}
					res.ttfts = append(res.ttfts, call.FirstChunkAt().Sub(call.SentAt()))
				}
				mu.Unlock()
			}
		}(u)
	}
	wg.Wait()
	return res
}

func TestArticleTest1(t *testing.T) {
	t.Run("10x10 at the realistic pace", func(t *testing.T) {
		w := newWorld(t, mockmodel.Options{TTFT: 250 * time.Millisecond, PerToken: 8 * time.Millisecond})
		g := w.start(nil)
		r := runTest1(t, w, g, 10, 10)
		if r.sent != 100 || r.done != 100 || r.lost != 0 || r.incomplete != 0 || r.unfinished != 0 || r.dups != 0 {
			t.Fatalf("Test 1: %+v", r)
		}
		t.Logf("Test 1 (10x10): done=%d lost=%d incomplete=%d unfinished=%d ttft p50=%v p99=%v",
			r.done, r.lost, r.incomplete, r.unfinished, pct(r.ttfts, 50), pct(r.ttfts, 99))
	})
	t.Run("100 sessions", func(t *testing.T) {
		w := newWorld(t, fastPace())
		g := w.start(nil)
		r := runTest1(t, w, g, 100, 3)
		if r.sent != 300 || r.done != 300 || r.lost != 0 || r.incomplete != 0 || r.unfinished != 0 || r.dups != 0 {
			t.Fatalf("Test 1 (100 sessions): %+v", r)
		}
		t.Logf("Test 1 (100 sessions): done=%d, %d refusals before acceptance sent again", r.done, r.refused)
	})
}

// TestGuardrailAndBudget: a guardrail intervention ends honestly in done
// with its stop reason; a USD budget is enforced by the same reservation.
func TestGuardrailAndBudget(t *testing.T) {
	w := newWorld(t, fastPace())
	g := w.start(nil)
	dialApp := func(sub, tenant, clientID string) *client.Client {
		tok := w.token(sub, tenant, clientID, time.Hour)
		return w.dial(g, sub, func(o *client.Options) { o.Token = func(context.Context) (string, error) { return tok, nil } })
	}
	req := ask("say something unsafe")
	req.Model = "mock-guardrail"
	call, err := dialApp("gr-user", "contoso", "contoso-nofallback").Send(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	done, err := waitCall(t, call, 20*time.Second)
	if err != nil || done.StopReason != "guardrail_intervened" || done.Chunks == 0 || done.Chunks >= 300 || done.Text != call.Text() {
		t.Fatalf("guardrail: %+v %v, want done with stop_reason guardrail_intervened and the allowed text", done, err)
	}
	// $0.001 a day cannot cover one request reserved at max_tokens: a clean 429, no model call.
	before := w.mock.Requests("mock-a")
	call, err = dialApp("budget-user", "fabrikam", "fabrikam-budget").Send(context.Background(), ask("expensive"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = waitCall(t, call, 20*time.Second)
	if e, ok := err.(*client.Error); !ok || e.Code != "quota_exceeded" || e.Window != "day" || e.RetryAfterMs <= 0 {
		t.Fatalf("USD budget: %v, want quota_exceeded for the day window", err)
	}
	if w.mock.Requests("mock-a") != before {
		t.Fatal("a request over its USD budget reached the model")
	}
}
