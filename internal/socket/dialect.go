package socket

import (
	"net/http"
	"sync"
	"time"

	"github.com/jetway-gateway/jetway/internal/stream"
)

// Dialect is one WebSocket door's wire over the shared socket lifecycle:
// the subprotocol it speaks, its session id, and per socket the handler
// of its frames (docs/architecture.md, "Adding a door").
type Dialect interface {
	// Subprotocol is the protocol the door speaks: a client that offers
	// subprotocols must offer it, and the upgrade selects it.
	Subprotocol() string
	// SessionID is the socket's session id from its upgrade request, ""
	// to have one made; an error refuses the upgrade (400) with its text.
	SessionID(r *http.Request) (string, error)
	// Open returns the handler of a socket that is about to run.
	Open(c *Conn) Handler
}

// Handler handles one socket's frames in its door's wire. The socket calls
// it from its reader goroutine (Opened, Frame, Refused) or from a timer
// (Expired); Draining may be called from any goroutine.
type Handler interface {
	// Opened runs once, before the first frame is read (jetway.v1 sends
	// its ready frame).
	Opened()
	// Frame handles one inbound frame; false when it closed the socket.
	// A text frame is valid UTF-8. A frame over Conn.PlainBound may only be
	// a request with an attachment: the handler closes the socket for any
	// other (Conn.TooBig).
	Frame(f *Frame) bool
	// Refused answers a frame that was read and dropped, its attachment
	// budget spent (err: busy or rate_limited); first is its first bytes.
	Refused(first []byte, err error)
	// Expired tells the client the socket's credentials ran out; the
	// socket then closes with DisconnectTokenExpired.
	Expired()
	// Draining is the frame that asks the client to move, nil when the
	// door has none (the socket then only closes with 1001 once idle).
	Draining() []byte
}

// Frame is one inbound frame.
type Frame struct {
	Text     bool   // a text frame (else binary)
	Data     []byte // the frame; the handler may keep it
	Received time.Time
	held     int64 // what the frame took of the attachment budget
	kept     int64 // of that, what a request holds on (Keep)
	c        *Conn
}

// Keep holds on to n of the attachment budget bytes the frame took (a
// request's decoded attachments, until its model call ends) and returns
// the func that gives them back, once; nil when the frame took none. The
// rest is given back once Frame returns.
func (f *Frame) Keep(n int64) func() {
	keep := min(f.held-f.kept, n)
	if keep <= 0 {
		return nil
	}
	f.kept += keep
	c := f.c
	return sync.OnceFunc(func() { c.hub.frames.give(c.share, keep) })
}

// Delivery writes one follow's batches as frames: Deliver is called for
// each batch in order on the follower's goroutine, and returns false to
// stop. Nil (the default) sends the accepted event's bytes (for a follow
// withAccepted), each chunk's bytes as one frame, then the terminal's.
type Delivery func(b *stream.Batch, out *Out) bool
