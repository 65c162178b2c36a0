package router

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"

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
	// recoveries counts, by breaker name, the times it closed again
	// after opening (the affinity's signal that a placement is back).
	recoveries sync.Map // string -> *atomic.Uint64
}

func newBreakers(o Options, metrics *telemetry.Metrics, logger *zap.Logger) *breakers {
	threshold := uint32(o.FailureThreshold)
	b := &breakers{
		settings: gobreaker.Settings{
			MaxRequests: uint32(o.HalfOpenProbes),
			Timeout:     o.OpenTimeout,
			// Interval 0: counts in the closed state are cleared only by a
			// success (consecutive failures are what trips it).
			ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= threshold },
			IsExcluded:  func(err error) bool { return errors.Is(err, errNeutral) },
			// OnStateChange runs under the breaker's lock: it must not call
			// back into the breaker. Both calls below never block.
		},
		metrics: metrics,
		m:       make(map[string]*gobreaker.TwoStepCircuitBreaker[struct{}]),
	}
	b.settings.OnStateChange = func(name string, from, to gobreaker.State) {
		model, place, _ := strings.Cut(name, "@")
		metrics.SetBreakerState(model, place, telemetry.BreakerState(to))
		level := logger.Warn
		if to == gobreaker.StateClosed {
			level = logger.Info
			b.recovered(name).Add(1)
		}
		fields := []zap.Field{zap.String("model", model), zap.String("from", from.String()), zap.String("to", to.String())}
		if place != "" {
			fields = append(fields, zap.String("placement", place))
		}
		level("breaker", fields...)
	}
	return b
}

func (b *breakers) recovered(name string) *atomic.Uint64 {
	if c, ok := b.recoveries.Load(name); ok {
		return c.(*atomic.Uint64)
	}
	c, _ := b.recoveries.LoadOrStore(name, new(atomic.Uint64))
	return c.(*atomic.Uint64)
}

// closes is how many times the named breaker closed after opening.
func (b *breakers) closes(name string) uint64 { return b.recovered(name).Load() }

// get is the breaker of a model's placement ("": its one implicit place).
func (b *breakers) get(model, place string) *gobreaker.TwoStepCircuitBreaker[struct{}] {
	name := breakerName(model, place)
	b.mu.Lock()
	defer b.mu.Unlock()
	cb, ok := b.m[name]
	if !ok {
		s := b.settings
		s.Name = name
		cb = gobreaker.NewTwoStepCircuitBreaker[struct{}](s)
		b.m[name] = cb
		// The gauge exists from the placement's first call, at closed.
		b.metrics.SetBreakerState(model, place, telemetry.BreakerClosed)
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
// model id's placement ("" for a model without placements; closed for
// one not called yet). Asking moves an open breaker whose cool-down has
// passed to half-open.
func (r *Router) BreakerState(model, place string) telemetry.BreakerState {
	r.breakers.mu.Lock()
	cb, ok := r.breakers.m[breakerName(model, place)]
	r.breakers.mu.Unlock()
	if !ok {
		return telemetry.BreakerClosed
	}
	return telemetry.BreakerState(cb.State())
}
