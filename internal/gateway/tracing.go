package gateway

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/jetway-gateway/jetway/internal/tracing"
)

// A request's trace (docs/operations.md, "Tracing"): the root span
// "jetway.request" starts when the request reaches the pipeline (every
// door calls Submit or Refuse) and ends with its one ending (finish); its
// children are the pipeline's steps, and the router adds one span per
// model call. A server that resumes, follows, cancels or takes over the
// request joins the same trace through the record's traceparent
// (stream.Record.Trace). No span work happens per token.

// startRequest starts a request's root span, a child of the client's
// traceparent when the door passed one (Request.Trace). ctx is the
// caller's, without its end: the request outlives it.
func (g *Gateway) startRequest(ctx context.Context, c Caller, req Request) (context.Context, trace.Span) {
	parent := context.WithoutCancel(ctx)
	if req.Trace.IsValid() {
		parent = trace.ContextWithRemoteSpanContext(parent, req.Trace)
	}
	if !g.tracing {
		return parent, trace.SpanFromContext(parent) // the client's trace id still names the request
	}
	p := c.Principal
	return g.tracer.Start(parent, "jetway.request", trace.WithSpanKind(trace.SpanKindServer),
		trace.WithTimestamp(req.ReceivedAt),
		trace.WithAttributes(tracing.GenAIChat, tracing.GenAIBedrock, tracing.GenAISystem,
			tracing.RequestID.String(req.RequestID), tracing.Door.String(req.door()),
			tracing.Tenant.String(p.Tenant), tracing.App.String(p.App)))
}

// withTraceID adds the trace id of span to a request's logger.
func withTraceID(logger *zap.Logger, sc trace.SpanContext) *zap.Logger {
	if id := tracing.TraceID(sc); id != "" {
		return logger.With(zap.String("trace_id", id))
	}
	return logger
}

// span starts a child span of the request's root (a no-op span when
// tracing is off or the request is not sampled).
func (f *flight) span(name string) (context.Context, trace.Span) {
	if !f.g.tracing {
		return f.tctx, trace.SpanFromContext(f.tctx)
	}
	return f.g.tracer.Start(f.tctx, name)
}

// start starts a span under ctx's; with tracing off it starts nothing and
// returns ctx's own span (a no-op, or the client's context that names the
// request's trace), so the pipeline costs what it cost before tracing.
func (g *Gateway) start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if !g.tracing {
		return ctx, trace.SpanFromContext(ctx)
	}
	return g.tracer.Start(ctx, name, opts...)
}

// none is no attribute (endSpan's a or b).
var none attribute.KeyValue

// endSpan ends span with up to two attributes (none: no attribute),
// marking it failed with the protocol code of err. The attributes are
// values, not a variadic slice, so that with tracing off ending a span
// allocates nothing.
func endSpan(span trace.Span, err error, a, b attribute.KeyValue) {
	if span.IsRecording() {
		for _, kv := range [2]attribute.KeyValue{a, b} {
			if kv.Valid() {
				span.SetAttributes(kv)
			}
		}
		if err != nil {
			code := Failure(err).Code
			span.SetAttributes(tracing.ErrorType.String(code))
			span.SetStatus(codes.Error, code)
		}
	}
	span.End()
}

// endRequest ends the root span of a request with its outcome.
func endRequest(span trace.Span, o *outcome) {
	if span == nil || !span.IsRecording() {
		if span != nil {
			span.End()
		}
		return
	}
	code := "done" // a done outcome; else the error code
	if o.err != nil {
		code = Failure(o.err).Code
	}
	span.SetAttributes(tracing.Outcome.String(code), tracing.Model.String(o.model), tracing.Chunks.Int(o.chunks),
		tracing.Cached.Bool(o.cached))
	if o.how != endRejected {
		span.SetAttributes(tracing.ResponseModel.String(o.model), tracing.InputTokens.Int64(o.usage.InputTokens),
			tracing.OutputTokens.Int64(o.usage.OutputTokens))
	}
	if o.stopReason != "" {
		span.SetAttributes(tracing.FinishReasons.StringSlice([]string{o.stopReason}))
	}
	if o.fallbackFrom != "" {
		span.SetAttributes(tracing.FallbackFrom.String(o.fallbackFrom))
	}
	if o.place.Name != "" {
		span.SetAttributes(tracing.Placement.String(o.place.Name))
	}
	if o.place.Profile != "" {
		span.SetAttributes(tracing.BedrockProfile.String(o.place.Profile))
	}
	if o.tier != "" {
		span.SetAttributes(tracing.ServiceTier.String(o.tier))
	}
	if o.err != nil {
		span.SetAttributes(tracing.ErrorType.String(code))
		span.SetStatus(codes.Error, code)
	}
	span.End(trace.WithTimestamp(o.end))
}

// recordTrace is the parent of a span about another server's record: its
// root span (invalid when the record carries none).
func recordTrace(trace string) context.Context {
	sc := tracing.Parse(trace)
	if !sc.IsValid() {
		return context.Background()
	}
	return traceContext(sc)
}

func traceContext(sc trace.SpanContext) context.Context {
	return trace.ContextWithRemoteSpanContext(context.Background(), sc)
}
