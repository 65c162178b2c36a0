// Package call is the core's vocabulary: what a request asks for (Request:
// messages of content blocks, tools and options) and what its answer is
// made of, as the gateway, the stream log, the request records and the
// response cache keep it. An answer is three kinds of event: one Accepted, pieces
// (Piece, kept in this package's compact codec), and one terminal (Done or
// Failure). No wire format lives here: each door encodes these events in
// its own bytes (the WebSocket door's jetway.v1 frames, the OpenAI and
// Anthropic doors' SSE events), and the stored forms are this package's
// versioned codecs (see Format).
package call

// Error codes, each with its fixed status (see Status). Every door names
// them in its own terms; the WebSocket door sends them as they are.
const (
	CodeInvalidRequest   = "invalid_request"
	CodeUnauthorized     = "unauthorized"
	CodeForbidden        = "forbidden"
	CodeModelNotAllowed  = "model_not_allowed"
	CodeNotFound         = "not_found"
	CodeConflict         = "conflict"
	CodeQuotaExceeded    = "quota_exceeded"
	CodeRateLimited      = "rate_limited"
	CodeCancelled        = "cancelled"
	CodeInternal         = "internal"
	CodeModelError       = "model_error"
	CodeModelUnavailable = "model_unavailable"
	CodeBusy             = "busy"
	CodeDraining         = "draining"
	CodeTimeout          = "timeout"
	CodeInterrupted      = "interrupted"
)

var statuses = map[string]int{
	CodeInvalidRequest:   400,
	CodeUnauthorized:     401,
	CodeForbidden:        403,
	CodeModelNotAllowed:  403,
	CodeNotFound:         404,
	CodeConflict:         409,
	CodeQuotaExceeded:    429,
	CodeRateLimited:      429,
	CodeCancelled:        499,
	CodeInternal:         500,
	CodeModelError:       502,
	CodeModelUnavailable: 503,
	CodeBusy:             503,
	CodeDraining:         503,
	CodeTimeout:          504,
	CodeInterrupted:      503,
}

// Status is the HTTP-like status of an error code (500 for an unknown code).
func Status(code string) int {
	if s, ok := statuses[code]; ok {
		return s
	}
	return 500
}
