package delayproxy_test

import (
	"bytes"
	"crypto/rand"
	"io"
	"net"
	"testing"
	"time"

	"github.com/jetway-gateway/jetway/internal/delayproxy"
)

// echo starts a TCP echo server on loopback.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

func TestForwardsBytesExactlyWithTheDelayEachWay(t *testing.T) {
	const delay = 20 * time.Millisecond
	p, err := delayproxy.Start(echo(t), delay)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}

	// One small round trip pays the delay twice (a lower bound: the
	// machine may be slower, never faster).
	begin := time.Now()
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 4)
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "ping" {
		t.Fatalf("echo = %q, %v", got, err)
	}
	if rtt := time.Since(begin); rtt < 2*delay {
		t.Errorf("round trip %v, want at least %v", rtt, 2*delay)
	}

	// A large payload arrives intact and in order.
	payload := make([]byte, 1<<20)
	_, _ = rand.Read(payload)
	go func() { _, _ = c.Write(payload) }()
	back := make([]byte, len(payload))
	if _, err := io.ReadFull(c, back); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(back, payload) {
		t.Error("payload changed in transit")
	}
}

func TestCloseEndsConnections(t *testing.T) {
	p, err := delayproxy.Start(echo(t), time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	one := make([]byte, 1)
	if _, err := io.ReadFull(c, one); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(one); err == nil {
		t.Error("read after Close succeeded, want the connection closed")
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
}

// TestStallHoldsEveryByteUntilResume: while stalled nothing is answered
// (a read times out), and after Resume the held bytes arrive in order.
func TestStallHoldsEveryByteUntilResume(t *testing.T) {
	p, err := delayproxy.Start(echo(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p.Stall()
	if _, err := c.Write([]byte("held")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if n, err := c.Read(make([]byte, 4)); n != 0 || err == nil {
		t.Fatalf("read %d bytes (%v) while stalled", n, err)
	}
	p.Resume()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got := make([]byte, 4)
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "held" {
		t.Fatalf("after Resume: %q, %v", got, err)
	}
	p.Stall() // Close ends a stall too
}

func TestDropEndsConnectionsAndKeepsAccepting(t *testing.T) {
	p, err := delayproxy.Start(echo(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	roundTrip := func(c net.Conn) error {
		if _, err := c.Write([]byte("x")); err != nil {
			return err
		}
		_, err := io.ReadFull(c, make([]byte, 1))
		return err
	}
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if err := roundTrip(c); err != nil {
		t.Fatal(err)
	}
	p.Drop()
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Error("read after Drop succeeded, want the connection closed")
	}
	again, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatalf("dial after Drop: %v", err)
	}
	defer again.Close()
	_ = again.SetDeadline(time.Now().Add(5 * time.Second))
	if err := roundTrip(again); err != nil {
		t.Errorf("a new connection after Drop: %v", err)
	}
}
