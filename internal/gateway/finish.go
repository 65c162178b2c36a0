package gateway

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/jetway-gateway/jetway/internal/backoff"
	"github.com/jetway-gateway/jetway/internal/call"
	"github.com/jetway-gateway/jetway/internal/quota"
	"github.com/jetway-gateway/jetway/internal/router"
	"github.com/jetway-gateway/jetway/internal/stream"
	"github.com/jetway-gateway/jetway/internal/telemetry"
	"github.com/jetway-gateway/jetway/internal/tracing"
)

// ending says how an outcome reaches the client and the request store.
type ending int

const (
	// endRejected: refused before acceptance. The error frame is the only
	// frame, the log is forgotten, the reservation (if any) is released.
	// A request refused at the door (Gateway.Refuse) has no log.
	endRejected ending = iota
	// endOwned: this server ran the request. The log ends, then the record
	// (if any) gets the terminal, then the quota is settled.
	endOwned
	// endInterrupted: this server ends another server's record whose lease
	// passed. The record's conditional Interrupt comes first: only the
	// server that wins it delivers, records usage and settles.
	endInterrupted
)

// outcome is how a request ended: everything its one ending needs.
type outcome struct {
	how   ending
	facts facts // the request's: who, when, which door
	err   error // nil: done
	text  string
	// blocks are done's blocks (nil: none on the wire); toolCalls counts
	// the answer's tool_use blocks.
	blocks    []call.Block
	toolCalls int
	// chunks is the last seq; usage is what is charged, on model's price.
	chunks       int
	usage        call.Usage
	model        string       // the model that answered (else the one asked for)
	place        router.Place // the placement that answered (or was called last); zero: none
	tier         string       // the service tier that served ("": none named)
	fallbackFrom string
	stopReason   string
	cached       bool
	ttft         int64 // ms from arrival; 0: no chunk
	latency      int64 // ms from arrival
	end          time.Time

	log              *stream.Log
	logger           *zap.Logger
	reservation      *quota.Reservation // nil: nothing reserved
	reserved         int64              // tokens reserved, for the usage record
	checkpoints      *checkpointer      // endOwned with a request store
	span             trace.Span         // the request's root span, ended here (nil: another's record)
	deliver          trace.Span         // accepted to terminal (nil: nothing was delivered)
	settledElsewhere bool               // endOwned after a lost lease: the interrupting server charged it
	ownerServer      string             // endInterrupted: the gone server whose record this ends
}

// reject ends a request that was never accepted: its only frame is the error.
func (f *flight) reject(err error) {
	if f.admitted {
		f.admitted = false
		f.g.slots.release(f.slotKey())
	}
	o := f.outcome(err)
	o.how, o.model, o.end = endRejected, f.requestedModel(), f.g.opts.Now()
	f.g.finish(f.tctx, o)
	f.g.chargeRefusal(f.logger, f.caller.Principal.Owner(), err)
}

// outcome is the part of an ending every path of this flight shares.
func (f *flight) outcome(err error) outcome {
	o := outcome{err: err, log: f.log, logger: f.logger, reservation: f.reservation, cached: f.cached != nil,
		span: f.root, deliver: f.deliver, facts: f.facts()}
	o.reserved = o.facts.Reserved
	return o
}

// requestedModel is the chain's first model, or a configured model id the
// client asked for, or "" or telemetry.OtherModel: never the client's
// string, which would become a label and a record value.
func (f *flight) requestedModel() string {
	if len(f.chain) > 0 {
		return f.chain[0].ID
	}
	if _, ok := f.g.cfg.Model(f.req.Model); ok || f.req.Model == "" {
		return f.req.Model
	}
	return telemetry.OtherModel
}

// finish is the one ending of every request: it encodes the terminal,
// persists it, delivers it, writes the usage record and settles or
// releases the quota, at the one price (see price). It reports whether
// this server ended the request (false only for a lost Interrupt race).
// ctx carries the span the ending's spans are children of.
func (g *Gateway) finish(ctx context.Context, o outcome) bool {
	defer endRequest(o.span, &o)
	at := priced{model: o.model, place: priceAt(o.place), tier: o.tier}
	charge := g.charge(at, o.usage)
	terminal := o.terminal(charge.MicroUSD)
	if o.how == endInterrupted && !g.persistInterrupt(o, terminal.Stored()) {
		return false
	}
	if !o.settledElsewhere {
		g.logEnding(o, charge.MicroUSD) // before the client can see the terminal, so the log line is never behind it
	}
	switch o.how {
	case endRejected:
		if o.log != nil { // nil: refused at the door (Refuse), which sends the error itself
			o.log.Reject(terminal, o.end)
			g.logs.Forget(o.log)
		}
	case endInterrupted:
		o.log.Finish(terminal, o.end)
	case endOwned:
		if o.settledElsewhere {
			// Deliver the terminal the interrupting server stored, which
			// also wrote the usage record and settled.
			o.log.Finish(g.storedTerminal(o.facts, terminal), o.end)
			endSpan(o.deliver, o.err, tracing.Chunks.Int(o.chunks), none)
			if o.checkpoints != nil {
				o.checkpoints.stop()
			}
			return true
		}
		o.log.Finish(terminal, o.end)
		endSpan(o.deliver, o.err, tracing.Chunks.Int(o.chunks), none)
		if o.checkpoints != nil && !g.persistTerminal(ctx, o, o.checkpoints.stop(), terminal.Stored()) {
			// Another server ended the record (this one was judged gone):
			// it wrote the usage record and settled, refund included.
			return true
		}
	}
	rec := o.usageRecord(charge.MicroUSD, g.cacheSavedMicroUSD(at, o.usage), g.opts.ServerID)
	if g.usage != nil {
		_, span := g.start(ctx, "jetway.usage.record")
		g.usage.Record(rec)
		span.End()
	}
	g.metrics.ObserveRequest(rec)
	if o.reservation != nil {
		if o.how == endRejected {
			g.releaseQuota(ctx, o.logger, o.reservation)
		} else {
			g.settleQuota(ctx, o.logger, o.reservation, charge)
		}
	}
	return true
}

// terminal is the outcome's terminal event (for a rejection: the only
// one); costMicroUSD is its price.
func (o *outcome) terminal(costMicroUSD int64) *stream.Terminal {
	if o.err == nil {
		return stream.DoneTerminal(call.Done{RequestID: o.facts.RequestID, Chunks: o.chunks,
			Text: o.text, Model: o.model, Cached: o.cached, Usage: o.usage, StopReason: o.stopReason,
			TTFTMs: o.ttft, LatencyMs: o.latency, Blocks: o.blocks, ServiceTier: o.tier, CostMicroUSD: costMicroUSD})
	}
	return errorTerminal(o.facts.RequestID, o.err, o.how != endRejected, o.text, o.chunks)
}

// errorTerminal is a failed outcome: the failure for err, naming the
// request and, once it was accepted, carrying what was streamed before it.
func errorTerminal(requestID string, err error, accepted bool, text string, chunks int) *stream.Terminal {
	f := Failure(err)
	f.RequestID = requestID
	if accepted {
		f.Text, f.Chunks = &text, &chunks
	}
	return stream.ErrorTerminal(f)
}

func (o *outcome) usageRecord(costMicroUSD, savedMicroUSD int64, server string) telemetry.UsageRecord {
	code, status := telemetry.OutcomeDone, 200
	if o.err != nil {
		pe := Failure(o.err)
		code, status = pe.Code, pe.Status
	}
	return telemetry.UsageRecord{
		RequestID: o.facts.RequestID, SessionID: o.facts.SessionID, TS: o.facts.ReceivedAt,
		Tenant: o.facts.Tenant, App: o.facts.App, User: o.facts.User, ClientID: o.facts.ClientID, Model: o.model,
		FallbackFrom: o.fallbackFrom, Outcome: code, Status: status,
		InputTokens: o.usage.InputTokens, OutputTokens: o.usage.OutputTokens, ReservedTokens: o.reserved,
		CacheReadInputTokens: o.usage.CacheReadInputTokens, CacheWriteInputTokens: o.usage.CacheWriteInputTokens,
		CostUSD: float64(costMicroUSD) / 1e6, CacheSavedUSD: float64(savedMicroUSD) / 1e6, TTFTMs: o.ttft, LatencyMs: o.latency,
		Chunks: o.chunks, Server: server, Cached: o.cached, Door: o.facts.Door,
		Placement: o.place.Name, BedrockProfile: o.place.Profile, ServiceTier: serviceTier(o.tier),
		Images: o.facts.Images, Documents: o.facts.Documents, ToolCalls: o.toolCalls, TraceID: o.facts.TraceID,
	}
}

// serviceTier is the usage record's tier: the one that served, else default.
func serviceTier(tier string) string {
	if tier == "" {
		return call.TierDefault
	}
	return tier
}

// logEnding writes the request's one ending line at info: with the
// request id, session, tenant, app, user and door of its logger, it holds
// what the debug lines before it said (the model asked and the one that
// answered, where and in which tier, the quota's reservation and its
// tightest window at admission, the first token's time) and what the
// settlement will charge (tokens and micro-USD; a settlement that fails
// is logged apart, at error).
func (g *Gateway) logEnding(o outcome, costMicroUSD int64) {
	fields := []zap.Field{zap.String("model", o.model), zap.Int64("latency_ms", o.latency),
		zap.Int("chunks", o.chunks)}
	if o.place.Name != "" {
		fields = append(fields, zap.String("placement", o.place.Name))
	}
	if o.tier != "" {
		fields = append(fields, zap.String("service_tier", o.tier))
	}
	if o.cached {
		fields = append(fields, zap.Bool("cached", true))
	}
	if o.reservation != nil {
		fields = append(fields, zap.Int64("reserved", o.reserved))
		if w, limit, remaining := o.reservation.Tightest(); w != "" {
			fields = append(fields, zap.String("window", string(w)), zap.Int64("used", limit-remaining), zap.Int64("limit", limit))
		}
	}
	if o.err == nil {
		o.logger.Info("completed", append(fields, zap.String("fallback_from", o.fallbackFrom),
			zap.Int64("ttft_ms", o.ttft), zap.Int64("input_tokens", o.usage.InputTokens),
			zap.Int64("output_tokens", o.usage.OutputTokens), zap.Int64("cache_read_input_tokens", o.usage.CacheReadInputTokens),
			zap.Int64("cache_write_input_tokens", o.usage.CacheWriteInputTokens), zap.Int64("micro_usd", costMicroUSD),
			zap.Int("status", 200))...)
		return
	}
	pe := Failure(o.err)
	fields = append(fields, zap.String("code", pe.Code), zap.Int("status", pe.Status), zap.Error(o.err))
	switch {
	case o.how == endRejected && pe.Code != call.CodeInternal && pe.Code != call.CodeBusy:
		o.logger.Info("rejected", fields...)
	case o.how == endRejected:
		o.logger.Warn("rejected", fields...)
	default:
		o.logger.Warn("failed", append(fields, zap.String("fallback_from", o.fallbackFrom), zap.Int64("ttft_ms", o.ttft))...)
	}
}

// settleQuota charges the real usage and refunds the rest, off the
// client's path; it retries until SettleTimeout or the drain deadline.
func (g *Gateway) settleQuota(tctx context.Context, logger *zap.Logger, res *quota.Reservation, actual quota.Amount) {
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		_, span := g.start(tctx, "jetway.quota.settle")
		ctx, cancel := context.WithTimeout(g.settleBase, g.opts.SettleTimeout)
		defer cancel()
		err := g.quotas.Settle(ctx, res, actual)
		endSpan(span, err, tracing.InputTokens.Int64(actual.Tokens), none)
		if err != nil {
			logger.Error("quota_settle_failed", zap.Int64("tokens", actual.Tokens), zap.Error(err))
			return
		}
		logger.Debug("quota_settled", zap.Int64("charged", actual.Tokens),
			zap.Int64("refunded", res.Amount().Tokens-actual.Tokens), zap.Int64("micro_usd", actual.MicroUSD))
	}()
}

// releaseQuota gives back a reservation that will not be used.
func (g *Gateway) releaseQuota(tctx context.Context, logger *zap.Logger, res *quota.Reservation) {
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		_, span := g.start(tctx, "jetway.quota.release")
		ctx, cancel := context.WithTimeout(g.settleBase, g.opts.SettleTimeout)
		defer cancel()
		err := g.quotas.Release(ctx, res)
		endSpan(span, err, none, none)
		if err != nil {
			logger.Error("quota_release_failed", zap.Error(err))
		}
	}()
}

// persistTerminal writes the terminal frame to the record after the local
// log ended, retrying a store outage until the resume window passes. It
// reports false when another server had ended the record (this server
// was judged gone), which then charged the request.
func (g *Gateway) persistTerminal(tctx context.Context, o outcome, stored int, frame []byte) (ok bool) {
	_, span := g.start(tctx, "jetway.record.finish")
	defer func() {
		outcome := "finished"
		if !ok {
			outcome = "lost_lease" // another server ended the record
		}
		endSpan(span, nil, tracing.RecordOutcome.String(outcome), none)
	}()
	snap := o.log.Read(stored)
	state := stream.StateError
	if o.err == nil {
		state = stream.StateDone
	}
	retry := backoff.Policy{Base: persistBackoff, Max: maxStoreBackoff, Jitter: backoff.None,
		Until: g.opts.Now().Add(g.opts.ResumeWindow), Now: g.opts.Now}
	finish := func() error {
		ctx, cancel := g.storeCtx()
		defer cancel()
		return g.records.Finish(ctx, o.facts.Owner, o.facts.RequestID, g.opts.Instance, stored, snap.Chunks,
			state, frame, g.opts.Now().Add(g.opts.ResumeWindow))
	}
	resynced := false
	for attempt := 1; ; attempt++ {
		err := finish()
		if errors.Is(err, stream.ErrConflict) && !resynced {
			// A checkpoint whose answer was lost landed late: finish from
			// what the record holds (once: a second conflict is real).
			if n, ok := g.storedSeq(o.facts.Owner, o.facts.RequestID, o.log); ok {
				o.logger.Info("record_finish_resynced", zap.Int("from", stored), zap.Int("to", n))
				resynced, stored = true, n
				snap = o.log.Read(stored)
				err = finish()
			}
		}
		if err == nil || errors.Is(err, stream.ErrLostLease) || errors.Is(err, stream.ErrConflict) || errors.Is(err, stream.ErrTooLarge) {
			if err != nil {
				o.logger.Warn("record_finish_refused", zap.Error(err))
			}
			return !errors.Is(err, stream.ErrLostLease)
		}
		o.logger.Warn("record_finish_failed", zap.Int("attempt", attempt), zap.Error(err))
		if retry.Wait(g.settleBase, attempt) != nil {
			return true
		}
	}
}

// storedSeq is the seq the request's record holds when its chunks are
// the first ones of log (they always are unless the record is not this
// server's): what the owner's next write continues from.
func (g *Gateway) storedSeq(owner, requestID string, log *stream.Log) (int, bool) {
	ctx, cancel := g.storeCtx()
	rec, err := g.records.Get(ctx, owner, requestID)
	cancel()
	if err != nil || rec.Server != g.opts.Instance || rec.Ended() {
		return 0, false
	}
	pieces := log.Pieces()
	if len(rec.Chunks) > len(pieces) {
		return 0, false
	}
	for i, c := range rec.Chunks {
		if pieces[i] != c {
			return 0, false
		}
	}
	return rec.Seq(), true
}

// persistInterrupt ends another server's record with frame; exactly one
// server wins. It reports whether this one did.
func (g *Gateway) persistInterrupt(o outcome, frame []byte) bool {
	ctx, cancel := g.storeCtx()
	err := g.records.Interrupt(ctx, o.facts.Owner, o.facts.RequestID, o.ownerServer, frame, o.end.Add(g.opts.ResumeWindow))
	cancel()
	if err != nil {
		if !errors.Is(err, stream.ErrConflict) {
			o.logger.Warn("interrupt_failed", zap.Error(err))
		}
		return false
	}
	return true
}

// storedTerminal is the terminal another server stored for the request,
// else own.
func (g *Gateway) storedTerminal(fs facts, own *stream.Terminal) *stream.Terminal {
	ctx, cancel := g.storeCtx()
	rec, err := g.records.Get(ctx, fs.Owner, fs.RequestID)
	cancel()
	if err == nil && rec.Ended() {
		return stream.DecodeTerminal(rec.Terminal)
	}
	return own
}
