// Package tracing sets up OpenTelemetry tracing for one gateway process:
// a tracer provider exporting OTLP over HTTP, configured by the standard
// OTEL_* variables, off unless they ask for it (docs/operations.md,
// "Tracing"). It also parses and formats W3C traceparent values, which
// the doors hand to the pipeline and the request record carries.
//
// It is its own package, not part of internal/telemetry, because only
// cmd/gateway needs the SDK and the exporter: the pipeline (gateway,
// router) takes a trace.Tracer, the API alone, so its packages and tests
// never depend on how spans leave the process.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// DefaultSampleRatio is the share of new traces sampled when
// OTEL_TRACES_SAMPLER is unset (parentbased_traceidratio): 5%, the fixed
// rate of X-Ray's default sampling rule. A request whose client sent a
// sampled traceparent is always traced (the parent decides), so a client
// debugging one request gets its trace whatever the ratio; the ratio bounds
// what the fleet's own traffic costs in X-Ray (billed per trace recorded)
// and in the collector, not the gateway's CPU (docs/benchmarks.md: even
// 100% costs little).
const DefaultSampleRatio = 0.05

// ServiceName is the service.name of the spans unless OTEL_SERVICE_NAME
// (or OTEL_RESOURCE_ATTRIBUTES) says otherwise.
const ServiceName = "jetway"

// Options are what New reports to. Zero values are allowed: a nil Logger
// discards the SDK's errors, a nil Observer counts nothing.
type Options struct {
	// Logger takes the OpenTelemetry SDK's errors (an unreachable
	// collector, a refused export) as otel_error lines, sampled: at most
	// ErrorLogBurst lines a second with the same message, then one in
	// ErrorLogThereafter. Without it the SDK writes plain-text lines to
	// stderr, in the middle of the JSON log.
	Logger *zap.Logger
	// Observer counts the spans of exports that failed.
	Observer Observer
}

// Observer counts spans the exporter could not deliver
// (*telemetry.Metrics is one).
type Observer interface {
	SpansExportFailed(n int)
}

// The sampling of otel_error lines: a collector that is down fails every
// export (one each OTEL_BSP_SCHEDULE_DELAY), so a few lines a second say
// it and the rest are counted by jetway_trace_spans_export_failed_total.
const (
	ErrorLogBurst      = 3
	ErrorLogThereafter = 100
)

// Provider is the process's tracer provider; its zero value (and nil) is
// tracing off: a no-op tracer.
type Provider struct {
	tp *sdktrace.TracerProvider
}

// New returns the tracer provider that getenv's OTEL_* variables ask for:
//
//   - OTEL_TRACES_EXPORTER: "otlp" turns tracing on, "none" off; unset, it
//     is on when OTEL_EXPORTER_OTLP_ENDPOINT or
//     OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set. Any other exporter is an error.
//
//   - OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL: only http/protobuf (the default)
//     is built in.
//
//   - OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG: the six standard
//     samplers; unset, parentbased_traceidratio at DefaultSampleRatio.
//
//   - OTEL_EXPORTER_OTLP_ENDPOINT (the collector's base URL, /v1/traces
//     appended) or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (used as is);
//     neither: http://localhost:4318/v1/traces.
//
//   - OTEL_BSP_SCHEDULE_DELAY: milliseconds between exports (default 5000).
//
//   - OTEL_SERVICE_NAME: default ServiceName.
//
// The exporter reads its other standard variables from the process
// environment itself (headers, timeout, compression, certificate), as do
// the batch span processor (the other OTEL_BSP_*) and the resource
// (OTEL_RESOURCE_ATTRIBUTES). attrs are added to the resource (the
// server's id and instance).
//
// When tracing is on, New installs o's error handler as OpenTelemetry's
// global one (the SDK has only a global), and its exporter counts failed
// exports on o.Observer.
func New(ctx context.Context, getenv func(string) string, o Options, attrs ...attribute.KeyValue) (*Provider, error) {
	on, err := enabled(getenv)
	if err != nil || !on {
		return &Provider{}, err
	}
	sampler, err := samplerFromEnv(getenv)
	if err != nil {
		return nil, err
	}
	var opts []otlptracehttp.Option
	if u := getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"); u != "" {
		opts = append(opts, otlptracehttp.WithEndpointURL(u)) // as is, per the specification
	} else if u := getenv("OTEL_EXPORTER_OTLP_ENDPOINT"); u != "" {
		opts = append(opts, otlptracehttp.WithEndpointURL(strings.TrimRight(u, "/")+"/v1/traces"))
	}
	otel.SetErrorHandler(errorHandler(o.Logger))
	otlp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("otlp trace exporter: %w", err)
	}
	var exp sdktrace.SpanExporter = otlp
	if o.Observer != nil {
		exp = countingExporter{SpanExporter: otlp, obs: o.Observer}
	}
	var batch []sdktrace.BatchSpanProcessorOption
	if v := getenv("OTEL_BSP_SCHEDULE_DELAY"); v != "" {
		ms, err := strconv.Atoi(v)
		if err != nil || ms <= 0 {
			return nil, fmt.Errorf("OTEL_BSP_SCHEDULE_DELAY=%q: want milliseconds", v)
		}
		batch = append(batch, sdktrace.WithBatchTimeout(time.Duration(ms)*time.Millisecond))
	}
	name := ServiceName
	if v := getenv("OTEL_SERVICE_NAME"); v != "" {
		name = v
	}
	res, err := resource.Merge(envResource(ctx), resource.NewSchemaless(append(attrs, semconv.ServiceName(name))...))
	if err != nil {
		return nil, fmt.Errorf("trace resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp, batch...), sdktrace.WithSampler(sampler), sdktrace.WithResource(res))
	return &Provider{tp: tp}, nil
}

// errorHandler logs the SDK's errors through logger, sampled per message.
func errorHandler(logger *zap.Logger) otel.ErrorHandler {
	if logger == nil {
		logger = zap.NewNop()
	}
	sampled := logger.WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
		return zapcore.NewSamplerWithOptions(c, time.Second, ErrorLogBurst, ErrorLogThereafter)
	}))
	return otel.ErrorHandlerFunc(func(err error) {
		sampled.Warn("otel_error", zap.Error(err))
	})
}

// countingExporter counts the spans of failed exports.
type countingExporter struct {
	sdktrace.SpanExporter
	obs Observer
}

func (e countingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := e.SpanExporter.ExportSpans(ctx, spans)
	if err != nil {
		e.obs.SpansExportFailed(len(spans))
	}
	return err
}

// envResource is what OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES say
// (empty when they say nothing or cannot be read).
func envResource(ctx context.Context) *resource.Resource {
	r, err := resource.New(ctx, resource.WithFromEnv())
	if err != nil {
		return resource.Empty()
	}
	return r
}

// enabled reports whether the variables turn tracing on.
func enabled(getenv func(string) string) (bool, error) {
	switch exp := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER"))); exp {
	case "none":
		return false, nil
	case "":
		if getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
			return false, nil
		}
	case "otlp":
	default:
		return false, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: only otlp (or none) is built in", exp)
	}
	proto := getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if proto == "" {
		proto = getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	if proto != "" && proto != "http/protobuf" {
		return false, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL=%q: only http/protobuf is built in (the collector's port 4318)", proto)
	}
	return true, nil
}

// samplerFromEnv is OTEL_TRACES_SAMPLER's sampler, the default when unset.
func samplerFromEnv(getenv func(string) string) (sdktrace.Sampler, error) {
	name := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_SAMPLER")))
	if name == "" {
		name = "parentbased_traceidratio"
	}
	ratio := DefaultSampleRatio
	if arg := strings.TrimSpace(getenv("OTEL_TRACES_SAMPLER_ARG")); arg != "" && strings.HasSuffix(name, "traceidratio") {
		r, err := strconv.ParseFloat(arg, 64)
		if err != nil || r < 0 || r > 1 {
			return nil, fmt.Errorf("OTEL_TRACES_SAMPLER_ARG=%q: want a ratio from 0 to 1", arg)
		}
		ratio = r
	}
	switch name {
	case "parentbased_traceidratio":
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio)), nil
	case "traceidratio":
		return sdktrace.TraceIDRatioBased(ratio), nil
	case "always_on":
		return sdktrace.AlwaysSample(), nil
	case "always_off":
		return sdktrace.NeverSample(), nil
	case "parentbased_always_on":
		return sdktrace.ParentBased(sdktrace.AlwaysSample()), nil
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), nil
	}
	return nil, fmt.Errorf("OTEL_TRACES_SAMPLER=%q: not a sampler this build knows", name)
}

// Enabled reports whether spans are exported.
func (p *Provider) Enabled() bool { return p != nil && p.tp != nil }

// Tracer is the tracer of Jetway's spans (a no-op one when off).
func (p *Provider) Tracer() trace.Tracer {
	if !p.Enabled() {
		return noop.NewTracerProvider().Tracer("")
	}
	return p.tp.Tracer("github.com/jetway-gateway/jetway")
}

// Shutdown exports what is buffered and stops; ctx bounds it.
func (p *Provider) Shutdown(ctx context.Context) error {
	if !p.Enabled() {
		return nil
	}
	if err := p.tp.Shutdown(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("trace shutdown: %w", err)
	}
	return nil
}

// Parse reads a W3C traceparent value; anything invalid (or absent) is
// the zero SpanContext, which starts a new trace: a bad value is ignored,
// never an error and never echoed.
func Parse(traceparent string) trace.SpanContext {
	if traceparent == "" || len(traceparent) > maxTraceparent {
		return trace.SpanContext{}
	}
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": traceparent})
	return trace.SpanContextFromContext(ctx)
}

// maxTraceparent bounds what Parse reads: version 00 is 55 characters; a
// later version may append fields, which W3C lets a parser ignore.
const maxTraceparent = 256

// Format is sc as a traceparent value ("" when sc is not valid).
func Format(sc trace.SpanContext) string {
	if !sc.IsValid() {
		return ""
	}
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(context.Background(), sc), c)
	return c["traceparent"]
}

// TraceID is sc's trace id in hex, "" when sc is not valid: the value of
// the trace_id log field and usage record column.
func TraceID(sc trace.SpanContext) string {
	if !sc.TraceID().IsValid() {
		return ""
	}
	return sc.TraceID().String()
}
