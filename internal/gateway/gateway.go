// Package gateway is the request pipeline, in one place: admission, policy,
// estimate, quota reservation, the routed model call, the stream log, exactly
// one terminal outcome, settlement and the usage record. It also owns the one
// table that turns domain errors into protocol errors (errors.go).
package gateway

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/jetway-gateway/jetway/internal/auth"
	"github.com/jetway-gateway/jetway/internal/config"
	"github.com/jetway-gateway/jetway/internal/protocol"
	"github.com/jetway-gateway/jetway/internal/quota"
	"github.com/jetway-gateway/jetway/internal/router"
	"github.com/jetway-gateway/jetway/internal/stream"
	"github.com/jetway-gateway/jetway/internal/telemetry"
)

// Router streams a call from the first model of the chain that answers.
type Router interface {
	Stream(ctx context.Context, chain []router.Target, c router.Call, onDelta func(string)) (router.Outcome, error)
}

// Quotas reserves before the model call and settles after the terminal frame.
type Quotas interface {
	Reserve(ctx context.Context, requestID string, limits []quota.Limit, a quota.Amount) (*quota.Reservation, error)
	Settle(ctx context.Context, r *quota.Reservation, actual quota.Amount) error
	Restore(data []byte) (*quota.Reservation, error)
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

// Options bound the pipeline. Zero values mean the documented defaults
// (docs/configuration.md).
type Options struct {
	MaxInflight           int           // model calls in flight on this server; default 2000
	MaxInflightPerTenant  int           // default 0: no cap
	MaxInflightPerUser    int           // default 8
	MaxInflightPerSession int           // default 4
	RequestTimeout        time.Duration // default 5m
	FirstTokenTimeout     time.Duration // default 30s (a model's own setting wins)
	ReserveTimeout        time.Duration // the quota reservation's budget; default 3s
	SettleTimeout         time.Duration // how long settlement keeps retrying; default: until the window ends, at most 1h
	ServerID              string
	StoreTimeout          time.Duration // one request-store call; default 2s
	PollInterval          time.Duration // following a record owned by another server; default 200ms
	CheckpointInterval    time.Duration // default 1s
	CheckpointChunks      int           // checkpoint early after this many chunks; default 64
	Lease                 time.Duration // how long an owner's record lease lasts unrenewed; default 5s
	ResumeWindow          time.Duration // finished records are kept this long; default 10m
	Now                   func() time.Time
}

func (o *Options) defaults() {
	if o.MaxInflight <= 0 {
		o.MaxInflight = 2000
	}
	if o.MaxInflightPerUser <= 0 {
		o.MaxInflightPerUser = 8
	}
	if o.MaxInflightPerSession <= 0 {
		o.MaxInflightPerSession = 4
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = 5 * time.Minute
	}
	if o.FirstTokenTimeout <= 0 {
		o.FirstTokenTimeout = 30 * time.Second
	}
	if o.ReserveTimeout <= 0 {
		o.ReserveTimeout = 3 * time.Second
	}
	if o.SettleTimeout <= 0 {
		o.SettleTimeout = time.Hour
	}
	if o.StoreTimeout <= 0 {
		o.StoreTimeout = 2 * time.Second
	}
	if o.PollInterval <= 0 {
		o.PollInterval = 200 * time.Millisecond
	}
	if o.CheckpointInterval <= 0 {
		o.CheckpointInterval = time.Second
	}
	if o.CheckpointChunks <= 0 {
		o.CheckpointChunks = 64
	}
	if o.Lease <= 0 {
		o.Lease = 5 * time.Second
	}
	if o.ResumeWindow <= 0 {
		o.ResumeWindow = stream.DefaultRetention
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// Gateway runs requests. Its zero value is not usable; see New.
type Gateway struct {
	cfg     *config.Config
	logs    *stream.Registry
	router  Router
	quotas  Quotas
	records Records // nil: requests live only in this process
	cache   Cache   // nil: no response cache
	usage   UsageRecorder
	metrics *telemetry.Metrics
	logger  *zap.Logger
	opts    Options

	base       context.Context // parent of every request's context
	stopBase   context.CancelFunc
	settleBase context.Context // parent of settlements; ends at the drain deadline
	stopSettle context.CancelFunc
	wg         sync.WaitGroup // requests running

	mu        sync.Mutex
	draining  bool
	inflight  int
	byTenant  map[string]int
	byUser    map[string]int
	bySession map[string]int
}

// Deps are the gateway's collaborators.
type Deps struct {
	Config  *config.Config
	Logs    *stream.Registry
	Router  Router
	Quotas  Quotas
	Records Records // optional: the shared request store
	Cache   Cache   // optional: the response cache
	Usage   UsageRecorder
	Metrics *telemetry.Metrics // may be nil
	Logger  *zap.Logger
}

// New returns a gateway.
func New(d Deps, o Options) *Gateway {
	o.defaults()
	base, stop := context.WithCancel(context.Background())
	settleBase, stopSettle := context.WithCancel(context.Background())
	return &Gateway{settleBase: settleBase, stopSettle: stopSettle,
		cfg: d.Config, logs: d.Logs, router: d.Router, quotas: d.Quotas, records: d.Records, cache: d.Cache, usage: d.Usage,
		metrics: d.Metrics, logger: d.Logger, opts: o, base: base, stopBase: stop,
		byTenant: map[string]int{}, byUser: map[string]int{}, bySession: map[string]int{},
	}
}

// Caller is who sent a frame: the authenticated principal on a session.
type Caller struct {
	Principal auth.Principal
	SessionID string
}

// Request is an inbound `request` frame with its arrival time.
type Request struct {
	protocol.Inbound
	ReceivedAt time.Time
	TopP       *float64 // nil: the model's default (the OpenAI door's top_p)
	Stop       []string // stop sequences (the OpenAI door's stop)
	Door       string   // DoorWS (default) or DoorOpenAI: recorded in the usage record
}

// The doors a request can come through (telemetry.UsageRecord.Door).
const (
	DoorWS     = "ws"
	DoorOpenAI = "openai"
)

// Submit handles a request frame. It returns the request's log and the seq
// to follow it from (req.AfterSeq for a request the server already knew,
// 0 for a new one): the log delivers the accepted frame,
// chunks and exactly one terminal frame (or, for a request rejected before
// acceptance, only its error frame). A request id the user already sent
// returns the existing log without calling the model or charging again;
// the same id with a different body returns an error (conflict).
func (g *Gateway) Submit(c Caller, req Request) (log *stream.Log, from int, err error) {
	hash := bodyHash(req)
	log, created := g.logs.Create(c.Principal.Subject, req.RequestID, hash)
	if !created {
		if log.BodyHash != hash {
			return nil, 0, errConflict
		}
		g.logger.Info("resent", zap.String("request_id", req.RequestID), zap.String("session_id", c.SessionID),
			zap.String("user", c.Principal.Subject), zap.Int("after_seq", req.AfterSeq))
		return log, req.AfterSeq, nil
	}
	if g.records != nil {
		ctx, cancel := g.storeCtx()
		rec, err := g.records.Get(ctx, c.Principal.Subject, req.RequestID)
		cancel()
		switch {
		case err == nil && rec.BodyHash != hash:
			g.logs.Forget(log)
			return nil, 0, errConflict
		case err == nil:
			g.startFollowing(log, rec) // known on another server: follow it, never call the model again
			return log, req.AfterSeq, nil
		case !errors.Is(err, stream.ErrNotFound):
			g.logs.Forget(log)
			return nil, 0, errors.Join(errBusy, err)
		}
	}
	r := &run{g: g, caller: c, req: req, log: log, logger: g.logger.With(
		zap.String("request_id", req.RequestID), zap.String("session_id", c.SessionID),
		zap.String("tenant", c.Principal.Tenant), zap.String("app", c.Principal.App),
		zap.String("user", c.Principal.Subject), zap.String("door", cmp.Or(req.Door, DoorWS)))}
	r.logger.Info("received")
	if err := r.admit(); err != nil {
		r.reject(err)
		return log, 0, nil
	}
	if r.following {
		return log, req.AfterSeq, nil
	}
	g.wg.Add(1)
	go r.run()
	return log, 0, nil // a new request: everything, whatever after_seq said
}

// Resume returns the user's log for requestID so the caller can replay it.
func (g *Gateway) Resume(c Caller, requestID string) (*stream.Log, error) {
	log, ok := g.logs.Get(c.Principal.Subject, requestID)
	if ok {
		return log, nil
	}
	if g.records == nil {
		return nil, errNotFound
	}
	return g.adopt(c, requestID, "", false)
}

// Cancel stops the user's request; its terminal frame is `cancelled`.
func (g *Gateway) Cancel(c Caller, requestID string) error {
	log, ok := g.logs.Get(c.Principal.Subject, requestID)
	if !ok {
		return errNotFound
	}
	log.Cancel()
	return nil
}

// Drain refuses new requests from now on (error `draining`).
func (g *Gateway) Drain() {
	g.mu.Lock()
	g.draining = true
	g.mu.Unlock()
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
		case <-time.After(g.opts.StoreTimeout + time.Second):
		}
		g.stopSettle()
		<-done
		return fmt.Errorf("wait for requests: %w", ctx.Err())
	}
}

// Inflight is the number of model calls running on this server.
func (g *Gateway) Inflight() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.inflight
}

// run is one request's journey through the pipeline.
type run struct {
	g      *Gateway
	caller Caller
	req    Request
	log    *stream.Log
	logger *zap.Logger

	tenant      *config.Tenant
	app         *config.App
	chain       []router.Target
	maxTokens   int
	estimate    int64
	reservation *quota.Reservation
	admitted    bool
	cacheKey    string               // set when the app caches this request
	cached      *router.CachedAnswer // a cache hit: no model call
	following   bool                 // the record existed on another server: this log follows it
	lostLease   atomic.Bool          // another server interrupted this request
}

func (r *run) userKey() string    { return r.caller.Principal.Tenant + "/" + r.caller.Principal.Subject }
func (r *run) sessionKey() string { return r.userKey() + "/" + r.caller.SessionID }

// admit applies the in-flight caps, the model policy and the quota, and
// sends `accepted`. Any error rejects the request before acceptance.
func (r *run) admit() error {
	g, p := r.g, r.caller.Principal
	tenant, app, ok := g.cfg.App(p.Tenant, p.App)
	if !ok {
		return fmt.Errorf("%w: app %s/%s is not configured", errForbidden, p.Tenant, p.App)
	}
	r.tenant, r.app = tenant, app
	if err := r.policy(); err != nil {
		return err
	}
	if err := g.acquire(r); err != nil {
		return err
	}
	r.admitted = true
	g.metrics.RequestStarted()
	r.logger.Info("admitted", zap.String("model", r.chain[0].ID))

	r.estimate = quota.EstimateInputTokens(r.req.System, contents(r.req.Messages))
	reserve := quota.Amount{Tokens: r.estimate + int64(r.maxTokens), Requests: 1, MicroUSD: r.maxCostMicroUSD()}
	ctx, cancel := context.WithTimeout(g.base, g.opts.ReserveTimeout)
	defer cancel()
	res, err := g.quotas.Reserve(ctx, r.req.RequestID, quota.LimitsFor(r.tenant, r.app, p.Subject), reserve)
	var exceeded *quota.ExceededError
	if errors.As(err, &exceeded) {
		g.metrics.QuotaRejected(p.Tenant, p.App, exceeded.Scope.Kind, string(exceeded.Window))
	}
	if err != nil {
		return fmt.Errorf("reserve: %w", err)
	}
	r.reservation = res
	r.lookupCache()
	acc := protocol.Accepted{Type: protocol.TypeAccepted, RequestID: r.req.RequestID, Model: r.chain[0].ID,
		ReservedTokens: reserve.Tokens, Cached: r.cached != nil}
	if r.cached != nil {
		acc.Model = r.cached.Model
	}
	fields := []zap.Field{zap.Int64("estimate", reserve.Tokens)}
	if w, limit, remaining := res.Tightest(); w != "" {
		acc.Quota = &protocol.Quota{Window: string(w), Limit: limit, Remaining: remaining}
		fields = append(fields, zap.String("window", string(w)), zap.Int64("used", limit-remaining), zap.Int64("limit", limit))
	}
	r.logger.Info("quota_reserved", fields...)
	frame := protocol.Encode(acc)
	if g.records != nil {
		if err := r.createRecord(frame, reserve.Tokens); err != nil {
			return err
		}
		if r.following {
			return nil
		}
	}
	r.log.Accept(frame)
	return nil
}

// lookupCache finds a cached answer for a deterministic request of an app
// that caches (temperature 0, unless the app allows any).
func (r *run) lookupCache() {
	c := r.app.Cache
	if r.g.cache == nil || c == nil {
		return
	}
	if t := r.req.Temperature; !c.Nondeterministic && (t == nil || *t != 0) || r.req.TopP != nil || len(r.req.Stop) > 0 {
		return
	}
	p := r.caller.Principal
	r.cacheKey = router.CacheKey(p.Tenant, p.App, r.chain[0].ID, r.req.System, routerMessages(r.req.Messages),
		r.maxTokens, r.req.Temperature)
	ctx, cancel := context.WithTimeout(r.g.base, r.g.opts.StoreTimeout)
	defer cancel()
	if a, ok := r.g.cache.Get(ctx, r.cacheKey); ok {
		r.cached = a
		r.logger.Info("cache_hit", zap.String("model", a.Model), zap.Int("chunks", len(a.Chunks)))
	}
}

// fromCache streams a cached answer through the same log and charges it by
// the app's policy: the input estimate (default) or nothing.
func (r *run) fromCache(onDelta func(string)) router.Outcome {
	for _, c := range r.cached.Chunks {
		onDelta(c)
	}
	var usage router.Usage
	if r.app.Cache.Charge != config.CacheChargeNone {
		usage.InputTokens = int(r.estimate)
	}
	return router.Outcome{Result: router.Result{Usage: usage, UsageReported: true, StopReason: r.cached.StopReason},
		Model: r.cached.Model}
}

// storeCache keeps a successful answer of the requested model for later hits.
func (r *run) storeCache(out router.Outcome, chunks []string) {
	if r.cacheKey == "" || r.cached != nil || out.FallbackFrom != "" || out.StopReason == "guardrail_intervened" {
		return
	}
	ctx, cancel := context.WithTimeout(r.g.settleBase, r.g.opts.StoreTimeout)
	defer cancel()
	r.g.cache.Put(ctx, r.cacheKey, router.CachedAnswer{Model: out.Model, Chunks: chunks, Usage: out.Usage,
		StopReason: out.StopReason}, r.app.Cache.TTL.D())
}

// createRecord stores the accepted request so any server can resume it.
// If another server stored it first, this one releases its reservation
// and follows that record instead.
func (r *run) createRecord(accepted []byte, reserved int64) error {
	g, p := r.g, r.caller.Principal
	q, err := r.reservation.MarshalBinary()
	if err != nil {
		return fmt.Errorf("encode reservation: %w", err)
	}
	env, _ := json.Marshal(envelope{Quota: q, InputEstimate: r.estimate, Model: r.chain[0].ID, Tenant: p.Tenant,
		App: p.App, ClientID: p.ClientID, SessionID: r.caller.SessionID, ReceivedAt: r.req.ReceivedAt.UnixMilli(),
		Reserved: reserved})
	now := g.opts.Now()
	ctx, cancel := g.storeCtx()
	existing, err := g.records.Create(ctx, stream.Record{Owner: p.Subject, RequestID: r.req.RequestID,
		BodyHash: r.log.BodyHash, Server: g.opts.ServerID, LeaseUntil: now.Add(g.opts.Lease), Accepted: accepted,
		Reservation: env, Expires: now.Add(g.opts.RequestTimeout + g.opts.ResumeWindow)})
	cancel()
	if err == nil {
		return nil
	}
	r.releaseReservation()
	if errors.Is(err, stream.ErrExists) && existing != nil {
		if existing.BodyHash != r.log.BodyHash {
			return errConflict
		}
		g.release(r)
		r.admitted = false
		r.following = true
		r.logger.Info("follows_other_server", zap.String("owner_server", existing.Server))
		g.startFollowing(r.log, existing)
		return nil
	}
	return errors.Join(errBusy, err)
}

// releaseReservation gives back a reservation that will not be used.
func (r *run) releaseReservation() {
	res := r.reservation
	r.reservation = nil
	if res == nil {
		return
	}
	r.g.wg.Add(1)
	go func() {
		defer r.g.wg.Done()
		ctx, cancel := context.WithTimeout(r.g.settleBase, r.g.opts.SettleTimeout)
		defer cancel()
		if err := r.g.quotas.Settle(ctx, res, quota.Amount{}); err != nil {
			r.logger.Error("quota_release_failed", zap.Error(err))
		}
	}()
}

// policy picks the model chain: the client's model if the app allows it,
// else the app's default followed by its fallbacks.
func (r *run) policy() error {
	app := r.app
	want := r.req.Model
	if want == "" {
		want = app.Models.Default
	}
	allowed := false
	for _, m := range app.Models.Allow {
		if m == want {
			allowed = true
			break
		}
	}
	if !allowed {
		return fmt.Errorf("%w: model %q is not allowed for app %s", errModelNotAllowed, protocol.Clip(want), app.ID)
	}
	ids := []string{want}
	for _, f := range app.Models.Fallbacks {
		if f != want {
			ids = append(ids, f)
		}
	}
	for _, id := range ids {
		m, ok := r.g.cfg.Model(id)
		if !ok {
			return fmt.Errorf("model %q is not configured", id)
		}
		ftt := time.Duration(m.FirstTokenTimeout)
		if ftt <= 0 {
			ftt = r.g.opts.FirstTokenTimeout
		}
		r.chain = append(r.chain, router.Target{ID: m.ID, BedrockID: m.BedrockID, FirstTokenTimeout: ftt})
	}
	r.maxTokens = app.MaxTokens
	if r.req.MaxTokens > 0 {
		if r.req.MaxTokens > app.MaxTokensLimit {
			return fmt.Errorf("%w: max_tokens %d is over this app's limit of %d", protocol.ErrInvalid, r.req.MaxTokens, app.MaxTokensLimit)
		}
		r.maxTokens = r.req.MaxTokens
	}
	return nil
}

// maxCostMicroUSD bounds the cost at the most expensive model of the chain.
func (r *run) maxCostMicroUSD() int64 {
	var worst float64
	for _, t := range r.chain {
		if c := r.g.cost(t.ID, r.estimate, int64(r.maxTokens)); c > worst {
			worst = c
		}
	}
	return int64(math.Ceil(worst * 1e6))
}

func (g *Gateway) cost(modelID string, in, out int64) float64 {
	m, ok := g.cfg.Model(modelID)
	if !ok {
		return 0
	}
	return float64(in)/1000*m.Price.InputPer1K + float64(out)/1000*m.Price.OutputPer1K
}

// acquire takes the in-flight slots or says which cap is full.
func (g *Gateway) acquire(r *run) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.draining:
		return errDraining
	case g.bySession[r.sessionKey()] >= g.opts.MaxInflightPerSession:
		return fmt.Errorf("%w: %d requests in flight on this session", errRateLimited, g.opts.MaxInflightPerSession)
	case g.byUser[r.userKey()] >= g.opts.MaxInflightPerUser:
		return fmt.Errorf("%w: %d requests in flight for this user", errRateLimited, g.opts.MaxInflightPerUser)
	case g.opts.MaxInflightPerTenant > 0 && g.byTenant[r.caller.Principal.Tenant] >= g.opts.MaxInflightPerTenant:
		return fmt.Errorf("%w: tenant at its in-flight cap", errBusy)
	case g.inflight >= g.opts.MaxInflight:
		return fmt.Errorf("%w: server at its in-flight cap of %d", errBusy, g.opts.MaxInflight)
	}
	g.inflight++
	g.byTenant[r.caller.Principal.Tenant]++
	g.byUser[r.userKey()]++
	g.bySession[r.sessionKey()]++
	return nil
}

func (g *Gateway) release(r *run) {
	g.metrics.RequestFinished()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.inflight--
	dec(g.byTenant, r.caller.Principal.Tenant)
	dec(g.byUser, r.userKey())
	dec(g.bySession, r.sessionKey())
}

func dec(m map[string]int, k string) {
	if m[k] <= 1 {
		delete(m, k)
		return
	}
	m[k]--
}

// reject ends a request that was never accepted: its only frame is the error.
func (r *run) reject(err error) {
	if r.admitted {
		r.g.release(r)
	}
	r.releaseReservation()
	pe := ProtocolError(err)
	level := r.logger.Info
	if pe.Code == protocol.CodeInternal || pe.Code == protocol.CodeBusy {
		level = r.logger.Warn
	}
	level("rejected", zap.String("code", pe.Code), zap.Int("status", pe.Status), zap.Error(err))
	pe.RequestID = r.req.RequestID
	r.log.Reject(protocol.Encode(pe), r.g.opts.Now())
	r.g.logs.Forget(r.log)
	r.record(usageOutcome{code: pe.Code, status: pe.Status}, router.Outcome{Model: r.requestedModel()})
}

// requestedModel is a configured model id, or "" or telemetry.OtherModel:
// never the client's string, which would become a label and a record value.
func (r *run) requestedModel() string {
	if len(r.chain) > 0 {
		return r.chain[0].ID
	}
	if _, ok := r.g.cfg.Model(r.req.Model); ok || r.req.Model == "" {
		return r.req.Model
	}
	return telemetry.OtherModel
}

// run calls the model, streams into the log and ends in exactly one terminal.
func (r *run) run() {
	g := r.g
	defer g.wg.Done()
	defer func() {
		// A bug must not leave an accepted request without its terminal.
		if v := recover(); v != nil {
			r.logger.Error("request_panic", zap.Any("panic", v), zap.Stack("stack"))
			text, n := r.log.Text()
			pe := ProtocolError(fmt.Errorf("panic: %v", v))
			pe.RequestID, pe.Chunks, pe.Text = r.req.RequestID, &n, &text
			r.log.Finish(protocol.Encode(pe), g.opts.Now())
		}
	}()
	ctx, cancel := context.WithTimeout(g.base, g.opts.RequestTimeout)
	cancelled := make(chan struct{})
	var cancelOnce sync.Once
	r.log.SetCancel(func() { cancelOnce.Do(func() { close(cancelled) }); cancel() })
	defer cancel()

	var cpDone chan struct{}
	var cpStored chan int
	if g.records != nil {
		cpDone, cpStored = make(chan struct{}), make(chan int, 1)
		go func() { cpStored <- r.checkpoint(cpDone) }()
	}

	start := r.req.ReceivedAt
	var first time.Time
	r.logger.Info("model_started", zap.String("model", r.chain[0].ID))
	call := router.Call{System: r.req.System, Messages: routerMessages(r.req.Messages), MaxTokens: r.maxTokens,
		Temperature: r.req.Temperature, TopP: r.req.TopP, Stop: r.req.Stop}
	if gr := r.app.Guardrail; gr != nil {
		call.Guardrail = &router.Guardrail{ID: gr.ID, Version: gr.Version, StreamMode: gr.StreamMode}
	}
	onDelta := func(text string) {
		r.log.Append(text) // before the log line: the client's first token does not wait on logging
		if first.IsZero() {
			first = g.opts.Now()
			r.logger.Info("first_token", zap.Int64("ttft_ms", first.Sub(start).Milliseconds()))
		}
	}
	var out router.Outcome
	var err error
	if r.cached != nil {
		out = r.fromCache(onDelta)
	} else {
		out, err = g.router.Stream(ctx, r.chain, call, onDelta)
	}
	end := g.opts.Now()
	text, chunks := r.log.Text()
	var ttft int64
	if !first.IsZero() {
		ttft = first.Sub(start).Milliseconds()
	}
	latency := end.Sub(start).Milliseconds()

	usage := protocol.Usage{InputTokens: int64(out.Usage.InputTokens), OutputTokens: int64(out.Usage.OutputTokens)}
	if !out.UsageReported {
		// The stream broke before Bedrock reported usage: charge the input
		// estimate plus what was actually streamed.
		usage = protocol.Usage{InputTokens: r.estimate, OutputTokens: quota.EstimateOutputTokens(text)}
	}

	var frame []byte
	var oc usageOutcome
	if err == nil {
		frame = protocol.Encode(protocol.Done{Type: protocol.TypeDone, RequestID: r.req.RequestID, Chunks: chunks,
			Text: text, Model: out.Model, Cached: r.cached != nil, Usage: usage, StopReason: out.StopReason,
			TTFTMs: ttft, LatencyMs: latency})
		oc = usageOutcome{code: "done", status: 200}
		r.logger.Info("completed", zap.String("model", out.Model), zap.String("fallback_from", out.FallbackFrom),
			zap.Int64("ttft_ms", ttft), zap.Int64("latency_ms", latency), zap.Int64("input_tokens", usage.InputTokens),
			zap.Int64("output_tokens", usage.OutputTokens), zap.Int("chunks", chunks), zap.Int("status", 200))
	} else {
		select {
		case <-cancelled:
			if r.lostLease.Load() {
				err = fmt.Errorf("%w: another server took the request over: %w", errInterrupted, err)
			} else {
				err = fmt.Errorf("%w: %w", errCancelled, err)
			}
		default:
			if ctx.Err() == context.DeadlineExceeded {
				err = fmt.Errorf("%w: request ran past %s: %w", errTimeout, g.opts.RequestTimeout, err)
			}
		}
		pe := ProtocolError(err)
		pe.RequestID = r.req.RequestID
		pe.Chunks, pe.Text = &chunks, &text
		frame = protocol.Encode(pe)
		oc = usageOutcome{code: pe.Code, status: pe.Status}
		r.logger.Warn("failed", zap.String("model", out.Model), zap.String("fallback_from", out.FallbackFrom),
			zap.String("code", pe.Code), zap.Int("status", pe.Status), zap.Int64("ttft_ms", ttft),
			zap.Int64("latency_ms", latency), zap.Int("chunks", chunks), zap.Error(err))
	}
	if err == nil {
		// Before the terminal, so a client that asks again after done gets the hit.
		r.storeCache(out, r.log.Read(0).Chunks)
	}
	g.release(r) // the slot frees with the terminal (settlement is bookkeeping), before the client can send more
	if r.lostLease.Load() {
		// The server that interrupted this request wrote its terminal,
		// usage record and settlement: deliver its terminal here too.
		ctx, cancel := g.storeCtx()
		rec, gerr := g.records.Get(ctx, r.caller.Principal.Subject, r.req.RequestID)
		cancel()
		if gerr == nil && rec.Ended() {
			frame = rec.Terminal
		}
		r.log.Finish(frame, end)
		close(cpDone)
		return
	}
	r.log.Finish(frame, end)
	if cpDone != nil {
		close(cpDone)
		r.persistTerminal(<-cpStored, frame, err == nil)
	}
	oc.usage, oc.chunks, oc.ttft, oc.latency = usage, chunks, ttft, latency
	r.record(oc, out)
	r.settle(usage)
}

// settle charges the real usage and refunds the rest, off the client's path.
func (r *run) settle(u protocol.Usage) {
	if r.reservation == nil {
		return
	}
	actual := quota.Amount{Tokens: u.InputTokens + u.OutputTokens, Requests: 1,
		MicroUSD: int64(math.Ceil(r.g.cost(r.requestedModel(), u.InputTokens, u.OutputTokens) * 1e6))}
	ctx, cancel := context.WithTimeout(r.g.settleBase, r.g.opts.SettleTimeout)
	defer cancel()
	if err := r.g.quotas.Settle(ctx, r.reservation, actual); err != nil {
		r.logger.Error("quota_settle_failed", zap.Int64("tokens", actual.Tokens), zap.Error(err))
		return
	}
	r.logger.Info("quota_settled", zap.Int64("charged", actual.Tokens),
		zap.Int64("refunded", r.reservation.Amount().Tokens-actual.Tokens))
}

type usageOutcome struct {
	code          string
	status        int
	usage         protocol.Usage
	chunks        int
	ttft, latency int64
}

// record writes the request's usage record and metrics.
func (r *run) record(oc usageOutcome, out router.Outcome) {
	g, p := r.g, r.caller.Principal
	var reserved int64
	if r.reservation != nil {
		reserved = r.reservation.Amount().Tokens
	}
	model := out.Model
	if model == "" {
		model = r.requestedModel()
	}
	rec := telemetry.UsageRecord{
		RequestID: r.req.RequestID, SessionID: r.caller.SessionID, TS: r.req.ReceivedAt,
		Tenant: p.Tenant, App: p.App, User: p.Subject, ClientID: p.ClientID, Model: model,
		FallbackFrom: out.FallbackFrom, Outcome: oc.code, Status: oc.status,
		InputTokens: oc.usage.InputTokens, OutputTokens: oc.usage.OutputTokens, ReservedTokens: reserved,
		CostUSD: g.cost(model, oc.usage.InputTokens, oc.usage.OutputTokens), TTFTMs: oc.ttft, LatencyMs: oc.latency,
		Chunks: oc.chunks, Server: g.opts.ServerID, Cached: r.cached != nil, Door: cmp.Or(r.req.Door, DoorWS),
	}
	if g.usage != nil {
		g.usage.Record(rec)
	}
	g.metrics.ObserveRequest(rec)
}

func routerMessages(ms []protocol.Message) []router.Message {
	out := make([]router.Message, len(ms))
	for i, m := range ms {
		out[i] = router.Message{Role: m.Role, Content: m.Content}
	}
	return out
}

func contents(ms []protocol.Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Content
	}
	return out
}

// bodyHash fingerprints what a request asks for (not after_seq), so a
// re-send with the same id and body is recognised and a different body is a conflict.
func bodyHash(in Request) string {
	b, _ := json.Marshal(struct {
		Messages    []protocol.Message `json:"m"`
		System      string             `json:"s"`
		Model       string             `json:"mo"`
		MaxTokens   int                `json:"mt"`
		Temperature *float64           `json:"t"`
		TopP        *float64           `json:"tp,omitempty"`
		Stop        []string           `json:"st,omitempty"`
	}{in.Messages, in.System, in.Model, in.MaxTokens, in.Temperature, in.TopP, in.Stop})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}
