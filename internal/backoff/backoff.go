// Package backoff is the one retry wait of the tree (tailscale keeps one
// util/backoff): exponential from a base, capped, jittered, bounded in
// attempts or by a deadline, and ending with its context. Every retry loop
// uses it: quota settlement writes, same-model retries, usage record
// delivery, a terminal's write to the request record, and the Go client's
// reconnects.
//
// github.com/cenkalti/backoff/v5 was weighed and not taken: its jitter is a
// band around the delay (interval * [1-f, 1+f]), so none of the documented
// bounds here ("[d/2, d]", "at most 5 s") would read as written; its
// elapsed-time bound reads the wall clock, where the quota and the gateway
// decide deadlines on their injectable clocks; and its Retry wants each
// loop body as a closure, where these loops resend part of a batch or
// resynchronize mid-loop.
package backoff

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"
)

// ErrExhausted: the policy allows no more attempts (Attempts spent, or
// Until passed).
var ErrExhausted = errors.New("backoff: no attempt left")

// Jitter is how a wait is drawn from the capped exponential delay d.
type Jitter uint8

const (
	// Equal draws uniformly in [d/2, d]: never less than half the delay.
	Equal Jitter = iota
	// Full draws uniformly in (0, d].
	Full
	// None waits exactly d.
	None
)

// Policy bounds one retry loop. Its zero Until and Attempts mean no bound
// of that kind; a loop without either ends with its context.
type Policy struct {
	// Base is the delay before the first retry (before jitter); each
	// retry doubles it.
	Base time.Duration
	// Max caps the delay (before jitter); below Base it is taken as Base.
	Max    time.Duration
	Jitter Jitter
	// Attempts bounds the calls, the first included (0: no bound).
	Attempts int
	// Until is when no retry is started any more (zero: no bound), read
	// on Now (nil: time.Now).
	Until time.Time
	Now   func() time.Time
}

// Delay is the wait before retry n (n >= 1, the call after attempt n
// failed): d = min(Base * 2^(n-1), Max), drawn by Jitter. It is 0 for
// n <= 0.
func (p Policy) Delay(n int) time.Duration {
	if n <= 0 || p.Base <= 0 {
		return 0
	}
	d := max(p.Max, p.Base)
	if n-1 < 62 && p.Base <= d>>(n-1) {
		d = p.Base << (n - 1)
	}
	switch p.Jitter {
	case Full:
		return rand.N(d) + 1
	case None:
		return d
	}
	return d/2 + rand.N(d/2+1)
}

// Wait waits Delay(n) after attempt n failed, before the next one. It
// returns ErrExhausted at once when the policy allows no attempt after
// the n-th (Attempts, Until), and ctx's error when ctx ends first (n = 0
// waits nothing: only ctx is checked).
func (p Policy) Wait(ctx context.Context, n int) error {
	if p.Attempts > 0 && n >= p.Attempts {
		return ErrExhausted
	}
	if !p.Until.IsZero() {
		now := time.Now
		if p.Now != nil {
			now = p.Now
		}
		if !now().Before(p.Until) {
			return ErrExhausted
		}
	}
	d := p.Delay(n)
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
