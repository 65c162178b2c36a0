package telemetry

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/jetway-gateway/jetway/internal/telemetry/firehosetest"
)

func spoolLines(from, n int) [][]byte {
	out := make([][]byte, n)
	for i := range n {
		out[i] = []byte(fmt.Sprintf("{\"n\":%06d}\n", from+i))
	}
	return out
}

func segmentFiles(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*"+spoolExt))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// drainAll peeks and acknowledges until the spool is empty, returning the
// lines in the order read.
func drainAll(t *testing.T, s *Spool, batch int) []string {
	t.Helper()
	var out []string
	for {
		lines, cur, err := s.Peek(batch, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		if len(lines) == 0 {
			return out
		}
		for _, l := range lines {
			out = append(out, string(l))
		}
		if err := s.Ack(cur, cur.Len()); err != nil {
			t.Fatal(err)
		}
	}
}

func TestSpoolReadsBackInOrderAndDeletesAcknowledgedSegments(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenSpool(dir, SpoolOptions{MaxBytes: 1 << 20, SegmentBytes: 100})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 50; i += 5 {
		if dropped, err := s.Append(spoolLines(i, 5)); err != nil || dropped != 0 {
			t.Fatalf("append: dropped %d, %v", dropped, err)
		}
	}
	if n, b := s.Len(); n != 50 || b != 50*13 {
		t.Fatalf("len %d records %d bytes, want 50 and 650", n, b)
	}
	if segs := segmentFiles(t, dir); len(segs) < 5 {
		t.Fatalf("%d segment files for 650 bytes at 100 a segment", len(segs))
	}
	// A partial ack keeps the rest of the segment.
	lines, cur, err := s.Peek(3, 1<<20)
	if err != nil || len(lines) != 3 {
		t.Fatalf("peek: %d lines, %v", len(lines), err)
	}
	if err := s.Ack(cur, 2); err != nil {
		t.Fatal(err)
	}
	got := drainAll(t, s, 7)
	if len(got) != 48 {
		t.Fatalf("read back %d lines, want 48", len(got))
	}
	for i, l := range got {
		if want := string(spoolLines(i+2, 1)[0]); l != want {
			t.Fatalf("line %d = %q, want %q", i, l, want)
		}
	}
	if n, b := s.Len(); n != 0 || b != 0 {
		t.Errorf("after draining: %d records %d bytes", n, b)
	}
	if segs := segmentFiles(t, dir); len(segs) != 0 {
		t.Errorf("segments left after every record was acknowledged: %v", segs)
	}
}

func TestSpoolReopenedFindsRecordsAndCutsTornLine(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenSpool(dir, SpoolOptions{SegmentBytes: 60})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(spoolLines(0, 10)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(spoolLines(10, 10)); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// The process died in the middle of a write.
	segs := segmentFiles(t, dir)
	f, err := os.OpenFile(segs[len(segs)-1], os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(`{"n":0000`); err != nil {
		t.Fatal(err)
	}
	f.Close()

	s2, err := OpenSpool(dir, SpoolOptions{SegmentBytes: 60})
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := s2.Len(); n != 20 {
		t.Fatalf("reopened spool holds %d records, want 20", n)
	}
	if _, err := s2.Append(spoolLines(20, 1)); err != nil {
		t.Fatal(err)
	}
	got := drainAll(t, s2, 500)
	if len(got) != 21 {
		t.Fatalf("read back %d lines, want 21: %q", len(got), got)
	}
	for i, l := range got {
		if want := string(spoolLines(i, 1)[0]); l != want {
			t.Fatalf("line %d = %q, want %q", i, l, want)
		}
	}
}

func TestSpoolFullDropsOldestSegment(t *testing.T) {
	dir := t.TempDir()
	// 13-byte lines; segments of 10 lines; room for 40 lines.
	s, err := OpenSpool(dir, SpoolOptions{MaxBytes: 520, SegmentBytes: 130})
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for i := 0; i < 100; i += 10 {
		d, err := s.Append(spoolLines(i, 10))
		if err != nil {
			t.Fatal(err)
		}
		total += d
	}
	if total != 60 {
		t.Errorf("dropped %d records, want 60 (the 6 oldest segments)", total)
	}
	if _, b := s.Len(); b > 520 {
		t.Errorf("spool holds %d bytes, bound 520", b)
	}
	got := drainAll(t, s, 500)
	if len(got) != 40 || got[0] != string(spoolLines(60, 1)[0]) {
		t.Errorf("kept %d lines from %q, want the newest 40 from n=60", len(got), got[0])
	}
}

// outageOptions: a sink that gives up on a batch quickly, so records reach
// the spool in milliseconds, and drains unpaced.
func outageOptions(sp *Spool) FirehoseOptions {
	return fastRetries(FirehoseOptions{FlushInterval: 5 * time.Millisecond, MaxAttempts: 2, Spool: sp, SpoolDrainRate: 1 << 30,
		ShutdownTimeout: 5 * time.Second})
}

// uniqueRecords decodes stored records, fails on a record_id or request id
// seen twice, and returns the request ids.
func uniqueRecords(t *testing.T, recs [][]byte) map[string]bool {
	t.Helper()
	byRecord := map[string]bool{}
	byRequest := map[string]bool{}
	for _, b := range recs {
		var r UsageRecord
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatalf("not a usage record: %q", b)
		}
		if r.RecordID == "" || byRecord[r.RecordID] || byRequest[r.RequestID] {
			t.Fatalf("record %s (record_id %q) delivered twice or without an id", r.RequestID, r.RecordID)
		}
		byRecord[r.RecordID], byRequest[r.RequestID] = true, true
	}
	return byRequest
}

// TestFirehoseOutageOf30MinutesLosesNothing is issue 30's acceptance test:
// Firehose is down for 30 minutes of load at 100 requests/s (180,000
// records, their ts 10 ms apart: the volume of the outage, compressed into
// the seconds it takes to record them), then back. The 10,000-record
// buffer fills within the first 100 s of that load; the spool takes the
// rest. Afterwards every record is in Firehose exactly once, the spool's
// files are gone, and nothing was counted dropped or failed.
func TestFirehoseOutageOf30MinutesLosesNothing(t *testing.T) {
	const rate, minutes = 100, 30
	n := rate * 60 * minutes
	if testing.Short() {
		n /= 10
	}
	srv := firehosetest.Start(t)
	srv.SetDown(true)
	dir := t.TempDir()
	sp, err := OpenSpool(dir, SpoolOptions{MaxBytes: 512 << 20})
	if err != nil {
		t.Fatal(err)
	}
	m := NewMetrics(nil)
	s := NewFirehoseSink(srv.Client(), stream, outageOptions(sp), zaptest.NewLogger(t), m)
	stop := runSink(t, s)

	start := time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)
	for i := range n {
		s.Record(record(fmt.Sprintf("req-%06d", i), start.Add(time.Duration(i)*time.Second/rate)))
	}
	st := s.Stats()
	if st.Dropped != 0 || st.Failed != 0 {
		t.Fatalf("during the outage: %+v; want nothing dropped or failed", st)
	}
	if st.Spooled < n/2 {
		t.Fatalf("during the outage: %+v; want the records in the spool", st)
	}
	if len(srv.Records(stream)) != 0 {
		t.Fatal("records stored while Firehose was down")
	}
	_, spooledBytes := sp.Len()
	t.Logf("outage: %d records recorded, %d spooled (%d bytes in %d segments)", n, st.Spooled, spooledBytes, len(segmentFiles(t, dir)))

	// Recovery, with some records failing one by one on the way.
	srv.FailNextRecords(300)
	srv.SetDown(false)
	recs := srv.WaitRecords(t, stream, n, 5*time.Minute)
	got := uniqueRecords(t, recs)
	for i := range n {
		if !got[fmt.Sprintf("req-%06d", i)] {
			t.Fatalf("req-%06d never delivered", i)
		}
	}
	if err := stop(); err != nil {
		t.Errorf("Run: %v", err)
	}
	if len(srv.Records(stream)) != n {
		t.Errorf("%d records stored, want %d", len(srv.Records(stream)), n)
	}
	if st := s.Stats(); st.Dropped != 0 || st.Failed != 0 || st.Spooled != 0 || st.Sent != uint64(n) {
		t.Errorf("after recovery: %+v; want %d sent and nothing else", st, n)
	}
	if segs := segmentFiles(t, dir); len(segs) != 0 {
		t.Errorf("segments left after the drain: %v", segs)
	}
	for _, reason := range []string{DropBufferFull, DropSpoolFull, DropSpoolError} {
		if v := counterValue(t, m.usageDropped.WithLabelValues(SinkFirehose, reason)); v != 0 {
			t.Errorf("dropped{reason=%s} = %v", reason, v)
		}
	}
}

// TestFirehoseSpoolOutlivesTheProcess: records spooled while Firehose was
// down are on disk when Run ends (its error says how many); a new sink on
// the same directory (the restarted process) delivers them.
func TestFirehoseSpoolOutlivesTheProcess(t *testing.T) {
	srv := firehosetest.Start(t)
	srv.SetDown(true)
	dir := t.TempDir()
	sp, err := OpenSpool(dir, SpoolOptions{})
	if err != nil {
		t.Fatal(err)
	}
	o := outageOptions(sp)
	o.ShutdownTimeout = 200 * time.Millisecond // Firehose stays down: the final drain gives up
	s := NewFirehoseSink(srv.Client(), stream, o, zaptest.NewLogger(t), nil)
	stop := runSink(t, s)
	recordN(s, 2000)
	if err := stop(); !errors.Is(err, ErrUndelivered) {
		t.Fatalf("Run with Firehose down: %v, want ErrUndelivered", err)
	}
	if n, _ := sp.Len(); n != 2000 {
		t.Fatalf("spool holds %d records after Run, want 2000", n)
	}

	srv.SetDown(false)
	sp2, err := OpenSpool(dir, SpoolOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s2 := NewFirehoseSink(srv.Client(), stream, outageOptions(sp2), zaptest.NewLogger(t), nil)
	stop2 := runSink(t, s2)
	exactlyOnce(t, ids(t, srv.WaitRecords(t, stream, 2000, time.Minute)), 2000)
	if err := stop2(); err != nil {
		t.Errorf("second Run: %v", err)
	}
	if segs := segmentFiles(t, dir); len(segs) != 0 {
		t.Errorf("segments left: %v", segs)
	}
}

// TestFirehoseSpoolFullDropsOldestAndCounts: a spool too small for the
// outage keeps the newest records; the oldest are counted
// dropped{reason=spool_full}, and the rest arrive once.
func TestFirehoseSpoolFullDropsOldestAndCounts(t *testing.T) {
	srv := firehosetest.Start(t)
	srv.SetDown(true)
	sp, err := OpenSpool(t.TempDir(), SpoolOptions{MaxBytes: 256 << 10, SegmentBytes: 32 << 10})
	if err != nil {
		t.Fatal(err)
	}
	m := NewMetrics(nil)
	o := outageOptions(sp)
	o.MaxBufferedRecords = 10
	s := NewFirehoseSink(srv.Client(), stream, o, zaptest.NewLogger(t), m)
	stop := runSink(t, s)
	const n = 3000 // about 2 MB: eight times the spool
	recordN(s, n)
	st := s.Stats()
	dropped := counterValue(t, m.usageDropped.WithLabelValues(SinkFirehose, DropSpoolFull))
	if st.Dropped == 0 || float64(st.Dropped) != dropped {
		t.Fatalf("stats %+v, dropped{spool_full} %v: want the same, above 0", st, dropped)
	}
	if _, b := sp.Len(); b > 256<<10 {
		t.Errorf("spool holds %d bytes, bound %d", b, 256<<10)
	}
	srv.SetDown(false)
	want := n - int(st.Dropped)
	recs := srv.WaitRecords(t, stream, want, time.Minute)
	if err := stop(); err != nil {
		t.Errorf("Run: %v", err)
	}
	got := uniqueRecords(t, srv.Records(stream))
	if len(got) != want {
		t.Errorf("%d records delivered, want %d (%d recorded, %d dropped)", len(got), want, n, st.Dropped)
	}
	// The newest survived.
	if !got[fmt.Sprintf("req-%05d", n-1)] {
		t.Errorf("the newest record was dropped; %d delivered", len(recs))
	}
}

func sampleLine(b *testing.B) []byte {
	line, err := encodeLine(record("req-00000001", time.Now()))
	if err != nil {
		b.Fatal(err)
	}
	return line
}

// BenchmarkSpoolAppend is the cost Record pays per record while Firehose
// is failing: one line appended to the open segment.
func BenchmarkSpoolAppend(b *testing.B) {
	sp, err := OpenSpool(b.TempDir(), SpoolOptions{MaxBytes: 256 << 20})
	if err != nil {
		b.Fatal(err)
	}
	defer sp.Close()
	line := sampleLine(b)
	b.SetBytes(int64(len(line)))
	for b.Loop() {
		if _, err := sp.Append([][]byte{line}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFirehoseRecord compares Record into the buffer (Firehose up)
// with Record into the spool (Firehose down: the spool holds records).
func BenchmarkFirehoseRecord(b *testing.B) {
	for _, spooled := range []bool{false, true} {
		b.Run(fmt.Sprintf("spooled=%v", spooled), func(b *testing.B) {
			sp, err := OpenSpool(b.TempDir(), SpoolOptions{MaxBytes: 1 << 30})
			if err != nil {
				b.Fatal(err)
			}
			defer sp.Close()
			s := NewFirehoseSink(nil, stream, FirehoseOptions{Spool: sp, MaxBufferedRecords: 1 << 30, MaxBufferedBytes: 1 << 40}, zaptest.NewLogger(b), nil)
			if spooled {
				if _, err := sp.Append([][]byte{sampleLine(b)}); err != nil {
					b.Fatal(err)
				}
			}
			r := record("req-00000001", time.Now())
			for b.Loop() {
				s.Record(r)
			}
		})
	}
}

// BenchmarkFirehoseSpoolDrain measures how fast a spool of 50,000 records
// drains into the local Firehose endpoint, unpaced (the final flush's
// rate; the regular drain is paced at SpoolDrainRate): records/s and MB/s.
func BenchmarkFirehoseSpoolDrain(b *testing.B) {
	const n = 50_000
	line := sampleLine(b)
	for b.Loop() {
		b.StopTimer()
		srv := firehosetest.Start(b)
		sp, err := OpenSpool(b.TempDir(), SpoolOptions{})
		if err != nil {
			b.Fatal(err)
		}
		for range n / 500 {
			lines := make([][]byte, 500)
			for i := range lines {
				lines[i] = line
			}
			if _, err := sp.Append(lines); err != nil {
				b.Fatal(err)
			}
		}
		s := NewFirehoseSink(srv.Client(), stream, outageOptions(sp), zaptest.NewLogger(b), nil)
		b.StartTimer()
		start := time.Now()
		stop := runSink(b, s)
		srv.WaitRecords(b, stream, n, 5*time.Minute)
		took := time.Since(start)
		b.StopTimer()
		_ = stop()
		b.ReportMetric(float64(n)/took.Seconds(), "records/s")
		b.ReportMetric(float64(n*len(line))/took.Seconds()/1e6, "MB/s")
		b.StartTimer()
	}
}
