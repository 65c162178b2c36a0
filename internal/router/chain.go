package router

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Target is one model of a routing chain.
type Target struct {
	ID                string        // the configured model id (named in frames and records)
	BedrockID         string        // what Bedrock is called with
	FirstTokenTimeout time.Duration // no first token by then: try the next target
}

// Outcome says how a routed call ended.
type Outcome struct {
	Result
	Model        string // the target that answered (or failed last)
	FallbackFrom string // the first target that failed before this one answered, if any
}

// Streamer is one model call: the Bedrock adapter implements it.
type Streamer interface {
	Stream(ctx context.Context, c Call, onDelta func(text string)) (Result, error)
}

// Router walks a chain of models: the first target that produces a first
// token answers; a target that fails before its first token with a
// retryable error (throttled, not ready, unavailable, first-token timeout)
// hands the call to the next. After the first token nothing switches silently.
type Router struct {
	model Streamer
}

// New returns a Router over the model client.
func New(model Streamer) *Router { return &Router{model: model} }

// ErrAllUnavailable wraps the last error when every target failed before its first token.
var ErrAllUnavailable = errors.New("every model in the chain is unavailable")

// Stream calls the chain. onDelta is called in order for every delta of the
// answering target. The error, if any, is a *ModelError; when every target
// failed retryably it also wraps ErrAllUnavailable.
func (r *Router) Stream(ctx context.Context, chain []Target, c Call, onDelta func(string)) (Outcome, error) {
	var out Outcome
	var lastErr error
	for i, t := range chain {
		out.Model = t.ID
		res, err := r.streamOne(ctx, t, c, onDelta)
		out.Result = res
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

// streamOne calls one target with its first-token deadline.
func (r *Router) streamOne(ctx context.Context, t Target, c Call, onDelta func(string)) (Result, error) {
	c.ModelID = t.BedrockID
	callCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var once sync.Once
	var timer *time.Timer
	firstTokenMissed := errors.New("no first token in time")
	if t.FirstTokenTimeout > 0 {
		timer = time.AfterFunc(t.FirstTokenTimeout, func() { cancel(firstTokenMissed) })
		defer timer.Stop()
	}
	streamed := false
	res, err := r.model.Stream(callCtx, c, func(text string) {
		if !streamed {
			streamed = true
			if timer != nil {
				once.Do(func() { timer.Stop() })
			}
		}
		onDelta(text)
	})
	if err != nil && errors.Is(context.Cause(callCtx), firstTokenMissed) && ctx.Err() == nil {
		return res, &ModelError{Kind: KindTimeout, Model: t.ID, Streamed: streamed,
			Err: fmt.Errorf("%w: no first token within %s", ErrTimeout, t.FirstTokenTimeout)}
	}
	return res, err
}
