package takeover

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/jetway-gateway/jetway/internal/backoff"
	"github.com/jetway-gateway/jetway/internal/stream"
	"github.com/jetway-gateway/jetway/internal/tracing"
)

// Adopt makes a local log that follows the record of owner and requestID,
// a request another server runs (or this one did before a restart): it
// replays the record and polls it until its terminal. ctx bounds the
// store read. The error wraps stream.ErrNotFound when the store has no
// such record, else the store's error.
func (s *Survivor) Adopt(ctx context.Context, owner, requestID string) (*stream.Log, error) {
	ctx, cancel := s.storeCtx(ctx)
	rec, err := s.d.Records.Get(ctx, owner, requestID)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("read the request record: %w", err)
	}
	arrived := s.o.Now()
	if f, err := s.d.Core.Facts(rec); err == nil && !f.ReceivedAt.IsZero() {
		arrived = f.ReceivedAt
	}
	log, created := s.d.Logs.Create(owner, requestID, rec.BodyHash, arrived)
	if !created {
		return log, nil // someone on this server adopted it first
	}
	s.Follow(log, rec)
	return log, nil
}

// Follow feeds log from rec and its later versions, in the background,
// until the request ends (here or on its owner).
func (s *Survivor) Follow(log *stream.Log, rec *stream.Record) {
	s.d.Logger.Info("adopted", zap.String("request_id", log.RequestID), zap.String("owner", log.Owner),
		zap.String("owner_server", rec.Server), zap.String("state", rec.State), zap.Int("seq", rec.Seq()))
	s.d.Go(func(ctx context.Context) { s.follow(ctx, log, rec) })
}

// follow copies a record into the local log until it ends; when the
// fleet knows its owner is gone it ends the record (exactly one server
// wins). An owner that is alive is followed however slow its writes are.
// ctx ends the following (the drain's deadline).
func (s *Survivor) follow(ctx context.Context, log *stream.Log, rec *stream.Record) {
	owner, id := log.Owner, log.RequestID
	// This server's part of the request joins its trace (the record's
	// traceparent): a resume, a follow or a takeover shows under the
	// request's root span, whichever server runs it.
	tctx, span := s.start(recordTrace(rec.Trace), "jetway.follow", trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(tracing.RequestID.String(id), tracing.Server.String(rec.Server)))
	defer span.End()
	logger := s.d.Logger.With(zap.String("request_id", id), zap.String("owner", owner))
	if tid := tracing.TraceID(span.SpanContext()); tid != "" {
		logger = logger.With(zap.String("trace_id", tid))
	}
	// Polls every PollInterval; after failed reads, doubling up to
	// maxPollBackoff.
	poll := backoff.Policy{Base: s.o.PollInterval, Max: maxPollBackoff, Jitter: backoff.None}
	failed := 0
	accepted := false
	facts, err := s.d.Core.Facts(rec)
	if err != nil && rec.Reservation != nil {
		logger.Error("record_envelope_unreadable", zap.Error(err))
	}
	for {
		if rec != nil {
			if copyRecord(log, rec, &accepted) {
				log.Finish(stream.DecodeTerminal(rec.Terminal), s.o.Now())
				return
			}
			if s.ownerGone(rec, facts) && s.d.Core.End(tctx, Interrupted, log, rec, logger) {
				return
			}
			failed = 0
		}
		if poll.Wait(ctx, failed+1) != nil {
			return
		}
		sctx, cancel := s.storeCtx(ctx)
		next, err := s.d.Records.Get(sctx, owner, id)
		cancel()
		switch {
		case errors.Is(err, stream.ErrNotFound) && len(log.Pieces()) == 0:
			// Withdrawn before it ran (its owner gave up on the put that
			// stored it, see the gateway's late puts), or expired.
			logger.Info("record_vanished_before_a_chunk")
			s.d.Core.End(tctx, Withdrawn, log, nil, logger)
			return
		case errors.Is(err, stream.ErrNotFound):
			logger.Warn("record_vanished")
			s.d.Core.End(tctx, Vanished, log, nil, logger)
			return
		case err != nil:
			rec, failed = nil, failed+1
			logger.Warn("record_poll_failed", zap.Error(err))
		default:
			rec = next
		}
	}
}

// ownerGone reports whether the server owning rec is gone: the only
// reason another server may end rec. A slow or failed write never is.
func (s *Survivor) ownerGone(rec *stream.Record, f Facts) bool {
	return s.d.Fleet != nil && s.d.Fleet.Gone(rec.Server, f.ReceivedAt)
}

// copyRecord brings log up to rec (accepted frame, new chunks) and reports
// whether rec has ended.
func copyRecord(log *stream.Log, rec *stream.Record, accepted *bool) bool {
	if !*accepted && rec.Accepted != nil {
		log.Accept(stream.DecodeAccepted(rec.Accepted))
		*accepted = true
	}
	have := len(log.Pieces())
	for _, c := range rec.Chunks[min(have, len(rec.Chunks)):] {
		log.Append(c)
	}
	return rec.Ended()
}

// waitEnded waits until log has its terminal frame or ctx ends.
func waitEnded(ctx context.Context, log *stream.Log) bool {
	for {
		snap := log.Read(0)
		if snap.Terminal != nil {
			return true
		}
		select {
		case <-snap.Changed:
		case <-ctx.Done():
			return false
		}
	}
}
