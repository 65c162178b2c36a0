package anthropic

import (
	"fmt"
	"net/http"

	"github.com/jetway-gateway/jetway/internal/call"
	"github.com/jetway-gateway/jetway/internal/door"
	"github.com/jetway-gateway/jetway/internal/protocol"
)

// Anthropic's error types (the `error.type` of an error body or event).
const (
	typeInvalidRequest = "invalid_request_error"
	typeAuthentication = "authentication_error"
	typePermission     = "permission_error"
	typeNotFound       = "not_found_error"
	typeRateLimit      = "rate_limit_error"
	typeAPI            = "api_error"
	typeOverloaded     = "overloaded_error"
)

// StatusOverloaded is Anthropic's status for overloaded_error: a server
// that is at its admission limit or draining (the SDKs retry it).
const StatusOverloaded = 529

// maxHonouredRetryAfterMs is the longest Retry-After the official SDKs
// wait for; past it they retry on their own short backoff, which cannot
// help (a quota window resets in minutes or hours), so x-should-retry is
// false then.
const maxHonouredRetryAfterMs = 60_000

// apiError is an error in Anthropic's shape:
// {"type":"error","error":{"type","message"},"request_id"} plus Jetway's
// code. status is the HTTP status; typ Anthropic's error type.
type apiError struct {
	status       int
	typ          string
	code         string    // Jetway's protocol code
	path         call.Path // the protocol field an invalid_request names (call.Failure.Path)
	problem      string    // what is wrong with it
	msg          string
	retryAfterMs int64
	retryable    bool
}

type errorBody struct {
	Type      string      `json:"type"`
	Error     errorDetail `json:"error"`
	RequestID string      `json:"request_id,omitempty"`
}

type errorDetail struct {
	Type    string `json:"type"`
	Message string `json:"message"`
	// Jetway's additions.
	Code         string `json:"code,omitempty"`
	Retryable    bool   `json:"retryable"`
	RetryAfterMs int64  `json:"retry_after_ms,omitempty"`
}

func (e apiError) body(requestID string) errorBody {
	return errorBody{Type: "error", RequestID: requestID, Error: errorDetail{Type: e.typ, Message: e.msg,
		Code: e.code, Retryable: e.retryable, RetryAfterMs: e.retryAfterMs}}
}

// HTTPStatus is the error's status.
func (e apiError) HTTPStatus() int { return e.status }

// ErrorCode is Jetway's code.
func (e apiError) ErrorCode() string { return e.code }

// Write sends the error as the whole response, with retry-after (seconds)
// and retry-after-ms when there is one.
func (e apiError) Write(w http.ResponseWriter) {
	door.RetryHeaders(w.Header(), e.retryAfterMs, e.retryable && e.retryAfterMs <= maxHonouredRetryAfterMs)
	writeJSON(w, e.status, e.body(w.Header().Get(headerRequestID)))
}

// invalid is a 400 invalid_request_error.
func invalid(format string, args ...any) apiError {
	return apiError{status: http.StatusBadRequest, typ: typeInvalidRequest, code: protocol.CodeInvalidRequest,
		msg: fmt.Sprintf(format, args...)}
}

// fromProtocol is the one translation of a protocol error (a refusal or a
// terminal) to Anthropic's status and error type.
func fromProtocol(pe call.Failure) apiError {
	e := apiError{status: door.HTTPStatus(pe.Code), code: pe.Code, path: pe.Path, problem: pe.Problem, msg: pe.Message,
		retryAfterMs: pe.RetryAfterMs, retryable: pe.Retryable}
	switch pe.Code {
	case protocol.CodeInvalidRequest, protocol.CodeConflict, protocol.CodeCancelled:
		e.typ = typeInvalidRequest
		if pe.Code == protocol.CodeConflict {
			e.msg = "Idempotency-Key was already used with a different body"
		}
	case protocol.CodeUnauthorized:
		e.typ = typeAuthentication
	case protocol.CodeForbidden:
		e.typ = typePermission
	case protocol.CodeModelNotAllowed, protocol.CodeNotFound:
		e.typ = typeNotFound
	case protocol.CodeQuotaExceeded:
		e.typ = typeRateLimit
		e.msg = fmt.Sprintf("%s: the %s's %s window is used up; retry after %ds", pe.Message, pe.Scope, pe.Window,
			(pe.RetryAfterMs+999)/1000)
	case protocol.CodeRateLimited:
		e.typ = typeRateLimit
		e.msg = "too many requests in flight: " + pe.Message
	case protocol.CodeBusy, protocol.CodeDraining, protocol.CodeModelUnavailable:
		e.status, e.typ = StatusOverloaded, typeOverloaded
	default: // internal, model_error, timeout, interrupted
		e.typ = typeAPI
	}
	return e
}

// refusal is the answer to a protocol error before any stream began, its
// field named by names (nil: none). A status the lifecycle chose (a body
// too large or too slow: 413, 408) is the request's own fault.
func refusal(pe call.Failure, status int, names door.Namer) door.Answer {
	e := fromProtocol(pe)
	if status != 0 {
		e.status = status
		if status < 500 {
			e.typ = typeInvalidRequest
		}
	}
	return rename(names, e)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	door.WriteJSON(w, status, v, `{"type":"error","error":{"type":"api_error","message":"internal error"}}`)
}
