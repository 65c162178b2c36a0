package socket

import (
	"strconv"

	"context"
	"net"
	"testing"
	"time"

	"github.com/jetway-gateway/jetway/internal/call"

	"github.com/jetway-gateway/jetway/internal/stream"
)

// recConn records what reaches the network.
type recConn struct {
	net.Conn  // nil: only Write and SetWriteDeadline are called
	writes    []string
	deadlines []time.Time
}

func (c *recConn) Write(p []byte) (int, error) {
	c.writes = append(c.writes, string(p))
	return len(p), nil
}

func (c *recConn) SetWriteDeadline(t time.Time) error {
	c.deadlines = append(c.deadlines, t)
	return nil
}

func TestBatchConnCoalescesAnOpenBatch(t *testing.T) {
	rec := &recConn{}
	c := &batchConn{Conn: rec}
	t0 := time.Unix(100, 0)

	// Outside a batch every write goes straight through.
	_ = c.SetWriteDeadline(t0)
	_, _ = c.Write([]byte("lone"))
	if len(rec.writes) != 1 || rec.writes[0] != "lone" || len(rec.deadlines) != 1 {
		t.Fatalf("outside a batch: writes %q, deadlines %v", rec.writes, rec.deadlines)
	}

	// Inside one, writes collect and leave in one write, with the last
	// deadline set during the batch.
	c.begin()
	for i, f := range []string{"a", "bb", "ccc"} {
		_ = c.SetWriteDeadline(t0.Add(time.Duration(i+1) * time.Second))
		if n, err := c.Write([]byte(f)); n != len(f) || err != nil {
			t.Fatalf("write in a batch: %d, %v", n, err)
		}
	}
	if len(rec.writes) != 1 {
		t.Fatalf("a batch wrote before its flush: %q", rec.writes)
	}
	if err := c.flush(); err != nil {
		t.Fatal(err)
	}
	if len(rec.writes) != 2 || rec.writes[1] != "abbccc" {
		t.Fatalf("flush wrote %q, want one write abbccc", rec.writes[1:])
	}
	if d := rec.deadlines[len(rec.deadlines)-1]; !d.Equal(t0.Add(3 * time.Second)) {
		t.Fatalf("flush deadline %v, want the last frame's", d)
	}
	// Closed again: straight through; an empty batch writes nothing.
	c.begin()
	if err := c.flush(); err != nil || len(rec.writes) != 2 {
		t.Fatalf("empty batch: %q, %v", rec.writes, err)
	}
	_, _ = c.Write([]byte("after"))
	if rec.writes[2] != "after" {
		t.Fatalf("after the batch: %q", rec.writes)
	}
}

func TestBatchConnFlushesAtItsBound(t *testing.T) {
	rec := &recConn{}
	c := &batchConn{Conn: rec}
	c.begin()
	big := make([]byte, maxBatchBytes/2+1)
	_, _ = c.Write(big)
	_, _ = c.Write(big) // past the bound: out it goes
	_, _ = c.Write([]byte("tail"))
	if len(rec.writes) != 1 || len(rec.writes[0]) != 2*len(big) {
		t.Fatalf("at the bound: %d writes", len(rec.writes))
	}
	_ = c.flush()
	if len(rec.writes) != 2 || rec.writes[1] != "tail" {
		t.Fatalf("after flush: %d writes", len(rec.writes))
	}
}

// A group of chunk frames counts as its frames against the queue's frame
// bound: the bound holds whatever the items carry.
func TestQueueBoundCountsFramesOfGroups(t *testing.T) {
	q := newSendQueue(4, 1<<20, func(*sendQueue) {})
	q.writerOn = true // no writer drains it: the test fills the queue
	for range 2 {
		if err := q.push(item{frame: []byte("x")}, time.Second, nil, false); err != nil {
			t.Fatal(err)
		}
	}
	l := stream.NewLog("u", "req_12345678", "h", time.Time{})
	for _, p := range []string{"x", "y", "a", "b", "c"} {
		l.Append(p)
	}
	var group item
	for b := range l.Follow(context.Background(), textCodec{}, 2) {
		group = item{chunks: b.Chunks}
		break
	}
	if group.count() != 3 {
		t.Fatalf("group of %d frames", group.count())
	}
	if err := q.push(group, 10*time.Millisecond, nil, false); err != errQueueFull {
		t.Fatalf("2 + 3 frames into a queue of 4: %v, want errQueueFull", err)
	}
	got := q.take(nil)
	if len(got) != 2 {
		t.Fatalf("took %d items", len(got))
	}
	if err := q.push(group, time.Second, nil, false); err != nil {
		t.Fatalf("a group into the emptied queue: %v", err)
	}
	if want := "4:b"; string(group.chunks.At(1)) != want {
		t.Fatalf("second frame of the group %s, want %s", group.chunks.At(1), want)
	}
}

// textCodec writes a chunk as its seq and text, and nothing else.
type textCodec struct{}

func (textCodec) NewEncoder(*stream.Log) stream.Encoder { return textEncoder{} }

type textEncoder struct{}

func (textEncoder) Accepted(*stream.Accepted) []byte { return nil }
func (textEncoder) AppendChunk(dst []byte, seq int, p call.Piece) []byte {
	return append(strconv.AppendInt(dst, int64(seq), 10), ":"+p.Text...)
}
func (textEncoder) Terminal(*stream.Terminal, int) []byte { return nil }
