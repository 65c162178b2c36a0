package socket

import (
	"bufio"
	"bytes"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A pong is taken between messages only when gorilla would read it as
// one, whole: anything else is left to gorilla.
func TestTakePongOnlyAWholeClientPong(t *testing.T) {
	mask := []byte{1, 2, 3, 4}
	frame := func(b0, b1 byte, rest ...byte) []byte { return append([]byte{b0, b1}, rest...) }
	for _, c := range []struct {
		name  string
		in    []byte
		taken bool
	}{
		{"empty pong", frame(0x8a, 0x80, mask...), true},
		{"pong with payload", frame(0x8a, 0x83, append(mask, 'a', 'b', 'c')...), true},
		{"pong short of its payload", frame(0x8a, 0x83, append(mask, 'a')...), false},
		{"pong short of its mask", frame(0x8a, 0x80, 1, 2), false},
		{"unmasked pong", frame(0x8a, 0x00, 0, 0, 0, 0), false},
		{"pong with a reserved bit", frame(0xca, 0x80, mask...), false},
		{"pong not final", frame(0x0a, 0x80, mask...), false},
		{"pong over 125 bytes", frame(0x8a, 0xfe, append([]byte{0, 200}, mask...)...), false},
		{"ping", frame(0x89, 0x80, mask...), false},
		{"text", frame(0x81, 0x81, append(mask, 'x')...), false},
	} {
		c.in = append(c.in, 0x81) // a next frame's first byte
		bc := &batchConn{}
		bc.br = bufio.NewReaderSize(bytes.NewReader(c.in), idleReadBuffer)
		_, _ = bc.br.Peek(1)
		if got := bc.takePong(); got != c.taken {
			t.Errorf("%s: taken %v, want %v", c.name, got, c.taken)
		}
		if want := len(c.in); c.taken {
			if n := bc.br.Buffered(); n != 1 {
				t.Errorf("%s: %d bytes left, want the next frame's 1", c.name, n)
			}
		} else if n := bc.br.Buffered(); n != want {
			t.Errorf("%s: %d bytes left, want all %d", c.name, n, want)
		}
	}
}

// await gives the read buffer back, waits without reading, then finds the
// bytes that arrived in the buffer; past the read deadline it returns
// with nothing read.
func TestAwaitWaitsWithoutReading(t *testing.T) {
	if !canPeek {
		t.Skip("no peek on this platform")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	raw, err := server.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	bc := &batchConn{Conn: server, raw: raw}
	bc.br = bufio.NewReaderSize(bc, idleReadBuffer)
	if !bc.idle() {
		t.Fatal("a fresh connection is not idle")
	}
	done := make(chan bool)
	go func() { done <- bc.await() }()
	select {
	case <-done:
		t.Fatal("await returned before any byte arrived")
	case <-time.After(50 * time.Millisecond):
	}
	if _, err := client.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	if !<-done {
		t.Fatal("await read nothing")
	}
	got, _ := bc.br.Peek(bc.br.Buffered())
	if string(got) != "hello" {
		t.Fatalf("buffered %q, want hello", got)
	}
	_, _ = bc.br.Discard(5)

	_ = server.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if bc.await() {
		t.Fatal("await past the deadline read something")
	}
	if _, err := bc.br.Peek(1); err == nil || !strings.Contains(err.Error(), "timeout") {
		t.Fatalf("the read after await: %v, want a timeout", err)
	}
}
