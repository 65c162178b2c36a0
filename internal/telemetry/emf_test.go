package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
)

// emfUnits is the MetricDefinition Unit pattern of the EMF JSON schema.
var emfUnits = regexp.MustCompile(`^(Seconds|Microseconds|Milliseconds|Bytes|Kilobytes|Megabytes|Gigabytes|Terabytes|Bits|Kilobits|Megabits|Gigabits|Terabits|Percent|Count|Bytes/Second|Kilobytes/Second|Megabytes/Second|Gigabytes/Second|Terabytes/Second|Bits/Second|Kilobits/Second|Megabits/Second|Gigabits/Second|Terabits/Second|Count/Second|None)$`)

// checkEMF validates one line against the EMF specification's document
// structure (CloudWatch "Specification: Embedded metric format"): a JSON
// object on one line; _aws with an integer Timestamp in ms and a
// CloudWatchMetrics array of MetricDirectives {Namespace, Dimensions,
// Metrics} and no other members; each DimensionSet at most 30 keys, each key
// a root member with a string value of at most 1024 characters; at most 100
// MetricDefinitions {Name, Unit?, StorageResolution?}, each Name a root
// member holding a number, an array of at most 100 numbers, or a
// Values/Counts distribution of at most 100 bins.
func checkEMF(t *testing.T, line []byte) map[string]any {
	t.Helper()
	if !bytes.HasSuffix(line, []byte("\n")) || bytes.Count(line, []byte("\n")) != 1 {
		t.Fatalf("EMF line must be one line: %q", line)
	}
	var root map[string]any
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	if err := dec.Decode(&root); err != nil {
		t.Fatalf("EMF line is not a JSON object: %v", err)
	}
	aws, ok := root["_aws"].(map[string]any)
	if !ok {
		t.Fatalf("no _aws object")
	}
	for k := range aws {
		if k != "Timestamp" && k != "CloudWatchMetrics" {
			t.Errorf("_aws has extra member %q", k)
		}
	}
	ts, ok := aws["Timestamp"].(json.Number)
	if _, err := ts.Int64(); !ok || err != nil {
		t.Errorf("_aws.Timestamp %v is not an integer", aws["Timestamp"])
	}
	directives, ok := aws["CloudWatchMetrics"].([]any)
	if !ok || len(directives) == 0 {
		t.Fatalf("_aws.CloudWatchMetrics is not a non-empty array")
	}
	for _, d := range directives {
		dir, ok := d.(map[string]any)
		if !ok {
			t.Fatalf("MetricDirective is not an object")
		}
		for k := range dir {
			if k != "Namespace" && k != "Dimensions" && k != "Metrics" {
				t.Errorf("MetricDirective has extra member %q", k)
			}
		}
		if ns, ok := dir["Namespace"].(string); !ok || ns == "" || len(ns) > 1024 {
			t.Errorf("Namespace %v", dir["Namespace"])
		}
		dims, ok := dir["Dimensions"].([]any)
		if !ok || len(dims) == 0 {
			t.Fatalf("Dimensions must be a non-empty array of DimensionSets")
		}
		for _, ds := range dims {
			set, ok := ds.([]any)
			if !ok || len(set) > 30 {
				t.Fatalf("DimensionSet %v", ds)
			}
			for _, k := range set {
				key, ok := k.(string)
				if !ok || key == "" || len(key) > 250 {
					t.Fatalf("dimension key %v", k)
				}
				v, ok := root[key].(string)
				if !ok || len(v) > 1024 {
					t.Errorf("dimension %q: root member %v is not a string of at most 1024 chars", key, root[key])
				}
			}
		}
		metrics, ok := dir["Metrics"].([]any)
		if !ok || len(metrics) > 100 {
			t.Fatalf("Metrics %v", dir["Metrics"])
		}
		for _, md := range metrics {
			def, ok := md.(map[string]any)
			if !ok {
				t.Fatalf("MetricDefinition is not an object")
			}
			for k := range def {
				if k != "Name" && k != "Unit" && k != "StorageResolution" {
					t.Errorf("MetricDefinition has extra member %q", k)
				}
			}
			name, _ := def["Name"].(string)
			if name == "" {
				t.Fatalf("MetricDefinition without Name")
			}
			if u, ok := def["Unit"]; ok && !emfUnits.MatchString(u.(string)) {
				t.Errorf("%s: unit %v", name, u)
			}
			checkMetricTarget(t, name, root[name])
		}
	}
	return root
}

func checkMetricTarget(t *testing.T, name string, v any) {
	t.Helper()
	switch v := v.(type) {
	case json.Number:
	case []any:
		if len(v) > 100 {
			t.Errorf("%s: %d values", name, len(v))
		}
		for _, x := range v {
			if _, ok := x.(json.Number); !ok {
				t.Errorf("%s: non-numeric value %v", name, x)
			}
		}
	case map[string]any:
		vals, _ := v["Values"].([]any)
		counts, _ := v["Counts"].([]any)
		if len(vals) == 0 || len(vals) != len(counts) || len(vals) > 100 {
			t.Fatalf("%s: Values/Counts %d/%d", name, len(vals), len(counts))
		}
		var n, sum float64
		for i := range vals {
			c, _ := counts[i].(json.Number).Float64()
			x, _ := vals[i].(json.Number).Float64()
			n += c
			sum += c * x
		}
		num := func(k string) float64 {
			f, err := v[k].(json.Number).Float64()
			if err != nil {
				t.Fatalf("%s.%s: %v", name, k, v[k])
			}
			return f
		}
		if num("Count") != n {
			t.Errorf("%s: Count %v, sum of Counts %v", name, num("Count"), n)
		}
		if math.Abs(num("Sum")-sum) > 1e-6*math.Max(1, sum) {
			t.Errorf("%s: Sum %v, sum of Values*Counts %v", name, num("Sum"), sum)
		}
		if num("Min") > num("Max") {
			t.Errorf("%s: Min > Max", name)
		}
	default:
		t.Errorf("%s: root member %v is not a metric value", name, v)
	}
}

// lineBuffer collects written lines.
type lineBuffer struct {
	mu    sync.Mutex
	lines [][]byte
	wrote chan struct{}
}

func (b *lineBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.lines = append(b.lines, append([]byte(nil), p...))
	if b.wrote != nil {
		select {
		case b.wrote <- struct{}{}:
		default:
		}
	}
	return len(p), nil
}

func (b *lineBuffer) get() [][]byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([][]byte(nil), b.lines...)
}

func TestEMFLinesFollowTheSpec(t *testing.T) {
	now := time.Date(2026, 1, 5, 7, 1, 0, 0, time.UTC)
	var out lineBuffer
	e := NewEMF(&out, EMFOptions{Server: "task-abc", Now: func() time.Time { return now }}, zaptest.NewLogger(t))
	m := NewMetrics(nil)
	m.SetEMF(e)

	m.SessionOpened()
	m.SessionOpened()
	m.RequestStarted()
	m.SessionMoved(MoveBalance)
	m.SessionMoved(MoveBusy)
	m.ObserveRequest(UsageRecord{Tenant: "contoso", App: "support", Model: "haiku", Outcome: "done", Status: 200, TTFTMs: 250, LatencyMs: 2000, Chunks: 9})
	m.ObserveRequest(UsageRecord{Tenant: "contoso", App: "support", Model: "haiku", Outcome: "done", Status: 200, TTFTMs: 270, LatencyMs: 2100, Chunks: 9})
	m.ObserveRequest(UsageRecord{Tenant: "contoso", App: "support", Outcome: "quota_exceeded", Status: 429})
	m.ObserveRequest(UsageRecord{Tenant: "fabrikam", App: "search", Model: "haiku", Outcome: "model_unavailable", Status: 503})

	if err := e.Flush(); err != nil {
		t.Fatal(err)
	}
	lines := out.get()
	if len(lines) != 3 {
		t.Fatalf("%d lines, want server + 2 tenant/app lines", len(lines))
	}
	var roots []map[string]any
	for _, l := range lines {
		roots = append(roots, checkEMF(t, l))
	}

	num := func(v any) float64 { f, _ := v.(json.Number).Float64(); return f }
	server := roots[0]
	dir := server["_aws"].(map[string]any)["CloudWatchMetrics"].([]any)[0].(map[string]any)
	if dir["Namespace"] != "Jetway" {
		t.Errorf("namespace %v", dir["Namespace"])
	}
	if ts := num(server["_aws"].(map[string]any)["Timestamp"]); ts != float64(now.UnixMilli()) {
		t.Errorf("timestamp %v", ts)
	}
	if b, _ := json.Marshal(dir["Dimensions"]); string(b) != `[["Server"],[]]` {
		t.Errorf("server dimensions %s", b)
	}
	if server["Server"] != "task-abc" {
		t.Errorf("Server %v", server["Server"])
	}
	for name, want := range map[string]float64{"ActiveSessions": 2, "InFlight": 1, "Requests": 4, "Errors": 1, "QuotaRejections": 1, "SessionsMoved": 2} {
		if got := num(server[name]); got != want {
			t.Errorf("server %s = %v, want %v", name, got, want)
		}
	}
	ttft := server["TTFT"].(map[string]any)
	if num(ttft["Count"]) != 2 || num(ttft["Sum"]) != 520 || num(ttft["Min"]) != 250 || num(ttft["Max"]) != 270 {
		t.Errorf("TTFT %v", ttft)
	}
	if lat := server["Latency"].(map[string]any); num(lat["Count"]) != 2 {
		t.Errorf("Latency %v (done only)", lat)
	}

	app := roots[1]
	adir := app["_aws"].(map[string]any)["CloudWatchMetrics"].([]any)[0].(map[string]any)
	if b, _ := json.Marshal(adir["Dimensions"]); string(b) != `[["Tenant","App"]]` {
		t.Errorf("app dimensions %s", b)
	}
	if app["Tenant"] != "contoso" || app["App"] != "support" || num(app["Requests"]) != 3 || num(app["QuotaRejections"]) != 1 || num(app["Errors"]) != 0 {
		t.Errorf("contoso/support line %v", app)
	}
	other := roots[2]
	if other["Tenant"] != "fabrikam" || num(other["Errors"]) != 1 {
		t.Errorf("fabrikam/search line %v", other)
	}
	if _, ok := other["TTFT"]; ok {
		t.Errorf("TTFT written with no samples: %v", other)
	}

	// A new interval starts empty (gauges keep their level).
	if err := e.Flush(); err != nil {
		t.Fatal(err)
	}
	lines = out.get()
	if len(lines) != 4 {
		t.Fatalf("%d lines after a quiet interval, want 1 more (server only)", len(lines))
	}
	quiet := checkEMF(t, lines[3])
	if num(quiet["Requests"]) != 0 || num(quiet["ActiveSessions"]) != 2 || num(quiet["SessionsMoved"]) != 0 {
		t.Errorf("quiet interval %v", quiet)
	}
	if _, ok := quiet["TTFT"]; ok {
		t.Errorf("empty distribution written")
	}
}

func TestEMFDistributionStaysWithin100Bins(t *testing.T) {
	var d dist
	var sum float64
	// Every millisecond from 0 to 70 s, plus sub-millisecond values.
	for v := 0.0; v <= 70_000; v += 0.7 {
		d.add(v)
		sum += v
	}
	h := d.histogram()
	if len(h.Values) > 100 || len(h.Values) != len(h.Counts) {
		t.Fatalf("%d bins", len(h.Values))
	}
	var n int64
	for i, c := range h.Counts {
		n += c
		if i > 0 && h.Values[i] <= h.Values[i-1] {
			t.Errorf("values not increasing at %d", i)
		}
	}
	if n != d.count || h.Count != d.count {
		t.Errorf("counts %d / %d / %d", n, h.Count, d.count)
	}
	if math.Abs(h.Sum-sum) > 1e-6*sum || h.Min != 0 || h.Max < 69_999 {
		t.Errorf("sum %v want %v, min %v, max %v", h.Sum, sum, h.Min, h.Max)
	}
	// The representative value of a bin is within its ~12% width.
	var one dist
	one.add(1240)
	one.add(1250)
	if v := one.histogram().Values; len(v) != 1 || v[0] != 1245 {
		t.Errorf("bin value %v, want the mean 1245", v)
	}
}

func TestEMFRunWritesFinalLineOnShutdown(t *testing.T) {
	out := lineBuffer{wrote: make(chan struct{}, 10)}
	e := NewEMF(&out, EMFOptions{Interval: time.Hour}, zaptest.NewLogger(t))
	m := NewMetrics(nil)
	m.SetEMF(e)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	m.ObserveRequest(UsageRecord{Tenant: "t", App: "a", Outcome: "done", Status: 200, LatencyMs: 5})
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
	lines := out.get()
	if len(lines) != 2 {
		t.Fatalf("%d lines, want the final server and t/a lines", len(lines))
	}
	root := checkEMF(t, lines[0])
	if root["Server"] != "local" || !strings.Contains(string(lines[0]), `"Requests":1`) {
		t.Errorf("final line %s", lines[0])
	}
}

func TestEMFRunFlushesEveryInterval(t *testing.T) {
	out := lineBuffer{wrote: make(chan struct{}, 10)}
	e := NewEMF(&out, EMFOptions{Interval: 10 * time.Millisecond}, zaptest.NewLogger(t))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	for range 2 {
		select {
		case <-out.wrote:
		case <-time.After(10 * time.Second):
			t.Fatal("no line written on the interval")
		}
	}
	cancel()
	<-done
}
