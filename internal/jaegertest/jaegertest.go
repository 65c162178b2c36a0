// Package jaegertest runs a real Jaeger v2 (cmd/jaeger of the
// github.com/jaegertracing/jaeger module, in-memory storage) for the
// tracing tests: it receives OTLP over HTTP and answers its query API
// (/api/traces). The binary is `jaeger` on PATH, or else built once from
// the module at JaegerModule into the user cache directory (a few minutes
// on 2 cores the first time; `make test-deps` builds it). A missing Jaeger
// fails the test, never skips it.
package jaegertest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// JaegerModule is the Jaeger built when none is on PATH.
const JaegerModule = "github.com/jaegertracing/jaeger@v1.76.0"

// Jaeger is a running Jaeger.
type Jaeger struct {
	// OTLP is the OTLP/HTTP endpoint (OTEL_EXPORTER_OTLP_ENDPOINT).
	OTLP string
	// Query is the query service's base URL (the UI and /api).
	Query string
}

var buildOnce sync.Once
var built string
var buildErr error

// Binary is the path of the jaeger binary, built on first use.
func Binary(tb testing.TB) string {
	tb.Helper()
	buildOnce.Do(func() { built, buildErr = binary() })
	if buildErr != nil {
		tb.Fatalf("jaeger is required for the tracing tests (make test-deps builds it): %v", buildErr)
	}
	return built
}

func binary() (string, error) {
	if p, err := exec.LookPath("jaeger"); err == nil {
		return p, nil
	}
	bin, err := CachedPath()
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	return bin, Build(bin)
}

// CachedPath is where Build puts the binary.
func CachedPath() (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no jaeger on PATH, and no cache directory to build it in: %w", err)
	}
	return filepath.Join(cache, "jetway", strings.ReplaceAll(filepath.Base(JaegerModule), "@", "-"), "jaeger"), nil
}

// Build builds cmd/jaeger of JaegerModule into bin, outside this module
// (go.mod stays as it is): the module is downloaded, copied somewhere
// writable and built with its own go.mod.
func Build(bin string) error {
	dl := exec.Command("go", "mod", "download", "-json", JaegerModule)
	dl.Dir = os.TempDir()
	out, err := dl.Output()
	if err != nil {
		return fmt.Errorf("go mod download %s: %v\n%s", JaegerModule, err, out)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		return fmt.Errorf("go mod download %s: no module directory in %s", JaegerModule, out)
	}
	src, err := os.MkdirTemp("", "jaeger-src-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(src)
	if err := os.CopyFS(src, os.DirFS(mod.Dir)); err != nil {
		return fmt.Errorf("copy %s: %w", mod.Dir, err)
	}
	if err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Chmod(p, 0o755)
	}); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return err
	}
	tmp := bin + ".tmp"
	build := exec.Command("go", "build", "-o", tmp, "./cmd/jaeger")
	build.Dir = src
	build.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("building jaeger from %s: %v\n%s", JaegerModule, err, out)
	}
	return os.Rename(tmp, bin)
}

// config is a Jaeger v2 (OpenTelemetry collector) configuration: OTLP
// over HTTP in, memory storage, the query service, nothing else listening.
const config = `service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 10000
  jaeger_query:
    storage:
      traces: memstore
    http:
      endpoint: %s
    grpc:
      endpoint: %s
receivers:
  otlp:
    protocols:
      http:
        endpoint: %s
processors:
  batch:
    timeout: 50ms
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
`

// Start runs a Jaeger for the test; it is stopped when the test ends.
func Start(tb testing.TB) *Jaeger {
	tb.Helper()
	bin := Binary(tb)
	ports := freePorts(tb, 3)
	dir := tb.TempDir()
	cfg := filepath.Join(dir, "jaeger.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, config, ports[0], ports[1], ports[2]), 0o644); err != nil {
		tb.Fatal(err)
	}
	var out bytes.Buffer
	cmd := exec.Command(bin, "--config", cfg)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start jaeger: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	tb.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	j := &Jaeger{OTLP: "http://" + ports[2], Query: "http://" + ports[0]}
	// Ready when the query API answers and the OTLP receiver takes a post.
	deadline := time.Now().Add(60 * time.Second)
	for {
		if ready(j) {
			return j
		}
		select {
		case <-exited:
			tb.Fatalf("jaeger exited at start:\n%s", out.String())
		default:
		}
		if time.Now().After(deadline) {
			tb.Fatalf("jaeger not ready within 60s:\n%s", out.String())
		}
		time.Sleep(50 * time.Millisecond) // polling a process's readiness: nothing to wait on
	}
}

func ready(j *Jaeger) bool {
	for _, u := range []string{j.Query + "/api/services", j.OTLP + "/v1/traces"} {
		var rsp *http.Response
		var err error
		if strings.HasSuffix(u, "/v1/traces") {
			rsp, err = http.Post(u, "application/json", strings.NewReader(`{"resourceSpans":[]}`))
		} else {
			rsp, err = http.Get(u)
		}
		if err != nil {
			return false
		}
		rsp.Body.Close()
		if rsp.StatusCode != http.StatusOK {
			return false
		}
	}
	return true
}

// freePorts returns n loopback addresses that were free a moment ago.
func freePorts(tb testing.TB, n int) []string {
	tb.Helper()
	var out []string
	var lns []net.Listener
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		lns = append(lns, ln)
		out = append(out, ln.Addr().String())
	}
	for _, ln := range lns {
		ln.Close()
	}
	return out
}

// Span is a span as the query API returns it.
type Span struct {
	TraceID       string `json:"traceID"`
	SpanID        string `json:"spanID"`
	OperationName string `json:"operationName"`
	References    []struct {
		RefType string `json:"refType"`
		TraceID string `json:"traceID"`
		SpanID  string `json:"spanID"`
	} `json:"references"`
	StartTime int64 `json:"startTime"` // microseconds
	Duration  int64 `json:"duration"`
	Tags      []Tag `json:"tags"`
	Logs      []struct {
		Fields []Tag `json:"fields"`
	} `json:"logs"`
	ProcessID string `json:"processID"`
}

// Tag is a span attribute.
type Tag struct {
	Key   string `json:"key"`
	Type  string `json:"type"`
	Value any    `json:"value"`
}

// Trace is one trace.
type Trace struct {
	TraceID   string          `json:"traceID"`
	Spans     []Span          `json:"spans"`
	Processes map[string]Proc `json:"processes"`
}

// Proc is a process (a resource) of a trace.
type Proc struct {
	ServiceName string `json:"serviceName"`
	Tags        []Tag  `json:"tags"`
}

// Tag returns a span's attribute as a string ("" when absent).
func (s Span) Tag(key string) string {
	for _, t := range s.Tags {
		if t.Key == key {
			return fmt.Sprint(t.Value)
		}
	}
	return ""
}

// Parent is the span id of the span's parent ("" for a root).
func (s Span) Parent() string {
	for _, r := range s.References {
		if r.RefType == "CHILD_OF" {
			return r.SpanID
		}
	}
	return ""
}

// HasEvent reports whether the span has an event (a log) named name.
func (s Span) HasEvent(name string) bool {
	for _, l := range s.Logs {
		for _, f := range l.Fields {
			if f.Key == "event" && f.Value == name {
				return true
			}
		}
	}
	return false
}

// Traces returns the traces of service whose spans carry tag=value.
func (j *Jaeger) Traces(tb testing.TB, service, tag, value string) []Trace {
	tb.Helper()
	tags, _ := json.Marshal(map[string]string{tag: value})
	q := url.Values{"service": {service}, "tags": {string(tags)}, "limit": {"20"}, "lookback": {"1h"}}
	return j.get(tb, "/api/traces?"+q.Encode())
}

// Trace returns one trace by id (nil when Jaeger has none).
func (j *Jaeger) Trace(tb testing.TB, traceID string) *Trace {
	tb.Helper()
	ts := j.get(tb, "/api/traces/"+traceID)
	if len(ts) == 0 {
		return nil
	}
	return &ts[0]
}

func (j *Jaeger) get(tb testing.TB, path string) []Trace {
	tb.Helper()
	rsp, err := http.Get(j.Query + path)
	if err != nil {
		tb.Fatalf("jaeger query: %v", err)
	}
	defer rsp.Body.Close()
	if rsp.StatusCode == http.StatusNotFound {
		return nil
	}
	var body struct {
		Data []Trace `json:"data"`
	}
	if err := json.NewDecoder(rsp.Body).Decode(&body); err != nil {
		tb.Fatalf("jaeger query %s: %v", path, err)
	}
	return body.Data
}

// Await polls until a trace of service with tag=value has every span
// named in want (at least once each), or fails the test after within.
func (j *Jaeger) Await(tb testing.TB, service, tag, value string, within time.Duration, want ...string) Trace {
	tb.Helper()
	deadline := time.Now().Add(within)
	var last []Trace
	for {
		last = j.Traces(tb, service, tag, value)
		for _, t := range last {
			if t.has(want...) {
				return *j.Trace(tb, t.TraceID) // the whole trace, every server's spans
			}
		}
		if time.Now().After(deadline) {
			tb.Fatalf("no trace of %s with %s=%s and spans %v within %s; got %s", service, tag, value, want, within, Describe(last))
		}
		time.Sleep(100 * time.Millisecond) // spans arrive in batches: poll the query API
	}
}

// AwaitTrace polls trace id until it has every span named in want.
func (j *Jaeger) AwaitTrace(tb testing.TB, traceID string, within time.Duration, want ...string) Trace {
	tb.Helper()
	deadline := time.Now().Add(within)
	for {
		t := j.Trace(tb, traceID)
		if t != nil && t.has(want...) {
			return *t
		}
		if time.Now().After(deadline) {
			var got []Trace
			if t != nil {
				got = []Trace{*t}
			}
			tb.Fatalf("trace %s lacks spans %v after %s; got %s", traceID, want, within, Describe(got))
		}
		time.Sleep(100 * time.Millisecond) // spans arrive in batches: poll the query API
	}
}

func (t Trace) has(names ...string) bool {
	for _, n := range names {
		if len(t.Named(n)) == 0 {
			return false
		}
	}
	return true
}

// Named returns the trace's spans named name.
func (t Trace) Named(name string) []Span {
	var out []Span
	for _, s := range t.Spans {
		if s.OperationName == name {
			out = append(out, s)
		}
	}
	return out
}

// One returns the one span named name, failing the test otherwise.
func (t Trace) One(tb testing.TB, name string) Span {
	tb.Helper()
	s := t.Named(name)
	if len(s) != 1 {
		tb.Fatalf("trace %s has %d spans %q, want 1: %s", t.TraceID, len(s), name, Describe([]Trace{t}))
	}
	return s[0]
}

// Instance is the service.instance.id of the process that sent span.
func (t Trace) Instance(s Span) string {
	for _, tag := range t.Processes[s.ProcessID].Tags {
		if tag.Key == "service.instance.id" {
			return fmt.Sprint(tag.Value)
		}
	}
	return ""
}

// Describe lists traces as span trees, for failure messages.
func Describe(ts []Trace) string {
	var b strings.Builder
	for _, t := range ts {
		fmt.Fprintf(&b, "\ntrace %s:", t.TraceID)
		for _, s := range t.Spans {
			fmt.Fprintf(&b, "\n  %s %s parent=%s", s.SpanID, s.OperationName, s.Parent())
		}
	}
	if b.Len() == 0 {
		return "nothing"
	}
	return b.String()
}
