package gateway

import (
	"context"
	"errors"
	"fmt"

	"github.com/jetway-gateway/jetway/internal/auth"
	"github.com/jetway-gateway/jetway/internal/call"
	"github.com/jetway-gateway/jetway/internal/quota"
	"github.com/jetway-gateway/jetway/internal/router"
)

// Errors the pipeline itself raises. Every error, from here or from a
// domain package, becomes a failure (call.Failure) in exactly one place: Failure.
var (
	errConflict        = errors.New("request_id was already used with a different body")
	errNotFound        = errors.New("no such request")
	errForbidden       = errors.New("forbidden")
	errModelNotAllowed = errors.New("model not allowed")
	errRateLimited     = errors.New("too many requests in flight")
	errBusy            = errors.New("server busy")
	errDraining        = errors.New("server draining")
	errCancelled       = errors.New("cancelled by the client")
	errTimeout         = errors.New("request timed out")
	errInterrupted     = errors.New("the server that owned the stream stopped")

	// ErrDraining is returned to new work while the server shuts down.
	ErrDraining = errDraining
	// ErrConflict: a request id reused with a different body.
	ErrConflict = errConflict
	// ErrNotFound: no request of the caller's has that id.
	ErrNotFound = errNotFound
	// ErrBusy: this server is at an admission limit (for one, its budget
	// for frames with attachments); retryable, here or elsewhere.
	ErrBusy = errBusy
	// ErrRateLimited: the caller is at one of its own limits (for one,
	// its share of the budget for frames with attachments); retryable
	// once its other work is through.
	ErrRateLimited = errRateLimited
	// ErrAtCapacity is the busy of this server's own bounds (its in-flight
	// caps, its attachment budget), not of a store every server shares:
	// another server may have room.
	ErrAtCapacity = fmt.Errorf("%w: at this server's capacity", errBusy)
	// ErrRoomElsewhere marks a busy whose session is being moved to a
	// server with room (it got a `draining` frame): wrap the busy error
	// with it and the client is told to send again at once, there.
	ErrRoomElsewhere = errors.New("another server has room: this session moves there")
)

// RetryAfterBusyMs is the retry hint sent with busy and rate_limited errors.
const RetryAfterBusyMs = 1000

// RetryAfterMovedMs is the retry hint of a busy whose session moves to a
// server with room: the client reconnects at once on the `draining` frame
// and sends again there.
const RetryAfterMovedMs = 100

// Failure is the one table from errors to the core's failure events, which
// each door renders in its own shape. The message is safe to show;
// anything unexpected is `internal`, with the detail left to the log.
func Failure(err error) call.Failure {
	var e call.Failure
	set := func(code, msg string, retryable bool) {
		e.Code, e.Status, e.Message, e.Retryable = code, call.Status(code), msg, retryable
	}
	var exceeded *quota.ExceededError
	switch {
	case errors.Is(err, call.ErrInvalid):
		set(call.CodeInvalidRequest, clientMessage(err, "invalid request"), false)
		var ce *call.ClientError
		if errors.As(err, &ce) {
			e.Path, e.Problem = ce.Path, ce.Problem
		}
	case errors.As(err, &exceeded):
		set(call.CodeQuotaExceeded, "Token quota exceeded", true)
		e.RetryAfterMs = exceeded.RetryAfter.Milliseconds()
		if e.RetryAfterMs < 1 {
			e.RetryAfterMs = 1
		}
		e.Scope, e.Window = exceeded.Scope.Kind, string(exceeded.Window)
	case errors.Is(err, errConflict):
		set(call.CodeConflict, "request_id was already used with a different body", false)
	case errors.Is(err, errNotFound):
		set(call.CodeNotFound, "unknown request_id: it never arrived, so it is safe to send it again", false)
	case errors.Is(err, errModelNotAllowed):
		set(call.CodeModelNotAllowed, clientMessage(err, "model not allowed"), false)
	case errors.Is(err, errForbidden), auth.IsForbidden(err):
		set(call.CodeForbidden, "forbidden", false)
	case isUnauthorized(err):
		set(call.CodeUnauthorized, "invalid or expired token", false)
	case errors.Is(err, errRateLimited):
		set(call.CodeRateLimited, clientMessage(err, "too many requests in flight"), true)
		e.RetryAfterMs = RetryAfterBusyMs
	case errors.Is(err, errDraining):
		set(call.CodeDraining, "server is draining: reconnect and send new work there", true)
		e.RetryAfterMs = RetryAfterBusyMs
	case errors.Is(err, errBusy) && errors.Is(err, ErrRoomElsewhere):
		set(call.CodeBusy, "server busy: this session moves to a server with room; send again there", true)
		e.RetryAfterMs = RetryAfterMovedMs
	case errors.Is(err, errBusy), errors.Is(err, quota.ErrUnavailable):
		set(call.CodeBusy, "server busy: retry, possibly on another server", true)
		e.RetryAfterMs = RetryAfterBusyMs
	case errors.Is(err, errInterrupted):
		set(call.CodeInterrupted, "the server that owned this answer stopped: text holds what was saved", true)
	case errors.Is(err, errCancelled):
		set(call.CodeCancelled, "cancelled", false)
	case errors.Is(err, errTimeout):
		set(call.CodeTimeout, "the request took too long", true)
	case errors.Is(err, router.ErrAllUnavailable) && !errors.Is(err, router.ErrTimeout):
		set(call.CodeModelUnavailable, "every model for this app is throttled or unavailable", true)
		e.RetryAfterMs = RetryAfterBusyMs
	case errors.Is(err, router.ErrMidStream):
		set(call.CodeModelError, "the model failed while answering", true)
	case errors.Is(err, router.ErrTimeout):
		set(call.CodeTimeout, "the model did not answer in time", true)
	case errors.Is(err, router.ErrValidation):
		msg := "the model rejected the request"
		if me := (*router.ModelError)(nil); errors.As(err, &me) && me.Reason() != "" {
			msg += ": " + call.Clip(me.Reason())
		}
		set(call.CodeInvalidRequest, msg, false)
	case errors.Is(err, router.ErrThrottled), errors.Is(err, router.ErrUnavailable), errors.Is(err, router.ErrNotReady):
		set(call.CodeModelUnavailable, "the model is throttled or unavailable", true)
	case errors.Is(err, router.ErrAccessDenied):
		set(call.CodeModelError, "the gateway may not call this model", false)
	case errors.Is(err, context.Canceled):
		set(call.CodeInterrupted, "the server stopped this request", true)
	default:
		set(call.CodeInternal, "internal error", true)
	}
	return e
}

func isUnauthorized(err error) bool {
	for _, s := range []error{auth.ErrMissingToken, auth.ErrMalformed, auth.ErrBadSignature, auth.ErrUnknownKey,
		auth.ErrExpired, auth.ErrNotYetValid, auth.ErrWrongIssuer, auth.ErrWrongTokenUse, auth.ErrUnknownClient} {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

// clientMessage is the safe text an error carries for the client (a
// *call.ClientError), else fallback. Nothing is cut out of err.Error().
func clientMessage(err error, fallback string) string {
	var ce *call.ClientError
	if errors.As(err, &ce) {
		return ce.Message()
	}
	return fallback
}
