package telemetry

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"
)

// Sink takes usage records. Record never blocks: when the sink's buffer is
// full the record is dropped and counted (metrics and a rate-limited log
// line). Run delivers buffered records until ctx ends, then makes a final
// bounded flush and returns; call it once.
type Sink interface {
	Record(r UsageRecord)
	Run(ctx context.Context) error
}

// ErrUndelivered is wrapped by Run's error when records were still
// undelivered after the final flush.
var ErrUndelivered = errors.New("usage records undelivered")

// SinkStats are a sink's counters since it was made.
type SinkStats struct {
	Sent     uint64 // written (file) or accepted by Firehose
	Failed   uint64 // given up on after retries, or not encodable
	Dropped  uint64 // refused because the buffer (or the spool) was full or Run had ended
	Buffered int    // waiting in the buffer now
	Spooled  int    // waiting in the spool now (Firehose sink with a spool)
}

// recordBuffer is the bounded, non-blocking queue in front of a sink:
// encoded lines (each ending in '\n'), bounded in count and bytes.
type recordBuffer struct {
	maxRecs  int
	maxBytes int
	// kickRecs/kickBytes: wake Run early when this much is waiting.
	kickRecs  int
	kickBytes int
	kick      chan struct{}

	mu      sync.Mutex
	lines   []bufEntry
	bytes   int
	closed  bool
	dropped uint64 // total
	failed  uint64 // total, encode failures
	// already reported in a log line
	loggedDropped, loggedFailed uint64
}

func newRecordBuffer(maxRecs, maxBytes, kickRecs, kickBytes int) *recordBuffer {
	return &recordBuffer{
		maxRecs: maxRecs, maxBytes: maxBytes,
		kickRecs: kickRecs, kickBytes: kickBytes,
		kick: make(chan struct{}, 1),
	}
}

// bufEntry is an encoded record and its timestamp (the file sink's
// partition).
type bufEntry struct {
	line []byte
	ts   time.Time
}

// encodeLine is a record's wire form: JSON plus a newline. A record
// without a RecordID gets one here, once, so every copy of it (a resend, a
// spooled copy) carries the same id and queries can count it once.
func encodeLine(r UsageRecord) ([]byte, error) {
	if r.RecordID == "" {
		r.RecordID = NewRecordID()
	}
	b, err := json.Marshal(r.line())
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// add queues a record; false when it was dropped (buffer full or closed) or
// could not be encoded (failed reports which).
func (b *recordBuffer) add(r UsageRecord) (ok, failed bool) {
	line, err := encodeLine(r)
	if err != nil {
		b.encodeFailed()
		return false, true
	}
	if b.addLine(line, r.TS) != addOK {
		b.countDropped(1)
		return false, false
	}
	return true, false
}

// addResult is what addLine did with a line.
type addResult int

const (
	addOK     addResult = iota
	addFull             // over a bound: not queued
	addClosed           // Run has ended: not queued
)

// addLine queues an encoded line. A line it does not queue is not counted
// anywhere: the caller drops it (countDropped) or puts it elsewhere.
func (b *recordBuffer) addLine(line []byte, ts time.Time) addResult {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return addClosed
	}
	if len(b.lines)+1 > b.maxRecs || b.bytes+len(line) > b.maxBytes {
		return addFull
	}
	b.lines = append(b.lines, bufEntry{line: line, ts: ts})
	b.bytes += len(line)
	if len(b.lines) >= b.kickRecs || b.bytes >= b.kickBytes {
		select {
		case b.kick <- struct{}{}:
		default:
		}
	}
	return addOK
}

func (b *recordBuffer) countDropped(n int) {
	b.mu.Lock()
	b.dropped += uint64(n)
	b.mu.Unlock()
}

func (b *recordBuffer) encodeFailed() {
	b.mu.Lock()
	b.failed++
	b.mu.Unlock()
}

func (b *recordBuffer) isClosed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closed
}

// take empties the buffer and returns what it held, in arrival order.
func (b *recordBuffer) take() []bufEntry {
	b.mu.Lock()
	defer b.mu.Unlock()
	lines := b.lines
	b.lines, b.bytes = nil, 0
	return lines
}

// requeue puts lines back at the front, in order, ahead of anything that
// arrived meanwhile. They were counted in the buffer before, so the bounds
// are not applied again.
func (b *recordBuffer) requeue(lines [][]byte) {
	if len(lines) == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	front := make([]bufEntry, 0, len(lines)+len(b.lines))
	for _, l := range lines {
		front = append(front, bufEntry{line: l})
		b.bytes += len(l)
	}
	b.lines = append(front, b.lines...)
}

// close makes every later add a drop.
func (b *recordBuffer) close() {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
}

func (b *recordBuffer) len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.lines)
}

// unreported returns the drops and encode failures not yet logged, and
// marks them reported.
func (b *recordBuffer) unreported() (dropped, failed uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	dropped, failed = b.dropped-b.loggedDropped, b.failed-b.loggedFailed
	b.loggedDropped, b.loggedFailed = b.dropped, b.failed
	return dropped, failed
}

func (b *recordBuffer) counts() (dropped, failed uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.dropped, b.failed
}
