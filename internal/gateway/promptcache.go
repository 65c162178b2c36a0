package gateway

import (
	"fmt"
	"math"

	"github.com/jetway-gateway/jetway/internal/call"
	"github.com/jetway-gateway/jetway/internal/config"
	"github.com/jetway-gateway/jetway/internal/quota"
	"github.com/jetway-gateway/jetway/internal/router"
)

// cacheLimits is a model's prompt caching for the router; nil when the
// model does not cache prompts.
func cacheLimits(m *config.Model) *router.CacheLimits {
	if m.PromptCache == nil {
		return nil
	}
	return &router.CacheLimits{MinTokens: m.PromptCache.MinTokens, MaxPoints: m.PromptCache.MaxPoints}
}

// checkCachePoints refuses, before any reservation or model call, a
// request with more cache points (cache_point blocks and the prefix
// point) than its model allows, naming the first one too many (the prefix
// point comes first). A model without prompt caching takes any number:
// the router drops them for it (docs/protocol.md, "Prompt caching").
func (f *flight) checkCachePoints() error {
	n := f.feats.CachePoints
	if f.req.PrefixCachePoint {
		n++
	}
	if n == 0 {
		return nil
	}
	m, _ := f.g.cfg.Model(f.chain[0].ID) // policy checked that every model of the chain is configured
	if m.PromptCache == nil || n <= m.PromptCache.MaxPoints {
		return nil
	}
	seen := 0
	if f.req.PrefixCachePoint {
		seen = 1
	}
	for i, msg := range f.req.Messages {
		for j, b := range msg.Blocks {
			if b.Type != call.BlockCachePoint {
				continue
			}
			if seen++; seen > m.PromptCache.MaxPoints {
				return call.FieldErrorf(call.ErrInvalid, fmt.Sprintf("messages[%d].content[%d]", i, j), ": %d cache_point blocks, model %s allows at most %d",
					n, m.ID, m.PromptCache.MaxPoints)
			}
		}
	}
	return call.FieldErrorf(call.ErrInvalid, "messages", ": %d cache_point blocks, model %s allows at most %d", n, m.ID, m.PromptCache.MaxPoints)
}

// priced is what a call's price depends on: the model that answered,
// the placement whose price applies ("": the model's own; an application
// inference profile is priced as its base model) and the service tier.
type priced struct{ model, place, tier string }

// priceAt is the placement whose price a call served at p pays.
func priceAt(p router.Place) string {
	if p.Profile != "" {
		return ""
	}
	return p.Name
}

// charge is what a request's usage takes from its quotas: every token
// against token limits (cached or not: a token limit bounds how much
// conversation goes through, whether or not the model cached it) and the
// real price against USD limits.
func (g *Gateway) charge(at priced, u call.Usage) quota.Amount {
	return quota.Amount{Tokens: u.Total(), Requests: 1, MicroUSD: g.price(at, u)}
}

// cacheSavedMicroUSD is what the prompt cache saved on a request: its
// price with every cached input token at the input price, less its real
// price. Negative when it wrote more than it read (a write costs more
// than input on most models).
func (g *Gateway) cacheSavedMicroUSD(at priced, u call.Usage) int64 {
	if u.CacheReadInputTokens == 0 && u.CacheWriteInputTokens == 0 {
		return 0
	}
	uncached := call.Usage{InputTokens: u.AllInput(), OutputTokens: u.OutputTokens}
	return g.price(at, uncached) - g.price(at, u)
}

// price is the one cost function: what usage costs on a model at a
// placement in a tier (config.Model.PriceFor), in micro-USD rounded up;
// prompt cache reads and writes at the cache prices. The quota is
// charged exactly this and the usage record's cost_usd and the terminal
// (call.Done.CostMicroUSD) state it. After a fallback, the model is the
// one that answered.
func (g *Gateway) price(at priced, u call.Usage) int64 {
	m, ok := g.cfg.Model(at.model)
	if !ok {
		return 0
	}
	p := m.PriceFor(at.place, at.tier)
	usd := float64(u.InputTokens)/1000*p.InputPer1K + float64(u.OutputTokens)/1000*p.OutputPer1K +
		float64(u.CacheReadInputTokens)/1000*p.CacheRead() + float64(u.CacheWriteInputTokens)/1000*p.CacheWrite()
	return int64(math.Ceil(usd*1e6 - 1e-6)) // the epsilon keeps float noise from adding a micro-dollar
}
