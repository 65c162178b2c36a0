package router_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/jetway-gateway/jetway/internal/mockmodel"
	"github.com/jetway-gateway/jetway/internal/mockmodel/mockmodeltest"
	"github.com/jetway-gateway/jetway/internal/router"
)

// recorded is where a request to the model carried cache points.
type recorded struct {
	system   bool  // after the system prompt
	tools    bool  // after the tools
	messages []int // indexes of messages with a point
}

// cacheWorld is a Router over the mock endpoint that records where each
// call's cache points were.
type cacheWorld struct {
	r    *router.Router
	mu   sync.Mutex
	seen []recorded
}

func newCacheWorld(t *testing.T) *cacheWorld {
	t.Helper()
	w := &cacheWorld{}
	mock := mockmodel.New(mockmodel.Options{TTFT: mockmodel.NoDelay, PerToken: mockmodel.NoDelay, Tokens: 20})
	ts := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req struct {
			System     []map[string]any `json:"system"`
			ToolConfig *struct {
				Tools []map[string]any `json:"tools"`
			} `json:"toolConfig"`
			Messages []struct {
				Content []map[string]any `json:"content"`
			} `json:"messages"`
		}
		_ = json.Unmarshal(body, &req)
		var rec recorded
		for _, b := range req.System {
			_, ok := b["cachePoint"]
			rec.system = rec.system || ok
		}
		if req.ToolConfig != nil {
			for _, b := range req.ToolConfig.Tools {
				_, ok := b["cachePoint"]
				rec.tools = rec.tools || ok
			}
		}
		for i, m := range req.Messages {
			for _, b := range m.Content {
				if _, ok := b["cachePoint"]; ok {
					rec.messages = append(rec.messages, i)
				}
			}
		}
		w.mu.Lock()
		w.seen = append(w.seen, rec)
		w.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
		mock.ServeHTTP(rw, r)
	}))
	t.Cleanup(ts.Close)
	w.r = router.New(router.NewBedrock(mockmodeltest.Client(t, ts.URL)), router.Options{})
	return w
}

func (w *cacheWorld) last() recorded {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.seen[len(w.seen)-1]
}

func (w *cacheWorld) call(t *testing.T, target router.Target, c router.Call) router.Result {
	t.Helper()
	out, err := w.r.Stream(context.Background(), []router.Target{target}, c, func(string) {})
	if err != nil {
		t.Fatalf("stream: %v", err)
	}
	return out.Result
}

var claude = &router.CacheLimits{MinTokens: 1024, MaxPoints: 4}

// conversation is turn n of a chat: the system prompt and 2n-1 messages.
func conversation(system string, n int) router.Call {
	c := router.Call{System: system, AutoCache: true}
	for i := range 2*n - 1 {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		c.Messages = append(c.Messages, router.Message{Role: role, Content: strings.Repeat(string(rune('a'+i%26)), 400)})
	}
	return c
}

func TestAutoCachePointsAndUsage(t *testing.T) {
	w := newCacheWorld(t)
	target := router.Target{ID: "a", BedrockID: "mock-a", Cache: claude}
	system := strings.Repeat("s", 6000) // 1,500 tokens by the mock's rule
	// Turn 1: no previous turn; the system prompt is long enough.
	res := w.call(t, target, conversation(system, 1))
	if got := w.last(); !got.system || len(got.messages) != 0 {
		t.Errorf("turn 1 points = %+v, want after the system prompt only", got)
	}
	if u := res.Usage; u.CacheWriteInputTokens != 1500 || u.CacheReadInputTokens != 0 || u.InputTokens != 100 {
		t.Errorf("turn 1 usage = %+v, want 1500 written, 100 uncached", u)
	}
	// Turn 2: the system prompt is read, the first turn written.
	res = w.call(t, target, conversation(system, 2))
	if got := w.last(); !got.system || len(got.messages) != 1 || got.messages[0] != 1 {
		t.Errorf("turn 2 points = %+v, want after the system prompt and message 1", got)
	}
	if u := res.Usage; u.CacheReadInputTokens != 1500 || u.CacheWriteInputTokens != 200 || u.InputTokens != 100 {
		t.Errorf("turn 2 usage = %+v, want 1500 read, 200 written, 100 uncached", u)
	}
	// Turn 3: everything up to the previous point is read through the
	// new point's look-back.
	res = w.call(t, target, conversation(system, 3))
	if got := w.last(); len(got.messages) != 1 || got.messages[0] != 3 {
		t.Errorf("turn 3 points = %+v, want message 3", got)
	}
	if u := res.Usage; u.CacheReadInputTokens != 1700 || u.CacheWriteInputTokens != 200 || u.InputTokens != 100 {
		t.Errorf("turn 3 usage = %+v, want 1700 read, 200 written, 100 uncached", u)
	}
}

func TestAutoCacheBelowTheMinimumAndAtTheMaximum(t *testing.T) {
	w := newCacheWorld(t)
	short := router.Call{System: "be brief", AutoCache: true, Messages: []router.Message{
		{Role: "user", Content: "hi"}, {Role: "assistant", Content: "hello"}, {Role: "user", Content: "more"}}}
	res := w.call(t, router.Target{ID: "a", BedrockID: "mock-a", Cache: claude}, short)
	if got := w.last(); got.system || len(got.messages) != 0 || res.Usage.CacheWriteInputTokens != 0 {
		t.Errorf("short prompt: points %+v, usage %+v; want none", got, res.Usage)
	}
	// One point allowed: the previous turn's, which reads the system prompt too.
	one := router.Target{ID: "a", BedrockID: "mock-a", Cache: &router.CacheLimits{MinTokens: 1024, MaxPoints: 1}}
	w.call(t, one, conversation(strings.Repeat("s", 6000), 2))
	if got := w.last(); got.system || len(got.messages) != 1 {
		t.Errorf("max 1: points %+v, want the previous turn's only", got)
	}
	// A model whose minimum is above the prefix gets none.
	high := router.Target{ID: "a", BedrockID: "mock-a", Cache: &router.CacheLimits{MinTokens: 100000, MaxPoints: 4}}
	w.call(t, high, conversation(strings.Repeat("s", 6000), 2))
	if got := w.last(); got.system || len(got.messages) != 0 {
		t.Errorf("high minimum: points %+v, want none", got)
	}
}

func TestClientCachePointsKeptAndCounted(t *testing.T) {
	w := newCacheWorld(t)
	c := conversation(strings.Repeat("s", 6000), 2)
	c.Messages[0] = router.Message{Role: "user", Blocks: []router.Block{{Kind: router.BlockText, Text: c.Messages[0].Content}, {Kind: router.BlockCachePoint}}}
	two := router.Target{ID: "a", BedrockID: "mock-a", Cache: &router.CacheLimits{MinTokens: 1024, MaxPoints: 2}}
	w.call(t, two, c)
	if got := w.last(); got.system || len(got.messages) != 2 || got.messages[0] != 0 || got.messages[1] != 1 {
		t.Errorf("points = %+v, want the client's (message 0) and the previous turn's (1)", got)
	}
	// Without auto placement only the client's point goes.
	c.AutoCache = false
	w.call(t, two, c)
	if got := w.last(); got.system || len(got.messages) != 1 || got.messages[0] != 0 {
		t.Errorf("points = %+v, want the client's only", got)
	}
	if c.Messages[1].Blocks != nil {
		t.Error("placing a point changed the caller's messages")
	}
	// A model without caching gets none (the mock refuses any point to
	// mock-cheap, so the call succeeding proves it).
	c.AutoCache = true
	w.call(t, router.Target{ID: "cheap", BedrockID: "mock-cheap"}, c)
	if got := w.last(); got.system || len(got.messages) != 0 {
		t.Errorf("uncached model: points %+v, want none", got)
	}
}

func TestModelRefusesMoreCachePointsThanItAllows(t *testing.T) {
	w := newCacheWorld(t)
	c := conversation(strings.Repeat("s", 6000), 1)
	bs := []router.Block{{Kind: router.BlockText, Text: "x"}}
	for range 5 {
		bs = append(bs, router.Block{Kind: router.BlockText, Text: "y"}, router.Block{Kind: router.BlockCachePoint})
	}
	c.Messages[0] = router.Message{Role: "user", Blocks: bs}
	c.AutoCache = false
	// Configured above what the model takes: Bedrock (the mock) refuses.
	_, err := w.r.Stream(context.Background(), []router.Target{{ID: "a", BedrockID: "mock-a", Cache: &router.CacheLimits{MinTokens: 1024, MaxPoints: 10}}}, c, func(string) {})
	if me := modelError(t, err); me.Kind != router.KindValidation {
		t.Errorf("error kind = %s, want validation", me.Kind)
	}
}

func TestPrefixCachePointAfterTheTools(t *testing.T) {
	w := newCacheWorld(t)
	tools := []router.Tool{{Name: "lookup", Description: strings.Repeat("Looks a booking up. ", 250), InputSchema: []byte(`{"type":"object"}`)}}
	c := router.Call{AutoCache: true, Tools: tools, Messages: []router.Message{{Role: "user", Content: "where is my bag?"}}}
	w.call(t, router.Target{ID: "a", BedrockID: "mock-a", Cache: claude}, c)
	if got := w.last(); !got.tools || got.system || len(got.messages) != 0 {
		t.Errorf("points %+v, want one after the tools (no system prompt)", got)
	}
	// The client's own prefix point goes where the system prompt ends.
	c = router.Call{PrefixCachePoint: true, System: "short", Messages: []router.Message{{Role: "user", Content: "hi"}}}
	w.call(t, router.Target{ID: "a", BedrockID: "mock-a", Cache: claude}, c)
	if got := w.last(); !got.system || got.tools {
		t.Errorf("points %+v, want the client's after the system prompt", got)
	}
}
