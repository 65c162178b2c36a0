package socket

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestSendQueueBoundsFramesAndBytes(t *testing.T) {
	release := make(chan struct{})
	written := make(chan int, 16)
	q := newSendQueue(2, 10, func(q *sendQueue) {
		<-release // a writer stuck on a slow socket
		for {
			batch := q.take(nil)
			if len(batch) == 0 {
				return
			}
			written <- len(batch)
		}
	})
	defer func() { close(release); q.shutAndWait() }()
	never := context.Background()
	push := func(n int) error { return q.push(item{frame: make([]byte, n)}, 20*time.Millisecond, never, false) }
	if err := push(4); err != nil {
		t.Fatalf("first frame: %v", err)
	}
	if err := push(7); !errors.Is(err, errQueueFull) {
		t.Fatalf("4+7 bytes over a 10-byte bound: %v, want errQueueFull", err)
	}
	if err := push(6); err != nil {
		t.Fatalf("4+6 bytes: %v", err)
	}
	if err := push(0); !errors.Is(err, errQueueFull) {
		t.Fatalf("a third frame over a 2-frame bound: %v, want errQueueFull", err)
	}
	if err := q.push(item{close: &DisconnectSlow}, time.Millisecond, never, false); err != nil {
		t.Fatalf("a close always fits: %v", err)
	}
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if err := q.push(item{frame: []byte("x")}, time.Hour, done, false); !errors.Is(err, errQueueClosed) {
		t.Fatalf("push after its context ended: %v, want errQueueClosed", err)
	}
}

func TestSendQueueTakesOversizedFrameWhenEmpty(t *testing.T) {
	got := make(chan int, 4)
	q := newSendQueue(2, 10, func(q *sendQueue) {
		for {
			batch := q.take(nil)
			if len(batch) == 0 {
				return
			}
			for _, it := range batch {
				got <- len(it.frame)
			}
		}
	})
	if err := q.push(item{frame: make([]byte, 100)}, time.Millisecond, nil, false); err != nil {
		t.Fatalf("a frame over the byte bound into an empty queue: %v", err)
	}
	if n := <-got; n != 100 {
		t.Fatalf("wrote %d bytes, want 100", n)
	}
	q.shutAndWait()
	if err := q.push(item{frame: []byte("x")}, time.Millisecond, nil, false); !errors.Is(err, errQueueClosed) {
		t.Fatalf("push after shut: %v", err)
	}
}
