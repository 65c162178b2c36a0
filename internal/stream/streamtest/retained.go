// Package streamtest measures what a door's codec costs a retained
// answer: test support for the door packages.
package streamtest

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/jetway-gateway/jetway/internal/call"
	"github.com/jetway-gateway/jetway/internal/stream"
)

// Retained is what n finished answers cost once followed live through a
// codec, per answer: the registry's estimate and the heap measured.
type Retained struct {
	Estimate, Heap int64
}

// MeasureRetained runs n answers of `tokens` chunks (a 4-byte token each,
// as the mock model's) through a registry, each followed live by one
// follower of codec c (the chunks reach it one at a time, as a streamed
// answer's do), finishes them with a done terminal, and reports the
// registry's estimate and the heap they keep, per answer.
func MeasureRetained(t testing.TB, c stream.Codec, n, tokens int) Retained {
	t.Helper()
	r := stream.NewRegistry(stream.RegistryOptions{RetainedBytes: 1 << 40})
	logs := make([]*stream.Log, 0, n)
	heap := func() int64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return int64(m.HeapAlloc)
	}
	before := heap()
	for i := range n {
		id := fmt.Sprintf("req-retained-%06d", i)
		l, _ := r.Create("tenant/app/user-000001", id, "0123456789abcdef0123456789abcdef", time.Unix(1_700_000_000, 0))
		seen := make(chan int, 1)
		done := make(chan struct{})
		go func() {
			defer close(done)
			for b := range l.Follow(context.Background(), c, 0) {
				if b.Terminal != nil {
					return
				}
				seen <- b.Last()
			}
		}()
		l.Accept(stream.NewAccepted(call.Accepted{RequestID: id, Model: "mock-a", ReservedTokens: 900}))
		var text []byte
		for seq := 1; seq <= tokens; seq++ {
			tok := fmt.Sprintf(" w%02d", seq%100)
			text = append(text, tok...)
			l.Append(call.TextPiece(tok))
			for <-seen < seq {
			}
		}
		l.Finish(stream.DoneTerminal(call.Done{RequestID: id, Chunks: tokens, Text: string(text), Model: "mock-a",
			StopReason: "end_turn", Usage: call.Usage{InputTokens: 12, OutputTokens: int64(tokens)}}), time.Unix(1_700_000_001, 0))
		<-done
		logs = append(logs, l)
	}
	after := heap()
	est := r.RetainedBytes()
	runtime.KeepAlive(logs)
	runtime.KeepAlive(r)
	return Retained{Estimate: est / int64(n), Heap: (after-before)/int64(n) - int64(tokens)*tinyStringExtra(heap, n*tokens)}
}

// tinyStringExtra is what a piece's own allocation costs in this build
// beyond its bytes, which the registry's estimate counts: about nothing
// with the tiny allocator, which packs small strings 16 bytes to a block;
// a whole block each under the race detector, which turns it off. It is
// measured on k strings like the pieces, alone.
func tinyStringExtra(heap func() int64, k int) int64 {
	keep := make([]string, k)
	after := heap()
	for i := range keep {
		keep[i] = call.TextPiece(fmt.Sprintf(" w%02d", i%100))
	}
	filled := heap()
	bytes := int64(0)
	for _, s := range keep {
		bytes += int64(len(s))
	}
	runtime.KeepAlive(keep)
	return max(0, (filled-after-bytes)/int64(k))
}
