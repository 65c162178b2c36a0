package session

import (
	"errors"
	"sync"
	"time"

	"github.com/jetway-gateway/jetway/internal/protocol"
)

// errQueueFull means the client did not drain its queue in time: a slow consumer.
var errQueueFull = errors.New("send queue full")

// errQueueClosed means the session is over.
var errQueueClosed = errors.New("session closed")

// item is one queued frame, or a close instruction when close is set.
type item struct {
	frame []byte
	close *protocol.Disconnect
}

// sendQueue is a connection's outbound queue, bounded in frames and bytes.
// Producers wait at most the write timeout for room, so a client that stops
// reading is detected, while the model reader (which only appends to the
// stream log) is never slowed.
//
// The queue also runs the connection's single writer: a goroutine started
// by the push that finds the queue idle and ended when it drains the queue,
// so an idle session holds no writer goroutine (nor its stack).
type sendQueue struct {
	maxFrames, maxBytes int
	write               func(*sendQueue) // the writer: calls take until it returns nothing

	mu       sync.Mutex
	items    []item
	bytes    int
	closed   bool
	writerOn bool
	room     chan struct{} // closed and replaced when items leave
	writers  sync.WaitGroup
}

func newSendQueue(maxFrames, maxBytes int, write func(*sendQueue)) *sendQueue {
	return &sendQueue{maxFrames: maxFrames, maxBytes: maxBytes, write: write, room: make(chan struct{})}
}

// push queues a frame, waiting up to timeout for room. A frame larger than
// the byte bound is still accepted into an empty queue.
func (q *sendQueue) push(it item, timeout time.Duration, done <-chan struct{}) error {
	var timer *time.Timer
	for {
		q.mu.Lock()
		if q.closed {
			q.mu.Unlock()
			return errQueueClosed
		}
		n := len(it.frame)
		if it.close != nil || len(q.items) == 0 || (len(q.items) < q.maxFrames && q.bytes+n <= q.maxBytes) {
			q.items = append(q.items, it)
			q.bytes += n
			start := !q.writerOn
			if start {
				q.writerOn = true
				q.writers.Add(1) // under mu, before any shutAndWait can see closed
			}
			q.mu.Unlock()
			if start {
				go func() {
					defer q.writers.Done()
					q.write(q)
				}()
			}
			if timer != nil {
				timer.Stop()
			}
			return nil
		}
		room := q.room
		q.mu.Unlock()
		if timer == nil {
			timer = time.NewTimer(timeout)
		}
		select {
		case <-room:
		case <-timer.C:
			return errQueueFull
		case <-done:
			timer.Stop()
			return errQueueClosed
		}
	}
}

// take removes every queued item into dst. When there is none it returns
// dst empty and the writer must return: the next push starts a new one.
func (q *sendQueue) take(dst []item) []item {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) == 0 {
		q.writerOn = false
		return dst
	}
	dst = append(dst, q.items...)
	clear(q.items)
	q.items = q.items[:0]
	q.bytes = 0
	close(q.room)
	q.room = make(chan struct{})
	return dst
}

// shut refuses every later push.
func (q *sendQueue) shut() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
}

// shutAndWait refuses every later push and waits for the writer to end.
func (q *sendQueue) shutAndWait() {
	q.shut()
	q.writers.Wait()
}
