package router

import (
	"context"
	"errors"
	"sync"

	"github.com/sony/gobreaker/v2"
	"go.uber.org/zap"

	"github.com/jetway-gateway/jetway/internal/telemetry"
)

// ErrBreakerOpen is wrapped by the *ModelError (kind unavailable) of a
// target the router skipped without calling it, because the model's
// circuit breaker is open (or half-open with its probes already out).
var ErrBreakerOpen = errors.New("model skipped: circuit breaker open")

// errNeutral is what the router reports to a breaker for a call that says
// nothing about the model's health: a validation or access error (the
// request or the configuration is wrong, not the model), a client cancel,
// or the request's own deadline.
var errNeutral = errors.New("not a model health signal")

// breakers holds one circuit breaker per configured model id, made on first
// use. The set of ids is the configuration's, so the map is bounded.
//
// A breaker judges only the part of a call that routing depends on: did
// the model produce a first token? A call is a success at its first token
// (or when it ends cleanly without one), and a failure when it ends before
// it with throttling, not ready, unavailable or a (first-token) timeout.
// Failures after the first token are not counted: they cannot be routed
// around, and holding a half-open probe open for a whole answer would keep
// every other request off the model for that long.
type breakers struct {
	settings gobreaker.Settings
	metrics  *telemetry.Metrics

	mu sync.Mutex
	m  map[string]*gobreaker.TwoStepCircuitBreaker[struct{}]
}

func newBreakers(o Options, metrics *telemetry.Metrics, logger *zap.Logger) *breakers {
	threshold := uint32(o.FailureThreshold)
	return &breakers{
		settings: gobreaker.Settings{
			MaxRequests: uint32(o.HalfOpenProbes),
			Timeout:     o.OpenTimeout,
			// Interval 0: counts in the closed state are cleared only by a
			// success (consecutive failures are what trips it).
			ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= threshold },
			IsExcluded:  func(err error) bool { return errors.Is(err, errNeutral) },
			// OnStateChange runs under the breaker's lock: it must not call
			// back into the breaker. Both calls below never block.
			OnStateChange: func(model string, from, to gobreaker.State) {
				metrics.SetBreakerState(model, telemetry.BreakerState(to))
				level := logger.Warn
				if to == gobreaker.StateClosed {
					level = logger.Info
				}
				level("breaker", zap.String("model", model), zap.String("from", from.String()),
					zap.String("to", to.String()))
			},
		},
		metrics: metrics,
		m:       make(map[string]*gobreaker.TwoStepCircuitBreaker[struct{}]),
	}
}

func (b *breakers) get(model string) *gobreaker.TwoStepCircuitBreaker[struct{}] {
	b.mu.Lock()
	defer b.mu.Unlock()
	cb, ok := b.m[model]
	if !ok {
		s := b.settings
		s.Name = model
		cb = gobreaker.NewTwoStepCircuitBreaker[struct{}](s)
		b.m[model] = cb
		// The gauge exists from the model's first call, at closed.
		b.metrics.SetBreakerState(model, telemetry.BreakerClosed)
	}
	return cb
}

// healthSignal turns a call's error into what its breaker should count:
// nil (success), errNeutral (neither), or the error itself (a failure).
// ctx is the request's context, not the per-call one, so a first-token
// timeout the router imposed counts and the request's own end does not.
func healthSignal(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return errNeutral
	}
	var me *ModelError
	if !errors.As(err, &me) {
		return err
	}
	switch me.Kind {
	case KindThrottled, KindNotReady, KindUnavailable, KindTimeout:
		return err
	case KindMidStream:
		// Reported as a success at the first token already (see breakers).
		return nil
	}
	return errNeutral
}

// BreakerState returns the state of the circuit breaker of a configured
// model id (closed for a model not called yet). Asking moves an open
// breaker whose cool-down has passed to half-open.
func (r *Router) BreakerState(model string) telemetry.BreakerState {
	r.breakers.mu.Lock()
	cb, ok := r.breakers.m[model]
	r.breakers.mu.Unlock()
	if !ok {
		return telemetry.BreakerClosed
	}
	return telemetry.BreakerState(cb.State())
}
