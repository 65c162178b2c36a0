package protocol

import (
	"encoding/json"
	"reflect"
	"testing"
)

// Every piece writes the frame json.Marshal writes for its chunk, and
// decodes back to that chunk.
func TestPiecesMatchEncodingJSON(t *testing.T) {
	chunks := []Chunk{
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
	for _, c := range chunks {
		p := BlockPiece(c)
		if c.Block == 0 && c.Kind == "" && (c.Text == "" || c.Text[0] != pieceMark) && p != c.Text {
			t.Errorf("text chunk %q kept as %q, want its text", c.Text, p)
		}
		got := AppendChunk(nil, "req_12345678", 9, p)
		c.Type, c.RequestID, c.Seq = TypeChunk, "req_12345678", 9
		want, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("AppendChunk(BlockPiece(%+v))\n got %s\nwant %s", c, got, want)
		}
		var back Chunk
		if err := json.Unmarshal(want, &back); err != nil {
			t.Fatal(err)
		}
		dec := DecodePiece(p)
		dec.Type, dec.RequestID, dec.Seq = back.Type, back.RequestID, back.Seq
		if !reflect.DeepEqual(dec, back) {
			t.Errorf("DecodePiece(%q) = %+v, want %+v", p, dec, back)
		}
		if PieceText(p) != back.Text {
			t.Errorf("PieceText(%q) = %q, want %q", p, PieceText(p), back.Text)
		}
	}
	if TextPiece("a") != "a" || DecodePiece(TextPiece("\x00a")).Text != "\x00a" {
		t.Error("TextPiece")
	}
}

func TestAssemble(t *testing.T) {
	pieces := []string{
		BlockPiece(Chunk{Kind: KindReasoning, Reasoning: "think "}),
		BlockPiece(Chunk{Kind: KindReasoning, Reasoning: "hard"}),
		BlockPiece(Chunk{Kind: KindReasoning, Signature: "sig"}),
		BlockPiece(Chunk{Block: 1, Text: "Let me "}),
		BlockPiece(Chunk{Block: 1, Text: "check."}),
		BlockPiece(Chunk{Block: 2, Kind: KindToolUse, ID: "t1", Name: "clock"}),
		BlockPiece(Chunk{Block: 2, Kind: KindToolUse, Input: `{"tz":`}),
		BlockPiece(Chunk{Block: 2, Kind: KindToolUse, Input: `"UTC"}`}),
		BlockPiece(Chunk{Block: 3, Kind: KindToolUse, ID: "t2", Name: "now"}),
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
