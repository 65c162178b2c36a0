package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/jetway-gateway/jetway/client"
	"github.com/jetway-gateway/jetway/internal/mockmodel"
	"github.com/jetway-gateway/jetway/internal/telemetry"
)

// anthropicClient is the official Go package pointed at the gateway, with
// the JWT as its API key.
func anthropicClient(g *gw, token string) *anthropic.Client {
	c := anthropic.NewClient(option.WithoutEnvironmentDefaults(), option.WithBaseURL("http://"+g.Addr+"/"), option.WithAPIKey(token), option.WithMaxRetries(0))
	return &c
}

func userMessage(text string) []anthropic.MessageParam {
	return []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(text))}
}

// accumulate reads a stream through the package's accumulator.
func accumulate(t *testing.T, st interface {
	Next() bool
	Current() anthropic.MessageStreamEventUnion
	Err() error
}) anthropic.Message {
	t.Helper()
	var acc anthropic.Message
	for st.Next() {
		if err := acc.Accumulate(st.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	return acc
}

// TestAnthropicGoStreamEqualsWebSocket: the official Go package, streaming
// through its accumulator and whole, gets the answer the WebSocket gets
// for the same prompt, with usage, stop_reason and request-id.
func TestAnthropicGoStreamEqualsWebSocket(t *testing.T) {
	w := newWorld(t, fastPace())
	g := w.start(nil)
	prompt := "the same prompt through both doors"
	wsCall, err := w.dial(g, "door-user", nil).Send(context.Background(), ask(prompt))
	if err != nil {
		t.Fatal(err)
	}
	wsDone, err := waitCall(t, wsCall, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := anthropicClient(g, w.token("door-user", "contoso", "contoso-support", time.Hour))
	params := anthropic.MessageNewParams{Model: "mock-a", MaxTokens: 1000, Messages: userMessage(prompt)}
	var raw *http.Response
	acc := accumulate(t, c.Messages.NewStreaming(ctx, params, option.WithResponseInto(&raw)))
	if len(acc.Content) != 1 || acc.Content[0].Text != wsDone.Text || wsDone.Text != expected("mock-a", prompt, 300) {
		t.Fatalf("anthropic-sdk-go answer %+v\nwebsocket answer %q", acc.Content, wsDone.Text)
	}
	if acc.StopReason != anthropic.StopReasonEndTurn || acc.Usage.OutputTokens != 300 || acc.Usage.InputTokens == 0 ||
		acc.Model != "mock-a" || raw == nil || !strings.HasPrefix(acc.ID, "msg_") || acc.ID != "msg_"+raw.Header.Get("request-id") {
		t.Errorf("accumulated %+v (request-id %q)", acc, raw.Header.Get("request-id"))
	}

	res, err := c.Messages.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Content) != 1 || res.Content[0].Text != wsDone.Text || res.Usage.OutputTokens != 300 || res.StopReason != anthropic.StopReasonEndTurn {
		t.Errorf("whole %+v", res)
	}
}

// recordingBedrock passes calls to the mock and keeps their bodies.
type recordingBedrock struct {
	mock   http.Handler
	mu     sync.Mutex
	bodies [][]byte
}

func (r *recordingBedrock) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	b, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	r.bodies = append(r.bodies, b)
	r.mu.Unlock()
	req.Body = io.NopCloser(bytes.NewReader(b))
	r.mock.ServeHTTP(w, req)
}

func (r *recordingBedrock) last() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.bodies[len(r.bodies)-1]
}

var lookupParam = anthropic.ToolUnionParam{OfTool: &anthropic.ToolParam{Name: "lookup", Description: anthropic.String("looks a phrase up"),
	InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{"query": map[string]any{"type": "string"}}, Required: []string{"query"}}}}

// TestAnthropicGoToolsThinkingImage: a tool round trip with thinking (the
// accumulated answer, its thinking block and signature included, sent
// back with the tool's result reaches Bedrock with the signature, and is
// answered in text), and an image.
func TestAnthropicGoToolsThinkingImage(t *testing.T) {
	w := newWorld(t, fastPace())
	rec := &recordingBedrock{mock: w.mock}
	bedrock := httptest.NewServer(rec)
	defer bedrock.Close()
	g := w.start(map[string]string{"AWS_ENDPOINT_URL_BEDROCK_RUNTIME": bedrock.URL})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := anthropicClient(g, w.token("agent-user", "contoso", "contoso-agent", time.Hour))

	const prompt = "international timezone conversion for Paris please"
	params := anthropic.MessageNewParams{Model: "mock-reasoning", MaxTokens: 2048, Thinking: anthropic.ThinkingConfigParamOfEnabled(1024),
		Tools: []anthropic.ToolUnionParam{lookupParam}, ToolChoice: anthropic.ToolChoiceUnionParam{OfAuto: &anthropic.ToolChoiceAutoParam{}},
		Messages: userMessage(prompt)}
	params.ToolChoice = anthropic.ToolChoiceParamOfTool("lookup")
	acc := accumulate(t, c.Messages.NewStreaming(ctx, params))
	if acc.StopReason != anthropic.StopReasonToolUse || len(acc.Content) != 3 {
		t.Fatalf("answer %+v", acc)
	}
	th, text, call := acc.Content[0], acc.Content[1], acc.Content[2]
	wantID, wantInput := mockmodel.Tool(1, prompt)
	if th.Type != "thinking" || th.Thinking == "" || th.Signature != "mock-signature" || text.Type != "text" || text.Text == "" ||
		call.Type != "tool_use" || call.ID != wantID || call.Name != "lookup" || string(call.Input) != wantInput {
		t.Fatalf("blocks %+v", acc.Content)
	}
	whole, err := c.Messages.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if len(whole.Content) != 3 || whole.Content[0].Signature != th.Signature || whole.Content[2].ID != call.ID || string(whole.Content[2].Input) != wantInput {
		t.Fatalf("whole %+v", whole.Content)
	}

	// The next turn: the answer as received, then the tool's result.
	params.ToolChoice = anthropic.ToolChoiceUnionParam{OfAuto: &anthropic.ToolChoiceAutoParam{}}
	params.Messages = append(params.Messages, acc.ToParam(), anthropic.NewUserMessage(anthropic.NewToolResultBlock(call.ID, "Paris: UTC+1", false)))
	next, err := c.Messages.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if next.StopReason != anthropic.StopReasonEndTurn || len(next.Content) < 2 || next.Content[len(next.Content)-1].Text == "" {
		t.Fatalf("second turn %+v", next)
	}
	sent := rec.last()
	if !bytes.Contains(sent, []byte(`"signature":"mock-signature"`)) || !bytes.Contains(sent, []byte(`"toolUseId":"`+call.ID+`"`)) {
		t.Fatalf("Bedrock got no signature or tool result back: %s", sent)
	}

	// An image reaches a model with the images capability.
	img, err := c.Messages.New(ctx, anthropic.MessageNewParams{Model: "mock-tools", MaxTokens: 100, Messages: []anthropic.MessageParam{
		anthropic.NewUserMessage(anthropic.NewTextBlock("what is this?"), anthropic.NewImageBlockBase64("image/png", png1x1))}})
	if err != nil {
		t.Fatal(err)
	}
	if img.StopReason != anthropic.StopReasonMaxTokens || img.Content[0].Text == "" || !bytes.Contains(rec.last(), []byte(`"image":{"format":"png"`)) {
		t.Fatalf("image answer %+v", img)
	}
}

// png1x1 is a 1x1 PNG.
const png1x1 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="

// TestAnthropicGoCountTokensModelsAndErrors: count_tokens against the
// mock's own count, the models list, and every error class as the
// package raises it.
func TestAnthropicGoCountTokensModelsAndErrors(t *testing.T) {
	w := newWorld(t, fastPace())
	g := w.start(map[string]string{"JETWAY_MAX_INFLIGHT_PER_USER": "1"})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := anthropicClient(g, w.token("count-user", "contoso", "contoso-support", time.Hour))

	// count_tokens is the gateway's conservative bound: never under the
	// mock's count (4 bytes a token), at most a third over it plus 8 per
	// message.
	for _, prompt := range []string{"hi", "a short question about the weather", strings.Repeat("a longer prompt of plain English words ", 100)} {
		msgs := []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(prompt)),
			anthropic.NewAssistantMessage(anthropic.NewTextBlock("noted")), anthropic.NewUserMessage(anthropic.NewTextBlock(prompt))}
		n, err := c.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{Model: "mock-a", Messages: msgs,
			System: anthropic.MessageCountTokensParamsSystemUnion{OfString: anthropic.String("be brief")}})
		if err != nil {
			t.Fatal(err)
		}
		res, err := c.Messages.New(ctx, anthropic.MessageNewParams{Model: "mock-a", MaxTokens: 5, Messages: msgs,
			System: []anthropic.TextBlockParam{{Text: "be brief"}}})
		if err != nil {
			t.Fatal(err)
		}
		mock := res.Usage.InputTokens
		if n.InputTokens < mock || float64(n.InputTokens) > float64(mock)*4/3+8*4+4 {
			t.Errorf("%d-byte prompt: count_tokens %d, the mock counted %d", len(prompt), n.InputTokens, mock)
		}
		t.Logf("%d-byte prompt x2: count_tokens %d, mock %d (%.2fx)", len(prompt), n.InputTokens, mock, float64(n.InputTokens)/float64(mock))
	}

	page, err := c.Models.List(ctx, anthropic.ModelListParams{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range page.Data {
		ids = append(ids, m.ID)
	}
	if strings.Join(ids, ",") != "mock-a,mock-b,mock-stall,mock-fail-after-5,mock-throttle,mock-unavailable" || page.HasMore {
		t.Errorf("models %v", ids)
	}
	if m, err := c.Models.Get(ctx, "mock-b", anthropic.ModelGetParams{}); err != nil || m.ID != "mock-b" {
		t.Errorf("model mock-b: %+v, %v", m, err)
	}

	apiError := func(err error, status int, typ string) {
		t.Helper()
		var e *anthropic.Error
		if !errors.As(err, &e) || e.StatusCode != status || string(e.Type()) != typ {
			t.Errorf("want %d %s, got %v", status, typ, err)
		}
	}
	params := func(model string, text string) anthropic.MessageNewParams {
		return anthropic.MessageNewParams{Model: anthropic.Model(model), MaxTokens: 100, Messages: userMessage(text)}
	}
	_, err = c.Messages.New(ctx, params("mock-a", "q"), option.WithJSONSet("top_k", 5))
	apiError(err, 400, "invalid_request_error")
	_, err = anthropicClient(g, "not-a-jwt").Messages.New(ctx, params("mock-a", "q"))
	apiError(err, 401, "authentication_error")
	_, err = anthropicClient(g, w.token("nobody", "", "contoso-support", time.Hour)).Messages.New(ctx, params("mock-a", "q"))
	apiError(err, 403, "permission_error")
	_, err = c.Messages.New(ctx, params("mock-cheap", "q"))
	apiError(err, 404, "not_found_error")
	// Throttled with no fallback: overloaded.
	_, err = anthropicClient(g, w.token("count-user", "contoso", "contoso-nofallback", time.Hour)).Messages.New(ctx, params("mock-throttle", "q"))
	apiError(err, 529, "overloaded_error")
	_, err = c.Messages.New(ctx, params("mock-fail-after-5", "q"))
	apiError(err, 502, "api_error")
	// After the 200: the error event ends the stream as an error.
	st := c.Messages.NewStreaming(ctx, params("mock-fail-after-5", "q"))
	var deltas int
	for st.Next() {
		if st.Current().Type == "content_block_delta" {
			deltas++
		}
	}
	if err := st.Err(); deltas != 5 || err == nil || !strings.Contains(err.Error(), "api_error") {
		t.Errorf("mid-stream failure: %d deltas, %v", deltas, err)
	}
	// The user's in-flight cap (1, held by a stalled WebSocket request): 429 rate_limit_error with retry-after.
	ws := w.dial(g, "count-user", nil)
	stalled := ask("stall")
	stalled.Model = "mock-stall"
	call, err := ws.Send(ctx, stalled)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-call.Accepted():
	case <-ctx.Done():
		t.Fatal("the stalled request was never accepted")
	}
	var raw *http.Response
	_, err = c.Messages.New(ctx, params("mock-a", "q"), option.WithResponseInto(&raw))
	apiError(err, 429, "rate_limit_error")
	if raw == nil || raw.Header.Get("retry-after") != "1" {
		t.Errorf("in-flight cap: no retry-after")
	}
	_ = ws.Cancel(call.ID)

	// The tiny app's quota: 429 with the window's retry-after.
	tiny := anthropicClient(g, w.token("tiny-user", "fabrikam", "fabrikam-tiny", time.Hour))
	_, err = tiny.Messages.New(ctx, params("mock-a", "too big for the tiny app"), option.WithResponseInto(&raw))
	apiError(err, 429, "rate_limit_error")
	if s, _ := strconv.Atoi(raw.Header.Get("retry-after")); s < 1 || s > 60 || raw.Header.Get("x-should-retry") != "true" {
		t.Errorf("quota: retry-after %q, x-should-retry %q", raw.Header.Get("retry-after"), raw.Header.Get("x-should-retry"))
	}
}

// TestAnthropicGoResume: a stream dropped after 20 chunks resumes with
// Idempotency-Key and Last-Event-ID to the identical text, which the same
// request sent again whole returns too (no second model call).
func TestAnthropicGoResume(t *testing.T) {
	w := newWorld(t, mockmodelOptions{TTFT: time.Millisecond, PerToken: 2 * time.Millisecond})
	g := w.start(nil)
	c := anthropicClient(g, w.token("resume-user", "contoso", "contoso-support", time.Hour))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key := option.WithHeader("Idempotency-Key", "anthropic-resume-1")
	params := anthropic.MessageNewParams{Model: "mock-a", MaxTokens: 1000, Messages: userMessage("resume me")}

	first, stop := context.WithCancel(ctx)
	st := c.Messages.NewStreaming(first, params, key)
	var text strings.Builder
	seen := 0 // each chunk is one content_block_delta: its seq
	for st.Next() {
		if ev := st.Current(); ev.Type == "content_block_delta" {
			text.WriteString(ev.Delta.Text)
			if seen++; seen == 20 {
				break
			}
		}
	}
	stop() // the connection drops mid-answer
	_ = st.Close()
	rest := c.Messages.NewStreaming(ctx, params, key, option.WithHeader("Last-Event-ID", strconv.Itoa(seen)))
	var stopReason string
	for rest.Next() {
		switch ev := rest.Current(); ev.Type {
		case "message_start":
			t.Error("a resumed stream starts again")
		case "content_block_delta":
			text.WriteString(ev.Delta.Text)
		case "message_delta":
			stopReason = string(ev.Delta.StopReason)
		}
	}
	if err := rest.Err(); err != nil || stopReason != "end_turn" {
		t.Fatalf("resumed: %v, stop_reason %q", err, stopReason)
	}
	whole, err := c.Messages.New(ctx, params, key)
	if err != nil {
		t.Fatal(err)
	}
	if text.String() != whole.Content[0].Text || whole.ID != "msg_anthropic-resume-1" || w.mock.Requests("mock-a") != 1 {
		t.Fatalf("resumed text %q\nwhole %q (%d model calls)", text.String(), whole.Content[0].Text, w.mock.Requests("mock-a"))
	}
}

// TestAnthropicDoorSharesQuota: a quota used up on the WebSocket refuses
// this door (429 rate_limit_error, retry-after), and its usage records
// carry door "anthropic".
func TestAnthropicDoorSharesQuota(t *testing.T) {
	w := newWorld(t, fastPace())
	dir := t.TempDir()
	g := w.start(map[string]string{"JETWAY_USAGE_DIR": dir})
	tok := w.token("shared-user", "fabrikam", "fabrikam-docs", time.Hour) // 20,000 tokens an hour for the app
	ws := w.dial(g, "shared-user", func(o *client.Options) { o.Token = func(context.Context) (string, error) { return tok, nil } })
	c := anthropicClient(g, tok)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	var raw *http.Response
	if _, err := c.Messages.New(ctx, anthropic.MessageNewParams{Model: "mock-a", MaxTokens: 10, Messages: userMessage("anthropic door")},
		option.WithResponseInto(&raw)); err != nil {
		t.Fatal(err)
	}
	ids := map[string]string{raw.Header.Get("request-id"): "anthropic"}
	long := strings.Repeat("spend the quota ", 1200) // about 4,800 tokens each
	refused := false
	for i := 0; i < 10 && !refused; i++ {
		req := ask(long + strconv.Itoa(i))
		req.MaxTokens = 10
		call, err := ws.Send(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		ids[call.ID] = "ws"
		_, err = waitCall(t, call, 20*time.Second)
		var pe *client.Error
		if errors.As(err, &pe) && pe.Code == "quota_exceeded" {
			refused = true
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if !refused {
		t.Fatal("the WebSocket never used the quota up")
	}
	_, err := c.Messages.New(ctx, anthropic.MessageNewParams{Model: "mock-a", MaxTokens: 10, Messages: userMessage(long + "anthropic")},
		option.WithResponseInto(&raw))
	var e *anthropic.Error
	if !errors.As(err, &e) || e.StatusCode != 429 || e.Type() != anthropic.ErrorTypeRateLimitError || raw.Header.Get("retry-after") == "" {
		t.Fatalf("after the WebSocket used the quota up, the Anthropic door answered %v", err)
	}
	ids[raw.Header.Get("request-id")] = "anthropic"

	g.stop(t) // the drain flushes the usage sink
	recs, _, err := telemetry.ReadUsageDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	doors := map[string]string{}
	for _, r := range recs {
		doors[r.RequestID] = r.Door
	}
	for id, door := range ids {
		if doors[id] != door {
			t.Errorf("request %s: usage record door %q, want %q", id, doors[id], door)
		}
	}
}

// TestAnthropicNodeClient runs the official npm package @anthropic-ai/sdk
// under node's test runner (testdata/anthropic/*.test.mjs) against a live
// gateway.
func TestAnthropicNodeClient(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node is required for the @anthropic-ai/sdk tests (apt-get install nodejs npm; then make test-deps)")
	}
	if _, err := os.Stat(filepath.Join("..", "..", "node_modules", "@anthropic-ai", "sdk", "package.json")); err != nil {
		t.Fatal("the npm package @anthropic-ai/sdk is missing: run `make test-deps` (npm ci) at the repository root")
	}
	files, err := filepath.Glob(filepath.Join("testdata", "anthropic", "*.test.mjs"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no test files in testdata/anthropic (%v)", err)
	}
	w := newWorld(t, mockmodelOptions{TTFT: time.Millisecond, PerToken: 2 * time.Millisecond})
	g := w.start(nil)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	args := append([]string{"--test", "--test-reporter=tap", "--test-concurrency=4"}, files...)
	cmd := exec.CommandContext(ctx, node, args...)
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ANTHROPIC_") { // the package reads its own settings from there
			env = append(env, kv)
		}
	}
	cmd.Env = append(env, "JETWAY_TEST_BASE_URL=http://"+g.Addr,
		"JETWAY_TEST_TOKEN="+w.token("node-user", "contoso", "contoso-support", time.Hour),
		"JETWAY_TEST_TOKEN_TINY="+w.token("node-tiny", "fabrikam", "fabrikam-tiny", time.Hour),
		"JETWAY_TEST_TOKEN_AGENT="+w.token("node-agent", "contoso", "contoso-agent", time.Hour))
	out, err := cmd.CombinedOutput()
	pass, fail := tapCount(out, "pass"), tapCount(out, "fail")
	if err != nil || fail != 0 || pass == 0 {
		t.Fatalf("node --test: %v (pass %d, fail %d)\n%s", err, pass, fail, out)
	}
	t.Logf("node --test: %d passed", pass)
}

// TestAnthropicGoCacheControl: cache_control marks the prompt cache's
// points. On an app with prompt_cache off (the gateway places none), a
// system prompt marked with cache_control is written to the model's cache
// by the first request and read by the next, and the usage says so in
// Anthropic's fields, streamed and whole.
func TestAnthropicGoCacheControl(t *testing.T) {
	w := newWorld(t, fastPace())
	g := w.start(nil)
	c := anthropicClient(g, w.token("cache-user", "contoso", "contoso-chat-off", time.Hour))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	long := strings.Repeat("The boarding bridge keeps every passenger dry. ", 200) // about 2,400 tokens
	ask := func(q string) anthropic.MessageNewParams {
		return anthropic.MessageNewParams{Model: "claude-cached", MaxTokens: 20, Messages: userMessage(q),
			System: []anthropic.TextBlockParam{{Text: long, CacheControl: anthropic.NewCacheControlEphemeralParam()}}}
	}
	first, err := c.Messages.New(ctx, ask("first question"))
	if err != nil {
		t.Fatal(err)
	}
	if first.Usage.CacheCreationInputTokens == 0 || first.Usage.CacheReadInputTokens != 0 {
		t.Fatalf("first request usage %+v: want a cache write", first.Usage)
	}
	acc := accumulate(t, c.Messages.NewStreaming(ctx, ask("second question")))
	if acc.Usage.CacheReadInputTokens < first.Usage.CacheCreationInputTokens || acc.Usage.InputTokens >= acc.Usage.CacheReadInputTokens {
		t.Fatalf("second request usage %+v: want the system prompt read from the cache", acc.Usage)
	}
	// Without cache_control nothing is cached on this app.
	plain := ask("third question")
	plain.System[0].CacheControl = anthropic.CacheControlEphemeralParam{}
	res, err := c.Messages.New(ctx, plain)
	if err != nil {
		t.Fatal(err)
	}
	if res.Usage.CacheReadInputTokens != 0 || res.Usage.CacheCreationInputTokens != 0 {
		t.Fatalf("unmarked request usage %+v", res.Usage)
	}
}
