package mockmodel

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"sync"
	"time"
)

// CacheRule is how a mock model caches prompts, as Bedrock's models do.
type CacheRule struct {
	// MinTokens is the smallest prefix a cache point caches; a point after
	// fewer input tokens is ignored (no read, no write), as on Bedrock.
	MinTokens int
	// MaxPoints is the most cache points a request may carry; more is a
	// ValidationException.
	MaxPoints int
}

// DefaultCaching is Options.Caching when nil: the models of the built-in
// tenants file that cache prompts (all but mock-cheap), with Claude's rule
// on Bedrock (1,024 tokens, 4 points).
func DefaultCaching() map[string]CacheRule {
	rule := CacheRule{MinTokens: 1024, MaxPoints: 4}
	return map[string]CacheRule{"mock-a": rule, "mock-b": rule, modelTools: rule, modelReasoning: rule, modelMarkdown: rule}
}

// Bounds of the prompt cache.
const (
	// CacheTTL is how long a cached prefix lives after it was last written
	// or read (Bedrock's default cache).
	CacheTTL = 5 * time.Minute
	// MaxCacheEntries bounds the prefixes remembered (a SHA-256 and a time
	// each); at the bound the oldest written goes first.
	MaxCacheEntries = 100_000
	// cacheLookback is how many block boundaries before a cache point are
	// checked for a cached prefix (Bedrock's simplified cache management
	// looks back about 20 content blocks), so a conversation whose point
	// moved to the end of the newest turn still reads the previous one.
	cacheLookback = 20
)

// cacheUsage is how a request used the prompt cache.
type cacheUsage struct {
	points       bool // the request carried cache points (usage reports the cache fields)
	read, write  int  // tokens read from / written to the cache
	cachedPrefix int  // input tokens covered by cache points (read + write)
}

// promptCache remembers prefixes by model id and the SHA-256 of the exact
// prefix bytes, for CacheTTL, at most MaxCacheEntries of them.
type promptCache struct {
	mu      sync.Mutex
	entries map[[sha256.Size]byte]time.Time // key -> expiry
	order   [][sha256.Size]byte             // keys in the order first written
	head    int
}

func newPromptCache() *promptCache {
	return &promptCache{entries: make(map[[sha256.Size]byte]time.Time)}
}

// boundary is the end of one block of the request's prefix.
type boundary struct {
	key    [sha256.Size]byte // chained hash of the model and every prefix block up to here
	tokens int               // input tokens up to here (the mock's token rule)
}

// rawRequest is the request's prefix blocks as bytes, in Bedrock's order:
// tools, system, messages.
type rawRequest struct {
	System     []json.RawMessage `json:"system"`
	ToolConfig *struct {
		Tools []json.RawMessage `json:"tools"`
	} `json:"toolConfig"`
	Messages []struct {
		Role    string            `json:"role"`
		Content []json.RawMessage `json:"content"`
	} `json:"messages"`
}

var cachePointKey = []byte(`"cachePoint"`)

// isCachePoint reports whether a raw block is a cache point (a union with
// only the cachePoint member).
func isCachePoint(raw json.RawMessage) bool {
	var probe map[string]json.RawMessage
	if !bytes.Contains(raw, cachePointKey) || json.Unmarshal(raw, &probe) != nil {
		return false
	}
	_, ok := probe["cachePoint"]
	return ok && len(probe) == 1
}

// use finds the request's cache points, checks them against the model's
// rule, and reads and writes the cache: every point at or above
// MinTokens writes its prefix; the longest cached prefix found at or up
// to cacheLookback boundaries before any such point is read. body is the
// request, already validated.
//
// Each region caches on its own, as Bedrock's do: a call moved to another
// region reads nothing its first region wrote.
func (c *promptCache) use(region, modelID string, rule CacheRule, caches bool, body []byte, now time.Time) (cacheUsage, error) {
	var raw rawRequest
	if err := json.Unmarshal(body, &raw); err != nil {
		return cacheUsage{}, fmt.Errorf("malformed request body: %v", err)
	}
	h := sha256.Sum256([]byte(region + "\x00" + modelID))
	var bounds []boundary
	var points []int // indexes into bounds: the prefix each point marks
	sysText, msgTokens, attachBytes := 0, 0, 0
	tokens := func(msgText int) int {
		return (sysText+3)/4 + msgTokens + (msgText+3)/4 + (attachBytes+attachmentBytesPerToken-1)/attachmentBytesPerToken
	}
	add := func(block json.RawMessage, t int) {
		buf := make([]byte, 0, len(h)+len(block))
		buf = append(append(buf, h[:]...), block...)
		h = sha256.Sum256(buf)
		bounds = append(bounds, boundary{key: h, tokens: t})
	}
	point := func() { points = append(points, len(bounds)-1) }
	var tools []json.RawMessage
	if raw.ToolConfig != nil {
		tools = raw.ToolConfig.Tools
	}
	for _, t := range tools {
		if isCachePoint(t) {
			point()
			continue
		}
		add(t, 0) // the mock counts no tokens for tools
	}
	joined := 0
	for _, b := range raw.System {
		if isCachePoint(b) {
			point()
			continue
		}
		var tb textBlock
		_ = json.Unmarshal(b, &tb)
		if tb.Text != nil {
			if joined > 0 {
				sysText++ // the "\n" joining system texts
			}
			sysText += len(*tb.Text)
			joined++
		}
		add(b, tokens(0))
	}
	for _, m := range raw.Messages {
		text, n := 0, 0
		add(json.RawMessage(`{"role":"`+m.Role+`"}`), tokens(0))
		for _, b := range m.Content {
			if isCachePoint(b) {
				point()
				continue
			}
			var cb contentBlock
			_ = json.Unmarshal(b, &cb)
			switch {
			case cb.Text != nil:
				if n > 0 {
					text++
				}
				text += len(*cb.Text)
				n++
			case cb.Image != nil:
				attachBytes += len(cb.Image.Source.Bytes)
			case cb.Document != nil:
				attachBytes += len(cb.Document.Source.Bytes)
			}
			add(b, tokens(text))
		}
		msgTokens += (text + 3) / 4
	}
	u := cacheUsage{points: len(points) > 0}
	if !u.points {
		return u, nil
	}
	switch {
	case !caches:
		return u, fmt.Errorf("cachePoint: model %s does not support prompt caching", modelID)
	case len(points) > rule.MaxPoints:
		return u, fmt.Errorf("cachePoint: %d cache points, model %s allows at most %d", len(points), modelID, rule.MaxPoints)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	// Every point reads what earlier requests cached, then writes its
	// prefix: a request never reads what it writes itself.
	var writes []int
	for _, p := range points {
		if p < 0 || bounds[p].tokens < rule.MinTokens {
			continue // below the minimum: ignored
		}
		for q := p; q >= 0 && q >= p-cacheLookback; q-- {
			if exp, ok := c.entries[bounds[q].key]; ok && now.Before(exp) {
				c.entries[bounds[q].key] = now.Add(CacheTTL)
				u.read = max(u.read, bounds[q].tokens)
				break
			}
		}
		u.cachedPrefix = max(u.cachedPrefix, bounds[p].tokens)
		writes = append(writes, p)
	}
	for _, p := range writes {
		c.put(bounds[p].key, now.Add(CacheTTL))
	}
	u.write = u.cachedPrefix - u.read
	return u, nil
}

// put remembers key until expiry, dropping the oldest written key when full.
func (c *promptCache) put(key [sha256.Size]byte, expiry time.Time) {
	if _, ok := c.entries[key]; ok {
		c.entries[key] = expiry
		return
	}
	for len(c.entries) >= MaxCacheEntries && c.head < len(c.order) {
		delete(c.entries, c.order[c.head])
		c.head++
	}
	if c.head > len(c.order)/2 {
		c.order = append(c.order[:0], c.order[c.head:]...)
		c.head = 0
	}
	c.entries[key] = expiry
	c.order = append(c.order, key)
}
