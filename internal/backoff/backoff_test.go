package backoff_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jetway-gateway/jetway/internal/backoff"
)

// Every delay lies within its jitter's bounds of min(Base*2^(n-1), Max),
// and the jittered ones spread.
func TestDelayBounds(t *testing.T) {
	base, capd := 100*time.Millisecond, 5*time.Second
	for _, j := range []struct {
		jitter backoff.Jitter
		low    func(d time.Duration) time.Duration
		spread bool
	}{
		{backoff.Equal, func(d time.Duration) time.Duration { return d / 2 }, true},
		{backoff.Full, func(time.Duration) time.Duration { return 1 }, true},
		{backoff.None, func(d time.Duration) time.Duration { return d }, false},
	} {
		p := backoff.Policy{Base: base, Max: capd, Jitter: j.jitter}
		if d := p.Delay(0); d != 0 {
			t.Errorf("jitter %d: Delay(0) = %s, want 0", j.jitter, d)
		}
		for n := 1; n <= 100; n++ {
			d := capd
			if n <= 6 {
				d = base << (n - 1)
			}
			seen := map[time.Duration]bool{}
			for range 200 {
				got := p.Delay(n)
				if got < j.low(d) || got > d {
					t.Fatalf("jitter %d: Delay(%d) = %s, want in [%s, %s]", j.jitter, n, got, j.low(d), d)
				}
				seen[got] = true
			}
			if j.spread && len(seen) < 100 {
				t.Fatalf("jitter %d: Delay(%d): %d distinct waits in 200, want jitter", j.jitter, n, len(seen))
			}
		}
	}
	if d := (backoff.Policy{Base: time.Second, Jitter: backoff.None}).Delay(3); d != time.Second {
		t.Errorf("a Max below Base: %s, want Base", d)
	}
}

// Wait stops at the policy's bounds without waiting, and with its context.
func TestWaitBounds(t *testing.T) {
	ctx := context.Background()
	p := backoff.Policy{Base: time.Nanosecond, Max: time.Nanosecond, Attempts: 3}
	for n := 1; n < 3; n++ {
		if err := p.Wait(ctx, n); err != nil {
			t.Fatalf("Wait after attempt %d of 3: %v", n, err)
		}
	}
	if err := p.Wait(ctx, 3); !errors.Is(err, backoff.ErrExhausted) {
		t.Errorf("Wait after the last attempt: %v, want ErrExhausted", err)
	}

	now := time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)
	p = backoff.Policy{Base: time.Hour, Max: time.Hour, Until: now, Now: func() time.Time { return now }}
	if err := p.Wait(ctx, 1); !errors.Is(err, backoff.ErrExhausted) {
		t.Errorf("Wait at Until: %v, want ErrExhausted", err)
	}

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	p = backoff.Policy{Base: time.Hour, Max: time.Hour}
	if err := p.Wait(cctx, 1); !errors.Is(err, context.Canceled) {
		t.Errorf("Wait on an ended context: %v, want context.Canceled", err)
	}
	if err := p.Wait(cctx, 0); !errors.Is(err, context.Canceled) {
		t.Errorf("Wait(0) on an ended context: %v, want context.Canceled", err)
	}
	if err := p.Wait(ctx, 0); err != nil {
		t.Errorf("Wait(0): %v, want nil at once", err)
	}
}
