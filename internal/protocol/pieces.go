package protocol

import "github.com/jetway-gateway/jetway/internal/call"

// # Pieces
//
// A chunk frame carries one piece of the answer (call.Piece): the core
// keeps pieces in its own codec, and this door writes each as a chunk
// frame with AppendChunk.

// ChunkOf is the chunk frame of piece p (Type, RequestID and Seq unset).
func ChunkOf(p call.Piece) Chunk {
	return Chunk{Text: p.Text, Block: p.Block, Kind: p.Kind, ID: p.ID, Name: p.Name, Input: p.Input,
		Reasoning: p.Reasoning, Signature: p.Signature}
}

// PieceOf is the piece chunk c carries.
func PieceOf(c Chunk) call.Piece {
	return call.Piece{Text: c.Text, Block: c.Block, Kind: c.Kind, ID: c.ID, Name: c.Name, Input: c.Input,
		Reasoning: c.Reasoning, Signature: c.Signature}
}

// # The core's events as frames

// AcceptedFrame is the accepted frame of event a.
func AcceptedFrame(a call.Accepted) Accepted {
	return Accepted{Type: TypeAccepted, RequestID: a.RequestID, Model: a.Model, ReservedTokens: a.ReservedTokens,
		Quota: a.Quota, Cached: a.Cached}
}

// DoneFrame is the done frame of outcome d.
func DoneFrame(d *call.Done) Done {
	f := Done{Type: TypeDone, RequestID: d.RequestID, Chunks: d.Chunks, Text: d.Text, Model: d.Model, Cached: d.Cached,
		Usage: d.Usage, StopReason: d.StopReason, TTFTMs: d.TTFTMs, LatencyMs: d.LatencyMs}
	if d.Blocks != nil {
		f.Blocks = make([]Block, len(d.Blocks))
		for i, b := range d.Blocks {
			f.Blocks[i] = Block{Type: b.Type, Text: b.Text, ID: b.ID, Name: b.Name, Input: b.Input, Signature: b.Signature}
		}
	}
	return f
}

// ErrorFrame is the error frame of failure e.
func ErrorFrame(e *call.Failure) Error {
	return Error{Type: TypeError, RequestID: e.RequestID, Code: e.Code, Status: e.Status, Message: e.Message,
		Retryable: e.Retryable, RetryAfterMs: e.RetryAfterMs, Chunks: e.Chunks, Text: e.Text, Scope: e.Scope,
		Window: e.Window, Field: e.Field}
}
