package telemetry

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
)

// writeUsage writes records through a real FileSink, as the gateway does.
func writeUsage(t *testing.T, dir string, recs []UsageRecord) {
	t.Helper()
	s := NewFileSink(dir, FileOptions{Server: "t1", FlushInterval: time.Hour}, zaptest.NewLogger(t))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	for _, r := range recs {
		s.Record(r)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func usage(tenant, app, model, outcome string, status int, in, out int64, cost float64, ttft int64, chunks int, ts time.Time) UsageRecord {
	return UsageRecord{RequestID: "r", TS: ts, Tenant: tenant, App: app, Model: model, Outcome: outcome, Status: status,
		InputTokens: in, OutputTokens: out, CostUSD: cost, TTFTMs: ttft, Chunks: chunks, Server: "t1"}
}

// cachedUsage is r with prompt cache reads, writes and savings.
func cachedUsage(r UsageRecord, read, write int64, saved float64) UsageRecord {
	r.CacheReadInputTokens, r.CacheWriteInputTokens, r.CacheSavedUSD = read, write, saved
	return r
}

func TestReport(t *testing.T) {
	dir := t.TempDir()
	now := time.Date(2026, 1, 5, 12, 30, 0, 0, time.UTC)
	recent := now.Add(-2 * time.Hour)
	var recs []UsageRecord
	// contoso/support on haiku: 20 done with TTFT 100..290 ms, 2 quota 429s, 1 error.
	for i := range 20 {
		recs = append(recs, usage("contoso", "support", "haiku", "done", 200, 100, 200, 0.01, int64(100+10*i), 5, recent))
	}
	recs = append(recs,
		usage("contoso", "support", "haiku", "quota_exceeded", 429, 0, 0, 0, 0, 0, recent),
		usage("contoso", "support", "haiku", "quota_exceeded", 429, 0, 0, 0, 0, 0, recent),
		usage("contoso", "support", "haiku", "model_error", 502, 100, 10, 0.001, 400, 1, recent),
		cachedUsage(usage("fabrikam", "search", "sonnet", "done", 200, 1000, 500, 0.5, 800, 3, now.Add(-10*time.Minute)), 3000, 1000, 0.25),
		// Outside a 24h window: not counted, and its partition not read.
		usage("contoso", "support", "haiku", "done", 200, 9999, 9999, 99, 1, 1, now.Add(-30*time.Hour)),
	)
	writeUsage(t, dir, recs)
	// A partial last line, as while a file is being written.
	f := filepath.Join(dir, "year=2026", "month=01", "day=05", "hour=12", "usage-t1-0.json")
	fh, err := os.OpenFile(f, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fh.WriteString(`{"request_id":"half`)
	fh.Close()

	var out strings.Builder
	if err := Report(&out, ReportOptions{Dir: dir, Since: 24 * time.Hour, Now: now}); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	t.Logf("\n%s", text)
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	if !strings.Contains(lines[0], "24 records from 2 files") {
		t.Errorf("summary line %q", lines[0])
	}
	fields := func(i int) []string { return strings.Fields(lines[i]) }
	wantHeader := "TENANT APP MODEL REQUESTS DONE ERRORS 429 INPUT_TOKENS OUTPUT_TOKENS COST_USD CACHE_HIT_PCT CACHE_SAVED_USD TTFT_P50_MS TTFT_P95_MS"
	if strings.Join(fields(1), " ") != wantHeader {
		t.Errorf("header %q", lines[1])
	}
	// p50 of {100..290 step 10, 400} (21 values): 11th = 200; p95: 20th = 290.
	// Input tokens count cache reads and writes; the hit ratio is reads
	// over all input (3000 of 5000, and of 7100 in all).
	wantRows := []string{
		"contoso support haiku 23 20 1 2 2100 4010 0.2010 0.0 0.0000 200 290",
		"fabrikam search sonnet 1 1 0 0 5000 500 0.5000 60.0 0.2500 800 800",
		"TOTAL 24 21 1 2 7100 4510 0.7010 42.3 0.2500 200 400",
	}
	for i, want := range wantRows {
		if got := strings.Join(fields(2+i), " "); got != want {
			t.Errorf("row %d = %q, want %q", i, got, want)
		}
	}
	if !strings.Contains(text, "1 lines were not usage records") {
		t.Errorf("skipped partial line not reported")
	}
	// Aligned: every table line has the same length (numbers right-aligned).
	for _, l := range lines[2:5] {
		if len(l) != len(lines[1]) {
			t.Errorf("misaligned:\n%s\n%s", lines[1], l)
		}
	}

	// Grouped by model only, over 1 hour: only the fabrikam record.
	out.Reset()
	if err := Report(&out, ReportOptions{Dir: dir, Since: time.Hour, By: []string{"model"}, Now: now}); err != nil {
		t.Fatal(err)
	}
	lines = strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	if len(lines) < 3 || strings.Join(strings.Fields(lines[2]), " ") != "sonnet 1 1 0 0 5000 500 0.5000 60.0 0.2500 800 800" {
		t.Errorf("by model, 1h:\n%s", out.String())
	}

	// No keys: one total row.
	out.Reset()
	if err := Report(&out, ReportOptions{Dir: dir, Now: now, By: []string{}}); err != nil {
		t.Fatal(err)
	}
	lines = strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	if got := strings.Join(strings.Fields(lines[2]), " "); got != "24 21 1 2 7100 4510 0.7010 42.3 0.2500 200 400" {
		t.Errorf("totals only: %q", got)
	}
}

func TestReportErrors(t *testing.T) {
	if err := Report(&strings.Builder{}, ReportOptions{Dir: t.TempDir(), By: []string{"session"}}); err == nil || !strings.Contains(err.Error(), `"session"`) {
		t.Errorf("by session: %v", err)
	}
	if err := Report(&strings.Builder{}, ReportOptions{}); err == nil {
		t.Error("no dir: no error")
	}
	if err := Report(&strings.Builder{}, ReportOptions{Dir: filepath.Join(t.TempDir(), "missing")}); err == nil {
		t.Error("missing dir: no error")
	}
	var out strings.Builder
	if err := Report(&out, ReportOptions{Dir: t.TempDir()}); err != nil || !strings.Contains(out.String(), "no usage records") {
		t.Errorf("empty dir: %v %q", err, out.String())
	}
}

// A record written before models were folded may hold a client's 200 KB
// string: the report's column stays bounded.
func TestReportClipsLongValues(t *testing.T) {
	dir := t.TempDir()
	now := time.Date(2026, 1, 5, 12, 30, 0, 0, time.UTC)
	writeUsage(t, dir, []UsageRecord{usage("contoso", "support", strings.Repeat("m", 200_000), "model_not_allowed", 403, 0, 0, 0, 0, 0, now.Add(-time.Minute))})
	var out strings.Builder
	if err := Report(&out, ReportOptions{Dir: dir, Since: time.Hour, Now: now}); err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(out.String(), "\n") {
		if len(l) > 400 {
			t.Fatalf("report line of %d bytes:\n%.300s...", len(l), l)
		}
	}
}

// The report groups by user and by door too (issue 30): one row each.
func TestReportByUserAndDoor(t *testing.T) {
	dir := t.TempDir()
	now := time.Date(2026, 1, 5, 12, 30, 0, 0, time.UTC)
	var recs []UsageRecord
	for i, who := range []struct{ user, door string }{{"alice", "ws"}, {"alice", "anthropic"}, {"bob", "ws"}, {"alice", "ws"}} {
		r := usage("contoso", "support", "haiku", "done", 200, 100, 200, 0.01, 100, 5, now.Add(-time.Duration(i+1)*time.Hour))
		r.User, r.Door = who.user, who.door
		recs = append(recs, r)
	}
	writeUsage(t, dir, recs)
	var out strings.Builder
	if err := Report(&out, ReportOptions{Dir: dir, Since: 7 * 24 * time.Hour, Now: now, By: []string{"user", "door"}}); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	t.Logf("\n%s", text)
	for _, row := range [][]string{{"USER", "DOOR", "REQUESTS"}, {"alice", "ws", "2"}, {"alice", "anthropic", "1"}, {"bob", "ws", "1"}} {
		found := false
		for _, line := range strings.Split(text, "\n") {
			f := strings.Fields(line)
			if len(f) >= 3 && f[0] == row[0] && f[1] == row[1] && f[2] == row[2] {
				found = true
			}
		}
		if !found {
			t.Errorf("no row %v in\n%s", row, text)
		}
	}
}
