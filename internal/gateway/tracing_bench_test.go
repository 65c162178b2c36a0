package gateway_test

import (
	"context"
	"fmt"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/jetway-gateway/jetway/internal/config"
	"github.com/jetway-gateway/jetway/internal/gateway"
	"github.com/jetway-gateway/jetway/internal/protocol"
	"github.com/jetway-gateway/jetway/internal/quota"
	"github.com/jetway-gateway/jetway/internal/router"
	"github.com/jetway-gateway/jetway/internal/stream"
)

// discardExporter takes the spans the batch processor hands it and drops
// them: the export's own cost (encoding, the network) is the collector
// client's, off the request's path.
type discardExporter struct{}

func (discardExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardExporter) Shutdown(context.Context) error                             { return nil }

// BenchmarkRequestTracing is one request of 300 tokens through the
// pipeline (admission, quota in memory, the router, the stream log, the
// ending, the usage record and settlement), the model answering at once,
// with tracing off, on at 100% sampling and on at 1% (the SDK with its
// batch span processor; spans dropped at export). One op is one request;
// divide by 300 for a token. What tracing adds is per request: no span
// work happens per token.
func BenchmarkRequestTracing(b *testing.B) {
	for _, tc := range []struct {
		name    string
		sampler sdktrace.Sampler // nil: off
	}{{"off", nil}, {"on-100pct", sdktrace.AlwaysSample()}, {"on-1pct", sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0.01))}} {
		b.Run(tc.name, func(b *testing.B) {
			var tracer trace.Tracer
			if tc.sampler != nil {
				tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discardExporter{}), sdktrace.WithSampler(tc.sampler))
				defer func() { _ = tp.Shutdown(context.Background()) }()
				tracer = tp.Tracer("bench")
			}
			benchmarkTraced(b, tracer)
		})
	}
}

func benchmarkTraced(b *testing.B, tracer trace.Tracer) {
	cfg, err := config.Parse("bench.yaml", []byte(`
models:
  - {id: m, bedrock_id: m}
tenants:
  - id: t
    apps:
      - id: cached
        client_ids: [cached-client]
        models: {default: m}
`))
	if err != nil {
		b.Fatal(err)
	}
	const tokens = 300
	model := router.New(streamerFunc(func(_ context.Context, c router.Call, onDelta func(string)) (router.Result, error) {
		for range tokens {
			onDelta("tok ")
		}
		return router.Result{StopReason: "end_turn", UsageReported: true, Usage: router.Usage{InputTokens: 5, OutputTokens: tokens}}, nil
	}), router.Options{Tracer: tracer})
	g := gateway.New(gateway.Deps{Config: config.NewLive(cfg), Logs: stream.NewRegistry(stream.RegistryOptions{}), Router: model,
		Quotas: quota.New(quota.NewMemoryStore(), quota.Options{}), Usage: &usageLog{}, Tracer: tracer,
		Logger: zap.NewNop()}, gateway.Options{ServerID: "bench"})
	defer func() { _ = g.Wait(context.Background()) }()
	c := caller("cached")
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		in := protocol.Inbound{Type: protocol.TypeRequest, RequestID: fmt.Sprintf("req_bench_%08d", i),
			Messages: []protocol.Message{{Role: "user", Content: "hello"}}}
		log, _, err := g.Submit(context.Background(), c, frameRequest(in))
		if err != nil {
			b.Fatal(err)
		}
		for s := log.Read(0); s.Terminal == nil; s = log.Read(0) {
			<-s.Changed
		}
	}
}
