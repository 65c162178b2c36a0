package stream

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/jetway-gateway/jetway/internal/call"
)

// frameCodec is a WebSocket-like codec: a JSON frame per chunk.
type frameCodec struct{}

type frameEncoder struct{ id string }

func (frameCodec) NewEncoder(l *Log) Encoder { return frameEncoder{l.RequestID} }

func (frameEncoder) Accepted(*Accepted) []byte { return []byte(`{"type":"accepted"}`) }

func (e frameEncoder) AppendChunk(dst []byte, seq int, p call.Piece) []byte {
	dst = append(dst, `{"type":"chunk","request_id":"`...)
	dst = append(dst, e.id...)
	dst = append(dst, `","seq":`...)
	dst = strconv.AppendInt(dst, int64(seq), 10)
	dst = append(dst, `,"text":"`...)
	dst = append(dst, p.Text...)
	return append(dst, `"}`...)
}

func (frameEncoder) Terminal(*Terminal, int) []byte { return []byte(`{"type":"done"}`) }

// BenchmarkFollowPaced is one token of a paced answer through the log and
// its follower: the producer appends a chunk and waits until the follower
// has delivered it, so every batch is one chunk, as at 100 paced streams
// (one token each 8 ms). One op is one token; answers are 300 tokens.
func BenchmarkFollowPaced(b *testing.B) {
	const answer = 300
	piece := call.TextPiece(" ipsum")
	delivered := make(chan struct{})
	b.ReportAllocs()
	b.ResetTimer()
	for n := 0; n < b.N; {
		l := NewLog("u", "req-00000001", "h", time.Time{})
		l.Accept(NewAccepted(call.Accepted{RequestID: l.RequestID, Model: "m"}))
		done := make(chan struct{})
		go func() {
			defer close(done)
			size := 0
			for batch := range l.Follow(context.Background(), frameCodec{}, 0) {
				for i := range batch.Chunks.Len() {
					size += len(batch.Chunks.At(i))
					delivered <- struct{}{}
				}
			}
			_ = size
		}()
		for range answer {
			l.Append(piece)
			<-delivered
			n++
		}
		l.Finish(DoneTerminal(call.Done{RequestID: l.RequestID, Chunks: answer}), time.Time{})
		<-done
	}
}
