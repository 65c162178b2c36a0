package doortest

import (
	"time"

	"github.com/jetway-gateway/jetway/internal/call"
	"github.com/jetway-gateway/jetway/internal/gateway"
	"github.com/jetway-gateway/jetway/internal/stream"
)

// GatewayRefusal is the gateway's side of the prompts every HTTP door's
// wire test sends to see the gateway's refusals in the door's shape:
// "conflict", "busy" and "draining" are Submit's errors; "quota" and
// "model" reject log with that failure. ok is false for any other prompt.
func GatewayRefusal(prompt string, log *stream.Log) (_ *stream.Log, err error, ok bool) {
	switch prompt {
	case "conflict":
		return nil, gateway.ErrConflict, true
	case "busy":
		return nil, gateway.ErrBusy, true
	case "draining":
		return nil, gateway.ErrDraining, true
	case "quota":
		log.Reject(stream.ErrorTerminal(call.Failure{Code: call.CodeQuotaExceeded, Status: 429,
			Message: "Token quota exceeded", Retryable: true, RetryAfterMs: 61500, Scope: "user", Window: "hour"}), time.Now())
	case "model":
		log.Reject(stream.ErrorTerminal(call.Failure{Code: call.CodeModelNotAllowed, Status: 403,
			Message: `model "x" is not allowed`}), time.Now())
	default:
		return nil, nil, false
	}
	return log, nil, true
}
