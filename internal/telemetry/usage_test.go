package telemetry

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
)

// wantFields is issue 7's record, in order: the contract with the Glue
// table and every reader.
var wantFields = []string{
	"request_id", "session_id", "ts", "tenant", "app", "user", "client_id", "model", "fallback_from",
	"cached", "outcome", "status", "input_tokens", "output_tokens", "reserved_tokens", "cost_usd",
	"ttft_ms", "latency_ms", "chunks", "server", "door", "images", "documents", "tool_calls",
	"cache_read_input_tokens", "cache_write_input_tokens", "cache_saved_usd", "trace_id", "record_id",
	"placement", "bedrock_profile", "service_tier",
}

func sampleRecord() UsageRecord {
	return UsageRecord{
		RequestID: "req-00000001", SessionID: "sess-0001",
		TS:     time.Date(2026, 1, 5, 8, 4, 5, 123456789, time.FixedZone("CET", 3600)),
		Tenant: "contoso", App: "support-assistant", User: "user-sub", ClientID: "client-1",
		Model: "claude-haiku", FallbackFrom: "claude-sonnet", Cached: true, Outcome: "done", Status: 200,
		InputTokens: 120, OutputTokens: 300, ReservedTokens: 1144, CostUSD: 0.0123,
		TTFTMs: 250, LatencyMs: 2650, Chunks: 40, Server: "task-1", Door: "ws", Images: 1,
	}
}

func TestUsageRecordJSONFields(t *testing.T) {
	b, err := json.Marshal(sampleRecord())
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if len(m) != len(wantFields) {
		t.Errorf("record has %d keys, want %d: %s", len(m), len(wantFields), b)
	}
	for _, f := range wantFields {
		if _, ok := m[f]; !ok {
			t.Errorf("record lacks %q: %s", f, b)
		}
	}
	// ts: RFC 3339, milliseconds, UTC (the input was 08:04 CET).
	if got := string(m["ts"]); got != `"2026-01-05T07:04:05.123Z"` {
		t.Errorf("ts = %s, want \"2026-01-05T07:04:05.123Z\"", got)
	}
	// Whole seconds keep the .000.
	r := sampleRecord()
	r.TS = time.Date(2026, 12, 31, 23, 0, 0, 0, time.UTC)
	b, _ = json.Marshal(r)
	if !bytes.Contains(b, []byte(`"ts":"2026-12-31T23:00:00.000Z"`)) {
		t.Errorf("whole-second ts: %s", b)
	}
}

func TestUsageRecordRoundTrip(t *testing.T) {
	in := sampleRecord()
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var out UsageRecord
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if !out.TS.Equal(in.TS.Truncate(time.Millisecond)) {
		t.Errorf("ts %v, want %v", out.TS, in.TS.Truncate(time.Millisecond))
	}
	out.TS, in.TS = time.Time{}, time.Time{}
	if out != in {
		t.Errorf("round trip:\n got %+v\nwant %+v", out, in)
	}
}

func TestPartitionPath(t *testing.T) {
	cases := []struct {
		ts   time.Time
		want string
	}{
		{time.Date(2026, 1, 5, 7, 59, 59, 0, time.UTC), "year=2026/month=01/day=05/hour=07"},
		{time.Date(2026, 12, 31, 23, 0, 0, 0, time.UTC), "year=2026/month=12/day=31/hour=23"},
		// 00:30 in UTC+1 is 23:30 the day before in UTC.
		{time.Date(2026, 3, 1, 0, 30, 0, 0, time.FixedZone("", 3600)), "year=2026/month=02/day=28/hour=23"},
	}
	for _, c := range cases {
		r := UsageRecord{TS: c.ts}
		if got := r.PartitionPath(); got != c.want {
			t.Errorf("PartitionPath(%v) = %q, want %q", c.ts, got, c.want)
		}
	}
}

// TestUsageColumnsMatchRecord is the drift check: the Glue columns are the
// record's JSON keys, in order, with the documented types.
func TestUsageColumnsMatchRecord(t *testing.T) {
	cols := UsageColumns()
	var names []string
	for _, c := range cols {
		names = append(names, c.Name)
	}
	if !reflect.DeepEqual(names, wantFields) {
		t.Fatalf("columns %v\nwant    %v", names, wantFields)
	}
	wantTypes := map[string]string{
		"ts": "string", "cached": "boolean", "status": "int", "chunks": "int", "images": "int", "documents": "int", "tool_calls": "int",
		"input_tokens": "bigint", "output_tokens": "bigint", "reserved_tokens": "bigint",
		"ttft_ms": "bigint", "latency_ms": "bigint", "cost_usd": "double",
		"cache_read_input_tokens": "bigint", "cache_write_input_tokens": "bigint", "cache_saved_usd": "double",
	}
	for _, c := range cols {
		want, ok := wantTypes[c.Name]
		if !ok {
			want = "string"
		}
		if c.Type != want {
			t.Errorf("column %s type %s, want %s", c.Name, c.Type, want)
		}
	}
	// Every JSON key of a real record is a column (and vice versa).
	b, _ := json.Marshal(sampleRecord())
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	if len(m) != len(cols) {
		t.Errorf("%d JSON keys, %d columns", len(m), len(cols))
	}
	for _, c := range UsagePartitionColumns() {
		if _, clash := m[c.Name]; clash {
			t.Errorf("partition column %q clashes with a record field", c.Name)
		}
	}
}

func TestColumnsOfRejectsUnmappedType(t *testing.T) {
	type bad struct {
		A []string `json:"a"`
	}
	if _, err := columnsOf(reflect.TypeFor[bad]()); err == nil || !strings.Contains(err.Error(), "no Glue type") {
		t.Fatalf("err = %v", err)
	}
}

func TestNewLogger(t *testing.T) {
	var buf bytes.Buffer
	logger, err := NewLogger("info", &buf)
	if err != nil {
		t.Fatal(err)
	}
	logger.Debug("hidden")
	// No sampling: zap's production sampler would keep 100 of these per
	// second and drop the rest.
	for i := range 500 {
		logger.Info("request_done", zap.String("request_id", "r"), zap.Int("i", i))
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 500 {
		t.Fatalf("%d lines, want 500 (debug hidden, no sampling)", len(lines))
	}
	var line map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &line); err != nil {
		t.Fatalf("not JSON: %q", lines[0])
	}
	if line["level"] != "info" || line["msg"] != "request_done" || line["request_id"] != "r" {
		t.Errorf("line = %v", line)
	}
	ts, _ := line["ts"].(string)
	if !regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`).MatchString(ts) {
		t.Errorf("ts = %q, want RFC 3339 with ms in UTC", ts)
	}

	if _, err := NewLogger("verbose", &buf); err == nil || !strings.Contains(err.Error(), `"verbose"`) {
		t.Errorf("invalid level: err = %v, want one naming \"verbose\"", err)
	}
	for _, lvl := range []string{"", "debug", "WARN", "error"} {
		if _, err := NewLogger(lvl, &buf); err != nil {
			t.Errorf("level %q: %v", lvl, err)
		}
	}
}

// TestAnalyticsDocMatchesColumns keeps docs/analytics.md's DDL equal to
// UsageColumns and UsagePartitionColumns.
func TestAnalyticsDocMatchesColumns(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "analytics.md"))
	if err != nil {
		t.Fatalf("read docs/analytics.md: %v", err)
	}
	_, block, ok := strings.Cut(string(doc), "<!-- BEGIN usage table")
	block, _, ok2 := strings.Cut(block, "<!-- END usage table -->")
	if !ok || !ok2 {
		t.Fatal("docs/analytics.md lacks the usage table markers")
	}
	_, cols, _ := strings.Cut(block, "CREATE EXTERNAL TABLE usage (")
	cols, rest, _ := strings.Cut(cols, "\n)")
	_, parts, _ := strings.Cut(rest, "PARTITIONED BY (")
	parts, _, _ = strings.Cut(parts, "\n)")
	parse := func(s string) []Column {
		var out []Column
		for _, l := range strings.Split(s, "\n") {
			f := strings.Fields(strings.TrimSuffix(strings.TrimSpace(l), ","))
			if len(f) == 2 {
				out = append(out, Column{Name: strings.Trim(f[0], "`"), Type: f[1]})
			}
		}
		return out
	}
	if got := parse(cols); !reflect.DeepEqual(got, UsageColumns()) {
		t.Errorf("docs/analytics.md columns\n%v\nUsageColumns()\n%v", got, UsageColumns())
	}
	if got := parse(parts); !reflect.DeepEqual(got, UsagePartitionColumns()) {
		t.Errorf("docs/analytics.md partitions %v, want %v", got, UsagePartitionColumns())
	}
	for _, col := range []string{"year", "month", "day", "hour"} {
		digits := "2"
		if col == "year" {
			digits = "4"
		}
		want := fmt.Sprintf("'projection.%s.digits'", col)
		i := strings.Index(block, want)
		if i < 0 || !strings.Contains(block[i:i+60], "'"+digits+"'") {
			t.Errorf("docs/analytics.md: %s must be projected with digits %s", col, digits)
		}
	}
}

// encodeLine writes what json.Marshal writes of a record (through its
// MarshalJSON), byte for byte, escapes included, then a newline.
func TestEncodeLineIsMarshal(t *testing.T) {
	odd := sampleRecord()
	odd.Tenant, odd.App, odd.User = `a<b>&"c"`, "ünï\u2028code", "tab\there"
	odd.TS = time.Date(2026, 12, 6, 21, 0, 0, 123456789, time.FixedZone("x", 3600))
	for _, r := range []UsageRecord{sampleRecord(), odd, {}} {
		r.RecordID = "fixed"
		want, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		got, err := encodeLine(r)
		if err != nil || string(got) != string(want)+"\n" {
			t.Fatalf("encodeLine %s (%v), json.Marshal %s", got, err, want)
		}
	}
}

// BenchmarkEncodeLine is a usage record's line (line), beside what it
// was (json.Marshal of the record, through MarshalJSON: marshal).
func BenchmarkEncodeLine(b *testing.B) {
	r := sampleRecord()
	b.Run("line", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = encodeLine(r)
		}
	})
	b.Run("marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			l, _ := json.Marshal(r)
			_ = append(l, '\n')
		}
	})
}
