package router

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/jetway-gateway/jetway/internal/backoff"
	"github.com/jetway-gateway/jetway/internal/telemetry"
	"github.com/jetway-gateway/jetway/internal/tracing"
)

// Target is one model of a routing chain.
type Target struct {
	ID                string        // the configured model id (named in frames, records, metrics and breakers)
	BedrockID         string        // what Bedrock is called with
	FirstTokenTimeout time.Duration // no first token by then: try the next target; 0: no deadline
	// Retries is how many more times this target is called, after a
	// jittered backoff, when it fails before its first token with
	// throttling, not ready or unavailable, before the chain moves on. A
	// first-token timeout is not retried on the same model (the next one
	// gets the time). 0 (the default): no retry; capped at Options.MaxRetries.
	Retries int
	// Cache is how the model caches prompts; nil: it does not, and no
	// cache point reaches it.
	Cache *CacheLimits
	// Places are the model's placements, tried in turn (in the
	// conversation's order, see affinity) on throttling or unavailability
	// before the first token, each behind its own breaker, before the
	// chain moves to the next target; none: BedrockID in the default
	// region and account.
	Places []Place
	// Tier is the serviceTier every call to this target names; "": none.
	// A call is never retried in another tier.
	Tier string
}

// Outcome says how a routed call ended.
type Outcome struct {
	Result
	Model        string // the target that answered (or failed last)
	FallbackFrom string // the first target that failed (or was skipped) before this one answered, if any
	// Place is the placement that answered (or was called last).
	Place Place
	// ServiceTier is the tier that served: as Bedrock reported it, else
	// the one the call named ("" for none).
	ServiceTier string
}

// Streamer is one model call: the Bedrock adapter implements it.
type Streamer interface {
	Stream(ctx context.Context, c Call, onDelta func(text string)) (Result, error)
}

// Defaults of the zero values of Options.
const (
	DefaultFailureThreshold = 5
	DefaultOpenTimeout      = 30 * time.Second
	DefaultHalfOpenProbes   = 1
	DefaultRetryBackoff     = 100 * time.Millisecond
	DefaultMaxRetryBackoff  = 2 * time.Second
	DefaultMaxRetries       = 3
)

// Options configure a Router. Zero values mean the documented defaults.
type Options struct {
	// FailureThreshold is how many consecutive failures before the first
	// token (throttled, not ready, unavailable, first-token timeout) open a
	// model's circuit breaker; default 5. Validation and access errors,
	// client cancels and the request's own deadline do not count.
	FailureThreshold int
	// OpenTimeout is the cool-down: how long an open breaker skips its
	// model (no call is made) before letting probes through; default 30s.
	OpenTimeout time.Duration
	// HalfOpenProbes is how many calls a half-open breaker lets through at
	// once; that many first tokens in a row close it, one failure reopens
	// it; default 1.
	HalfOpenProbes int
	// RetryBackoff is the base of the same-model retry backoff
	// (Target.Retries): retry n (1, 2, ...) waits a random time in
	// [d/2, d] with d = RetryBackoff * 2^(n-1), at most MaxRetryBackoff;
	// default 100ms.
	RetryBackoff time.Duration
	// MaxRetryBackoff caps one retry wait; default 2s.
	MaxRetryBackoff time.Duration
	// MaxRetries caps Target.Retries; default 3.
	MaxRetries int
	// Metrics receives breaker states (breaker_state) and every model
	// call's latency and error kind (bedrock_call_duration_seconds,
	// bedrock_errors_total), labelled with Target.ID; nil: none.
	Metrics *telemetry.Metrics
	// Logger logs breaker state changes; nil: none.
	Logger *zap.Logger
	// EstimateTokens estimates a text's input tokens, for placing cache
	// points (the gateway's estimator); nil: one token per started four bytes.
	EstimateTokens func(text string) int64
	// Tracer makes one span per model call (every retry and fallback),
	// a child of the span in the call's ctx; nil: none.
	Tracer trace.Tracer
	// AffinityTTL is how long this server remembers the placement a
	// conversation moved to; default DefaultAffinityTTL.
	AffinityTTL time.Duration
	// AffinityEntries bounds the conversations remembered; default
	// DefaultAffinityEntries.
	AffinityEntries int
}

func (o *Options) defaults() {
	if o.FailureThreshold <= 0 {
		o.FailureThreshold = DefaultFailureThreshold
	}
	if o.OpenTimeout <= 0 {
		o.OpenTimeout = DefaultOpenTimeout
	}
	if o.HalfOpenProbes <= 0 {
		o.HalfOpenProbes = DefaultHalfOpenProbes
	}
	if o.RetryBackoff <= 0 {
		o.RetryBackoff = DefaultRetryBackoff
	}
	if o.MaxRetryBackoff <= 0 {
		o.MaxRetryBackoff = DefaultMaxRetryBackoff
	}
	if o.MaxRetries <= 0 {
		o.MaxRetries = DefaultMaxRetries
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.EstimateTokens == nil {
		o.EstimateTokens = estimateTokens
	}
	if o.AffinityTTL <= 0 {
		o.AffinityTTL = DefaultAffinityTTL
	}
	if o.AffinityEntries <= 0 {
		o.AffinityEntries = DefaultAffinityEntries
	}
}

// Router walks a chain of models: the first target that produces a first
// token answers; a target that fails before its first token with a
// retryable error (throttled, not ready, unavailable, first-token timeout)
// hands the call to the next, and a target whose circuit breaker is open
// is skipped without a call. After the first token nothing switches
// silently. A Router is safe for concurrent use; its breakers are this
// process's (per model and task).
type Router struct {
	model    Streamer
	opts     Options
	tracing  bool // Options.Tracer was set
	breakers *breakers
	affinity *affinity
}

// New returns a Router over the model client; zero Options fields mean
// their defaults.
func New(model Streamer, o Options) *Router {
	tracing := o.Tracer != nil
	o.defaults()
	b := newBreakers(o, o.Metrics, o.Logger)
	return &Router{model: model, opts: o, tracing: tracing, breakers: b,
		affinity: newAffinity(o.AffinityTTL, o.AffinityEntries, b.closes)}
}

// ErrAllUnavailable wraps the last error when every target failed before
// its first token or was skipped by its breaker.
var ErrAllUnavailable = errors.New("every model in the chain is unavailable")

// Stream calls the chain. onDelta is called in order, on the calling
// goroutine, for every delta of the answering target. The error, if any, is
// a *ModelError; when every target failed retryably (or was skipped, see
// ErrBreakerOpen) it also wraps ErrAllUnavailable. A validation or access
// error, a failure after the first token (ErrMidStream) and the end of ctx
// stop the chain at once. An answer that ends with stop reason
// guardrail_intervened is a Result, not an error.
func (r *Router) Stream(ctx context.Context, chain []Target, c Call, onDelta func(string)) (Outcome, error) {
	var out Outcome
	var lastErr error
	for i, t := range chain {
		out.Model = t.ID
		var why []attribute.KeyValue // a fallback says from what and why
		if i > 0 {
			why = []attribute.KeyValue{tracing.FallbackFrom.String(chain[i-1].ID), tracing.FallbackReason.String(errorKind(lastErr))}
		}
		res, place, err := r.streamTarget(ctx, &chain[i], c, onDelta, why)
		out.Result, out.Place, out.ServiceTier = res, place, t.Tier
		if res.ServiceTier != "" {
			out.ServiceTier = res.ServiceTier
		}
		if err == nil {
			return out, nil
		}
		lastErr = err
		var me *ModelError
		if !errors.As(err, &me) || me.Streamed || !me.Retryable() || ctx.Err() != nil {
			return out, err
		}
		if out.FallbackFrom == "" && i+1 < len(chain) {
			out.FallbackFrom = t.ID
		}
	}
	if lastErr == nil {
		return out, fmt.Errorf("route: empty chain: %w", ErrAllUnavailable)
	}
	return out, fmt.Errorf("%w: %w", ErrAllUnavailable, lastErr)
}

// streamTarget calls one target: its placements in the conversation's
// order, each once, moving on when one fails retryably before its first
// token; then, as configured, the round again after a backoff. It
// returns the placement that answered (or was called last).
func (r *Router) streamTarget(ctx context.Context, t *Target, c Call, onDelta func(string), why []attribute.KeyValue) (Result, Place, error) {
	retry := backoff.Policy{Base: r.opts.RetryBackoff, Max: r.opts.MaxRetryBackoff, Jitter: backoff.Equal,
		Attempts: 1 + max(0, min(t.Retries, r.opts.MaxRetries))}
	places, first := r.affinity.order(t, c.Affinity)
	var res Result
	var err error
	var place Place
	for attempt := 1; ; attempt++ {
		for i, p := range places {
			place = p
			if i > 0 {
				why = []attribute.KeyValue{tracing.PlacementFrom.String(places[i-1].Name), tracing.FallbackReason.String(errorKind(err))}
			}
			res, err = r.streamOnce(ctx, t, p, c, onDelta, attempt-1, why)
			if err == nil {
				r.affinity.answered(t, c.Affinity, first, p)
				return res, p, nil
			}
			var me *ModelError
			if !errors.As(err, &me) || me.Streamed || !me.Retryable() || ctx.Err() != nil {
				return res, p, err
			}
		}
		if !retrySameModel(err) || ctx.Err() != nil {
			return res, place, err
		}
		why = []attribute.KeyValue{tracing.RetryReason.String(errorKind(err))}
		if retry.Wait(ctx, attempt) != nil {
			return res, place, err
		}
	}
}

// retrySameModel reports whether a failure is worth another call to the
// same model: retryable, not a first-token timeout, not a breaker skip.
func retrySameModel(err error) bool {
	var me *ModelError
	return errors.As(err, &me) && me.Retryable() && me.Kind != KindTimeout && !errors.Is(err, ErrBreakerOpen)
}

// errorKind is the label of a model call's error ("" for none).
func errorKind(err error) string {
	if err == nil {
		return ""
	}
	var me *ModelError
	if errors.As(err, &me) {
		return string(me.Kind)
	}
	return string(KindUnavailable)
}

// streamOnce makes one call to a target through its breaker, with its
// first-token deadline, in a span of its own (why: the fallback or retry
// it is). A call the breaker skips gets a span too, with its error.
func (r *Router) streamOnce(ctx context.Context, t *Target, p Place, c Call, onDelta func(string), attempt int, why []attribute.KeyValue) (res Result, err error) {
	span := trace.SpanFromContext(ctx) // tracing off: the caller's span, untouched
	if r.tracing {
		attrs := append(why, tracing.GenAIChat, tracing.GenAIBedrock, tracing.GenAISystem,
			tracing.RequestModel.String(p.BedrockID), tracing.Model.String(t.ID), tracing.Attempt.Int(attempt),
			tracing.MaxTokens.Int(c.MaxTokens))
		if p.Name != "" {
			attrs = append(attrs, tracing.Placement.String(p.Name))
		}
		if p.Profile != "" {
			attrs = append(attrs, tracing.BedrockProfile.String(p.Profile))
		}
		if t.Tier != "" {
			attrs = append(attrs, tracing.ServiceTier.String(t.Tier))
		}
		ctx, span = r.opts.Tracer.Start(ctx, "chat "+t.ID, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
		defer func() { endAttempt(span, p, res, err) }()
	}
	report, berr := r.breakers.get(t.ID, p.Name).Allow()
	if berr != nil {
		return Result{}, &ModelError{Kind: KindUnavailable, Model: t.ID, Err: fmt.Errorf("%w: %w", ErrBreakerOpen, berr)}
	}
	c.ModelID, c.Region, c.RoleARN, c.ServiceTier = p.BedrockID, p.Region, p.RoleARN, t.Tier
	c = placeCachePoints(c, t.Cache, r.opts.EstimateTokens)
	callCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var timer *time.Timer
	firstTokenMissed := errors.New("no first token in time")
	if t.FirstTokenTimeout > 0 {
		timer = time.AfterFunc(t.FirstTokenTimeout, func() { cancel(firstTokenMissed) })
		defer timer.Stop()
	}
	// The breaker hears about the call once: at the first token, or when
	// the call ends without one.
	var reportOnce sync.Once
	reportHealth := func(err error) { reportOnce.Do(func() { report(healthSignal(ctx, err)) }) }
	defer func() {
		// A panic in onDelta must not leave a half-open probe slot taken.
		reportHealth(errNeutral)
	}()

	streamed := false
	firstToken := func() {
		streamed = true
		if timer != nil {
			timer.Stop()
		}
		reportHealth(nil)
		if r.tracing {
			span.AddEvent("first_token")
		}
	}
	if onBlock := c.OnBlock; onBlock != nil {
		// In block mode the first block (reasoning, a tool call) is the
		// first token: no fallback after it.
		c.OnBlock = func(d BlockDelta) {
			if !streamed {
				firstToken()
			}
			onBlock(d)
		}
	}
	start := time.Now()
	res, err = r.model.Stream(callCtx, c, func(text string) {
		if !streamed {
			firstToken()
		}
		onDelta(text)
	})
	if err != nil && errors.Is(context.Cause(callCtx), firstTokenMissed) && ctx.Err() == nil {
		err = &ModelError{Kind: KindTimeout, Model: t.ID, Streamed: streamed,
			Err: fmt.Errorf("%w: no first token within %s", ErrTimeout, t.FirstTokenTimeout)}
	}
	reportHealth(err)
	kind := ""
	if err != nil {
		kind = string(KindUnavailable)
		var me *ModelError
		if errors.As(err, &me) {
			kind = string(me.Kind)
		}
	}
	r.opts.Metrics.ObserveBedrock(t.ID, time.Since(start), kind)
	return res, err
}

// endAttempt ends a model call's span with what the call reported.
func endAttempt(span trace.Span, p Place, res Result, err error) {
	if !span.IsRecording() {
		span.End()
		return
	}
	if err != nil {
		kind := errorKind(err)
		span.SetAttributes(tracing.ErrorType.String(kind))
		span.SetStatus(codes.Error, kind)
	} else {
		span.SetAttributes(tracing.ResponseModel.String(p.BedrockID), tracing.InputTokens.Int(res.Usage.InputTokens),
			tracing.OutputTokens.Int(res.Usage.OutputTokens))
		if res.StopReason != "" {
			span.SetAttributes(tracing.FinishReasons.StringSlice([]string{res.StopReason}))
		}
	}
	span.End()
}
