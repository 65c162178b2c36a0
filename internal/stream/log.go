// Package stream owns a request's stream log: sequence numbers for its
// chunks, exactly one terminal outcome, replay of everything after a given
// seq, and retention of finished answers for the resume window. It knows
// nothing of sockets or quotas: producers append, followers read.
package stream

import (
	"container/list"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jetway-gateway/jetway/internal/call"
)

// Log is one request's answer as it is produced. One producer appends
// chunks and finishes it exactly once; any number of followers read it from
// any seq, at their own pace, without ever slowing the producer.
type Log struct {
	// RequestID and Owner (the user's sub) identify the request; BodyHash
	// fingerprints the request body for idempotency conflicts.
	RequestID string
	Owner     string
	BodyHash  string
	// Created is when the request arrived (its first arrival, on whichever
	// server): the time a door's encoding may show.
	Created time.Time

	mu       sync.Mutex
	accepted *Accepted
	chunks   []string
	size     int
	terminal *Terminal
	ended    time.Time
	rejected bool
	wake     chan struct{}
	taken    bool            // a reader holds wake: the next change must close it
	waiters  []chan struct{} // Follow's followers waiting for the next change (see readFor)
	cancel   func()

	prepared      []*prepared  // the events in each door's codec (see Follow)
	preparedBytes atomic.Int64 // their size

	onFinish func(l *Log)              // the registry's, set before the log is shared
	onGrow   func(l *Log, bytes int64) // the registry's: a finished log's prepared events grew
	elem     *list.Element             // the registry's eviction entry, guarded by the registry's lock
}

// NewLog returns an empty log of a request that arrived at created.
func NewLog(owner, requestID, bodyHash string, created time.Time) *Log {
	return &Log{RequestID: requestID, Owner: owner, BodyHash: bodyHash, Created: created, wake: make(chan struct{})}
}

// broadcast wakes every follower waiting on the current wake channel.
// Only a channel a follower took is replaced, so a producer with no one
// waiting allocates nothing per chunk. Callers hold mu.
func (l *Log) broadcast() {
	for i, w := range l.waiters {
		select {
		case w <- struct{}{}:
		default: // it has one already
		}
		l.waiters[i] = nil
	}
	l.waiters = l.waiters[:0]
	if !l.taken {
		return
	}
	close(l.wake)
	l.wake = make(chan struct{})
	l.taken = false
}

// Accept records the accepted event, which followers deliver before any chunk.
func (l *Log) Accept(a *Accepted) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.terminal != nil {
		return
	}
	l.accepted = a
	l.broadcast()
}

// Append adds a chunk (a piece in the core's codec, call.Encode)
// and returns its seq (1, 2, 3, ...). Appends after the
// terminal are ignored and return 0.
func (l *Log) Append(text string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.terminal != nil {
		return 0
	}
	l.chunks = append(l.chunks, text)
	l.size += len(text)
	l.broadcast()
	return len(l.chunks)
}

// Finish records the terminal event. Only the first call wins; it reports
// whether this call was it.
func (l *Log) Finish(t *Terminal, now time.Time) bool {
	l.mu.Lock()
	if l.terminal != nil {
		l.mu.Unlock()
		return false
	}
	l.terminal = t
	l.ended = now
	// The hook has nothing left to stop, and whatever it holds must not
	// stay for the resume window.
	l.cancel = nil
	l.broadcast()
	onFinish, rejected := l.onFinish, l.rejected
	l.mu.Unlock()
	if onFinish != nil && !rejected {
		onFinish(l)
	}
	return true
}

// Memory estimate of a finished log: its events (Accepted.bytes,
// Terminal.bytes) and each door's encodings, a string header per chunk,
// and the structs, map entry and eviction entry around them.
const (
	logFixedBytes = 512
	chunkBytes    = 16
)

// RetainedBytes estimates the log's memory, its encodings for every door
// that followed it included.
func (l *Log) RetainedBytes() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.retainedBytes()
}

// retainedBytes estimates the log's memory. Callers hold mu.
func (l *Log) retainedBytes() int64 {
	n := int64(logFixedBytes + len(l.Owner) + len(l.RequestID) + len(l.BodyHash) + l.size + chunkBytes*cap(l.chunks))
	if l.accepted != nil {
		n += l.accepted.bytes()
	}
	if l.terminal != nil {
		n += l.terminal.bytes()
	}
	return n + l.preparedBytes.Load()
}

// grew hears that the log's prepared events grew by n bytes (shrank, when
// n is negative: compacted once finished); a finished log tells the
// registry, which holds it within its budget.
func (l *Log) grew(n int64) {
	l.preparedBytes.Add(n)
	l.mu.Lock()
	onGrow, finished := l.onGrow, l.terminal != nil && !l.rejected
	l.mu.Unlock()
	if onGrow != nil && finished {
		onGrow(l, n)
	}
}

// Reject finishes a request that was never accepted: followers get the
// error, and the registry forgets the request so it may be sent again.
func (l *Log) Reject(t *Terminal, now time.Time) bool {
	l.mu.Lock()
	l.rejected = true
	l.mu.Unlock()
	return l.Finish(t, now)
}

// Rejected reports whether the log ended without being accepted.
func (l *Log) Rejected() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rejected
}

// Snapshot is what a follower reads: the accepted event (nil until
// accepted), the chunks with seq > after (Chunks[i] has seq First+i), the
// terminal event (nil while running), and a channel closed at the next
// change. Doors read with Follow.
type Snapshot struct {
	Accepted *Accepted
	First    int
	Chunks   []string
	Terminal *Terminal
	Changed  <-chan struct{}
}

// Read returns everything after seq `after`. The returned chunk slice is
// shared with the log and must not be modified.
func (l *Log) Read(after int) Snapshot {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := Snapshot{Accepted: l.accepted, First: after + 1, Terminal: l.terminal, Changed: l.wake}
	l.taken = true
	if after < len(l.chunks) {
		s.Chunks = l.chunks[after:len(l.chunks):len(l.chunks)]
	}
	return s
}

// readFor is Read for a follower of Follow: instead of the wake channel,
// which a change closes and replaces (an allocation per chunk of a paced
// answer), the follower's own channel w, of one, is signalled at the next
// change. Snapshot.Changed is nil.
func (l *Log) readFor(after int, w chan struct{}) Snapshot {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := Snapshot{Accepted: l.accepted, First: after + 1, Terminal: l.terminal}
	if after < len(l.chunks) {
		s.Chunks = l.chunks[after:len(l.chunks):len(l.chunks)]
	}
	if !slices.Contains(l.waiters, w) {
		l.waiters = append(l.waiters, w)
	}
	return s
}

// Text is the answer's text so far (its text chunks, see
// call.Text) and its last seq.
func (l *Log) Text() (string, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	b.Grow(l.size)
	for _, c := range l.chunks {
		b.WriteString(call.Text(c))
	}
	return b.String(), len(l.chunks)
}

// Pieces is every chunk so far (seq i+1 at index i). The slice is shared
// with the log and must not be modified.
func (l *Log) Pieces() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.chunks[:len(l.chunks):len(l.chunks)]
}

// Ended reports when the log finished (zero while running).
func (l *Log) Ended() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ended
}

// SetCancel installs the function that stops the request's generation.
func (l *Log) SetCancel(cancel func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cancel = cancel
}

// Cancel stops the generation if it is still running and reports whether
// there was anything to stop.
func (l *Log) Cancel() bool {
	l.mu.Lock()
	cancel, running := l.cancel, l.terminal == nil
	l.mu.Unlock()
	if cancel != nil && running {
		cancel()
		return true
	}
	return false
}
