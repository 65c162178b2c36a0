package socket

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/jetway-gateway/jetway/internal/door"
)

// Inbound frames have two bounds: Options.MaxFrameBytes for every frame,
// and Options.MaxAttachmentFrameBytes, larger, for a frame carrying an
// image or a document. A frame's size is known only once it is read, and
// whether it carries an attachment only once it is decoded, so the
// reader reads up to the larger bound and the session refuses, once the
// frame is decoded, a frame over the smaller one without an attachment.
//
// The bytes of a frame past the smaller bound come from one server-wide
// budget (Options.AttachmentBytesInFlight), taken as they arrive and given
// back when the frame's request is admitted or refused, and from the
// sender's share of it (Options.AttachmentBytesPerUser, over all of the
// user's sessions). When either is spent, the rest of the frame is read
// and dropped and the request is answered `busy` (the server's budget) or
// `rate_limited` (the user's share): memory stays bounded however many
// sessions send large frames at once, one user cannot hold the whole
// budget, and nothing waits for room. A frame must also arrive whole
// within Options.FrameReadTimeout (see Session.readLoop), so no frame
// holds its bytes for longer.

// frameChunk is the piece in which frames are read: a frame is read into
// pooled chunks, then copied once into a buffer of its exact size.
const frameChunk = 64 << 10

var chunkPool = sync.Pool{New: func() any { b := make([]byte, frameChunk); return &b }}

// userShare is one user's part of the attachment budget, shared by the
// user's sessions on this server; the Hub keeps it while the user has a
// session open.
type userShare struct {
	sessions int          // the user's open sessions (guarded by Hub.mu)
	used     atomic.Int64 // bytes the user's frames hold of the budget
}

// spent says which budget a frame's bytes did not fit in.
type spent int

const (
	fits        spent = iota
	userSpent         // the user's share (Options.AttachmentBytesPerUser)
	serverSpent       // the server's budget (Options.AttachmentBytesInFlight)
)

// errFrameTooBig is a frame over the largest bound: the session closes
// with 1009.
var errFrameTooBig = errors.New("frame over the largest inbound bound")

// budgetSpentError is a frame that went past the plain bound while the
// attachment budget, or its sender's share of it, was spent. The frame was
// read and dropped; First holds its first bytes (at most frameChunk), for
// the request id of the refusal.
type budgetSpentError struct {
	Size  int64 // bytes read when the budget ran out
	First []byte
	By    spent // userSpent or serverSpent
}

func (e *budgetSpentError) Error() string {
	if e.By == userSpent {
		return fmt.Sprintf("the user's share of the attachment budget spent at %d bytes of a frame", e.Size)
	}
	return fmt.Sprintf("attachment budget spent at %d bytes of a frame", e.Size)
}

// frameReader reads frames under a session's bounds.
type frameReader struct {
	plain, largest int64            // Options.MaxFrameBytes; the read limit (max of both bounds)
	budget         *door.ByteBudget // the bytes of frames past plain
	perUser        int64            // one user's share of budget
}

// take reserves n bytes from the user's share and the server's budget,
// or none.
func (fr frameReader) take(u *userShare, n int64) spent {
	if u.used.Add(n) > fr.perUser {
		u.used.Add(-n)
		return userSpent
	}
	if !fr.budget.Take(n) {
		u.used.Add(-n)
		return serverSpent
	}
	return fits
}

// give returns n bytes that take reserved.
func (fr frameReader) give(u *userShare, n int64) {
	if n > 0 {
		u.used.Add(-n)
		fr.budget.Give(n)
	}
}

// read reads one message from r into a buffer of its exact size, taking
// its bytes past the plain bound from u's share and the server's budget.
// held is what it took: give it back once the frame's request is
// admitted or refused (also when err is not nil: then held is 0).
func (fr frameReader) read(r io.Reader, u *userShare) (data []byte, held int64, err error) {
	var chunks []*[]byte
	defer func() {
		for _, c := range chunks {
			chunkPool.Put(c)
		}
	}()
	var total int64
	for {
		c := chunkPool.Get().(*[]byte)
		chunks = append(chunks, c)
		n, rerr := io.ReadFull(r, *c)
		total += int64(n)
		if total > fr.largest {
			fr.give(u, held)
			// Drop up to one more bound of the frame (no memory: only
			// reading, under the read deadline), so a client still
			// sending it gets the close frame, not a reset that loses it.
			_, _ = io.Copy(io.Discard, io.LimitReader(r, fr.largest))
			return nil, 0, errFrameTooBig
		}
		if total > fr.plain {
			if by := fr.take(u, total-fr.plain-held); by != fits {
				fr.give(u, held)
				first := append([]byte(nil), (*chunks[0])[:min(total, frameChunk)]...)
				if err := fr.discard(r, total); err != nil {
					return nil, 0, err
				}
				return nil, 0, &budgetSpentError{Size: total, First: first, By: by}
			}
			held = total - fr.plain
		}
		switch {
		case rerr == nil:
			continue
		case errors.Is(rerr, io.EOF), errors.Is(rerr, io.ErrUnexpectedEOF):
		default:
			fr.give(u, held)
			return nil, 0, rerr
		}
		break
	}
	data = make([]byte, total)
	off := 0
	for _, c := range chunks {
		off += copy(data[off:], *c)
	}
	return data, held, nil
}

// discard reads the rest of a message whose first read bytes were dropped,
// still under the largest bound.
func (fr frameReader) discard(r io.Reader, read int64) error {
	n, err := io.Copy(io.Discard, io.LimitReader(r, fr.largest-read+1))
	if err != nil {
		return err
	}
	if read+n > fr.largest {
		return errFrameTooBig
	}
	return nil
}
