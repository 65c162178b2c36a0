package telemetry

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/jetway-gateway/jetway/internal/telemetry/firehosetest"
)

const stream = "jetway-usage"

// fastRetries keeps retry waits in the millisecond range for tests.
func fastRetries(o FirehoseOptions) FirehoseOptions {
	o.BaseBackoff, o.MaxBackoff = time.Millisecond, 5*time.Millisecond
	return o
}

// ids decodes stored records (each must be one JSON object ending in
// '\n') and returns their request ids in arrival order.
func ids(t *testing.T, recs [][]byte) []string {
	t.Helper()
	out := make([]string, 0, len(recs))
	for _, b := range recs {
		if !bytes.HasSuffix(b, []byte("\n")) || bytes.Count(b, []byte("\n")) != 1 {
			t.Fatalf("record is not one newline-terminated line: %q", b)
		}
		var r UsageRecord
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatalf("record is not a usage record: %v", err)
		}
		out = append(out, r.RequestID)
	}
	return out
}

// exactlyOnce fails unless got holds each of want exactly once.
func exactlyOnce(t *testing.T, got []string, want int) {
	t.Helper()
	seen := map[string]int{}
	for _, id := range got {
		seen[id]++
	}
	for i := range want {
		id := fmt.Sprintf("req-%05d", i)
		if seen[id] != 1 {
			t.Errorf("%s delivered %d times", id, seen[id])
		}
	}
	if len(got) != want {
		t.Errorf("%d records delivered, want %d", len(got), want)
	}
}

func recordN(s Sink, n int) {
	for i := range n {
		s.Record(record(fmt.Sprintf("req-%05d", i), time.Now()))
	}
}

func TestFirehosePartialFailureRetriedWithoutLossOrDuplicates(t *testing.T) {
	srv := firehosetest.Start(t)
	m := NewMetrics(nil)
	s := NewFirehoseSink(srv.Client(), stream, fastRetries(FirehoseOptions{FlushInterval: time.Hour}), zaptest.NewLogger(t), m)
	// Records with an odd id fail: all 5 in the first call, then 2 of the 5
	// resent; the third call carries the last 2.
	odd := func(b []byte) bool {
		var r UsageRecord
		_ = json.Unmarshal(b, &r)
		var n int
		fmt.Sscanf(r.RequestID, "req-%d", &n)
		return n%2 == 1
	}
	srv.FailNextRecordsMatching(5+2, odd)
	recordN(s, 10)
	if failed := s.flush(t.Context(), false); failed != 0 {
		t.Fatalf("flush gave up on %d", failed)
	}
	got := ids(t, srv.Records(stream))
	exactlyOnce(t, got, 10)

	calls := srv.Calls()
	if len(calls) != 3 || calls[0].Records != 10 || calls[0].Failed != 5 ||
		calls[1].Records != 5 || calls[1].Failed != 2 || calls[2].Records != 2 || calls[2].Failed != 0 {
		t.Fatalf("calls %+v: want 10 (5 failed), then only those 5 (2 failed), then those 2", calls)
	}
	// The even ones arrived first, in order; the odd ones after.
	if strings.Join(got[:5], ",") != "req-00000,req-00002,req-00004,req-00006,req-00008" {
		t.Errorf("first call stored %v", got[:5])
	}
	if st := s.Stats(); st.Sent != 10 || st.Failed != 0 {
		t.Errorf("stats %+v", st)
	}
	if v := counterValue(t, m.usageSent.WithLabelValues(SinkFirehose)); v != 10 {
		t.Errorf("sent metric %v", v)
	}
}

func TestFirehoseRecordsFailingEveryAttemptAreCountedFailed(t *testing.T) {
	srv := firehosetest.Start(t)
	m := NewMetrics(nil)
	s := NewFirehoseSink(srv.Client(), stream, fastRetries(FirehoseOptions{MaxAttempts: 3}), zaptest.NewLogger(t), m)
	first2 := func(b []byte) bool {
		return bytes.Contains(b, []byte(`"req-00000"`)) || bytes.Contains(b, []byte(`"req-00001"`))
	}
	srv.FailNextRecordsMatching(2+2+2, first2) // records 0 and 1 fail on all 3 attempts
	recordN(s, 5)
	if failed := s.flush(t.Context(), false); failed != 2 {
		t.Fatalf("gave up on %d, want 2", failed)
	}
	if n := len(srv.Calls()); n != 3 {
		t.Errorf("%d calls, want MaxAttempts=3", n)
	}
	exactlyOnce(t, append(ids(t, srv.Records(stream)), "req-00000", "req-00001"), 5)
	if st := s.Stats(); st.Sent != 3 || st.Failed != 2 {
		t.Errorf("stats %+v", st)
	}
	if v := counterValue(t, m.usageFailed.WithLabelValues(SinkFirehose)); v != 2 {
		t.Errorf("failed metric %v", v)
	}
}

func TestFirehoseThrottlingRetried(t *testing.T) {
	srv := firehosetest.Start(t)
	s := NewFirehoseSink(srv.Client(), stream, fastRetries(FirehoseOptions{}), zaptest.NewLogger(t), nil)
	srv.ThrottleNextCalls(2)
	srv.FailNextCalls(1, http.StatusBadRequest, "LimitExceededException")
	srv.FailNextCalls(1, http.StatusServiceUnavailable, "ServiceUnavailableException")
	recordN(s, 20)
	if failed := s.flush(t.Context(), false); failed != 0 {
		t.Fatalf("gave up on %d", failed)
	}
	exactlyOnce(t, ids(t, srv.Records(stream)), 20)
	calls := srv.Calls()
	if len(calls) != 5 {
		t.Fatalf("%d calls, want 4 failed + 1", len(calls))
	}
	for i, want := range []string{"ThrottlingException", "ThrottlingException", "LimitExceededException", "ServiceUnavailableException", ""} {
		if calls[i].ErrorType != want {
			t.Errorf("call %d: %q, want %q", i, calls[i].ErrorType, want)
		}
	}
}

func TestFirehoseNonRetryableCallErrorGivesUpAtOnce(t *testing.T) {
	srv := firehosetest.Start(t)
	s := NewFirehoseSink(srv.Client(), stream, fastRetries(FirehoseOptions{}), zaptest.NewLogger(t), nil)
	srv.FailNextCalls(1, http.StatusBadRequest, "ResourceNotFoundException")
	recordN(s, 4)
	if failed := s.flush(t.Context(), false); failed != 4 {
		t.Fatalf("gave up on %d, want 4", failed)
	}
	if n := len(srv.Calls()); n != 1 {
		t.Errorf("%d calls, want 1", n)
	}
}

// TestFirehoseOverflowCountedAndRecordNeverBlocks stalls the endpoint
// while Run is sending: Record keeps returning, the overflow is counted,
// and once the endpoint recovers everything kept is delivered.
func TestFirehoseOverflowCountedAndRecordNeverBlocks(t *testing.T) {
	fake := firehosetest.New()
	release := make(chan struct{})
	entered := make(chan struct{}, 100)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-release
		fake.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})

	m := NewMetrics(nil)
	s := NewFirehoseSink(firehosetest.NewClient(hs.URL), stream,
		fastRetries(FirehoseOptions{FlushInterval: 10 * time.Millisecond, MaxBufferedRecords: 50}), zaptest.NewLogger(t), m)
	stop := runSink(t, s)

	recordN(s, 5)
	select { // the first batch is now stuck in the endpoint
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("sink never called the endpoint")
	}
	done := make(chan struct{})
	go func() {
		for i := 5; i < 1005; i++ {
			s.Record(record(fmt.Sprintf("req-%05d", i), time.Now()))
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Record blocked while the endpoint was stalled")
	}
	st := s.Stats()
	if st.Dropped != 950 || st.Buffered != 50 {
		t.Fatalf("stats %+v, want 950 dropped and 50 buffered", st)
	}
	if v := counterValue(t, m.usageDropped.WithLabelValues(SinkFirehose, DropBufferFull)); v != 950 {
		t.Errorf("dropped metric %v, want 950", v)
	}
	close(release)
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got := len(fake.Records(stream)); got != 55 {
		t.Errorf("delivered %d, want the 55 kept", got)
	}
}

func TestFirehoseShutdownFlushDeliversEverything(t *testing.T) {
	srv := firehosetest.Start(t)
	// The interval never fires and the buffer never reaches a batch: only
	// the shutdown flush can deliver.
	s := NewFirehoseSink(srv.Client(), stream, fastRetries(FirehoseOptions{FlushInterval: time.Hour}), zaptest.NewLogger(t), nil)
	stop := runSink(t, s)
	recordN(s, 321)
	srv.ThrottleNextCalls(1) // and the first shutdown call is throttled
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	exactlyOnce(t, ids(t, srv.Records(stream)), 321)
}

func TestFirehoseShutdownFlushIsBounded(t *testing.T) {
	srv := firehosetest.Start(t)
	s := NewFirehoseSink(srv.Client(), stream, FirehoseOptions{
		FlushInterval: time.Hour, ShutdownTimeout: 200 * time.Millisecond,
		MaxAttempts: 1000, BaseBackoff: 50 * time.Millisecond, MaxBackoff: 50 * time.Millisecond,
	}, zaptest.NewLogger(t), nil)
	stop := runSink(t, s)
	recordN(s, 3)
	srv.ThrottleNextCalls(1000)
	start := time.Now()
	err := stop()
	if !errors.Is(err, ErrUndelivered) || !strings.Contains(err.Error(), "3 records") {
		t.Fatalf("Run = %v, want 3 records ErrUndelivered", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("shutdown took %v with a 200ms budget", d)
	}
	if st := s.Stats(); st.Failed != 3 {
		t.Errorf("stats %+v", st)
	}
}

func TestFirehoseBatchesAt500Records(t *testing.T) {
	srv := firehosetest.Start(t)
	s := NewFirehoseSink(srv.Client(), stream, FirehoseOptions{FlushInterval: time.Hour, MaxBufferedRecords: 5000}, zaptest.NewLogger(t), nil)
	stop := runSink(t, s)
	recordN(s, 1200)
	// Full batches go at once, without waiting for the (hour-long) interval.
	srv.WaitRecords(t, stream, 1000, 10*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	exactlyOnce(t, ids(t, srv.Records(stream)), 1200)
	total := 0
	for _, c := range srv.Calls() {
		if c.Records > 500 {
			t.Errorf("call with %d records", c.Records)
		}
		total += c.Records
	}
	if total != 1200 || len(srv.Calls()) < 3 {
		t.Errorf("calls %+v", srv.Calls())
	}
}

// TestFirehoseBatchesByBytes checks the byte bound end to end through the
// real client with a small MaxBatchBytes (megabyte-sized JSON is slow under
// -race); TestSplitBatches checks the real 4 MiB bound, and the fake
// endpoint rejects any call over 4 MiB or 500 records.
func TestFirehoseBatchesByBytes(t *testing.T) {
	srv := firehosetest.Start(t)
	s := NewFirehoseSink(srv.Client(), stream, FirehoseOptions{FlushInterval: time.Hour, MaxBatchBytes: 64 << 10}, zaptest.NewLogger(t), nil)
	// Records of ~20 KiB: three fit in 64 KiB, so 7 records take 3 calls.
	pad := strings.Repeat("x", 20<<10)
	for i := range 7 {
		r := record(fmt.Sprintf("req-%05d", i), time.Now())
		r.SessionID = pad
		s.Record(r)
	}
	// A record over Firehose's 1,000 KiB cannot be sent at all.
	tooBig := record("too-big", time.Now())
	tooBig.SessionID = strings.Repeat("y", FirehoseMaxRecordBytes)
	s.Record(tooBig)

	if failed := s.flush(t.Context(), true); failed != 1 {
		t.Fatalf("gave up on %d, want 1 (the oversized record)", failed)
	}
	exactlyOnce(t, ids(t, srv.Records(stream)), 7)
	calls := srv.Calls()
	if len(calls) != 3 || calls[0].Records != 3 || calls[1].Records != 3 || calls[2].Records != 1 {
		t.Fatalf("calls %+v, want 3, 3, 1 records", calls)
	}
	for _, c := range calls {
		if c.Bytes > 64<<10 {
			t.Errorf("call carried %d bytes", c.Bytes)
		}
	}
}

func TestFirehoseOptionDefaultsAreFirehoseLimits(t *testing.T) {
	var o FirehoseOptions
	o.defaults()
	if o.MaxBatchRecords != 500 || o.MaxBatchBytes != 4<<20 || o.FlushInterval != time.Second {
		t.Errorf("defaults %+v", o)
	}
	o = FirehoseOptions{MaxBatchRecords: 10_000, MaxBatchBytes: 64 << 20}
	o.defaults()
	if o.MaxBatchRecords != 500 || o.MaxBatchBytes != 4<<20 {
		t.Errorf("limits not capped: %+v", o)
	}
}

func TestSplitBatches(t *testing.T) {
	line := func(n int) []byte { return bytes.Repeat([]byte("a"), n) }
	var lines [][]byte
	for range 1001 {
		lines = append(lines, line(10))
	}
	b := splitBatches(lines, 500, 4<<20)
	if len(b) != 3 || len(b[0]) != 500 || len(b[1]) != 500 || len(b[2]) != 1 {
		t.Fatalf("by count: %d batches", len(b))
	}
	// By bytes: 3 MiB + 1 MiB fit exactly; the next byte does not.
	lines = [][]byte{line(3 << 20), line(1 << 20), line(1)}
	b = splitBatches(lines, 500, 4<<20)
	if len(b) != 2 || len(b[0]) != 2 || len(b[1]) != 1 {
		t.Fatalf("by bytes: %v batches", len(b))
	}
}
