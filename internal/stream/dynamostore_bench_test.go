package stream_test

import (
	"context"
	"testing"
	"time"

	"github.com/jetway-gateway/jetway/internal/dynalitetest"
	"github.com/jetway-gateway/jetway/internal/stream"
)

// BenchmarkDynamoCodecCheckpointFinish measures a streamed request's record
// writes on DynamoStore, answered by a canned response without a network:
// the client-side cost (building the conditional update, signing,
// encoding) of four checkpoints of eight chunks each and the finish.
func BenchmarkDynamoCodecCheckpointFinish(b *testing.B) {
	ctx := context.Background()
	s := stream.NewDynamoStore(dynalitetest.Canned(b, `{}`), "requests")
	chunks := []string{"The ", "quick ", "brown ", "fox ", "jumps ", "over ", "the ", "lazy dog. "}
	terminal := []byte(`{"type":"done","request_id":"req-1","chunks":32,"usage":{"input_tokens":12,"output_tokens":32}}`)
	expires := time.Now().Add(time.Hour)
	b.ReportAllocs()
	for b.Loop() {
		seq := 0
		for range 4 {
			if err := s.Checkpoint(ctx, "contoso#support#alice", "req-1", "server-1", seq, chunks); err != nil {
				b.Fatal(err)
			}
			seq += len(chunks)
		}
		if err := s.Finish(ctx, "contoso#support#alice", "req-1", "server-1", seq, nil, stream.StateDone, terminal, expires); err != nil {
			b.Fatal(err)
		}
	}
}
