package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	oai "github.com/openai/openai-go/v3"

	"github.com/jetway-gateway/jetway/client"
	"github.com/jetway-gateway/jetway/internal/mockmodel"
	"github.com/jetway-gateway/jetway/internal/protocol"
	"github.com/jetway-gateway/jetway/internal/telemetry"
)

// claudeCached is testdata/jetway.yaml's claude-cached price per 1,000
// tokens: input, output, cache read, cache write.
var claudeCached = [4]float64{0.003, 0.015, 0.0003, 0.00375}

// cachedMicroUSD is the price of u on claude-cached, computed here from
// the tenants file's numbers (not by the gateway's price function).
func cachedMicroUSD(u protocol.Usage) int64 {
	usd := (float64(u.InputTokens)*claudeCached[0] + float64(u.OutputTokens)*claudeCached[1] +
		float64(u.CacheReadInputTokens)*claudeCached[2] + float64(u.CacheWriteInputTokens)*claudeCached[3]) / 1000
	return int64(math.Ceil(usd*1e6 - 1e-6))
}

// longSystem is a system prompt of about 1,500 tokens: above
// claude-cached's 1,024-token minimum.
var longSystem = strings.Repeat("You are the airline's support assistant; be precise. ", 115)

// TestPromptCacheThroughTheGateway: a chat through the WebSocket door with
// prompt_cache auto gets cache points from the gateway (the mock reports
// writes, then reads), and the usage and cost are the same on the done
// frame, the usage record, the quota settlement and `gateway usage`; a
// cache-read-heavy turn is never charged as uncached input. With
// prompt_cache off no point is placed, but a client's own point is kept.
// The OpenAI door reports cached_tokens.
func TestPromptCacheThroughTheGateway(t *testing.T) {
	w := newWorld(t, mockmodel.Options{TTFT: time.Millisecond, PerToken: 100 * time.Microsecond})
	dir := t.TempDir()
	// debug: the quota_settled lines say what each settlement charged.
	g := w.start(map[string]string{"JETWAY_USAGE_DIR": dir, "JETWAY_LOG_LEVEL": "debug"})
	dialApp := func(sub, clientID string) *client.Client {
		tok := w.token(sub, "contoso", clientID, time.Hour)
		return w.dial(g, sub, func(o *client.Options) { o.Token = func(context.Context) (string, error) { return tok, nil } })
	}
	chat, off := dialApp("cache-user", "contoso-chat"), dialApp("cache-off-user", "contoso-chat-off")
	send := func(c *client.Client, req client.Request) *client.Done {
		t.Helper()
		call, err := c.Send(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		done, err := waitCall(t, call, 20*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", call.ID, err)
		}
		return done
	}
	// A conversation of three turns on each app.
	converse := func(c *client.Client, prefix string) []*client.Done {
		var msgs []client.Message
		var dones []*client.Done
		for turn := 1; turn <= 3; turn++ {
			msgs = append(msgs, client.Message{Role: "user", Content: fmt.Sprintf("Question %d about my booking %s", turn, strings.Repeat("detail ", 30))})
			d := send(c, client.Request{RequestID: fmt.Sprintf("%s-turn-%d", prefix, turn), System: longSystem, Messages: msgs, MaxTokens: 40})
			dones = append(dones, d)
			msgs = append(msgs, d.Turn())
		}
		return dones
	}
	auto := converse(chat, "cache-auto")
	offDones := converse(off, "cache-off")

	for i, d := range auto {
		u := d.Usage
		switch {
		case i == 0 && (u.CacheWriteInputTokens == 0 || u.CacheReadInputTokens != 0):
			t.Errorf("turn 1 usage %+v: want the system prompt written to the cache", u)
		case i > 0 && (u.CacheReadInputTokens == 0 || u.CacheWriteInputTokens == 0):
			t.Errorf("turn %d usage %+v: want the earlier prefix read and the last turn written", i+1, u)
		}
		if off := offDones[i].Usage; off.CacheReadInputTokens != 0 || off.CacheWriteInputTokens != 0 || off.AllInput() != u.AllInput() {
			t.Errorf("turn %d: prompt_cache off usage %+v, auto %+v: want no cache and the same input", i+1, off, u)
		}
		if d.Text != offDones[i].Text {
			t.Errorf("turn %d: the answers differ with and without the cache", i+1)
		}
	}
	// Turn 3 reads the system prompt and turn 1 (about 1,650 tokens) and
	// is charged at the read price for them, never at the input price.
	if u := auto[2].Usage; u.CacheReadInputTokens < 1500 || u.InputTokens >= u.CacheReadInputTokens {
		t.Errorf("turn 3 usage %+v: want a read-heavy request", u)
	}

	// A client's own point is kept where the gateway places none, and
	// counts toward the model's maximum.
	own := []client.Message{{Role: "user", Blocks: []client.Block{
		{Type: protocol.BlockText, Text: strings.Repeat("A long document the user pastes. ", 200)},
		{Type: protocol.BlockCachePoint}, {Type: protocol.BlockText, Text: "Summarise it."}}}}
	if d := send(off, client.Request{RequestID: "cache-own-point", Messages: own, MaxTokens: 10}); d.Usage.CacheWriteInputTokens == 0 {
		t.Errorf("own cache point: usage %+v, want a cache write", d.Usage)
	}
	// More points than the model allows: refused before any reservation or model call.
	calls := w.mock.Requests("mock-a")
	tooMany := []client.Message{{Role: "user", Blocks: []client.Block{{Type: protocol.BlockText, Text: "a"}, {Type: protocol.BlockCachePoint},
		{Type: protocol.BlockText, Text: "b"}, {Type: protocol.BlockCachePoint}, {Type: protocol.BlockText, Text: "c"}, {Type: protocol.BlockCachePoint}}}}
	call, err := chat.Send(context.Background(), client.Request{RequestID: "cache-too-many", Messages: tooMany})
	if err != nil {
		t.Fatal(err)
	}
	_, err = waitCall(t, call, 20*time.Second)
	var pe *client.Error
	if !errors.As(err, &pe) || pe.Code != protocol.CodeInvalidRequest || !strings.Contains(pe.Message, "messages[0].content[5]") {
		t.Errorf("three cache points on a model allowing two: %v, want invalid_request naming messages[0].content[5]", err)
	}
	if got := w.mock.Requests("mock-a"); got != calls {
		t.Errorf("the refused request reached the model (%d calls, want %d)", got, calls)
	}
	if l := g.logs.Find("quota_reserved", "cache-too-many"); len(l) != 0 {
		t.Errorf("the refused request reserved quota: %v", l)
	}
	// A fallback without prompt caching gets no point (the mock refuses
	// any point to mock-cheap, so its answer proves none reached it).
	fb := send(chat, client.Request{RequestID: "cache-fallback", Model: "cached-throttle", System: longSystem, Messages: own, MaxTokens: 10})
	if fb.Model != "mock-cheap" || fb.Usage.CacheReadInputTokens != 0 || fb.Usage.CacheWriteInputTokens != 0 {
		t.Errorf("fallback done: model %s usage %+v, want mock-cheap without cache tokens", fb.Model, fb.Usage)
	}

	// The OpenAI door: prompt_tokens is every input token, cached_tokens those read.
	oc := openaiClient(g, w.token("cache-user", "contoso", "contoso-chat", time.Hour))
	params := oai.ChatCompletionNewParams{Messages: []oai.ChatCompletionMessageParamUnion{oai.SystemMessage(longSystem),
		oai.UserMessage(fmt.Sprintf("Question %d about my booking %s", 1, strings.Repeat("detail ", 30))),
		oai.AssistantMessage(auto[0].Text), oai.UserMessage(fmt.Sprintf("Question %d about my booking %s", 2, strings.Repeat("detail ", 30)))},
		MaxTokens: oai.Int(40)}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := oc.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if res.Usage.PromptTokensDetails.CachedTokens == 0 || res.Usage.PromptTokens != auto[1].Usage.AllInput() {
		t.Errorf("openai usage %+v, want cached tokens and prompt_tokens %d", res.Usage, auto[1].Usage.AllInput())
	}

	// Every done frame's usage is what was recorded, priced and settled.
	all := append(append([]*client.Done{}, auto...), offDones...)
	settled := map[string]map[string]any{}
	for _, d := range all {
		l := g.logs.Await("quota_settled", d.RequestID, 1, 20*time.Second)
		if len(l) != 1 {
			t.Fatalf("%s: no quota_settled line", d.RequestID)
		}
		settled[d.RequestID] = l[0]
	}
	g.stop(t) // the drain flushes the usage sink
	recs, _, err := telemetry.ReadUsageDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]telemetry.UsageRecord{}
	for _, r := range recs {
		byID[r.RequestID] = r
	}
	var saved float64
	for _, d := range all {
		r, u := byID[d.RequestID], d.Usage
		want := cachedMicroUSD(u)
		if r.InputTokens != u.InputTokens || r.OutputTokens != u.OutputTokens || r.CacheReadInputTokens != u.CacheReadInputTokens ||
			r.CacheWriteInputTokens != u.CacheWriteInputTokens || int64(math.Round(r.CostUSD*1e6)) != want {
			t.Errorf("%s: record %+v, done usage %+v (cost %d micro-USD)", d.RequestID, r, u, want)
		}
		uncached := cachedMicroUSD(protocol.Usage{InputTokens: u.AllInput(), OutputTokens: u.OutputTokens})
		if got := int64(math.Round(r.CacheSavedUSD * 1e6)); got != uncached-want {
			t.Errorf("%s: cache_saved_usd %d micro-USD, want %d", d.RequestID, got, uncached-want)
		}
		saved += r.CacheSavedUSD
		s := settled[d.RequestID]
		if int64(s["charged"].(float64)) != u.Total() || int64(s["micro_usd"].(float64)) != want {
			t.Errorf("%s: settled %v tokens %v micro-USD, want %d and %d", d.RequestID, s["charged"], s["micro_usd"], u.Total(), want)
		}
	}
	t.Logf("turn usage with the cache: %+v, %+v, %+v", auto[0].Usage, auto[1].Usage, auto[2].Usage)
	if saved <= 0 {
		t.Errorf("the cache saved %f USD over the conversation, want a saving", saved)
	}
	// gateway usage shows the hit ratio and the saving per tenant/app/model.
	var out bytes.Buffer
	if err := run(context.Background(), []string{"usage", "--dir", dir}, func(string) string { return "" }, &out); err != nil {
		t.Fatal(err)
	}
	rows := 0
	for _, line := range strings.Split(out.String(), "\n") {
		f := strings.Fields(line)
		if len(f) < 14 || f[0] != "contoso" || (f[1] != "chat" && f[1] != "chat-off") || f[2] != "claude-cached" {
			continue
		}
		rows++
		var read, input int64
		var appSaved float64
		for _, r := range recs {
			if r.App == f[1] && r.Model == "claude-cached" {
				read += r.CacheReadInputTokens
				input += r.InputTokens + r.CacheReadInputTokens + r.CacheWriteInputTokens
				appSaved += r.CacheSavedUSD
			}
		}
		if want := fmt.Sprintf("%.1f", 100*float64(read)/float64(input)); f[10] != want || f[11] != fmt.Sprintf("%.4f", appSaved) {
			t.Errorf("gateway usage row %q: want hit %s%% and saved %.4f", line, want, appSaved)
		}
	}
	if rows != 2 || !strings.Contains(out.String(), "CACHE_HIT_PCT") {
		t.Errorf("gateway usage:\n%s", out.String())
	}
}
