package client

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/jetway-gateway/jetway/internal/backoff"
	"github.com/jetway-gateway/jetway/internal/protocol"
)

// conn is one WebSocket of the session.
type conn struct {
	c        *Client
	ws       *websocket.Conn
	wmu      sync.Mutex
	done     chan struct{}
	draining atomic.Bool // the server asked this connection to move
}

func (cn *conn) write(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	cn.wmu.Lock()
	defer cn.wmu.Unlock()
	_ = cn.ws.SetWriteDeadline(time.Now().Add(10 * time.Second))
	return cn.ws.WriteMessage(websocket.TextMessage, b)
}

// CloseCode is the close code of the last connection the server closed (0 if none).
func closeCode(err error) int {
	if ce, ok := err.(*websocket.CloseError); ok {
		return ce.Code
	}
	return 0
}

func (cn *conn) readLoop() {
	c := cn.c
	var err error
	defer func() {
		_ = cn.ws.Close()
		close(cn.done)
		c.lost(cn, err)
	}()
	for {
		var data []byte
		_, data, err = cn.ws.ReadMessage()
		if err != nil {
			if code := closeCode(err); code != 0 {
				c.lastClose.Store(int64(code))
			}
			return
		}
		// Every frame names its type and request; a chunk is nothing more.
		var f protocol.Chunk
		if json.Unmarshal(data, &f) != nil {
			continue
		}
		switch f.Type {
		case protocol.TypeAccepted:
			if call := c.call(f.RequestID); call != nil {
				var a Accepted
				_ = json.Unmarshal(data, &a)
				call.onAccepted(a)
			}
		case protocol.TypeChunk:
			if call := c.call(f.RequestID); call != nil {
				call.onChunk(f)
			}
		case protocol.TypeDone:
			if call := c.call(f.RequestID); call != nil {
				var d Done
				_ = json.Unmarshal(data, &d)
				call.onDone(&d)
			}
		case protocol.TypeError:
			if f.RequestID == "" {
				c.sessionErrors.Add(1)
				continue
			}
			if call := c.call(f.RequestID); call != nil {
				var e Error
				_ = json.Unmarshal(data, &e)
				call.onError(&e, cn)
			}
		case protocol.TypeDraining:
			cn.draining.Store(true)
			c.state("draining", nil)
			if c.opts.Reconnect {
				go c.moveAway(cn)
			}
		case protocol.TypeAuthOK, protocol.TypePong, protocol.TypeReady:
		}
	}
}

// moveAway opens a new connection for new work while the draining one
// finishes what it carries.
func (c *Client) moveAway(old *conn) {
	c.mu.Lock()
	if c.cur != old || c.closed {
		c.mu.Unlock()
		return
	}
	c.urlIndex++
	c.mu.Unlock()
	// Waits MinBackoff*2^n after failed attempt n, at most 64*MinBackoff,
	// until the old connection ends first.
	retry := backoff.Policy{Base: 2 * c.opts.MinBackoff, Max: 64 * c.opts.MinBackoff, Jitter: backoff.None}
	wait, stop := context.WithCancel(c.ctx)
	defer stop()
	go func() {
		select {
		case <-old.done: // lost() reconnects
		case <-wait.Done():
		}
		stop()
	}()
	for attempt := 1; ; attempt++ {
		cn, err := c.connect(c.ctx)
		if err == nil {
			c.mu.Lock()
			if c.closed {
				c.mu.Unlock()
				_ = cn.ws.Close()
				return
			}
			if c.cur != old {
				// The old connection ended first and lost() is reconnecting
				// (or already has): this one would be left open, unused.
				c.mu.Unlock()
				_ = cn.ws.Close()
				return
			}
			c.cur = cn
			c.mu.Unlock()
			c.Reconnects.Add(1)
			return
		}
		if retry.Wait(wait, attempt) != nil {
			return
		}
	}
}
