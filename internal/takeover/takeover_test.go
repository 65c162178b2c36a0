package takeover_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/jetway-gateway/jetway/internal/quota"
	"github.com/jetway-gateway/jetway/internal/stream"
	"github.com/jetway-gateway/jetway/internal/takeover"
)

// core is the pipeline's part, recording each ending it is asked for.
type core struct {
	mu      sync.Mutex
	endings []takeover.Ending
}

func (c *core) End(_ context.Context, how takeover.Ending, _ *stream.Log, _ *stream.Record, _ *zap.Logger) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.endings = append(c.endings, how)
	return true
}

func (c *core) Facts(*stream.Record) (takeover.Facts, error) { return takeover.Facts{}, nil }

func (c *core) Charged(*stream.Record) (quota.Amount, bool) { return quota.Amount{}, false }

func (c *core) ended() []takeover.Ending {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]takeover.Ending(nil), c.endings...)
}

// fleet is the membership: a server is gone once killed.
type fleet struct{ gone atomic.Bool }

func (f *fleet) Gone(string, time.Time) bool { return f.gone.Load() }

// noLeases is a quota store without leases.
type noLeases struct{}

func (noLeases) GoneLeases(context.Context, string, []quota.Item) []quota.HeldLease { return nil }

func (noLeases) ReclaimGone(context.Context, quota.HeldLease, quota.Amount) error { return nil }

// polls is Records counting its reads.
type polls struct {
	*stream.MemoryStore
	gets atomic.Int64
}

func (p *polls) Get(ctx context.Context, owner, id string) (*stream.Record, error) {
	p.gets.Add(1)
	return p.MemoryStore.Get(ctx, owner, id)
}

// survivor is a survivor over records whose background work ends with
// the test (and is waited for).
func survivor(t *testing.T, records takeover.Records, f takeover.Fleet, c takeover.Core) *takeover.Survivor {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	return takeover.New(takeover.Deps{Records: records, Fleet: f, Leases: noLeases{}, Logs: stream.NewRegistry(stream.RegistryOptions{}), Core: c,
		Go: func(run func(context.Context)) {
			wg.Add(1)
			go func() { defer wg.Done(); run(ctx) }()
		}, Logger: zaptest.NewLogger(t)},
		takeover.Options{PollInterval: time.Millisecond, StoreTimeout: time.Second})
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond) // polling with a deadline, not waiting for an event
	}
}

func running(t *testing.T, s *stream.MemoryStore, id string) {
	t.Helper()
	if _, err := s.Create(context.Background(), stream.Record{Owner: "t/a/u", RequestID: id, BodyHash: "h", Server: "a",
		Expires: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
}

// TestAnAliveOwnerIsFollowedThenAGoneOneInterrupted: a record whose owner
// is alive is only followed, however many polls; once the fleet says the
// owner is gone the survivor asks the pipeline for its one ending.
func TestAnAliveOwnerIsFollowedThenAGoneOneInterrupted(t *testing.T) {
	records := &polls{MemoryStore: stream.NewMemoryStore(nil)}
	running(t, records.MemoryStore, "req-1")
	f, c := &fleet{}, &core{}
	s := survivor(t, records, f, c)
	if _, err := s.Adopt(context.Background(), "t/a/u", "req-1"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "several polls", func() bool { return records.gets.Load() >= 5 })
	if e := c.ended(); len(e) != 0 {
		t.Fatalf("endings %v while the owner is alive, want none", e)
	}
	f.gone.Store(true)
	waitFor(t, "the ending", func() bool { return len(c.ended()) > 0 })
	if e := c.ended(); len(e) != 1 || e[0] != takeover.Interrupted {
		t.Fatalf("endings %v, want one Interrupted", e)
	}
}

// TestAWithdrawnRecordRefusesOnlyThisAttempt: a record that vanishes
// before any chunk ends the local copy as Withdrawn; an unknown id is
// stream.ErrNotFound.
func TestAWithdrawnRecordRefusesOnlyThisAttempt(t *testing.T) {
	records := stream.NewMemoryStore(nil)
	running(t, records, "req-2")
	c := &core{}
	s := survivor(t, records, &fleet{}, c)
	if _, err := s.Adopt(context.Background(), "t/a/u", "req-unknown"); !errors.Is(err, stream.ErrNotFound) {
		t.Fatalf("adopting an unknown record: %v, want stream.ErrNotFound", err)
	}
	if _, err := s.Adopt(context.Background(), "t/a/u", "req-2"); err != nil {
		t.Fatal(err)
	}
	if err := records.Withdraw(context.Background(), "t/a/u", "req-2", "a", "h"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the ending", func() bool { return len(c.ended()) > 0 })
	if e := c.ended(); len(e) != 1 || e[0] != takeover.Withdrawn {
		t.Fatalf("endings %v, want one Withdrawn", e)
	}
}

// blockingOwned is Records whose Owned waits for release, counting the
// calls in flight at once.
type blockingOwned struct {
	*stream.MemoryStore
	release  chan struct{}
	mu       sync.Mutex
	inFlight int
	most     int
	calls    int
}

func (r *blockingOwned) Owned(ctx context.Context, server string, since time.Time) ([]stream.RecordKey, error) {
	r.mu.Lock()
	r.inFlight++
	r.calls++
	r.most = max(r.most, r.inFlight)
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.inFlight--
		r.mu.Unlock()
	}()
	select {
	case <-r.release:
	case <-ctx.Done():
	}
	return nil, nil
}

func (r *blockingOwned) state() (inFlight, most, calls int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.inFlight, r.most, r.calls
}

// TestSweepsRunFewAtATime: hundreds of members judged gone at once (a
// table of leftovers) are swept a few at a time, never all at once; every
// one is swept in the end.
func TestSweepsRunFewAtATime(t *testing.T) {
	recs := &blockingOwned{MemoryStore: stream.NewMemoryStore(nil), release: make(chan struct{})}
	s := survivor(t, recs, &fleet{}, &core{})
	const gone = 300
	for i := range gone {
		s.Sweep(fmt.Sprintf("leftover-%d", i))
	}
	waitFor(t, "the first sweeps", func() bool { n, _, _ := recs.state(); return n > 0 })
	close(recs.release)
	waitFor(t, "every sweep", func() bool { _, _, calls := recs.state(); return calls == gone })
	if _, most, _ := recs.state(); most > 4 || most < 1 {
		t.Fatalf("%d sweeps listed records at once, want 1-4", most)
	}
}
