package client

import (
	"context"
	"encoding/json"
	"sync"
	"testing"

	"github.com/jetway-gateway/jetway/internal/protocol"
)

// Tools and reasoning reach the server; block chunks arrive typed, in seq
// order (out-of-order ones held back); Call.Text stays the answer's text;
// Done's blocks give the tool call and the reasoning.
func TestBlocksToolCallsAndReasoning(t *testing.T) {
	const id = "blocks-req-1"
	chunks := []protocol.Chunk{
		{Seq: 1, Kind: protocol.KindReasoning, Reasoning: "The user wants the time."},
		{Seq: 2, Block: 1, Text: "Let me check."},
		{Seq: 3, Block: 2, Kind: protocol.KindToolUse, ID: "tooluse_1", Name: "clock"},
		{Seq: 4, Block: 2, Kind: protocol.KindToolUse, Input: `{"tz":"Europe/`},
		{Seq: 5, Block: 2, Kind: protocol.KindToolUse, Input: `Paris"}`},
	}
	s := newServer(t, func(p *peer) {
		in := p.read()
		if in.Type != protocol.TypeRequest || len(in.Tools) != 1 || in.Tools[0].Name != "clock" ||
			in.ToolChoice == nil || in.ToolChoice.Mode != protocol.ToolChoiceAny || in.Reasoning == nil || in.Reasoning.BudgetTokens != 2048 {
			t.Errorf("request %+v", in)
		}
		p.send(accepted(id))
		for _, i := range []int{0, 1, 3, 2, 4} { // 4 ahead of 3
			c := chunks[i]
			c.Type, c.RequestID = protocol.TypeChunk, id
			p.send(c)
		}
		d := done(id, 5, "Let me check.")
		d.StopReason = protocol.StopToolUse
		d.Blocks = []Block{{Type: protocol.BlockReasoning, Text: "The user wants the time.", Signature: "sig"},
			{Type: protocol.BlockText, Text: "Let me check."},
			{Type: protocol.BlockToolUse, ID: "tooluse_1", Name: "clock", Input: json.RawMessage(`{"tz":"Europe/Paris"}`)}}
		p.send(d)
		p.waitClose()
	})
	c := dial(t, s, nil)
	var mu sync.Mutex
	var got []Chunk
	r := ask(id)
	r.Tools = []Tool{{Name: "clock", InputSchema: json.RawMessage(`{"type":"object"}`)}}
	r.ToolChoice = &ToolChoice{Mode: protocol.ToolChoiceAny}
	r.Reasoning = &Reasoning{BudgetTokens: 2048}
	r.OnChunkFrame = func(c Chunk) { mu.Lock(); got = append(got, c); mu.Unlock() }
	call, err := c.Send(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	d, err := wait(t, call)
	if err != nil || call.Text() != "Let me check." || call.Stats().Mismatch {
		t.Fatalf("done %+v, text %q, %v", d, call.Text(), err)
	}
	mu.Lock()
	defer mu.Unlock()
	var input string
	for i, g := range got {
		if g.Seq != i+1 || g.Kind != chunks[i].Kind || g.Block != chunks[i].Block {
			t.Fatalf("chunk %d: %+v, want %+v", i, g, chunks[i])
		}
		input += g.Input
	}
	if input != `{"tz":"Europe/Paris"}` {
		t.Fatalf("tool input %q", input)
	}
	calls := d.ToolCalls()
	if len(calls) != 1 || calls[0].Name != "clock" || string(calls[0].Input) != input || d.ReasoningText() != "The user wants the time." {
		t.Fatalf("tool calls %+v, reasoning %q", calls, d.ReasoningText())
	}
}
