package main

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetway-gateway/jetway/client"
	"github.com/jetway-gateway/jetway/internal/mockmodel"
	"github.com/jetway-gateway/jetway/internal/protocol"
)

// dialAgent connects sub to Contoso's agent app (mock-tools, mock-reasoning).
func (w *world) dialAgent(g *gw, sub string, mod func(*client.Options)) *client.Client {
	tok := w.token(sub, "contoso", "contoso-agent", time.Hour)
	return w.dial(g, sub, func(o *client.Options) {
		o.Token = func(context.Context) (string, error) { return tok, nil }
		if mod != nil {
			mod(o)
		}
	})
}

// lookupTool is the tool the tests offer the model.
var lookupTool = client.Tool{Name: "lookup", Description: "looks a phrase up",
	InputSchema: json.RawMessage(`{"type":"object","properties":{"query":{"type":"string"}}}`)}

// frames collects a call's chunk frames as the client delivers them (in seq order, once each).
type frames struct {
	mu  sync.Mutex
	got []client.Chunk
}

func (f *frames) add(c client.Chunk) { f.mu.Lock(); f.got = append(f.got, c); f.mu.Unlock() }

// wire is the frames as JSON without their request id, for comparing two calls.
func (f *frames) wire() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, c := range f.got {
		c.RequestID = ""
		b, _ := json.Marshal(c)
		out = append(out, string(b))
	}
	return out
}

func toolRequest(prompt string, f *frames) client.Request {
	zero := 0.0
	r := ask(prompt)
	r.Tools, r.Temperature = []client.Tool{lookupTool}, &zero
	r.OnChunkFrame = f.add
	return r
}

// TestToolLoopAndReasoningThroughTheGateway: through the real SDK and the
// mock, a tool call streams as typed chunks in order and ends in done with
// its blocks and stop_reason tool_use; the next turn (the answer's blocks
// plus a tool_result) is answered in text; a reasoning model's thinking
// streams first with its signature; a cached tool answer replays the same
// frames; usage records count the tool calls.
func TestToolLoopAndReasoningThroughTheGateway(t *testing.T) {
	w := newWorld(t, fastPace())
	usageDir := t.TempDir()
	g := w.start(map[string]string{"JETWAY_USAGE_DIR": usageDir})
	c := w.dialAgent(g, "agent-user", nil)
	const prompt = "international timezone conversion for Paris please"

	var first frames
	call, err := c.Send(context.Background(), toolRequest(prompt, &first))
	if err != nil {
		t.Fatal(err)
	}
	done, err := waitCall(t, call, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	id, input := mockmodel.Tool(1, prompt)
	calls := done.ToolCalls()
	if done.StopReason != protocol.StopToolUse || len(calls) != 1 || calls[0].ID != id || calls[0].Name != "lookup" ||
		string(calls[0].Input) != input || done.Model != "mock-tools" {
		t.Fatalf("done %+v, tool calls %+v; want %s %s", done, calls, id, input)
	}
	if done.Text == "" || call.Text() != done.Text || len(done.Blocks) != 2 || done.Blocks[0].Type != protocol.BlockText ||
		done.Blocks[0].Text != done.Text {
		t.Fatalf("text %q / %q, blocks %+v", done.Text, call.Text(), done.Blocks)
	}
	// The chunks: text of block 0, then the call's start, then its input in fragments.
	var joined string
	started := false
	for i, ch := range first.got {
		switch {
		case ch.Seq != i+1:
			t.Fatalf("chunk %d has seq %d", i, ch.Seq)
		case ch.Kind == "":
			if started || ch.Block != 0 {
				t.Fatalf("text chunk %+v after the tool call started", ch)
			}
		case ch.Kind == protocol.KindToolUse && ch.Name != "":
			started = ch.ID == id && ch.Block == 1 && ch.Text == ""
		case ch.Kind == protocol.KindToolUse:
			if !started || ch.Block != 1 {
				t.Fatalf("input fragment %+v before the call started", ch)
			}
			joined += ch.Input
		default:
			t.Fatalf("chunk %+v", ch)
		}
	}
	if !started || joined != input || done.Chunks != len(first.got) {
		t.Fatalf("tool input from chunks %q, want %q (%d chunks, done says %d)", joined, input, len(first.got), done.Chunks)
	}

	// The next turn sends the answer back with the tool's result.
	next := toolRequest(prompt, &frames{})
	next.Messages = append(next.Messages, done.Turn(), client.Message{Role: "user", Blocks: []client.Block{{
		Type: protocol.BlockToolResult, ToolUseID: id, Content: []client.Block{{Type: protocol.BlockText, Text: "14:02 in Paris"}}}}})
	call2, err := c.Send(context.Background(), next)
	if err != nil {
		t.Fatal(err)
	}
	done2, err := waitCall(t, call2, 20*time.Second)
	if err != nil || done2.StopReason == protocol.StopToolUse || len(done2.ToolCalls()) != 0 || done2.Text == "" {
		t.Fatalf("second turn: done %+v, %v", done2, err)
	}

	// A reasoning model thinks first: reasoning chunks, its signature, then text.
	var thought frames
	r := ask("why is the sky blue")
	r.Model, r.Reasoning, r.OnChunkFrame = "mock-reasoning", &client.Reasoning{BudgetTokens: 1024}, thought.add
	call3, err := c.Send(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	done3, err := waitCall(t, call3, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(done3.Blocks) != 2 || done3.Blocks[0].Type != protocol.BlockReasoning || done3.Blocks[0].Signature != "mock-signature" ||
		done3.ReasoningText() == "" || done3.Blocks[1].Text != done3.Text || done3.Text == "" {
		t.Fatalf("reasoning answer %+v", done3)
	}
	if g0 := thought.got[0]; g0.Kind != protocol.KindReasoning || g0.Reasoning == "" || g0.Text != "" {
		t.Fatalf("first chunk %+v, want reasoning", g0)
	}

	// The same tool request again is a cache hit with the same frames and blocks.
	var again frames
	call4, err := c.Send(context.Background(), toolRequest(prompt, &again))
	if err != nil {
		t.Fatal(err)
	}
	done4, err := waitCall(t, call4, 20*time.Second)
	if err != nil || !done4.Cached {
		t.Fatalf("cached tool answer: %+v, %v", done4, err)
	}
	b1, _ := json.Marshal(done.Blocks)
	b4, _ := json.Marshal(done4.Blocks)
	if strings.Join(again.wire(), "\n") != strings.Join(first.wire(), "\n") || string(b1) != string(b4) {
		t.Fatalf("cached replay differs:\n%s\n%s\nblocks %s / %s", strings.Join(first.wire(), "\n"), strings.Join(again.wire(), "\n"), b1, b4)
	}
	if n := w.mock.Requests("mock-tools"); n != 2 {
		t.Fatalf("%d calls of mock-tools, want 2 (the third tool request was a hit)", n)
	}

	g.stop(t)
	recs := readUsage(t, usageDir)
	if r := recs[call.ID]; len(r) != 1 || r[0].ToolCalls != 1 || r[0].Outcome != "done" {
		t.Fatalf("usage records %+v, want one with tool_calls 1", r)
	}
	if r := recs[call2.ID]; len(r) != 1 || r[0].ToolCalls != 0 {
		t.Fatalf("second turn's usage records %+v, want one with tool_calls 0", r)
	}
}

// TestResumeMidToolInputOnAnotherServer: a client cut off while a tool
// call's input streams resumes on another server and gets the rest: the
// frames and the done blocks are those of an uninterrupted run.
func TestResumeMidToolInputOnAnotherServer(t *testing.T) {
	// Both record formats: the tool call's pieces are JSON in v1 records,
	// the core's compact codec in v2 ones; the resume is the same.
	for _, format := range []string{"v1", "v2"} {
		t.Run(format, func(t *testing.T) {
			w := newWorld(t, toolResumePace)
			resumeMidToolInput(t, w, w.cluster(2, map[string]string{"JETWAY_RECORD_FORMAT": format}), 0, 1)
		})
	}
}

// toolResumePace is slow enough that a tool call's input is cut mid way.
var toolResumePace = mockmodel.Options{TTFT: time.Millisecond, PerToken: 40 * time.Millisecond}

// resumeMidToolInput cuts a tool call's answer on server from while its
// input streams and checks that the resume on server to (the next of the
// client's URLs) delivers exactly the frames and blocks of an
// uninterrupted answer from to.
func resumeMidToolInput(t *testing.T, w *world, cl *cluster, from, to int) {
	const prompt = "supercalifragilistic expialidocious antidisestablishmentarianism"

	var whole frames
	ref := w.dialAgent(cl.servers[to].gw, "resumer", nil)
	refCall, err := ref.Send(context.Background(), toolRequest(prompt, &whole))
	if err != nil {
		t.Fatal(err)
	}
	refDone, err := waitCall(t, refCall, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}

	var cutAt int
	cut := make(chan struct{})
	var part frames
	c := w.dialAgent(cl.servers[from].gw, "resumer", func(o *client.Options) {
		o.URLs = cl.urls(from)
		o.Reconnect = true
	})
	req := toolRequest(prompt, &part)
	req.Temperature = nil // not the cached answer: a second model call, cut mid input
	req.OnChunkFrame = func(ch client.Chunk) {
		part.add(ch)
		if ch.Kind == protocol.KindToolUse && ch.Input != "" && cutAt == 0 {
			cutAt = ch.Seq
			close(cut)
		}
	}
	call, err := c.Send(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	<-cut
	c.Drop() // the reconnect goes to the next URL: the other server
	done, err := waitCall(t, call, 30*time.Second)
	if err != nil {
		t.Fatalf("resume on another server: %v", err)
	}
	if len(cl.servers[to].logs.Await("adopted", call.ID, 1, 10*time.Second)) != 1 {
		t.Fatalf("server %d did not follow the record:\n%s", to, cl.servers[to].logs.String())
	}
	if last := part.got[len(part.got)-1]; last.Seq <= cutAt {
		t.Fatalf("nothing after the cut at seq %d", cutAt)
	}
	b1, _ := json.Marshal(refDone.Blocks)
	b2, _ := json.Marshal(done.Blocks)
	if strings.Join(part.wire(), "\n") != strings.Join(whole.wire(), "\n") || string(b1) != string(b2) ||
		done.StopReason != protocol.StopToolUse || call.Stats().OutOfOrder != 0 {
		t.Fatalf("answer resumed at seq %d differs from an uninterrupted one:\n%s\n%s\nblocks %s\n       %s",
			cutAt, strings.Join(whole.wire(), "\n"), strings.Join(part.wire(), "\n"), b1, b2)
	}
	t.Logf("cut at seq %d of %d, resumed on task-%d", cutAt, len(part.got), to)
}
