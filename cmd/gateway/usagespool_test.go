package main

import (
	"context"
	"encoding/json"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/jetway-gateway/jetway/internal/mockmodel"
	"github.com/jetway-gateway/jetway/internal/telemetry"
	"github.com/jetway-gateway/jetway/internal/telemetry/firehosetest"
)

// TestUsageSpoolSIGTERMDrain: a gateway process whose Firehose is down
// spools its usage records; on SIGTERM its drain tries to flush the spool
// and, Firehose still down, logs what it left on disk (usage_spool_left:
// records and bytes). The next process on the same spool (a restarted
// container on the task's storage) finds it and delivers every record to
// Firehose exactly once, then drains with nothing left.
func TestUsageSpoolSIGTERMDrain(t *testing.T) {
	w := newWorld(t, mockmodel.Options{TTFT: time.Millisecond, PerToken: time.Millisecond, Tokens: 5})
	fh := firehosetest.Start(t)
	fh.SetDown(true)
	const stream, n = "jetway-usage-spool", 6
	env := map[string]string{
		"JETWAY_FIREHOSE_STREAM":    stream,
		"AWS_ENDPOINT_URL_FIREHOSE": fh.URL,
		"JETWAY_USAGE_SPOOL_DIR":    t.TempDir(),
	}
	first := w.startProcess(env)
	c := w.dial(first.gw, "spool-user", nil)
	for i := range n {
		req := ask("spool")
		req.RequestID = fmt.Sprintf("usage-spool-%d", i)
		call, err := c.Send(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := waitCall(t, call, 20*time.Second); err != nil {
			t.Fatalf("%s: %v", req.RequestID, err)
		}
	}
	// The sink gives a batch up after its 5 attempts (about 2 s of
	// backoff) and spools it.
	deadline := time.Now().Add(30 * time.Second)
	for metricValue(t, first.Admin, "jetway_usage_spool_records") < n {
		if time.Now().After(deadline) {
			t.Fatalf("spool holds %v records after 30s, want %d", metricValue(t, first.Admin, "jetway_usage_spool_records"), n)
		}
		time.Sleep(50 * time.Millisecond) // polling /metrics with a deadline
	}
	c.Close()
	first.signal(syscall.SIGTERM)
	if code := first.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("first gateway exited %d", code)
	}
	left := first.logs.Find("usage_spool_left", "")
	if len(left) != 1 || left[0]["records"] != float64(n) || left[0]["bytes"].(float64) <= 0 {
		t.Fatalf("usage_spool_left lines %v, want one with records %d and its bytes", left, n)
	}
	if got := len(fh.Records(stream)); got != 0 {
		t.Fatalf("%d records stored while Firehose was down", got)
	}

	fh.SetDown(false)
	second := w.startProcess(env)
	recs := fh.WaitRecords(t, stream, n, 30*time.Second)
	if found := second.logs.Await("usage_spool_found", "", 1, 5*time.Second); len(found) != 1 || found[0]["records"] != float64(n) {
		t.Errorf("usage_spool_found lines %v, want one with records %d", found, n)
	}
	second.signal(syscall.SIGTERM)
	if code := second.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("second gateway exited %d", code)
	}
	if left := second.logs.Find("usage_spool_left", ""); len(left) != 0 {
		t.Errorf("second gateway left records in the spool: %v", left)
	}
	seen := map[string]bool{}
	for _, b := range fh.Records(stream) {
		var r telemetry.UsageRecord
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatal(err)
		}
		if seen[r.RecordID] || r.RecordID == "" {
			t.Errorf("record %s (record_id %q) delivered twice or without an id", r.RequestID, r.RecordID)
		}
		seen[r.RecordID] = true
	}
	if len(recs) != n || len(fh.Records(stream)) != n {
		t.Errorf("%d records in Firehose, want %d", len(fh.Records(stream)), n)
	}
}
