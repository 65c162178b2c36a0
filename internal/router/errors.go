package router

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/aws/smithy-go"
)

// Sentinel errors of model calls; a *ModelError unwraps to the one of its Kind.
var (
	ErrThrottled    = errors.New("model throttled")
	ErrNotReady     = errors.New("model not ready")
	ErrUnavailable  = errors.New("model unavailable")
	ErrValidation   = errors.New("model rejected the request")
	ErrAccessDenied = errors.New("model access denied")
	ErrMidStream    = errors.New("model failed mid-stream")
	ErrTimeout      = errors.New("model timed out")
	ErrCanceled     = errors.New("model call canceled")
)

// ErrorKind says why a model call failed. Its value is a short label fit for
// logs and metrics.
type ErrorKind string

// The kinds of ModelError, one per sentinel.
const (
	KindThrottled    ErrorKind = "throttled"     // ThrottlingException, ServiceQuotaExceededException, HTTP 429
	KindNotReady     ErrorKind = "not_ready"     // ModelNotReadyException
	KindUnavailable  ErrorKind = "unavailable"   // ServiceUnavailableException, InternalServerException, 5xx, connection failures
	KindValidation   ErrorKind = "validation"    // ValidationException, HTTP 400, invalid parameters
	KindAccessDenied ErrorKind = "access_denied" // AccessDeniedException, ResourceNotFoundException, HTTP 401/403/404
	KindMidStream    ErrorKind = "mid_stream"    // any model failure after at least one delta
	KindTimeout      ErrorKind = "timeout"       // ModelTimeoutException, HTTP 408, ctx deadline
	KindCanceled     ErrorKind = "canceled"      // ctx canceled
)

// String returns the label.
func (k ErrorKind) String() string { return string(k) }

func (k ErrorKind) sentinel() error {
	switch k {
	case KindThrottled:
		return ErrThrottled
	case KindNotReady:
		return ErrNotReady
	case KindUnavailable:
		return ErrUnavailable
	case KindValidation:
		return ErrValidation
	case KindAccessDenied:
		return ErrAccessDenied
	case KindMidStream:
		return ErrMidStream
	case KindTimeout:
		return ErrTimeout
	case KindCanceled:
		return ErrCanceled
	}
	return nil
}

// ModelError is the error of a model call.
type ModelError struct {
	Kind  ErrorKind
	Model string // the model id called
	// Streamed is true when at least one delta reached onDelta before the
	// failure: the call cannot be retried or handed to another model.
	Streamed bool
	Err      error // the underlying error (an SDK error, ctx.Err(), ...)
}

// Error describes the failure; it may include Bedrock's message, so it is for
// logs, not for clients.
func (e *ModelError) Error() string {
	after := ""
	if e.Streamed {
		after = " after streaming"
	}
	return fmt.Sprintf("model %s: %s%s: %v", e.Model, e.Kind, after, e.Err)
}

// Reason is what the model said was wrong with a request it refused
// (KindValidation: Bedrock's ValidationException message, or the adapter's
// own when the call could not be built), "" for other kinds. It describes
// the client's request, so the gateway may pass it on (clipped).
func (e *ModelError) Reason() string {
	if e.Kind != KindValidation || e.Err == nil {
		return ""
	}
	var apiErr smithy.APIError
	if errors.As(e.Err, &apiErr) {
		return apiErr.ErrorMessage()
	}
	var invalid smithy.InvalidParamsError
	if errors.As(e.Err, &invalid) {
		return invalid.Error()
	}
	return ""
}

// Unwrap returns the Kind's sentinel and Err, so errors.Is(err, ErrThrottled)
// and errors.As(err, &throttlingException) both work.
func (e *ModelError) Unwrap() []error {
	errs := make([]error, 0, 2)
	if s := e.Kind.sentinel(); s != nil {
		errs = append(errs, s)
	}
	if e.Err != nil {
		errs = append(errs, e.Err)
	}
	return errs
}

// Retryable reports whether the same call may be sent again, to this model
// later or to another now: nothing was streamed and the failure is
// throttling, a model not ready, unavailability or a timeout.
func (e *ModelError) Retryable() bool {
	if e.Streamed {
		return false
	}
	switch e.Kind {
	case KindThrottled, KindNotReady, KindUnavailable, KindTimeout:
		return true
	}
	return false
}

// classify turns any failure of a call into a *ModelError.
func classify(ctx context.Context, model string, streamed bool, err error) *ModelError {
	if ctxErr := ctx.Err(); ctxErr != nil {
		// Whatever the SDK reported, the call ended because ctx did.
		kind := KindCanceled
		cause := context.Cause(ctx)
		if errors.Is(ctxErr, context.DeadlineExceeded) || errors.Is(cause, context.DeadlineExceeded) {
			kind = KindTimeout
		}
		if !errors.Is(err, ctxErr) {
			err = fmt.Errorf("%w: %w", cause, err)
		}
		return &ModelError{Kind: kind, Model: model, Streamed: streamed, Err: err}
	}
	kind := KindMidStream
	if !streamed {
		kind = kindOf(err)
	}
	return &ModelError{Kind: kind, Model: model, Streamed: streamed, Err: err}
}

// kindOf classifies a failure before the first delta.
func kindOf(err error) ErrorKind {
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode() {
		case "ThrottlingException", "ServiceQuotaExceededException", "TooManyRequestsException":
			return KindThrottled
		case "ModelNotReadyException":
			return KindNotReady
		case "ServiceUnavailableException", "InternalServerException", "InternalFailure",
			"ModelErrorException", "ModelStreamErrorException":
			return KindUnavailable
		case "ValidationException":
			return KindValidation
		case "AccessDeniedException", "ResourceNotFoundException", "UnrecognizedClientException",
			"InvalidSignatureException", "ExpiredTokenException":
			return KindAccessDenied
		case "ModelTimeoutException":
			return KindTimeout
		}
	}
	var status interface{ HTTPStatusCode() int }
	if errors.As(err, &status) {
		switch code := status.HTTPStatusCode(); {
		case code == http.StatusTooManyRequests:
			return KindThrottled
		case code == http.StatusRequestTimeout:
			return KindTimeout
		case code == http.StatusUnauthorized, code == http.StatusForbidden, code == http.StatusNotFound:
			return KindAccessDenied
		case code >= 500:
			return KindUnavailable
		case code >= 400:
			return KindValidation
		}
	}
	var invalid smithy.InvalidParamsError
	if errors.As(err, &invalid) {
		return KindValidation
	}
	// Everything else is the service or the way to it misbehaving (connection
	// refused or reset, a response that does not parse, a stream cut short,
	// an unknown exception): worth another model.
	return KindUnavailable
}
