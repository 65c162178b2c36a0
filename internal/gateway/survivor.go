package gateway

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/jetway-gateway/jetway/internal/call"
	"github.com/jetway-gateway/jetway/internal/quota"
	"github.com/jetway-gateway/jetway/internal/stream"
	"github.com/jetway-gateway/jetway/internal/takeover"
	"github.com/jetway-gateway/jetway/internal/tracing"
)

// adopt makes a local log that follows a request owned by another server
// (or by this one before a restart): the survivor replays its record and
// polls it until its terminal. Returns errNotFound if the store has no
// record.
func (g *Gateway) adopt(ctx context.Context, c Caller, requestID string) (*stream.Log, error) {
	ctx, cancel := g.callCtx(ctx)
	defer cancel()
	log, err := g.survivor.Adopt(ctx, c.Principal.Owner(), requestID)
	switch {
	case errors.Is(err, stream.ErrNotFound):
		return nil, errNotFound
	case err != nil:
		return nil, errors.Join(errBusy, err)
	}
	return log, nil
}

// Sweep ends what a server the fleet judged gone left behind: its running
// requests and its quota leases (takeover.Survivor.Sweep). The fleet's
// membership calls it; it returns at once.
func (g *Gateway) Sweep(server string) {
	if g.survivor != nil {
		g.survivor.Sweep(server)
	}
}

// survivorCore is what the survivor (internal/takeover) asks of the
// pipeline: a followed request's one ending, and its record's facts.
type survivorCore struct{ g *Gateway }

// background runs f counted by the drain (Wait), with the pipeline's
// lifetime.
func (g *Gateway) background(f func(ctx context.Context)) {
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		f(g.base)
	}()
}

// End ends a followed request on this server (takeover.Ending).
func (c survivorCore) End(tctx context.Context, how takeover.Ending, log *stream.Log, rec *stream.Record, logger *zap.Logger) bool {
	g := c.g
	switch how {
	case takeover.Withdrawn:
		// Only this attempt is refused, retryably: the client sends the
		// request again and it runs.
		log.Reject(errorTerminal(log.RequestID, fmt.Errorf("%w: the request's record was withdrawn before it ran", errBusy), false, "", 0),
			g.opts.Now())
		return true
	case takeover.Vanished:
		// Only this copy ends: the owner, whoever it is, charges.
		text, n := log.Text()
		log.Finish(errorTerminal(log.RequestID, context.Canceled, true, text, n), g.opts.Now())
		return true
	}
	return g.interrupt(tctx, log, rec, g.opts.Now(), logger)
}

// Facts reads what rec's facts say of its request.
func (c survivorCore) Facts(rec *stream.Record) (takeover.Facts, error) {
	fs, err := readFacts(rec)
	if err != nil {
		return takeover.Facts{}, err
	}
	f := takeover.Facts{ReceivedAt: fs.ReceivedAt}
	if fs.Quota != nil {
		f.Reservation, _ = c.g.quotas.Restore(fs.Quota) // nil when it cannot be restored
	}
	return f, nil
}

// Charged is what a record that ended done was charged.
func (c survivorCore) Charged(rec *stream.Record) (quota.Amount, bool) {
	d, _ := call.DecodeTerminal(rec.Terminal)
	if rec.State != stream.StateDone || d == nil {
		return quota.Amount{}, false
	}
	return quota.Amount{Tokens: d.Usage.Total(), Requests: 1, MicroUSD: d.CostMicroUSD}, true
}

// interrupt ends a record whose owner is gone: the terminal is
// `interrupted` with the saved text (`cancelled` when its user had
// cancelled it), charged as the input estimate plus the saved output on
// the model the record names, the rest of its reservation refunded. It
// reports whether this server won (and so ended the request).
func (g *Gateway) interrupt(tctx context.Context, log *stream.Log, rec *stream.Record, now time.Time, logger *zap.Logger) bool {
	tctx, span := g.start(tctx, "jetway.takeover", trace.WithAttributes(tracing.Server.String(rec.Server)))
	defer span.End()
	env, _ := readFacts(rec) // unreadable: logged by the survivor; ended with what is known
	env.TraceID = tracing.TraceID(span.SpanContext())
	answer := call.Assemble(rec.Chunks)
	received := env.ReceivedAt
	err := errInterrupted
	if rec.Cancelled {
		err = fmt.Errorf("%w: its owner stopped before it saw the cancel", errCancelled)
	}
	o := outcome{how: endInterrupted, err: err, text: answer.Text, chunks: len(rec.Chunks), model: env.Model,
		toolCalls: answer.ToolCalls,
		usage:     call.Usage{InputTokens: env.InputEstimate, OutputTokens: quota.EstimateOutputTokens(answer.Generated)},
		end:       now, latency: now.Sub(received).Milliseconds(), log: log, logger: logger, reserved: env.Reserved,
		ownerServer: rec.Server, facts: env}
	if env.Quota != nil {
		res, err := g.quotas.Restore(env.Quota)
		if err != nil {
			logger.Error("reservation_restore_failed", zap.Error(err))
		}
		o.reservation = res
	}
	if !g.finish(tctx, o) {
		span.SetAttributes(tracing.Outcome.String("lost_race"))
		return false
	}
	span.SetAttributes(tracing.Outcome.String(Failure(err).Code))
	logger.Warn("interrupted", zap.String("owner_server", rec.Server), zap.Int("chunks", o.chunks),
		zap.Bool("cancelled", rec.Cancelled))
	g.metrics.RequestTakenOver()
	return true
}
