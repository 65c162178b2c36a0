package router_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"go.uber.org/zap/zaptest"

	core "github.com/jetway-gateway/jetway/internal/call"
	"github.com/jetway-gateway/jetway/internal/dynalitetest"
	"github.com/jetway-gateway/jetway/internal/router"
)

// clock is an injectable Now.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Date(2026, 1, 5, 7, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func msgs(turns ...string) []router.Message {
	return call("", "", turns...).Messages
}

func answer(model string, chunks ...string) router.CachedAnswer {
	return router.CachedAnswer{Model: model, Chunks: chunks, Usage: router.Usage{InputTokens: 12, OutputTokens: len(chunks)},
		StopReason: "end_turn"}
}

func sameAnswer(t *testing.T, got *router.CachedAnswer, want router.CachedAnswer) {
	t.Helper()
	if got == nil {
		t.Fatal("no answer")
	}
	if got.Model != want.Model || !slices.Equal(got.Chunks, want.Chunks) || got.Usage != want.Usage || got.StopReason != want.StopReason {
		t.Fatalf("answer %+v, want %+v", *got, want)
	}
}

// withBlocks is msgs("hi", "hello") and a last user message of blocks.
func withBlocks(bs ...router.Block) []router.Message {
	return append(msgs("hi", "hello"), router.Message{Role: "user", Blocks: bs})
}

func TestCacheKey(t *testing.T) {
	temp := func(v float64) *float64 { return &v }
	base := func() (string, string, string, router.Call) {
		return "contoso", "support", "claude", router.Call{System: "be terse", Messages: msgs("hi", "hello", "why?"), MaxTokens: 1024, Temperature: temp(0)}
	}
	key := router.CacheKey(base())
	clock := router.Tool{Name: "clock", InputSchema: json.RawMessage(`{"type":"object"}`)}
	withCall := func(change func(*router.Call)) string {
		tenant, app, model, c := base()
		change(&c)
		return router.CacheKey(tenant, app, model, c)
	}
	if len(key) != 64 || strings.Trim(key, "0123456789abcdef") != "" {
		t.Fatalf("key %q is not hex SHA-256", key)
	}
	if again := router.CacheKey(base()); again != key {
		t.Fatal("the key is not deterministic")
	}
	if negZero := router.CacheKey("contoso", "support", "claude", router.Call{System: "be terse", Messages: msgs("hi", "hello", "why?"), MaxTokens: 1024, Temperature: temp(-1 * 0.0)}); negZero != key {
		t.Error("-0 and 0 give different keys")
	}
	variants := map[string]string{
		"tenant":          router.CacheKey("fabrikam", "support", "claude", router.Call{System: "be terse", Messages: msgs("hi", "hello", "why?"), MaxTokens: 1024, Temperature: temp(0)}),
		"app":             router.CacheKey("contoso", "knowledge", "claude", router.Call{System: "be terse", Messages: msgs("hi", "hello", "why?"), MaxTokens: 1024, Temperature: temp(0)}),
		"model":           router.CacheKey("contoso", "support", "llama", router.Call{System: "be terse", Messages: msgs("hi", "hello", "why?"), MaxTokens: 1024, Temperature: temp(0)}),
		"system":          router.CacheKey("contoso", "support", "claude", router.Call{System: "be verbose", Messages: msgs("hi", "hello", "why?"), MaxTokens: 1024, Temperature: temp(0)}),
		"no system":       router.CacheKey("contoso", "support", "claude", router.Call{System: "", Messages: msgs("hi", "hello", "why?"), MaxTokens: 1024, Temperature: temp(0)}),
		"history":         router.CacheKey("contoso", "support", "claude", router.Call{System: "be terse", Messages: msgs("hi", "hey", "why?"), MaxTokens: 1024, Temperature: temp(0)}),
		"shorter history": router.CacheKey("contoso", "support", "claude", router.Call{System: "be terse", Messages: msgs("why?"), MaxTokens: 1024, Temperature: temp(0)}),
		"role":            router.CacheKey("contoso", "support", "claude", router.Call{System: "be terse", Messages: []router.Message{{Role: "user", Content: "hi"}, {Role: "user", Content: "hello"}, {Role: "user", Content: "why?"}}, MaxTokens: 1024, Temperature: temp(0)}),
		"max_tokens":      router.CacheKey("contoso", "support", "claude", router.Call{System: "be terse", Messages: msgs("hi", "hello", "why?"), MaxTokens: 512, Temperature: temp(0)}),
		"temperature":     router.CacheKey("contoso", "support", "claude", router.Call{System: "be terse", Messages: msgs("hi", "hello", "why?"), MaxTokens: 1024, Temperature: temp(0.5)}),
		"no temperature":  router.CacheKey("contoso", "support", "claude", router.Call{System: "be terse", Messages: msgs("hi", "hello", "why?"), MaxTokens: 1024, Temperature: nil}),
		// Field boundaries are encoded: moving text between fields changes the key.
		"tenant/app boundary": router.CacheKey("contosos", "upport", "claude", router.Call{System: "be terse", Messages: msgs("hi", "hello", "why?"), MaxTokens: 1024, Temperature: temp(0)}),
		"message boundary":    router.CacheKey("contoso", "support", "claude", router.Call{System: "be terse", Messages: msgs("hih", "ello", "why?"), MaxTokens: 1024, Temperature: temp(0)}),
		// Blocks: a text block is not the text message, and every field counts.
		"text block":   router.CacheKey("contoso", "support", "claude", router.Call{System: "be terse", Messages: withBlocks(router.Block{Kind: router.BlockText, Text: "why?"}), MaxTokens: 1024, Temperature: temp(0)}),
		"image":        router.CacheKey("contoso", "support", "claude", router.Call{System: "be terse", Messages: withBlocks(router.Block{Kind: router.BlockImage, Format: "png", Data: []byte{1, 2}, Digest: sha256.Sum256([]byte{1, 2})}), MaxTokens: 1024, Temperature: temp(0)}),
		"image bytes":  router.CacheKey("contoso", "support", "claude", router.Call{System: "be terse", Messages: withBlocks(router.Block{Kind: router.BlockImage, Format: "png", Data: []byte{1, 3}, Digest: sha256.Sum256([]byte{1, 3})}), MaxTokens: 1024, Temperature: temp(0)}),
		"image format": router.CacheKey("contoso", "support", "claude", router.Call{System: "be terse", Messages: withBlocks(router.Block{Kind: router.BlockImage, Format: "gif", Data: []byte{1, 2}, Digest: sha256.Sum256([]byte{1, 2})}), MaxTokens: 1024, Temperature: temp(0)}),
		"tool result": router.CacheKey("contoso", "support", "claude", router.Call{System: "be terse", Messages: withBlocks(router.Block{Kind: router.BlockToolResult, ID: "t1",
			Content: []router.Block{{Kind: router.BlockText, Text: "why?"}}}), MaxTokens: 1024, Temperature: temp(0)}),
		"tools": withCall(func(c *router.Call) { c.Tools = []router.Tool{clock} }),
		"tool schema": withCall(func(c *router.Call) {
			c.Tools = []router.Tool{{Name: "clock", InputSchema: json.RawMessage(`{"type":"object","properties":{}}`)}}
		}),
		"tool choice any": withCall(func(c *router.Call) {
			c.Tools, c.ToolChoice = []router.Tool{clock}, &router.ToolChoice{Mode: router.ToolChoiceAny}
		}),
		"tool choice named": withCall(func(c *router.Call) {
			c.Tools, c.ToolChoice = []router.Tool{clock}, &router.ToolChoice{Mode: router.ToolChoiceTool, Name: "clock"}
		}),
		"reasoning":        withCall(func(c *router.Call) { c.ReasoningBudget = 2048 }),
		"reasoning budget": withCall(func(c *router.Call) { c.ReasoningBudget = 4096 }),
	}
	seen := map[string]string{key: "base"}
	for name, k := range variants {
		if other, ok := seen[k]; ok {
			t.Errorf("%s has the same key as %s", name, other)
		}
		seen[k] = name
	}
}

func TestCacheHitAndMiss(t *testing.T) {
	c := router.NewCache(router.CacheOptions{Logger: zaptest.NewLogger(t)})
	ctx := t.Context()
	key := router.CacheKey("contoso", "support", "claude", router.Call{System: "", Messages: msgs("hi"), MaxTokens: 1024, Temperature: nil})
	if _, ok := c.Get(ctx, key); ok {
		t.Fatal("hit in an empty cache")
	}
	want := answer("claude", "Hel", "lo", "!")
	chunks := want.Chunks
	c.Put(ctx, key, want, time.Hour)
	want.Chunks = slices.Clone(chunks)
	chunks[0] = "changed by the caller after Put"
	got, ok := c.Get(ctx, key)
	if !ok {
		t.Fatal("miss after Put")
	}
	sameAnswer(t, got, want)

	c.Put(ctx, "other", answer("claude", "x"), 0) // no ttl: not cached
	if _, ok := c.Get(ctx, "other"); ok {
		t.Error("an answer put with ttl 0 was cached")
	}
	if st := c.Stats(); st.MemoryHits != 1 || st.Misses != 2 || st.Entries != 1 || st.Bytes <= 0 {
		t.Errorf("stats %+v", st)
	}
}

// Requests that differ in tenant, app, model or parameters never see each
// other's answers.
func TestCacheIsolation(t *testing.T) {
	c := router.NewCache(router.CacheOptions{})
	ctx := t.Context()
	zero := 0.0
	put := router.CacheKey("contoso", "support", "claude", router.Call{System: "sys", Messages: msgs("same question"), MaxTokens: 1024, Temperature: &zero})
	c.Put(ctx, put, answer("claude", "contoso's answer"), time.Hour)
	others := map[string]string{
		"another tenant":      router.CacheKey("fabrikam", "support", "claude", router.Call{System: "sys", Messages: msgs("same question"), MaxTokens: 1024, Temperature: &zero}),
		"another app":         router.CacheKey("contoso", "knowledge", "claude", router.Call{System: "sys", Messages: msgs("same question"), MaxTokens: 1024, Temperature: &zero}),
		"another model":       router.CacheKey("contoso", "support", "llama", router.Call{System: "sys", Messages: msgs("same question"), MaxTokens: 1024, Temperature: &zero}),
		"another max_tokens":  router.CacheKey("contoso", "support", "claude", router.Call{System: "sys", Messages: msgs("same question"), MaxTokens: 100, Temperature: &zero}),
		"another temperature": router.CacheKey("contoso", "support", "claude", router.Call{System: "sys", Messages: msgs("same question"), MaxTokens: 1024, Temperature: nil}),
	}
	for name, key := range others {
		if a, ok := c.Get(ctx, key); ok {
			t.Errorf("%s got %+v", name, a)
		}
	}
	if _, ok := c.Get(ctx, put); !ok {
		t.Error("the original request missed")
	}
}

func TestCacheByteBoundEvictsLeastRecentlyUsed(t *testing.T) {
	text := strings.Repeat("x", 1000)
	// One entry is a little over 1,000 bytes (text plus bookkeeping):
	// three fit in 4,000, four do not.
	c := router.NewCache(router.CacheOptions{MaxBytes: 4000})
	ctx := t.Context()
	for _, k := range []string{"a", "b", "c"} {
		c.Put(ctx, k, answer("m", text), time.Hour)
	}
	if st := c.Stats(); st.Entries != 3 || st.Evictions != 0 {
		t.Fatalf("stats %+v, want 3 entries", st)
	}
	if _, ok := c.Get(ctx, "a"); !ok { // a is now the most recently used
		t.Fatal("a missed")
	}
	c.Put(ctx, "d", answer("m", text), time.Hour)
	for k, want := range map[string]bool{"a": true, "b": false, "c": true, "d": true} {
		if _, ok := c.Get(ctx, k); ok != want {
			t.Errorf("%s cached = %v, want %v", k, ok, want)
		}
	}
	st := c.Stats()
	if st.Evictions != 1 || st.Bytes > 4000 || st.Entries != 3 {
		t.Errorf("stats %+v, want one eviction and at most 4000 bytes", st)
	}

	// Replacing an entry gives its bytes back; an answer larger than the
	// whole bound is not kept (and evicts nothing).
	c.Put(ctx, "d", answer("m", "short"), time.Hour)
	if st2 := c.Stats(); st2.Bytes >= st.Bytes || st2.Entries != 3 {
		t.Errorf("after replacing d: %+v (before %+v)", st2, st)
	}
	c.Put(ctx, "huge", answer("m", strings.Repeat("y", 5000)), time.Hour)
	if _, ok := c.Get(ctx, "huge"); ok {
		t.Error("an answer larger than MaxBytes was cached in memory")
	}
	if st3 := c.Stats(); st3.Entries != 3 || st3.Evictions != 1 {
		t.Errorf("after the huge answer: %+v", st3)
	}

	// MaxEntries bounds the count whatever the sizes.
	small := router.NewCache(router.CacheOptions{MaxEntries: 2})
	for _, k := range []string{"a", "b", "c"} {
		small.Put(ctx, k, answer("m", k), time.Hour)
	}
	if _, ok := small.Get(ctx, "a"); ok || small.Stats().Entries != 2 || small.Stats().Evictions != 1 {
		t.Errorf("MaxEntries 2: %+v", small.Stats())
	}
}

func TestCacheExpiry(t *testing.T) {
	clk := newClock()
	c := router.NewCache(router.CacheOptions{Now: clk.Now})
	ctx := t.Context()
	c.Put(ctx, "k", answer("m", "a"), time.Minute)
	clk.Advance(time.Minute - time.Second)
	if _, ok := c.Get(ctx, "k"); !ok {
		t.Fatal("missed before the TTL")
	}
	clk.Advance(time.Second)
	if _, ok := c.Get(ctx, "k"); ok {
		t.Fatal("hit at the TTL")
	}
	if st := c.Stats(); st.Entries != 0 || st.Bytes != 0 {
		t.Errorf("the expired entry is still held: %+v", st)
	}
}

// dynamo starts dynalite and returns a client whose connections are closed
// when the test ends, and a fresh cache table.
func dynamo(t testing.TB) (*dynamodb.Client, string) {
	t.Helper()
	endpoint := dynalitetest.Start(t)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	client := dynalitetest.Client(t, endpoint, func(o *dynamodb.Options) {
		o.HTTPClient = &http.Client{Transport: tr}
		o.RetryMaxAttempts = 1
	})
	table := dynalitetest.TableName(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for range 2 { // idempotent
		if err := router.CreateCacheTable(ctx, client, table); err != nil {
			t.Fatal(err)
		}
	}
	return client, table
}

// Two caches over one table behave as two gateway tasks: what one puts the
// other gets, expiry included.
func TestCacheSharedThroughDynamoDB(t *testing.T) {
	client, table := dynamo(t)
	clk := newClock()
	opts := router.CacheOptions{Dynamo: client, Table: table, Now: clk.Now, DynamoTimeout: 5 * time.Second,
		Logger: zaptest.NewLogger(t)}
	one, two := router.NewCache(opts), router.NewCache(opts)
	ctx := t.Context()

	key := router.CacheKey("contoso", "support", "claude", router.Call{System: "", Messages: msgs("hi"), MaxTokens: 1024, Temperature: nil})
	want := answer("claude", "Hel", "lo", "", " world") // an empty chunk survives the round trip
	want.StopReason = "max_tokens"
	one.Put(ctx, key, want, time.Hour)
	got, ok := two.Get(ctx, key)
	if !ok {
		t.Fatalf("the other task missed: %+v", two.Stats())
	}
	sameAnswer(t, got, want)
	if _, ok := two.Get(ctx, key); !ok {
		t.Fatal("second get missed")
	}
	if st := two.Stats(); st.DynamoHits != 1 || st.MemoryHits != 1 || st.DynamoErrors != 0 {
		t.Errorf("task two: %+v, want one DynamoDB hit, then one memory hit", st)
	}

	// Expired in DynamoDB (which deletes lazily, and dynalite never) is a miss.
	other := router.CacheKey("contoso", "support", "claude", router.Call{System: "", Messages: msgs("bye"), MaxTokens: 1024, Temperature: nil})
	one.Put(ctx, other, answer("claude", "bye"), time.Minute)
	clk.Advance(time.Minute)
	if _, ok := two.Get(ctx, other); ok {
		t.Error("an expired DynamoDB item was a hit")
	}
	// The memory copy filled from DynamoDB keeps the item's expiry.
	if _, ok := two.Get(ctx, key); !ok {
		t.Error("a fresh answer missed")
	}
	clk.Advance(time.Hour)
	if _, ok := two.Get(ctx, key); ok {
		t.Error("the memory copy outlived the DynamoDB item's expiry")
	}

	// An answer too large for one DynamoDB item stays in memory only.
	big := answer("claude", strings.Repeat("z", 300<<10), strings.Repeat("z", 200<<10))
	one.Put(ctx, "big", big, time.Hour)
	if a, ok := one.Get(ctx, "big"); !ok || len(a.Chunks) != 2 {
		t.Error("the large answer is not in the first task's memory")
	}
	if _, ok := two.Get(ctx, "big"); ok {
		t.Error("the large answer reached DynamoDB")
	}
	if st := one.Stats(); st.DynamoSkipped != 1 || st.DynamoErrors != 0 {
		t.Errorf("task one: %+v, want one skipped put and no errors", st)
	}
}

// DynamoDB failures are misses and memory-only puts, never errors.
func TestCacheDynamoDBFailureIsAMiss(t *testing.T) {
	client, _ := dynamo(t)
	c := router.NewCache(router.CacheOptions{Dynamo: client, Table: "no-such-table", Logger: zaptest.NewLogger(t)})
	ctx := t.Context()
	if _, ok := c.Get(ctx, "k"); ok {
		t.Fatal("hit")
	}
	c.Put(ctx, "k", answer("m", "a"), time.Hour)
	if _, ok := c.Get(ctx, "k"); !ok {
		t.Fatal("the memory tier lost the answer when DynamoDB failed")
	}
	if st := c.Stats(); st.DynamoErrors != 2 || st.Misses != 1 || st.MemoryHits != 1 {
		t.Errorf("stats %+v, want 2 DynamoDB errors (get, put)", st)
	}
}

func BenchmarkCacheKey(b *testing.B) {
	temp := 0.0
	history := make([]router.Message, 10)
	for i := range history {
		history[i] = router.Message{Role: []string{"user", "assistant"}[i%2], Content: strings.Repeat(fmt.Sprint("turn ", i, " "), 40)}
	}
	b.ReportAllocs()
	for b.Loop() {
		router.CacheKey("contoso", "support-assistant", "claude-haiku", router.Call{System: "You are a helpful support agent.", Messages: history, MaxTokens: 1024, Temperature: &temp})
	}
}

func BenchmarkCacheGetHit(b *testing.B) {
	ans := answer("claude", make([]string, 300)...)
	for i := range ans.Chunks {
		ans.Chunks[i] = "token "
	}
	key := router.CacheKey("contoso", "support", "claude", router.Call{System: "", Messages: msgs("hi"), MaxTokens: 1024, Temperature: nil})
	b.Run("memory", func(b *testing.B) {
		c := router.NewCache(router.CacheOptions{})
		c.Put(context.Background(), key, ans, time.Hour)
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := c.Get(context.Background(), key); !ok {
				b.Fatal("miss")
			}
		}
	})
	b.Run("dynamodb", func(b *testing.B) {
		client, table := dynamo(b)
		writer := router.NewCache(router.CacheOptions{Dynamo: client, Table: table, DynamoTimeout: 5 * time.Second})
		writer.Put(context.Background(), key, ans, time.Hour)
		// A memory tier too small for the answer: every Get reads dynalite.
		c := router.NewCache(router.CacheOptions{Dynamo: client, Table: table, MaxBytes: 1, DynamoTimeout: 5 * time.Second,
			Logger: zaptest.NewLogger(b)})
		for b.Loop() {
			if _, ok := c.Get(context.Background(), key); !ok {
				b.Fatalf("miss: writer %+v, reader %+v", writer.Stats(), c.Stats())
			}
		}
	})
}

// The cache table's item is the documented shape (cache_dynamo.go), attribute
// by attribute and type by type: tables written by older builds stay valid.
func TestCacheDynamoItemSchema(t *testing.T) {
	client, table := dynamo(t)
	clk := newClock()
	c := router.NewCache(router.CacheOptions{Dynamo: client, Table: table, Now: clk.Now, DynamoTimeout: 5 * time.Second,
		Logger: zaptest.NewLogger(t)})
	c.Put(t.Context(), "k1", answer("claude", "Hel", "lo"), time.Hour)
	out, err := client.GetItem(t.Context(), &dynamodb.GetItemInput{TableName: aws.String(table),
		Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "cache#k1"}}})
	if err != nil || out.Item == nil {
		t.Fatalf("GetItem: %v, item %v", err, out)
	}
	got := map[string]string{}
	for name, v := range out.Item {
		got[name] = fmt.Sprintf("%T", v)
	}
	usage, _ := out.Item["usage"].(*types.AttributeValueMemberM)
	if usage != nil {
		for name, v := range usage.Value {
			got["usage."+name] = fmt.Sprintf("%T", v)
		}
	}
	const s, n = "*types.AttributeValueMemberS", "*types.AttributeValueMemberN"
	want := map[string]string{"pk": s, "chunks": "*types.AttributeValueMemberL", "model": s, "stop_reason": s,
		"usage": "*types.AttributeValueMemberM", "usage.input_tokens": n, "usage.output_tokens": n, "expires_at": n}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("item attributes %v, want %v", got, want)
	}
	if exp := out.Item["expires_at"].(*types.AttributeValueMemberN).Value; exp != fmt.Sprint(clk.Now().Add(time.Hour).Unix()) {
		t.Errorf("expires_at %s, want an hour from now", exp)
	}
}

// Cached pieces are stored in the cache's format (v1 by default, what the
// previous release reads) and read in the item's: tasks writing v1 and v2
// share one table, piece for piece.
func TestCacheFormatsShareATable(t *testing.T) {
	client, table := dynamo(t)
	clk := newClock()
	opts := router.CacheOptions{Dynamo: client, Table: table, Now: clk.Now, DynamoTimeout: 5 * time.Second,
		Logger: zaptest.NewLogger(t)}
	v1 := router.NewCache(opts)
	opts.Format = core.FormatV2
	v2 := router.NewCache(opts)
	ctx := t.Context()
	pieces := []string{core.Encode(core.Piece{Kind: core.KindReasoning, Reasoning: "hmm"}), core.Encode(core.Piece{Block: 1, Text: "Hi"}), "plain"}
	for i, c := range []struct{ writer, reader *router.Cache }{{v1, v2}, {v2, v1}} {
		key := fmt.Sprintf("formats-%d", i)
		want := answer("claude", pieces...)
		c.writer.Put(ctx, key, want, time.Hour)
		got, ok := c.reader.Get(ctx, key)
		if !ok {
			t.Fatalf("%s: the other task missed", key)
		}
		sameAnswer(t, got, want)
		out, err := client.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table),
			Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "cache#" + key}}})
		if err != nil {
			t.Fatal(err)
		}
		stored := out.Item["chunks"].(*types.AttributeValueMemberL).Value[1].(*types.AttributeValueMemberS).Value
		_, marked := out.Item["format"]
		if v1Form := strings.HasPrefix(stored, "\x00\"text\":\"Hi\""); v1Form != (c.writer == v1) || marked != (c.writer == v2) {
			t.Errorf("%s: stored %q, format attribute %v", key, stored, out.Item["format"])
		}
	}
}
