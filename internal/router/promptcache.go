package router

import "slices"

// CacheLimits is how a model caches prompts (the tenants file's
// models[].prompt_cache).
type CacheLimits struct {
	// MinTokens is the smallest prefix a cache point caches: the model
	// ignores a point after fewer input tokens.
	MinTokens int
	// MaxPoints is the most cache points one call may carry; the model
	// refuses more.
	MaxPoints int
}

// estimateTokens is the default Options.EstimateTokens: one token per
// started four bytes.
func estimateTokens(text string) int64 { return (int64(len(text)) + 3) / 4 }

// placeCachePoints returns the call as the model of target t receives it:
//
//   - a model without prompt caching (limits nil) gets no cache point: the
//     client's own are dropped (they are hints; the answer is the same);
//   - the client's own points are kept, the first limits.MaxPoints of them
//     (prefix point first, then in message order; the gateway refuses a
//     request with more than its first model allows, so only a fallback
//     with a smaller limit drops any);
//   - with c.AutoCache, points are added, while the model allows more, at
//     the end of the previous turn (the assistant message before the last
//     one) and after the system prompt and tools, each only where the
//     prefix up to it is at least limits.MinTokens by est (the gateway's
//     estimate; attachments are not counted, so a point is never placed
//     early, at worst left out). The previous turn's point comes first
//     when only one fits: the model finds the longest cached prefix
//     behind a point, so it reads the system prompt through it too.
//
// c's messages and blocks are never changed: a changed message is a copy.
// Automatically placed points are added here, per call, so the request's
// fingerprint and response cache key never see them.
func placeCachePoints(c Call, limits *CacheLimits, est func(string) int64) Call {
	if limits == nil {
		c.PrefixCachePoint = false
		c.Messages = dropCachePoints(c.Messages, 0)
		return c
	}
	points := 0
	if c.PrefixCachePoint {
		points++
	}
	if points > limits.MaxPoints {
		c.PrefixCachePoint, points = false, 0
	}
	c.Messages = dropCachePoints(c.Messages, limits.MaxPoints-points)
	for _, m := range c.Messages {
		points += countCachePoints(m.Blocks)
	}
	if !c.AutoCache || points >= limits.MaxPoints {
		return c
	}
	prefix := int64(0)
	if c.System != "" {
		prefix += est(c.System)
	}
	for _, t := range c.Tools {
		prefix += est(t.Name + t.Description + string(t.InputSchema))
	}
	minTokens := int64(limits.MinTokens)
	if k := len(c.Messages) - 2; k >= 0 && c.Messages[k].Role == "assistant" && !endsWithCachePoint(c.Messages[k]) {
		upTo := prefix
		for _, m := range c.Messages[:k+1] {
			upTo += est(messageText(m))
		}
		if upTo >= minTokens {
			c.Messages = slices.Clone(c.Messages)
			c.Messages[k] = withCachePoint(c.Messages[k])
			points++
		}
	}
	if points < limits.MaxPoints && !c.PrefixCachePoint && (c.System != "" || len(c.Tools) > 0) && prefix >= minTokens {
		c.PrefixCachePoint = true
	}
	return c
}

// countCachePoints counts the cache_point blocks of a message.
func countCachePoints(bs []Block) int {
	n := 0
	for _, b := range bs {
		if b.Kind == BlockCachePoint {
			n++
		}
	}
	return n
}

// dropCachePoints returns ms keeping only the first keep cache_point
// blocks (ms itself when nothing is dropped).
func dropCachePoints(ms []Message, keep int) []Message {
	var out []Message
	for i, m := range ms {
		n := countCachePoints(m.Blocks)
		if n <= keep {
			keep -= n
			continue
		}
		if out == nil {
			out = slices.Clone(ms)
		}
		bs := make([]Block, 0, len(m.Blocks))
		for _, b := range m.Blocks {
			if b.Kind == BlockCachePoint {
				if keep == 0 {
					continue
				}
				keep--
			}
			bs = append(bs, b)
		}
		out[i].Blocks = bs
	}
	if out == nil {
		return ms
	}
	return out
}

func endsWithCachePoint(m Message) bool {
	return len(m.Blocks) > 0 && m.Blocks[len(m.Blocks)-1].Kind == BlockCachePoint
}

// withCachePoint is a copy of m with a cache point after its content.
func withCachePoint(m Message) Message {
	if m.Blocks == nil {
		m.Blocks = []Block{{Kind: BlockText, Text: m.Content}}
		m.Content = ""
	} else {
		m.Blocks = slices.Clip(m.Blocks)
	}
	m.Blocks = append(m.Blocks, Block{Kind: BlockCachePoint})
	return m
}

// messageText is what the estimate counts of a message: its text, tool
// inputs, reasoning and the text of tool results.
func messageText(m Message) string {
	if m.Blocks == nil {
		return m.Content
	}
	var b []byte
	var walk func([]Block)
	walk = func(bs []Block) {
		for _, bl := range bs {
			b = append(b, bl.Text...)
			b = append(b, bl.Input...)
			walk(bl.Content)
		}
	}
	walk(m.Blocks)
	return string(b)
}
