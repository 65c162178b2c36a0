package responses

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/jetway-gateway/jetway/internal/call"
	"github.com/jetway-gateway/jetway/internal/door"
	"github.com/jetway-gateway/jetway/internal/gateway"
)

// apiError is an error in OpenAI's shape:
// {"error":{"message","type","param","code"}}. code is Jetway's code (or
// unsupported_parameter); type follows the status as OpenAI's SDKs expect.
type apiError struct {
	status       int
	code, param  string
	path         call.Path // the field an invalid_request names (call.Failure.Path)
	problem      string
	msg          string
	retryAfterMs int64
	retryable    bool
}

type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Code    string  `json:"code"`
	Param   *string `json:"param"`
	// Jetway's additions.
	Status       int    `json:"status,omitempty"`
	Retryable    bool   `json:"retryable"`
	RetryAfterMs int64  `json:"retry_after_ms,omitempty"`
	RequestID    string `json:"request_id,omitempty"`
}

func (e apiError) detail(requestID string) errorDetail {
	d := errorDetail{Message: e.msg, Type: door.OpenAIErrorType(e.status), Code: e.code, Status: e.status,
		Retryable: e.retryable, RetryAfterMs: e.retryAfterMs, RequestID: requestID}
	if e.param != "" {
		d.Param = &e.param
	}
	return d
}

// HTTPStatus is the error's status.
func (e apiError) HTTPStatus() int { return e.status }

// ErrorCode is Jetway's code (or unsupported_parameter).
func (e apiError) ErrorCode() string { return e.code }

// Write sends the error as the whole response, with Retry-After and
// retry-after-ms when there is a wait.
func (e apiError) Write(w http.ResponseWriter) {
	door.RetryHeaders(w.Header(), e.retryAfterMs, e.retryable)
	writeJSON(w, e.status, errorBody{e.detail(w.Header().Get(headerRequestID))})
}

// fromProtocol is the one translation of a core failure to OpenAI's
// status, code and message.
func fromProtocol(pe call.Failure) apiError {
	e := apiError{status: door.HTTPStatus(pe.Code), code: pe.Code, path: pe.Path, problem: pe.Problem, msg: pe.Message,
		retryAfterMs: pe.RetryAfterMs, retryable: pe.Retryable}
	switch pe.Code {
	case call.CodeModelNotAllowed:
		e.param = "model"
	case call.CodeQuotaExceeded:
		e.msg = fmt.Sprintf("%s: the %s's %s window is used up; retry after %ds", pe.Message, pe.Scope, pe.Window,
			(pe.RetryAfterMs+999)/1000)
	case call.CodeRateLimited:
		e.msg = "too many requests in flight: " + pe.Message
	case call.CodeConflict:
		// The request id is the Idempotency-Key (WebSocket mode's ids are
		// the server's: never a conflict).
		e.param, e.msg = "Idempotency-Key", "Idempotency-Key was already used with a different body"
	}
	return e
}

// refusal is the answer to a core failure before any stream began;
// status, when not 0, replaces the code's.
func refusal(pe call.Failure, status int, names door.Namer) door.Answer {
	e := fromProtocol(pe)
	if status != 0 {
		e.status = status
	}
	return e.named(names)
}

// named names the field of an invalid request as the Responses parameter
// it came from.
func (e apiError) named(names door.Namer) apiError {
	if e.code != call.CodeInvalidRequest || e.param != "" || e.path == nil || names == nil {
		return e
	}
	for i := len(e.path); i > 0; i-- {
		if to, ok := names.Name(e.path[:i]); ok {
			e.param, e.msg = to, to+e.path.Rest(i)+e.problem
			return e
		}
	}
	return e
}

// invalid is the answer to a body (or event) refused.
func invalid(err error, names door.Namer) door.Answer { return answerOf(err, names) }

func answerOf(err error, names door.Namer) apiError {
	var re *requestError
	if errors.As(err, &re) {
		return apiError{status: http.StatusBadRequest, code: re.code, param: re.param, msg: re.msg}
	}
	return fromProtocol(gateway.Failure(err)).named(names)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	door.WriteJSON(w, status, v, `{"error":{"message":"internal error","type":"server_error","code":"internal","param":null}}`)
}
