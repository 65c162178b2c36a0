package gateway

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/jetway-gateway/jetway/internal/backoff"
	"github.com/jetway-gateway/jetway/internal/stream"
	"github.com/jetway-gateway/jetway/internal/tracing"
)

// land stores the request record while the model call (already started by
// stream, beside it) waits for its first token, then sends accepted, the
// event admit returned: accepted still means the request landed (any
// server can resume it). Until land returns, stream delivers nothing; its
// decision reaches stream through f.landed (waitLanded). When the put
// fails, or finds the request owned by another server, land stops the
// local call and ends this flight before Submit returns: one busy
// rejection (nothing streamed), or this log follows the owner; stream
// then only returns.
func (f *flight) land(ctx context.Context, accepted *stream.Accepted) {
	defer close(f.landed)
	if f.g.records != nil {
		if err := f.createRecord(ctx, accepted); err != nil || f.following {
			f.landErr = err
			f.cancel()
			f.standDown()
			return
		}
		f.checkpoints = f.startCheckpoints()
	}
	f.log.SetCancel(f.stop)
	_, f.deliver = f.span("jetway.deliver")
	f.log.Accept(accepted)
}

// standDown ends a flight that did not land: the put failed (one busy
// rejection) or another server owns the request (this log follows it;
// that server's request is the one that runs, ends and is charged, so the
// local reservation and slots are given back at once).
func (f *flight) standDown() {
	if f.ended {
		return
	}
	f.ended = true
	if f.landErr != nil {
		f.reject(f.landErr)
		return
	}
	g := f.g
	g.releaseQuota(f.tctx, f.logger, f.reservation)
	f.reservation = nil
	if f.admitted {
		f.admitted = false
		g.slots.release(f.slotKey())
	}
	g.metrics.RequestFollowed()
	f.root.SetAttributes(tracing.Outcome.String("follows_other_server"))
	f.root.End()
}

// createRecord stores the accepted request so any server can resume it,
// with one conditional put that returns the record already stored under
// the id. If another server stored it first, this log follows that record.
func (f *flight) createRecord(ctx context.Context, accepted *stream.Accepted) error {
	g, p := f.g, f.caller.Principal
	q, err := f.reservation.MarshalBinary()
	if err != nil {
		return fmt.Errorf("encode reservation: %w", err)
	}
	fs := f.facts()
	fs.Quota, fs.InputEstimate, fs.Model = q, f.estimate, f.chain[0].ID
	if !g.late.claim(p.Owner(), f.req.RequestID) {
		return fmt.Errorf("%w: this request's earlier record is being withdrawn", errBusy)
	}
	now := g.opts.Now()
	_, span := f.span("jetway.record.create")
	cctx, cancel := g.callCtx(ctx)
	existing, err := g.records.Create(cctx, stream.Record{Owner: p.Owner(), RequestID: f.req.RequestID,
		BodyHash: f.log.BodyHash, Server: g.opts.Instance, Accepted: accepted.Stored(),
		Reservation: fs.stored(), Trace: tracing.Format(f.root.SpanContext()), Expires: now.Add(g.opts.RequestTimeout + g.opts.ResumeWindow)})
	cancel()
	switch {
	case err == nil:
		endSpan(span, nil, tracing.RecordOutcome.String("created"), none)
		return nil
	case !errors.Is(err, stream.ErrExists) || existing == nil:
		// A put that timed out may still have landed (a starved store
		// answers late): read it back, so that this server's own record
		// is run by this flight and never left running with nobody behind
		// it (another server would follow it until it expired).
		if f.ownsRecord(ctx) {
			f.logger.Info("record_created_late", zap.NamedError("put_error", err))
			endSpan(span, nil, tracing.RecordOutcome.String("created"), none)
			return nil
		}
		err = errors.Join(errBusy, err)
		endSpan(span, err, tracing.RecordOutcome.String("error"), none)
		f.watchLatePut()
		return err
	case existing.BodyHash == f.log.BodyHash && existing.Server == g.opts.Instance && existing.State == stream.StateRunning:
		// This server's own record, from an attempt it gave up on when
		// the put seemed to fail: this flight runs it.
		f.logger.Info("record_created_late", zap.String("owner_server", existing.Server))
		endSpan(span, nil, tracing.RecordOutcome.String("created"), none)
		return nil
	case existing.BodyHash != f.log.BodyHash:
		endSpan(span, errConflict, tracing.RecordOutcome.String("conflict"), none)
		return errConflict
	}
	endSpan(span, nil, tracing.RecordOutcome.String("follows"), tracing.Server.String(existing.Server))
	f.following = true
	f.logger.Info("follows_other_server", zap.String("owner_server", existing.Server))
	g.survivor.Follow(f.log, existing)
	return nil
}

// ownsRecord reports whether the request's record is stored, running,
// with this body, owned by this server: a put that failed to answer in
// time but landed.
func (f *flight) ownsRecord(ctx context.Context) bool {
	g := f.g
	ctx, cancel := g.callCtx(ctx)
	defer cancel()
	rec, err := g.records.Get(ctx, f.caller.Principal.Owner(), f.req.RequestID)
	return err == nil && rec.Server == g.opts.Instance && rec.BodyHash == f.log.BodyHash && rec.State == stream.StateRunning
}

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

// latePuts are the given-up puts being watched, at most maxLateWatches.
type latePuts struct {
	mu      sync.Mutex
	watches map[lateKey]*lateWatch
}

// lateWatch is one given-up put being watched, guarded by latePuts.mu.
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
	l := g.late
	l.mu.Lock()
	_, watching := l.watches[k]
	full := len(l.watches) >= maxLateWatches
	if !watching && !full {
		l.watches[k] = w
	}
	l.mu.Unlock()
	switch {
	case watching:
		return
	case full:
		f.logger.Warn("late_put_not_watched", zap.Int("watches", maxLateWatches))
		return
	}
	go g.watchLate(k, w, f.logger)
}

// claim takes over a watch of the request's given-up put before a new
// attempt writes its record. It returns false while that put's record is
// being withdrawn: the attempt is then refused `busy`, and the next one
// finds the id free.
func (l *latePuts) claim(owner, requestID string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := lateKey{owner, requestID}
	w := l.watches[k]
	if w == nil {
		return true
	}
	if w.withdrawing {
		return false
	}
	w.claimed = true
	delete(l.watches, k)
	return true
}

// watchLate looks for the given-up put's record until it is found, the
// watch is claimed, or lateWatchFor passes.
func (g *Gateway) watchLate(k lateKey, w *lateWatch, logger *zap.Logger) {
	l := g.late
	defer func() {
		l.mu.Lock()
		if l.watches[k] == w {
			delete(l.watches, k)
		}
		l.mu.Unlock()
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
		l.mu.Lock()
		if w.claimed {
			l.mu.Unlock()
			return
		}
		w.withdrawing = true
		l.mu.Unlock()
		ctx, cancel = g.storeCtx()
		err = g.records.Withdraw(ctx, w.owner, w.requestID, g.opts.Instance, w.bodyHash)
		cancel()
		l.mu.Lock()
		w.withdrawing = false
		l.mu.Unlock()
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
