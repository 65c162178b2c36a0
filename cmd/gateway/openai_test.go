package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/jetway-gateway/jetway/client"
	"github.com/jetway-gateway/jetway/internal/telemetry"
)

// openaiClient is the official Go package pointed at the gateway, with the
// JWT as its API key.
func openaiClient(g *gw, token string) oai.Client {
	return oai.NewClient(option.WithBaseURL("http://"+g.Addr+"/v1/"), option.WithAPIKey(token), option.WithMaxRetries(0))
}

// TestOpenAIGoStreamEqualsWebSocket: the official Go package, streaming
// through its accumulator, gets the answer the WebSocket gets for the same
// prompt, with usage in the last chunk.
func TestOpenAIGoStreamEqualsWebSocket(t *testing.T) {
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
	c := openaiClient(g, w.token("door-user", "contoso", "contoso-support", time.Hour))
	var raw *http.Response
	st := c.Chat.Completions.NewStreaming(ctx, oai.ChatCompletionNewParams{
		Messages:      []oai.ChatCompletionMessageParamUnion{oai.UserMessage(prompt)},
		Model:         "mock-a",
		StreamOptions: oai.ChatCompletionStreamOptionsParam{IncludeUsage: oai.Bool(true)},
	}, option.WithResponseInto(&raw))
	acc := oai.ChatCompletionAccumulator{}
	for st.Next() {
		acc.AddChunk(st.Current())
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	if len(acc.Choices) != 1 || acc.Choices[0].Message.Content != wsDone.Text || wsDone.Text != expected("mock-a", prompt, 300) {
		t.Fatalf("openai-go answer %q\nwebsocket answer %q", acc.Choices[0].Message.Content, wsDone.Text)
	}
	if acc.Choices[0].FinishReason != "stop" || acc.Usage.CompletionTokens != 300 || acc.Usage.PromptTokens == 0 || acc.Model != "mock-a" {
		t.Errorf("accumulated %+v", acc.ChatCompletion)
	}
	if raw == nil || raw.Header.Get("x-request-id") == "" {
		t.Errorf("no x-request-id header")
	}

	// Non-streaming, the same answer again in one body.
	res, err := c.Chat.Completions.New(ctx, oai.ChatCompletionNewParams{
		Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage(prompt)}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Choices[0].Message.Content != wsDone.Text || res.Usage.CompletionTokens != 300 {
		t.Errorf("non-streaming %+v", res)
	}
}

// TestDoorsShareQuotaAndUsageFiles: a quota used up on the WebSocket refuses
// the OpenAI door too (429 quota_exceeded with Retry-After), and both doors'
// usage records land in the same files, each with its door.
func TestDoorsShareQuotaAndUsageFiles(t *testing.T) {
	w := newWorld(t, fastPace())
	dir := t.TempDir()
	g := w.start(map[string]string{"JETWAY_USAGE_DIR": dir})
	tok := w.token("shared-user", "fabrikam", "fabrikam-docs", time.Hour) // 20,000 tokens an hour for the app
	ws := w.dial(g, "shared-user", func(o *client.Options) { o.Token = func(context.Context) (string, error) { return tok, nil } })
	c := openaiClient(g, tok)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// One answer through each door first.
	var raw *http.Response
	if _, err := c.Chat.Completions.New(ctx, oai.ChatCompletionNewParams{
		Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("openai door")}}, option.WithResponseInto(&raw)); err != nil {
		t.Fatal(err)
	}
	openaiID := raw.Header.Get("x-request-id")
	ids := map[string]string{openaiID: "openai"}
	// Then the WebSocket uses the quota up with long prompts.
	long := strings.Repeat("spend the quota ", 1200) // about 4,800 tokens each
	var refused bool
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
	// The same request the WebSocket was refused, through this door.
	_, err := c.Chat.Completions.New(ctx, oai.ChatCompletionNewParams{MaxTokens: oai.Int(10),
		Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage(long + "openai")}}, option.WithResponseInto(&raw))
	var apiErr *oai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 429 || apiErr.Code != "quota_exceeded" || raw.Header.Get("Retry-After") == "" {
		t.Fatalf("after the WebSocket used the quota up, the OpenAI door answered %v", err)
	}
	ids[raw.Header.Get("x-request-id")] = "openai"

	g.stop(t) // the drain flushes the usage sink
	doors := map[string]string{}
	err = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var r telemetry.UsageRecord
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				return err
			}
			doors[r.RequestID] = r.Door
		}
		return sc.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	for id, door := range ids {
		if doors[id] != door {
			t.Errorf("request %s: usage record door %q, want %q (records %v)", id, doors[id], door, doors)
		}
	}
}

// TestOpenAINodeClient runs the official JavaScript package `openai` under
// node's test runner (testdata/openai/*.test.mjs) against a live gateway.
func TestOpenAINodeClient(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node is required for the openai package tests (apt-get install nodejs npm; then make test-deps)")
	}
	if _, err := os.Stat(filepath.Join("..", "..", "node_modules", "openai", "package.json")); err != nil {
		t.Fatal("the npm package openai is missing: run `make test-deps` (npm ci) at the repository root")
	}
	files, err := filepath.Glob(filepath.Join("testdata", "openai", "*.test.mjs"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no test files in testdata/openai (%v)", err)
	}
	w := newWorld(t, mockmodelOptions{TTFT: time.Millisecond, PerToken: 2 * time.Millisecond})
	g := w.start(map[string]string{"JETWAY_MAX_INFLIGHT_PER_USER": "2"})
	tokens := map[string]string{
		"JETWAY_TEST_TOKEN":       w.token("node-user", "contoso", "contoso-support", time.Hour),
		"JETWAY_TEST_TOKEN_TINY":  w.token("node-tiny", "fabrikam", "fabrikam-tiny", time.Hour),
		"JETWAY_TEST_TOKEN_BUSY":  w.token("node-busy", "contoso", "contoso-support", time.Hour),
		"JETWAY_TEST_TOKEN_AGENT": w.token("node-agent", "contoso", "contoso-agent", time.Hour),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	args := append([]string{"--test", "--test-reporter=tap", "--test-concurrency=4"}, files...)
	cmd := exec.CommandContext(ctx, node, args...)
	cmd.Env = append(os.Environ(), "JETWAY_TEST_BASE_URL=http://"+g.Addr+"/v1")
	for k, v := range tokens {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.CombinedOutput()
	pass, fail := tapCount(out, "pass"), tapCount(out, "fail")
	if err != nil || fail != 0 || pass == 0 {
		t.Fatalf("node --test: %v (pass %d, fail %d)\n%s", err, pass, fail, out)
	}
	t.Logf("node --test: %d passed", pass)
}

// tapCount reads "# pass N" / "# fail N" from TAP output (-1 if absent).
func tapCount(out []byte, what string) int {
	m := regexp.MustCompile(`(?m)^# ` + what + ` (\d+)$`).FindSubmatch(out)
	if m == nil {
		return -1
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// TestOpenAIGoToolCallEqualsWebSocket: the official Go package's stream
// accumulator assembles the tool call the WebSocket's done frame holds for
// the same prompt (id, name, arguments), finish_reason tool_calls; the
// accumulated message sent back with a tool message is answered in text.
func TestOpenAIGoToolCallEqualsWebSocket(t *testing.T) {
	w := newWorld(t, fastPace())
	g := w.start(nil)
	const prompt = "international timezone conversion for Paris please"

	wsCall, err := w.dialAgent(g, "tool-user", nil).Send(context.Background(), toolRequest(prompt, &frames{}))
	if err != nil {
		t.Fatal(err)
	}
	wsDone, err := waitCall(t, wsCall, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	wsCalls := wsDone.ToolCalls()
	if len(wsCalls) != 1 {
		t.Fatalf("the WebSocket's answer has %d tool calls", len(wsCalls))
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := openaiClient(g, w.token("tool-user", "contoso", "contoso-agent", time.Hour))
	var schema map[string]any
	_ = json.Unmarshal(lookupTool.InputSchema, &schema)
	tools := []oai.ChatCompletionToolUnionParam{oai.ChatCompletionFunctionTool(oai.FunctionDefinitionParam{
		Name: lookupTool.Name, Description: oai.String(lookupTool.Description), Parameters: schema})}
	params := oai.ChatCompletionNewParams{Model: "mock-tools", Tools: tools, Temperature: oai.Float(0),
		Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage(prompt)}}
	st := c.Chat.Completions.NewStreaming(ctx, params)
	acc := oai.ChatCompletionAccumulator{}
	finished := 0
	for st.Next() {
		acc.AddChunk(st.Current())
		if _, ok := acc.JustFinishedToolCall(); ok {
			finished++
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	msg := acc.Choices[0].Message
	if len(msg.ToolCalls) != 1 || acc.Choices[0].FinishReason != "tool_calls" || finished != 1 || msg.Content != wsDone.Text {
		t.Fatalf("accumulated %+v (finish %q, %d finished tool calls)", msg, acc.Choices[0].FinishReason, finished)
	}
	tc := msg.ToolCalls[0]
	if tc.ID != wsCalls[0].ID || tc.Type != "function" || tc.Function.Name != wsCalls[0].Name || tc.Function.Arguments != string(wsCalls[0].Input) {
		t.Fatalf("openai-go tool call %+v\nwebsocket tool call %+v", tc, wsCalls[0])
	}

	// The next turn: the accumulated message and the tool's result.
	params.Messages = append(params.Messages, msg.ToParam(), oai.ToolMessage("14:02 in Paris", tc.ID))
	res, err := c.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if res.Choices[0].FinishReason != "stop" || len(res.Choices[0].Message.ToolCalls) != 0 || res.Choices[0].Message.Content == "" {
		t.Fatalf("second turn %+v", res.Choices[0])
	}
}
