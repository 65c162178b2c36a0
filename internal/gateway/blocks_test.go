package gateway_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jetway-gateway/jetway/internal/call"
	"github.com/jetway-gateway/jetway/internal/gateway"
	"github.com/jetway-gateway/jetway/internal/protocol"
	"github.com/jetway-gateway/jetway/internal/quota"
	"github.com/jetway-gateway/jetway/internal/router"
)

func imageRequest(id string) gateway.Request {
	r := request(id, "")
	r.Messages = []call.Message{{Role: "user", Blocks: []call.ContentBlock{{Type: call.BlockText, Text: "look"},
		{Type: call.BlockImage, Format: "png", Data: attachment("\x89PNG data")}}}}
	return r
}

// attachment is data as validation decoded and hashed it.
func attachment(data string) call.Attachment {
	return call.Attachment{Bytes: []byte(data), Digest: sha256.Sum256([]byte(data))}
}

// The chosen model must have every capability the request uses; a
// fallback without one is left out of the chain. Refusals happen before
// any reservation or model call.
func TestCapabilitiesAreCheckedBeforeTheModelCall(t *testing.T) {
	e := newEnv(t)
	var calls atomic.Int32
	var seen router.Call
	var seenChain []router.Target
	g := e.gateway(streamFunc(func(ctx context.Context, chain []router.Target, c router.Call, onDelta func(string)) (router.Outcome, error) {
		calls.Add(1)
		seen, seenChain = c, chain
		return reply("cheap", "a cat")(ctx, chain, c, onDelta)
	}), gateway.Options{})

	// dearfirst: dear (no images) is the chosen model: refused.
	log, _, _ := g.Submit(context.Background(), caller("dearfirst"), imageRequest("req-img-dear"))
	if f := terminal(t, log); f["code"] != protocol.CodeInvalidRequest ||
		f["message"] != `messages[].content: image blocks: model dear is not configured with the "images" capability` {
		t.Errorf("terminal %v", f)
	}
	thinking := request("req-think-1", "")
	thinking.Reasoning = &call.Reasoning{BudgetTokens: 2048}
	log, _, _ = g.Submit(context.Background(), caller("solo"), thinking)
	if f := terminal(t, log); f["code"] != protocol.CodeInvalidRequest ||
		f["message"] != `reasoning: model cheap is not configured with the "reasoning" capability` {
		t.Errorf("terminal %v", f)
	}
	if calls.Load() != 0 || len(e.quotas.settled) != 0 {
		t.Fatalf("%d model calls, settlements %v: refusals must not reach the model or the quota", calls.Load(), e.quotas.settled)
	}

	// chat: cheap (images) would fall back to dear (none): dear is left out.
	log, _, _ = g.Submit(context.Background(), caller("chat"), imageRequest("req-img-chain"))
	if f := terminal(t, log); f["type"] != "done" || f["text"] != "a cat" {
		t.Fatalf("terminal %v", f)
	}
	if len(seenChain) != 1 || seenChain[0].ID != "cheap" {
		t.Fatalf("chain %+v, want cheap alone", seenChain)
	}
	var acc protocol.Accepted
	if err := json.Unmarshal(log.Read(0).Accepted.Stored(), &acc); err != nil || acc.ReservedTokens < quota.EstimateImageTokens || calls.Load() != 1 {
		t.Fatalf("accepted %+v (%v), calls %d: the reservation must count the image", acc, err, calls.Load())
	}
	bs := seen.Messages[0].Blocks
	if len(bs) != 2 || bs[0].Text != "look" || string(bs[1].Data) != "\x89PNG data" || bs[1].Format != "png" {
		t.Fatalf("blocks the model got: %+v", bs)
	}
	recs := e.settle(g)
	images := map[string]int{}
	for _, r := range recs {
		images[r.RequestID] = r.Images
	}
	if len(recs) != 3 || images["req-img-dear"] != 1 || images["req-think-1"] != 0 || images["req-img-chain"] != 1 {
		t.Fatalf("usage records %+v: images must be counted, refused requests too", recs)
	}
}

// blockReply answers in block mode with deltas, as the router does for a
// request with tools or reasoning.
func blockReply(stop string, deltas ...router.BlockDelta) streamFunc {
	return func(ctx context.Context, chain []router.Target, c router.Call, onDelta func(string)) (router.Outcome, error) {
		if c.OnBlock == nil {
			return router.Outcome{}, errors.New("the call is not in block mode")
		}
		for _, d := range deltas {
			c.OnBlock(d)
		}
		return router.Outcome{Model: chain[0].ID, Result: router.Result{Usage: router.Usage{InputTokens: 100, OutputTokens: 50},
			UsageReported: true, StopReason: stop}}, nil
	}
}

// A tool call streams as ordered block chunks; done carries the blocks,
// stop_reason tool_use; the usage record counts the call. Reasoning gets
// room in max_tokens, and its fallback without the capability is left out.
func TestBlocksStreamInOrderAndEndInDone(t *testing.T) {
	e := newEnv(t)
	var seen router.Call
	var seenChain []router.Target
	answer := blockReply(protocol.StopToolUse,
		router.BlockDelta{Block: 0, Kind: router.BlockReasoning, Text: "I should "},
		router.BlockDelta{Block: 0, Kind: router.BlockReasoning, Text: "ask the clock."},
		router.BlockDelta{Block: 0, Kind: router.BlockReasoning, Signature: "sig"},
		router.BlockDelta{Block: 1, Kind: router.BlockText, Text: "Let me check."},
		router.BlockDelta{Block: 2, Kind: router.BlockToolUse, ID: "tooluse_1", Name: "clock"},
		router.BlockDelta{Block: 2, Kind: router.BlockToolUse, Input: `{"tz":"Europe/`},
		router.BlockDelta{Block: 2, Kind: router.BlockToolUse, Input: `Paris"}`})
	g := e.gateway(streamFunc(func(ctx context.Context, chain []router.Target, c router.Call, onDelta func(string)) (router.Outcome, error) {
		seen, seenChain = c, chain
		return answer(ctx, chain, c, onDelta)
	}), gateway.Options{})
	req := request("req-blocks-1", "")
	req.Tools = []call.Tool{{Name: "clock", Description: "the time", InputSchema: []byte(`{"type":"object"}`)}}
	req.ToolChoice = &call.ToolChoice{Mode: call.ToolChoiceAuto}
	req.Reasoning = &call.Reasoning{BudgetTokens: 2048}
	log, _, err := g.Submit(context.Background(), caller("think"), req)
	if err != nil {
		t.Fatal(err)
	}
	terminal(t, log)
	if len(seenChain) != 1 || seenChain[0].ID != "thinker" {
		t.Fatalf("chain %+v, want thinker alone (cheap cannot reason)", seenChain)
	}
	if seen.ReasoningBudget != 2048 || seen.MaxTokens != 2048+1024 || len(seen.Tools) != 1 || seen.Tools[0].Name != "clock" ||
		seen.ToolChoice == nil || seen.ToolChoice.Mode != router.ToolChoiceAuto {
		t.Fatalf("call %+v", seen)
	}
	var frames []string
	for i, p := range log.Read(0).Chunks {
		frames = append(frames, string(protocol.AppendChunk(nil, "req-blocks-1", i+1, call.Decode(p))))
	}
	want := []string{
		`{"type":"chunk","request_id":"req-blocks-1","seq":1,"text":"","kind":"reasoning","reasoning":"I should "}`,
		`{"type":"chunk","request_id":"req-blocks-1","seq":2,"text":"","kind":"reasoning","reasoning":"ask the clock."}`,
		`{"type":"chunk","request_id":"req-blocks-1","seq":3,"text":"","kind":"reasoning","signature":"sig"}`,
		`{"type":"chunk","request_id":"req-blocks-1","seq":4,"text":"Let me check.","block":1}`,
		`{"type":"chunk","request_id":"req-blocks-1","seq":5,"text":"","block":2,"kind":"tool_use","id":"tooluse_1","name":"clock"}`,
		`{"type":"chunk","request_id":"req-blocks-1","seq":6,"text":"","block":2,"kind":"tool_use","input":"{\"tz\":\"Europe/"}`,
		`{"type":"chunk","request_id":"req-blocks-1","seq":7,"text":"","block":2,"kind":"tool_use","input":"Paris\"}"}`,
	}
	if strings.Join(frames, "\n") != strings.Join(want, "\n") {
		t.Fatalf("chunk frames\n%s\nwant\n%s", strings.Join(frames, "\n"), strings.Join(want, "\n"))
	}
	var done protocol.Done
	if err := json.Unmarshal(log.Read(0).Terminal.Stored(), &done); err != nil {
		t.Fatal(err)
	}
	wantBlocks := `[{"type":"reasoning","text":"I should ask the clock.","signature":"sig"},{"type":"text","text":"Let me check."},` +
		`{"type":"tool_use","name":"clock","id":"tooluse_1","input":{"tz":"Europe/Paris"}}]`
	if b, _ := json.Marshal(done.Blocks); done.Type != "done" || done.Text != "Let me check." || done.StopReason != "tool_use" ||
		done.Chunks != 7 || string(b) != wantBlocks {
		t.Fatalf("done %+v\nblocks %s\nwant   %s", done, b, wantBlocks)
	}
	if calls := done.ToolCalls(); len(calls) != 1 || done.ReasoningText() != "I should ask the clock." {
		t.Fatalf("tool calls %+v, reasoning %q", calls, done.ReasoningText())
	}
	recs := e.settle(g)
	if len(recs) != 1 || recs[0].ToolCalls != 1 || recs[0].Outcome != "done" {
		t.Fatalf("usage records %+v", recs)
	}

	// A request with tools whose answer is plain text still gets its blocks.
	g2 := e.gateway(blockReply("end_turn", router.BlockDelta{Kind: router.BlockText, Text: "no tool needed"}), gateway.Options{})
	req = request("req-blocks-2", "")
	req.Tools = []call.Tool{{Name: "clock", InputSchema: []byte(`{"type":"object"}`)}}
	log, _, _ = g2.Submit(context.Background(), caller("solo"), req)
	if f := terminal(t, log); f["text"] != "no tool needed" || len(f["blocks"].([]any)) != 1 || log.Read(0).Chunks[0] != "no tool needed" {
		t.Fatalf("terminal %v, pieces %q", f, log.Read(0).Chunks)
	}
	e.settle(g2)
}

// The cache key covers blocks: the same image is a hit, another is not.
func TestAttachmentRequestsAreCachedByTheirBytes(t *testing.T) {
	e := newEnv(t)
	var calls atomic.Int32
	g := e.gateway(streamFunc(func(ctx context.Context, chain []router.Target, c router.Call, onDelta func(string)) (router.Outcome, error) {
		calls.Add(1)
		return reply("cheap", "a cat")(ctx, chain, c, onDelta)
	}), gateway.Options{})
	other := imageRequest("req-cache-img-3")
	other.Messages[0].Blocks[1].Data = attachment("another image")
	for i, r := range []gateway.Request{imageRequest("req-cache-img-1"), imageRequest("req-cache-img-2"), other} {
		log, _, _ := g.Submit(context.Background(), caller("cached"), r)
		f := terminal(t, log)
		if want := i == 1; f["type"] != "done" || f["cached"] != want {
			t.Fatalf("request %d: terminal %v, want cached=%v", i, f, want)
		}
	}
	if calls.Load() != 2 {
		t.Fatalf("%d model calls, want 2 (the second request was a hit)", calls.Load())
	}
	e.settle(g)
}

// Issue 23: a reasoning budget near the int range wrapped the sum with the
// app's default answer length, and the refusal named a negative max_tokens.
func TestHugeReasoningBudgetIsRefusedWithoutOverflow(t *testing.T) {
	e := newEnv(t)
	var calls atomic.Int32
	g := e.gateway(streamFunc(func(ctx context.Context, chain []router.Target, c router.Call, onDelta func(string)) (router.Outcome, error) {
		calls.Add(1)
		return reply("thinker", "ok")(ctx, chain, c, onDelta)
	}), gateway.Options{})
	for i, budget := range []int{math.MaxInt, math.MaxInt - 1000, 8192} {
		req := request(fmt.Sprintf("req-budget-%d", i), "")
		req.Reasoning = &call.Reasoning{BudgetTokens: budget}
		log, _, err := g.Submit(context.Background(), caller("think"), req)
		if err != nil {
			t.Fatal(err)
		}
		f := terminal(t, log)
		want := fmt.Sprintf("reasoning.budget_tokens %d must be less than this app's max_tokens limit of 8192", budget)
		if f["code"] != protocol.CodeInvalidRequest || f["message"] != want {
			t.Errorf("budget %d: terminal %v, want invalid_request %q", budget, f, want)
		}
	}
	// The same socket's next request is served.
	ok := request("req-budget-ok", "")
	ok.Reasoning = &call.Reasoning{BudgetTokens: 2048}
	log, _, _ := g.Submit(context.Background(), caller("think"), ok)
	if f := terminal(t, log); f["type"] != "done" {
		t.Fatalf("a valid budget after the refusals: %v", f)
	}
	if recs := e.settle(g); len(recs) != 4 || calls.Load() != 1 {
		t.Fatalf("%d usage records, %d model calls: want 4 and 1", len(recs), calls.Load())
	}
}
