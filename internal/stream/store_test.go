package stream_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetway-gateway/jetway/internal/stream"
)

// The Store contract, run against MemoryStore here and against
// DynamoStore on dynalite in store_dynamo_test.go. Times are taken from
// the wall clock: both stores read it for expiry.

const (
	alice    = "alice-sub"
	bob      = "bob-sub"
	serverA  = "task-a"
	serverB  = "task-b"
	bodyHash = "sha256:0123"
)

func TestMemoryStoreContract(t *testing.T) {
	testStoreContract(t, func(t *testing.T) stream.Store { return stream.NewMemoryStore(nil) })
}

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// running returns a new record owned by serverA.
func running(id string) stream.Record {
	return stream.Record{
		Owner: alice, RequestID: id, BodyHash: bodyHash, Server: serverA,
		Expires: time.Now().Add(time.Hour),
	}
}

func mustCreate(t *testing.T, s stream.Store, r stream.Record) {
	t.Helper()
	if _, err := s.Create(testCtx(t), r); err != nil {
		t.Fatalf("Create(%s): %v", r.RequestID, err)
	}
}

func mustGet(t *testing.T, s stream.Store, owner, id string) *stream.Record {
	t.Helper()
	r, err := s.Get(testCtx(t), owner, id)
	if err != nil {
		t.Fatalf("Get(%s): %v", id, err)
	}
	return r
}

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s = %v, want %v", what, err, want)
	}
}

func wantChunks(t *testing.T, r *stream.Record, want []string) {
	t.Helper()
	if !slices.Equal(r.Chunks, want) || r.Seq() != len(want) {
		t.Fatalf("chunks = %q (seq %d), want %q", r.Chunks, r.Seq(), want)
	}
}

func testStoreContract(t *testing.T, newStore func(t *testing.T) stream.Store) {
	t.Run("CreateThenExists", func(t *testing.T) {
		s, ctx := newStore(t), testCtx(t)
		r := running("req-create-1")
		got, err := s.Create(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		if got.State != stream.StateRunning || got.Server != serverA || got.Seq() != 0 {
			t.Errorf("created %+v", got)
		}
		// A second server racing for the same request gets the first one's record.
		again := r
		again.Server, again.BodyHash = serverB, "sha256:other"
		existing, err := s.Create(ctx, again)
		wantErr(t, "second Create", err, stream.ErrExists)
		if existing == nil || existing.Server != serverA || existing.BodyHash != bodyHash || existing.State != stream.StateRunning ||
			existing.Owner != alice || existing.RequestID != r.RequestID {
			t.Fatalf("existing = %+v, want serverA's record", existing)
		}
		// Another user's request with the same id is another record.
		other := r
		other.Owner = bob
		mustCreate(t, s, other)
		got = mustGet(t, s, alice, r.RequestID)
		if got.Server != serverA || got.Accepted != nil || got.Terminal != nil || got.Reservation != nil ||
			got.Expires.Unix() != r.Expires.Unix() {
			t.Errorf("Get = %+v", got)
		}
		_, err = s.Get(ctx, alice, "req-never-seen")
		wantErr(t, "Get unknown", err, stream.ErrNotFound)
	})

	t.Run("CreateAccepted", func(t *testing.T) {
		s := newStore(t)
		r := running("req-create-2")
		r.Accepted, r.Reservation = []byte(`{"type":"accepted"}`), []byte(`{"v":1}`)
		r.Trace = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		r.Chunks, r.State, r.Terminal = []string{"ignored"}, stream.StateDone, []byte("ignored")
		mustCreate(t, s, r)
		got := mustGet(t, s, alice, r.RequestID)
		if string(got.Accepted) != `{"type":"accepted"}` || string(got.Reservation) != `{"v":1}` ||
			got.State != stream.StateRunning || got.Seq() != 0 || got.Terminal != nil || got.Trace != r.Trace {
			t.Errorf("Get = %+v", got)
		}
		// The trace stays through the record's life: a takeover reads it from the ended record too.
		if err := s.Finish(testCtx(t), alice, r.RequestID, serverA, 0, []string{"a"}, stream.StateDone, []byte(`{"type":"done"}`),
			time.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		if got := mustGet(t, s, alice, r.RequestID); got.Trace != r.Trace || !got.Ended() {
			t.Errorf("after Finish: trace %q, ended %v", got.Trace, got.Ended())
		}
	})

	t.Run("CheckpointPreservesBoundariesAndIsIdempotent", func(t *testing.T) {
		s, ctx := newStore(t), testCtx(t)
		id := "req-checkpoint"
		mustCreate(t, s, running(id))
		batches := [][]string{
			{"Hel", "lo"},
			{",", "", " ", "wörld 🙂", "\n"},
			{`"quoted" \ {json}`},
			{"  trailing  ", "#"},
		}
		var want []string
		for _, b := range batches {
			if err := s.Checkpoint(ctx, alice, id, serverA, len(want), b); err != nil {
				t.Fatalf("Checkpoint after %d: %v", len(want), err)
			}
			want = append(want, b...)
		}
		got := mustGet(t, s, alice, id)
		wantChunks(t, got, want)

		// The retry of an applied checkpoint is a no-op: nothing duplicated.
		last := batches[len(batches)-1]
		prev := len(want) - len(last)
		for range 2 {
			if err := s.Checkpoint(ctx, alice, id, serverA, prev, last); err != nil {
				t.Fatalf("retried Checkpoint: %v", err)
			}
		}
		wantChunks(t, mustGet(t, s, alice, id), want)

		// The same prevSeq with other chunks, or a wrong prevSeq, conflicts.
		wantErr(t, "Checkpoint same prevSeq other chunks", s.Checkpoint(ctx, alice, id, serverA, prev, []string{"x", "y"}), stream.ErrConflict)
		wantErr(t, "Checkpoint stale prevSeq", s.Checkpoint(ctx, alice, id, serverA, 1, []string{"x"}), stream.ErrConflict)
		wantErr(t, "Checkpoint gap", s.Checkpoint(ctx, alice, id, serverA, len(want)+1, []string{"x"}), stream.ErrConflict)
		wantErr(t, "Checkpoint by another server", s.Checkpoint(ctx, alice, id, serverB, len(want), []string{"x"}), stream.ErrLostLease)
		wantErr(t, "Checkpoint unknown", s.Checkpoint(ctx, alice, "req-unknown", serverA, 0, []string{"x"}), stream.ErrNotFound)
		wantErr(t, "Checkpoint other user", s.Checkpoint(ctx, bob, id, serverA, len(want), []string{"x"}), stream.ErrNotFound)
		wantErr(t, "Checkpoint negative prevSeq", s.Checkpoint(ctx, alice, id, serverA, -1, nil), stream.ErrInvalid)
		wantChunks(t, mustGet(t, s, alice, id), want)

		// No chunks: a check for a cancel only.
		if err := s.Checkpoint(ctx, alice, id, serverA, len(want), nil); err != nil {
			t.Fatal(err)
		}
		wantChunks(t, mustGet(t, s, alice, id), want)
	})

	t.Run("FinishThenGet", func(t *testing.T) {
		s, ctx := newStore(t), testCtx(t)
		id := "req-finish"
		r := running(id)
		r.Accepted, r.Reservation = []byte("accepted"), []byte("reservation")
		mustCreate(t, s, r)
		if err := s.Checkpoint(ctx, alice, id, serverA, 0, []string{"a", "b"}); err != nil {
			t.Fatal(err)
		}
		wantErr(t, "Finish running", s.Finish(ctx, alice, id, serverA, 2, nil, stream.StateRunning, []byte("x"), time.Now()), stream.ErrInvalid)
		wantErr(t, "Finish without terminal", s.Finish(ctx, alice, id, serverA, 2, nil, stream.StateDone, nil, time.Now()), stream.ErrInvalid)
		wantErr(t, "Finish by another server", s.Finish(ctx, alice, id, serverB, 2, []string{"c"}, stream.StateDone, []byte("t"), time.Now()), stream.ErrLostLease)
		wantErr(t, "Finish stale", s.Finish(ctx, alice, id, serverA, 1, []string{"c"}, stream.StateDone, []byte("t"), time.Now()), stream.ErrConflict)

		terminal := []byte(`{"type":"done","request_id":"req-finish","chunks":4,"text":"abcd"}`)
		expires := time.Now().Add(10 * time.Minute)
		if err := s.Finish(ctx, alice, id, serverA, 2, []string{"c", "d"}, stream.StateDone, terminal, expires); err != nil {
			t.Fatal(err)
		}
		got := mustGet(t, s, alice, id)
		wantChunks(t, got, []string{"a", "b", "c", "d"})
		if got.State != stream.StateDone || !got.Ended() || string(got.Terminal) != string(terminal) ||
			got.Expires.Unix() != expires.Unix() || string(got.Accepted) != "accepted" || string(got.Reservation) != "reservation" {
			t.Errorf("Get = %+v", got)
		}
		// A retried Finish is a no-op; anything else after the end is refused.
		if err := s.Finish(ctx, alice, id, serverA, 2, []string{"c", "d"}, stream.StateDone, terminal, expires); err != nil {
			t.Errorf("retried Finish: %v", err)
		}
		wantErr(t, "Finish again, other outcome", s.Finish(ctx, alice, id, serverA, 4, nil, stream.StateError, []byte("e"), expires), stream.ErrLostLease)
		wantErr(t, "Checkpoint after Finish", s.Checkpoint(ctx, alice, id, serverA, 4, []string{"e"}), stream.ErrLostLease)
		wantErr(t, "Interrupt after Finish", s.Interrupt(ctx, alice, id, serverA, []byte("i"), expires), stream.ErrConflict)
		existing, err := s.Create(ctx, r)
		wantErr(t, "Create after Finish", err, stream.ErrExists)
		if existing == nil || existing.State != stream.StateDone || string(existing.Terminal) != string(terminal) || existing.Seq() != 4 {
			t.Errorf("existing = %+v", existing)
		}
		got = mustGet(t, s, alice, id)
		wantChunks(t, got, []string{"a", "b", "c", "d"})
		if string(got.Terminal) != string(terminal) {
			t.Errorf("terminal changed to %s", got.Terminal)
		}
	})

	t.Run("FinishWithError", func(t *testing.T) {
		s, ctx := newStore(t), testCtx(t)
		mustCreate(t, s, running("req-fail"))
		// A zero expiry keeps the record (no TTL).
		if err := s.Finish(ctx, alice, "req-fail", serverA, 0, nil, stream.StateError, []byte(`{"type":"error"}`), time.Time{}); err != nil {
			t.Fatal(err)
		}
		if got := mustGet(t, s, alice, "req-fail"); got.State != stream.StateError || got.Seq() != 0 || !got.Ended() || !got.Expires.IsZero() {
			t.Errorf("Get = %+v", got)
		}
	})

	t.Run("LostLeaseAfterInterrupt", func(t *testing.T) {
		s, ctx := newStore(t), testCtx(t)
		id := "req-lost"
		mustCreate(t, s, running(id))
		if err := s.Checkpoint(ctx, alice, id, serverA, 0, []string{"saved"}); err != nil {
			t.Fatal(err)
		}
		// serverA is gone (killed); serverB interrupts its record.
		terminal := []byte(`{"type":"error","code":"interrupted","text":"saved"}`)
		expires := time.Now().Add(10 * time.Minute)
		if err := s.Interrupt(ctx, alice, id, serverA, terminal, expires); err != nil {
			t.Fatal(err)
		}
		wantErr(t, "Checkpoint after interrupt", s.Checkpoint(ctx, alice, id, serverA, 1, []string{"late"}), stream.ErrLostLease)
		wantErr(t, "Finish after interrupt", s.Finish(ctx, alice, id, serverA, 1, []string{"late"}, stream.StateDone, []byte("done"), expires), stream.ErrLostLease)
		got := mustGet(t, s, alice, id)
		wantChunks(t, got, []string{"saved"})
		if got.State != stream.StateError || string(got.Terminal) != string(terminal) || got.Expires.Unix() != expires.Unix() {
			t.Errorf("Get = %+v", got)
		}
	})

	t.Run("InterruptOnlyOfTheNamedOwner", func(t *testing.T) {
		s, ctx := newStore(t), testCtx(t)
		id := "req-live"
		lease := time.Now().Add(time.Minute)
		mustCreate(t, s, running(id))
		// An interrupter that believes another server owns it loses.
		wantErr(t, "Interrupt naming another owner", s.Interrupt(ctx, alice, id, serverB, []byte("i"), lease), stream.ErrConflict)
		if err := s.Checkpoint(ctx, alice, id, serverA, 0, []string{"x"}); err != nil {
			t.Fatal(err)
		}
		if got := mustGet(t, s, alice, id); got.State != stream.StateRunning || got.Terminal != nil {
			t.Fatalf("Get = %+v, want untouched", got)
		}
		wantErr(t, "Interrupt unknown", s.Interrupt(ctx, alice, "req-unknown", serverA, []byte("i"), lease), stream.ErrNotFound)
		wantErr(t, "Interrupt other user", s.Interrupt(ctx, bob, id, serverA, []byte("i"), lease), stream.ErrNotFound)
		wantErr(t, "Interrupt without terminal", s.Interrupt(ctx, alice, id, serverA, nil, lease), stream.ErrInvalid)
		if err := s.Interrupt(ctx, alice, id, serverA, []byte("i"), lease.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("WithdrawOnlyAnUntouchedRecordOfItsServer", func(t *testing.T) {
		s, ctx := newStore(t), testCtx(t)
		id := "req-withdrawn"
		rec := running(id)
		mustCreate(t, s, rec)
		wantErr(t, "Withdraw by another server", s.Withdraw(ctx, alice, id, serverB, rec.BodyHash), stream.ErrConflict)
		wantErr(t, "Withdraw of another body", s.Withdraw(ctx, alice, id, serverA, rec.BodyHash+"x"), stream.ErrConflict)
		wantErr(t, "Withdraw of another user's", s.Withdraw(ctx, bob, id, serverA, rec.BodyHash), stream.ErrNotFound)
		if err := s.Withdraw(ctx, alice, id, serverA, rec.BodyHash); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Get(ctx, alice, id); !errors.Is(err, stream.ErrNotFound) {
			t.Fatalf("Get after Withdraw: %v, want ErrNotFound", err)
		}
		wantErr(t, "Checkpoint after Withdraw", s.Checkpoint(ctx, alice, id, serverA, 0, []string{"x"}), stream.ErrNotFound)
		// The id is free: a new Create stores a new record.
		again := running(id)
		again.Server = serverB
		mustCreate(t, s, again)
		if got := mustGet(t, s, alice, id); got.Server != serverB {
			t.Fatalf("Get after a new Create = %+v, want serverB's", got)
		}
		keys, err := s.Owned(ctx, serverA, stream.Running)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if k.RequestID == id {
				t.Fatalf("a withdrawn record is still listed among its server's running records")
			}
		}
		// A record that has a chunk is the request running: never withdrawn.
		mustCreate(t, s, running("req-has-chunk"))
		if err := s.Checkpoint(ctx, alice, "req-has-chunk", serverA, 0, []string{"x"}); err != nil {
			t.Fatal(err)
		}
		wantErr(t, "Withdraw with a chunk", s.Withdraw(ctx, alice, "req-has-chunk", serverA, rec.BodyHash), stream.ErrConflict)
		wantErr(t, "Withdraw unknown", s.Withdraw(ctx, alice, "req-unknown", serverA, rec.BodyHash), stream.ErrNotFound)
	})

	t.Run("RunningListsAServersRunningRecords", func(t *testing.T) {
		s, ctx := newStore(t), testCtx(t)
		for _, id := range []string{"req-run-1", "req-run-2", "req-run-done", "req-run-interrupted"} {
			mustCreate(t, s, running(id))
		}
		onB := running("req-run-b")
		onB.Server = serverB
		mustCreate(t, s, onB)
		if err := s.Finish(ctx, alice, "req-run-done", serverA, 0, nil, stream.StateDone, []byte("done"), time.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		if err := s.Interrupt(ctx, alice, "req-run-interrupted", serverA, []byte("i"), time.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		keys, err := s.Owned(ctx, serverA, stream.Running)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, k := range keys {
			if k.Owner != alice {
				t.Errorf("owner %q, want %q", k.Owner, alice)
			}
			ids = append(ids, k.RequestID)
		}
		slices.Sort(ids)
		if want := []string{"req-run-1", "req-run-2"}; !slices.Equal(ids, want) {
			t.Fatalf("Owned(serverA, Running) = %q, want %q", ids, want)
		}
		// Since a moment before the ends: the ended ones too; since later: none of them.
		for _, c := range []struct {
			since time.Time
			n     int
		}{{time.Now().Add(-time.Minute), 4}, {time.Now().Add(time.Minute), 2}} {
			keys, err := s.Owned(ctx, serverA, c.since)
			if err != nil || len(keys) != c.n {
				t.Fatalf("Owned(serverA, %v) = %d keys (%v), want %d", c.since, len(keys), err, c.n)
			}
		}
		if got := mustGet(t, s, alice, "req-run-done"); got.EndedAt.IsZero() || time.Since(got.EndedAt) > time.Minute {
			t.Errorf("EndedAt = %v, want the end", got.EndedAt)
		}
		if got := mustGet(t, s, alice, "req-run-1"); !got.EndedAt.IsZero() {
			t.Errorf("EndedAt = %v while running, want zero", got.EndedAt)
		}
		_, err = s.Owned(ctx, "", stream.Running)
		wantErr(t, "Running of no server", err, stream.ErrInvalid)
	})

	t.Run("InterruptExactlyOneWinner", func(t *testing.T) {
		s, ctx := newStore(t), testCtx(t)
		id := "req-race"
		mustCreate(t, s, running(id))
		if err := s.Checkpoint(ctx, alice, id, serverA, 0, []string{"a", "b"}); err != nil {
			t.Fatal(err)
		}
		const callers = 20
		errs := make([]error, callers)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				errs[i] = s.Interrupt(ctx, alice, id, serverA, fmt.Appendf(nil, `{"winner":%d}`, i), time.Now().Add(time.Hour))
			}()
		}
		close(start)
		wg.Wait()
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil && winner >= 0:
				t.Fatalf("callers %d and %d both won", winner, i)
			case err == nil:
				winner = i
			case !errors.Is(err, stream.ErrConflict):
				t.Fatalf("caller %d: %v, want ErrConflict", i, err)
			}
		}
		if winner < 0 {
			t.Fatal("no caller won")
		}
		got := mustGet(t, s, alice, id)
		if got.State != stream.StateError || string(got.Terminal) != fmt.Sprintf(`{"winner":%d}`, winner) {
			t.Errorf("Get = %+v, want winner %d's terminal", got, winner)
		}
		wantChunks(t, got, []string{"a", "b"})
	})

	t.Run("CancelReachesTheOwnerAtItsCheckpoint", func(t *testing.T) {
		s, ctx := newStore(t), testCtx(t)
		id := "req-cancel"
		lease := time.Now().Add(time.Minute)
		mustCreate(t, s, running(id))
		if err := s.Checkpoint(ctx, alice, id, serverA, 0, []string{"a"}); err != nil {
			t.Fatal(err)
		}
		if got := mustGet(t, s, alice, id); got.Cancelled {
			t.Fatalf("Get = %+v, cancelled before any Cancel", got)
		}
		// Another server (the client reconnected there) cancels; twice is once.
		for range 2 {
			if err := s.Cancel(ctx, alice, id); err != nil {
				t.Fatalf("Cancel: %v", err)
			}
		}
		got := mustGet(t, s, alice, id)
		if !got.Cancelled || got.State != stream.StateRunning || got.Server != serverA {
			t.Fatalf("Get = %+v, want running and cancelled", got)
		}
		// The owner's next checkpoint, with chunks or a bare renewal, is refused and writes nothing.
		wantErr(t, "Checkpoint after Cancel", s.Checkpoint(ctx, alice, id, serverA, 1, []string{"b"}), stream.ErrCancelled)
		wantErr(t, "renewal after Cancel", s.Checkpoint(ctx, alice, id, serverA, 1, nil), stream.ErrCancelled)
		wantErr(t, "Checkpoint by another server", s.Checkpoint(ctx, alice, id, serverB, 1, nil), stream.ErrLostLease)
		got = mustGet(t, s, alice, id)
		wantChunks(t, got, []string{"a"})
		// The owner ends it as usual: Finish ignores the flag.
		terminal := []byte(`{"type":"error","code":"cancelled","text":"ab"}`)
		if err := s.Finish(ctx, alice, id, serverA, 1, []string{"b"}, stream.StateError, terminal, time.Now().Add(time.Hour)); err != nil {
			t.Fatalf("Finish after Cancel: %v", err)
		}
		got = mustGet(t, s, alice, id)
		wantChunks(t, got, []string{"a", "b"})
		if got.State != stream.StateError || string(got.Terminal) != string(terminal) {
			t.Errorf("Get = %+v", got)
		}
		// Nothing left to stop, or nothing there.
		wantErr(t, "Cancel after the end", s.Cancel(ctx, alice, id), stream.ErrConflict)
		wantErr(t, "Cancel unknown", s.Cancel(ctx, alice, "req-unknown"), stream.ErrNotFound)
		wantErr(t, "Cancel other user", s.Cancel(ctx, bob, id), stream.ErrNotFound)
		wantErr(t, "Cancel with '#'", s.Cancel(ctx, alice, "a#b"), stream.ErrInvalid)

		// A retried checkpoint whose first attempt was applied before the
		// Cancel stays a no-op; the next one learns of the Cancel.
		id = "req-cancel-retry"
		mustCreate(t, s, running(id))
		if err := s.Checkpoint(ctx, alice, id, serverA, 0, []string{"x"}); err != nil {
			t.Fatal(err)
		}
		if err := s.Cancel(ctx, alice, id); err != nil {
			t.Fatal(err)
		}
		if err := s.Checkpoint(ctx, alice, id, serverA, 0, []string{"x"}); err != nil {
			t.Fatalf("retried Checkpoint after Cancel: %v", err)
		}
		wantErr(t, "next Checkpoint", s.Checkpoint(ctx, alice, id, serverA, 1, []string{"y"}), stream.ErrCancelled)
		// An owner that died after the Cancel is still interrupted once its lease passes.
		if err := s.Interrupt(ctx, alice, id, serverA, []byte(`{"code":"cancelled"}`), lease.Add(time.Hour)); err != nil {
			t.Fatalf("Interrupt of a cancelled record: %v", err)
		}
		wantChunks(t, mustGet(t, s, alice, id), []string{"x"})
	})

	t.Run("Expired", func(t *testing.T) {
		s, ctx := newStore(t), testCtx(t)
		r := running("req-expired")
		r.Expires = time.Now().Add(-time.Second)
		mustCreate(t, s, r)
		_, err := s.Get(ctx, alice, r.RequestID)
		wantErr(t, "Get expired", err, stream.ErrNotFound)
		wantErr(t, "Checkpoint expired", s.Checkpoint(ctx, alice, r.RequestID, serverA, 0, []string{"x"}), stream.ErrNotFound)
		wantErr(t, "Interrupt expired", s.Interrupt(ctx, alice, r.RequestID, serverA, []byte("i"), time.Now()), stream.ErrNotFound)
		// An expired record does not block a new one with the same id.
		r.Expires, r.Server = time.Now().Add(time.Hour), serverB
		mustCreate(t, s, r)
		if got := mustGet(t, s, alice, r.RequestID); got.Server != serverB {
			t.Errorf("Get = %+v", got)
		}
		// A finished record is kept until its resume window passes.
		if err := s.Finish(ctx, alice, r.RequestID, serverB, 0, []string{"x"}, stream.StateDone, []byte("done"), time.Now().Add(-time.Second)); err != nil {
			t.Fatal(err)
		}
		_, err = s.Get(ctx, alice, r.RequestID)
		wantErr(t, "Get after the resume window", err, stream.ErrNotFound)
	})

	t.Run("TooLarge", func(t *testing.T) {
		s, ctx := newStore(t), testCtx(t)
		id := "req-large"
		mustCreate(t, s, running(id))
		big := strings.Repeat("x", 100<<10)
		for seq := range 3 {
			if err := s.Checkpoint(ctx, alice, id, serverA, seq, []string{big}); err != nil {
				t.Fatalf("Checkpoint %d: %v", seq, err)
			}
		}
		wantErr(t, "Checkpoint past the limit", s.Checkpoint(ctx, alice, id, serverA, 3, []string{big}), stream.ErrTooLarge)
		wantErr(t, "Checkpoint of one huge batch", s.Checkpoint(ctx, alice, id, serverA, 3, []string{big, big, big, big}), stream.ErrTooLarge)
		wantErr(t, "Finish with a large terminal", s.Finish(ctx, alice, id, serverA, 3, nil, stream.StateDone, []byte(big[:60<<10]), time.Now().Add(time.Hour)), stream.ErrTooLarge)
		got := mustGet(t, s, alice, id)
		wantChunks(t, got, []string{big, big, big})
		if got.State != stream.StateRunning {
			t.Fatalf("state %s", got.State)
		}
		// Smaller writes still fit; the record was not damaged.
		if err := s.Checkpoint(ctx, alice, id, serverA, 3, []string{"tail"}); err != nil {
			t.Fatal(err)
		}
		if err := s.Finish(ctx, alice, id, serverA, 4, nil, stream.StateError, []byte(`{"type":"error"}`), time.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		wantChunks(t, mustGet(t, s, alice, id), []string{big, big, big, "tail"})
	})

	t.Run("InvalidArguments", func(t *testing.T) {
		s, ctx := newStore(t), testCtx(t)
		_, err := s.Create(ctx, stream.Record{Owner: alice, RequestID: "a#b", Server: serverA})
		wantErr(t, "Create with '#'", err, stream.ErrInvalid)
		_, err = s.Create(ctx, stream.Record{Owner: "", RequestID: "req-x", Server: serverA})
		wantErr(t, "Create without owner", err, stream.ErrInvalid)
		_, err = s.Create(ctx, stream.Record{Owner: alice, RequestID: "req-x"})
		wantErr(t, "Create without server", err, stream.ErrInvalid)
		_, err = s.Get(ctx, alice, "")
		wantErr(t, "Get without id", err, stream.ErrInvalid)
	})

	t.Run("CancelledContextIsUnavailable", func(t *testing.T) {
		s := newStore(t)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := s.Get(ctx, alice, "req-any")
		wantErr(t, "Get", err, stream.ErrUnavailable)
		_, err = s.Create(ctx, running("req-any"))
		wantErr(t, "Create", err, stream.ErrUnavailable)
		wantErr(t, "Checkpoint", s.Checkpoint(ctx, alice, "req-any", serverA, 0, nil), stream.ErrUnavailable)
		wantErr(t, "Cancel", s.Cancel(ctx, alice, "req-any"), stream.ErrUnavailable)
	})
}
