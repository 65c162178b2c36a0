package main

import (
	"bufio"
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// TestRunForwardsUntilCancelled: the command prints its address, forwards
// bytes both ways, and returns when its context ends.
func TestRunForwardsUntilCancelled(t *testing.T) {
	up, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	go func() {
		c, err := up.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = io.Copy(c, c) // echo
	}()
	ctx, cancel := context.WithCancel(context.Background())
	out, w := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--upstream", up.Addr().String(), "--delay", "1ms"}, nil, w)
		w.Close()
	}()
	lines := bufio.NewReader(out)
	addr, err := lines.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	said, err := lines.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = io.Copy(io.Discard, lines) }()
	if want := "forwarding " + strings.TrimSpace(addr) + " to " + up.Addr().String() + ", adding 1ms each way (2ms a round trip)"; !strings.Contains(said, want) {
		t.Errorf("second line %q, want %q", said, want)
	}
	c, err := net.Dial("tcp", strings.TrimSpace(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 4)
	if err := c.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "ping" {
		t.Fatalf("echo through the proxy: %q, %v", got, err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return after its context ended")
	}
}

func TestRunNeedsUpstream(t *testing.T) {
	if err := run(context.Background(), nil, nil, io.Discard); err == nil {
		t.Fatal("run without --upstream succeeded")
	}
}

// --listen picks the address; one already taken is an error naming it.
func TestRunListensWhereTold(t *testing.T) {
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := free.Addr().String()
	free.Close()
	ctx, cancel := context.WithCancel(context.Background())
	out, w := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--upstream", "127.0.0.1:1", "--listen", addr}, nil, w)
		w.Close()
	}()
	lines := bufio.NewReader(out)
	first, err := lines.ReadString('\n')
	if err != nil || strings.TrimSpace(first) != addr {
		t.Fatalf("first line %q (%v), want %s", first, err, addr)
	}
	go func() { _, _ = io.Copy(io.Discard, lines) }()
	if err := run(context.Background(), []string{"--upstream", "127.0.0.1:1", "--listen", addr}, nil, io.Discard); err == nil || !strings.Contains(err.Error(), addr) {
		t.Errorf("a second proxy on %s: %v, want an error naming it", addr, err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return after its context ended")
	}
}
