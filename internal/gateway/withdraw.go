package gateway

import (
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/jetway-gateway/jetway/internal/backoff"
	"github.com/jetway-gateway/jetway/internal/stream"
)

// A late put. A record's Create that does not answer within StoreTimeout
// (a starved store) makes the flight refuse its request `busy`: nothing
// ran, the client sends it again. The put may still land afterwards. Such
// a record says this server runs the request, and nobody does: a server
// that follows it (the client's next attempt went there) would wait until
// it expired, since its owner is alive. So the server that gave up watches
// for its late record for a while, and withdraws it (stream.Store.Withdraw:
// it expires at once, untouched) if it lands; a follower sees the record
// vanish before any chunk and refuses only its attempt, retryably, so the
// client sends again and the request runs. A new attempt of the same
// request on this server claims the watch first, so a record that a flight
// here runs is never withdrawn.
const (
	lateWatchFor   = 2 * time.Minute        // how long a given-up put is watched for
	lateWatchFirst = 250 * time.Millisecond // the first look; then doubling
	lateWatchMax   = 4 * time.Second        // the longest wait between looks
	maxLateWatches = 256                    // watches at once; past it a given-up put is not watched (logged)
)

// lateWatch is one given-up put being watched, guarded by Gateway.mu.
type lateWatch struct {
	owner, requestID, bodyHash string
	claimed                    bool // a new attempt here took the request over: never withdraw
	withdrawing                bool // the Withdraw is under way
}

type lateKey struct{ owner, requestID string }

// watchLatePut starts watching the flight's given-up put.
func (f *flight) watchLatePut() {
	g := f.g
	k := lateKey{f.caller.Principal.Owner(), f.req.RequestID}
	w := &lateWatch{owner: k.owner, requestID: k.requestID, bodyHash: f.log.BodyHash}
	g.mu.Lock()
	_, watching := g.late[k]
	full := len(g.late) >= maxLateWatches
	if !watching && !full {
		g.late[k] = w
	}
	g.mu.Unlock()
	switch {
	case watching:
		return
	case full:
		f.logger.Warn("late_put_not_watched", zap.Int("watches", maxLateWatches))
		return
	}
	go g.watchLate(k, w, f.logger)
}

// claimLate takes over a watch of the request's given-up put before a new
// attempt writes its record. It returns false while that put's record is
// being withdrawn: the attempt is then refused `busy`, and the next one
// finds the id free.
func (g *Gateway) claimLate(owner, requestID string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	k := lateKey{owner, requestID}
	w := g.late[k]
	if w == nil {
		return true
	}
	if w.withdrawing {
		return false
	}
	w.claimed = true
	delete(g.late, k)
	return true
}

// watchLate looks for the given-up put's record until it is found, the
// watch is claimed, or lateWatchFor passes.
func (g *Gateway) watchLate(k lateKey, w *lateWatch, logger *zap.Logger) {
	defer func() {
		g.mu.Lock()
		if g.late[k] == w {
			delete(g.late, k)
		}
		g.mu.Unlock()
	}()
	look := backoff.Policy{Base: lateWatchFirst, Max: lateWatchMax, Jitter: backoff.None}
	until := g.opts.Now().Add(lateWatchFor)
	for attempt := 1; g.opts.Now().Before(until); attempt++ {
		if look.Wait(g.base, attempt) != nil {
			return
		}
		ctx, cancel := g.storeCtx()
		rec, err := g.records.Get(ctx, w.owner, w.requestID)
		cancel()
		switch {
		case errors.Is(err, stream.ErrNotFound), err != nil:
			continue // not landed (yet), or the store did not answer: look again
		case rec.Server != g.opts.Instance || rec.BodyHash != w.bodyHash || rec.State != stream.StateRunning || rec.Seq() > 0:
			return // not the given-up put's record, or a flight runs it
		}
		g.mu.Lock()
		if w.claimed {
			g.mu.Unlock()
			return
		}
		w.withdrawing = true
		g.mu.Unlock()
		ctx, cancel = g.storeCtx()
		err = g.records.Withdraw(ctx, w.owner, w.requestID, g.opts.Instance, w.bodyHash)
		cancel()
		g.mu.Lock()
		w.withdrawing = false
		g.mu.Unlock()
		switch {
		case err == nil:
			logger.Info("late_record_withdrawn")
			return
		case errors.Is(err, stream.ErrConflict), errors.Is(err, stream.ErrNotFound):
			return // changed meanwhile: no longer a given-up put's untouched record
		}
		logger.Warn("late_record_withdraw_failed", zap.Error(err))
	}
}
