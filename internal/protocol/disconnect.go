package protocol

import (
	"fmt"
	"time"
)

// Chunk is one piece of an answer. The server keeps it as a core piece
// (call.Piece) and writes it with AppendChunk (same bytes as json.Marshal of
// this struct); clients decode it.
//
// A text chunk sets Text, and Block when the answer's text is not its
// first content block. Other kinds leave Text empty, so the concatenated
// text of every chunk is always done.text: a reasoning chunk sets
// Reasoning, or Signature (the block's signature, after its text); a
// tool_use chunk sets ID and Name when its block starts, then Input with
// fragments of the call's input JSON.
type Chunk struct {
	Type      string `json:"type"`
	RequestID string `json:"request_id"`
	Seq       int    `json:"seq"`
	Text      string `json:"text"`
	Block     int    `json:"block,omitempty"`
	Kind      string `json:"kind,omitempty"`
	ID        string `json:"id,omitempty"`
	Name      string `json:"name,omitempty"`
	Input     string `json:"input,omitempty"`
	Reasoning string `json:"reasoning,omitempty"`
	Signature string `json:"signature,omitempty"`
}

// Error makes an error frame a Go error (the public client returns it from
// Call.Wait).
func (e *Error) Error() string {
	return fmt.Sprintf("jetway: %s (%d): %s", e.Code, e.Status, e.Message)
}

// RetryAfter is the server's retry hint (retry_after_ms).
func (e *Error) RetryAfter() time.Duration { return time.Duration(e.RetryAfterMs) * time.Millisecond }
