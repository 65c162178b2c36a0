package gateway

import (
	"sync"
	"testing"
	"time"
)

// lockedFleet is a membership whose lock is held both to say whether it
// is healthy and to read this server's load (slots.count), as
// fleet.Membership's is.
type lockedFleet struct {
	mu sync.Mutex
}

func (f *lockedFleet) Healthy() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return true
}

func (f *lockedFleet) Gone(string, time.Time) bool { return false }

// Admission asks the fleet whether it is healthy while the membership
// reads the load under its own lock: the two locks must never be taken
// in both orders (the deadlock that froze a survivor's admission and its
// drain in TestArticleTest2Kill on a busy machine).
func TestSlotsAndTheFleetNeverDeadlock(t *testing.T) {
	f := &lockedFleet{}
	s := newSlots(&Options{MaxInflight: 1 << 20, MaxInflightPerSession: 1 << 20, MaxInflightPerUser: 1 << 20}, f, nil)
	done := make(chan struct{})
	go func() {
		defer close(done)
		var wg sync.WaitGroup
		wg.Go(func() {
			for range 20000 {
				k := slotKey{tenant: "t", user: "u", session: "s"}
				if err := s.acquire(k); err != nil {
					t.Error(err)
					return
				}
				s.release(k)
			}
		})
		wg.Go(func() {
			for range 20000 {
				f.mu.Lock()
				_ = s.count() // the membership's Load, under its lock
				f.mu.Unlock()
			}
		})
		wg.Wait()
	}()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("admission and the membership's load read deadlocked")
	}
}
