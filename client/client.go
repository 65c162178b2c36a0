// Package client is the public Go client of Jetway's wire protocol v1: one
// WebSocket per chat session, requests with client-made ids, chunks
// reassembled in seq order and deduplicated, and automatic reconnection
// (same session id, jittered exponential backoff) that resumes every
// unfinished request from its last seq and re-sends any request the server
// never acknowledged. Tests, the load tool and Go users of Jetway share it.
package client

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/jetway-gateway/jetway/internal/backoff"
	"github.com/jetway-gateway/jetway/internal/protocol"
)

// Options configure a Client. Zero values mean the documented defaults.
type Options struct {
	// URLs of the gateway's WebSocket endpoint (ws://host:8080/v1/ws). A
	// reconnect moves to the next one, so a client can fail over between
	// servers; behind a load balancer one URL is enough.
	URLs []string
	// Token returns a bearer token; it is called on every connect and refresh.
	Token func(ctx context.Context) (string, error)
	// SessionID is the chat session's id; default: a random one, kept across reconnects.
	SessionID string
	// BrowserAuth sends the token as the bearer.<JWT> subprotocol instead of a header.
	BrowserAuth bool
	// Header is added to the upgrade request (for example Origin).
	Header http.Header
	// Dialer defaults to a websocket.Dialer with a 10s handshake timeout.
	Dialer *websocket.Dialer
	// Reconnect turns automatic reconnection on (default off: a lost
	// connection fails the client's unfinished calls with ErrDisconnected).
	Reconnect bool
	// MinBackoff and MaxBackoff bound the jittered exponential backoff; defaults 100ms and 5s.
	MinBackoff, MaxBackoff time.Duration
	// AcceptTimeout: a request with no `accepted` by then is sent again
	// (safe: requests are idempotent). Default 10s; negative turns it off.
	AcceptTimeout time.Duration
	// RetryRefusedFor bounds how long an accepted call keeps resuming after
	// retryable refusals of its resumes (an error frame without `chunks`,
	// for example `busy`): past it the call ends with that error. Default 30s.
	RetryRefusedFor time.Duration
	// RefreshBefore: send an `auth` frame with a fresh token this long before
	// the token expires. Default 1m; negative turns refresh off.
	RefreshBefore time.Duration
	// OnState is told about connection changes ("connected", "disconnected", "draining").
	OnState func(state string, err error)
}

// ErrDisconnected fails unfinished calls when the connection is lost and Reconnect is off.
var ErrDisconnected = errors.New("jetway: disconnected")

// ErrClosed is returned after Close.
var ErrClosed = errors.New("jetway: client closed")

// Client is one chat session.
type Client struct {
	opts      Options
	sessionID string

	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex
	cur      *conn
	ready    Ready
	calls    map[string]*Call
	urlIndex int
	closed   bool
	connWait chan struct{} // closed when cur is set again after a loss

	// Counters over the client's life (the load tool reads them).
	Reconnects    atomic.Int64
	sessionErrors atomic.Int64
	lastClose     atomic.Int64
}

// LastCloseCode is the close code of the last connection the server closed
// with a close frame (0 if none yet).
func (c *Client) LastCloseCode() int { return int(c.lastClose.Load()) }

// SessionErrors counts error frames that named no request.
func (c *Client) SessionErrors() int64 { return c.sessionErrors.Load() }

// Dial connects and waits for the `ready` frame.
func Dial(ctx context.Context, o Options) (*Client, error) {
	if len(o.URLs) == 0 {
		return nil, errors.New("jetway: no URL")
	}
	if o.Token == nil {
		return nil, errors.New("jetway: no Token function")
	}
	if o.MinBackoff <= 0 {
		o.MinBackoff = 100 * time.Millisecond
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 5 * time.Second
	}
	if o.AcceptTimeout == 0 {
		o.AcceptTimeout = 10 * time.Second
	}
	if o.RetryRefusedFor <= 0 {
		o.RetryRefusedFor = 30 * time.Second
	}
	if o.RefreshBefore == 0 {
		o.RefreshBefore = time.Minute
	}
	if o.Dialer == nil {
		o.Dialer = &websocket.Dialer{HandshakeTimeout: 10 * time.Second, Proxy: http.ProxyFromEnvironment}
	}
	c := &Client{opts: o, sessionID: o.SessionID, calls: map[string]*Call{}}
	if c.sessionID == "" {
		c.sessionID = NewRequestID()
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	cn, err := c.connect(ctx)
	if err != nil {
		c.cancel()
		return nil, err
	}
	c.mu.Lock()
	c.cur = cn
	c.mu.Unlock()
	return c, nil
}

// SessionID is the chat session's id.
func (c *Client) SessionID() string { return c.sessionID }

// Ready is the last `ready` frame.
func (c *Client) Ready() Ready {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ready
}

// connect dials the next URL and reads `ready`.
func (c *Client) connect(ctx context.Context) (*conn, error) {
	tok, err := c.opts.Token(ctx)
	if err != nil {
		return nil, fmt.Errorf("jetway: token: %w", err)
	}
	c.mu.Lock()
	raw := c.opts.URLs[c.urlIndex%len(c.opts.URLs)]
	c.mu.Unlock()
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("jetway: url %q: %w", raw, err)
	}
	q := u.Query()
	q.Set("session_id", c.sessionID)
	u.RawQuery = q.Encode()
	h := http.Header{}
	for k, v := range c.opts.Header {
		h[k] = v
	}
	d := *c.opts.Dialer
	if c.opts.BrowserAuth {
		d.Subprotocols = []string{Subprotocol, protocol.BearerPrefix + tok}
	} else {
		d.Subprotocols = []string{Subprotocol}
		h.Set("Authorization", "Bearer "+tok)
	}
	ws, resp, err := d.DialContext(ctx, u.String(), h)
	if err != nil {
		if resp != nil {
			defer resp.Body.Close()
			var body struct {
				Error struct{ Code, Message string } `json:"error"`
			}
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
			_ = json.Unmarshal(b, &body)
			return nil, &HTTPError{Status: resp.StatusCode, Code: body.Error.Code, Message: body.Error.Message}
		}
		return nil, fmt.Errorf("jetway: dial %s: %w", u.Redacted(), err)
	}
	if ws.Subprotocol() != Subprotocol {
		_ = ws.Close()
		return nil, fmt.Errorf("jetway: server selected subprotocol %q, want %q", ws.Subprotocol(), Subprotocol)
	}
	_ = ws.SetReadDeadline(time.Now().Add(30 * time.Second))
	_, data, err := ws.ReadMessage()
	if err != nil {
		_ = ws.Close()
		return nil, fmt.Errorf("jetway: waiting for ready: %w", err)
	}
	_ = ws.SetReadDeadline(time.Time{})
	var r Ready
	if err := json.Unmarshal(data, &r); err != nil || r.Type != protocol.TypeReady {
		_ = ws.Close()
		return nil, fmt.Errorf("jetway: first frame is not ready: %.200s", data)
	}
	cn := &conn{c: c, ws: ws, done: make(chan struct{})}
	c.mu.Lock()
	c.ready = r
	c.mu.Unlock()
	go cn.readLoop()
	c.scheduleRefresh(cn, r.ExpiresAt)
	c.state("connected", nil)
	return cn, nil
}

func (c *Client) state(s string, err error) {
	if c.opts.OnState != nil {
		c.opts.OnState(s, err)
	}
}

// scheduleRefresh sends `auth` with a fresh token before the current one expires.
func (c *Client) scheduleRefresh(cn *conn, expiresAt string) {
	if c.opts.RefreshBefore < 0 {
		return
	}
	exp, err := time.Parse(time.RFC3339, expiresAt)
	if err != nil {
		return
	}
	wait := time.Until(exp) - c.opts.RefreshBefore
	if wait < time.Second {
		wait = time.Until(exp) / 2
	}
	t := time.AfterFunc(wait, func() {
		ctx, cancel := context.WithTimeout(c.ctx, 10*time.Second)
		defer cancel()
		tok, err := c.opts.Token(ctx)
		if err == nil {
			_ = cn.write(protocol.Inbound{Type: protocol.TypeAuth, Token: tok})
		}
	})
	go func() { <-cn.done; t.Stop() }()
}

// Send sends a request and returns its call. The call ends in exactly one
// result (Wait): the server's `done`, or its `error` frame as *Error.
func (c *Client) Send(ctx context.Context, r Request) (*Call, error) {
	if r.RequestID == "" {
		r.RequestID = NewRequestID()
	}
	call := &Call{ID: r.RequestID, req: r, client: c, accepted: make(chan struct{}), done: make(chan struct{}),
		pending: map[int]protocol.Chunk{}, sentAt: time.Now()}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	if _, dup := c.calls[r.RequestID]; dup {
		c.mu.Unlock()
		return nil, fmt.Errorf("jetway: request %s is already in flight on this client", r.RequestID)
	}
	c.calls[r.RequestID] = call
	c.mu.Unlock()
	if err := call.send(0, protocol.TypeRequest); err != nil && !c.opts.Reconnect {
		c.forget(call)
		return nil, err
	}
	call.armAcceptTimer()
	return call, nil
}

// Resume follows a request sent earlier (for example by another process or
// before a restart) from after_seq.
func (c *Client) Resume(ctx context.Context, requestID string, afterSeq int) (*Call, error) {
	call := &Call{ID: requestID, client: c, accepted: make(chan struct{}), done: make(chan struct{}),
		pending: map[int]protocol.Chunk{}, next: afterSeq + 1, resumeOnly: true, sentAt: time.Now()}
	close(call.accepted)
	c.mu.Lock()
	c.calls[requestID] = call
	c.mu.Unlock()
	if err := call.send(afterSeq, protocol.TypeResume); err != nil && !c.opts.Reconnect {
		c.forget(call)
		return nil, err
	}
	return call, nil
}

// Cancel asks the server to stop a request; its call ends with code `cancelled`.
func (c *Client) Cancel(requestID string) error {
	cn := c.current()
	if cn == nil {
		return ErrDisconnected
	}
	return cn.write(protocol.Inbound{Type: protocol.TypeCancel, RequestID: requestID})
}

// Ping sends an application ping; the pong is not surfaced.
func (c *Client) Ping() error {
	cn := c.current()
	if cn == nil {
		return ErrDisconnected
	}
	return cn.write(protocol.Inbound{Type: protocol.TypePing, T: strconv.AppendInt(nil, time.Now().UnixMilli(), 10)})
}

// Drop cuts the current connection without a close handshake, as a network
// fault would (tests and the load tool use it to prove resume).
func (c *Client) Drop() {
	if cn := c.current(); cn != nil {
		_ = cn.ws.UnderlyingConn().Close()
	}
}

// Close ends the session; unfinished calls fail with ErrClosed.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	cn := c.cur
	calls := c.calls
	c.calls = map[string]*Call{}
	c.mu.Unlock()
	c.cancel()
	for _, call := range calls {
		call.finish(nil, ErrClosed)
	}
	if cn != nil {
		_ = cn.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
		_ = cn.ws.Close()
		<-cn.done
	}
	return nil
}

func (c *Client) current() *conn {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cur
}

func (c *Client) forget(call *Call) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.calls[call.ID] == call {
		delete(c.calls, call.ID)
	}
}

func (c *Client) call(id string) *Call {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[id]
}

// lost handles the end of a connection: reconnect and resume, or fail calls.
func (c *Client) lost(cn *conn, err error) {
	c.mu.Lock()
	if c.closed || c.cur != cn {
		c.mu.Unlock()
		if !c.closed {
			c.resumeStranded() // an old (draining) connection ended: its calls continue on cur
		}
		return
	}
	c.cur = nil
	c.connWait = make(chan struct{})
	c.mu.Unlock()
	c.state("disconnected", err)
	if !c.opts.Reconnect {
		c.mu.Lock()
		calls := c.calls
		c.calls = map[string]*Call{}
		c.mu.Unlock()
		for _, call := range calls {
			call.finish(nil, fmt.Errorf("%w: %v", ErrDisconnected, err))
		}
		return
	}
	go c.reconnect()
}

// reconnect dials until it succeeds or the client closes: at once, then
// after jittered exponential waits, uniform in (0, MinBackoff*2^(n-1)]
// before attempt n, at most MaxBackoff.
func (c *Client) reconnect() {
	retry := backoff.Policy{Base: 2 * c.opts.MinBackoff, Max: c.opts.MaxBackoff, Jitter: backoff.Full}
	for attempt := 1; ; attempt++ {
		if retry.Wait(c.ctx, attempt-1) != nil {
			return
		}
		c.mu.Lock()
		c.urlIndex++
		c.mu.Unlock()
		ctx, cancel := context.WithTimeout(c.ctx, 15*time.Second)
		cn, err := c.connect(ctx)
		cancel()
		if err != nil {
			c.state("disconnected", err)
			continue
		}
		c.Reconnects.Add(1)
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			_ = cn.ws.Close()
			return
		}
		c.cur = cn
		if c.connWait != nil {
			close(c.connWait)
			c.connWait = nil
		}
		c.mu.Unlock()
		c.resumeStranded()
		return
	}
}

// resumeStranded asks the current connection for every unfinished call
// that no open connection delivers (its last attempt went on one that
// ended): resume it (re-send it if it was never accepted). A call
// delivered on the current connection, or on a draining one still open,
// is left alone: resuming it there too would only duplicate its chunks.
func (c *Client) resumeStranded() {
	c.mu.Lock()
	calls := make([]*Call, 0, len(c.calls))
	for _, call := range c.calls {
		calls = append(calls, call)
	}
	c.mu.Unlock()
	for _, call := range calls {
		if seen, ok := call.stranded(); ok {
			call.resume(seen)
		}
	}
}

// waitConn returns the current connection, waiting for a reconnect.
func (c *Client) waitConn(ctx context.Context) (*conn, error) {
	for {
		c.mu.Lock()
		cn, wait, closed := c.cur, c.connWait, c.closed
		c.mu.Unlock()
		if closed {
			return nil, ErrClosed
		}
		if cn != nil {
			return cn, nil
		}
		if wait == nil || !c.opts.Reconnect {
			return nil, ErrDisconnected
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// NewRequestID returns a random id valid for requests and sessions.
func NewRequestID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}
