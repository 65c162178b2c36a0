package responses

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jetway-gateway/jetway/internal/call"
	"github.com/jetway-gateway/jetway/internal/stream"
)

// encodeAll runs a codec over an answer's pieces and terminal.
func encodeAll(t *testing.T, c codec, pieces []call.Piece, term *stream.Terminal) []byte {
	t.Helper()
	log := stream.NewLog("owner", "req12345", "", time.Unix(1700000000, 0))
	e := c.NewEncoder(log)
	out := e.Accepted(&stream.Accepted{Accepted: call.Accepted{RequestID: "req12345", Model: "mock-tools"}})
	for i, p := range pieces {
		out = e.AppendChunk(out, i+1, p)
	}
	return append(out, e.Terminal(term, len(pieces))...)
}

var answer = []call.Piece{
	{Block: 0, Kind: call.KindReasoning, Reasoning: "think"},
	{Block: 0, Kind: call.KindReasoning, Reasoning: " more"},
	{Block: 0, Kind: call.KindReasoning, Signature: "sig"},
	{Block: 1, Text: "Hello"},
	{Block: 1, Text: " world"},
	{Block: 2, Kind: call.KindToolUse, ID: "call_1", Name: "get_weather"},
	{Block: 2, Kind: call.KindToolUse, Input: `{"city":`},
	{Block: 2, Kind: call.KindToolUse, Input: `"Paris"}`},
}

var answerDone = &call.Done{RequestID: "req12345", Model: "mock-tools", StopReason: "tool_use",
	Usage: call.Usage{InputTokens: 10, OutputTokens: 8, CacheReadInputTokens: 4},
	Blocks: []call.Block{{Type: call.BlockReasoning, Text: "think more", Signature: "sig"},
		{Type: call.BlockText, Text: "Hello world"},
		{Type: call.BlockToolUse, ID: "call_1", Name: "get_weather", Input: json.RawMessage(`{"city":"Paris"}`)}}}

// TestEventsInOrder: every event in the order OpenAI streams them, with
// contiguous sequence numbers from 0, and a final response whose output
// equals the whole framing's.
func TestEventsInOrder(t *testing.T) {
	keys, _ := NewKeys(bytes.Repeat([]byte{7}, 32))
	lines := encodeAll(t, codec{framingLines, keys}, answer, &stream.Terminal{Done: answerDone})
	var types []string
	var last map[string]json.RawMessage
	for i, line := range strings.Split(strings.TrimSuffix(string(lines), "\n"), "\n") {
		var ev struct {
			Type string `json:"type"`
			Seq  int    `json:"sequence_number"`
		}
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("line %d: %v", i, err)
		}
		if ev.Seq != i {
			t.Fatalf("event %d (%s) has sequence_number %d", i, ev.Type, ev.Seq)
		}
		types = append(types, ev.Type)
		_ = json.Unmarshal([]byte(line), &last)
	}
	want := []string{"response.created", "response.in_progress",
		"response.output_item.added", "response.reasoning_summary_part.added",
		"response.reasoning_summary_text.delta", "response.reasoning_summary_text.delta",
		"response.reasoning_summary_text.done", "response.reasoning_summary_part.done", "response.output_item.done",
		"response.output_item.added", "response.content_part.added", "response.output_text.delta", "response.output_text.delta",
		"response.output_text.done", "response.content_part.done", "response.output_item.done",
		"response.output_item.added", "response.function_call_arguments.delta", "response.function_call_arguments.delta",
		"response.function_call_arguments.done", "response.output_item.done", "response.completed"}
	if strings.Join(types, " ") != strings.Join(want, " ") {
		t.Fatalf("events\n got %v\nwant %v", types, want)
	}
	var final struct {
		Output []json.RawMessage `json:"output"`
		Usage  usage             `json:"usage"`
		Status string            `json:"status"`
	}
	_ = json.Unmarshal(last["response"], &final)
	whole := encodeAll(t, codec{framingWhole, keys}, answer, &stream.Terminal{Done: answerDone})
	var w struct {
		Output []json.RawMessage `json:"output"`
	}
	if err := json.Unmarshal(whole, &w); err != nil {
		t.Fatal(err)
	}
	if len(final.Output) != 3 || len(w.Output) != 3 {
		t.Fatalf("output items: streamed %d, whole %d", len(final.Output), len(w.Output))
	}
	for i := range w.Output {
		var a, b any
		_ = json.Unmarshal(final.Output[i], &a)
		_ = json.Unmarshal(w.Output[i], &b)
		ja, _ := json.Marshal(a)
		jb, _ := json.Marshal(b)
		if string(ja) != string(jb) {
			t.Errorf("item %d streamed %s\nwhole %s", i, ja, jb)
		}
	}
	if final.Status != "completed" || final.Usage.InputTokens != 14 || final.Usage.InputTokensDetails.CachedTokens != 4 ||
		final.Usage.OutputTokensDetails.ReasoningTokens != 3 {
		t.Errorf("final %+v", final)
	}
	// The reasoning round-trips through its encrypted_content.
	var r reasoningItem
	_ = json.Unmarshal(final.Output[0], &r)
	text, sig, ok := keys.open(r.EncryptedContent)
	if !ok || text != "think more" || sig != "sig" {
		t.Errorf("encrypted_content opens to %q %q %v", text, sig, ok)
	}
	other, _ := NewKeys(bytes.Repeat([]byte{8}, 32))
	if _, _, ok := other.open(r.EncryptedContent); ok {
		t.Error("another key opened the reasoning")
	}
	// The same log encodes to the same bytes (every follower, every server).
	if again := encodeAll(t, codec{framingLines, keys}, answer, &stream.Terminal{Done: answerDone}); !bytes.Equal(again, lines) {
		t.Error("a second encoding differs")
	}
	// SSE: the same events, one SSE event each.
	sse := encodeAll(t, codec{framingSSE, keys}, answer, &stream.Terminal{Done: answerDone})
	if n := strings.Count(string(sse), "\n\n"); n != len(want) || !strings.HasPrefix(string(sse), "event: response.created\ndata: {") {
		t.Errorf("SSE has %d events", n)
	}
}

// TestEndings: max tokens and interruption are incomplete (with what was
// saved), a failure is response.failed, a refusal before acceptance one
// error event, a cancel status cancelled.
func TestEndings(t *testing.T) {
	text := "partial"
	chunks := 1
	cases := []struct {
		name   string
		term   *stream.Terminal
		typ    string
		status string
		reason string
	}{
		{"max tokens", &stream.Terminal{Done: &call.Done{Text: "Hi", StopReason: "max_tokens"}}, "response.incomplete", "incomplete", "max_output_tokens"},
		{"interrupted", &stream.Terminal{Error: &call.Failure{Code: call.CodeInterrupted, Chunks: &chunks, Text: &text}}, "response.incomplete", "incomplete", "interrupted"},
		{"model error", &stream.Terminal{Error: &call.Failure{Code: call.CodeModelError, Message: "boom"}}, "response.failed", "failed", ""},
		{"cancelled", &stream.Terminal{Error: &call.Failure{Code: call.CodeCancelled, Message: "cancelled"}}, "response.failed", "cancelled", ""},
	}
	for _, c := range cases {
		out := encodeAll(t, codec{framingLines, nil}, []call.Piece{{Text: "Hi"}}, c.term)
		lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
		var ev struct {
			Type     string `json:"type"`
			Response struct {
				Status            string             `json:"status"`
				IncompleteDetails *incompleteDetails `json:"incomplete_details"`
				Error             *responseError     `json:"error"`
				Output            []json.RawMessage  `json:"output"`
			} `json:"response"`
		}
		_ = json.Unmarshal([]byte(lines[len(lines)-1]), &ev)
		if ev.Type != c.typ || ev.Response.Status != c.status || (c.reason != "") != (ev.Response.IncompleteDetails != nil) ||
			len(ev.Response.Output) != 1 {
			t.Errorf("%s: %s", c.name, lines[len(lines)-1])
		}
		if c.reason != "" && ev.Response.IncompleteDetails.Reason != c.reason {
			t.Errorf("%s: reason %q", c.name, ev.Response.IncompleteDetails.Reason)
		}
		if (c.status == "failed") != (ev.Response.Error != nil) {
			t.Errorf("%s: error %+v", c.name, ev.Response.Error)
		}
	}
	log := stream.NewLog("owner", "req12345", "", time.Now())
	e := codec{framingLines, nil}.NewEncoder(log)
	out := e.Terminal(&stream.Terminal{Error: &call.Failure{Code: call.CodeQuotaExceeded, RetryAfterMs: 5000, Scope: "user", Window: "hour"}}, 0)
	if !strings.HasPrefix(string(out), `{"type":"error","sequence_number":0,"code":"quota_exceeded"`) {
		t.Errorf("refusal: %s", out)
	}
}
