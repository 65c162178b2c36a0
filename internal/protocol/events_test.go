package protocol

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/jetway-gateway/jetway/internal/call"
)

var samplePieces = []call.Piece{
	{Text: "plain"},
	{Text: ""},
	{Text: "\x00starts with the mark"},
	{Text: "second block", Block: 1},
	{Block: 0, Kind: KindReasoning, Reasoning: "let me <think>\n"},
	{Block: 0, Kind: KindReasoning, Signature: "sig=="},
	{Block: 2, Kind: KindToolUse, ID: "tooluse_1", Name: "clock"},
	{Block: 2, Kind: KindToolUse, Input: `{"tz":"UTC"`},
	{Block: 3, Kind: KindToolUse, Input: "\u2028\xff"},
}

// Every piece writes the frame json.Marshal writes for its chunk.
func TestPiecesMatchEncodingJSON(t *testing.T) {
	for _, p := range samplePieces {
		got := AppendChunk(nil, "req_12345678", 9, p)
		c := Chunk{Type: TypeChunk, RequestID: "req_12345678", Seq: 9, Text: p.Text, Block: p.Block, Kind: p.Kind,
			ID: p.ID, Name: p.Name, Input: p.Input, Reasoning: p.Reasoning, Signature: p.Signature}
		want, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("AppendChunk(%+v)\n got %s\nwant %s", p, got, want)
		}
	}
}

// The core's stored (v1) forms of pieces and events are this wire's
// frames, byte for byte: what every release before formats had a version
// stored, so servers of both read each other's records.
func TestStoredFormIsTheV1Frame(t *testing.T) {
	for _, p := range samplePieces[3:] {
		stored := call.StoredPieces(call.FormatV1, []string{call.Encode(p)})[0]
		frame := AppendChunk(nil, "r", 1, p)
		want := string(frame[len(`{"type":"chunk","request_id":"r","seq":1,`) : len(frame)-1])
		if stored[1:] != want {
			t.Errorf("v1 piece of %+v\n got %s\nwant %s", p, stored[1:], want)
		}
	}
	a := call.Accepted{RequestID: "r1", Model: "m", ReservedTokens: 9, Quota: &call.Quota{Window: "day", Limit: 10, Remaining: 1}}
	if got, want := call.EncodeAccepted(a), Encode(AcceptedFrame(a)); string(got) != string(want) {
		t.Errorf("accepted\n got %s\nwant %s", got, want)
	}
	d := &call.Done{RequestID: "r1", Chunks: 2, Text: "hi <b>", Model: "m", Usage: call.Usage{InputTokens: 1, OutputTokens: 2,
		CacheReadInputTokens: 3}, StopReason: "tool_use", TTFTMs: 4, LatencyMs: 5, Blocks: []call.Block{{Type: BlockText, Text: "hi"},
		{Type: BlockReasoning, Text: "x", Signature: "s"}, {Type: BlockToolUse, ID: "t", Name: "n", Input: json.RawMessage(`{"a": 1}`)}}}
	if got, want := call.EncodeDone(d), Encode(DoneFrame(d)); string(got) != string(want) {
		t.Errorf("done\n got %s\nwant %s", got, want)
	}
	// The tier that served, when the call named one, is done's service_tier.
	for _, d := range []*call.Done{{RequestID: "r2", Text: "x", Model: "m", ServiceTier: call.TierPriority},
		{RequestID: "r3", Model: "m", ServiceTier: call.TierFlex, Blocks: []call.Block{{Type: BlockText, Text: "y"}}}} {
		got, want := call.EncodeDone(d), Encode(DoneFrame(d))
		if string(got) != string(want) || !strings.Contains(string(want), `"service_tier":"`+d.ServiceTier+`"}`) {
			t.Errorf("done with a tier\n got %s\nwant %s", got, want)
		}
	}
	n, text := 3, "so far"
	for _, e := range []*call.Failure{
		{RequestID: "r1", Code: CodeInterrupted, Status: 503, Message: "x", Retryable: true, Chunks: &n, Text: &text},
		{Code: CodeRateLimited, Status: 429, Message: "slow", RetryAfterMs: 7, Scope: "user", Window: "minute"},
	} {
		if got, want := call.EncodeFailure(e), Encode(ErrorFrame(e)); string(got) != string(want) {
			t.Errorf("failure\n got %s\nwant %s", got, want)
		}
	}
}
