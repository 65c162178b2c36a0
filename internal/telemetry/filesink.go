package telemetry

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// FileOptions configure a FileSink. Zero values mean the defaults.
type FileOptions struct {
	// Server names this process in file names (usage-<server>-<n>.json);
	// default "local". Characters other than [A-Za-z0-9._-] become '-'.
	Server string
	// MaxFileBytes rotates a file when the next write would pass it;
	// default 64 MiB.
	MaxFileBytes int64
	// FlushInterval is how often buffered records are written; default 1s.
	FlushInterval time.Duration
	// MaxBufferedRecords and MaxBufferedBytes bound the buffer; a record
	// that does not fit is dropped and counted. Defaults 10,000 and 16 MiB.
	MaxBufferedRecords int
	MaxBufferedBytes   int
	// DropLogInterval is the least time between two log lines about dropped
	// records; default 10s.
	DropLogInterval time.Duration
	// Metrics counts sent, failed and dropped records (sink "file"); nil:
	// not counted.
	Metrics *Metrics
	// Now is the clock that decides when an hour's file is finished;
	// default time.Now.
	Now func() time.Time
}

func (o *FileOptions) defaults() {
	if o.Server == "" {
		o.Server = "local"
	}
	o.Server = sanitizeFileName(o.Server)
	if o.MaxFileBytes <= 0 {
		o.MaxFileBytes = 64 << 20
	}
	if o.FlushInterval <= 0 {
		o.FlushInterval = time.Second
	}
	if o.MaxBufferedRecords <= 0 {
		o.MaxBufferedRecords = 10_000
	}
	if o.MaxBufferedBytes <= 0 {
		o.MaxBufferedBytes = 16 << 20
	}
	if o.DropLogInterval <= 0 {
		o.DropLogInterval = 10 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

func sanitizeFileName(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
			return r
		}
		return '-'
	}, s)
}

// FileSink writes usage records as NDJSON under a directory, in the same
// layout as the S3 prefix: dir/year=YYYY/month=MM/day=DD/hour=HH/
// usage-<server>-<n>.json, the partition taken from each record's TS. A
// file is never reused after it is closed: a new hour or a file reaching
// MaxFileBytes opens the next n (existing files are never overwritten, so
// restarts and several processes sharing the directory are safe). Lines
// are written whole, once per flush.
type FileSink struct {
	dir    string
	o      FileOptions
	logger *zap.Logger
	buf    *recordBuffer

	sent   atomic.Uint64
	failed atomic.Uint64

	mu    sync.Mutex // guards files (Run's goroutine only, but Flush may be called by tests)
	files map[string]*usageFile
}

type usageFile struct {
	f    *os.File
	size int64
}

// NewFileSink returns a sink writing under dir (created when needed).
func NewFileSink(dir string, o FileOptions, logger *zap.Logger) *FileSink {
	o.defaults()
	return &FileSink{
		dir: dir, o: o, logger: logger,
		// Wake early at a quarter of the buffer so bursts never reach the bound
		// between ticks.
		buf:   newRecordBuffer(o.MaxBufferedRecords, o.MaxBufferedBytes, max(1, o.MaxBufferedRecords/4), max(1, o.MaxBufferedBytes/4)),
		files: map[string]*usageFile{},
	}
}

var _ Sink = (*FileSink)(nil)

// Record queues r; it never blocks. When the buffer is full (or Run has
// ended) r is dropped and counted.
func (s *FileSink) Record(r UsageRecord) {
	ok, failed := s.buf.add(r)
	switch {
	case failed:
		s.failed.Add(1)
		s.o.Metrics.UsageRecordsFailed(SinkFile, 1)
	case !ok:
		s.o.Metrics.UsageRecordsDropped(SinkFile, DropBufferFull, 1)
	}
}

// Stats returns the sink's counters.
func (s *FileSink) Stats() SinkStats {
	dropped, _ := s.buf.counts()
	return SinkStats{Sent: s.sent.Load(), Failed: s.failed.Load(), Dropped: dropped, Buffered: s.buf.len()}
}

// Run writes buffered records every FlushInterval (sooner when the buffer
// fills) until ctx ends, then writes what is left, closes the files and
// returns. The error wraps ErrUndelivered when the last records could not be
// written.
func (s *FileSink) Run(ctx context.Context) error {
	t := time.NewTicker(s.o.FlushInterval)
	defer t.Stop()
	lastDropLog := time.Time{}
	for {
		select {
		case <-ctx.Done():
			s.buf.close()
			failed := s.Flush()
			s.closeAll()
			s.logDrops(time.Time{}, &lastDropLog)
			if failed > 0 {
				return fmt.Errorf("file sink: %d records: %w", failed, ErrUndelivered)
			}
			return nil
		case <-t.C:
		case <-s.buf.kick:
		}
		s.Flush()
		s.logDrops(time.Now(), &lastDropLog)
	}
}

func (s *FileSink) logDrops(now time.Time, last *time.Time) {
	if !now.IsZero() && now.Sub(*last) < s.o.DropLogInterval {
		return
	}
	dropped, failed := s.buf.unreported()
	if dropped == 0 && failed == 0 {
		return
	}
	*last = now
	s.logger.Warn("usage_records_dropped", zap.String("sink", SinkFile),
		zap.Uint64("dropped", dropped), zap.Uint64("unencodable", failed),
		zap.Int("max_buffered_records", s.o.MaxBufferedRecords), zap.Int("max_buffered_bytes", s.o.MaxBufferedBytes))
}

// Flush writes everything buffered now and returns how many records could
// not be written (they are counted failed and logged).
func (s *FileSink) Flush() (failed int) {
	lines := s.buf.take()
	s.mu.Lock()
	defer s.mu.Unlock()

	// Group by partition, keeping arrival order within each.
	groups := map[string][][]byte{}
	var order []string
	for _, e := range lines {
		p := partitionPath(e.ts)
		if _, ok := groups[p]; !ok {
			order = append(order, p)
		}
		groups[p] = append(groups[p], e.line)
	}
	for _, p := range order {
		n, err := s.writePartition(p, groups[p])
		s.sent.Add(uint64(n))
		s.o.Metrics.UsageRecordsSent(SinkFile, n)
		if err != nil {
			lost := len(groups[p]) - n
			failed += lost
			s.failed.Add(uint64(lost))
			s.o.Metrics.UsageRecordsFailed(SinkFile, lost)
			s.logger.Error("usage_file_write_failed", zap.String("partition", p), zap.Int("records", lost), zap.Error(err))
		}
	}
	// A file of a past hour that got nothing in this flush is finished:
	// close it (a straggler for that hour opens a new file). The current
	// hour's file stays open across quiet flushes.
	current := partitionPath(s.o.Now())
	for p, f := range s.files {
		if _, ok := groups[p]; !ok && p != current {
			f.f.Close()
			delete(s.files, p)
		}
	}
	return failed
}

// writePartition appends lines to the partition's current file, rotating
// by size; it returns how many lines were written.
func (s *FileSink) writePartition(p string, lines [][]byte) (int, error) {
	written := 0
	for written < len(lines) {
		f := s.files[p]
		if f == nil {
			var err error
			if f, err = s.open(p); err != nil {
				return written, err
			}
			s.files[p] = f
		}
		// Take as many lines as fit in this file (at least one, so a huge
		// line still gets written, alone, to a fresh file).
		var chunk bytes.Buffer
		n := 0
		for _, l := range lines[written:] {
			if (f.size > 0 || n > 0) && f.size+int64(chunk.Len()+len(l)) > s.o.MaxFileBytes {
				break
			}
			chunk.Write(l)
			n++
		}
		if n > 0 {
			if _, err := f.f.Write(chunk.Bytes()); err != nil {
				f.f.Close()
				delete(s.files, p)
				return written, err
			}
			f.size += int64(chunk.Len())
			written += n
		}
		if written < len(lines) { // full: rotate
			f.f.Close()
			delete(s.files, p)
		}
	}
	return written, nil
}

// open creates the next usage-<server>-<n>.json in the partition.
func (s *FileSink) open(p string) (*usageFile, error) {
	dir := filepath.Join(s.dir, filepath.FromSlash(p))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("file sink: %w", err)
	}
	for n := 0; ; n++ {
		name := filepath.Join(dir, fmt.Sprintf("usage-%s-%d.json", s.o.Server, n))
		f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o644)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("file sink: %w", err)
		}
		return &usageFile{f: f}, nil
	}
}

func (s *FileSink) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for p, f := range s.files {
		if err := f.f.Close(); err != nil {
			s.logger.Warn("usage_file_close_failed", zap.String("partition", p), zap.Error(err))
		}
		delete(s.files, p)
	}
}
