package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/jetway-gateway/jetway/internal/backoff"
	"github.com/jetway-gateway/jetway/internal/call"
	"github.com/jetway-gateway/jetway/internal/protocol"
	"github.com/jetway-gateway/jetway/internal/quota"
	"github.com/jetway-gateway/jetway/internal/stream"
	"github.com/jetway-gateway/jetway/internal/tracing"
)

// Records is the durable request store shared by every gateway task: what
// lets a client resume on any server, and a request whose server died end
// in exactly one terminal outcome.
type Records interface {
	Create(ctx context.Context, r stream.Record) (*stream.Record, error)
	Checkpoint(ctx context.Context, owner, requestID, server string, prevSeq int, chunks []string) error
	Finish(ctx context.Context, owner, requestID, server string, prevSeq int, chunks []string, state string, terminal []byte, expires time.Time) error
	Get(ctx context.Context, owner, requestID string) (*stream.Record, error)
	Withdraw(ctx context.Context, owner, requestID, server, bodyHash string) error
	Interrupt(ctx context.Context, owner, requestID, server string, terminal []byte, expires time.Time) error
	Cancel(ctx context.Context, owner, requestID string) error
	Owned(ctx context.Context, server string, since time.Time) ([]stream.RecordKey, error)
}

// Fleet is what the pipeline asks of the fleet's membership
// (*fleet.Membership): whether a server that owns a record is gone, and
// whether this server is still a member in good standing.
type Fleet interface {
	// Gone reports whether server is known to be gone, for a record it
	// created at since (by its clock).
	Gone(server string, since time.Time) bool
	// Healthy reports whether this server's own membership is current; a
	// server that cannot renew it admits nothing new.
	Healthy() bool
}

// ownerGone reports whether the server owning rec is gone: the only
// reason another server may end rec. A slow or failed write never is.
func (g *Gateway) ownerGone(rec *stream.Record, env envelope) bool {
	return g.fleet != nil && g.fleet.Gone(rec.Server, time.UnixMilli(env.ReceivedAt))
}

// envelope is what a record carries so that any server can settle the
// request and write its usage record.
type envelope struct {
	Quota         []byte `json:"quota"`
	InputEstimate int64  `json:"input_estimate"`
	Model         string `json:"model"`
	Tenant        string `json:"tenant"`
	App           string `json:"app"`
	User          string `json:"user"` // the sub (the record's owner key is tenant/app/sub)
	ClientID      string `json:"client_id"`
	SessionID     string `json:"session_id"`
	ReceivedAt    int64  `json:"received_at_ms"`
	Reserved      int64  `json:"reserved_tokens"`
	Door          string `json:"door,omitempty"` // the door it came through ("" in records from before it was kept)
	Images        int    `json:"images,omitempty"`
	Documents     int    `json:"documents,omitempty"`
}

// storeCtx bounds one store call.
func (g *Gateway) storeCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(g.settleBase, g.opts.StoreTimeout)
}

// adopt makes a local log that follows a request owned by another server
// (or by this one before a restart): it replays the record and polls it
// until its terminal frame. Returns errNotFound if the store has no record.
func (g *Gateway) adopt(c Caller, requestID string) (*stream.Log, error) {
	return g.adoptKey(c.Principal.Owner(), requestID)
}

// adoptKey is adopt for the record of owner and requestID.
func (g *Gateway) adoptKey(owner, requestID string) (*stream.Log, error) {
	ctx, cancel := g.storeCtx()
	rec, err := g.records.Get(ctx, owner, requestID)
	cancel()
	switch {
	case errors.Is(err, stream.ErrNotFound):
		return nil, errNotFound
	case err != nil:
		return nil, errors.Join(errBusy, fmt.Errorf("read the request record: %w", err))
	}
	arrived := g.opts.Now()
	var env envelope
	if json.Unmarshal(rec.Reservation, &env) == nil && env.ReceivedAt > 0 {
		arrived = time.UnixMilli(env.ReceivedAt)
	}
	log, created := g.logs.Create(owner, requestID, rec.BodyHash, arrived)
	if !created {
		return log, nil // someone on this server adopted it first
	}
	g.startFollowing(log, rec)
	return log, nil
}

// startFollowing feeds log from rec and its later versions.
func (g *Gateway) startFollowing(log *stream.Log, rec *stream.Record) {
	g.logger.Info("adopted", zap.String("request_id", log.RequestID), zap.String("owner", log.Owner),
		zap.String("owner_server", rec.Server), zap.String("state", rec.State), zap.Int("seq", rec.Seq()))
	g.wg.Add(1)
	go g.followRecord(log, rec)
}

// followRecord copies a record into the local log until it ends; when the
// fleet knows its owner is gone it interrupts the record (exactly one
// server wins). An owner that is alive is followed however slow its
// writes are.
func (g *Gateway) followRecord(log *stream.Log, rec *stream.Record) {
	defer g.wg.Done()
	owner, id := log.Owner, log.RequestID
	// This server's part of the request joins its trace (the record's
	// traceparent): a resume, a follow or a takeover shows under the
	// request's root span, whichever server runs it.
	tctx, span := g.start(recordTrace(rec.Trace), "jetway.follow", trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(tracing.RequestID.String(id), tracing.Server.String(rec.Server)))
	defer span.End()
	logger := withTraceID(g.logger.With(zap.String("request_id", id), zap.String("owner", owner)), span.SpanContext())
	// Polls every PollInterval; after failed reads, doubling up to
	// maxStoreBackoff.
	poll := backoff.Policy{Base: g.opts.PollInterval, Max: maxStoreBackoff, Jitter: backoff.None}
	failed := 0
	accepted := false
	var env envelope
	if err := json.Unmarshal(rec.Reservation, &env); err != nil && rec.Reservation != nil {
		logger.Error("record_envelope_unreadable", zap.Error(err))
	}
	for {
		if rec != nil {
			if copyRecord(log, rec, &accepted) {
				log.Finish(stream.DecodeTerminal(rec.Terminal), g.opts.Now())
				return
			}
			if g.ownerGone(rec, env) && g.interrupt(tctx, log, rec, env, g.opts.Now(), logger) {
				return
			}
			failed = 0
		}
		if poll.Wait(g.base, failed+1) != nil {
			return
		}
		ctx, cancel := g.storeCtx()
		next, err := g.records.Get(ctx, owner, id)
		cancel()
		switch {
		case errors.Is(err, stream.ErrNotFound) && len(log.Pieces()) == 0:
			// Withdrawn before it ran (its owner gave up on the put that
			// stored it, see withdraw.go), or expired: nothing ran that
			// this copy knows of. Only this attempt is refused, retryably:
			// the client sends the request again and it runs.
			logger.Info("record_vanished_before_a_chunk")
			log.Reject(errorTerminal(id, fmt.Errorf("%w: the request's record was withdrawn before it ran", errBusy), false, "", 0),
				g.opts.Now())
			return
		case errors.Is(err, stream.ErrNotFound):
			// Only this copy ends: the owner, whoever it is, charges.
			logger.Warn("record_vanished")
			text, n := log.Text()
			log.Finish(errorTerminal(id, context.Canceled, true, text, n), g.opts.Now())
			return
		case err != nil:
			rec, failed = nil, failed+1
			logger.Warn("record_poll_failed", zap.Error(err))
		default:
			rec = next
		}
	}
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

// interrupt ends a record whose owner is gone: the terminal is
// `interrupted` with the saved text (`cancelled` when its user had
// cancelled it), charged as the input estimate plus the saved output on
// the model the record names, the rest of its reservation refunded. It
// reports whether this server won (and so ended the request).
func (g *Gateway) interrupt(tctx context.Context, log *stream.Log, rec *stream.Record, env envelope, now time.Time, logger *zap.Logger) bool {
	tctx, span := g.start(tctx, "jetway.takeover", trace.WithAttributes(tracing.Server.String(rec.Server)))
	defer span.End()
	answer := call.Assemble(rec.Chunks)
	received := time.UnixMilli(env.ReceivedAt).UTC()
	err := errInterrupted
	if rec.Cancelled {
		err = fmt.Errorf("%w: its owner stopped before it saw the cancel", errCancelled)
	}
	o := outcome{how: endInterrupted, err: err, text: answer.Text, chunks: len(rec.Chunks), model: env.Model,
		toolCalls: answer.ToolCalls,
		usage:     protocol.Usage{InputTokens: env.InputEstimate, OutputTokens: quota.EstimateOutputTokens(answer.Generated)},
		end:       now, latency: now.Sub(received).Milliseconds(), log: log, logger: logger, reserved: env.Reserved,
		ownerServer: rec.Server, tctx: tctx,
		who: who{owner: rec.Owner, user: env.User, requestID: rec.RequestID, tenant: env.Tenant, app: env.App,
			clientID: env.ClientID, sessionID: env.SessionID, receivedAt: received, door: env.Door,
			images: env.Images, documents: env.Documents, traceID: tracing.TraceID(span.SpanContext())}}
	if env.Quota != nil {
		res, err := g.quotas.Restore(env.Quota)
		if err != nil {
			logger.Error("reservation_restore_failed", zap.Error(err))
		}
		o.reservation = res
	}
	if !g.finish(o) {
		span.SetAttributes(tracing.Outcome.String("lost_race"))
		return false
	}
	span.SetAttributes(tracing.Outcome.String(ProtocolError(err).Code))
	logger.Warn("interrupted", zap.String("owner_server", rec.Server), zap.Int("chunks", o.chunks),
		zap.Bool("cancelled", rec.Cancelled))
	g.metrics.RequestTakenOver()
	return true
}

// Sweep ends what a server the fleet judged gone left behind, so that its
// requests end and its quota comes back whether or not a client returns:
// each running record is followed here and the follower interrupts it
// (settled at what it generated, the rest of its reservation refunded);
// then its quota leases are reclaimed at what its requests used. Safe to
// call on every server for the same member: every record ends once and
// every lease is reclaimed once. The fleet's membership calls it.
func (g *Gateway) Sweep(server string) {
	if g.records == nil {
		return
	}
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		// Many servers can be judged gone at once (a table of leftovers):
		// at most sweepConcurrency sweeps load the store at a time.
		select {
		case g.sweeps <- struct{}{}:
			defer func() { <-g.sweeps }()
		case <-g.base.Done():
			return
		}
		ctx, cancel := context.WithTimeout(g.base, sweepTimeout)
		defer cancel()
		keys, err := g.records.Owned(ctx, server, stream.Running)
		if err != nil {
			g.logger.Warn("sweep_failed", zap.String("member", server), zap.Error(err))
			return
		}
		items := map[string]quota.Item{}
		for _, k := range keys {
			g.leaseItems(k, server, items)
			log, err := g.adoptKey(k.Owner, k.RequestID)
			if err != nil {
				if !errors.Is(err, errNotFound) {
					g.logger.Warn("sweep_record_failed", zap.String("member", server), zap.String("request_id", k.RequestID), zap.Error(err))
				}
				continue
			}
			if !waitEnded(ctx, log) {
				g.logger.Warn("sweep_unfinished", zap.String("member", server), zap.String("request_id", k.RequestID))
				return // its lease is reclaimed when it expires
			}
		}
		g.logger.Info("swept", zap.String("member", server), zap.Int("running", len(keys)))
		g.reclaimLeases(ctx, server, items)
	}()
}

// leaseItems adds to items the quota items the record k reserved from
// server's leases.
func (g *Gateway) leaseItems(k stream.RecordKey, server string, items map[string]quota.Item) {
	ctx, cancel := g.storeCtx()
	rec, err := g.records.Get(ctx, k.Owner, k.RequestID)
	cancel()
	var env envelope
	if err != nil || json.Unmarshal(rec.Reservation, &env) != nil || env.Quota == nil {
		return
	}
	res, err := g.quotas.Restore(env.Quota)
	if err != nil {
		return
	}
	for _, it := range res.Items() {
		if it.LeaseOwner == server {
			items[it.Item.Key()] = it.Item
		}
	}
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

// settleLag bounds how long after its record's end stamp (taken as the
// terminal's write is sent) a request's settlement may come: the write's
// own timeout, plus a margin.
func (g *Gateway) settleLag() time.Duration { return g.opts.StoreTimeout + time.Second }

// reclaimLeases takes back the quota leases of server, gone, keeping what
// its requests used. A lease's Spent counts every request admitted before
// its last write, at its settled usage if it was settled before the write
// was planned (At), else at its reservation. So the survivor adds, for
// every record of server admitted from the lease since (an epoch not
// below the lease's), what it was charged if it ended done (settled on
// the lease alone) or else its reservation (an interrupted one's own
// settlement refunds the rest); and for one admitted before that ended
// done after At, its usage less its reservation (settled after the plan,
// so counted at its reservation), or, when its end is too close to At to
// tell, only the usage past its reservation. Every record must have
// ended: otherwise nothing is reclaimed here and the leases expire as
// usual.
func (g *Gateway) reclaimLeases(ctx context.Context, server string, items map[string]quota.Item) {
	known := make([]quota.Item, 0, len(items))
	for _, it := range items {
		known = append(known, it)
	}
	held := g.quotas.GoneLeases(ctx, server, known)
	if len(held) == 0 {
		return
	}
	since := held[0].Lease.At
	keep := map[string]quota.Amount{}
	byItem := map[string]quota.HeldLease{}
	for _, h := range held {
		if h.Lease.At.Before(since) {
			since = h.Lease.At
		}
		keep[h.Item.Key()] = h.Lease.Spent
		byItem[h.Item.Key()] = h
	}
	keys, err := g.records.Owned(ctx, server, since.Add(-g.settleLag()))
	if err != nil {
		g.logger.Warn("quota_reclaim_skipped", zap.String("member", server), zap.Error(err))
		return
	}
	for _, k := range keys {
		sctx, cancel := g.storeCtx()
		rec, err := g.records.Get(sctx, k.Owner, k.RequestID)
		cancel()
		switch {
		case errors.Is(err, stream.ErrNotFound):
			continue
		case err != nil:
			g.logger.Warn("quota_reclaim_skipped", zap.String("member", server), zap.Error(err))
			return
		case !rec.Ended():
			// Missed by the first listing (the index lags): end it first.
			log, err := g.adoptKey(k.Owner, k.RequestID)
			if err == nil && waitEnded(ctx, log) {
				rctx, cancel := g.storeCtx()
				rec, err = g.records.Get(rctx, k.Owner, k.RequestID)
				cancel()
			}
			if err != nil || !rec.Ended() {
				g.logger.Warn("quota_reclaim_skipped", zap.String("member", server), zap.String("request_id", k.RequestID),
					zap.String("why", "a record still runs"), zap.Error(err))
				return
			}
		}
		g.countUse(rec, server, byItem, keep)
	}
	for _, h := range held {
		if err := g.quotas.ReclaimGone(ctx, h, keep[h.Item.Key()]); err != nil {
			g.logger.Warn("quota_reclaim_failed", zap.String("member", server), zap.Error(err))
		}
	}
}

// countUse adds to keep what rec, a record of the gone server, used on
// the leases in byItem its reservation was admitted from, beyond what the
// lease's Spent already counts (see reclaimLeases).
func (g *Gateway) countUse(rec *stream.Record, server string, byItem map[string]quota.HeldLease, keep map[string]quota.Amount) {
	var env envelope
	if json.Unmarshal(rec.Reservation, &env) != nil || env.Quota == nil {
		return
	}
	res, err := g.quotas.Restore(env.Quota)
	if err != nil {
		return
	}
	reserved := res.Amount()
	used, done := g.doneUsage(rec)
	for _, it := range res.Items() {
		h, ok := byItem[it.Item.Key()]
		if !ok || it.LeaseOwner != server {
			continue
		}
		k := it.Item.Key()
		after := it.LeaseEpoch >= h.Lease.Epoch
		switch {
		case after && done:
			// Settled by its server at what it used, on its lease alone.
			keep[k] = keep[k].Add(used)
		case after:
			// Interrupted (its own settlement refunds the rest of its
			// reservation), or ended otherwise: at most its reservation.
			keep[k] = keep[k].Add(reserved)
		case !done:
		case !rec.EndedAt.Before(h.Lease.At):
			// Settled after the plan: Spent counts its reservation.
			keep[k] = keep[k].Add(used.Sub(reserved))
		case rec.EndedAt.After(h.Lease.At.Add(-g.settleLag())):
			keep[k] = keep[k].Add(quota.MaxAmount(used.Sub(reserved), quota.Amount{}))
		}
	}
}

// doneUsage is what a record that ended done was charged.
func (g *Gateway) doneUsage(rec *stream.Record) (quota.Amount, bool) {
	d, _ := call.DecodeTerminal(rec.Terminal)
	if rec.State != stream.StateDone || d == nil {
		return quota.Amount{}, false
	}
	return g.charge(d.Model, d.Usage), true
}
