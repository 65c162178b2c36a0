package session

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/jetway-gateway/jetway/internal/auth"
	"github.com/jetway-gateway/jetway/internal/call"
	"github.com/jetway-gateway/jetway/internal/door"
	"github.com/jetway-gateway/jetway/internal/gateway"
	"github.com/jetway-gateway/jetway/internal/protocol"
	"github.com/jetway-gateway/jetway/internal/socket"
	"github.com/jetway-gateway/jetway/internal/stream"
	"github.com/jetway-gateway/jetway/internal/telemetry"
)

// fakeGateway is the session's Gateway as func fields; a nil field answers
// not_found.
type fakeGateway struct {
	submit func(gateway.Caller, gateway.Request) (*stream.Log, int, error)
	resume func(gateway.Caller, string) (*stream.Log, error)
	refuse func(gateway.Caller, gateway.Request, error) error // nil: the refusal as it is
}

var errNoSuchRequest = errors.New("no such request")

// Submit answers at once, so it releases the request (Request.Release)
// as the gateway does when its model call ends.
func (g fakeGateway) Submit(_ context.Context, c gateway.Caller, r gateway.Request) (*stream.Log, int, error) {
	if r.Release != nil {
		defer r.Release()
	}
	if g.submit == nil {
		return nil, 0, errNoSuchRequest
	}
	return g.submit(c, r)
}

func (g fakeGateway) Resume(_ context.Context, c gateway.Caller, id string) (*stream.Log, error) {
	if g.resume == nil {
		return nil, errNoSuchRequest
	}
	return g.resume(c, id)
}

// Rejoin answers as Resume does.
func (g fakeGateway) Rejoin(ctx context.Context, c gateway.Caller, id string) (*stream.Log, error) {
	return g.Resume(ctx, c, id)
}

func (fakeGateway) Cancel(context.Context, gateway.Caller, string) error { return nil }

func (g fakeGateway) Refuse(_ context.Context, c gateway.Caller, r gateway.Request, err error) error {
	if g.refuse == nil {
		return err
	}
	return g.refuse(c, r, err)
}

// fakeVerifier accepts for user u1 the token "good" (valid for an hour) and
// "brief" (valid for 200ms), and for user u2 the token "other".
type fakeVerifier struct{}

func (fakeVerifier) Verify(_ context.Context, token string) (auth.Principal, error) {
	p := auth.Principal{Subject: "u1", Tenant: "t1", App: "a1", ExpiresAt: time.Now().Add(time.Hour)}
	switch token {
	case "good":
	case "brief":
		p.ExpiresAt = time.Now().Add(200 * time.Millisecond)
	case "fixed": // one JWT: the same expiry whenever it is sent
		p.ExpiresAt = time.Unix(4_000_000_000, 0)
	case "other":
		p.Subject = "u2"
	default:
		return auth.Principal{}, auth.ErrBadSignature
	}
	return p, nil
}

// serve starts a hub behind httptest and returns it with its ws:// URL.
func serve(t *testing.T, gw Gateway, logger *zap.Logger, o socket.Options) (*testHub, string) {
	t.Helper()
	if logger == nil {
		logger = zaptest.NewLogger(t)
	}
	h := newHub(fakeVerifier{}, gw, nil, logger, o)
	ts := httptest.NewServer(h)
	t.Cleanup(func() {
		// Runs after the test's sockets are closed (cleanups run last
		// first): wait for their sessions, which log until they end.
		ts.Close()
		deadline := time.Now().Add(10 * time.Second)
		for h.Sessions() > 0 {
			if time.Now().After(deadline) {
				t.Errorf("%d sessions still open 10s after their sockets closed", h.Sessions())
				return
			}
			time.Sleep(5 * time.Millisecond) // poll
		}
	})
	return h, "ws" + strings.TrimPrefix(ts.URL, "http")
}

// dial opens a socket as a real client would and reads ready.
func dial(t *testing.T, url string) *websocket.Conn {
	t.Helper()
	return dialWith(t, url, &websocket.Dialer{Subprotocols: []string{protocol.Subprotocol}, HandshakeTimeout: 5 * time.Second}, "good")
}

func dialWith(t *testing.T, url string, d *websocket.Dialer, token string) *websocket.Conn {
	t.Helper()
	ws, resp, err := d.Dial(url, http.Header{"Authorization": {"Bearer " + token}})
	if err != nil {
		t.Fatalf("dial: %v (%v)", err, resp)
	}
	t.Cleanup(func() { _ = ws.Close() })
	if f := read(t, ws); f["type"] != protocol.TypeReady {
		t.Fatalf("first frame %v, want ready", f)
	}
	return ws
}

func read(t *testing.T, ws *websocket.Conn) map[string]any {
	t.Helper()
	_ = ws.SetReadDeadline(time.Now().Add(5 * time.Second))
	var f map[string]any
	if err := ws.ReadJSON(&f); err != nil {
		t.Fatalf("read: %v", err)
	}
	return f
}

// closeCode reads until the socket ends and returns its close code.
func closeCode(t *testing.T, ws *websocket.Conn) int {
	t.Helper()
	_ = ws.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		if _, _, err := ws.ReadMessage(); err != nil {
			var ce *websocket.CloseError
			if !errors.As(err, &ce) {
				t.Fatalf("socket ended without a close: %v", err)
			}
			return ce.Code
		}
	}
}

func request(id string) map[string]any {
	return map[string]any{"type": "request", "request_id": id,
		"messages": []map[string]string{{"role": "user", "content": "hi"}}}
}

// logOf returns a gateway that answers every request with one log, accepted at once.
func logOf(l *stream.Log) fakeGateway {
	return fakeGateway{submit: func(gateway.Caller, gateway.Request) (*stream.Log, int, error) {
		l.Accept(stream.NewAccepted(call.Accepted{RequestID: l.RequestID}))
		return l, 0, nil
	}}
}

// A client that stops reading is closed (4008 when the close frame still
// fits in the stalled socket, else the connection just ends), never waited on.
func TestSlowConsumerClosed(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	l := stream.NewLog("u1", "slow-request-1", "", time.Now())
	text := strings.Repeat("x", 64<<10)
	_, url := serve(t, logOf(l), zap.New(core), socket.Options{SendQueueFrames: 4, SocketSendBuffer: 4096, WriteTimeout: 200 * time.Millisecond})
	ws := dialWith(t, url, &websocket.Dialer{Subprotocols: []string{protocol.Subprotocol},
		NetDialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetReadBuffer(4096) // a client that stops reading fills this at once
			}
			return c, err
		}}, "good")
	if err := ws.WriteJSON(request("slow-request-1")); err != nil {
		t.Fatal(err)
	}
	// The client reads nothing while the answer grows far past both sockets' buffers.
	for range 128 {
		l.Append(text)
	}
	deadline := time.Now().Add(20 * time.Second)
	for logs.FilterMessage("slow_consumer").Len() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no slow_consumer within 20s")
		}
		time.Sleep(10 * time.Millisecond) // poll
	}
	code := closeCode(t, ws)
	if n := logs.FilterMessage("slow_consumer").Len(); n != 1 {
		t.Fatalf("%d slow_consumer events for one connection, want 1", n) // the writer and a producer may both see it
	}
	if code != socket.DisconnectSlow.Code && code != websocket.CloseAbnormalClosure {
		t.Fatalf("closed with %d, want %d (or 1006 when the close frame did not fit)", code, socket.DisconnectSlow.Code)
	}
}

// A client that answers no ping is closed 1008 after two heartbeats; one
// that does stays open. The heartbeat is short, but not so short that a
// busy machine delays a pong past 2.5 of them (50 ms did).
func TestHeartbeat(t *testing.T) {
	_, url := serve(t, fakeGateway{}, nil, socket.Options{Heartbeat: 300 * time.Millisecond})

	answers := dial(t, url)
	pings := make(chan struct{}, 100)
	answers.SetPingHandler(func(data string) error {
		pings <- struct{}{}
		return answers.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(time.Second))
	})
	go func() {
		for {
			if _, _, err := answers.ReadMessage(); err != nil {
				close(pings)
				return
			}
		}
	}()
	for i := range 8 { // 8 heartbeats: far past the 2.5 a silent client gets
		select {
		case _, ok := <-pings:
			if !ok {
				t.Fatalf("a client answering pings was closed after %d pings", i)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no ping %d", i+1)
		}
	}

	silent := dial(t, url)
	silent.SetPingHandler(func(string) error { return nil }) // reads, but never answers a ping
	if code := closeCode(t, silent); code != socket.DisconnectHeartbeat.Code {
		t.Fatalf("silent client closed with %d, want %d", code, socket.DisconnectHeartbeat.Code)
	}
}

func TestDrainFrameThenGoingAway(t *testing.T) {
	l := stream.NewLog("u1", "drain-request-1", "", time.Now())
	h, url := serve(t, logOf(l), nil, socket.Options{ReconnectAfter: 1500 * time.Millisecond})
	ws := dial(t, url)
	if err := ws.WriteJSON(request("drain-request-1")); err != nil {
		t.Fatal(err)
	}
	if f := read(t, ws); f["type"] != protocol.TypeAccepted {
		t.Fatalf("got %v, want accepted", f)
	}
	h.Drain()
	f := read(t, ws)
	if f["type"] != protocol.TypeDraining || f["reconnect_after_ms"] != 1500.0 {
		t.Fatalf("got %v, want draining with reconnect_after_ms 1500", f)
	}
	// New work is refused on a draining session; the socket stays open.
	if err := ws.WriteJSON(request("drain-request-2")); err != nil {
		t.Fatal(err)
	}
	if f := read(t, ws); f["code"] != protocol.CodeDraining || f["request_id"] != "drain-request-2" {
		t.Fatalf("got %v, want error draining for drain-request-2", f)
	}
	closed := make(chan error, 1)
	go func() { closed <- h.Close(context.Background()) }()
	// The request in flight still finishes before the close.
	l.Append("hello")
	l.Finish(stream.DoneTerminal(call.Done{RequestID: l.RequestID, Chunks: 1, Text: "hello"}), time.Now())
	if f := read(t, ws); f["type"] != protocol.TypeChunk || f["text"] != "hello" {
		t.Fatalf("got %v, want the chunk", f)
	}
	if f := read(t, ws); f["type"] != protocol.TypeDone {
		t.Fatalf("got %v, want done", f)
	}
	if code := closeCode(t, ws); code != socket.DisconnectShutdown.Code {
		t.Fatalf("closed with %d, want %d", code, socket.DisconnectShutdown.Code)
	}
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
}

func TestInvalidFramesKeepTheSocketOpen(t *testing.T) {
	_, url := serve(t, fakeGateway{}, nil, socket.Options{MaxFrameBytes: 1024})
	ws := dial(t, url)
	for _, bad := range []struct {
		kind int
		data string
		id   string
	}{
		{websocket.TextMessage, "not json", ""},
		{websocket.TextMessage, `{"type":"bogus","request_id":"bad-type-1"}`, "bad-type-1"},
		{websocket.TextMessage, `{"type":"request","request_id":"no-messages-1","messages":[]}`, "no-messages-1"},
		{websocket.BinaryMessage, `{"type":"ping"}`, ""},
	} {
		if err := ws.WriteMessage(bad.kind, []byte(bad.data)); err != nil {
			t.Fatal(err)
		}
		f := read(t, ws)
		if f["type"] != protocol.TypeError || f["code"] != protocol.CodeInvalidRequest || f["status"] != 400.0 {
			t.Fatalf("%q: got %v, want error invalid_request 400", bad.data, f)
		}
		if id, _ := f["request_id"].(string); id != bad.id {
			t.Fatalf("%q: request_id %q, want %q", bad.data, id, bad.id)
		}
	}
	if err := ws.WriteJSON(map[string]any{"type": "ping", "t": 7}); err != nil {
		t.Fatal(err)
	}
	if f := read(t, ws); f["type"] != protocol.TypePong || f["t"] != 7.0 {
		t.Fatalf("after the bad frames: %v, want pong", f)
	}
	// Only a frame over the size bound ends the socket (1009).
	big, _ := json.Marshal(map[string]string{"type": "ping", "pad": strings.Repeat("x", 2048)})
	if err := ws.WriteMessage(websocket.TextMessage, big); err != nil {
		t.Fatal(err)
	}
	if code := closeCode(t, ws); code != websocket.CloseMessageTooBig {
		t.Fatalf("closed with %d, want 1009", code)
	}
}

// Refusals before the upgrade are plain HTTP with a JSON error body.
func TestUpgradeRefusals(t *testing.T) {
	_, url := serve(t, fakeGateway{}, nil, socket.Options{MaxConnsPerUser: 1, AllowedOrigins: []string{"https://chat.example"}})
	dial(t, url) // the user's one connection
	for _, tc := range []struct {
		name   string
		url    string
		header http.Header
		status int
		code   string
	}{
		{"no token", url, nil, 401, protocol.CodeUnauthorized},
		{"bad token", url, http.Header{"Authorization": {"Bearer bad"}}, 401, protocol.CodeUnauthorized},
		{"token in the query", url + "?access_token=good", http.Header{"Authorization": {"Bearer good"}}, 401, protocol.CodeUnauthorized},
		{"bad session id", url + "?session_id=x", http.Header{"Authorization": {"Bearer good"}}, 400, protocol.CodeInvalidRequest},
		{"origin", url, http.Header{"Authorization": {"Bearer good"}, "Origin": {"https://evil.example"}}, 403, protocol.CodeForbidden},
		{"over the per-user cap", url, http.Header{"Authorization": {"Bearer good"}}, 429, protocol.CodeRateLimited},
	} {
		d := websocket.Dialer{Subprotocols: []string{protocol.Subprotocol}}
		ws, resp, err := d.Dial(tc.url, tc.header)
		if err == nil {
			_ = ws.Close()
			t.Fatalf("%s: upgraded", tc.name)
		}
		var body struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		if resp == nil || json.NewDecoder(resp.Body).Decode(&body) != nil || resp.StatusCode != tc.status ||
			body.Error.Code != tc.code || body.Error.Message == "" {
			t.Fatalf("%s: %v %+v, want %d %s", tc.name, resp, body, tc.status, tc.code)
		}
		_ = resp.Body.Close()
	}
}

// A token that runs out closes the session with 4001 after an error frame;
// an auth frame with a fresh token for the same user keeps it, another
// user's token closes it.
func TestTokenExpiryAndRefresh(t *testing.T) {
	_, url := serve(t, fakeGateway{}, nil, socket.Options{})
	d := &websocket.Dialer{Subprotocols: []string{protocol.Subprotocol}}

	expires := dialWith(t, url, d, "brief")
	if f := read(t, expires); f["type"] != protocol.TypeError || f["code"] != protocol.CodeUnauthorized {
		t.Fatalf("at expiry: %v, want error unauthorized", f)
	}
	if code := closeCode(t, expires); code != socket.DisconnectTokenExpired.Code {
		t.Fatalf("closed with %d, want %d", code, socket.DisconnectTokenExpired.Code)
	}

	refreshed := dialWith(t, url, d, "brief")
	if err := refreshed.WriteJSON(map[string]string{"type": "auth", "token": "good"}); err != nil {
		t.Fatal(err)
	}
	if f := read(t, refreshed); f["type"] != protocol.TypeAuthOK {
		t.Fatalf("refresh: %v, want auth_ok", f)
	}
	// Past the first token's expiry the session is still open.
	deadline := time.Now().Add(400 * time.Millisecond)
	for time.Now().Before(deadline) {
		if err := refreshed.WriteJSON(map[string]string{"type": "ping"}); err != nil {
			t.Fatal(err)
		}
		if f := read(t, refreshed); f["type"] != protocol.TypePong {
			t.Fatalf("after the refresh: %v, want pong", f)
		}
	}
	if err := refreshed.WriteJSON(map[string]string{"type": "auth", "token": "other"}); err != nil {
		t.Fatal(err)
	}
	if f := read(t, refreshed); f["code"] != protocol.CodeUnauthorized {
		t.Fatalf("another user's token: %v, want error unauthorized", f)
	}
	if code := closeCode(t, refreshed); code != socket.DisconnectTokenRejected.Code {
		t.Fatalf("closed with %d, want %d", code, socket.DisconnectTokenRejected.Code)
	}
}

// A text frame that is not UTF-8 ends the socket with 1007.
func TestInvalidUTF8Closes(t *testing.T) {
	_, url := serve(t, fakeGateway{}, nil, socket.Options{})
	ws := dial(t, url)
	if err := ws.WriteMessage(websocket.TextMessage, []byte("{\"type\":\"ping\",\"t\":\"\xff\"}")); err != nil {
		t.Fatal(err)
	}
	if code := closeCode(t, ws); code != socket.DisconnectInvalidData.Code {
		t.Fatalf("closed with %d, want %d", code, socket.DisconnectInvalidData.Code)
	}
}

// counterValue is the value of a counter series in reg.
func counterValue(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// Bad tokens cost a bounded log volume, whoever sends them: the lines are
// sampled (telemetry.UnauthenticatedLinesPerSecond a second), the metric
// counts every refusal (issue 23: 2,000 in 0.39 s wrote 532 KB). A good
// token is served throughout.
func TestBadTokensHaveBoundedLogVolume(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	reg := prometheus.NewRegistry()
	h := newHub(fakeVerifier{}, fakeGateway{}, telemetry.NewMetrics(reg), zap.New(core), socket.Options{})
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	url := "ws" + strings.TrimPrefix(ts.URL, "http")
	d := &websocket.Dialer{Subprotocols: []string{protocol.Subprotocol}, HandshakeTimeout: 5 * time.Second}
	const n = 300
	start := time.Now()
	for range n {
		_, resp, err := d.Dial(url, http.Header{"Authorization": {"Bearer forged"}})
		if err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("a bad token: %v %v", err, resp)
		}
		resp.Body.Close()
	}
	bound := (int(time.Since(start)/time.Second) + 2) * telemetry.UnauthenticatedLinesPerSecond
	if lines := logs.Len(); lines == 0 || lines > bound {
		t.Fatalf("%d log lines for %d bad tokens, want 1..%d", lines, n, bound)
	}
	for _, l := range logs.All() {
		if l.Message != "upgrade_refused" || l.ContextMap()["error"] == nil {
			t.Fatalf("line %s %v, want upgrade_refused with its cause", l.Message, l.ContextMap())
		}
	}
	if got := counterValue(t, reg, "jetway_unauthenticated_refusals_total", "door", "ws"); got != n {
		t.Fatalf("jetway_unauthenticated_refusals_total = %v, want %d", got, n)
	}
	ws := dialWith(t, url, d, "good")
	if err := ws.WriteJSON(map[string]any{"type": "ping", "t": 1}); err != nil {
		t.Fatal(err)
	}
	if f := read(t, ws); f["type"] != protocol.TypePong {
		t.Fatalf("a good token after the flood: %v", f)
	}
}

// A token re-sent in auth frames is answered each time and logged only
// when it changes the session's expiry (issue 30: each re-sent auth frame
// logged a line).
func TestResentAuthFramesLogOnce(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	_, url := serve(t, newAnswering(), zap.New(core), socket.Options{})
	ws := dialWith(t, url, &websocket.Dialer{Subprotocols: []string{protocol.Subprotocol}}, "fixed")
	for range 200 {
		if err := ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"auth","token":"fixed"}`)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 200 {
		if f := read(t, ws); f["type"] != protocol.TypeAuthOK {
			t.Fatalf("answer %d: %v, want auth_ok", i, f)
		}
	}
	if n := logs.FilterMessage("auth_refreshed").Len(); n != 0 {
		t.Fatalf("%d auth_refreshed lines for 200 re-sent tokens, want 0", n)
	}
}

// testHub is the jetway.v1 door on a hub of its own, as the server mounts it.
type testHub struct {
	*socket.Hub
	http.Handler
}

func newHub(v door.Verifier, gw Gateway, m *telemetry.Metrics, l *zap.Logger, o socket.Options) *testHub {
	h := socket.NewHub(v, m, l, o)
	return &testHub{Hub: h, Handler: h.Handler(New(gw), gateway.DoorWS)}
}
