package client

import (
	"encoding/json"
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
	// Chunk is a chunk frame: text, or a piece of a reasoning or tool_use
	// block (Kind, Block, Reasoning, ID, Name, Input).
	Chunk = protocol.Chunk
	// Block is a content block: of a message (Message.Blocks: text, image,
	// document, tool_use, tool_result, reasoning) or of an answer
	// (Done.Blocks; Done.ToolCalls and Done.ReasoningText read them).
	// An image's or a document's Data is its bytes: DataOf(bytes).
	Block = protocol.Block
	// Data is an image's or a document's content (base64 on the wire).
	Data = protocol.Data
	// Tool is a function the model may call.
	Tool = protocol.Tool
	// ToolChoice is auto, any, or one named tool.
	ToolChoice = protocol.ToolChoice
	// Reasoning asks a reasoning model to think within a token budget.
	Reasoning = protocol.Reasoning
)

// DataOf returns the Data of an image's or a document's bytes.
func DataOf(b []byte) Data { return protocol.DataOf(b) }

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
	Tools       []Tool
	ToolChoice  *ToolChoice
	Reasoning   *Reasoning
	// ServiceTier asks for a Bedrock service tier (default, priority,
	// flex) the app allows; "": the app's (docs/protocol.md, "Service tier").
	ServiceTier string
	// Traceparent, if set, is the caller's W3C trace context: the
	// request's trace on the server joins it (docs/protocol.md, "Tracing").
	Traceparent string

	// OnChunk, if set, is called for every new chunk in seq order, exactly
	// once per seq, from the client's reader goroutine: keep it quick.
	OnChunk func(seq int, text string)
	// OnChunkFrame, if set, is called likewise (after OnChunk) with the
	// whole chunk frame: its block index and kind, reasoning text, tool
	// call start (ID, Name) or input JSON fragment.
	OnChunkFrame func(Chunk)
}

// frame is the request frame for r, resuming after afterSeq.
func (r *Request) frame(afterSeq int) protocol.Inbound {
	in := protocol.Inbound{Type: protocol.TypeRequest, RequestID: r.RequestID, Messages: r.Messages,
		System: r.System, Model: r.Model, MaxTokens: r.MaxTokens, Temperature: r.Temperature,
		Tools: r.Tools, ToolChoice: r.ToolChoice, Reasoning: r.Reasoning, ServiceTier: r.ServiceTier, AfterSeq: afterSeq}
	if r.Traceparent != "" {
		in.Traceparent, _ = json.Marshal(r.Traceparent) // a string always encodes
	}
	return in
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
