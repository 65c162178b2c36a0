// Package delayproxy is a TCP proxy that delays every byte by a fixed time
// in each direction, to measure code that calls a network service (such as
// DynamoDB through dynalite on loopback) as if the service were farther
// away: a delay of 2.5 ms makes every round trip 5 ms longer.
//
// The delay is a latency, not a bandwidth limit: bytes read at time t are
// written at t + delay, in order, whatever else is in flight, so pipelined
// and concurrent requests each pay it once per direction.
package delayproxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

const (
	// chunkBytes is the largest read forwarded as one delayed chunk.
	chunkBytes = 32 << 10
	// queueChunks bounds the chunks in flight per direction; a full queue
	// stops reading (TCP back-pressure), so memory stays bounded.
	queueChunks = 256
	// dialTimeout bounds connecting to the upstream.
	dialTimeout = 5 * time.Second
)

// Proxy forwards connections accepted on a loopback port to an upstream
// address with a fixed added delay each way.
type Proxy struct {
	ln       net.Listener
	upstream string
	delay    time.Duration

	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	closed  bool
	stalled chan struct{} // non-nil while stalled: closed by Resume
	wg      sync.WaitGroup
}

// Stall holds every byte in both directions, on every connection, new ones
// included, until Resume: the service seems to hang (as a stalled
// DynamoDB does: no error, no answer). Bytes held are delivered in order
// after Resume. Stalling twice is a no-op.
func (p *Proxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stalled == nil {
		p.stalled = make(chan struct{})
	}
}

// Resume ends a Stall.
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stalled != nil {
		close(p.stalled)
		p.stalled = nil
	}
}

// gate is closed when bytes may flow (nil: not stalled).
func (p *Proxy) gate() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stalled
}

// Start listens on 127.0.0.1 (a free port) and forwards every connection
// to upstream (host:port), delaying each direction by delay.
func Start(upstream string, delay time.Duration) (*Proxy, error) {
	return Listen("127.0.0.1:0", upstream, delay)
}

// Listen is Start on the address listen (host:port; port 0 for a free one).
func Listen(listen, upstream string, delay time.Duration) (*Proxy, error) {
	if delay < 0 {
		return nil, fmt.Errorf("delayproxy: negative delay %v", delay)
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("delayproxy: listen: %w", err)
	}
	p := &Proxy{ln: ln, upstream: upstream, delay: delay, conns: make(map[net.Conn]struct{})}
	p.wg.Go(p.accept)
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Close stops accepting, closes every connection and waits for the
// proxy's goroutines to end. It is safe to call twice.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	if p.stalled != nil {
		close(p.stalled)
		p.stalled = nil
	}
	err := p.ln.Close()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

// Drop closes every open connection without a close handshake, as a
// network failure would, and goes on accepting new ones.
func (p *Proxy) Drop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

func (p *Proxy) accept() {
	for {
		down, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.wg.Go(func() { p.serve(down) })
	}
}

// track registers c for Close; false when the proxy is closed.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, c)
	c.Close()
}

func (p *Proxy) serve(down net.Conn) {
	if !p.track(down) {
		down.Close()
		return
	}
	defer p.untrack(down)
	up, err := net.DialTimeout("tcp", p.upstream, dialTimeout)
	if err != nil {
		return
	}
	if !p.track(up) {
		up.Close()
		return
	}
	defer p.untrack(up)
	var wg sync.WaitGroup
	wg.Go(func() { p.pipe(up, down) })
	wg.Go(func() { p.pipe(down, up) })
	wg.Wait()
}

type chunk struct {
	due  time.Time
	data []byte
}

// pipe copies src to dst, each chunk written delay after it was read.
// At src's end it half-closes dst, so the other direction can finish.
func (p *Proxy) pipe(dst, src net.Conn) {
	q := make(chan chunk, queueChunks)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTimer(0)
		defer t.Stop()
		for c := range q {
			if wait := time.Until(c.due); wait > 0 {
				t.Reset(wait)
				<-t.C
			}
			if g := p.gate(); g != nil {
				<-g
			}
			if _, err := dst.Write(c.data); err != nil {
				src.Close() // stop reading what can no longer be delivered
				for range q {
				}
				return
			}
		}
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
	}()
	for {
		buf := make([]byte, chunkBytes)
		n, err := src.Read(buf)
		if n > 0 {
			q <- chunk{due: time.Now().Add(p.delay), data: buf[:n]}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				dst.Close()
			}
			break
		}
	}
	close(q)
	<-done
}
