package stream

import (
	"encoding/json"

	"github.com/jetway-gateway/jetway/internal/protocol"
)

// A request's answer is three kinds of event, emitted by the core and
// delivered by every door: one Accepted, chunks (pieces, see
// protocol.TextPiece and protocol.BlockPiece), and one Terminal. Each
// event keeps its canonical encoding, the JSON the WebSocket door sends
// and the request record stores, so the WebSocket door's hot path writes
// stored bytes, and a record read on another server is decoded once.

// Accepted is the event that a request landed: it precedes every chunk.
type Accepted struct {
	protocol.Accepted
	Frame []byte // the canonical encoding
}

// NewAccepted is the accepted event a for its request.
func NewAccepted(a protocol.Accepted) *Accepted {
	a.Type = protocol.TypeAccepted
	return &Accepted{Accepted: a, Frame: protocol.Encode(a)}
}

// DecodeAccepted is the accepted event of a stored frame (a request
// record's). The frame is kept as the canonical encoding.
func DecodeAccepted(frame []byte) *Accepted {
	a := &Accepted{Frame: frame}
	_ = json.Unmarshal(frame, &a.Accepted) // a frame this server's peers stored
	return a
}

// Terminal is a request's outcome: exactly one of Done and Error is set.
type Terminal struct {
	Done  *protocol.Done
	Error *protocol.Error
	Frame []byte // the canonical encoding
}

// DoneTerminal is the outcome of an answer that completed.
func DoneTerminal(d protocol.Done) *Terminal {
	d.Type = protocol.TypeDone
	return &Terminal{Done: &d, Frame: protocol.Encode(d)}
}

// ErrorTerminal is the outcome of a request that failed, or was refused.
func ErrorTerminal(e protocol.Error) *Terminal {
	e.Type = protocol.TypeError
	if e.Status == 0 {
		e.Status = protocol.Status(e.Code)
	}
	return &Terminal{Error: &e, Frame: protocol.Encode(e)}
}

// DecodeTerminal is the outcome of a stored terminal frame (a request
// record's), decoded once. A frame that is neither is an internal error.
func DecodeTerminal(frame []byte) *Terminal {
	var head struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(frame, &head)
	if head.Type == protocol.TypeDone {
		var d protocol.Done
		if json.Unmarshal(frame, &d) == nil {
			return &Terminal{Done: &d, Frame: frame}
		}
	}
	var e protocol.Error
	if json.Unmarshal(frame, &e) != nil || e.Code == "" {
		return ErrorTerminal(protocol.Error{Code: protocol.CodeInternal, Message: "internal error"})
	}
	return &Terminal{Error: &e, Frame: frame}
}

// Chunks is the number of chunks the outcome says the answer has, or -1
// when it does not say (an error before acceptance).
func (t *Terminal) Chunks() int {
	switch {
	case t.Done != nil:
		return t.Done.Chunks
	case t.Error.Chunks != nil:
		return *t.Error.Chunks
	}
	return -1
}
