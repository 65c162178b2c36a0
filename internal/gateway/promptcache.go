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

// charge is what a request's usage takes from its quotas: every token
// against token limits (cached or not: a token limit bounds how much
// conversation goes through, whether or not the model cached it) and the
// real price against USD limits.
func (g *Gateway) charge(model string, u call.Usage) quota.Amount {
	return quota.Amount{Tokens: u.Total(), Requests: 1, MicroUSD: g.price(model, u)}
}

// cacheSavedMicroUSD is what the prompt cache saved on a request: its
// price with every cached input token at the input price, less its real
// price. Negative when it wrote more than it read (a write costs more
// than input on most models).
func (g *Gateway) cacheSavedMicroUSD(model string, u call.Usage) int64 {
	if u.CacheReadInputTokens == 0 && u.CacheWriteInputTokens == 0 {
		return 0
	}
	uncached := call.Usage{InputTokens: u.AllInput(), OutputTokens: u.OutputTokens}
	return g.price(model, uncached) - g.price(model, u)
}

// CostMicroUSD is what usage costs on model, in micro-USD (price): what
// the usage record's cost_usd and a door's answer metadata state.
func (g *Gateway) CostMicroUSD(model string, u call.Usage) int64 { return g.price(model, u) }

// price is the one cost function: what usage costs on model, in micro-USD
// rounded up; prompt cache reads and writes at the model's cache prices. The quota is charged exactly this and the usage record's
// cost_usd states it. After a fallback, model is the one that answered.
func (g *Gateway) price(model string, u call.Usage) int64 {
	m, ok := g.cfg.Model(model)
	if !ok {
		return 0
	}
	p := m.Price
	usd := float64(u.InputTokens)/1000*p.InputPer1K + float64(u.OutputTokens)/1000*p.OutputPer1K +
		float64(u.CacheReadInputTokens)/1000*p.CacheRead() + float64(u.CacheWriteInputTokens)/1000*p.CacheWrite()
	return int64(math.Ceil(usd*1e6 - 1e-6)) // the epsilon keeps float noise from adding a micro-dollar
}
