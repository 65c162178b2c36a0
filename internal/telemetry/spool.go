package telemetry

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Spool defaults (docs/configuration.md, JETWAY_USAGE_SPOOL_*).
const (
	// DefaultSpoolBytes bounds the spool on disk: 1 GiB holds about 1.5
	// million records (about 700 bytes each), over 4 hours of one task's
	// records at 100 requests/s; the Fargate task's ephemeral storage is
	// sized for it in deploy/terraform.
	DefaultSpoolBytes = 1 << 30
	// DefaultSpoolSegmentBytes is the size at which a segment file is
	// closed and a new one started; the unit of deletion (after Firehose
	// accepted all of it) and of dropping (when the spool is full).
	DefaultSpoolSegmentBytes = 4 << 20
)

// SpoolOptions configure a Spool. Zero values mean the defaults.
type SpoolOptions struct {
	// MaxBytes bounds the segment files' total size; default
	// DefaultSpoolBytes. When a write would pass it, the oldest segments
	// are deleted and their records counted dropped.
	MaxBytes int64
	// SegmentBytes is when a segment is full; default
	// DefaultSpoolSegmentBytes (at most MaxBytes/4, so dropping one
	// segment frees at most a quarter of the spool).
	SegmentBytes int64
}

func (o *SpoolOptions) defaults() {
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultSpoolBytes
	}
	if o.SegmentBytes <= 0 {
		o.SegmentBytes = DefaultSpoolSegmentBytes
	}
	o.SegmentBytes = max(1, min(o.SegmentBytes, o.MaxBytes/4))
}

// Spool is a bounded queue of encoded usage records on local disk: a
// directory of append-only segment files ("0000000000000001.spool", ...),
// one record per line, numbered in the order they were started. Records are
// read back oldest segment first and in the order written; a segment is
// deleted only once every record in it was acknowledged (Ack), so a crash
// or restart re-reads what was not, and a restarted process (OpenSpool on
// the same directory) finds them. Writes are not fsynced: a process exit
// keeps them (the page cache), a host crash may lose the last seconds.
//
// A Spool is safe for concurrent use. Its methods do file I/O under one
// mutex; the Firehose sink calls Append from Record only while Firehose is
// failing (docs/benchmarks.md measures the cost).
type Spool struct {
	dir string
	o   SpoolOptions

	mu      sync.Mutex
	segs    []*spoolSegment // oldest first
	w       *os.File        // appends go here: the last segment, until it is sealed
	next    uint64          // number of the next segment
	bytes   int64           // on disk
	records int             // not yet acknowledged
	head    [][]byte        // the oldest segment's lines, once read
	acked   int             // of head
}

type spoolSegment struct {
	seq     uint64
	bytes   int64
	records int
}

// SpoolCursor names the records a Peek returned, for Ack.
type SpoolCursor struct {
	seq  uint64
	from int
	n    int
}

// Len is how many records the cursor names.
func (c SpoolCursor) Len() int { return c.n }

const spoolExt = ".spool"

// OpenSpool opens (creating it when needed) the spool in dir and finds the
// segments a previous process left. A segment's torn last line (the
// process died mid-write) is cut off; empty segments are deleted.
func OpenSpool(dir string, o SpoolOptions) (*Spool, error) {
	o.defaults()
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("usage spool: %w", err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("usage spool: %w", err)
	}
	s := &Spool{dir: dir, o: o, next: 1}
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), spoolExt)
		seq, err := strconv.ParseUint(name, 10, 64)
		if !ok || err != nil || !e.Type().IsRegular() {
			continue
		}
		seg, err := s.recover(seq)
		if err != nil {
			return nil, err
		}
		if seg != nil {
			s.segs = append(s.segs, seg)
			s.bytes += seg.bytes
			s.records += seg.records
		}
		s.next = max(s.next, seq+1)
	}
	slices.SortFunc(s.segs, func(a, b *spoolSegment) int { return cmp.Compare(a.seq, b.seq) })
	return s, nil
}

// recover measures a segment found on disk, cutting a torn last line; nil
// when it held no whole record (it is deleted).
func (s *Spool) recover(seq uint64) (*spoolSegment, error) {
	path := s.path(seq)
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("usage spool: %w", err)
	}
	whole := bytes.LastIndexByte(data, '\n') + 1
	if whole == 0 {
		return nil, s.remove(seq)
	}
	if whole < len(data) {
		if err := os.Truncate(path, int64(whole)); err != nil {
			return nil, fmt.Errorf("usage spool: %w", err)
		}
	}
	return &spoolSegment{seq: seq, bytes: int64(whole), records: bytes.Count(data[:whole], []byte{'\n'})}, nil
}

func (s *Spool) path(seq uint64) string {
	return filepath.Join(s.dir, fmt.Sprintf("%016d%s", seq, spoolExt))
}

func (s *Spool) remove(seq uint64) error {
	if err := os.Remove(s.path(seq)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("usage spool: %w", err)
	}
	return nil
}

// Dir is the spool's directory.
func (s *Spool) Dir() string { return s.dir }

// MaxBytes is the spool's bound.
func (s *Spool) MaxBytes() int64 { return s.o.MaxBytes }

// Len returns the records not yet acknowledged and the bytes on disk.
func (s *Spool) Len() (records int, bytes int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.records, s.bytes
}

// Append writes lines (each ending in '\n') at the end of the spool. When
// they would not fit under MaxBytes, the oldest segments are deleted first;
// dropped is how many unacknowledged records they held. Lines that cannot
// fit even in an empty spool are not written and count as dropped. On a
// write error nothing is counted written (err; a torn line is cut off by
// the next OpenSpool).
func (s *Spool) Append(lines [][]byte) (dropped int, err error) {
	size := 0
	for _, l := range lines {
		size += len(l)
	}
	if size == 0 {
		return 0, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if int64(size) > s.o.MaxBytes {
		return len(lines), nil
	}
	for s.bytes+int64(size) > s.o.MaxBytes && len(s.segs) > 0 {
		n, err := s.dropOldestLocked()
		dropped += n
		if err != nil {
			return dropped, err
		}
	}
	if s.w == nil || s.segs[len(s.segs)-1].bytes >= s.o.SegmentBytes {
		if err := s.startSegmentLocked(); err != nil {
			return dropped, err
		}
	}
	buf := make([]byte, 0, size)
	for _, l := range lines {
		buf = append(buf, l...)
	}
	if _, err := s.w.Write(buf); err != nil {
		return dropped, fmt.Errorf("usage spool: %w", err)
	}
	seg := s.segs[len(s.segs)-1]
	seg.bytes += int64(size)
	seg.records += len(lines)
	s.bytes += int64(size)
	s.records += len(lines)
	return dropped, nil
}

func (s *Spool) startSegmentLocked() error {
	s.sealLocked()
	seq := s.next
	f, err := os.OpenFile(s.path(seq), os.O_WRONLY|os.O_CREATE|os.O_APPEND|os.O_EXCL, 0o640)
	if err != nil {
		return fmt.Errorf("usage spool: %w", err)
	}
	s.next++
	s.w = f
	s.segs = append(s.segs, &spoolSegment{seq: seq})
	return nil
}

// sealLocked ends appends to the last segment.
func (s *Spool) sealLocked() {
	if s.w != nil {
		_ = s.w.Close() // appends were written; a close error loses nothing read back later
		s.w = nil
	}
}

// dropOldestLocked deletes the oldest segment and returns its
// unacknowledged records. While the oldest is being read (Peek'd, its
// batch perhaps in flight) the next one is deleted instead: a batch that
// then reaches Firehose was not counted dropped, and one that does not is
// still in the spool.
func (s *Spool) dropOldestLocked() (int, error) {
	i := 0
	if s.head != nil && len(s.segs) > 1 {
		i = 1
	}
	seg := s.segs[i]
	if i == len(s.segs)-1 {
		s.sealLocked()
	}
	n := seg.records
	if i == 0 {
		if s.head != nil {
			n -= s.acked
		}
		s.head, s.acked = nil, 0
	}
	s.segs = slices.Delete(s.segs, i, i+1)
	s.bytes -= seg.bytes
	s.records -= n
	return n, s.remove(seg.seq)
}

// Peek returns up to maxRecords records (and maxBytes, but at least one)
// from the front of the spool, in order, without removing them: Ack does,
// once they were delivered. Peek seals the last segment when it is the
// oldest, so what it reads no longer grows.
func (s *Spool) Peek(maxRecords, maxBytes int) ([][]byte, SpoolCursor, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.segs) == 0 {
		return nil, SpoolCursor{}, nil
	}
	seg := s.segs[0]
	if s.head == nil {
		if len(s.segs) == 1 {
			s.sealLocked()
		}
		data, err := os.ReadFile(s.path(seg.seq))
		if err != nil {
			return nil, SpoolCursor{}, fmt.Errorf("usage spool: %w", err)
		}
		s.head = splitLines(data[:min(int64(len(data)), seg.bytes)])
		s.acked = 0
		if len(s.head) != seg.records {
			// Another writer touched the file; believe what is in it.
			s.records += len(s.head) - seg.records
			seg.records = len(s.head)
		}
	}
	rest := s.head[s.acked:]
	n, size := 0, 0
	for n < len(rest) && n < maxRecords && (n == 0 || size+len(rest[n]) <= maxBytes) {
		size += len(rest[n])
		n++
	}
	return rest[:n:n], SpoolCursor{seq: seg.seq, from: s.acked, n: n}, nil
}

// Ack removes the first n records of c (those delivered) from the spool;
// the oldest segment is deleted once all of it was acknowledged. A cursor
// whose records were dropped meanwhile (spool full) acknowledges nothing.
func (s *Spool) Ack(c SpoolCursor, n int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n <= 0 || len(s.segs) == 0 || s.segs[0].seq != c.seq || s.acked != c.from || s.head == nil {
		return nil
	}
	n = min(n, c.n)
	s.acked += n
	s.records -= n
	if s.acked < len(s.head) {
		return nil
	}
	seg := s.segs[0]
	s.segs = s.segs[1:]
	s.bytes -= seg.bytes
	s.head, s.acked = nil, 0
	return s.remove(seg.seq)
}

// Close closes the segment being written; the spool stays on disk.
func (s *Spool) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sealLocked()
	return nil
}

// splitLines cuts data into its lines, each keeping its '\n'.
func splitLines(data []byte) [][]byte {
	var out [][]byte
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			break // a torn line: not a record
		}
		out = append(out, data[:i+1:i+1])
		data = data[i+1:]
	}
	return out
}

// pacer spaces the spool's drain to a rate: after n records it waits
// n/rate, less the time the sending took.
type pacer struct {
	rate float64 // records per second
	next time.Time
}

func newPacer(rate int) *pacer { return &pacer{rate: float64(rate)} }

// wait returns once n more records are within the rate; false when ctx
// ended first.
func (p *pacer) wait(ctx context.Context, n int) bool {
	if n <= 0 {
		return true
	}
	now := time.Now()
	if p.next.Before(now) {
		p.next = now
	}
	p.next = p.next.Add(time.Duration(float64(n) / p.rate * float64(time.Second)))
	d := time.Until(p.next)
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
