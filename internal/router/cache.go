package router

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/hashicorp/golang-lru/v2/simplelru"
	"go.uber.org/zap"

	"github.com/jetway-gateway/jetway/internal/call"
	"github.com/jetway-gateway/jetway/internal/dynamotable"
)

// CachedAnswer is a complete, successful answer kept by the response cache.
type CachedAnswer struct {
	Model      string   // the configured model id that answered
	Chunks     []string // the deltas in order; their concatenation is the text
	Usage      Usage
	StopReason string
}

// cacheKeyVersion changes whenever the key's encoding does, so old entries
// are never read with a new meaning.
const cacheKeyVersion = "jetway/cache/v1"

// CacheKey is the exact-match key of a request: the hex SHA-256 of tenant,
// app, model and the call's system prompt, every message (role and content,
// or every field of every block, an attachment by its size and its bytes'
// SHA-256 (Block.Digest), in order), max_tokens and temperature (nil and a
// value differ), and, when the call has them, its tools, tool choice and
// reasoning budget (so text-only keys are what they always were). Every field is
// length-prefixed, so no two different requests share an encoding, and the
// tenant and app are part of it, so a key is never shared across tenants or
// apps. Pass the model the client asked for (the chain's first) and the
// effective max_tokens (after the app's default), so that "no max_tokens"
// and "the default max_tokens" are one key.
func CacheKey(tenant, app, model string, c Call) string {
	system, messages, maxTokens, temperature := c.System, c.Messages, c.MaxTokens, c.Temperature
	n := len(cacheKeyVersion) + len(tenant) + len(app) + len(model) + len(system) + 64
	for _, m := range messages {
		n += len(m.Role) + len(m.Content) + 2*binary.MaxVarintLen64
	}
	b := make([]byte, 0, n)
	field := func(s string) []byte {
		b = binary.AppendUvarint(b, uint64(len(s)))
		return append(b, s...)
	}
	b = field(cacheKeyVersion)
	b = field(tenant)
	b = field(app)
	b = field(model)
	b = field(system)
	b = binary.AppendUvarint(b, uint64(len(messages)))
	for _, m := range messages {
		if m.Blocks != nil {
			// No text message has this role (roles are "user" or
			// "assistant"), so no list of blocks shares a text message's
			// encoding, and text-only keys are what they always were.
			b = field(m.Role + blocksRoleSuffix)
			b = appendBlocks(b, m.Blocks)
			continue
		}
		b = field(m.Role)
		b = field(m.Content)
	}
	b = binary.AppendVarint(b, int64(maxTokens))
	if temperature == nil {
		b = append(b, 0)
	} else {
		t := *temperature
		if t == 0 {
			t = 0 // -0 and 0 are one temperature
		}
		b = append(b, 1)
		b = binary.BigEndian.AppendUint64(b, math.Float64bits(t))
	}
	if len(c.Tools) > 0 || c.ToolChoice != nil || c.ReasoningBudget > 0 {
		b = appendTools(b, c)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// blocksRoleSuffix marks a message given as blocks in a cache key.
const blocksRoleSuffix = "\x00blocks"

// appendBlocks appends every field of every block, length-prefixed; an
// attachment by its size and digest, so its bytes are hashed once (when
// validation decoded them), not copied here and hashed again.
func appendBlocks(b []byte, bs []Block) []byte {
	b = binary.AppendUvarint(b, uint64(len(bs)))
	for _, bl := range bs {
		for _, s := range [...]string{bl.Kind, bl.Text, bl.Format, bl.Name, bl.ID, string(bl.Input), bl.Status, bl.Signature} {
			b = binary.AppendUvarint(b, uint64(len(s)))
			b = append(b, s...)
		}
		b = binary.AppendUvarint(b, uint64(len(bl.Data)))
		if bl.Data != nil {
			b = append(b, bl.Digest[:]...)
		}
		b = appendBlocks(b, bl.Content)
	}
	return b
}

// appendTools appends a call's tools (every field, length-prefixed), tool
// choice and reasoning budget, after a marker no key without them has.
func appendTools(b []byte, c Call) []byte {
	b = append(b, 't')
	b = binary.AppendUvarint(b, uint64(len(c.Tools)))
	field := func(s string) {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	for _, t := range c.Tools {
		field(t.Name)
		field(t.Description)
		field(string(t.InputSchema))
	}
	if c.ToolChoice != nil {
		field(c.ToolChoice.Mode)
		field(c.ToolChoice.Name)
	} else {
		field("")
		field("")
	}
	return binary.AppendUvarint(b, uint64(c.ReasoningBudget))
}

// Defaults of the zero values of CacheOptions.
const (
	DefaultCacheMaxBytes      = 64 << 20
	DefaultCacheMaxEntries    = 100_000
	DefaultCacheDynamoTimeout = 500 * time.Millisecond
)

// Memory accounting: an entry costs its text (key, chunks, model, stop
// reason) plus these fixed amounts for the bookkeeping around it.
const (
	cacheEntryOverhead = 160 // list element, map slot, entry and answer structs
	cacheChunkOverhead = 16  // a string header per chunk
)

// CacheOptions configure a Cache. Zero values mean the documented defaults.
type CacheOptions struct {
	// MaxBytes bounds the memory tier: entries are sized by their text plus
	// a small fixed overhead, and the least recently used are evicted to
	// stay under it; default 64 MiB. An answer larger than MaxBytes is not
	// kept in memory (it may still be in DynamoDB).
	MaxBytes int64
	// MaxEntries bounds the number of memory entries, whatever their size;
	// default 100,000.
	MaxEntries int
	// Dynamo and Table name the shared tier (created by CreateCacheTable);
	// nil or "": memory only.
	Dynamo *dynamodb.Client
	Table  string
	// DynamoTimeout bounds each DynamoDB call (the SDK's retries included),
	// so a slow table costs a request at most this much; default 500ms.
	DynamoTimeout time.Duration
	// Now is the clock for expiry; default time.Now.
	Now func() time.Time
	// Observer receives every DynamoDB call (table role "cache", ops
	// get|put); nil: none.
	Observer dynamotable.Observer
	// Logger logs DynamoDB failures (which are misses, never errors); nil: none.
	Logger *zap.Logger
	// Format is the stored form of the answers the shared tier writes
	// (call.Format); it reads either. Zero: call.FormatV1, what earlier
	// releases read.
	Format call.Format
}

// Cache is the response cache: a memory LRU bounded in bytes in front of an
// optional DynamoDB table shared by every task. It is safe for concurrent use.
//
// The memory tier is hashicorp/golang-lru's simplelru (ordering and the
// entry bound) with byte accounting on top: golang-lru bounds only the
// count, and weight-bounded caches (otter) evict by frequency, not recency.
type Cache struct {
	opts  CacheOptions
	table *dynamotable.Table // nil without a shared tier

	mu    sync.Mutex
	lru   *simplelru.LRU[string, *cacheEntry]
	bytes int64

	memoryHits, dynamoHits, misses atomic.Int64
	evictions, dynamoErrors        atomic.Int64
	dynamoSkipped                  atomic.Int64
}

type cacheEntry struct {
	answer  *CachedAnswer
	expires time.Time
	size    int64
}

// CacheStats are a Cache's counters since it was made.
type CacheStats struct {
	MemoryHits   int64 // Get answered from memory
	DynamoHits   int64 // Get answered from DynamoDB (and copied to memory)
	Misses       int64 // Get found nothing fresh (including DynamoDB failures)
	Evictions    int64 // memory entries dropped to stay under MaxBytes or MaxEntries
	DynamoErrors int64 // DynamoDB calls that failed (each was a miss or a memory-only put)
	// DynamoSkipped counts answers too large for a DynamoDB item (400 KB),
	// kept in memory only.
	DynamoSkipped int64
	Bytes         int64 // memory in use, as accounted
	Entries       int   // memory entries
}

// NewCache returns a cache with options o.
func NewCache(o CacheOptions) *Cache {
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultCacheMaxBytes
	}
	if o.MaxEntries <= 0 {
		o.MaxEntries = DefaultCacheMaxEntries
	}
	if o.DynamoTimeout <= 0 {
		o.DynamoTimeout = DefaultCacheDynamoTimeout
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.Dynamo == nil || o.Table == "" {
		o.Dynamo, o.Table = nil, ""
	}
	c := &Cache{opts: o}
	if o.Dynamo != nil {
		c.table = dynamotable.NewTable(o.Dynamo, o.Table, dynamotable.TableCache, readOnlyRequestBodies)
		c.table.SetObserver(o.Observer)
	}
	// The callback runs under c.mu (every simplelru call does).
	lru, err := simplelru.NewLRU(o.MaxEntries, func(_ string, e *cacheEntry) { c.bytes -= e.size })
	if err != nil {
		panic("router: " + err.Error()) // MaxEntries is positive here
	}
	c.lru = lru
	return c
}

// Get returns the fresh answer cached under key: from memory, else from
// DynamoDB (and then keeps it in memory too). An expired entry is a miss.
// A DynamoDB failure is a miss as well (logged and counted), never an
// error. The answer is shared: the caller must not modify it.
func (c *Cache) Get(ctx context.Context, key string) (*CachedAnswer, bool) {
	now := c.opts.Now()
	if a, ok := c.getMemory(key, now); ok {
		c.memoryHits.Add(1)
		return a, true
	}
	if c.opts.Dynamo != nil {
		if a, expires, ok := c.getDynamo(ctx, key, now); ok {
			c.dynamoHits.Add(1)
			c.putMemory(key, a, expires)
			return a, true
		}
	}
	c.misses.Add(1)
	return nil, false
}

// Put caches a successful, complete answer under key for ttl, in memory and
// (when configured, and the answer fits in one item) in DynamoDB. It
// returns when both are written or the DynamoDB write failed (logged,
// counted), at most DynamoTimeout later. ttl <= 0 caches nothing. The
// answer is copied.
func (c *Cache) Put(ctx context.Context, key string, a CachedAnswer, ttl time.Duration) {
	if ttl <= 0 {
		return
	}
	a.Chunks = slices.Clone(a.Chunks)
	expires := c.opts.Now().Add(ttl)
	c.putMemory(key, &a, expires)
	if c.opts.Dynamo != nil {
		c.putDynamo(ctx, key, &a, expires)
	}
}

// Stats returns the cache's counters.
func (c *Cache) Stats() CacheStats {
	c.mu.Lock()
	bytes, entries := c.bytes, c.lru.Len()
	c.mu.Unlock()
	return CacheStats{
		MemoryHits: c.memoryHits.Load(), DynamoHits: c.dynamoHits.Load(), Misses: c.misses.Load(),
		Evictions: c.evictions.Load(), DynamoErrors: c.dynamoErrors.Load(), DynamoSkipped: c.dynamoSkipped.Load(),
		Bytes: bytes, Entries: entries,
	}
}

func (c *Cache) getMemory(key string, now time.Time) (*CachedAnswer, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.lru.Get(key)
	if !ok {
		return nil, false
	}
	if !now.Before(e.expires) {
		c.lru.Remove(key)
		return nil, false
	}
	return e.answer, true
}

func (c *Cache) putMemory(key string, a *CachedAnswer, expires time.Time) {
	size := memorySize(key, a)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lru.Remove(key) // a replaced entry gives its bytes back first
	if size > c.opts.MaxBytes {
		return
	}
	if c.lru.Add(key, &cacheEntry{answer: a, expires: expires, size: size}) {
		c.evictions.Add(1)
	}
	c.bytes += size
	for c.bytes > c.opts.MaxBytes {
		if _, _, ok := c.lru.RemoveOldest(); !ok {
			break
		}
		c.evictions.Add(1)
	}
}

// memorySize is what an entry costs the memory bound.
func memorySize(key string, a *CachedAnswer) int64 {
	n := int64(cacheEntryOverhead + len(key) + len(a.Model) + len(a.StopReason))
	for _, ch := range a.Chunks {
		n += int64(cacheChunkOverhead + len(ch))
	}
	return n
}
