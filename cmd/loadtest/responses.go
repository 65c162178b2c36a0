package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/jetway-gateway/jetway/internal/router"
)

// The responses scenario: a Codex-like tool loop through the Responses
// door, over HTTP with the full conversation every turn (what a stateless
// client sends) and over WebSocket mode with only each turn's new input and
// previous_response_id, both arms at once so they share the machine.

const (
	responsesPath = "/v1/responses"
	// respDevPromptBytes is the developer prompt's size: about Codex's
	// instructions with an AGENTS.md and the environment context.
	respDevPromptBytes = 17000
	// respToolOutputBytes is each function_call_output's size (a command's
	// output, clipped as Codex clips it).
	respToolOutputBytes = 420
	respDefaultModel    = "mock-tools"
)

// ResponsesResult is the responses scenario's result.
type ResponsesResult struct {
	Sessions        int     `json:"sessions"`
	Turns           int     `json:"turns_per_session"`
	DevPromptBytes  int     `json:"developer_prompt_bytes"`
	ToolsBytes      int     `json:"tools_bytes"`
	ToolOutputBytes int     `json:"tool_output_bytes"`
	MaxOutputTokens int     `json:"max_output_tokens"` // 0: not sent (the app's default)
	HTTP            RespArm `json:"http"`
	WS              RespArm `json:"ws"`
	// Direct is the mock's TTFT for the first turn's input called straight
	// through the Bedrock SDK, during the run (with --bedrock-url).
	Direct       *PathStats `json:"direct_first_turn,omitempty"`
	ByTurn       []RespTurn `json:"by_turn"`
	Gain         RespGain   `json:"gain"`
	SameGateway  bool       `json:"same_gateway"`
	ToolCPUCores float64    `json:"loadtest_cpu_cores"`
}

// RespArm is one arm's numbers.
type RespArm struct {
	Name   string `json:"name"`
	URL    string `json:"url"`
	Turns  int64  `json:"turns"` // completed and checked
	Errors int64  `json:"errors"`
	// TTFT is from the turn's send to its first response.output_text.delta
	// or response.output_item.added of a function_call.
	TTFT Dist `json:"turn_ttft"`
	// Latency is from the send to the turn's response.completed.
	Latency Dist `json:"turn_latency"`
	// GatewayCPUMsPerTurn is the arm's gateway's CPU over the run / its
	// turns (-1 unknown: no pid, or both arms on one gateway).
	GatewayCPUMsPerTurn float64 `json:"gateway_cpu_ms_per_turn"`
	GatewayCPUCores     float64 `json:"gateway_cpu_cores"`
	// GatewayIdleCores is the gateway's CPU in the idle window before the
	// run (--settle); GatewayCPUMsPerTurnActive is the CPU per turn above
	// it (the run's CPU less idle x the run's length): what the turns cost.
	GatewayIdleCores          float64 `json:"gateway_idle_cores"`
	GatewayCPUMsPerTurnActive float64 `json:"gateway_cpu_ms_per_turn_above_idle"`
	// Bytes the client wrote on (and read from) its connections per turn:
	// requests with their headers, or WebSocket frames, handshakes included.
	WireSentPerTurn float64 `json:"wire_bytes_sent_per_turn"`
	WireRecvPerTurn float64 `json:"wire_bytes_received_per_turn"`
	// PayloadPerTurn is the request bodies (response.create events) alone.
	PayloadPerTurn float64 `json:"payload_bytes_per_turn"`
	TurnsPerSecond float64 `json:"turns_per_second"`
	Seconds        float64 `json:"seconds"`
}

// RespTurn is turn k across the sessions: median TTFT and mean payload.
type RespTurn struct {
	Turn        int     `json:"turn"`
	Kind        string  `json:"kind"` // user (answered by a function_call) or tool_output (answered by text)
	HTTPTTFTP50 float64 `json:"http_ttft_p50_ms"`
	WSTTFTP50   float64 `json:"ws_ttft_p50_ms"`
	HTTPPayload float64 `json:"http_payload_bytes"`
	WSPayload   float64 `json:"ws_payload_bytes"`
}

// RespGain is HTTP (full input) over WebSocket mode (incremental): how many
// times more each costs over HTTP, and the time saved.
type RespGain struct {
	TTFTSavedP50 float64 `json:"ttft_saved_p50_ms"`
	TTFTSavedP95 float64 `json:"ttft_saved_p95_ms"`
	TTFTSavedP99 float64 `json:"ttft_saved_p99_ms"`
	TTFTRatioP50 float64 `json:"ttft_ratio_p50"` // HTTP / WS
	TTFTRatioP95 float64 `json:"ttft_ratio_p95"`
	TTFTRatioP99 float64 `json:"ttft_ratio_p99"`
	CPURatio     float64 `json:"cpu_per_turn_ratio"`  // HTTP / WS, above idle (0 unknown)
	BytesRatio   float64 `json:"bytes_sent_ratio"`    // HTTP / WS
	TurnsRatio   float64 `json:"turns_per_sec_ratio"` // WS / HTTP
}

// respConfig is what every turn of every session sends besides its input.
type respConfig struct {
	model     string
	maxTokens int
	tools     json.RawMessage // the tools array
	toolNames []string
	devPrompt string
}

func newRespConfig(model string, maxTokens int) *respConfig {
	c := &respConfig{model: model, maxTokens: maxTokens, devPrompt: developerPrompt(respDevPromptBytes)}
	var tools []json.RawMessage
	for _, t := range codexTools {
		tools = append(tools, json.RawMessage(t))
		var n struct{ Name string }
		_ = json.Unmarshal([]byte(t), &n)
		c.toolNames = append(c.toolNames, n.Name)
	}
	c.tools, _ = json.Marshal(tools)
	return c
}

// toolLoop is one session's conversation: user message -> function_call,
// function_call_output -> text, and again.
type toolLoop struct {
	c       *respConfig
	session int
	items   []json.RawMessage // every item so far, inputs and outputs
	next    []json.RawMessage // the next turn's new input
	turn    int               // turns done
	prev    string            // the last response's id
}

func newToolLoop(c *respConfig, session int) *toolLoop {
	dev, _ := json.Marshal(map[string]any{"type": "message", "role": "developer",
		"content": []map[string]string{{"type": "input_text", "text": c.devPrompt}}})
	return &toolLoop{c: c, session: session, next: []json.RawMessage{dev, userItem(userText(session, 0))}}
}

// wantsTool says whether the next turn must end with a function_call (its
// new input ends with a user message).
func (l *toolLoop) wantsTool() bool { return l.turn%2 == 0 }

// respBody is a create body (HTTP) or a response.create event (WebSocket).
type respBody struct {
	Type               string            `json:"type,omitempty"`
	Model              string            `json:"model"`
	Input              []json.RawMessage `json:"input"`
	Tools              json.RawMessage   `json:"tools"`
	ToolChoice         string            `json:"tool_choice"`
	ParallelToolCalls  bool              `json:"parallel_tool_calls"`
	Store              bool              `json:"store"`
	Stream             bool              `json:"stream,omitempty"`
	MaxOutputTokens    int               `json:"max_output_tokens,omitempty"`
	PreviousResponseID string            `json:"previous_response_id,omitempty"`
}

// httpBody is the next turn over HTTP: the whole conversation, no
// previous_response_id, store:false.
func (l *toolLoop) httpBody() []byte {
	in := make([]json.RawMessage, 0, len(l.items)+len(l.next))
	in = append(append(in, l.items...), l.next...)
	b, _ := json.Marshal(respBody{Model: l.c.model, Input: in, Tools: l.c.tools, ToolChoice: "auto",
		Stream: true, MaxOutputTokens: l.c.maxTokens})
	return b
}

// wsEvent is the next turn in WebSocket mode: its new input, continuing the
// previous response, store:false.
func (l *toolLoop) wsEvent() []byte {
	b, _ := json.Marshal(respBody{Type: "response.create", Model: l.c.model, Input: l.next, Tools: l.c.tools,
		ToolChoice: "auto", MaxOutputTokens: l.c.maxTokens, PreviousResponseID: l.prev})
	return b
}

// outputItem is what the loop reads of an output item.
type outputItem struct {
	Type      string `json:"type"`
	CallID    string `json:"call_id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
	Content   []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
}

// advance checks the turn's ending (a function_call of the first tool
// after a user message, text after a function_call_output) and prepares
// the next turn's input.
func (l *toolLoop) advance(end *respEnd) error {
	if end.id == "" {
		return errors.New("response.completed has no response id")
	}
	var call *outputItem
	text := ""
	for i, raw := range end.output {
		var it outputItem
		if err := json.Unmarshal(raw, &it); err != nil {
			return fmt.Errorf("output[%d]: %v", i, err)
		}
		switch it.Type {
		case "function_call":
			if call == nil {
				call = &it
			}
		case "message":
			for _, c := range it.Content {
				text += c.Text
			}
		}
	}
	turn := l.turn + 1
	if l.wantsTool() {
		switch {
		case call == nil:
			return fmt.Errorf("turn %d (a user message) ended without a function_call (%d output items)", turn, len(end.output))
		case call.CallID == "" || call.Name != l.c.toolNames[0] || !json.Valid([]byte(call.Arguments)):
			return fmt.Errorf("turn %d: function_call call_id %q name %q arguments %q (want the call of %s)", turn, call.CallID, call.Name, call.Arguments, l.c.toolNames[0])
		}
	} else if call != nil || text == "" {
		return fmt.Errorf("turn %d (a function_call_output) ended with function_call %v and %d bytes of text, want text only", turn, call != nil, len(text))
	}
	l.items = append(append(l.items, l.next...), end.output...)
	l.prev, l.turn = end.id, turn
	if call != nil {
		out, _ := json.Marshal(map[string]string{"type": "function_call_output", "call_id": call.CallID,
			"output": toolOutput(l.session, turn, respToolOutputBytes)})
		l.next = []json.RawMessage{out}
	} else {
		l.next = []json.RawMessage{userItem(userText(l.session, turn))}
	}
	return nil
}

func userItem(text string) json.RawMessage {
	b, _ := json.Marshal(map[string]any{"type": "message", "role": "user",
		"content": []map[string]string{{"type": "input_text", "text": text}}})
	return b
}

// userText is the user's message of a turn: a coding request.
func userText(session, turn int) string {
	return fmt.Sprintf("Look at internal/pkg%d/handler_%d.go: the test TestHandler%d fails with a nil pointer "+
		"when the request has no body. Find the cause, fix it and run the package's tests.", session, turn, turn)
}

// toolOutput is a command's output of about n bytes, as a shell tool returns it.
func toolOutput(session, turn, n int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Exit code: 0\nWall time: 0.%d seconds\nOutput:\n", 1+turn%9)
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "internal/pkg%d/handler_%d.go:%d:\tif req.Body == nil { return nil, errNoBody%d }\n", session, turn, 40+i*7, i)
	}
	return b.String()[:n]
}

// developerPrompt is a Codex-like developer prompt of n bytes: numbered
// guidelines, as an agent's instructions with an AGENTS.md read.
func developerPrompt(n int) string {
	paras := []string{
		"You are a coding agent running in a terminal on the user's computer. You read files, run commands and edit code to finish the task the user gives you, and you keep going until it is done.",
		"Before making tool calls, send a brief preamble to the user explaining what you are about to do. Group related actions, keep it to one or two sentences, and build on what you said before.",
		"Use the shell tool to run commands. Prefer rg for searching text and rg --files for listing files, because they are much faster than grep and find. Set the working directory instead of using cd.",
		"Edit files with apply_patch. Never write files with cat or echo redirection. Keep changes minimal and focused on the task, consistent with the style of the existing codebase, and fix problems at their root cause.",
		"When the task is ambiguous, make a reasonable assumption and state it. Do not ask for confirmation of things you can check yourself by reading the code or running a command.",
		"Run the project's tests and linters after changing code, starting with the most specific tests for the code you changed, then broader ones. Do not fix unrelated bugs or broken tests; mention them.",
		"The sandbox allows writing in the workspace and the temporary directory only; network access is restricted. If a command needs more, ask for escalated permissions with a short justification.",
		"Your final message summarises what you changed and why, names the files, and says which commands you ran and what they showed. Use short paragraphs or bullets; do not dump whole files.",
	}
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "## Guideline %d\n%s\n\n", i+1, paras[i%len(paras)])
	}
	return b.String()[:n]
}

// codexTools are nine function tools with Codex-sized schemas; mock-tools
// calls the first.
var codexTools = []string{
	`{"type":"function","name":"shell","description":"Runs a shell command and returns its output.","strict":false,"parameters":{"type":"object","properties":{"command":{"type":"array","items":{"type":"string"},"description":"The command to execute"},"workdir":{"type":"string","description":"The working directory to execute the command in"},"timeout_ms":{"type":"number","description":"The timeout for the command in milliseconds"},"with_escalated_permissions":{"type":"boolean","description":"Whether to request escalated permissions"},"justification":{"type":"string","description":"Why escalated permissions are needed"}},"required":["command"],"additionalProperties":false}}`,
	`{"type":"function","name":"apply_patch","description":"Use the apply_patch tool to edit files. The patch language is a stripped-down, file-oriented diff format: *** Begin Patch, then Add File, Update File or Delete File sections, *** End Patch.","strict":false,"parameters":{"type":"object","properties":{"input":{"type":"string","description":"The entire contents of the apply_patch command"}},"required":["input"],"additionalProperties":false}}`,
	`{"type":"function","name":"update_plan","description":"Updates the task plan. Provide an optional explanation and a list of plan items, each with a step and status. At most one step can be in_progress at a time.","strict":false,"parameters":{"type":"object","properties":{"explanation":{"type":"string"},"plan":{"type":"array","description":"The list of steps","items":{"type":"object","properties":{"step":{"type":"string"},"status":{"type":"string","description":"One of: pending, in_progress, completed"}},"required":["step","status"],"additionalProperties":false}}},"required":["plan"],"additionalProperties":false}}`,
	`{"type":"function","name":"read_file","description":"Reads a local file with 1-indexed line numbers, supporting slice and indentation-aware block modes.","strict":false,"parameters":{"type":"object","properties":{"file_path":{"type":"string","description":"Absolute path to the file"},"offset":{"type":"number","description":"The line number to start reading from"},"limit":{"type":"number","description":"The maximum number of lines to return"},"mode":{"type":"string","description":"slice or indentation"}},"required":["file_path"],"additionalProperties":false}}`,
	`{"type":"function","name":"list_dir","description":"Lists entries in a local directory with 1-indexed entry numbers and simple type labels.","strict":false,"parameters":{"type":"object","properties":{"dir_path":{"type":"string","description":"Absolute path to the directory to list"},"offset":{"type":"number","description":"The entry number to start listing from"},"limit":{"type":"number","description":"The maximum number of entries to return"},"depth":{"type":"number","description":"The maximum directory depth to traverse"}},"required":["dir_path"],"additionalProperties":false}}`,
	`{"type":"function","name":"grep_files","description":"Finds files whose contents match the pattern and lists them by modification time.","strict":false,"parameters":{"type":"object","properties":{"pattern":{"type":"string","description":"Regular expression pattern to search for"},"include":{"type":"string","description":"Optional glob that limits which files are searched"},"path":{"type":"string","description":"Directory or file path to search"},"limit":{"type":"number","description":"Maximum number of file paths to return"}},"required":["pattern"],"additionalProperties":false}}`,
	`{"type":"function","name":"view_image","description":"Attach a local image (by filesystem path) to the conversation context for this turn.","strict":false,"parameters":{"type":"object","properties":{"path":{"type":"string","description":"Local filesystem path to an image file"}},"required":["path"],"additionalProperties":false}}`,
	`{"type":"function","name":"exec_command","description":"Runs a command in a pseudo-terminal, returning its output or a session id for ongoing interaction.","strict":false,"parameters":{"type":"object","properties":{"cmd":{"type":"string","description":"Shell command to execute"},"workdir":{"type":"string","description":"Working directory"},"yield_time_ms":{"type":"number","description":"How long to wait for output before yielding"},"max_output_tokens":{"type":"number","description":"Maximum number of tokens to return"}},"required":["cmd"],"additionalProperties":false}}`,
	`{"type":"function","name":"write_stdin","description":"Writes characters to an existing exec_command session and returns recent output.","strict":false,"parameters":{"type":"object","properties":{"session_id":{"type":"number","description":"Identifier of the running session"},"chars":{"type":"string","description":"Bytes to write to stdin"},"yield_time_ms":{"type":"number","description":"How long to wait for output before yielding"},"max_output_tokens":{"type":"number","description":"Maximum number of tokens to return"}},"required":["session_id"],"additionalProperties":false}}`,
}

// respEnd is a completed response: its id and output items.
type respEnd struct {
	id     string
	output []json.RawMessage
}

// turnReader follows one turn's events (SSE data or WebSocket messages):
// contiguous sequence numbers from 0, the first token, one ending.
type turnReader struct {
	start, first time.Time
	seq          int
}

// eventHead reads the type and sequence_number an event's JSON begins with
// ({"type":"...","sequence_number":N, as the door encodes every event);
// seq is -1 when there is none (a WebSocket mode error event).
func eventHead(data []byte) (typ string, seq int, ok bool) {
	rest, found := bytes.CutPrefix(data, []byte(`{"type":"`))
	if !found {
		return "", -1, false
	}
	i := bytes.IndexByte(rest, '"')
	if i < 0 {
		return "", -1, false
	}
	typ, rest = string(rest[:i]), rest[i+1:]
	rest, found = bytes.CutPrefix(rest, []byte(`,"sequence_number":`))
	if !found {
		return typ, -1, true
	}
	j := 0
	for j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
		j++
	}
	n, err := strconv.Atoi(string(rest[:j]))
	if err != nil {
		return typ, -1, false
	}
	return typ, n, true
}

// event takes one event; end is set at response.completed.
func (t *turnReader) event(data []byte) (*respEnd, error) {
	typ, seq, ok := eventHead(data)
	switch {
	case !ok:
		return nil, fmt.Errorf("not an event: %s", clip(data))
	case typ == "error":
		return nil, fmt.Errorf("error event: %s", clip(data))
	case seq != t.seq:
		return nil, fmt.Errorf("%s has sequence_number %d, want %d", typ, seq, t.seq)
	}
	t.seq++
	switch typ {
	case "response.output_text.delta":
		t.firstToken()
	case "response.output_item.added":
		if bytes.Contains(data, []byte(`"item":{"id":`)) && bytes.Contains(data, []byte(`"type":"function_call"`)) {
			t.firstToken()
		}
	case "response.completed":
		var ev struct {
			Response struct {
				ID     string            `json:"id"`
				Status string            `json:"status"`
				Output []json.RawMessage `json:"output"`
			} `json:"response"`
		}
		if err := json.Unmarshal(data, &ev); err != nil {
			return nil, fmt.Errorf("response.completed: %v", err)
		}
		if ev.Response.Status != "completed" {
			return nil, fmt.Errorf("response.completed with status %q", ev.Response.Status)
		}
		if t.first.IsZero() {
			return nil, errors.New("response.completed before any text or function_call")
		}
		return &respEnd{id: ev.Response.ID, output: ev.Response.Output}, nil
	case "response.failed", "response.incomplete":
		return nil, fmt.Errorf("%s: %s", typ, clip(data))
	}
	return nil, nil
}

func (t *turnReader) firstToken() {
	if t.first.IsZero() {
		t.first = time.Now()
	}
}

func clip(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "..."
	}
	return string(b)
}

// doorURL is the Responses route at raw's host: scheme "http" (the HTTP
// door) or "ws" (WebSocket mode), secure when raw is https or wss.
func doorURL(raw, scheme string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("%q is not a gateway URL", raw)
	}
	if u.Scheme == "https" || u.Scheme == "wss" {
		scheme += "s"
	}
	return scheme + "://" + u.Host + responsesPath, nil
}

// countingConn counts the bytes written and read on a connection.
type countingConn struct {
	net.Conn
	sent, recv *atomic.Int64
}

func (c countingConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.sent.Add(int64(n))
	return n, err
}

func (c countingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.recv.Add(int64(n))
	return n, err
}

// respArmRun collects one arm's turns.
type respArmRun struct {
	name, url  string
	sent, recv atomic.Int64 // wire bytes

	mu       sync.Mutex
	ttft     []time.Duration
	latency  []time.Duration
	byTurn   [][]time.Duration
	payload  []int64 // by turn, summed over sessions
	payloadN []int64
	turns    int64
	errors   []string
	start    time.Time
	end      time.Time
}

func newRespArmRun(name, url string, turns int) *respArmRun {
	return &respArmRun{name: name, url: url, byTurn: make([][]time.Duration, turns), payload: make([]int64, turns), payloadN: make([]int64, turns)}
}

func (a *respArmRun) countingDial() func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &net.Dialer{Timeout: 10 * time.Second}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{Conn: c, sent: &a.sent, recv: &a.recv}, nil
	}
}

func (a *respArmRun) turn(k int, payload int, ttft, latency time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.turns++
	a.ttft = append(a.ttft, ttft)
	a.latency = append(a.latency, latency)
	a.byTurn[k] = append(a.byTurn[k], ttft)
	a.payload[k] += int64(payload)
	a.payloadN[k]++
}

func (a *respArmRun) fail(session, turn int, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.errors = append(a.errors, fmt.Sprintf("%s session %d turn %d: %v", a.name, session, turn+1, err))
}

func (a *respArmRun) ended() {
	a.mu.Lock()
	if now := time.Now(); now.After(a.end) {
		a.end = now
	}
	a.mu.Unlock()
}

func (a *respArmRun) result() RespArm {
	a.mu.Lock()
	defer a.mu.Unlock()
	r := RespArm{Name: a.name, URL: a.url, Turns: a.turns, Errors: int64(len(a.errors)), TTFT: dist(a.ttft), Latency: dist(a.latency),
		GatewayCPUMsPerTurn: -1, GatewayCPUCores: -1, GatewayIdleCores: -1, GatewayCPUMsPerTurnActive: -1, Seconds: a.end.Sub(a.start).Seconds()}
	if a.turns > 0 {
		var p int64
		for _, v := range a.payload {
			p += v
		}
		r.PayloadPerTurn = float64(p) / float64(a.turns)
		r.WireSentPerTurn = float64(a.sent.Load()) / float64(a.turns)
		r.WireRecvPerTurn = float64(a.recv.Load()) / float64(a.turns)
	}
	if r.Seconds > 0 {
		r.TurnsPerSecond = float64(a.turns) / r.Seconds
	}
	return r
}

// httpArm runs turns through POST /v1/responses (stream:true).
type httpArm struct {
	*respArmRun
	hc *http.Client
}

func (h *httpArm) ask(ctx context.Context, tok string, body []byte) (*respEnd, *turnReader, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url, bytes.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	t := &turnReader{start: time.Now()}
	resp, err := h.hc.Do(req)
	if err != nil {
		return nil, t, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1000))
		return nil, t, fmt.Errorf("HTTP %d: %s", resp.StatusCode, clip(b))
	}
	r := bufio.NewReaderSize(resp.Body, 64<<10)
	for {
		line, err := r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			rest, err2 := r.ReadBytes('\n')
			line, err = append(append([]byte(nil), line...), rest...), err2
		}
		if err != nil {
			return nil, t, fmt.Errorf("the stream ended before response.completed: %w", err)
		}
		data, ok := bytes.CutPrefix(line, []byte("data: "))
		if !ok {
			continue
		}
		end, err := t.event(bytes.TrimRight(data, "\r\n"))
		if err != nil {
			return nil, t, err
		}
		if end != nil {
			_, _ = io.Copy(io.Discard, r) // to the end, so the connection is kept
			return end, t, nil
		}
	}
}

// wsArm runs turns in WebSocket mode, one socket per session.
type wsArm struct {
	*respArmRun
	dialer *websocket.Dialer
}

func (w *wsArm) dial(ctx context.Context, tok string) (*websocket.Conn, error) {
	c, resp, err := w.dialer.DialContext(ctx, w.url, http.Header{"Authorization": {"Bearer " + tok}})
	if err != nil {
		if resp != nil {
			return nil, fmt.Errorf("dial: HTTP %d: %w", resp.StatusCode, err)
		}
		return nil, fmt.Errorf("dial: %w", err)
	}
	return c, nil
}

func (w *wsArm) ask(c *websocket.Conn, event []byte, timeout time.Duration) (*respEnd, *turnReader, error) {
	_ = c.SetReadDeadline(time.Now().Add(timeout))
	t := &turnReader{start: time.Now()}
	if err := c.WriteMessage(websocket.TextMessage, event); err != nil {
		return nil, t, err
	}
	for {
		_, msg, err := c.ReadMessage()
		if err != nil {
			return nil, t, fmt.Errorf("the socket ended before response.completed: %w", err)
		}
		end, err := t.event(msg)
		if err != nil {
			return nil, t, err
		}
		if end != nil {
			return end, t, nil
		}
	}
}

// responses runs the scenario.
func (e *env) responses(ctx context.Context) (*Report, error) {
	s := e.s
	httpURL, err := doorURL(s.URL, "http")
	if err != nil {
		return nil, fmt.Errorf("--url: %w", err)
	}
	wsBase, wsPID := s.URL, s.PID
	if len(s.CompareURL) > 0 {
		wsBase, wsPID = s.CompareURL[0], 0
		if len(s.ComparePID) > 0 {
			wsPID = s.ComparePID[0]
		}
	}
	wsURL, err := doorURL(wsBase, "ws")
	if err != nil {
		return nil, fmt.Errorf("--compare-url: %w", err)
	}
	model := s.Model
	if model == "" {
		model = respDefaultModel
	}
	cfg := newRespConfig(model, s.MaxTokens)
	users := s.Users
	if users <= 0 {
		users = s.Streams
	}
	if err := e.prefetch(ctx, users); err != nil {
		return nil, err
	}
	var direct *router.Bedrock
	if s.set["bedrock-url"] {
		if direct, err = e.directModel(ctx); err != nil {
			return nil, err
		}
	}
	bedrockModel := s.BedrockModel
	if !s.set["bedrock-model"] {
		bedrockModel = respDefaultModel
	}

	ha := &httpArm{respArmRun: newRespArmRun("HTTP, full input", httpURL, s.Turns)}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext, tr.MaxIdleConnsPerHost, tr.ForceAttemptHTTP2 = ha.countingDial(), max(s.Streams, 2), false
	ha.hc = &http.Client{Transport: tr}
	wa := &wsArm{respArmRun: newRespArmRun("WebSocket mode, incremental", wsURL, s.Turns)}
	wa.dialer = &websocket.Dialer{NetDialContext: wa.countingDial(), HandshakeTimeout: 10 * time.Second,
		ReadBufferSize: 16 << 10, WriteBufferSize: 16 << 10}

	sameGateway := httpURL == strings.Replace(strings.Replace(wsURL, "wss://", "https://", 1), "ws://", "http://", 1)
	type probe struct {
		p            *gatewayProbe
		idle, before procSample
	}
	probes := map[string]*probe{}
	for name, pid := range map[string]int{"http": s.PID, "ws": wsPID} {
		if pid <= 0 || (sameGateway && name == "ws") {
			continue
		}
		pr := &probe{p: newGatewayProbe(pid, "")}
		if pr.idle, err = pr.p.sample(ctx); err != nil {
			return nil, err
		}
		probes[name] = pr
	}
	if len(probes) > 0 { // each gateway's idle CPU, to tell the turns' own apart
		select {
		case <-time.After(s.Settle):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		for _, pr := range probes {
			if pr.before, err = pr.p.sample(ctx); err != nil {
				return nil, err
			}
		}
	}
	var dsamples pathSamples

	bar := e.progress.bar(int64(2*s.Streams*s.Turns), "responses")
	toolCPU := selfCPU()
	start := time.Now()
	ha.start, wa.start = start, start
	var wg sync.WaitGroup
	for i := 0; i < s.Streams; i++ {
		user := i % users
		tokenOf := e.tokens.forUser(s.user(user), user)
		var kick chan struct{}
		if direct != nil {
			kick = make(chan struct{}, 1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				e.respDirect(ctx, direct, bedrockModel, cfg, i, kick, &dsamples)
			}()
		}
		wg.Add(2)
		go func() { // HTTP: the whole conversation every turn
			defer wg.Done()
			defer ha.ended()
			l := newToolLoop(cfg, i)
			for k := 0; k < s.Turns && ctx.Err() == nil; k++ {
				tok, err := tokenOf(ctx)
				if err != nil {
					ha.fail(i, k, err)
					return
				}
				body := l.httpBody()
				tctx, cancel := context.WithTimeout(ctx, s.Timeout)
				end, t, err := ha.ask(tctx, tok, body)
				cancel()
				if err == nil {
					err = l.advance(end)
				}
				bar.add(1)
				if err != nil {
					ha.fail(i, k, err)
					return
				}
				ha.turn(k, len(body), t.first.Sub(t.start), time.Since(t.start))
			}
		}()
		go func() { // WebSocket mode: the new input and previous_response_id
			defer wg.Done()
			defer wa.ended()
			if kick != nil {
				defer close(kick)
			}
			tok, err := tokenOf(ctx)
			if err != nil {
				wa.fail(i, 0, err)
				return
			}
			c, err := wa.dial(ctx, tok)
			if err != nil {
				wa.fail(i, 0, err)
				return
			}
			defer c.Close()
			l := newToolLoop(cfg, i)
			for k := 0; k < s.Turns && ctx.Err() == nil; k++ {
				if kick != nil && l.wantsTool() {
					select { // one direct call of the first turn's input, alongside
					case kick <- struct{}{}:
					default:
					}
				}
				ev := l.wsEvent()
				end, t, err := wa.ask(c, ev, s.Timeout)
				if err == nil {
					err = l.advance(end)
				}
				bar.add(1)
				if err != nil {
					wa.fail(i, k, err)
					return
				}
				wa.turn(k, len(ev), t.first.Sub(t.start), time.Since(t.start))
			}
		}()
	}
	wg.Wait()
	bar.finish()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	elapsed := time.Since(start)
	res := &ResponsesResult{Sessions: s.Streams, Turns: s.Turns, DevPromptBytes: len(cfg.devPrompt), ToolsBytes: len(cfg.tools),
		ToolOutputBytes: respToolOutputBytes, MaxOutputTokens: s.MaxTokens, HTTP: ha.result(), WS: wa.result(),
		SameGateway: sameGateway, ToolCPUCores: (selfCPU() - toolCPU) / elapsed.Seconds()}
	var notes []string
	for name, pr := range probes {
		after, err := pr.p.sample(ctx)
		if err != nil {
			return nil, err
		}
		secs := after.CPUSeconds - pr.before.CPUSeconds
		idle := (pr.before.CPUSeconds - pr.idle.CPUSeconds) / pr.before.At.Sub(pr.idle.At).Seconds()
		arm := &res.HTTP
		if name == "ws" {
			arm = &res.WS
		}
		switch {
		case sameGateway:
			if n := res.HTTP.Turns + res.WS.Turns; n > 0 {
				notes = append(notes, fmt.Sprintf("both arms ran on one gateway: %.2f ms of its CPU per turn of either arm, %.2f cores (give --compare-url and --compare-pid to tell them apart)",
					secs*1000/float64(n), secs/elapsed.Seconds()))
			}
		case arm.Turns > 0:
			arm.GatewayCPUMsPerTurn = math.Round(secs*1000/float64(arm.Turns)*1000) / 1000
			arm.GatewayCPUCores = math.Round(secs/elapsed.Seconds()*1000) / 1000
			arm.GatewayIdleCores = math.Round(idle*1000) / 1000
			arm.GatewayCPUMsPerTurnActive = math.Round(max(0, secs-idle*elapsed.Seconds())*1000/float64(arm.Turns)*1000) / 1000
		}
	}
	if direct != nil {
		st := dsamples.stats()
		res.Direct = &st
	}
	for k := 0; k < s.Turns; k++ {
		rt := RespTurn{Turn: k + 1, Kind: "user", HTTPTTFTP50: dist(ha.byTurn[k]).P50, WSTTFTP50: dist(wa.byTurn[k]).P50}
		if k%2 == 1 {
			rt.Kind = "tool_output"
		}
		if n := ha.payloadN[k]; n > 0 {
			rt.HTTPPayload = float64(ha.payload[k]) / float64(n)
		}
		if n := wa.payloadN[k]; n > 0 {
			rt.WSPayload = float64(wa.payload[k]) / float64(n)
		}
		res.ByTurn = append(res.ByTurn, rt)
	}
	res.Gain = respGain(res.HTTP, res.WS)

	rep := &Report{Scenario: "responses", URL: httpURL, Started: start, Seconds: elapsed.Seconds(),
		Params: map[string]any{"sessions": s.Streams, "turns": s.Turns, "users": users, "model": model, "max_output_tokens": s.MaxTokens,
			"http_url": httpURL, "ws_url": wsURL, "pid": s.PID, "compare_pid": wsPID, "app": s.App},
		Responses: res, Notes: notes}
	for _, a := range []*respArmRun{ha.respArmRun, wa.respArmRun} {
		a.mu.Lock()
		rep.Problems = append(rep.Problems, a.errors...)
		a.mu.Unlock()
	}
	if want := int64(s.Streams * s.Turns); res.HTTP.Turns != want || res.WS.Turns != want {
		rep.Problems = append(rep.Problems, fmt.Sprintf("turns completed: HTTP %d, WebSocket %d of %d each", res.HTTP.Turns, res.WS.Turns, want))
	}
	if res.Direct != nil && res.Direct.Errors > 0 {
		rep.Problems = append(rep.Problems, fmt.Sprintf("%d direct calls failed", res.Direct.Errors))
	}
	return rep, nil
}

// respDirect calls the mock straight with the first turn's input (the
// developer prompt, the first user message, the tools) once per kick.
func (e *env) respDirect(ctx context.Context, direct *router.Bedrock, model string, cfg *respConfig, session int, kick <-chan struct{}, p *pathSamples) {
	var tools []router.Tool
	for _, raw := range codexTools {
		var t struct {
			Name, Description string
			Parameters        json.RawMessage
		}
		_ = json.Unmarshal([]byte(raw), &t)
		tools = append(tools, router.Tool{Name: t.Name, Description: t.Description, InputSchema: t.Parameters})
	}
	for range kick {
		t := &timing{}
		cctx, cancel := context.WithTimeout(ctx, e.s.Timeout)
		t.start = time.Now()
		_, err := direct.Stream(cctx, router.Call{ModelID: model, System: cfg.devPrompt, MaxTokens: cfg.maxTokens, Tools: tools,
			Messages: []router.Message{{Role: "user", Content: userText(session, 0)}}}, func(string) { t.text() })
		cancel()
		p.add(t.ttft(), nil, err)
	}
}

func respGain(h, w RespArm) RespGain {
	ratio := func(a, b float64) float64 {
		if a <= 0 || b <= 0 {
			return 0
		}
		return math.Round(a/b*1000) / 1000
	}
	r3 := func(x float64) float64 { return math.Round(x*1000) / 1000 }
	return RespGain{TTFTSavedP50: r3(h.TTFT.P50 - w.TTFT.P50), TTFTSavedP95: r3(h.TTFT.P95 - w.TTFT.P95), TTFTSavedP99: r3(h.TTFT.P99 - w.TTFT.P99),
		TTFTRatioP50: ratio(h.TTFT.P50, w.TTFT.P50), TTFTRatioP95: ratio(h.TTFT.P95, w.TTFT.P95), TTFTRatioP99: ratio(h.TTFT.P99, w.TTFT.P99),
		CPURatio: ratio(h.GatewayCPUMsPerTurnActive, w.GatewayCPUMsPerTurnActive), BytesRatio: ratio(h.WireSentPerTurn, w.WireSentPerTurn),
		TurnsRatio: ratio(w.TurnsPerSecond, h.TurnsPerSecond)}
}

// writeMarkdown writes the arms side by side, the gain and the turns.
func (r *ResponsesResult) writeMarkdown(b *strings.Builder) {
	fmt.Fprintf(b, "%d sessions x %d turns per arm, both arms at once; a %d-byte developer prompt, %d tools (%d bytes), tool outputs of %d bytes, max_output_tokens %d (0: not sent).\n\n",
		r.Sessions, r.Turns, r.DevPromptBytes, len(codexTools), r.ToolsBytes, r.ToolOutputBytes, r.MaxOutputTokens)
	cpu := func(a RespArm) string {
		if a.GatewayCPUMsPerTurn < 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f ms, %.2f above idle (%.3f cores; idle %.3f)", a.GatewayCPUMsPerTurn, a.GatewayCPUMsPerTurnActive, a.GatewayCPUCores, a.GatewayIdleCores)
	}
	b.WriteString("| Arm | turns | errors | TTFT p50 | p95 | p99 | turn latency p50 | gateway CPU per turn | sent per turn (wire / payload) | received per turn | turns/s |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, a := range []RespArm{r.HTTP, r.WS} {
		fmt.Fprintf(b, "| %s | %d | %d | %s | %s | %s | %s | %s | %.0f B / %.0f B | %.0f B | %.2f |\n", a.Name, a.Turns, a.Errors,
			dur(a.TTFT.P50), dur(a.TTFT.P95), dur(a.TTFT.P99), dur(a.Latency.P50), cpu(a), a.WireSentPerTurn, a.PayloadPerTurn, a.WireRecvPerTurn, a.TurnsPerSecond)
	}
	if r.Direct != nil {
		fmt.Fprintf(b, "\nDirect to the mock (the first turn's input, Bedrock SDK, %d calls, %d errors): TTFT p50 %s, p95 %s, p99 %s.\n",
			r.Direct.Requests, r.Direct.Errors, dur(r.Direct.TTFT.P50), dur(r.Direct.TTFT.P95), dur(r.Direct.TTFT.P99))
	}
	g := r.Gain
	fmt.Fprintf(b, "\n| Gain of WebSocket mode | p50 | p95 | p99 |\n|---|---|---|---|\n")
	fmt.Fprintf(b, "| TTFT saved (HTTP - WS) | %+.1f ms | %+.1f ms | %+.1f ms |\n", g.TTFTSavedP50, g.TTFTSavedP95, g.TTFTSavedP99)
	fmt.Fprintf(b, "| TTFT HTTP / WS | x%.3f | x%.3f | x%.3f |\n", g.TTFTRatioP50, g.TTFTRatioP95, g.TTFTRatioP99)
	fmt.Fprintf(b, "\nHTTP / WS: gateway CPU per turn above idle x%.2f, bytes sent per turn x%.2f; turns/s WS / HTTP x%.3f. Load tool CPU: %.2f cores.\n\n",
		g.CPURatio, g.BytesRatio, g.TurnsRatio, r.ToolCPUCores)
	b.WriteString("| Turn | new input | HTTP TTFT p50 | WS TTFT p50 | HTTP payload | WS payload |\n|---|---|---|---|---|---|\n")
	for _, t := range r.ByTurn {
		fmt.Fprintf(b, "| %d | %s | %s | %s | %.0f B | %.0f B |\n", t.Turn, t.Kind, dur(t.HTTPTTFTP50), dur(t.WSTTFTP50), t.HTTPPayload, t.WSPayload)
	}
	b.WriteString("\n")
}

// responsesDefaults fills the responses scenario's defaults.
func (s *settings) responsesDefaults() error {
	if !s.set["streams"] {
		s.Streams = 10
	}
	if !s.set["settle"] {
		s.Settle = 5 * time.Second
	}
	if s.App == "" {
		s.App = "coding-agent"
	}
	if s.Streams <= 0 || s.Turns < 2 {
		return fmt.Errorf("responses: --streams must be positive and --turns at least 2")
	}
	return nil
}
