package tracing

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestParseIgnoresInvalidValues(t *testing.T) {
	const valid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	sc := Parse(valid)
	if !sc.IsValid() || !sc.IsRemote() || !sc.IsSampled() || TraceID(sc) != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Fatalf("Parse(%q) = %+v", valid, sc)
	}
	if Format(sc) != valid {
		t.Fatalf("Format = %q, want %q", Format(sc), valid)
	}
	for _, bad := range []string{"", "garbage", "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", valid + strings.Repeat("-x", 200)} {
		if sc := Parse(bad); sc.IsValid() || TraceID(sc) != "" || Format(sc) != "" {
			t.Errorf("Parse(%.60q) = %+v, want the zero context", bad, sc)
		}
	}
}

func TestOffUnlessConfigured(t *testing.T) {
	ctx := context.Background()
	for _, m := range []map[string]string{{}, {"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"},
		{"OTEL_TRACES_SAMPLER": "always_on"}} {
		p, err := New(ctx, env(m), Options{})
		if err != nil || p.Enabled() {
			t.Fatalf("%v: enabled %v, err %v; want off", m, p.Enabled(), err)
		}
		// Off is a no-op tracer: its spans record nothing.
		if _, s := p.Tracer().Start(ctx, "x"); s.IsRecording() {
			t.Fatalf("%v: a span records with tracing off", m)
		}
	}
	for _, m := range []map[string]string{{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}, {"OTEL_TRACES_EXPORTER": "otlp"},
		{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:1/v1/traces"}} {
		p, err := New(ctx, env(m), Options{})
		if err != nil || !p.Enabled() {
			t.Fatalf("%v: enabled %v, err %v; want on", m, p.Enabled(), err)
		}
		if err := p.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func TestRefusesWhatIsNotBuiltIn(t *testing.T) {
	for _, m := range []map[string]string{
		{"OTEL_TRACES_EXPORTER": "zipkin"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_SAMPLER": "jaeger_remote"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_SAMPLER_ARG": "2"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_BSP_SCHEDULE_DELAY": "soon"},
	} {
		if _, err := New(context.Background(), env(m), Options{}); err == nil {
			t.Errorf("%v: no error", m)
		}
	}
}

// TestDefaultSampler: parent-based at DefaultSampleRatio: a sampled
// parent is followed, and a new trace is kept at about the ratio.
func TestDefaultSampler(t *testing.T) {
	s, err := samplerFromEnv(env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if d := s.Description(); !strings.Contains(d, "ParentBased") || !strings.Contains(d, "TraceIDRatioBased{0.05}") {
		t.Fatalf("default sampler %s", d)
	}
	s, err = samplerFromEnv(env(map[string]string{"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.25"}))
	if err != nil || !strings.Contains(s.Description(), "0.25") {
		t.Fatalf("traceidratio 0.25: %v %v", s, err)
	}
}

type countSpans struct{ n atomic.Int64 }

func (c *countSpans) SpansExportFailed(n int) { c.n.Add(int64(n)) }

// TestDeadCollectorIsLoggedAndCounted: with the collector gone, the SDK's
// export errors arrive as otel_error lines of the zap logger (not as text
// on stderr) and the lost spans are counted.
func TestDeadCollectorIsLoggedAndCounted(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + l.Addr().String()
	l.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "2000") // read by the exporter from the process environment: bounds its retries
	core, logs := observer.New(zap.WarnLevel)
	var failed countSpans
	ctx := context.Background()
	p, err := New(ctx, env(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": dead, "OTEL_TRACES_SAMPLER": "always_on",
		"OTEL_BSP_SCHEDULE_DELAY": "10"}), Options{Logger: zap.New(core), Observer: &failed})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		_, s := p.Tracer().Start(ctx, "x")
		s.End()
	}
	deadline := time.Now().Add(time.Minute)
	for failed.n.Load() < 3 || logs.FilterMessage("otel_error").Len() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("after a minute: %d spans counted failed, %d otel_error lines", failed.n.Load(), logs.FilterMessage("otel_error").Len())
		}
		time.Sleep(10 * time.Millisecond) // polling with a deadline
	}
	_ = p.Shutdown(ctx)
}
