package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// aisdkDoor sends overhead requests to a gateway's AI SDK door (GET
// /v1/ai-sdk, the WebSocketChatTransport wire): one socket per worker,
// one chat per worker, each request a send frame read to its end frame.
// It reads the frames itself, as the transport's cheapest reader would,
// so the client's cost stays as small as the WebSocket client's.
type aisdkDoor struct {
	url    string
	tokens func(worker int) func(context.Context) (string, error)
	model  string
	run    string // this run's chat id prefix

	mu    sync.Mutex
	conns map[int]*websocket.Conn
	sends map[int]int
}

func newAISDKDoor(wsURL string, s *settings, ts *tokenSource, users int) *aisdkDoor {
	return &aisdkDoor{url: strings.TrimSuffix(wsURL, "/v1/ws") + "/v1/ai-sdk", model: s.Model,
		run:    fmt.Sprintf("lt%d", time.Now().UnixNano()%1e9),
		tokens: func(w int) func(context.Context) (string, error) { return ts.forUser(s.user(w%users), w%users) },
		conns:  map[int]*websocket.Conn{}, sends: map[int]int{}}
}

func (d *aisdkDoor) conn(ctx context.Context, worker int) (*websocket.Conn, int, error) {
	d.mu.Lock()
	c, n := d.conns[worker], d.sends[worker]
	d.sends[worker]++
	d.mu.Unlock()
	if c != nil {
		return c, n, nil
	}
	tok, err := d.tokens(worker)(ctx)
	if err != nil {
		return nil, 0, err
	}
	dialer := websocket.Dialer{Subprotocols: []string{"jetway.ai-sdk.v1", "bearer." + tok}, HandshakeTimeout: 10 * time.Second}
	c, resp, err := dialer.DialContext(ctx, d.url, http.Header{})
	if err != nil {
		if resp != nil {
			return nil, 0, fmt.Errorf("ai-sdk door: dial: HTTP %d: %w", resp.StatusCode, err)
		}
		return nil, 0, fmt.Errorf("ai-sdk door: dial: %w", err)
	}
	d.mu.Lock()
	d.conns[worker] = c
	d.mu.Unlock()
	return c, n, nil
}

// ask streams one answer, calling t.text at each text delta.
func (d *aisdkDoor) ask(ctx context.Context, worker int, prompt string, maxTokens int, t *timing) error {
	c, n, err := d.conn(ctx, worker)
	if err != nil {
		return err
	}
	rid := fmt.Sprintf("w%d-%d", worker, n)
	frame, _ := json.Marshal(map[string]any{"type": "send", "requestId": rid, "id": fmt.Sprintf("%s-chat-%d", d.run, worker),
		"trigger": "submit-message", "messages": []map[string]any{{"id": "u" + rid, "role": "user",
			"parts": []map[string]string{{"type": "text", "text": prompt}}}},
		"headers": map[string]string{}, "body": map[string]any{"model": d.model, "max_tokens": maxTokens}})
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetReadDeadline(dl)
	}
	t.start = time.Now()
	if err := c.WriteMessage(websocket.TextMessage, frame); err != nil {
		d.drop(worker)
		return err
	}
	for {
		_, msg, err := c.ReadMessage()
		if err != nil {
			d.drop(worker)
			return fmt.Errorf("ai-sdk door: socket ended before the end frame: %w", err)
		}
		switch {
		case bytes.Contains(msg, []byte(`"chunk":{"type":"text-delta"`)):
			t.text()
		case bytes.HasPrefix(msg, []byte(`{"type":"end"`)):
			return nil
		case bytes.HasPrefix(msg, []byte(`{"type":"error"`)):
			return errors.New("ai-sdk door: error frame: " + string(msg))
		}
	}
}

func (d *aisdkDoor) drop(worker int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if c := d.conns[worker]; c != nil {
		_ = c.Close()
	}
	delete(d.conns, worker)
}

func (d *aisdkDoor) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for w, c := range d.conns {
		_ = c.Close()
		delete(d.conns, w)
	}
}
