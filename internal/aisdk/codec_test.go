package aisdk

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jetway-gateway/jetway/internal/call"
	"github.com/jetway-gateway/jetway/internal/stream"
)

// deliver is every frame one delivery of l writes for requestId.
func deliver(t *testing.T, l *stream.Log, requestID string, lastSequence int) []string {
	t.Helper()
	return deliverAs(t, l, requestID, lastSequence, "")
}

func deliverAs(t *testing.T, l *stream.Log, requestID string, lastSequence int, messageID string) []string {
	t.Helper()
	fr := newFrames(requestID, lastSequence, messageID)
	var out []string
	c := codec{}
	for b := range l.Follow(context.Background(), c, 0) {
		for _, f := range fr.build(&b) {
			out = append(out, string(f))
		}
	}
	return out
}

// answer is a log of an answer with reasoning (and its signature), text
// and a tool call, ended done.
func answer() *stream.Log {
	l := stream.NewLog("u", "req12345678", "h", time.Time{})
	l.Accept(stream.NewAccepted(call.Accepted{RequestID: "req12345678", Model: "mock-tools",
		Quota: &call.Quota{Window: "hour", Limit: 1000, Remaining: 900}}))
	for _, p := range []call.Piece{
		{Block: 0, Kind: call.KindReasoning, Reasoning: "think"},
		{Block: 0, Kind: call.KindReasoning, Signature: "sig=="},
		{Block: 1, Text: "Hello"},
		{Block: 1, Text: " <world>"},
		{Block: 2, Kind: call.KindToolUse, ID: "toolu_1", Name: "get_time"},
		{Block: 2, Kind: call.KindToolUse, Input: `{"tz":`},
		{Block: 2, Kind: call.KindToolUse, Input: `"UTC"}`},
	} {
		l.Append(call.Encode(p))
	}
	l.Finish(stream.DoneTerminal(call.Done{RequestID: "req12345678", CostMicroUSD: 1500, Chunks: 7, Text: "Hello <world>", Model: "mock-tools",
		Usage: call.Usage{InputTokens: 10, OutputTokens: 20}, StopReason: "tool_use", TTFTMs: 5, LatencyMs: 9}), time.Now())
	return l
}

// The core's events become the UI message chunks of one message, numbered
// from 0 per delivery, each block opened and closed around its deltas,
// the facts in metadata before finish, then end.
func TestAnswerChunks(t *testing.T) {
	got := deliver(t, answer(), "r1", -1)
	want := []string{
		`{"type":"chunk","requestId":"r1","sequence":0,"chunk":{"type":"start","messageId":"msg-req12345678"}}`,
		`{"type":"chunk","requestId":"r1","sequence":1,"chunk":{"type":"start-step"}}`,
		`{"type":"chunk","requestId":"r1","sequence":2,"chunk":{"type":"reasoning-start","id":"reasoning-0"}}`,
		`{"type":"chunk","requestId":"r1","sequence":3,"chunk":{"type":"reasoning-delta","id":"reasoning-0","delta":"think"}}`,
		`{"type":"chunk","requestId":"r1","sequence":4,"chunk":{"type":"reasoning-end","id":"reasoning-0","providerMetadata":{"jetway":{"signature":"sig=="}}}}`,
		`{"type":"chunk","requestId":"r1","sequence":5,"chunk":{"type":"text-start","id":"text-1"}}`,
		`{"type":"chunk","requestId":"r1","sequence":6,"chunk":{"type":"text-delta","id":"text-1","delta":"Hello"}}`,
		`{"type":"chunk","requestId":"r1","sequence":7,"chunk":{"type":"text-delta","id":"text-1","delta":" \u003cworld\u003e"}}`,
		`{"type":"chunk","requestId":"r1","sequence":8,"chunk":{"type":"text-end","id":"text-1"}}`,
		`{"type":"chunk","requestId":"r1","sequence":9,"chunk":{"type":"tool-input-start","toolCallId":"toolu_1","toolName":"get_time"}}`,
		`{"type":"chunk","requestId":"r1","sequence":10,"chunk":{"type":"tool-input-delta","toolCallId":"toolu_1","inputTextDelta":"{\"tz\":"}}`,
		`{"type":"chunk","requestId":"r1","sequence":11,"chunk":{"type":"tool-input-delta","toolCallId":"toolu_1","inputTextDelta":"\"UTC\"}"}}`,
		`{"type":"chunk","requestId":"r1","sequence":12,"chunk":{"type":"tool-input-available","toolCallId":"toolu_1","toolName":"get_time","input":{"tz":"UTC"}}}`,
		`{"type":"chunk","requestId":"r1","sequence":13,"chunk":{"type":"message-metadata","messageMetadata":{"jetway":{"request_id":"req12345678","model":"mock-tools","cached":false,"ttft_ms":5,"latency_ms":9,"usage":{"input_tokens":10,"output_tokens":20,"cache_read_input_tokens":0,"cache_write_input_tokens":0},"cost_usd":0.0015,"quota":{"window":"hour","limit":1000,"remaining":900}}}}}`,
		`{"type":"chunk","requestId":"r1","sequence":14,"chunk":{"type":"finish-step"}}`,
		`{"type":"chunk","requestId":"r1","sequence":15,"chunk":{"type":"finish","finishReason":"tool-calls"}}`,
		`{"type":"end","requestId":"r1"}`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("frames:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, f := range got {
		if !json.Valid([]byte(f)) {
			t.Fatalf("not JSON: %s", f)
		}
	}
}

// A replay to another requestId is the same chunks, byte for byte, under
// its own id; lastSequence skips what the client holds.
func TestReplayIsTheSameChunks(t *testing.T) {
	l := answer()
	first := deliver(t, l, "r1", -1)
	again := deliver(t, l, "r2", -1)
	for i := range first {
		if strings.Replace(first[i], `"requestId":"r1"`, `"requestId":"r2"`, 1) != again[i] {
			t.Fatalf("frame %d: %s, then %s", i, first[i], again[i])
		}
	}
	tail := deliver(t, l, "r3", 13)
	if len(tail) != 3 || !strings.Contains(tail[0], `"sequence":14`) {
		t.Fatalf("after sequence 13: %v", tail)
	}
}

// A failure after chunks keeps them visible (an error chunk), then the
// machine-readable metadata, then the error frame; a cancel is an abort.
func TestFailureAndAbortEndings(t *testing.T) {
	chunks, text := 1, "Hel"
	for _, c := range []struct {
		f    call.Failure
		want []string
	}{
		{call.Failure{Code: call.CodeInterrupted, Message: "the server died", Retryable: true, Chunks: &chunks, Text: &text}, []string{
			`{"type":"chunk","requestId":"r","sequence":4,"chunk":{"type":"text-end","id":"text-0"}}`,
			`{"type":"chunk","requestId":"r","sequence":5,"chunk":{"type":"error","errorText":"the server died"}}`,
			`{"type":"chunk","requestId":"r","sequence":6,"chunk":{"type":"message-metadata","messageMetadata":{"jetway":{"error":{"code":"interrupted","status":503,"message":"the server died","retryable":true,"retry_after_ms":0}}}}}`,
			`{"type":"error","requestId":"r","errorText":"the server died"}`,
		}},
		{call.Failure{Code: call.CodeCancelled, Message: "cancelled", Chunks: &chunks, Text: &text}, []string{
			`{"type":"chunk","requestId":"r","sequence":4,"chunk":{"type":"text-end","id":"text-0"}}`,
			`{"type":"chunk","requestId":"r","sequence":5,"chunk":{"type":"abort"}}`,
			`{"type":"end","requestId":"r"}`,
		}},
	} {
		l := stream.NewLog("u", "req12345678", "h", time.Time{})
		l.Accept(stream.NewAccepted(call.Accepted{RequestID: "req12345678"}))
		l.Append("Hel")
		l.Finish(stream.ErrorTerminal(c.f), time.Now())
		got := deliver(t, l, "r", -1)
		if len(got) != 4+len(c.want) || strings.Join(got[4:], "\n") != strings.Join(c.want, "\n") {
			t.Fatalf("%s:\n%s\nwant (after 4):\n%s", c.f.Code, strings.Join(got, "\n"), strings.Join(c.want, "\n"))
		}
	}
}

// A refusal that reached no log is the metadata chunk at sequence 0, then
// the error frame.
func TestRefusalFrames(t *testing.T) {
	got := refusal("r9", call.Failure{Code: call.CodeQuotaExceeded, Message: "Token quota exceeded", Retryable: true, RetryAfterMs: 1200})
	want := []string{
		`{"type":"chunk","requestId":"r9","sequence":0,"chunk":{"type":"message-metadata","messageMetadata":{"jetway":{"error":{"code":"quota_exceeded","status":429,"message":"Token quota exceeded","retryable":true,"retry_after_ms":1200}}}}}`,
		`{"type":"error","requestId":"r9","errorText":"Token quota exceeded"}`,
	}
	if len(got) != 2 || string(got[0]) != want[0] || string(got[1]) != want[1] {
		t.Fatalf("refusal:\n%s\n%s", got[0], got[1])
	}
}

// A continuation (a client tool's output sent back) streams into the
// assistant message it continues, on every delivery.
func TestContinuationKeepsItsMessage(t *testing.T) {
	l := answer()
	for _, rid := range []string{"r1", "r2"} {
		got := deliverAs(t, l, rid, -1, "msg-client-1")
		if want := `{"type":"chunk","requestId":"` + rid + `","sequence":0,"chunk":{"type":"start","messageId":"msg-client-1"}}`; got[0] != want {
			t.Fatalf("start %s, want %s", got[0], want)
		}
	}
}
