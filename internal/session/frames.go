package session

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
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
// back when the frame's request is admitted or refused. When the budget
// is spent, the rest of the frame is read and dropped and the request is
// answered `busy`: memory stays bounded however many sessions send large
// frames at once, and nothing waits for room.

// frameChunk is the piece in which frames are read: a frame is read into
// pooled chunks, then copied once into a buffer of its exact size.
const frameChunk = 64 << 10

var chunkPool = sync.Pool{New: func() any { b := make([]byte, frameChunk); return &b }}

// byteBudget is a server-wide budget of bytes; take never waits.
type byteBudget struct {
	limit   int64
	used    atomic.Int64
	observe func(used int64) // the metric; called after every change
}

// take reserves n bytes, or none and false when they do not fit.
func (b *byteBudget) take(n int64) bool {
	used := b.used.Add(n)
	if used > b.limit {
		b.used.Add(-n)
		return false
	}
	b.observe(used)
	return true
}

// give returns n bytes taken before.
func (b *byteBudget) give(n int64) {
	if n > 0 {
		b.observe(b.used.Add(-n))
	}
}

// errFrameTooBig is a frame over the largest bound: the session closes
// with 1009.
var errFrameTooBig = errors.New("frame over the largest inbound bound")

// budgetSpentError is a frame that went past the plain bound while the
// attachment budget was spent. The frame was read and dropped; First holds
// its first bytes (at most frameChunk), for the request id of the refusal.
type budgetSpentError struct {
	Size  int64 // bytes read when the budget ran out
	First []byte
}

func (e *budgetSpentError) Error() string {
	return fmt.Sprintf("attachment budget spent at %d bytes of a frame", e.Size)
}

// frameReader reads frames under a session's bounds.
type frameReader struct {
	plain, largest int64       // Options.MaxFrameBytes; the read limit (max of both bounds)
	budget         *byteBudget // the bytes of frames past plain
}

// read reads one message from r into a buffer of its exact size. held is
// what it took from the budget: give it back once the frame's request is
// admitted or refused (also when err is not nil: then held is 0).
func (fr frameReader) read(r io.Reader) (data []byte, held int64, err error) {
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
			fr.budget.give(held)
			// Drop up to one more bound of the frame (no memory: only
			// reading, under the read deadline), so a client still
			// sending it gets the close frame, not a reset that loses it.
			_, _ = io.Copy(io.Discard, io.LimitReader(r, fr.largest))
			return nil, 0, errFrameTooBig
		}
		if total > fr.plain {
			if !fr.budget.take(total - fr.plain - held) {
				fr.budget.give(held)
				first := append([]byte(nil), (*chunks[0])[:min(total, frameChunk)]...)
				if err := fr.discard(r, total); err != nil {
					return nil, 0, err
				}
				return nil, 0, &budgetSpentError{Size: total, First: first}
			}
			held = total - fr.plain
		}
		switch {
		case rerr == nil:
			continue
		case errors.Is(rerr, io.EOF), errors.Is(rerr, io.ErrUnexpectedEOF):
		default:
			fr.budget.give(held)
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
