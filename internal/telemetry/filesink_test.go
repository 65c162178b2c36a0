package telemetry

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
)

// runSink starts s.Run and returns a stop function that cancels it and
// returns Run's error.
func runSink(t testing.TB, s Sink) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	stopped := false
	stop = func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(10 * time.Second):
			t.Fatal("Run did not return 10s after its context ended")
			return nil
		}
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

func record(id string, ts time.Time) UsageRecord {
	r := sampleRecord()
	r.RequestID, r.TS = id, ts
	return r
}

// readDir returns every usage record under dir keyed by file (relative).
func readDir(t *testing.T, dir string) map[string][]UsageRecord {
	t.Helper()
	out := map[string][]UsageRecord{}
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var r UsageRecord
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				return fmt.Errorf("%s: %q: %w", rel, sc.Text(), err)
			}
			out[filepath.ToSlash(rel)] = append(out[filepath.ToSlash(rel)], r)
		}
		return sc.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestFileSinkLayoutAndShutdownFlush(t *testing.T) {
	dir := t.TempDir()
	m := NewMetrics(nil)
	// An hour-long interval: only the shutdown flush writes.
	s := NewFileSink(dir, FileOptions{Server: "task/1", FlushInterval: time.Hour, Metrics: m}, zaptest.NewLogger(t))
	stop := runSink(t, s)

	h7 := time.Date(2026, 1, 5, 7, 59, 59, 0, time.UTC)
	h8 := time.Date(2026, 1, 5, 8, 0, 1, 0, time.UTC)
	s.Record(record("a", h7))
	s.Record(record("b", h8))
	s.Record(record("c", h7))
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}

	got := readDir(t, dir)
	want := map[string][]string{
		"year=2026/month=01/day=05/hour=07/usage-task-1-0.json": {"a", "c"},
		"year=2026/month=01/day=05/hour=08/usage-task-1-0.json": {"b"},
	}
	if len(got) != len(want) {
		t.Fatalf("files %v, want %v", keys(got), keys(want))
	}
	for f, ids := range want {
		var have []string
		for _, r := range got[f] {
			have = append(have, r.RequestID)
		}
		if strings.Join(have, ",") != strings.Join(ids, ",") {
			t.Errorf("%s holds %v, want %v", f, have, ids)
		}
	}
	if st := s.Stats(); st.Sent != 3 || st.Failed != 0 || st.Dropped != 0 {
		t.Errorf("stats %+v", st)
	}
	// After Run, Record drops (and counts) instead of queueing forever.
	s.Record(record("late", h8))
	if st := s.Stats(); st.Dropped != 1 {
		t.Errorf("after Run: dropped %d, want 1", st.Dropped)
	}
}

func TestFileSinkRotatesBySizeAndNeverOverwrites(t *testing.T) {
	dir := t.TempDir()
	ts := time.Date(2026, 2, 3, 4, 5, 6, 0, time.UTC)
	line, _ := encodeLine(record("r0", ts))
	// Room for 3 lines per file.
	s := NewFileSink(dir, FileOptions{Server: "s", FlushInterval: time.Hour, MaxFileBytes: int64(3*len(line) + 1)}, zaptest.NewLogger(t))
	for i := range 7 {
		s.Record(record(fmt.Sprintf("r%d", i), ts))
	}
	if failed := s.Flush(); failed != 0 {
		t.Fatalf("flush failed %d", failed)
	}
	s.closeAll()
	// A second sink on the same directory (a restart) starts new files.
	s2 := NewFileSink(dir, FileOptions{Server: "s", FlushInterval: time.Hour}, zaptest.NewLogger(t))
	s2.Record(record("after-restart", ts))
	s2.Flush()
	s2.closeAll()

	got := readDir(t, dir)
	p := "year=2026/month=02/day=03/hour=04/"
	want := map[string]int{p + "usage-s-0.json": 3, p + "usage-s-1.json": 3, p + "usage-s-2.json": 1, p + "usage-s-3.json": 1}
	if len(got) != len(want) {
		t.Fatalf("files %v", keys(got))
	}
	for f, n := range want {
		if len(got[f]) != n {
			t.Errorf("%s has %d lines, want %d", f, len(got[f]), n)
		}
	}
	if got[p+"usage-s-3.json"][0].RequestID != "after-restart" {
		t.Errorf("restart wrote into an existing file")
	}
}

func TestFileSinkKeepsCurrentHourFileAcrossQuietFlushes(t *testing.T) {
	dir := t.TempDir()
	now := time.Date(2026, 2, 3, 4, 30, 0, 0, time.UTC)
	s := NewFileSink(dir, FileOptions{Server: "s", Now: func() time.Time { return now }}, zaptest.NewLogger(t))
	past := now.Add(-time.Hour)
	s.Record(record("now-1", now))
	s.Record(record("past-1", past))
	s.Flush()
	s.Flush() // quiet: the past hour's file closes, the current one stays
	s.Record(record("now-2", now))
	s.Flush()
	s.closeAll()
	got := readDir(t, dir)
	if n := len(got["year=2026/month=02/day=03/hour=04/usage-s-0.json"]); n != 2 {
		t.Errorf("current hour file holds %d records, want 2 (files %v)", n, keys(got))
	}
	if n := len(got["year=2026/month=02/day=03/hour=03/usage-s-0.json"]); n != 1 {
		t.Errorf("past hour file holds %d, want 1", n)
	}
}

func TestFileSinkOverflowCountedAndNonBlocking(t *testing.T) {
	m := NewMetrics(nil)
	// Run is not started: nothing drains the buffer.
	s := NewFileSink(t.TempDir(), FileOptions{MaxBufferedRecords: 10, Metrics: m}, zaptest.NewLogger(t))
	done := make(chan struct{})
	go func() {
		for i := range 1000 {
			s.Record(record(fmt.Sprint(i), time.Now()))
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Record blocked on a full buffer")
	}
	if st := s.Stats(); st.Dropped != 990 || st.Buffered != 10 {
		t.Errorf("stats %+v, want 990 dropped, 10 buffered", st)
	}
	if v := counterValue(t, m.usageDropped.WithLabelValues(SinkFile, DropBufferFull)); v != 990 {
		t.Errorf("dropped metric %v, want 990", v)
	}
}

func TestFileSinkWriteErrorCountedFailed(t *testing.T) {
	dir := t.TempDir()
	// A file where the partition directory should be: MkdirAll fails.
	if err := os.WriteFile(filepath.Join(dir, "year=2026"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := NewFileSink(dir, FileOptions{FlushInterval: time.Hour}, zaptest.NewLogger(t))
	stop := runSink(t, s)
	s.Record(record("a", time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)))
	err := stop()
	if !errors.Is(err, ErrUndelivered) {
		t.Fatalf("Run = %v, want ErrUndelivered", err)
	}
	if st := s.Stats(); st.Failed != 1 {
		t.Errorf("stats %+v", st)
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
