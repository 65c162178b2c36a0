package stream

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetway-gateway/jetway/internal/call"
)

func TestLogReplayAfterSeq(t *testing.T) {
	l := NewLog("alice", "req-00000001", "h", time.Time{})
	acc := NewAccepted(call.Accepted{RequestID: "req-00000001", Model: "m"})
	l.Accept(acc)
	for i := 1; i <= 5; i++ {
		if seq := l.Append(fmt.Sprint(i)); seq != i {
			t.Fatalf("seq %d, want %d", seq, i)
		}
	}
	s := l.Read(2)
	if s.Accepted != acc || s.First != 3 || len(s.Chunks) != 3 || s.Chunks[0] != "3" || s.Terminal != nil {
		t.Fatalf("snapshot %+v", s)
	}
	done := DoneTerminal(call.Done{Chunks: 5})
	if !l.Finish(done, time.Now()) || l.Finish(DoneTerminal(call.Done{}), time.Now()) {
		t.Fatal("Finish must win exactly once")
	}
	if l.Append("late") != 0 {
		t.Fatal("append after the terminal must be ignored")
	}
	s = l.Read(5)
	if len(s.Chunks) != 0 || s.Terminal != done {
		t.Fatalf("after finish %+v", s)
	}
	if text, n := l.Text(); text != "12345" || n != 5 {
		t.Fatalf("text %q %d", text, n)
	}
}

func TestFollowersSeeEveryChunkOnce(t *testing.T) {
	l := NewLog("alice", "req-00000001", "h", time.Time{})
	const n = 2000
	var wg sync.WaitGroup
	for f := 0; f < 8; f++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cursor := 0
			for {
				s := l.Read(cursor)
				for i, c := range s.Chunks {
					if c != fmt.Sprint(s.First+i) {
						t.Errorf("seq %d holds %q", s.First+i, c)
						return
					}
				}
				cursor += len(s.Chunks)
				if s.Terminal != nil {
					if cursor != n {
						t.Errorf("follower saw %d chunks, want %d", cursor, n)
					}
					return
				}
				<-s.Changed
			}
		}()
	}
	for i := 1; i <= n; i++ {
		l.Append(fmt.Sprint(i))
	}
	l.Finish(DoneTerminal(call.Done{}), time.Now())
	wg.Wait()
}

func TestRegistryRetentionAndRejection(t *testing.T) {
	now := time.Unix(1000, 0)
	r := NewRegistry(RegistryOptions{Retention: time.Minute, Now: func() time.Time { return now }})
	l, created := r.Create("alice", "req-00000001", "h1", now)
	if !created {
		t.Fatal("first create")
	}
	if again, created := r.Create("alice", "req-00000001", "h1", now); created || again != l {
		t.Fatal("second create must return the same log")
	}
	if _, ok := r.Get("bob", "req-00000001"); ok {
		t.Fatal("another owner must not see the log")
	}
	l.Finish(DoneTerminal(call.Done{}), now)
	now = now.Add(59 * time.Second)
	if _, ok := r.Get("alice", "req-00000001"); !ok {
		t.Fatal("finished log must stay within retention")
	}
	now = now.Add(2 * time.Second)
	if _, ok := r.Get("alice", "req-00000001"); ok {
		t.Fatal("log must expire after retention")
	}
	if n := r.Sweep(); n != 1 || r.Len() != 0 {
		t.Fatalf("sweep removed %d, len %d", n, r.Len())
	}
	rej, _ := r.Create("alice", "req-00000002", "h", now)
	rej.Reject(ErrorTerminal(call.Failure{Code: call.CodeBusy}), now)
	if _, created := r.Create("alice", "req-00000002", "h", now); !created {
		t.Fatal("a rejected request may be sent again")
	}
}

func BenchmarkAppendAndReplay(b *testing.B) {
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		l := NewLog("u", "req-00000001", "h", time.Time{})
		for j := 0; j < 300; j++ {
			l.Append(" token")
		}
		s := l.Read(0)
		if len(s.Chunks) != 300 {
			b.Fatal("replay")
		}
	}
}

// retentionCounts is a RetentionObserver that remembers what it heard.
type retentionCounts struct {
	mu      sync.Mutex
	bytes   int64
	evicted int
}

func (c *retentionCounts) RetainedAnswerBytes(n int64) { c.mu.Lock(); c.bytes = n; c.mu.Unlock() }
func (c *retentionCounts) RetainedAnswerEvicted()      { c.mu.Lock(); c.evicted++; c.mu.Unlock() }

// Finished answers past the byte budget are evicted oldest first; running
// ones never are, and the observer hears the retained bytes and evictions.
func TestRegistryByteBudgetEvictsOldestFinished(t *testing.T) {
	now := time.Unix(1000, 0)
	obs := &retentionCounts{}
	answer := strings.Repeat("x", 10_000)
	r := NewRegistry(RegistryOptions{Retention: time.Hour, RetainedBytes: 35_000, Observer: obs,
		Now: func() time.Time { return now }})
	running, _ := r.Create("alice", "running-0001", "h", now)
	running.Append(answer)
	var logs []*Log
	for i := range 5 {
		l, _ := r.Create("alice", fmt.Sprintf("finished-%04d", i), "h", now)
		l.Append(answer)
		l.Finish(DoneTerminal(call.Done{}), now)
		logs = append(logs, l)
		now = now.Add(time.Second)
	}
	// Each finished log is a little over 10 KB: three fit in 35,000 bytes.
	for i, l := range logs {
		_, ok := r.Get("alice", l.RequestID)
		if want := i >= 2; ok != want {
			t.Errorf("log %d kept = %v, want %v", i, ok, want)
		}
	}
	if _, ok := r.Get("alice", "running-0001"); !ok {
		t.Fatal("a running log was evicted")
	}
	if got := r.RetainedBytes(); got > 35_000 || got < 30_000 {
		t.Fatalf("retained %d bytes, want about 3 answers within the 35,000 budget", got)
	}
	obs.mu.Lock()
	if obs.evicted != 2 || obs.bytes != r.RetainedBytes() {
		t.Errorf("observer heard %d evictions and %d bytes, want 2 and %d", obs.evicted, obs.bytes, r.RetainedBytes())
	}
	obs.mu.Unlock()
	// Expiry and rejection give their bytes back.
	now = now.Add(2 * time.Hour)
	r.Sweep()
	if got := r.RetainedBytes(); got != 0 {
		t.Fatalf("after the sweep %d bytes retained, want 0", got)
	}
	rej, _ := r.Create("bob", "rejected-001", "h", now)
	rej.Reject(ErrorTerminal(call.Failure{Code: call.CodeBusy}), now)
	if got := r.RetainedBytes(); got != 0 {
		t.Fatalf("a rejected log counts %d bytes", got)
	}
}
