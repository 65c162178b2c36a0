package session

import (
	"errors"
	"sync"
	"time"
)

// errQueueFull means the client did not drain its queue in time: a slow consumer.
var errQueueFull = errors.New("send queue full")

// errQueueClosed means the session is over.
var errQueueClosed = errors.New("session closed")

// item is one queued frame, or a close instruction when close is set.
type item struct {
	frame []byte
	close *closeReq
}

type closeReq struct {
	code   int
	reason string
}

// sendQueue is a connection's outbound queue, bounded in frames and bytes.
// Producers wait at most the write timeout for room, so a client that stops
// reading is detected, while the model reader (which only appends to the
// stream log) is never slowed.
type sendQueue struct {
	maxFrames, maxBytes int

	mu     sync.Mutex
	items  []item
	bytes  int
	closed bool
	ready  chan struct{} // signalled (cap 1) when items arrive
	room   chan struct{} // closed and replaced when items leave
}

func newSendQueue(maxFrames, maxBytes int) *sendQueue {
	return &sendQueue{maxFrames: maxFrames, maxBytes: maxBytes, ready: make(chan struct{}, 1), room: make(chan struct{})}
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
			q.mu.Unlock()
			select {
			case q.ready <- struct{}{}:
			default:
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

// take removes every queued item into dst.
func (q *sendQueue) take(dst []item) []item {
	q.mu.Lock()
	defer q.mu.Unlock()
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
