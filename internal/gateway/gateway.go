// Package gateway is the request pipeline, in one place: admission, policy,
// estimate, quota reservation, the routed model call, the stream log, exactly
// one terminal outcome, settlement and the usage record. It also owns the one
// table that turns domain errors into protocol errors (errors.go).
//
// A request's life, one stage a file, in the order it runs (each stage
// hands the next what it takes):
//
//	gateway.go   Submit / Resume / Cancel / Drain / Wait: the entry points
//	admit.go     admit: in-flight caps, policy, reserve, cache lookup -> the accepted event
//	land.go      land: the record (beside the model call), then accepted; late puts withdrawn
//	stream.go    stream: the model call (or the cached answer) into the log, checkpoints -> the outcome
//	finish.go    finish(outcome): terminal, persisted, usage record, settle or release
//	survivor.go  what internal/takeover asks of the pipeline: the ending of another server's request
//	refusals.go  the per-user refusal budget; the rejected line of refusals outside a flight
//
// and what the stages share: slots.go (in-flight slots, taken at admit and
// given back at the terminal), contexts.go (the store calls' contexts),
// promptcache.go (the one price, the model's prompt cache), blocks.go,
// tracing.go, errors.go (the one error table), defaults.go.
//
// A flight is one request on this server from admit to finish; the words
// (flight, land, follow, adopt) are in docs/architecture.md, "Glossary".
package gateway

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/jetway-gateway/jetway/internal/auth"
	"github.com/jetway-gateway/jetway/internal/call"
	"github.com/jetway-gateway/jetway/internal/config"
	"github.com/jetway-gateway/jetway/internal/quota"
	"github.com/jetway-gateway/jetway/internal/router"
	"github.com/jetway-gateway/jetway/internal/stream"
	"github.com/jetway-gateway/jetway/internal/takeover"
	"github.com/jetway-gateway/jetway/internal/telemetry"
	"github.com/jetway-gateway/jetway/internal/tracing"
)

// Router streams a call from the first model of the chain that answers.
type Router interface {
	Stream(ctx context.Context, chain []router.Target, c router.Call, onDelta func(string)) (router.Outcome, error)
}

// Quotas reserves before the model call, settles after the terminal frame,
// and releases a reservation that was never used.
type Quotas interface {
	Reserve(ctx context.Context, requestID string, limits []quota.Limit, a quota.Amount) (*quota.Reservation, error)
	Settle(ctx context.Context, r *quota.Reservation, actual quota.Amount) error
	Release(ctx context.Context, r *quota.Reservation) error
	Restore(data []byte) (*quota.Reservation, error)
	// Leases take back the quota leases of a server the fleet judged
	// gone: the survivor's (see Sweep).
	takeover.Leases
}

// Cache is the response cache.
type Cache interface {
	Get(ctx context.Context, key string) (*router.CachedAnswer, bool)
	Put(ctx context.Context, key string, a router.CachedAnswer, ttl time.Duration)
}

// UsageRecorder takes one usage record per request; it never blocks.
type UsageRecorder interface {
	Record(r telemetry.UsageRecord)
}

// Records is the durable request store shared by every gateway task: what
// lets a client resume on any server, and a request whose server died end
// in exactly one terminal outcome.
type Records interface {
	Create(ctx context.Context, r stream.Record) (*stream.Record, error)
	Checkpoint(ctx context.Context, owner, requestID, server string, prevSeq int, chunks []string) error
	Finish(ctx context.Context, owner, requestID, server string, prevSeq int, chunks []string, state string, terminal []byte, expires time.Time) error
	Withdraw(ctx context.Context, owner, requestID, server, bodyHash string) error
	Interrupt(ctx context.Context, owner, requestID, server string, terminal []byte, expires time.Time) error
	Cancel(ctx context.Context, owner, requestID string) error
	takeover.Records // Get, and Owned for the survivor
}

// Fleet is what the pipeline asks of the fleet's membership
// (*fleet.Membership): whether a server that owns a record is gone, and
// whether this server is still a member in good standing.
type Fleet interface {
	takeover.Fleet // Gone, for the survivor
	// Healthy reports whether this server's own membership is current; a
	// server that cannot renew it admits nothing new.
	Healthy() bool
}

// Gateway runs requests. Its zero value is not usable; see New.
type Gateway struct {
	cfg     *config.Live
	alerts  Alerts
	logs    *stream.Registry
	router  Router
	quotas  Quotas
	records Records // nil: requests live only in this process
	cache   Cache   // nil: no response cache
	usage   UsageRecorder
	metrics *telemetry.Metrics
	tracer  trace.Tracer // used only when tracing
	tracing bool         // Deps.Tracer was set
	logger  *zap.Logger
	opts    Options

	base       context.Context // parent of every request's context
	stopBase   context.CancelFunc
	settleBase context.Context // parent of settlements; ends at the drain deadline
	stopSettle context.CancelFunc
	wg         sync.WaitGroup     // requests running
	refusals   *refusals          // per-user refusal budgets
	survivor   *takeover.Survivor // nil without Records: follows other servers' records, takes over a gone one's

	slots *slots    // in-flight slots (slots.go)
	late  *latePuts // given-up record puts being watched (land.go)
}

// Deps are the gateway's collaborators.
type Deps struct {
	Config  *config.Live
	Logs    *stream.Registry
	Router  Router
	Quotas  Quotas
	Records Records // optional: the shared request store
	Fleet   Fleet   // with Records: who is alive (nil: a fleet of one, nobody is ever gone)
	Cache   Cache   // optional: the response cache
	Usage   UsageRecorder
	Alerts  Alerts             // optional: quota threshold alerts
	Metrics *telemetry.Metrics // may be nil
	Tracer  trace.Tracer       // nil: no spans (see tracing.go)
	Logger  *zap.Logger
}

// New returns a gateway.
func New(d Deps, o Options) *Gateway {
	o.defaults()
	base, stop := context.WithCancel(context.Background())
	settleBase, stopSettle := context.WithCancel(context.Background())
	g := &Gateway{settleBase: settleBase, stopSettle: stopSettle, tracer: d.Tracer, tracing: d.Tracer != nil,
		cfg: d.Config, logs: d.Logs, router: d.Router, quotas: d.Quotas, records: d.Records, cache: d.Cache, usage: d.Usage,
		metrics: d.Metrics, logger: d.Logger, opts: o, base: base, stopBase: stop, alerts: d.Alerts,
		late:     &latePuts{watches: map[lateKey]*lateWatch{}},
		refusals: newRefusals(o.MaxRefusalsPerUser, o.Now),
	}
	g.slots = newSlots(&g.opts, d.Fleet, d.Metrics)
	if d.Records != nil {
		var fleet takeover.Fleet
		if d.Fleet != nil {
			fleet = d.Fleet
		}
		g.survivor = takeover.New(takeover.Deps{Records: d.Records, Fleet: fleet, Leases: d.Quotas, Logs: d.Logs,
			Core: survivorCore{g}, Go: g.background, Tracer: d.Tracer, Logger: d.Logger},
			takeover.Options{PollInterval: o.PollInterval, StoreTimeout: o.StoreTimeout, Now: o.Now})
	}
	return g
}

// Caller is who sent a frame: the authenticated principal on a session.
type Caller struct {
	Principal auth.Principal
	SessionID string
}

// Request is a request a door received, in the core's terms, with what
// the pipeline needs beside it. A door validates it, decoding and hashing
// its attachments (call.Attachment), before Submit; Refuse takes the part
// of one that failed.
type Request struct {
	call.Request
	RequestID string
	// AfterSeq is the seq a re-sent request's client already has.
	AfterSeq int
	// IsRequest is set for a request (not a cancel or resume that Refuse
	// is given): a refused request has a usage record.
	IsRequest  bool
	ReceivedAt time.Time
	Door       string // DoorWS (default), DoorAISDK, DoorOpenAI, DoorAnthropic or DoorResponses: recorded in the usage record
	// Trace is the client's trace context, from the door's W3C
	// traceparent (tracing.Parse; invalid values are the zero value): the
	// request's root span is its child. Zero: a new trace.
	Trace trace.SpanContext
	// Release, when set, is called once when the request's content is
	// used no more: its model call ended, or it never started (refused,
	// re-sent, following another server). The session gives the
	// attachments' share of its budget back there.
	Release func()
}

// The doors a request can come through (telemetry.UsageRecord.Door).
const (
	DoorWS        = "ws"
	DoorAISDK     = "ai-sdk"
	DoorOpenAI    = "openai"
	DoorAnthropic = "anthropic"
	DoorResponses = "responses"
)

// door is the request's door, DoorWS when unset.
func (r Request) door() string { return cmp.Or(r.Door, DoorWS) }

// Submit handles a request frame. It returns the request's log and the seq
// to follow it from (req.AfterSeq for a request the server already knew,
// 0 for a new one): the log delivers the accepted frame,
// chunks and exactly one terminal frame (or, for a request rejected before
// acceptance, only its error frame). A request id the user already sent
// to this server returns the existing log without calling the model or
// charging again; one another server holds is found by the record's put,
// which stops the model call started beside it and follows that server's
// record. The same id with a different body is a conflict.
//
// ctx is the caller's (a connection's or an HTTP request's). A request
// outlives it: once sent, it runs to its one terminal and the client may
// resume it anywhere, so admission's store calls keep ctx's values but not
// its end (they end with their own bounds and the server's drain).
func (g *Gateway) Submit(ctx context.Context, c Caller, req Request) (log *stream.Log, from int, err error) {
	started := false // then the flight (run) releases the request
	defer func() {
		if !started && req.Release != nil {
			req.Release()
		}
	}()
	if err := g.refusalGate(c, req.RequestID); err != nil {
		return nil, 0, err
	}
	hash := bodyHash(req)
	log, created := g.logs.Create(c.Principal.Owner(), req.RequestID, hash, req.ReceivedAt)
	if !created {
		if log.BodyHash != hash {
			return nil, 0, g.refused(c, req.RequestID, errConflict)
		}
		g.logger.Info("resent", zap.String("request_id", req.RequestID), zap.String("session_id", c.SessionID),
			zap.String("user", c.Principal.Subject), zap.Int("after_seq", req.AfterSeq))
		return log, req.AfterSeq, nil
	}
	f := g.newFlight(ctx, c, req, log)
	f.logger.Debug("received")
	ctx = context.WithoutCancel(ctx)
	accepted, err := f.admit(ctx)
	if err != nil {
		f.reject(err)
		return log, 0, nil
	}
	// The model call starts now; the record is stored beside it (land), and
	// no chunk reaches the client before it is.
	base := g.base
	if g.tracing {
		base = trace.ContextWithSpan(base, f.root) // the router's model calls are its children
	}
	rctx, cancel := context.WithTimeout(base, g.opts.RequestTimeout) // the request's: ends with its terminal
	f.cancel = cancel
	f.cancelled = make(chan struct{})
	f.stop = stopper(f.cancelled, f.cancel)
	f.landed = make(chan struct{})
	g.wg.Add(1)
	started = true
	go f.run(rctx)
	f.land(ctx, accepted)
	if f.following {
		return log, req.AfterSeq, nil // known on another server: follow it, never charge again
	}
	return log, 0, nil // a new request: everything, whatever after_seq said
}

// stopper is a request's cancel hook (the client's cancel): it closes
// cancelled, once, then stops the model call. It holds these two and not
// the flight: the log keeps the hook, and a log may outlive its request's
// model call by the resume window, which must not keep the request's
// messages and attachments.
func stopper(cancelled chan struct{}, cancel context.CancelFunc) func() {
	var once sync.Once
	return func() { once.Do(func() { close(cancelled) }); cancel() }
}

// Resume returns the user's log for requestID so the caller can replay it.
// Request ids belong to the principal's tenant, app and user
// (auth.Principal.Owner): another's id, even the same sub's in another
// tenant or app, is errNotFound. Its store read ends with ctx, the
// caller's: a resume whose caller is gone has nobody to answer.
func (g *Gateway) Resume(ctx context.Context, c Caller, requestID string) (*stream.Log, error) {
	if err := g.refusalGate(c, requestID); err != nil {
		return nil, err
	}
	log, err := g.Rejoin(ctx, c, requestID)
	if err != nil {
		return nil, g.refused(c, requestID, err)
	}
	return log, nil
}

// Rejoin is Resume without the refusal budget and its log line: for a
// re-sent request on a draining session, whose answer when the id is
// unknown is `draining`, not a refusal.
func (g *Gateway) Rejoin(ctx context.Context, c Caller, requestID string) (*stream.Log, error) {
	log, ok := g.logs.Get(c.Principal.Owner(), requestID)
	if ok {
		return log, nil
	}
	if g.records == nil {
		return nil, errNotFound
	}
	return g.adopt(ctx, c, requestID)
}

// Cancel stops the user's request; its terminal frame is `cancelled`. A
// request this server does not run (the client reconnected here from its
// owner) is cancelled through its record: the owner sees the flag at its
// next checkpoint, stops its model call and ends the request, and whoever
// follows the record here delivers that one terminal. Cancelling a request
// that already ended changes nothing.
//
// ctx is the caller's. A cancel sent is carried out even if its sender's
// connection ends meanwhile (the model must stop whoever reads the
// answer), so its store calls keep ctx's values but not its end.
func (g *Gateway) Cancel(ctx context.Context, c Caller, requestID string) error {
	owner := c.Principal.Owner()
	log, ok := g.logs.Get(owner, requestID)
	if ok && (log.Cancel() || !log.Ended().IsZero()) {
		return nil // stopped here, or already over
	}
	// Not running here: the cancel costs a store call and may be a
	// refusal, so a user whose refusal budget is spent is refused at once
	// (as a resume of an unknown id is).
	if err := g.refusalGate(c, requestID); err != nil {
		return err
	}
	if g.records == nil {
		if !ok {
			return g.refused(c, requestID, errNotFound)
		}
		return nil
	}
	ctx = context.WithoutCancel(ctx)
	_, span := g.start(g.cancelTrace(ctx, owner, requestID), "jetway.cancel",
		trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(tracing.RequestID.String(requestID)))
	sctx, cancel := g.callCtx(ctx)
	err := g.records.Cancel(sctx, owner, requestID)
	cancel()
	endSpan(span, err, none, none)
	switch {
	case err == nil:
		g.logger.Info("cancel_sent_to_owner", zap.String("request_id", requestID), zap.String("owner", owner),
			zap.String("session_id", c.SessionID))
		return nil
	case errors.Is(err, stream.ErrConflict):
		return nil // it ended meanwhile: nothing to stop
	case errors.Is(err, stream.ErrNotFound) && ok:
		return nil // still being admitted here, before its record: too early to stop (as on one server)
	case errors.Is(err, stream.ErrNotFound):
		return g.refused(c, requestID, errNotFound)
	default:
		return g.refused(c, requestID, errors.Join(errBusy, fmt.Errorf("cancel through the request record: %w", err)))
	}
}

// cancelTrace is the parent of a cancel sent through the record: the
// request's root span. Only with tracing on, it costs a read of the
// record (a cancel on a server that does not own the request is rare).
func (g *Gateway) cancelTrace(ctx context.Context, owner, requestID string) context.Context {
	if !g.tracing {
		return context.Background()
	}
	ctx, cancel := g.callCtx(ctx)
	defer cancel()
	rec, err := g.records.Get(ctx, owner, requestID)
	if err != nil {
		return context.Background()
	}
	return recordTrace(rec.Trace)
}

// Drain refuses new requests from now on (error `draining`).
func (g *Gateway) Drain() {
	g.slots.drain()
}

// Wait blocks until every running request has ended or ctx ends; then it
// stops whatever still runs and waits for those terminals.
func (g *Gateway) Wait(ctx context.Context) error {
	done := make(chan struct{})
	go func() { g.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		// Stop what still runs: each ends with `interrupted` and its saved
		// text, and gets a moment to persist that terminal for resumes elsewhere.
		g.stopBase()
		select {
		case <-done:
		case <-time.After(g.opts.StoreTimeout + drainPersistMargin):
		}
		g.stopSettle()
		<-done
		return fmt.Errorf("wait for requests: %w", ctx.Err())
	}
}

// Inflight is the number of model calls running on this server.
func (g *Gateway) Inflight() int {
	return g.slots.count()
}
