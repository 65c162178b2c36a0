package socket

import (
	"bytes"
	"testing"

	"github.com/jetway-gateway/jetway/internal/door"
)

// BenchmarkReadImageFrame is the session's read of a frame with a 1 MiB
// image (1.4 MB) from the connection, before decoding: 64 KiB pooled
// pieces, one copy into a buffer of the frame's size, the budget taken
// and given back.
func BenchmarkReadImageFrame(b *testing.B) {
	frame := bytes.Repeat([]byte("A"), 1400<<10) // a 1 MiB image in base64, the bytes alone
	fr := frameReader{plain: DefaultMaxFrameBytes, largest: DefaultMaxAttachmentFrameBytes,
		budget: door.NewByteBudget(DefaultAttachmentBytesInFlight, func(int64) {}), perUser: DefaultAttachmentBytesInFlight}
	u := &userShare{}
	r := bytes.NewReader(frame)
	b.ReportAllocs()
	b.SetBytes(int64(len(frame)))
	for b.Loop() {
		r.Reset(frame)
		data, held, err := fr.read(r, u)
		if err != nil || len(data) != len(frame) {
			b.Fatal(len(data), err)
		}
		fr.give(u, held)
	}
}
