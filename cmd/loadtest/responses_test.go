package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// TestEventHead reads the type and sequence_number every event of the door
// begins with, and an error event's type without one.
func TestEventHead(t *testing.T) {
	for _, c := range []struct {
		in   string
		typ  string
		seq  int
		okay bool
	}{
		{`{"type":"response.output_text.delta","sequence_number":17,"item_id":"msg_1","delta":"Hi"}`, "response.output_text.delta", 17, true},
		{`{"type":"response.created","sequence_number":0,"response":{}}`, "response.created", 0, true},
		{`{"type":"error","status":400,"error":{"code":"response_in_flight"}}`, "error", -1, true},
		{`{"status":400}`, "", -1, false},
		{`{"type":"x","sequence_number":}`, "x", -1, false},
	} {
		typ, seq, ok := eventHead([]byte(c.in))
		if typ != c.typ || seq != c.seq || ok != c.okay {
			t.Errorf("eventHead(%s) = %q %d %v, want %q %d %v", c.in, typ, seq, ok, c.typ, c.seq, c.okay)
		}
	}
}

// TestTurnReader: the first token is the first text delta or function_call
// added; sequence numbers must be contiguous from 0; only
// response.completed ends a turn well.
func TestTurnReader(t *testing.T) {
	events := []string{
		`{"type":"response.created","sequence_number":0,"response":{"id":"resp_1","status":"in_progress","output":[]}}`,
		`{"type":"response.output_item.added","sequence_number":1,"output_index":0,"item":{"id":"fc_1","type":"function_call","status":"in_progress","call_id":"c1","name":"shell"}}`,
		`{"type":"response.function_call_arguments.delta","sequence_number":2,"delta":"{}"}`,
		`{"type":"response.completed","sequence_number":3,"response":{"id":"resp_1","status":"completed","output":[{"type":"function_call","call_id":"c1","name":"shell","arguments":"{}"}]}}`,
	}
	tr := &turnReader{}
	for i, ev := range events {
		end, err := tr.event([]byte(ev))
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if i == 1 && tr.first.IsZero() {
			t.Fatal("a function_call's output_item.added is the first token")
		}
		if (end != nil) != (i == 3) {
			t.Fatalf("event %d: end %v", i, end)
		}
		if end != nil && (end.id != "resp_1" || len(end.output) != 1) {
			t.Fatalf("end %+v", end)
		}
	}
	// A message's output_item.added is not a token; its delta is.
	tr = &turnReader{seq: 1}
	if _, err := tr.event([]byte(`{"type":"response.output_item.added","sequence_number":1,"output_index":0,"item":{"id":"msg_1","type":"message","content":[]}}`)); err != nil || !tr.first.IsZero() {
		t.Fatalf("message added: %v, first %v", err, tr.first)
	}
	for _, bad := range []string{
		`{"type":"response.output_text.delta","sequence_number":3,"delta":"x"}`, // a gap
		`{"type":"response.incomplete","sequence_number":2,"response":{"status":"incomplete"}}`,
		`{"type":"error","status":400,"error":{}}`,
		`{"type":"response.completed","sequence_number":2,"response":{"id":"resp_1","status":"completed","output":[]}}`, // no token
	} {
		tr := &turnReader{seq: 2}
		if _, err := tr.event([]byte(bad)); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}

// TestToolLoop: over HTTP every turn carries the whole conversation; in
// WebSocket mode only the new input and the previous response's id; turns
// alternate user message -> function_call and function_call_output -> text,
// and an ending of the wrong shape is an error.
func TestToolLoop(t *testing.T) {
	c := newRespConfig("mock-tools", 0)
	if len(c.devPrompt) != respDevPromptBytes || len(c.toolNames) != 9 || c.toolNames[0] != "shell" {
		t.Fatalf("config: prompt %d bytes, tools %v", len(c.devPrompt), c.toolNames)
	}
	for _, raw := range codexTools {
		if !json.Valid([]byte(raw)) || len(raw) < 250 {
			t.Errorf("tool %d bytes, valid %v: %s", len(raw), json.Valid([]byte(raw)), raw[:60])
		}
	}
	if out := toolOutput(3, 5, respToolOutputBytes); len(out) != respToolOutputBytes {
		t.Fatalf("tool output %d bytes", len(out))
	}
	type sent struct {
		Type               string            `json:"type"`
		Input              []json.RawMessage `json:"input"`
		Tools              []json.RawMessage `json:"tools"`
		Store              *bool             `json:"store"`
		Stream             bool              `json:"stream"`
		PreviousResponseID string            `json:"previous_response_id"`
		MaxOutputTokens    *int              `json:"max_output_tokens"`
	}
	read := func(b []byte) sent {
		var s sent
		if err := json.Unmarshal(b, &s); err != nil {
			t.Fatal(err)
		}
		if len(s.Tools) != 9 || s.Store == nil || *s.Store || s.MaxOutputTokens != nil {
			t.Fatalf("every turn sends the tools and store:false, no max_output_tokens: %s", clip(b))
		}
		return s
	}
	l := newToolLoop(c, 1)
	call := func(n int) *respEnd {
		return &respEnd{id: fmt.Sprintf("resp_%d", n), output: []json.RawMessage{
			json.RawMessage(`{"id":"msg_a","type":"message","role":"assistant","status":"completed","content":[{"type":"output_text","text":"Let me look."}]}`),
			json.RawMessage(fmt.Sprintf(`{"id":"fc_a","type":"function_call","status":"completed","call_id":"tooluse_mock_%d","name":"shell","arguments":"{\"query\":\"Look at internal\"}"}`, n))}}
	}
	text := func(n int) *respEnd {
		return &respEnd{id: fmt.Sprintf("resp_%d", n), output: []json.RawMessage{
			json.RawMessage(`{"id":"msg_b","type":"message","role":"assistant","status":"completed","content":[{"type":"output_text","text":"Fixed it."}]}`)}}
	}
	h, w := read(l.httpBody()), read(l.wsEvent())
	if len(h.Input) != 2 || len(w.Input) != 2 || w.PreviousResponseID != "" || w.Type != "response.create" || !h.Stream || h.Type != "" {
		t.Fatalf("turn 1: http %d items, ws %d items, previous %q, type %q", len(h.Input), len(w.Input), w.PreviousResponseID, w.Type)
	}
	if err := l.advance(text(1)); err == nil || !strings.Contains(err.Error(), "without a function_call") {
		t.Fatalf("text after a user message: %v", err)
	}
	if err := l.advance(call(1)); err != nil {
		t.Fatal(err)
	}
	h, w = read(l.httpBody()), read(l.wsEvent())
	if len(h.Input) != 5 || len(w.Input) != 1 || w.PreviousResponseID != "resp_1" || h.PreviousResponseID != "" {
		t.Fatalf("turn 2: http %d items, ws %d items (previous %q)", len(h.Input), len(w.Input), w.PreviousResponseID)
	}
	var out struct {
		Type   string `json:"type"`
		CallID string `json:"call_id"`
		Output string `json:"output"`
	}
	_ = json.Unmarshal(w.Input[0], &out)
	if out.Type != "function_call_output" || out.CallID != "tooluse_mock_1" || len(out.Output) != respToolOutputBytes || string(h.Input[4]) != string(w.Input[0]) {
		t.Fatalf("turn 2's input: %s", w.Input[0])
	}
	if err := l.advance(call(2)); err == nil || !strings.Contains(err.Error(), "want text only") {
		t.Fatalf("a function_call after its output: %v", err)
	}
	if err := l.advance(text(2)); err != nil {
		t.Fatal(err)
	}
	h, w = read(l.httpBody()), read(l.wsEvent())
	var msg struct {
		Role    string
		Content []struct{ Text string }
	}
	_ = json.Unmarshal(w.Input[0], &msg)
	if len(h.Input) != 7 || len(w.Input) != 1 || w.PreviousResponseID != "resp_2" || msg.Role != "user" || msg.Content[0].Text != userText(1, 2) {
		t.Fatalf("turn 3: http %d items, ws %s", len(h.Input), w.Input[0])
	}
	if !l.wantsTool() || l.turn != 2 {
		t.Fatalf("turn %d", l.turn)
	}
}

func TestDoorURL(t *testing.T) {
	for _, c := range []struct{ in, scheme, want string }{
		{"ws://127.0.0.1:8080/v1/ws", "http", "http://127.0.0.1:8080/v1/responses"},
		{"http://127.0.0.1:18615", "ws", "ws://127.0.0.1:18615/v1/responses"},
		{"wss://gw.example.com/v1/ws", "http", "https://gw.example.com/v1/responses"},
		{"https://gw.example.com", "ws", "wss://gw.example.com/v1/responses"},
	} {
		if got, err := doorURL(c.in, c.scheme); err != nil || got != c.want {
			t.Errorf("doorURL(%s, %s) = %s, %v; want %s", c.in, c.scheme, got, err, c.want)
		}
	}
	if _, err := doorURL("127.0.0.1:8080", "http"); err == nil {
		t.Error("a URL without a scheme is refused")
	}
}

func TestRespGain(t *testing.T) {
	h := RespArm{TTFT: Dist{P50: 800, P95: 1000, P99: 1200}, GatewayCPUMsPerTurnActive: 6, WireSentPerTurn: 30000, TurnsPerSecond: 1}
	w := RespArm{TTFT: Dist{P50: 700, P95: 800, P99: 1000}, GatewayCPUMsPerTurnActive: 2, WireSentPerTurn: 6000, TurnsPerSecond: 1.25}
	g := respGain(h, w)
	if g.TTFTSavedP50 != 100 || g.TTFTSavedP99 != 200 || g.TTFTRatioP95 != 1.25 || g.CPURatio != 3 || g.BytesRatio != 5 || g.TurnsRatio != 1.25 {
		t.Fatalf("gain %+v", g)
	}
	w.GatewayCPUMsPerTurnActive = -1
	if g := respGain(h, w); g.CPURatio != 0 {
		t.Fatalf("unknown CPU: ratio %v", g.CPURatio)
	}
}

// TestResponsesToolLoop runs the scenario against one gateway, both arms
// on it: every turn of every session completes with the ending it should.
func TestResponsesToolLoop(t *testing.T) {
	w := newWorld(t, 20000)
	rep, err := w.loadtest(w.url, "responses", "--streams", "2", "--turns", "4", "--pid", fmt.Sprint(w.gw.PID()), "--settle", "100ms")
	if err != nil {
		t.Fatalf("responses: %v %v\n%s", err, rep.Problems, w.logs())
	}
	r := rep.Responses
	for _, a := range []RespArm{r.HTTP, r.WS} {
		if a.Turns != 8 || a.Errors != 0 || a.TTFT.N != 8 || a.TTFT.P50 <= 0 || a.WireSentPerTurn <= a.PayloadPerTurn || a.TurnsPerSecond <= 0 {
			t.Fatalf("%s: %+v", a.Name, a)
		}
	}
	if !r.SameGateway || len(rep.Notes) != 1 || r.HTTP.GatewayCPUMsPerTurn != -1 {
		t.Fatalf("one gateway: same %v, notes %v, cpu %v", r.SameGateway, rep.Notes, r.HTTP.GatewayCPUMsPerTurn)
	}
	if len(r.ByTurn) != 4 || r.ByTurn[3].HTTPPayload <= r.ByTurn[1].HTTPPayload || r.ByTurn[3].WSPayload >= r.ByTurn[3].HTTPPayload/2 {
		t.Fatalf("by turn %+v", r.ByTurn)
	}
	if r.Gain.BytesRatio <= 1 {
		t.Fatalf("gain %+v", r.Gain)
	}
	if got := w.mock.Requests("mock-tools"); got != 16 {
		t.Fatalf("mock-tools called %d times, want 16", got)
	}
}
