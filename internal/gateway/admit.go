package gateway

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/jetway-gateway/jetway/internal/call"
	"github.com/jetway-gateway/jetway/internal/config"
	"github.com/jetway-gateway/jetway/internal/quota"
	"github.com/jetway-gateway/jetway/internal/router"
	"github.com/jetway-gateway/jetway/internal/stream"
	"github.com/jetway-gateway/jetway/internal/tracing"
)

// flight is one request on this server, from admission to its one ending.
type flight struct {
	g       *Gateway
	caller  Caller
	req     Request // its content (messages, system, tools) is dropped once the model call ended
	feats   call.Features
	log     *stream.Log
	logger  *zap.Logger
	tctx    context.Context // carries the root span: the parent of the pipeline's spans
	root    trace.Span      // the request's span, ended by finish
	deliver trace.Span      // from accepted to the terminal in the log

	tenant      *config.Tenant
	app         *config.App
	user        *config.UserOverride // the caller's override in the app, if any
	chain       []router.Target
	maxTokens   int
	estimate    int64
	messages    []router.Message // the model call's messages, attachments decoded
	blockMode   bool             // tools or reasoning: the answer streams as blocks
	reservation *quota.Reservation
	admitted    bool                 // holds in-flight slots
	cacheKey    string               // set when the app caches this request
	cached      *router.CachedAnswer // a cache hit: no model call
	landed      chan struct{}        // closed when land has decided (landErr, following)
	landErr     error                // the record could not be stored: the request is rejected
	following   bool                 // the record existed on another server: this log follows it
	cancel      context.CancelFunc   // ends the request's context (stream's): stops the model call
	stop        func()               // the client's cancel (closes cancelled, then cancel)
	cancelled   chan struct{}        // closed by the client's cancel or a lost lease
	lostLease   atomic.Bool          // another server interrupted this request
	first       time.Time            // the first chunk
	checkpoints *checkpointer        // nil without a request store
	ended       bool                 // end ran
}

func (g *Gateway) newFlight(ctx context.Context, c Caller, req Request, log *stream.Log) *flight {
	tctx, root := g.startRequest(ctx, c, req)
	return &flight{g: g, caller: c, req: req, feats: req.Features(), log: log, tctx: tctx, root: root,
		logger: withTraceID(g.requestLogger(c, req.RequestID, zap.String("door", req.door())), root.SpanContext())}
}

// admit applies the in-flight caps, the model policy and the quota, and
// returns the accepted event, which land stores and sends. Any error
// rejects the request before acceptance. ctx bounds its store calls (with
// their own bounds).
func (f *flight) admit(ctx context.Context) (*stream.Accepted, error) {
	acc, err := f.admission(ctx)
	if err != nil {
		return nil, err
	}
	f.lookupCache(ctx)
	acc.Cached = f.cached != nil
	if f.cached != nil {
		acc.Model = f.cached.Model
	}
	return stream.NewAccepted(acc), nil
}

// admission authorizes the request (its principal was verified by the
// door), picks its models and reserves its quota, in the span
// jetway.admission.
func (f *flight) admission(ctx context.Context) (acc call.Accepted, err error) {
	g, p := f.g, f.caller.Principal
	tctx, span := f.span("jetway.admission")
	defer func() { endSpan(span, err, tracing.AuthResult.String("verified"), none) }()
	cfg := g.cfg.Load() // one snapshot for the whole admission
	tenant, app, ok := cfg.App(p.Tenant, p.App)
	if !ok {
		return acc, fmt.Errorf("%w: app %s/%s is not configured", errForbidden, p.Tenant, p.App)
	}
	f.user, _ = cfg.User(p.Tenant, p.App, p.Subject)
	if f.user != nil && f.user.Disabled {
		return acc, fmt.Errorf("%w: user %s of app %s/%s is disabled", errForbidden, p.Subject, p.Tenant, p.App)
	}
	f.tenant, f.app = tenant, app
	if err := f.policy(); err != nil {
		return acc, err
	}
	if f.root.IsRecording() {
		f.root.SetAttributes(tracing.RequestModel.String(f.chain[0].BedrockID), tracing.Model.String(f.chain[0].ID),
			tracing.MaxTokens.Int(f.maxTokens))
	}
	if err := g.slots.acquire(f.slotKey()); err != nil {
		return acc, err
	}
	f.admitted = true
	g.metrics.RequestStarted()
	f.logger.Debug("admitted", zap.String("model", f.chain[0].ID))
	return f.reserve(ctx, tctx)
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
		return call.Errorf(errModelNotAllowed, "model %q is not allowed for app %s", call.Clip(want), app.ID)
	}
	ids := []string{want}
	for _, id := range app.Models.Fallbacks {
		if id != want {
			ids = append(ids, id)
		}
	}
	tier, err := f.tier()
	if err != nil {
		return err
	}
	for i, id := range ids {
		m, ok := f.g.cfg.Model(id)
		if !ok {
			return fmt.Errorf("model %q is not configured", id)
		}
		if !m.Takes(tier) {
			if i == 0 {
				return call.FieldErrorf(call.ErrInvalid, "service_tier", " %q is not a tier model %s takes (%s)",
					tier, m.ID, tiersOf(m))
			}
			continue // a fallback without the tier: a request never changes tier
		}
		f.chain = append(f.chain, f.target(m, tier))
	}
	f.maxTokens = app.MaxTokens
	if f.req.MaxTokens > 0 {
		if f.req.MaxTokens > app.MaxTokensLimit {
			return call.FieldErrorf(call.ErrInvalid, "max_tokens", " %d is over this app's limit of %d",
				f.req.MaxTokens, app.MaxTokensLimit)
		}
		f.maxTokens = f.req.MaxTokens
	}
	if err := f.checkBlocks(); err != nil {
		return err
	}
	return f.checkCachePoints()
}

// tier is the service tier the request runs in: the one it asks for,
// if its app allows it, else the app's.
func (f *flight) tier() (string, error) {
	app, tier := f.app, f.req.ServiceTier
	switch {
	case tier == "" || tier == app.ServiceTier:
		return app.ServiceTier, nil
	case !slices.Contains(config.ServiceTiers, tier):
		return "", call.FieldErrorf(call.ErrInvalid, "service_tier", " %q is not a service tier (%s)", call.Clip(tier),
			strings.Join(config.ServiceTiers, ", "))
	case !slices.Contains(app.ServiceTiers, tier):
		return "", call.FieldErrorf(call.ErrInvalid, "service_tier", " %q is not allowed for app %s (its tier is %s)",
			tier, app.ID, app.ServiceTier)
	}
	return tier, nil
}

func tiersOf(m *config.Model) string {
	if len(m.ServiceTiers) == 0 {
		return "it takes only the default"
	}
	return "it takes " + strings.Join(m.ServiceTiers, ", ")
}

// target is model m as the router calls it for this request: its
// placements, or the tenant's or app's application inference profile for
// it, and the tier it is called in (named only to a model that lists tiers).
func (f *flight) target(m *config.Model, tier string) router.Target {
	ftt := time.Duration(m.FirstTokenTimeout)
	if ftt <= 0 {
		ftt = f.g.opts.FirstTokenTimeout
	}
	t := router.Target{ID: m.ID, BedrockID: m.BedrockID, FirstTokenTimeout: ftt, Cache: cacheLimits(m)}
	if len(m.ServiceTiers) > 0 {
		t.Tier = tier
	}
	if arn := config.ProfileFor(f.tenant, f.app, m.ID); arn != "" {
		prof, _ := config.ParseProfile(arn) // validated with the configuration
		p := router.Place{Name: prof.Region, Region: prof.Region, BedrockID: arn, Profile: arn}
		for _, pl := range m.Placements {
			if pl.RoleARN != "" && pl.Account() == prof.Account {
				// The profile lives in that placement's account: reach it the same way.
				p.Name, p.RoleARN = prof.Region+"/"+prof.Account, pl.RoleARN
				break
			}
		}
		t.Places = []router.Place{p}
		return t
	}
	for _, pl := range m.Placements {
		id := pl.BedrockID
		if id == "" {
			id = m.BedrockID
		}
		p := router.Place{Name: pl.Name(), Region: pl.Region, RoleARN: pl.RoleARN, BedrockID: id}
		if _, ok := config.ParseProfile(id); ok {
			p.Profile = id
		}
		t.Places = append(t.Places, p)
	}
	return t
}

// reserve takes the request's worst case from every quota that applies and
// returns the accepted frame that reports it; tctx carries the span of
// admission.
func (f *flight) reserve(ctx, tctx context.Context) (call.Accepted, error) {
	g, p := f.g, f.caller.Principal
	f.estimate = EstimateInputTokens(&f.req.Request)
	amount := quota.Amount{Tokens: f.estimate + int64(f.maxTokens), Requests: 1, MicroUSD: f.maxCostMicroUSD()}
	_, span := g.start(tctx, "jetway.quota.reserve")
	ctx, cancel := within(ctx, g.base, g.opts.ReserveTimeout)
	defer cancel()
	res, err := g.quotas.Reserve(ctx, f.req.RequestID, quota.LimitsFor(f.tenant, f.app, p.Subject, f.user), amount)
	f.observeLimits(res, amount, err)
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
	f.logger.Debug("quota_reserved", fields...)
	return acc, nil
}

// EstimateInputTokens is the input-token bound admission reserves for a
// validated request (ValidateRequest decoded its attachments): its system
// prompt, messages and tool definitions (name, description and schema,
// which the model reads as input too) by quota.EstimateInputTokens, plus
// its images and documents (quota.EstimateAttachmentTokens). Doors that
// count tokens for their clients report this number, so a count and a
// reservation agree.
func EstimateInputTokens(in *call.Request) int64 {
	f := in.Features()
	texts := contents(in.Messages)
	for _, t := range in.Tools {
		texts = append(texts, t.Name+"\n"+t.Description+"\n"+string(t.InputSchema))
	}
	return quota.EstimateInputTokens(in.System, texts) +
		quota.EstimateAttachmentTokens(f.Images, f.Documents, f.DocumentBytes)
}

func contents(ms []call.Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Text()
	}
	return out
}

// maxCostMicroUSD bounds the cost at the most expensive model and
// placement of the chain, in the request's tier, every input token at
// the dearer of the input and cache-write prices when the model caches
// prompts.
func (f *flight) maxCostMicroUSD() int64 {
	var worst int64
	for i := range f.chain {
		t := &f.chain[i]
		for _, p := range t.Placements() {
			at := priced{model: t.ID, place: priceAt(p), tier: t.Tier}
			worst = max(worst, f.g.price(at, call.Usage{InputTokens: f.estimate, OutputTokens: int64(f.maxTokens)}))
			if t.Cache != nil {
				worst = max(worst, f.g.price(at, call.Usage{CacheWriteInputTokens: f.estimate, OutputTokens: int64(f.maxTokens)}))
			}
		}
	}
	return worst
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

// lookupCache finds a cached answer for a deterministic request of an app
// that caches (temperature 0, unless the app allows any): from memory at
// once, else from DynamoDB within Options.CacheLookup.
func (f *flight) lookupCache(ctx context.Context) {
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
	ctx, cancel := within(ctx, f.g.base, f.g.opts.CacheLookup)
	defer cancel()
	if a, ok := f.g.cache.Get(ctx, f.cacheKey); ok {
		f.cached = a
		f.logger.Debug("cache_hit", zap.String("model", a.Model), zap.Int("chunks", len(a.Chunks)))
	}
	endSpan(span, nil, tracing.CacheHit.Bool(f.cached != nil), none)
}
