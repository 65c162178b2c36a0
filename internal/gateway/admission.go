package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/jetway-gateway/jetway/internal/call"
	"github.com/jetway-gateway/jetway/internal/config"
	"github.com/jetway-gateway/jetway/internal/protocol"
	"github.com/jetway-gateway/jetway/internal/quota"
	"github.com/jetway-gateway/jetway/internal/router"
	"github.com/jetway-gateway/jetway/internal/stream"
	"github.com/jetway-gateway/jetway/internal/telemetry"
	"github.com/jetway-gateway/jetway/internal/tracing"
)

// flight is one request on this server, from admission to its one ending.
type flight struct {
	g       *Gateway
	caller  Caller
	req     Request // its content (messages, system, tools) is dropped once the model call ended
	feats   protocol.Features
	log     *stream.Log
	logger  *zap.Logger
	tctx    context.Context // carries the root span: the parent of the pipeline's spans
	root    trace.Span      // the request's span, ended by finish
	deliver trace.Span      // from accepted to the terminal in the log

	tenant      *config.Tenant
	app         *config.App
	chain       []router.Target
	maxTokens   int
	estimate    int64
	messages    []router.Message // the model call's messages, attachments decoded
	blockMode   bool             // tools or reasoning: the answer streams as blocks
	reservation *quota.Reservation
	admitted    bool                 // holds in-flight slots
	cacheKey    string               // set when the app caches this request
	cached      *router.CachedAnswer // a cache hit: no model call
	accepted    *stream.Accepted     // sent once the request landed
	landed      chan struct{}        // closed when land has decided (landErr, following)
	landErr     error                // the record could not be stored: the request is rejected
	following   bool                 // the record existed on another server: this log follows it
	ctx         context.Context      // the request's context: ends with its terminal
	cancel      context.CancelFunc   // stops the model call
	stop        func()               // the client's cancel (closes cancelled, then cancel)
	cancelled   chan struct{}        // closed by the client's cancel or a lost lease
	lostLease   atomic.Bool          // another server interrupted this request
	first       time.Time            // the first chunk
	checkpoints *checkpointer        // nil without a request store
	ended       bool                 // end ran
}

func (g *Gateway) newFlight(c Caller, req Request, log *stream.Log) *flight {
	tctx, root := g.startRequest(c, req)
	return &flight{g: g, caller: c, req: req, feats: req.Features(), log: log, tctx: tctx, root: root,
		logger: withTraceID(g.requestLogger(c, req.RequestID, zap.String("door", req.door())), root.SpanContext())}
}

func (f *flight) userKey() string    { return f.caller.Principal.Owner() }
func (f *flight) sessionKey() string { return f.userKey() + "/" + f.caller.SessionID }

// admit applies the in-flight caps, the model policy and the quota, and
// builds the accepted frame (sent by land). Any error rejects the request
// before acceptance.
func (f *flight) admit() error {
	acc, err := f.admission()
	if err != nil {
		return err
	}
	f.lookupCache()
	acc.Cached = f.cached != nil
	if f.cached != nil {
		acc.Model = f.cached.Model
	}
	f.accepted = stream.NewAccepted(acc)
	return nil
}

// admission authorizes the request (its principal was verified by the
// door), picks its models and reserves its quota, in the span
// jetway.admission.
func (f *flight) admission() (acc call.Accepted, err error) {
	g, p := f.g, f.caller.Principal
	ctx, span := f.span("jetway.admission")
	defer func() { endSpan(span, err, tracing.AuthResult.String("verified"), none) }()
	tenant, app, ok := g.cfg.App(p.Tenant, p.App)
	if !ok {
		return acc, fmt.Errorf("%w: app %s/%s is not configured", errForbidden, p.Tenant, p.App)
	}
	f.tenant, f.app = tenant, app
	if err := f.policy(); err != nil {
		return acc, err
	}
	if f.root.IsRecording() {
		f.root.SetAttributes(tracing.RequestModel.String(f.chain[0].BedrockID), tracing.Model.String(f.chain[0].ID),
			tracing.MaxTokens.Int(f.maxTokens))
	}
	if err := g.acquire(f); err != nil {
		return acc, err
	}
	f.admitted = true
	g.metrics.RequestStarted()
	f.logger.Info("admitted", zap.String("model", f.chain[0].ID))
	return f.reserve(ctx)
}

// land stores the request record while the model call (already started by
// fly) waits for its first token, then sends `accepted`: accepted still
// means the request landed (any server can resume it). Until land returns,
// fly delivers nothing. When the put fails, or finds the request owned by
// another server, land stops the local call and ends this flight before
// Submit returns: one busy rejection (nothing streamed), or this log
// follows the owner; fly then only returns.
func (f *flight) land() {
	defer close(f.landed)
	if f.g.records != nil {
		if err := f.createRecord(); err != nil || f.following {
			f.landErr = err
			f.cancel()
			f.standDown()
			return
		}
		f.checkpoints = f.startCheckpoints()
	}
	f.log.SetCancel(f.stop)
	_, f.deliver = f.span("jetway.deliver")
	f.log.Accept(f.accepted)
}

// waitLanded waits for land and reports whether this server runs the
// request (the record is stored, or there is no request store).
func (f *flight) waitLanded() bool {
	<-f.landed
	return f.landErr == nil && !f.following
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
		g.release(f)
	}
	g.metrics.RequestFollowed()
	f.root.SetAttributes(tracing.Outcome.String("follows_other_server"))
	f.root.End()
}

// reserve takes the request's worst case from every quota that applies and
// returns the accepted event that reports it.
func (f *flight) reserve(tctx context.Context) (call.Accepted, error) {
	g, p := f.g, f.caller.Principal
	f.estimate = EstimateInputTokens(&f.req.Inbound)
	amount := quota.Amount{Tokens: f.estimate + int64(f.maxTokens), Requests: 1, MicroUSD: f.maxCostMicroUSD()}
	_, span := g.start(tctx, "jetway.quota.reserve")
	ctx, cancel := context.WithTimeout(g.base, g.opts.ReserveTimeout)
	defer cancel()
	res, err := g.quotas.Reserve(ctx, f.req.RequestID, quota.LimitsFor(f.tenant, f.app, p.Subject), amount)
	outcome := tracing.QuotaOutcome.String("error")
	var exceeded *quota.ExceededError
	if errors.As(err, &exceeded) {
		g.metrics.QuotaRejected(p.Tenant, p.App, exceeded.Scope.Kind, string(exceeded.Window))
		outcome = tracing.QuotaOutcome.String("exceeded")
		span.SetAttributes(tracing.QuotaWindow.String(string(exceeded.Window)))
	}
	if err != nil {
		err = fmt.Errorf("reserve: %w", err)
		endSpan(span, err, outcome, none)
		return call.Accepted{}, err
	}
	endSpan(span, nil, tracing.QuotaOutcome.String("reserved"), tracing.QuotaLease.Bool(fromLease(res)))
	f.reservation = res
	acc := call.Accepted{RequestID: f.req.RequestID, Model: f.chain[0].ID,
		ReservedTokens: amount.Tokens}
	fields := []zap.Field{zap.Int64("estimate", amount.Tokens)}
	if w, limit, remaining := res.Tightest(); w != "" {
		acc.Quota = &call.Quota{Window: string(w), Limit: limit, Remaining: remaining}
		fields = append(fields, zap.String("window", string(w)), zap.Int64("used", limit-remaining), zap.Int64("limit", limit))
	}
	f.logger.Info("quota_reserved", fields...)
	return acc, nil
}

// lookupCache finds a cached answer for a deterministic request of an app
// that caches (temperature 0, unless the app allows any): from memory at
// once, else from DynamoDB within Options.CacheLookup.
func (f *flight) lookupCache() {
	c := f.app.Cache
	if f.g.cache == nil || c == nil {
		return
	}
	if t := f.req.Temperature; !c.Nondeterministic && (t == nil || *t != 0) || f.req.TopP != nil || len(f.req.Stop) > 0 {
		return
	}
	p := f.caller.Principal
	f.cacheKey = router.CacheKey(p.Tenant, p.App, f.chain[0].ID, f.call())
	// The model call waits for this lookup, so its DynamoDB tier gets a small
	// budget (docs/architecture.md, "The response cache").
	_, span := f.span("jetway.cache.lookup")
	ctx, cancel := context.WithTimeout(f.g.base, f.g.opts.CacheLookup)
	defer cancel()
	if a, ok := f.g.cache.Get(ctx, f.cacheKey); ok {
		f.cached = a
		f.logger.Info("cache_hit", zap.String("model", a.Model), zap.Int("chunks", len(a.Chunks)))
	}
	endSpan(span, nil, tracing.CacheHit.Bool(f.cached != nil), none)
}

// fromLease reports whether a reservation was admitted from a quota
// lease this server holds (no DynamoDB write on the request's path).
func fromLease(r *quota.Reservation) bool {
	for _, it := range r.Items() {
		if it.LeaseOwner != "" {
			return true
		}
	}
	return false
}

// createRecord stores the accepted request so any server can resume it,
// with one conditional put that returns the record already stored under
// the id. If another server stored it first, this log follows that record.
func (f *flight) createRecord() error {
	g, p := f.g, f.caller.Principal
	q, err := f.reservation.MarshalBinary()
	if err != nil {
		return fmt.Errorf("encode reservation: %w", err)
	}
	env, _ := json.Marshal(envelope{Quota: q, InputEstimate: f.estimate, Model: f.chain[0].ID, Tenant: p.Tenant,
		App: p.App, User: p.Subject, ClientID: p.ClientID, SessionID: f.caller.SessionID, ReceivedAt: f.req.ReceivedAt.UnixMilli(),
		Reserved: f.reservation.Amount().Tokens, Door: f.req.door(), Images: f.feats.Images, Documents: f.feats.Documents})
	if !g.claimLate(p.Owner(), f.req.RequestID) {
		return fmt.Errorf("%w: this request's earlier record is being withdrawn", errBusy)
	}
	now := g.opts.Now()
	_, span := f.span("jetway.record.create")
	ctx, cancel := g.storeCtx()
	existing, err := g.records.Create(ctx, stream.Record{Owner: p.Owner(), RequestID: f.req.RequestID,
		BodyHash: f.log.BodyHash, Server: g.opts.Instance, Accepted: f.accepted.Stored(),
		Reservation: env, Trace: tracing.Format(f.root.SpanContext()), Expires: now.Add(g.opts.RequestTimeout + g.opts.ResumeWindow)})
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
		if f.ownsRecord() {
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
	g.startFollowing(f.log, existing)
	return nil
}

// ownsRecord reports whether the request's record is stored, running,
// with this body, owned by this server: a put that failed to answer in
// time but landed.
func (f *flight) ownsRecord() bool {
	g := f.g
	ctx, cancel := g.storeCtx()
	defer cancel()
	rec, err := g.records.Get(ctx, f.caller.Principal.Owner(), f.req.RequestID)
	return err == nil && rec.Server == g.opts.Instance && rec.BodyHash == f.log.BodyHash && rec.State == stream.StateRunning
}

// policy picks the model chain: the client's model if the app allows it,
// else the app's default followed by its fallbacks.
func (f *flight) policy() error {
	app := f.app
	want := f.req.Model
	if want == "" {
		want = app.Models.Default
	}
	if !app.Allows(want) {
		return protocol.Errorf(errModelNotAllowed, "model %q is not allowed for app %s", protocol.Clip(want), app.ID)
	}
	ids := []string{want}
	for _, id := range app.Models.Fallbacks {
		if id != want {
			ids = append(ids, id)
		}
	}
	for _, id := range ids {
		m, ok := f.g.cfg.Model(id)
		if !ok {
			return fmt.Errorf("model %q is not configured", id)
		}
		ftt := time.Duration(m.FirstTokenTimeout)
		if ftt <= 0 {
			ftt = f.g.opts.FirstTokenTimeout
		}
		f.chain = append(f.chain, router.Target{ID: m.ID, BedrockID: m.BedrockID, FirstTokenTimeout: ftt, Cache: cacheLimits(m)})
	}
	f.maxTokens = app.MaxTokens
	if f.req.MaxTokens > 0 {
		if f.req.MaxTokens > app.MaxTokensLimit {
			return protocol.FieldErrorf(protocol.ErrInvalid, "max_tokens", " %d is over this app's limit of %d",
				f.req.MaxTokens, app.MaxTokensLimit)
		}
		f.maxTokens = f.req.MaxTokens
	}
	if err := f.checkBlocks(); err != nil {
		return err
	}
	return f.checkCachePoints()
}

// maxCostMicroUSD bounds the cost at the most expensive model of the
// chain, every input token at the dearer of the input and cache-write
// prices when the model caches prompts.
func (f *flight) maxCostMicroUSD() int64 {
	var worst int64
	for _, t := range f.chain {
		worst = max(worst, f.g.price(t.ID, protocol.Usage{InputTokens: f.estimate, OutputTokens: int64(f.maxTokens)}))
		if t.Cache != nil {
			worst = max(worst, f.g.price(t.ID, protocol.Usage{CacheWriteInputTokens: f.estimate, OutputTokens: int64(f.maxTokens)}))
		}
	}
	return worst
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

// acquire takes the in-flight slots or says which cap is full.
func (g *Gateway) acquire(f *flight) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.draining:
		return errDraining
	case g.fleet != nil && !g.fleet.Healthy():
		// Other servers may soon judge this one gone and give back what it
		// holds: admit nothing until its membership is current again.
		return fmt.Errorf("%w: this server cannot renew its fleet membership", errBusy)
	case g.bySession[f.sessionKey()] >= g.opts.MaxInflightPerSession:
		return protocol.Errorf(errRateLimited, "%d requests in flight on this session", g.opts.MaxInflightPerSession)
	case g.byUser[f.userKey()] >= g.opts.MaxInflightPerUser:
		return protocol.Errorf(errRateLimited, "%d requests in flight for this user", g.opts.MaxInflightPerUser)
	case g.opts.MaxInflightPerTenant > 0 && g.byTenant[f.caller.Principal.Tenant] >= g.opts.MaxInflightPerTenant:
		return fmt.Errorf("%w: tenant at its in-flight cap", ErrAtCapacity)
	case g.inflight >= g.opts.MaxInflight:
		return fmt.Errorf("%w: server at its in-flight cap of %d", ErrAtCapacity, g.opts.MaxInflight)
	}
	g.inflight++
	g.byTenant[f.caller.Principal.Tenant]++
	g.byUser[f.userKey()]++
	g.bySession[f.sessionKey()]++
	return nil
}

// release gives back the slots acquire took.
func (g *Gateway) release(f *flight) {
	g.metrics.RequestFinished()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.inflight--
	dec(g.byTenant, f.caller.Principal.Tenant)
	dec(g.byUser, f.userKey())
	dec(g.bySession, f.sessionKey())
}

func dec(m map[string]int, k string) {
	if m[k] <= 1 {
		delete(m, k)
		return
	}
	m[k]--
}
