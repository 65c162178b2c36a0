package stream

import "github.com/jetway-gateway/jetway/internal/call"

// A request's answer is three kinds of event, emitted by the core and
// delivered by every door: one Accepted, chunks (pieces in the core's
// codec, call.Encode), and one Terminal. The events are the core's own
// (package call); each door encodes them in its bytes (Codec), and a
// request record stores them in the core's stored form (call.Format).

// Accepted is the event that a request landed: it precedes every chunk.
type Accepted struct {
	call.Accepted
}

// NewAccepted is the accepted event a for its request.
func NewAccepted(a call.Accepted) *Accepted { return &Accepted{Accepted: a} }

// DecodeAccepted is the accepted event of its stored form (a request
// record's).
func DecodeAccepted(stored []byte) *Accepted { return NewAccepted(call.DecodeAccepted(stored)) }

// Terminal is a request's outcome: exactly one of Done and Error is set.
type Terminal struct {
	Done  *call.Done
	Error *call.Failure
}

// DoneTerminal is the outcome of an answer that completed.
func DoneTerminal(d call.Done) *Terminal { return &Terminal{Done: &d} }

// ErrorTerminal is the outcome of a request that failed, or was refused.
func ErrorTerminal(e call.Failure) *Terminal {
	if e.Status == 0 {
		e.Status = call.Status(e.Code)
	}
	return &Terminal{Error: &e}
}

// DecodeTerminal is the outcome of a stored terminal (a request record's),
// decoded once. One that is neither is an internal error.
func DecodeTerminal(stored []byte) *Terminal {
	d, f := call.DecodeTerminal(stored)
	switch {
	case d != nil:
		return &Terminal{Done: d}
	case f != nil:
		return &Terminal{Error: f}
	}
	return ErrorTerminal(call.Failure{Code: call.CodeInternal, Message: "internal error"})
}

// Stored is the outcome's stored form (a request record's terminal).
func (t *Terminal) Stored() []byte {
	if t.Done != nil {
		return call.EncodeDone(t.Done)
	}
	return call.EncodeFailure(t.Error)
}

// Stored is the event's stored form (a request record's accepted).
func (a *Accepted) Stored() []byte { return call.EncodeAccepted(a.Accepted) }

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

// What an event keeps beyond its strings: its struct and their headers,
// and a quota's, a block's.
const (
	acceptedFixedBytes = 112
	terminalFixedBytes = 208
	blockFixedBytes    = 136
)

// bytes estimates the event's memory.
func (a *Accepted) bytes() int64 {
	return int64(acceptedFixedBytes + len(a.RequestID) + len(a.Model))
}

// bytes estimates the outcome's memory.
func (t *Terminal) bytes() int64 {
	n := terminalFixedBytes
	if d := t.Done; d != nil {
		n += len(d.RequestID) + len(d.Text) + len(d.Model) + len(d.StopReason)
		for _, b := range d.Blocks {
			n += blockFixedBytes + len(b.Text) + len(b.ID) + len(b.Name) + len(b.Input) + len(b.Signature)
		}
	} else {
		e := t.Error
		n += len(e.RequestID) + len(e.Code) + len(e.Message) + len(e.Scope) + len(e.Window)
		if e.Text != nil {
			n += len(*e.Text)
		}
	}
	return int64(n)
}
