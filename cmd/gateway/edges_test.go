package main

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// Protocol edges: each answer is a clear protocol error, never a silent
// default, a null or a socket left in doubt.
func TestProtocolEdges(t *testing.T) {
	w := newWorld(t, fastPace())
	g := w.start(nil)
	tok := w.token("edge-user", "contoso", "contoso-support", time.Hour)

	t.Run("ping t out of float range", func(t *testing.T) {
		rc := w.raw(g, tok, nil)
		rc.send(`{"type":"ping","t":1e400}`)
		f := rc.read()
		if f["type"] != "error" || f["code"] != "invalid_request" || !strings.Contains(f["message"].(string), "t must be a finite number") {
			t.Fatalf("ping 1e400 answered %v", f)
		}
		rc.send(`{"type":"ping","t":1764540000123}`)
		if f := rc.read(); f["type"] != "pong" || f["t"] != float64(1764540000123) {
			t.Fatalf("ping answered %v", f)
		}
	})

	t.Run("max_tokens 0 is the default, -1 is refused naming the field", func(t *testing.T) {
		rc := w.raw(g, tok, nil)
		rc.send(`{"type":"request","request_id":"max-tokens-neg","max_tokens":-1,"messages":[{"role":"user","content":"hi"}]}`)
		f := rc.read()
		if f["code"] != "invalid_request" || !strings.Contains(f["message"].(string), "max_tokens must be >= 0") {
			t.Fatalf("max_tokens -1 answered %v", f)
		}
		rc.send(`{"type":"request","request_id":"max-tokens-zero","max_tokens":0,"messages":[{"role":"user","content":"hi"}]}`)
		done, before := rc.readUntil("done")
		if len(before) == 0 || before[0]["type"] != "accepted" || done["request_id"] != "max-tokens-zero" {
			t.Fatalf("max_tokens 0: %v then %v", before, done)
		}
	})

	t.Run("invalid UTF-8 closes with 1007", func(t *testing.T) {
		rc := w.raw(g, tok, nil)
		if err := rc.ws.WriteMessage(websocket.TextMessage, []byte("{\"type\":\"ping\",\"t\":\"\xff\xfe\"}")); err != nil {
			t.Fatal(err)
		}
		_ = rc.ws.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, _, err := rc.ws.ReadMessage()
		var ce *websocket.CloseError
		if !errors.As(err, &ce) || ce.Code != websocket.CloseInvalidFramePayloadData {
			t.Fatalf("read after invalid UTF-8: %v, want close 1007", err)
		}
	})

	t.Run("subprotocols without jetway.v1 are refused", func(t *testing.T) {
		d := websocket.Dialer{Subprotocols: []string{"jetway.v2"}, HandshakeTimeout: 5 * time.Second}
		_, resp, err := d.Dial(g.URL(), http.Header{"Authorization": {"Bearer " + tok}})
		if err == nil || resp == nil || resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("dial offering jetway.v2: %v (resp %v)", err, resp)
		}
		body, _ := io.ReadAll(resp.Body)
		if !strings.Contains(string(body), `"invalid_request"`) || !strings.Contains(string(body), "offer jetway.v1") {
			t.Fatalf("refusal body %s", body)
		}
	})

	t.Run("echoed strings are clipped", func(t *testing.T) {
		rc := w.raw(g, tok, nil)
		rc.send(`{"type":"request","request_id":"long-model-1","model":"` + strings.Repeat("m", 50_000) + `","messages":[{"role":"user","content":"hi"}]}`)
		f := rc.read()
		if f["code"] != "model_not_allowed" || len(f["message"].(string)) > 200 {
			t.Fatalf("long model answered %.300v", f)
		}
	})
}

// An idle keep-alive connection is closed on both listeners.
func TestIdleKeepAliveClosed(t *testing.T) {
	w := newWorld(t, fastPace())
	g := w.start(map[string]string{"JETWAY_HTTP_IDLE_TIMEOUT": "300ms"})
	for _, addr := range []string{g.Addr, g.Admin} {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: jetway\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%s: %v", addr, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.Close {
			t.Fatalf("%s: the server did not keep the connection alive, nothing to test", addr)
		}
		// The server must end the idle connection well before this deadline.
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
			t.Fatalf("%s: idle keep-alive connection: %v, want EOF (closed by the server)", addr, err)
		}
	}
}
