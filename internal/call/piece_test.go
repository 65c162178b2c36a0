package call

import (
	"encoding/json"
	"reflect"
	"testing"
)

var samplePieces = []Piece{
	{Text: "plain"},
	{Text: ""},
	{Text: "\x00starts with the mark"},
	{Text: "second block", Block: 1},
	{Block: 0, Kind: KindReasoning, Reasoning: "let me <think>\n"},
	{Block: 0, Kind: KindReasoning, Signature: "sig=="},
	{Block: 2, Kind: KindToolUse, ID: "tooluse_1", Name: "clock"},
	{Block: 2, Kind: KindToolUse, Input: `{"tz":"UTC"`},
	{Block: 300, Kind: KindToolUse, Input: "\u2028<&>"}, // v1 replaces invalid UTF-8, as JSON does
}

// Every piece decodes back to itself, text pieces of block 0 are their
// text, and a piece reads the same after a trip through format v1.
func TestPieceRoundTrip(t *testing.T) {
	for _, c := range samplePieces {
		p := Encode(c)
		if c.Block == 0 && c.Kind == "" && (c.Text == "" || c.Text[0] != pieceMark) && p != c.Text {
			t.Errorf("text piece %q kept as %q, want its text", c.Text, p)
		}
		if got := Decode(p); got != c {
			t.Errorf("Decode(Encode(%+v)) = %+v", c, got)
		}
		if Text(p) != c.Text {
			t.Errorf("Text(%q) = %q, want %q", p, Text(p), c.Text)
		}
		v1 := StoredPieces(FormatV1, []string{p})
		if back := LoadPieces(FormatV1, v1); back[0] != p {
			t.Errorf("v1 trip of %+v: %q -> %q -> %q", c, p, v1[0], back[0])
		}
		if v2 := StoredPieces(FormatV2, []string{p}); v2[0] != p {
			t.Errorf("v2 stores %q as %q", p, v2[0])
		}
	}
	if TextPiece("a") != "a" || Decode(TextPiece("\x00a")).Text != "\x00a" {
		t.Error("TextPiece")
	}
	for _, bad := range []string{"\x00", "\x00\x04", "\x00\x04\x09ab", "\x00\x01\xff"} {
		if got := Decode(bad); got != (Piece{}) {
			t.Errorf("Decode(%q) = %+v, want empty", bad, got)
		}
	}
}

// A v1 piece is the chunk frame's fields after seq, as v1 servers wrote
// them: its JSON, with the text first.
func TestPieceV1Form(t *testing.T) {
	for _, c := range samplePieces[3:] {
		got := StoredPieces(FormatV1, []string{Encode(c)})[0]
		if got[0] != pieceMark {
			t.Fatalf("v1 piece %q not marked", got)
		}
		var back struct {
			Text      string `json:"text"`
			Block     int    `json:"block,omitempty"`
			Kind      string `json:"kind,omitempty"`
			ID        string `json:"id,omitempty"`
			Name      string `json:"name,omitempty"`
			Input     string `json:"input,omitempty"`
			Reasoning string `json:"reasoning,omitempty"`
			Signature string `json:"signature,omitempty"`
		}
		back.Text, back.Block, back.Kind, back.ID, back.Name = c.Text, c.Block, c.Kind, c.ID, c.Name
		back.Input, back.Reasoning, back.Signature = c.Input, c.Reasoning, c.Signature
		want, _ := json.Marshal(back)
		if "{"+got[1:]+"}" != string(want) {
			t.Errorf("v1 piece of %+v\n got %s\nwant %s", c, got[1:], want[1:len(want)-1])
		}
	}
	// A v1 piece that does not decode reads as empty text, as v1 read it.
	if got := LoadPieces(FormatV1, []string{"\x00nonsense"}); got[0] != "" {
		t.Errorf("bad v1 piece reads %q", got[0])
	}
}

func TestAssemble(t *testing.T) {
	pieces := []string{
		Encode(Piece{Kind: KindReasoning, Reasoning: "think "}),
		Encode(Piece{Kind: KindReasoning, Reasoning: "hard"}),
		Encode(Piece{Kind: KindReasoning, Signature: "sig"}),
		Encode(Piece{Block: 1, Text: "Let me "}),
		Encode(Piece{Block: 1, Text: "check."}),
		Encode(Piece{Block: 2, Kind: KindToolUse, ID: "t1", Name: "clock"}),
		Encode(Piece{Block: 2, Kind: KindToolUse, Input: `{"tz":`}),
		Encode(Piece{Block: 2, Kind: KindToolUse, Input: `"UTC"}`}),
		Encode(Piece{Block: 3, Kind: KindToolUse, ID: "t2", Name: "now"}),
	}
	a := Assemble(pieces)
	want := []Block{
		{Type: BlockReasoning, Text: "think hard", Signature: "sig"},
		{Type: BlockText, Text: "Let me check."},
		{Type: BlockToolUse, ID: "t1", Name: "clock", Input: json.RawMessage(`{"tz":"UTC"}`)},
		{Type: BlockToolUse, ID: "t2", Name: "now", Input: json.RawMessage(`{}`)},
	}
	if a.Text != "Let me check." || a.Plain || a.ToolCalls != 2 || a.Generated != len("think hardLet me check.")+len(`{"tz":"UTC"}`) {
		t.Errorf("answer %+v", a)
	}
	if !reflect.DeepEqual(a.Blocks, want) {
		t.Errorf("blocks\n got %+v\nwant %+v", a.Blocks, want)
	}
	// A stream cut inside a tool call's input keeps what came as a string.
	cut := Assemble(pieces[:7])
	if in := string(cut.Blocks[2].Input); in != `"{\"tz\":"` {
		t.Errorf("cut input %s", in)
	}
	plain := Assemble([]string{"a", "b"})
	if !plain.Plain || plain.Text != "ab" || len(plain.Blocks) != 1 || plain.Blocks[0].Text != "ab" {
		t.Errorf("plain answer %+v", plain)
	}
}

// Stored accepted and terminal events read back as they were written.
func TestEventsRoundTrip(t *testing.T) {
	a := Accepted{RequestID: "r1", Model: "m", ReservedTokens: 9, Quota: &Quota{Window: "day", Limit: 10, Remaining: 1}}
	if got := DecodeAccepted(EncodeAccepted(a)); !reflect.DeepEqual(got, a) {
		t.Errorf("accepted %+v", got)
	}
	d := &Done{RequestID: "r1", Chunks: 2, Text: "hi", Model: "m", Usage: Usage{InputTokens: 1, OutputTokens: 2},
		StopReason: "end_turn", Blocks: []Block{{Type: BlockToolUse, ID: "t", Name: "n", Input: json.RawMessage(`{}`)}}}
	if got, f := DecodeTerminal(EncodeDone(d)); f != nil || !reflect.DeepEqual(got, d) {
		t.Errorf("done %+v %+v", got, f)
	}
	n, text := 3, "so far"
	e := &Failure{RequestID: "r1", Code: CodeInterrupted, Status: 503, Message: "x", Retryable: true, Chunks: &n, Text: &text}
	if d, got := DecodeTerminal(EncodeFailure(e)); d != nil || !reflect.DeepEqual(got, e) {
		t.Errorf("failure %+v %+v", d, got)
	}
	if d, f := DecodeTerminal([]byte(`{"type":"nonsense"}`)); d != nil || f != nil {
		t.Errorf("nonsense reads %+v %+v", d, f)
	}
}
