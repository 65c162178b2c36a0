package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/jetway-gateway/jetway/client"
	"github.com/jetway-gateway/jetway/internal/auth/authtest"
)

// rawConn is a bare WebSocket for frame-level assertions.
type rawConn struct {
	t  *testing.T
	ws *websocket.Conn
}

func (w *world) raw(g *gw, tok string, header http.Header) *rawConn {
	w.t.Helper()
	if header == nil {
		header = http.Header{}
	}
	header.Set("Authorization", "Bearer "+tok)
	d := websocket.Dialer{Subprotocols: []string{"jetway.v1"}, HandshakeTimeout: 5 * time.Second}
	ws, resp, err := d.Dial(g.URL(), header)
	if err != nil {
		w.t.Fatalf("dial: %v (resp %v)", err, resp)
	}
	if ws.Subprotocol() != "jetway.v1" {
		w.t.Fatalf("subprotocol %q", ws.Subprotocol())
	}
	w.t.Cleanup(func() { _ = ws.Close() })
	rc := &rawConn{t: w.t, ws: ws}
	if f := rc.read(); f["type"] != "ready" {
		w.t.Fatalf("first frame %v, want ready", f)
	}
	return rc
}

func (rc *rawConn) send(v any) {
	rc.t.Helper()
	var b []byte
	switch x := v.(type) {
	case string:
		b = []byte(x)
	default:
		b, _ = json.Marshal(v)
	}
	if err := rc.ws.WriteMessage(websocket.TextMessage, b); err != nil {
		rc.t.Fatalf("write: %v", err)
	}
}

func (rc *rawConn) read() map[string]any {
	rc.t.Helper()
	_ = rc.ws.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, data, err := rc.ws.ReadMessage()
	if err != nil {
		rc.t.Fatalf("read: %v", err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		rc.t.Fatalf("frame is not JSON: %s", data)
	}
	return m
}

// readUntil reads frames until one has the type, returning it and those before.
func (rc *rawConn) readUntil(typ string) (map[string]any, []map[string]any) {
	rc.t.Helper()
	var before []map[string]any
	for {
		f := rc.read()
		if f["type"] == typ {
			return f, before
		}
		before = append(before, f)
	}
}

// closeCode reads until the server closes and returns its close code.
func (rc *rawConn) closeCode(within time.Duration) int {
	rc.t.Helper()
	_ = rc.ws.SetReadDeadline(time.Now().Add(within))
	for {
		_, _, err := rc.ws.ReadMessage()
		if err != nil {
			var ce *websocket.CloseError
			if errors.As(err, &ce) {
				return ce.Code
			}
			rc.t.Fatalf("connection ended without a close frame: %v", err)
		}
	}
}

func TestReadyAndOrderedStream(t *testing.T) {
	w := newWorld(t, fastPace())
	g := w.start(nil)
	rc := w.raw(g, w.token("alice", "contoso", "contoso-support", time.Hour), nil)
	rc.send(map[string]any{"type": "request", "request_id": "req-order-1", "messages": []map[string]string{{"role": "user", "content": "hello there"}}})
	acc := rc.read()
	if acc["type"] != "accepted" || acc["request_id"] != "req-order-1" || acc["model"] != "mock-a" || acc["cached"] != false {
		t.Fatalf("first frame after request = %v, want accepted", acc)
	}
	q, _ := acc["quota"].(map[string]any)
	if q == nil || q["window"] != "hour" || q["limit"].(float64) != 2000000 || acc["reserved_tokens"].(float64) <= 0 {
		t.Fatalf("accepted quota = %v", acc)
	}
	done, chunks := rc.readUntil("done")
	var text strings.Builder
	for i, c := range chunks {
		if c["type"] != "chunk" || int(c["seq"].(float64)) != i+1 {
			t.Fatalf("frame %d = %v, want chunk seq %d", i, c, i+1)
		}
		text.WriteString(c["text"].(string))
	}
	want := expected("mock-a", "hello there", 300)
	if len(chunks) != 300 || text.String() != want || done["text"] != want || int(done["chunks"].(float64)) != 300 {
		t.Fatalf("got %d chunks; text ok=%v; done=%v", len(chunks), text.String() == want, done["chunks"])
	}
	usage := done["usage"].(map[string]any)
	if usage["output_tokens"].(float64) != 300 || usage["input_tokens"].(float64) <= 0 || done["stop_reason"] == "" ||
		done["model"] != "mock-a" || done["latency_ms"] == nil || done["ttft_ms"] == nil {
		t.Fatalf("done = %v", done)
	}
	// The tracking number: at info, one line per request, with the request
	// id and everything the steps' debug lines say.
	g.logs.Await("completed", "req-order-1", 1, 10*time.Second) // the log is read as it comes
	for _, msg := range []string{"received", "admitted", "quota_reserved", "model_started", "first_token", "quota_settled"} {
		if n := len(g.logs.Find(msg, "req-order-1")); n != 0 {
			t.Errorf("log line %q at info: %d, want it at debug only", msg, n)
		}
	}
	if l := g.logs.Find("completed", "req-order-1"); len(l) != 1 {
		t.Errorf("completed lines %v, want one", l)
	} else {
		for _, k := range []string{"session_id", "door", "model", "ttft_ms", "latency_ms", "chunks", "input_tokens", "output_tokens",
			"reserved", "window", "used", "limit", "micro_usd", "status"} {
			if l[0][k] == nil {
				t.Errorf("completed line lacks %s: %v", k, l[0])
			}
		}
		if l[0]["tenant"] != "contoso" || l[0]["app"] != "support-assistant" || l[0]["user"] != "alice" {
			t.Errorf("completed line lacks identity: %v", l[0])
		}
	}
	// At debug, one line per step.
	dg := w.start(map[string]string{"JETWAY_LOG_LEVEL": "debug"})
	dc := w.dial(dg, "alice", nil)
	call, err := dc.Send(context.Background(), client.Request{RequestID: "req-order-debug", Messages: []client.Message{{Role: "user", Content: "hello there"}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := waitCall(t, call, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	dg.logs.Await("quota_settled", "req-order-debug", 1, 10*time.Second)
	for _, msg := range []string{"received", "admitted", "quota_reserved", "model_started", "first_token", "completed", "quota_settled"} {
		if n := len(dg.logs.Find(msg, "req-order-debug")); n != 1 {
			t.Errorf("log line %q at debug: %d, want 1", msg, n)
		}
	}
	if strings.Contains(g.logs.String(), "hello there") {
		t.Errorf("the prompt text appears in the logs")
	}
}

func TestIdempotentResendAndConflict(t *testing.T) {
	w := newWorld(t, fastPace())
	g := w.start(nil)
	rc := w.raw(g, w.token("bob", "contoso", "contoso-support", time.Hour), nil)
	req := map[string]any{"type": "request", "request_id": "req-idem-1", "messages": []map[string]string{{"role": "user", "content": "once"}}}
	rc.send(req)
	first, _ := rc.readUntil("done")
	// The same request again, resuming after seq 290: no model call, no charge, the same answer.
	req["after_seq"] = 290
	rc.send(req)
	acc := rc.read()
	if acc["type"] != "accepted" {
		t.Fatalf("re-send: first frame %v, want the accepted frame again", acc)
	}
	done, chunks := rc.readUntil("done")
	if len(chunks) != 10 || int(chunks[0]["seq"].(float64)) != 291 || done["text"] != first["text"] {
		t.Fatalf("re-send replay: %d chunks from seq %v", len(chunks), chunks[0]["seq"])
	}
	if n := w.mock.Requests("mock-a"); n != 1 {
		t.Fatalf("model calls = %d, want 1", n)
	}
	// Same id, different body: conflict.
	rc.send(map[string]any{"type": "request", "request_id": "req-idem-1", "messages": []map[string]string{{"role": "user", "content": "twice"}}})
	e := rc.read()
	if e["type"] != "error" || e["code"] != "conflict" || e["status"].(float64) != 409 || e["request_id"] != "req-idem-1" {
		t.Fatalf("got %v, want conflict", e)
	}
	// after_seq on a request the server never saw skips nothing: it is new.
	rc.send(map[string]any{"type": "request", "request_id": "req-idem-2", "after_seq": 50,
		"messages": []map[string]string{{"role": "user", "content": "fresh"}}})
	if f := rc.read(); f["type"] != "accepted" {
		t.Fatalf("new request with after_seq: %v", f)
	}
	if f := rc.read(); f["type"] != "chunk" || f["seq"].(float64) != 1 {
		t.Fatalf("new request with after_seq 50 started at %v, want seq 1", f["seq"])
	}
	rc.readUntil("done")
	// Another user's request id is not_found for this user.
	other := w.raw(g, w.token("mallory", "contoso", "contoso-support", time.Hour), nil)
	other.send(map[string]any{"type": "resume", "request_id": "req-idem-1", "after_seq": 0})
	if e := other.read(); e["code"] != "not_found" || e["status"].(float64) != 404 {
		t.Fatalf("other user's resume: %v", e)
	}
}

func TestBadInputKeepsSocketOpen(t *testing.T) {
	w := newWorld(t, fastPace())
	// Eleven refusals in a burst pass the default refusal budget (10): this
	// test is about the socket, the budget has its own tests.
	g := w.start(map[string]string{"JETWAY_MAX_REFUSALS_PER_USER": "100"})
	rc := w.raw(g, w.token("carol", "contoso", "contoso-support", time.Hour), nil)
	cases := []struct {
		frame, code, reqID string
	}{
		{`not json`, "invalid_request", ""},
		{`{"type":"subscribe"}`, "invalid_request", ""},
		{`{"request_id":"abcdefgh"}`, "invalid_request", "abcdefgh"},
		{`{"type":"request","request_id":"short","messages":[{"role":"user","content":"x"}]}`, "invalid_request", ""},
		{`{"type":"request","request_id":"abcdefgh1","messages":[]}`, "invalid_request", "abcdefgh1"},
		{`{"type":"request","request_id":"abcdefgh2","messages":[{"role":"user","content":"x"}],"max_tokens":100000}`, "invalid_request", "abcdefgh2"},
		{`{"type":"request","request_id":"abcdefgh3","model":"mock-cheap","messages":[{"role":"user","content":"x"}]}`, "model_not_allowed", "abcdefgh3"},
		{`{"type":"resume","request_id":"never-sent-1","after_seq":0}`, "not_found", "never-sent-1"},
		{`{"type":"cancel","request_id":"never-sent-2"}`, "not_found", "never-sent-2"},
	}
	for _, c := range cases {
		rc.send(c.frame)
		f := rc.read()
		if f["type"] != "error" || f["code"] != c.code || f["message"] == "" || f["status"] == nil {
			t.Fatalf("frame %s: got %v, want error %s", c.frame, f, c.code)
		}
		if c.reqID != "" && f["request_id"] != c.reqID {
			t.Fatalf("frame %s: request_id %v, want %s", c.frame, f["request_id"], c.reqID)
		}
	}
	// A binary frame is refused the same way.
	if err := rc.ws.WriteMessage(websocket.BinaryMessage, []byte{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	if f := rc.read(); f["code"] != "invalid_request" {
		t.Fatalf("binary frame: %v", f)
	}
	// The socket is still open and answers pings, echoing t.
	rc.send(`{"type":"ping","t":12345}`)
	if f := rc.read(); f["type"] != "pong" || f["t"].(float64) != 12345 {
		t.Fatalf("pong = %v", f)
	}
	// Nothing was lost: a valid request still works on the same socket.
	rc.send(map[string]any{"type": "request", "request_id": "after-bad-1", "messages": []map[string]string{{"role": "user", "content": "still here"}}})
	done, _ := rc.readUntil("done")
	if done["text"] != expected("mock-a", "still here", 300) {
		t.Fatalf("request after bad frames failed: %v", done)
	}
	if n := w.mock.Requests("mock-cheap"); n != 0 {
		t.Fatalf("a rejected model was called %d times", n)
	}
}

func TestOversizedFrameCloses1009(t *testing.T) {
	w := newWorld(t, fastPace())
	g := w.start(map[string]string{"JETWAY_MAX_FRAME_BYTES": "4096"})
	rc := w.raw(g, w.token("dave", "contoso", "contoso-support", time.Hour), nil)
	rc.send(`{"type":"request","request_id":"too-big-1","messages":[{"role":"user","content":"` + strings.Repeat("x", 5000) + `"}]}`)
	if code := rc.closeCode(5 * time.Second); code != 1009 {
		t.Fatalf("close code %d, want 1009", code)
	}
}

func TestUpgradeRefusals(t *testing.T) {
	w := newWorld(t, fastPace())
	g := w.start(map[string]string{"JETWAY_ALLOWED_ORIGINS": "https://chat.example.com"})
	good := w.token("erin", "contoso", "contoso-support", time.Hour)
	now := time.Now()
	bad := map[string]struct {
		claims authtest.Claims
		status int
	}{
		"alg none":         {authtest.Claims{Subject: "x", Tenant: "contoso", ClientID: "contoso-support", Alg: "none"}, 401},
		"hs256 public key": {authtest.Claims{Subject: "x", Tenant: "contoso", ClientID: "contoso-support", Alg: "HS256"}, 401},
		"unknown kid":      {authtest.Claims{Subject: "x", Tenant: "contoso", ClientID: "contoso-support", UnknownKey: true}, 401},
		"wrong issuer":     {authtest.Claims{Subject: "x", Tenant: "contoso", ClientID: "contoso-support", Issuer: "https://evil.example.com/pool"}, 401},
		"expired":          {authtest.Claims{Subject: "x", Tenant: "contoso", ClientID: "contoso-support", IssuedAt: now.Add(-2 * time.Hour), ExpiresAt: now.Add(-time.Hour)}, 401},
		"not yet valid":    {authtest.Claims{Subject: "x", Tenant: "contoso", ClientID: "contoso-support", NotBefore: now.Add(time.Hour)}, 401},
		"wrong token_use":  {authtest.Claims{Subject: "x", Tenant: "contoso", ClientID: "contoso-support", TokenUse: "refresh"}, 401},
		"unknown client":   {authtest.Claims{Subject: "x", Tenant: "contoso", ClientID: "someone-else"}, 401},
		"no tenant":        {authtest.Claims{Subject: "x", ClientID: "contoso-support"}, 403},
		"other tenant":     {authtest.Claims{Subject: "x", Tenant: "fabrikam", ClientID: "contoso-support"}, 403},
	}
	d := websocket.Dialer{Subprotocols: []string{"jetway.v1"}, HandshakeTimeout: 5 * time.Second}
	expect := func(name string, url string, h http.Header, status int, code string) {
		t.Helper()
		ws, resp, err := d.Dial(url, h)
		if err == nil {
			ws.Close()
			t.Fatalf("%s: upgrade succeeded", name)
		}
		if resp == nil || resp.StatusCode != status {
			t.Fatalf("%s: response %v, want %d", name, resp, status)
		}
		var body struct {
			Error struct{ Code, Message string }
		}
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || body.Error.Code != code || body.Error.Message == "" {
			t.Fatalf("%s: body %+v (%v), want code %s", name, body, err, code)
		}
	}
	for name, c := range bad {
		tok := w.issuer.Token(t, c.claims)
		code := "unauthorized"
		if c.status == 403 {
			code = "forbidden"
		}
		expect(name, g.URL(), http.Header{"Authorization": {"Bearer " + tok}}, c.status, code)
	}
	expect("missing token", g.URL(), nil, 401, "unauthorized")
	expect("malformed header", g.URL(), http.Header{"Authorization": {"Basic abc"}}, 401, "unauthorized")
	expect("query token", g.URL()+"?access_token="+good, nil, 401, "unauthorized")
	expect("bad origin", g.URL(), http.Header{"Authorization": {"Bearer " + good}, "Origin": {"https://evil.example.com"}}, 403, "forbidden")
	expect("bad session id", g.URL()+"?session_id=a/b", http.Header{"Authorization": {"Bearer " + good}}, 400, "invalid_request")

	// The allowed origin and the browser subprotocol work; only jetway.v1 is selected.
	bd := websocket.Dialer{Subprotocols: []string{"jetway.v1", "bearer." + good}, HandshakeTimeout: 5 * time.Second}
	ws, _, err := bd.Dial(g.URL()+"?session_id=browser-session-1", http.Header{"Origin": {"https://chat.example.com"}})
	if err != nil {
		t.Fatalf("browser-style upgrade: %v", err)
	}
	defer ws.Close()
	if ws.Subprotocol() != "jetway.v1" {
		t.Fatalf("selected %q", ws.Subprotocol())
	}
	var ready map[string]any
	if err := ws.ReadJSON(&ready); err != nil || ready["type"] != "ready" || ready["session_id"] != "browser-session-1" ||
		ready["user"] != "erin" || ready["tenant"] != "contoso" || ready["app"] != "support-assistant" ||
		ready["protocol"] != "jetway.v1" || ready["heartbeat_s"].(float64) != 25 || ready["expires_at"] == "" {
		t.Fatalf("ready = %v (%v)", ready, err)
	}
}

func TestResumeAfterDisconnectMidStream(t *testing.T) {
	w := newWorld(t, fastPace())
	g := w.start(nil)
	cut := make(chan struct{})
	lat := &resumeLatency{}
	var c *client.Client
	c = w.dial(g, "frank", func(o *client.Options) {
		o.Reconnect = true
		o.SessionID = "frank-session-1"
		o.OnState = lat.state
	})
	req := ask("resume me")
	req.OnChunk = func(seq int, _ string) {
		if seq == 100 {
			close(cut)
		}
		lat.chunk()
	}
	call, err := c.Send(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	<-cut
	lat.dropped()
	c.Drop()
	done, err := waitCall(t, call, 30*time.Second)
	if err != nil {
		t.Fatalf("after a dropped connection: %v", err)
	}
	t.Logf("same-server resume: %s", lat.String())
	st := call.Stats()
	if done.Text != expected("mock-a", "resume me", 300) || call.Text() != done.Text || st.Mismatch || st.OutOfOrder != 0 {
		t.Fatalf("answer after resume: stats %+v", st)
	}
	if c.Reconnects.Load() < 1 || st.Resumes < 1 {
		t.Fatalf("no reconnect/resume happened: reconnects=%d stats=%+v", c.Reconnects.Load(), st)
	}
	if n := w.mock.Requests("mock-a"); n != 1 {
		t.Fatalf("model calls = %d, want 1 (a disconnect is not a cancel)", n)
	}
}

func TestCancel(t *testing.T) {
	w := newWorld(t, fastPaceSlow())
	g := w.start(nil)
	rc := w.raw(g, w.token("gina", "contoso", "contoso-support", time.Hour), nil)
	rc.send(map[string]any{"type": "request", "request_id": "cancel-me-1", "messages": []map[string]string{{"role": "user", "content": "long"}}})
	rc.readUntil("chunk")
	rc.send(map[string]any{"type": "cancel", "request_id": "cancel-me-1"})
	e, chunks := rc.readUntil("error")
	if e["code"] != "cancelled" || e["status"].(float64) != 499 || e["request_id"] != "cancel-me-1" {
		t.Fatalf("got %v, want cancelled", e)
	}
	n := int(e["chunks"].(float64))
	if n < 1 || n >= 300 || !strings.HasPrefix(expected("mock-a", "long", 300), e["text"].(string)) || len(chunks) != n-1 {
		t.Fatalf("cancelled with %d chunks (saw %d more frames), text %q", n, len(chunks), e["text"])
	}
}

// fastPaceSlow streams slowly enough for a cancel to land mid-answer.
func fastPaceSlow() mockmodelOptions {
	return mockmodelOptions{TTFT: time.Millisecond, PerToken: 5 * time.Millisecond}
}
