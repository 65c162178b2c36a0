package router_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jetway-gateway/jetway/internal/mockmodel"
	"github.com/jetway-gateway/jetway/internal/router"
)

// blockRun streams c in block mode and returns the block deltas in order;
// onDelta must not be called.
func blockRun(t *testing.T, ctx context.Context, s interface {
	Stream(context.Context, router.Call, func(string)) (router.Result, error)
}, c router.Call) ([]router.BlockDelta, router.Result, error) {
	t.Helper()
	var ds []router.BlockDelta
	c.OnBlock = func(d router.BlockDelta) { ds = append(ds, d) }
	res, err := s.Stream(ctx, c, func(text string) { t.Errorf("onDelta(%q) in block mode", text) })
	return ds, res, err
}

// joined concatenates the pieces of one kind (Text, or Input for tool_use).
func joined(ds []router.BlockDelta, kind string) string {
	var b strings.Builder
	for _, d := range ds {
		if d.Kind == kind {
			b.WriteString(d.Text + d.Input)
		}
	}
	return b.String()
}

var clockTool = []router.Tool{{Name: "clock", Description: "the time", InputSchema: json.RawMessage(`{"type":"object","properties":{"tz":{"type":"string"}},"maxProperties":1e2}`)}}

func TestReasoningBlocksInOrder(t *testing.T) {
	_, b := start(t, mockmodel.Options{TTFT: mockmodel.NoDelay, PerToken: mockmodel.NoDelay, Tokens: 30})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := call("mock-reasoning", "", "think first")
	c.ReasoningBudget = 2048
	ds, res, err := blockRun(t, ctx, b, c)
	if err != nil {
		t.Fatal(err)
	}
	// Reasoning (block 0) with its signature last, then text (block 1).
	var order []string
	for _, d := range ds {
		k := d.Kind
		if d.Signature != "" {
			k = "signature"
		}
		if len(order) == 0 || order[len(order)-1] != k {
			order = append(order, k)
		}
	}
	if got := strings.Join(order, ","); got != "reasoning,signature,text" {
		t.Fatalf("block order %s", got)
	}
	if ds[0].Block != 0 || ds[len(ds)-1].Block != 1 {
		t.Fatalf("block indexes %d..%d", ds[0].Block, ds[len(ds)-1].Block)
	}
	if want := strings.Join(mockmodel.Tokens("mock-reasoning", "", []string{"think first"}, 14), ""); joined(ds, router.BlockText) != want {
		t.Fatalf("text %q, want %q", joined(ds, router.BlockText), want)
	}
	if res.StopReason != "end_turn" || res.Usage.OutputTokens != 30 {
		t.Fatalf("result %+v", res)
	}

	// Without OnBlock the same model streams its text only, as before.
	deltas, _, err := run(ctx, b, call("mock-reasoning", "", "think first"))
	if err != nil || strings.Join(deltas, "") != joined(ds, router.BlockText) {
		t.Fatalf("text-only call: %q, %v", strings.Join(deltas, ""), err)
	}
}

func TestToolCallBlocks(t *testing.T) {
	_, b := start(t, unpaced)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const prompt = "what time is it in Paris?"
	c := call("mock-a", "", prompt)
	c.Tools, c.ToolChoice = clockTool, &router.ToolChoice{Mode: router.ToolChoiceAny}
	ds, res, err := blockRun(t, ctx, b, c)
	if err != nil {
		t.Fatal(err)
	}
	id, input := mockmodel.Tool(1, prompt)
	var start router.BlockDelta
	for _, d := range ds {
		if d.Name != "" {
			start = d
		}
	}
	if start.ID != id || start.Name != "clock" || start.Block != 1 || joined(ds, router.BlockToolUse) != input {
		t.Fatalf("tool call %+v, input %q; want %s clock %s", start, joined(ds, router.BlockToolUse), id, input)
	}
	if res.StopReason != "tool_use" {
		t.Fatalf("stop reason %q", res.StopReason)
	}

	// The next turn: the history carries the call, the result and an image.
	c.Messages = append(c.Messages,
		router.Message{Role: "assistant", Blocks: []router.Block{
			{Kind: router.BlockReasoning, Text: "use the clock", Signature: "sig"},
			{Kind: router.BlockToolUse, ID: id, Name: "clock", Input: json.RawMessage(input)}}},
		router.Message{Role: "user", Blocks: []router.Block{
			{Kind: router.BlockToolResult, ID: id, Status: "success", Content: []router.Block{{Kind: router.BlockText, Text: "14:02"}}},
			{Kind: router.BlockImage, Format: "png", Data: []byte("\x89PNG")},
			{Kind: router.BlockDocument, Format: "md", Name: "notes", Data: []byte("# notes")}}})
	ds, res, err = blockRun(t, ctx, b, c)
	if err != nil || res.StopReason != "end_turn" || joined(ds, router.BlockText) == "" || joined(ds, router.BlockToolUse) != "" {
		t.Fatalf("after the tool result: %+v %+v %v", ds, res, err)
	}
}

func TestOversizedImageIsAValidationError(t *testing.T) {
	srv, b := start(t, unpaced)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := call("mock-a", "", "look")
	c.Messages[0].Blocks = []router.Block{{Kind: router.BlockImage, Format: "png", Data: make([]byte, 3932161)}}
	_, _, err := blockRun(t, ctx, b, c)
	if me := modelError(t, err); !errors.Is(err, router.ErrValidation) || me.Streamed {
		t.Fatalf("error %v", err)
	}
	if srv.Requests("mock-a") != 1 {
		t.Fatalf("requests %d", srv.Requests("mock-a"))
	}
}

// A throttled model falls back before its first block; the answer is the
// next model's, blocks and all.
func TestFallbackBeforeTheFirstBlock(t *testing.T) {
	_, b := start(t, unpaced)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r := router.New(b, router.Options{})
	c := call("", "", "think")
	var ds []router.BlockDelta
	c.OnBlock = func(d router.BlockDelta) { ds = append(ds, d) }
	out, err := r.Stream(ctx, []router.Target{{ID: "t", BedrockID: "mock-throttle"}, {ID: "r", BedrockID: "mock-reasoning"}}, c,
		func(text string) { t.Errorf("onDelta(%q) in block mode", text) })
	if err != nil || out.Model != "r" || out.FallbackFrom != "t" || len(ds) == 0 || ds[0].Kind != router.BlockReasoning {
		t.Fatalf("outcome %+v, %d deltas, %v", out, len(ds), err)
	}
}
