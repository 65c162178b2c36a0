package protocol

import "github.com/jetway-gateway/jetway/internal/call"

// # The core's events as frames
//
// The core's events (package call) are this wire's frames: the accepted
// frame, a chunk frame per piece (AppendChunk), and the done or error
// frame. The WebSocket door encodes each once per request.

// AcceptedFrame is the accepted frame of event a.
func AcceptedFrame(a call.Accepted) Accepted {
	return Accepted{Type: TypeAccepted, RequestID: a.RequestID, Model: a.Model, ReservedTokens: a.ReservedTokens,
		Quota: a.Quota, Cached: a.Cached}
}

// DoneFrame is the done frame of outcome d.
func DoneFrame(d *call.Done) Done {
	f := Done{Type: TypeDone, RequestID: d.RequestID, Chunks: d.Chunks, Text: d.Text, Model: d.Model, Cached: d.Cached,
		Usage: d.Usage, StopReason: d.StopReason, TTFTMs: d.TTFTMs, LatencyMs: d.LatencyMs, ServiceTier: d.ServiceTier}
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
		Window: e.Window, Path: e.Path, Problem: e.Problem}
}
