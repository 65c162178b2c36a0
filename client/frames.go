package client

import (
	"fmt"

	"github.com/jetway-gateway/jetway/internal/protocol"
)

// The server's frames are the protocol package's types, so the client and
// the server cannot disagree about the wire. They are aliases: a Go user
// names them client.Done, client.Error and so on, and their Type field
// holds the frame's type ("done", "error", ...).
type (
	// Message is one turn of the conversation.
	Message = protocol.Message
	// Ready is the server's first frame on a connection.
	Ready = protocol.Ready
	// Quota is the tightest quota window in an accepted frame.
	Quota = protocol.Quota
	// Accepted is the server's proof that a request landed.
	Accepted = protocol.Accepted
	// Usage is a request's token usage.
	Usage = protocol.Usage
	// Done is a successful answer.
	Done = protocol.Done
	// Error is an error frame from the server; Call.Wait returns it as an
	// error (*Error), with RetryAfter the server's retry hint.
	Error = protocol.Error
)

// Subprotocol is the protocol version this client speaks.
const Subprotocol = protocol.Subprotocol

// Request asks for an answer. RequestID is made by the client (8-64 chars
// of [A-Za-z0-9_-], unique per user); NewRequestID makes one.
type Request struct {
	RequestID   string
	Messages    []Message
	System      string
	Model       string
	MaxTokens   int
	Temperature *float64

	// OnChunk, if set, is called for every new chunk in seq order, exactly
	// once per seq, from the client's reader goroutine: keep it quick.
	OnChunk func(seq int, text string)
}

// frame is the request frame for r, resuming after afterSeq.
func (r *Request) frame(afterSeq int) protocol.Inbound {
	return protocol.Inbound{Type: protocol.TypeRequest, RequestID: r.RequestID, Messages: r.Messages,
		System: r.System, Model: r.Model, MaxTokens: r.MaxTokens, Temperature: r.Temperature, AfterSeq: afterSeq}
}

// HTTPError is a refusal before the WebSocket upgrade.
type HTTPError struct {
	Status  int
	Code    string
	Message string
}

func (e *HTTPError) Error() string {
	return fmt.Sprintf("jetway: upgrade refused: %d %s: %s", e.Status, e.Code, e.Message)
}
