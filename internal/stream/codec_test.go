package stream

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetway-gateway/jetway/internal/call"
)

// countingCodec encodes "<n>:<seq>:<piece>" where n counts the encoder's
// calls, so a test sees both the order of calls and that each event was
// encoded once.
type countingCodec struct{ encoders, calls *atomic.Int64 }

type countingEncoder struct {
	c    countingCodec
	next int // the seq the encoder expects next
	t    *testing.T
}

func (c countingCodec) NewEncoder(*Log) Encoder {
	c.encoders.Add(1)
	return &countingEncoder{c: c, next: 1}
}

func (e *countingEncoder) Accepted(a *Accepted) []byte {
	e.c.calls.Add(1)
	return []byte("accepted " + a.Model)
}

func (e *countingEncoder) AppendChunk(dst []byte, seq int, p call.Piece) []byte {
	e.c.calls.Add(1)
	if seq != e.next {
		return fmt.Appendf(dst, "out of order: %d, want %d", seq, e.next)
	}
	e.next++
	return fmt.Appendf(dst, "%d:%s", seq, p.Text)
}

func (e *countingEncoder) Terminal(t *Terminal, chunks int) []byte {
	e.c.calls.Add(1)
	return []byte(fmt.Sprintf("end after %d", chunks))
}

func follow(t *testing.T, l *Log, c Codec, after int) (accepted string, chunks []string, terminal string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	next := after + 1
	for b := range l.Follow(ctx, c, after) {
		if b.Accepted != nil {
			accepted = string(b.AcceptedBytes)
		}
		if len(b.Pieces) > 0 && b.First != next {
			t.Fatalf("batch from %d, want from %d", b.First, next)
		}
		if b.Chunks.Len() != len(b.Pieces) {
			t.Fatalf("batch of %d pieces has %d chunks", len(b.Pieces), b.Chunks.Len())
		}
		for i := range b.Chunks.Len() {
			chunks = append(chunks, string(b.Chunks.At(i)))
		}
		next = b.Last() + 1
		if b.Terminal != nil {
			terminal = string(b.TerminalBytes)
		}
	}
	if ctx.Err() != nil {
		t.Fatal("the follow did not end with the terminal")
	}
	return accepted, chunks, terminal
}

// Every follower of a codec gets the same bytes, each event encoded once
// while they follow at once, chunks in seq order even when the first
// follower resumes mid-answer; the last follower of the finished answer
// lets the encodings go.
func TestFollowEncodesEachEventOncePerCodec(t *testing.T) {
	l := NewLog("alice", "req-00000001", "h", time.Time{})
	c := countingCodec{encoders: new(atomic.Int64), calls: new(atomic.Int64)}
	l.Accept(NewAccepted(call.Accepted{Model: "m"}))
	const n = 500
	var wg sync.WaitGroup
	results := make([][]string, 6)
	for f := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			after := 0
			if f == 0 {
				after = 3 // a resume before the others start: seqs 1-3 are still encoded first
			}
			acc, chunks, end := follow(t, l, c, after)
			if acc != "accepted m" || end != fmt.Sprintf("end after %d", n) {
				t.Errorf("follower %d: accepted %q, terminal %q", f, acc, end)
			}
			results[f] = chunks
		}()
	}
	// Every follower holds the codec's encodings before the answer
	// streams (the last to leave a finished log lets them go).
	for {
		l.mu.Lock()
		ready := len(l.prepared) == 1 && l.prepared[0].users == len(results)
		l.mu.Unlock()
		if ready {
			break
		}
		time.Sleep(time.Millisecond)
	}
	for i := 1; i <= n; i++ {
		l.Append(fmt.Sprint(i))
	}
	l.Finish(DoneTerminal(call.Done{Chunks: n}), time.Now())
	wg.Wait()
	for f, chunks := range results {
		first := 1
		if f == 0 {
			first = 4
		}
		if len(chunks) != n-first+1 {
			t.Fatalf("follower %d got %d chunks", f, len(chunks))
		}
		for i, c := range chunks {
			if want := fmt.Sprintf("%d:%d", first+i, first+i); c != want {
				t.Fatalf("follower %d chunk %d is %q, want %q", f, i, c, want)
			}
		}
	}
	if e, calls := c.encoders.Load(), c.calls.Load(); e != 1 || calls != n+2 {
		t.Fatalf("%d encoders made %d calls, want 1 encoder and %d calls (each event once)", e, calls, n+2)
	}
	// A second codec is a second door: its own encoder, its own bytes.
	other := countingCodec{encoders: new(atomic.Int64), calls: new(atomic.Int64)}
	if _, chunks, _ := follow(t, l, other, n-1); len(chunks) != 1 || other.calls.Load() != n+2 {
		t.Fatalf("another codec's replay after %d: %q in %d calls", n-1, chunks, other.calls.Load())
	}
}

// A follow ends when its context does, with no batch.
func TestFollowEndsWithItsContext(t *testing.T) {
	l := NewLog("alice", "req-00000001", "h", time.Time{})
	c := countingCodec{encoders: new(atomic.Int64), calls: new(atomic.Int64)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	go func() {
		n := 0
		for range l.Follow(ctx, c, 0) {
			n++
		}
		done <- n
	}()
	l.Append("one")
	for c.calls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if n := <-done; n != 1 {
		t.Fatalf("%d batches, want 1", n)
	}
}

// A retained answer replayed in another door's encoding takes more of the
// registry's budget while it is replayed, and the oldest finished answers
// make room; the replay gives it back when it ends.
func TestReplayEncodingCountsInTheBudget(t *testing.T) {
	now := time.Unix(1000, 0)
	r := NewRegistry(RegistryOptions{Retention: time.Hour, RetainedBytes: 50_000, Now: func() time.Time { return now }})
	var logs []*Log
	for i := range 3 {
		l, _ := r.Create("alice", fmt.Sprintf("finished-%04d", i), "h", now)
		l.Append(strings.Repeat("x", 10_000))
		l.Finish(DoneTerminal(call.Done{Chunks: 1}), now)
		logs = append(logs, l)
	}
	before := r.RetainedBytes()
	c := countingCodec{encoders: new(atomic.Int64), calls: new(atomic.Int64)}
	// Two replays at once: the second, inside the first, passes the budget.
	var during int64
	for b := range logs[2].Follow(context.Background(), c, 0) {
		if b.Terminal == nil {
			continue
		}
		if during = r.RetainedBytes(); during < before+10_000 {
			t.Fatalf("retained %d bytes during a replay, want at least %d", during, before+10_000)
		}
		follow(t, logs[1], c, 0)
	}
	if _, ok := r.Get("alice", logs[0].RequestID); ok {
		t.Fatal("the oldest answer was kept past the budget")
	}
	// Done, the replays give their encodings back.
	if got := r.RetainedBytes(); got >= during {
		t.Fatalf("retained %d bytes after the replays, %d during: the encodings were kept", got, during)
	}
	if got := r.RetainedBytes(); got > 50_000 {
		t.Fatalf("retained %d bytes, over the 50,000 budget", got)
	}
}

// A follower past the end of the answer (a Last-Event-ID the answer never
// reached) gets the terminal, encoded with the answer's own chunk count.
func TestFollowPastTheEnd(t *testing.T) {
	l := NewLog("alice", "req-00000001", "h", time.Time{})
	c := countingCodec{encoders: new(atomic.Int64), calls: new(atomic.Int64)}
	l.Accept(NewAccepted(call.Accepted{Model: "m"}))
	l.Append("one")
	l.Finish(DoneTerminal(call.Done{Chunks: 1}), time.Now())
	if _, chunks, end := follow(t, l, c, 7); len(chunks) != 0 || end != "end after 1" {
		t.Fatalf("after 7 of 1: chunks %q, terminal %q", chunks, end)
	}
	if _, chunks, end := follow(t, l, c, 0); len(chunks) != 1 || end != "end after 1" {
		t.Fatalf("from the start: chunks %q, terminal %q", chunks, end)
	}
}

// longCodec's chunk encodings outgrow the room a run's buffer gives them.
type longCodec struct{}

func (longCodec) NewEncoder(*Log) Encoder        { return longCodec{} }
func (longCodec) Accepted(*Accepted) []byte      { return nil }
func (longCodec) Terminal(*Terminal, int) []byte { return []byte("end") }
func (longCodec) AppendChunk(dst []byte, seq int, p call.Piece) []byte {
	return fmt.Appendf(dst, "%d:%s;", seq, strings.Repeat(p.Text, 40+seq%7*30))
}

func TestChunksOutgrowingTheirBuffer(t *testing.T) {
	l := NewLog("alice", "req-00000001", "h", time.Time{})
	for i := 1; i <= 50; i++ {
		l.Append(fmt.Sprintf("p%d", i))
	}
	l.Finish(DoneTerminal(call.Done{Chunks: 50}), time.Now())
	for _, after := range []int{0, 20} {
		_, chunks, _ := follow(t, l, longCodec{}, after)
		for i, c := range chunks {
			seq := after + 1 + i
			if want := fmt.Sprintf("%d:%s;", seq, strings.Repeat(fmt.Sprintf("p%d", seq), 40+seq%7*30)); c != want {
				t.Fatalf("after %d: seq %d is %.40q..., want %.40q...", after, seq, c, want)
			}
		}
	}
}
