package socket

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jetway-gateway/jetway/internal/stream"
)

// errQueueFull means the client did not drain its queue in time: a slow consumer.
var errQueueFull = errors.New("send queue full")

// errQueueClosed means the session is over.
var errQueueClosed = errors.New("session closed")

// item is one queued frame, several frames (a follower's consecutive
// chunks, or a door's frames built for one delivery, written in one
// batch), or a close instruction when close is set.
type item struct {
	frame  []byte
	chunks stream.Chunks // when it has any, frame is unused
	frames [][]byte      // when it has any, frame and chunks are unused
	close  *Disconnect
}

// count is the item's frames, for the queue's frame bound.
func (it item) count() int {
	if n := len(it.frames); n > 0 {
		return n
	}
	if n := it.chunks.Len(); n > 0 {
		return n
	}
	return 1
}

// size is the item's bytes, for the queue's byte bound.
func (it item) size() int {
	n := len(it.frame)
	n += it.chunks.Bytes()
	for _, f := range it.frames {
		n += len(f)
	}
	return n
}

// sendQueue is a connection's outbound queue, bounded in frames and bytes.
// Producers wait at most the write timeout for room, so a client that stops
// reading is detected, while the model reader (which only appends to the
// stream log) is never slowed.
//
// The queue also runs the connection's single writer, started by the push
// that finds the queue idle and ended when it drains the queue, so an idle
// session holds no writer goroutine (nor its stack). A follower delivering
// chunks pushes with inline set and becomes the writer itself: a paced
// token then goes from the stream log to the socket on one goroutine, with
// no goroutine started and woken per token. Other pushes (the reader's
// replies, drain notices, timers) start a writer goroutine, so that they
// never wait on a slow client's socket.
type sendQueue struct {
	maxFrames, maxBytes int
	write               func(*sendQueue) // the writer: calls take until it returns nothing

	mu       sync.Mutex
	items    []item
	frames   int // frames in items
	bytes    int
	closed   bool
	writerOn bool
	room     chan struct{} // made when a push waits for room, closed when items leave
	roomWait bool          // a push waits on room
	writers  sync.WaitGroup

	// batch is the writer's buffer for take, kept between writers so that
	// a writer per paced token allocates none; take hands it over under mu.
	batch []item
}

func newSendQueue(maxFrames, maxBytes int, write func(*sendQueue)) *sendQueue {
	return &sendQueue{maxFrames: maxFrames, maxBytes: maxBytes, write: write}
}

// push queues an item, waiting up to timeout for room, or until ctx (nil:
// none) ends. An item larger than the bounds is still accepted into an
// empty queue. When the push finds no writer running it starts one: on
// the calling goroutine if inline (push returns once the queue is
// drained), else on a new one. ctx is asked for its Done channel only
// when the push waits: an idle session's context never makes one.
func (q *sendQueue) push(it item, timeout time.Duration, ctx context.Context, inline bool) error {
	var timer *time.Timer
	for {
		q.mu.Lock()
		if q.closed {
			q.mu.Unlock()
			return errQueueClosed
		}
		n, c := it.size(), it.count()
		if it.close != nil || len(q.items) == 0 || (q.frames+c <= q.maxFrames && q.bytes+n <= q.maxBytes) {
			q.items = append(q.items, it)
			q.bytes += n
			q.frames += c
			start := !q.writerOn
			if start {
				q.writerOn = true
				q.writers.Add(1) // under mu, before any shutAndWait can see closed
			}
			q.mu.Unlock()
			if timer != nil {
				timer.Stop()
			}
			if start {
				if inline {
					q.runWriter(true)
				} else {
					go q.runWriter(false)
				}
			}
			return nil
		}
		if q.room == nil {
			q.room = make(chan struct{})
		}
		room := q.room
		q.roomWait = true
		q.mu.Unlock()
		if timer == nil {
			timer = time.NewTimer(timeout)
		}
		var done <-chan struct{}
		if ctx != nil {
			done = ctx.Done()
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

func (q *sendQueue) runWriter(inline bool) {
	defer q.writers.Done()
	q.write(q)
	if !inline {
		q.trim()
	}
}

// trim lets the queue's buffers go when no writer runs and nothing is
// queued, after a writer of its own goroutine (a reply, a notice: rare):
// an idle session then holds none. A follower writing inline (a paced
// token's writer) keeps them for the next token.
func (q *sendQueue) trim() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.writerOn && len(q.items) == 0 {
		q.items, q.batch = nil, nil
	}
}

// take removes every queued item into dst. When there is none it returns
// dst empty and the writer must return: the next push starts a new one.
func (q *sendQueue) take(dst []item) []item {
	q.mu.Lock()
	defer q.mu.Unlock()
	if dst == nil {
		dst, q.batch = q.batch, nil
	}
	if len(q.items) == 0 {
		q.writerOn = false
		q.batch = dst[:0]
		return dst
	}
	dst = append(dst, q.items...)
	clear(q.items)
	q.items = q.items[:0]
	q.bytes, q.frames = 0, 0
	if q.roomWait {
		close(q.room)
		q.room = nil
		q.roomWait = false
	}
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
