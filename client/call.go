package client

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/jetway-gateway/jetway/internal/protocol"
)

// Call is one request's progress and result.
type Call struct {
	ID     string
	req    Request
	client *Client
	sentAt time.Time

	accepted   chan struct{}
	done       chan struct{}
	resumeOnly bool

	mu          sync.Mutex
	acc         *Accepted
	next        int // the next seq expected (last contiguous + 1)
	text        strings.Builder
	pending     map[int]protocol.Chunk // chunks that arrived ahead of a gap
	firstChunk  time.Time
	result      *Done
	err         error
	finished    bool
	stats       Stats
	acceptTimer *time.Timer
	refusedAt   time.Time // first refusal of a resume since the last progress (zero: none)
	on          *conn     // the connection the call's last attempt went on (nil: none yet)
	attempts    int       // attempts sent (request or resume frames); each claims the call
}

// Stats count what arrived for one call, before deduplication.
type Stats struct {
	ChunksReceived int  // chunk frames received, duplicates included
	Duplicates     int  // chunk frames for a seq already delivered
	OutOfOrder     int  // chunk frames that arrived after a gap
	Resends        int  // times the request was sent again (no accepted in time, or not_found on resume)
	Resumes        int  // resume frames sent after reconnects
	Terminals      int  // terminal frames received (replays included)
	Refusals       int  // retryable refusals of a resume of the accepted call (resumed again after retry_after_ms)
	Mismatch       bool // done.text differed from the chunks joined
	// KeptLonger: the terminal error (interrupted) carried fewer chunks than
	// the client had received contiguously; the result holds the client's
	// longer text and seq instead (PROTOCOL.md v1.1: never shrink an answer).
	KeptLonger bool
}

// Accepted is closed when the server acknowledged the request.
func (c *Call) Accepted() <-chan struct{} { return c.accepted }

// Done is closed when the call has its result.
func (c *Call) Done() <-chan struct{} { return c.done }

// AcceptedFrame is the server's accepted frame (nil before).
func (c *Call) AcceptedFrame() *Accepted {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.acc
}

// Stats returns the call's delivery counters.
func (c *Call) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

// Text is the answer reassembled so far (in seq order, no duplicates).
func (c *Call) Text() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.text.String()
}

// LastSeq is the last contiguous seq received.
func (c *Call) LastSeq() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return max(c.next-1, 0)
}

// FirstChunkAt is when the first chunk arrived (zero if none).
func (c *Call) FirstChunkAt() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.firstChunk
}

// SentAt is when the request was first sent.
func (c *Call) SentAt() time.Time { return c.sentAt }

// Wait returns the result: the done frame, or an error (*Error for the
// server's error frame). An interrupted answer (see Interrupted) holds the
// longer of what the server saved and what this call received.
func (c *Call) Wait(ctx context.Context) (*Done, error) {
	select {
	case <-c.done:
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.result, c.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (c *Call) send(afterSeq int, kind string) error { return c.attempt(-1, afterSeq, kind) }

// attempt sends the call on the current connection (waiting for one). A
// call has one attempt in flight at a time: when seen is not -1, the
// attempt goes only if no other went since the caller saw `seen` attempts
// (a resume after a connection ended and a re-send after a move's refusal
// can race; both going would make the server deliver the answer twice).
func (c *Call) attempt(seen, afterSeq int, kind string) error {
	ctx, cancel := context.WithTimeout(c.client.ctx, 30*time.Second)
	defer cancel()
	cn, err := c.client.waitConn(ctx)
	if err != nil {
		return err
	}
	c.mu.Lock()
	if (seen >= 0 && c.attempts != seen) || c.finished {
		c.mu.Unlock()
		return nil
	}
	c.attempts++
	c.on = cn
	c.mu.Unlock()
	if kind == protocol.TypeResume {
		return cn.write(protocol.Inbound{Type: protocol.TypeResume, RequestID: c.ID, AfterSeq: afterSeq})
	}
	return cn.write(c.req.frame(afterSeq))
}

// seen returns how many attempts the call has sent.
func (c *Call) seen() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.attempts
}

// armAcceptTimer re-sends the request if no accepted arrives in time.
func (c *Call) armAcceptTimer() {
	d := c.client.opts.AcceptTimeout
	if d < 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.acc != nil || c.finished {
		return
	}
	c.acceptTimer = time.AfterFunc(d, func() {
		c.mu.Lock()
		waiting := c.acc == nil && !c.finished
		if waiting {
			c.stats.Resends++
		}
		c.mu.Unlock()
		if waiting {
			_ = c.send(0, protocol.TypeRequest)
			c.armAcceptTimer()
		}
	})
}

// stranded reports whether the call's last attempt went on a connection
// that has ended: nothing delivers it now. A call whose first attempt is
// still on its way (Send waits for a connection) is not stranded. It
// returns the attempts seen, for resume.
func (c *Call) stranded() (int, bool) {
	c.mu.Lock()
	on, seen := c.on, c.attempts
	c.mu.Unlock()
	if on == nil {
		return seen, false
	}
	select {
	case <-on.done:
		return seen, true
	default:
		return seen, false
	}
}

// resume continues the call on the current connection, unless another
// attempt went after the caller saw `seen`: a resume of an accepted call,
// or the request again if it was never accepted.
func (c *Call) resume(seen int) {
	c.mu.Lock()
	if c.finished {
		c.mu.Unlock()
		return
	}
	accepted := c.acc != nil || c.resumeOnly
	after := max(c.next-1, 0)
	c.stats.Resumes++
	c.mu.Unlock()
	if accepted {
		_ = c.attempt(seen, after, protocol.TypeResume)
	} else {
		_ = c.attempt(seen, after, protocol.TypeRequest)
	}
}

func (c *Call) onAccepted(a Accepted) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.acc != nil {
		return
	}
	c.acc = &a
	if c.next == 0 {
		c.next = 1
	}
	if c.acceptTimer != nil {
		c.acceptTimer.Stop()
	}
	select {
	case <-c.accepted:
	default:
		close(c.accepted)
	}
}

func (c *Call) onChunk(f protocol.Chunk) {
	seq := f.Seq
	c.mu.Lock()
	c.stats.ChunksReceived++
	if c.next == 0 {
		c.next = 1
	}
	if c.firstChunk.IsZero() {
		c.firstChunk = time.Now()
	}
	c.refusedAt = time.Time{}
	if seq < c.next || c.finished {
		c.stats.Duplicates++
		c.mu.Unlock()
		return
	}
	if seq > c.next {
		if _, dup := c.pending[seq]; dup {
			c.stats.Duplicates++
		} else {
			c.stats.OutOfOrder++
			c.pending[seq] = f
		}
		c.mu.Unlock()
		return
	}
	deliver := []protocol.Chunk{f}
	c.text.WriteString(f.Text)
	c.next++
	for {
		t, ok := c.pending[c.next]
		if !ok {
			break
		}
		delete(c.pending, c.next)
		deliver = append(deliver, t)
		c.text.WriteString(t.Text)
		c.next++
	}
	first := c.next - len(deliver)
	c.mu.Unlock()
	for i, t := range deliver {
		if c.req.OnChunk != nil {
			c.req.OnChunk(first+i, t.Text)
		}
		if c.req.OnChunkFrame != nil {
			c.req.OnChunkFrame(t)
		}
	}
}

func (c *Call) onDone(d *Done) {
	c.mu.Lock()
	c.stats.Terminals++
	if !c.finished && c.text.String() != d.Text {
		c.stats.Mismatch = true
	}
	c.mu.Unlock()
	c.finish(d, nil)
}

func (c *Call) onError(e *Error, from *conn) {
	c.mu.Lock()
	resumeOnly := c.resumeOnly
	accepted := c.acc != nil
	// An accepted request's terminal error always carries `chunks`; an error
	// without it for a call already accepted refused this attempt (a resume
	// the server could not serve now), while the request runs on to its own
	// terminal. Retryable: resume again after retry_after_ms, for a while.
	seen := c.attempts
	if (accepted || resumeOnly) && e.Chunks == nil && e.Retryable && c.client.opts.Reconnect && !c.finished {
		now := time.Now()
		if c.refusedAt.IsZero() {
			c.refusedAt = now
		}
		if now.Sub(c.refusedAt) < c.client.opts.RetryRefusedFor {
			c.stats.Refusals++
			c.mu.Unlock()
			wait := time.Duration(e.RetryAfterMs) * time.Millisecond
			if wait <= 0 {
				wait = c.client.opts.MinBackoff
			}
			time.AfterFunc(wait, func() { c.resume(seen) })
			return
		}
	}
	c.stats.Terminals++
	e = c.keepLonger(e)
	c.mu.Unlock()
	// draining refuses new work on a server that is shutting down (before
	// acceptance, so nothing ran): send it again on the next connection. So
	// does busy on a connection the server asked to move (it has room
	// elsewhere; the draining frame came first).
	moved := e.Code == protocol.CodeBusy && e.Retryable && from != nil && from.draining.Load()
	if (e.Code == protocol.CodeDraining || moved) && !resumeOnly && !accepted && c.client.opts.Reconnect {
		c.mu.Lock()
		c.stats.Resends++
		c.mu.Unlock()
		go c.resendAway(from, seen, e)
		return
	}
	// not_found on a resume means the request never arrived: send it again.
	if e.Code == protocol.CodeNotFound && !resumeOnly && c.client.opts.Reconnect {
		c.mu.Lock()
		c.stats.Resends++
		c.acc = nil
		c.mu.Unlock()
		go func() { _ = c.attempt(seen, 0, protocol.TypeRequest); c.armAcceptTimer() }()
		return
	}
	c.finish(nil, e)
}

// Interrupted returns the terminal error of an interrupted answer: the
// server that owned it died mid-answer. e.Text and e.Chunks are the longest
// contiguous answer known (the server's saved text, or this call's own when
// it received more), e.Retryable is true, and a retry sends the question
// again as a new request (a new RequestID): the interrupted one is final.
func Interrupted(err error) (e *Error, ok bool) {
	if errors.As(err, &e) && e.Code == protocol.CodeInterrupted {
		return e, true
	}
	return nil, false
}

// keepLonger returns the terminal error to hand the caller. An interrupted
// terminal holds what the dead owner saved, which can be less than this
// client already received (PROTOCOL.md v1.1): then the result carries the
// client's longer contiguous text and its last seq, so an answer never
// shrinks. Callers hold c.mu.
func (c *Call) keepLonger(e *Error) *Error {
	held := c.next - 1
	if e.Chunks == nil || held <= *e.Chunks || c.finished {
		return e
	}
	kept := *e
	text := c.text.String()
	kept.Chunks, kept.Text = &held, &text
	c.stats.KeptLonger = true
	return &kept
}

// resendAway re-sends the request once the client has a connection other
// than the draining one; it gives up with the draining error after a while.
// Another attempt since the refusal (a resume once the draining
// connection ended) takes its place.
func (c *Call) resendAway(from *conn, seen int, e *Error) {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if c.seen() != seen {
			return
		}
		if cur := c.client.current(); cur != nil && cur != from {
			_ = c.attempt(seen, 0, protocol.TypeRequest)
			c.armAcceptTimer()
			return
		}
		select {
		case <-c.client.ctx.Done():
			return
		case <-time.After(c.client.opts.MinBackoff):
		}
	}
	c.finish(nil, e)
}

func (c *Call) finish(d *Done, err error) {
	c.mu.Lock()
	if c.finished {
		c.mu.Unlock()
		return
	}
	c.finished = true
	c.result, c.err = d, err
	if c.acceptTimer != nil {
		c.acceptTimer.Stop()
	}
	c.mu.Unlock()
	close(c.done)
	if !errors.Is(err, ErrClosed) {
		c.client.forget(c)
	}
}
