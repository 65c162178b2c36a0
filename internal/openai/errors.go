package openai

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/jetway-gateway/jetway/internal/call"
	"github.com/jetway-gateway/jetway/internal/door"
	"github.com/jetway-gateway/jetway/internal/gateway"
	"github.com/jetway-gateway/jetway/internal/protocol"
)

// apiError is an error in OpenAI's shape: {"error":{"message","type","code","param"}}.
// code is Jetway's protocol code (or unsupported_parameter); type follows
// the HTTP status the way OpenAI's SDKs expect.
type apiError struct {
	status       int
	code, param  string
	path         call.Path // the protocol field an invalid_request names (call.Failure.Path)
	problem      string    // what is wrong with it
	msg          string
	retryAfterMs int64
	retryable    bool
	// After the stream started: what was streamed before the failure.
	partial       bool
	partialChunks int
	partialBytes  int
}

// errorBody is the JSON of an error, in a body or an SSE event.
type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Code    string  `json:"code"`
	Param   *string `json:"param"`
	// Jetway's additions.
	Status            int    `json:"status"`
	Retryable         bool   `json:"retryable"`
	RetryAfterMs      int64  `json:"retry_after_ms,omitempty"`
	PartialChunks     *int   `json:"partial_chunks,omitempty"`
	PartialTextLength *int   `json:"partial_text_length,omitempty"`
	RequestID         string `json:"request_id,omitempty"`
}

func (e apiError) body(requestID string) errorBody {
	d := errorDetail{Message: e.msg, Type: door.OpenAIErrorType(e.status), Code: e.code, Status: e.status,
		Retryable: e.retryable, RetryAfterMs: e.retryAfterMs, RequestID: requestID}
	if e.param != "" {
		d.Param = &e.param
	}
	if e.partial {
		d.PartialChunks, d.PartialTextLength = &e.partialChunks, &e.partialBytes
	}
	return errorBody{Error: d}
}

// HTTPStatus is the error's status.
func (e apiError) HTTPStatus() int { return e.status }

// ErrorCode is Jetway's code (or unsupported_parameter).
func (e apiError) ErrorCode() string { return e.code }

// Write sends the error as the whole response, with Retry-After (seconds,
// and retry-after-ms, which OpenAI's SDKs read first) when there is one.
func (e apiError) Write(w http.ResponseWriter) {
	door.RetryHeaders(w.Header(), e.retryAfterMs, e.retryable)
	writeJSON(w, e.status, e.body(w.Header().Get("x-request-id")))
}

// fromProtocol translates a gateway error frame. A model the app may not
// use is 404 (OpenAI's answer for a model the key cannot see). partial marks
// an error after the stream started.
func fromProtocol(pe call.Failure, partial bool) apiError {
	e := apiError{status: pe.Status, code: pe.Code, path: pe.Path, problem: pe.Problem, msg: pe.Message, retryAfterMs: pe.RetryAfterMs, retryable: pe.Retryable}
	e.status = door.HTTPStatus(pe.Code)
	switch pe.Code {
	case protocol.CodeModelNotAllowed:
		e.param = "model"
	case protocol.CodeQuotaExceeded:
		e.msg = fmt.Sprintf("%s: the %s's %s window is used up; retry after %ds", pe.Message, pe.Scope, pe.Window,
			(pe.RetryAfterMs+999)/1000)
	case protocol.CodeRateLimited:
		e.msg = "too many requests in flight: " + pe.Message
	case protocol.CodeConflict:
		e.param = "Idempotency-Key"
		e.msg = "Idempotency-Key was already used with a different body"
	}
	if partial {
		e.partial = true
		if pe.Chunks != nil {
			e.partialChunks = *pe.Chunks
		}
		if pe.Text != nil {
			e.partialBytes = len(*pe.Text)
		}
	}
	return e
}

// refusal is the answer to a protocol error before any stream began (or
// instead of one: an error after chunks is partial); status, when not 0,
// replaces the code's.
func refusal(pe call.Failure, status int, names door.Namer) door.Answer {
	e := fromProtocol(pe, pe.Chunks != nil && *pe.Chunks > 0)
	if status != 0 {
		e.status = status
	}
	return e.named(names)
}

// named gives an invalid_request that names a field of the protocol
// request the OpenAI parameter it came from.
func (e apiError) named(names door.Namer) apiError {
	if e.code == protocol.CodeInvalidRequest && e.param == "" && !e.partial && e.path != nil && names != nil {
		e.param, e.msg = rename(names, e.path, e.problem)
	}
	return e
}

// fromRequestError is the answer to a body parse refused.
func fromRequestError(err error, names door.Namer) door.Answer {
	var re *requestError
	if errors.As(err, &re) {
		return apiError{status: http.StatusBadRequest, code: re.code, param: re.param, msg: re.msg}
	}
	return fromProtocol(gateway.Failure(err), false).named(names)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	door.WriteJSON(w, status, v, `{"error":{"message":"internal error","type":"server_error","code":"internal","param":null}}`)
}
