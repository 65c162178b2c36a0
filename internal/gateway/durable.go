package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/jetway-gateway/jetway/internal/protocol"
	"github.com/jetway-gateway/jetway/internal/quota"
	"github.com/jetway-gateway/jetway/internal/stream"
	"github.com/jetway-gateway/jetway/internal/telemetry"
)

// Records is the durable request store shared by every gateway task: what
// lets a client resume on any server, and a request whose server died end
// in exactly one terminal outcome.
type Records interface {
	Create(ctx context.Context, r stream.Record) (*stream.Record, error)
	Checkpoint(ctx context.Context, owner, requestID, server string, prevSeq int, chunks []string, leaseUntil time.Time) error
	Finish(ctx context.Context, owner, requestID, server string, prevSeq int, chunks []string, state string, terminal []byte, expires time.Time) error
	Get(ctx context.Context, owner, requestID string) (*stream.Record, error)
	Interrupt(ctx context.Context, owner, requestID string, now time.Time, terminal []byte, expires time.Time) error
}

// envelope is what a record carries so that any server can settle the
// request and write its usage record.
type envelope struct {
	Quota         []byte `json:"quota"`
	InputEstimate int64  `json:"input_estimate"`
	Model         string `json:"model"`
	Tenant        string `json:"tenant"`
	App           string `json:"app"`
	ClientID      string `json:"client_id"`
	SessionID     string `json:"session_id"`
	ReceivedAt    int64  `json:"received_at_ms"`
	Reserved      int64  `json:"reserved_tokens"`
}

// storeCtx bounds one store call.
func (g *Gateway) storeCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(g.settleBase, g.opts.StoreTimeout)
}

// adopt makes a local log that follows a request owned by another server
// (or by this one before a restart): it replays the record and polls it
// until its terminal frame. Returns errNotFound if the store has no record.
func (g *Gateway) adopt(c Caller, requestID, bodyHash string, checkHash bool) (*stream.Log, error) {
	ctx, cancel := g.storeCtx()
	rec, err := g.records.Get(ctx, c.Principal.Subject, requestID)
	cancel()
	switch {
	case errors.Is(err, stream.ErrNotFound):
		return nil, errNotFound
	case err != nil:
		return nil, errors.Join(errBusy, err)
	}
	if checkHash && rec.BodyHash != bodyHash {
		return nil, errConflict
	}
	log, created := g.logs.Create(c.Principal.Subject, requestID, rec.BodyHash)
	if !created {
		return log, nil // someone on this server adopted it first
	}
	g.startFollowing(log, rec)
	return log, nil
}

// startFollowing feeds log from rec and its later versions.
func (g *Gateway) startFollowing(log *stream.Log, rec *stream.Record) {
	g.logger.Info("adopted", zap.String("request_id", log.RequestID), zap.String("user", log.Owner),
		zap.String("owner_server", rec.Server), zap.String("state", rec.State), zap.Int("seq", rec.Seq()))
	g.wg.Add(1)
	go g.followRecord(log, rec)
}

// followRecord copies a record into the local log until it ends; when the
// owner's lease has passed it interrupts the record (exactly one server wins).
func (g *Gateway) followRecord(log *stream.Log, rec *stream.Record) {
	defer g.wg.Done()
	owner, id := log.Owner, log.RequestID
	logger := g.logger.With(zap.String("request_id", id), zap.String("user", owner))
	accepted := false
	backoff := g.opts.PollInterval
	for {
		if rec != nil {
			if !accepted && rec.Accepted != nil {
				log.Accept(rec.Accepted)
				accepted = true
			}
			_, have := log.Text()
			for _, c := range rec.Chunks[min(have, len(rec.Chunks)):] {
				log.Append(c)
			}
			if rec.Ended() {
				log.Finish(rec.Terminal, g.opts.Now())
				return
			}
			now := g.opts.Now()
			if now.After(rec.LeaseUntil) && g.interrupt(log, rec, now, logger) {
				return
			}
			backoff = g.opts.PollInterval
		}
		select {
		case <-g.base.Done():
			return
		case <-time.After(backoff):
		}
		ctx, cancel := g.storeCtx()
		next, err := g.records.Get(ctx, owner, id)
		cancel()
		switch {
		case errors.Is(err, stream.ErrNotFound):
			logger.Warn("record_vanished")
			text, n := log.Text()
			pe := ProtocolError(context.Canceled)
			pe.RequestID, pe.Chunks, pe.Text = id, &n, &text
			log.Finish(protocol.Encode(pe), g.opts.Now())
			return
		case err != nil:
			rec = nil
			backoff = min(backoff*2, 2*time.Second)
			logger.Warn("record_poll_failed", zap.Error(err))
		default:
			rec = next
		}
	}
}

// interrupt ends a record whose owner stopped renewing its lease: the
// terminal is `interrupted` with the saved text. It reports whether this
// server won (and so finished the local log, settled and recorded usage).
func (g *Gateway) interrupt(log *stream.Log, rec *stream.Record, now time.Time, logger *zap.Logger) bool {
	text := strings.Join(rec.Chunks, "")
	n := len(rec.Chunks)
	pe := ProtocolError(errInterrupted)
	pe.RequestID, pe.Chunks, pe.Text = rec.RequestID, &n, &text
	frame := protocol.Encode(pe)
	ctx, cancel := g.storeCtx()
	err := g.records.Interrupt(ctx, rec.Owner, rec.RequestID, now, frame, now.Add(g.opts.ResumeWindow))
	cancel()
	if err != nil {
		if !errors.Is(err, stream.ErrConflict) {
			logger.Warn("interrupt_failed", zap.Error(err))
		}
		return false
	}
	logger.Warn("interrupted", zap.String("owner_server", rec.Server), zap.Int("chunks", n))
	log.Finish(frame, now)

	var env envelope
	if json.Unmarshal(rec.Reservation, &env) != nil {
		logger.Error("interrupted_without_reservation")
		return true
	}
	usage := protocol.Usage{InputTokens: env.InputEstimate, OutputTokens: quota.EstimateOutputTokens(text)}
	rec2 := telemetry.UsageRecord{RequestID: rec.RequestID, SessionID: env.SessionID, TS: time.UnixMilli(env.ReceivedAt).UTC(),
		Tenant: env.Tenant, App: env.App, User: rec.Owner, ClientID: env.ClientID, Model: env.Model,
		Outcome: pe.Code, Status: pe.Status, InputTokens: usage.InputTokens, OutputTokens: usage.OutputTokens,
		ReservedTokens: env.Reserved, CostUSD: g.cost(env.Model, usage.InputTokens, usage.OutputTokens),
		LatencyMs: now.Sub(time.UnixMilli(env.ReceivedAt)).Milliseconds(), Chunks: n, Server: g.opts.ServerID}
	if g.usage != nil {
		g.usage.Record(rec2)
	}
	g.metrics.ObserveRequest(rec2)
	res, err := g.quotas.Restore(env.Quota)
	if err != nil {
		logger.Error("reservation_restore_failed", zap.Error(err))
		return true
	}
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		actual := quota.Amount{Tokens: usage.InputTokens + usage.OutputTokens, Requests: 1,
			MicroUSD: quota.MicroUSD(rec2.CostUSD)}
		sctx, cancel := context.WithTimeout(g.settleBase, g.opts.SettleTimeout)
		defer cancel()
		if err := g.quotas.Settle(sctx, res, actual); err != nil {
			logger.Error("quota_settle_failed", zap.Error(err))
			return
		}
		logger.Info("quota_settled", zap.Int64("charged", actual.Tokens), zap.Int64("refunded", env.Reserved-actual.Tokens))
	}()
	return true
}

// checkpoint keeps a running request's record current: chunks appended in
// batches (every CheckpointInterval or CheckpointChunks chunks) and the
// lease renewed. It returns when done is closed, leaving the stored seq.
func (r *run) checkpoint(done <-chan struct{}) int {
	g := r.g
	stored := 0
	lastWrite := time.Now()
	tick := time.NewTicker(g.opts.CheckpointInterval)
	defer tick.Stop()
	for {
		snap := r.log.Read(stored)
		due := len(snap.Chunks) >= g.opts.CheckpointChunks || time.Since(lastWrite) >= g.opts.CheckpointInterval
		if snap.Terminal != nil {
			return stored
		}
		if due {
			ctx, cancel := g.storeCtx()
			err := g.records.Checkpoint(ctx, r.caller.Principal.Subject, r.req.RequestID, g.opts.ServerID, stored,
				snap.Chunks, g.opts.Now().Add(g.opts.Lease))
			cancel()
			switch {
			case err == nil:
				stored += len(snap.Chunks)
				lastWrite = time.Now()
			case errors.Is(err, stream.ErrLostLease):
				r.logger.Warn("lease_lost")
				r.lostLease.Store(true)
				r.log.Cancel()
				return stored
			case errors.Is(err, stream.ErrTooLarge):
				r.logger.Warn("checkpoint_too_large", zap.Int("seq", stored))
				lastWrite = time.Now()
			default:
				r.logger.Warn("checkpoint_failed", zap.Error(err))
			}
		}
		select {
		case <-done:
			return stored
		case <-snap.Changed:
		case <-tick.C:
		}
	}
}

// persistTerminal writes the terminal frame to the record after the local log
// ended, retrying a store outage for a while.
func (r *run) persistTerminal(stored int, frame []byte, ok bool) {
	g := r.g
	snap := r.log.Read(stored)
	state := stream.StateError
	if ok {
		state = stream.StateDone
	}
	backoff := 50 * time.Millisecond
	for attempt := 0; attempt < 8; attempt++ {
		ctx, cancel := g.storeCtx()
		err := g.records.Finish(ctx, r.caller.Principal.Subject, r.req.RequestID, g.opts.ServerID, stored, snap.Chunks,
			state, frame, g.opts.Now().Add(g.opts.ResumeWindow))
		cancel()
		if err == nil || errors.Is(err, stream.ErrLostLease) || errors.Is(err, stream.ErrConflict) || errors.Is(err, stream.ErrTooLarge) {
			if err != nil {
				r.logger.Warn("record_finish_refused", zap.Error(err))
			}
			return
		}
		r.logger.Warn("record_finish_failed", zap.Int("attempt", attempt+1), zap.Error(err))
		select {
		case <-g.settleBase.Done():
			return
		case <-time.After(backoff):
		}
		backoff *= 2
	}
}
