package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jetway-gateway/jetway/internal/mockmodel"
	"github.com/jetway-gateway/jetway/internal/telemetry"
)

// codexVersion is the Codex CLI package.json pins (@openai/codex).
const codexVersion = "0.171.0"

// codexRunTimeout bounds one `codex exec`: a turn takes seconds; a Codex
// retrying a refused request backs off for about 6 s, five times over.
const codexRunTimeout = 90 * time.Second

// TestCodexCLI runs OpenAI's Codex CLI (the pinned @openai/codex, `codex
// exec`) against real gateway processes on dynalite, through the Responses
// door, with a model provider of wire_api "responses" (docs/responses.md,
// "Codex CLI through Jetway"). Codex's HOME, CODEX_HOME and TMPDIR are
// temporary; every proxy variable points at a recording proxy, so Codex
// reaching for any address but the gateway's fails the test. Codex always
// sends its tools, so the models have the tools capability: the app is
// contoso-agent (mock-tools, mock-reasoning).
func TestCodexCLI(t *testing.T) {
	codex, err := filepath.Abs(filepath.Join("..", "..", "node_modules", ".bin", "codex"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(codex); err != nil {
		t.Fatalf("the Codex CLI is missing (%v): run `make test-deps` (npm ci, which installs @openai/codex %s from package.json) at the repository root", err, codexVersion)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node is required for the Codex CLI's launcher (apt-get install nodejs npm; then make test-deps)")
	}
	if out, err := exec.Command(node, codex, "--version").CombinedOutput(); err != nil || !strings.Contains(string(out), codexVersion) {
		t.Fatalf("codex --version: %q (%v), want %s: run `make test-deps` at the repository root", out, err, codexVersion)
	}
	cx := &codexCLI{node: node, bin: codex}

	t.Run("plain", func(t *testing.T) {
		// One server, the mock at its fast pace: a, b and c.
		rec := newConverseRecorder(t, fastPace())
		w := rec.w
		cl := w.cluster(1, map[string]string{"AWS_ENDPOINT_URL_BEDROCK_RUNTIME": rec.URL})
		g := cl.servers[0]
		token := w.token("codex-user", "contoso", "contoso-agent", time.Hour)
		base := "http://" + g.Addr + "/v1"

		t.Run("websocket", func(t *testing.T) {
			before := len(g.logs.Find("session_opened", ""))
			r := cx.run(t, base, token, true, "mock-reasoning", "say hi")
			r.mustSucceed(t)
			call := rec.answered(t, r.stdout)
			if call.model != "mock-reasoning" {
				t.Errorf("answered by %s, want mock-reasoning", call.model)
			}
			opened := g.logs.Find("session_opened", "")[before:]
			if len(opened) == 0 {
				t.Fatalf("no WebSocket session was opened for supports_websockets=true\n%s", g.logs.Excerpt())
			}
			recs := awaitDoorRecords(t, w, func(r telemetry.UsageRecord) bool { return r.SessionID == opened[len(opened)-1]["session_id"] }, 1)
			checkCodexRecords(t, recs, "mock-reasoning")
			if len(recs) != 1 {
				t.Errorf("%d model calls on the WebSocket session, want 1 (the warm-up, generate:false, calls none): %+v", len(recs), recs)
			}
			dropped := g.logs.Find("responses_left_out", "")
			if len(dropped) == 0 {
				t.Errorf("no responses_left_out line: Codex's namespace and web_search tools should be left out")
			}
		})

		t.Run("http", func(t *testing.T) {
			before := len(g.logs.Find("session_opened", ""))
			r := cx.run(t, base, token, false, "mock-reasoning", "say hi over HTTP")
			r.mustSucceed(t)
			rec.answered(t, r.stdout)
			if n := len(g.logs.Find("session_opened", "")) - before; n != 0 {
				t.Errorf("%d WebSocket sessions opened with supports_websockets=false, want 0", n)
			}
			// Over HTTP a request is its own session.
			recs := awaitDoorRecords(t, w, func(r telemetry.UsageRecord) bool {
				return r.SessionID == r.RequestID && r.Model == "mock-reasoning"
			}, 1)
			checkCodexRecords(t, recs, "mock-reasoning")
		})

		t.Run("tool", func(t *testing.T) {
			before := len(g.logs.Find("session_opened", ""))
			r := cx.run(t, base, token, true, "mock-tools", "list the files here")
			r.mustSucceed(t)
			final := rec.answered(t, r.stdout)
			if !final.lastHasToolResult {
				t.Errorf("Codex printed an answer to a conversation that does not end in the tool's result")
			}
			// Codex got the call of its first tool (exec_command, with the
			// mock's {"query": ...}, not its {"cmd": ...}) and answered it
			// with a function_call_output: the model's tool result.
			if !strings.Contains(final.toolResult, "missing field `cmd`") {
				t.Errorf("the function_call_output Codex sent, as the model's tool result: %s; want Codex's refusal of exec_command's arguments", final.toolResult)
			}
			opened := g.logs.Find("session_opened", "")[before:]
			if len(opened) == 0 {
				t.Fatalf("no WebSocket session was opened\n%s", g.logs.Excerpt())
			}
			sid := opened[len(opened)-1]["session_id"]
			recs := awaitDoorRecords(t, w, func(r telemetry.UsageRecord) bool { return r.SessionID == sid }, 2)
			checkCodexRecords(t, recs, "mock-tools")
			if len(recs) != 2 {
				t.Fatalf("%d responses requests on the tool turn's session, want 2 (the function_call, then the answer to its output): %+v", len(recs), recs)
			}
			calls := 0
			for _, r := range recs {
				calls += r.ToolCalls
			}
			if calls != 1 {
				t.Errorf("%d tool calls in the turn's records, want 1", calls)
			}
		})
	})

	t.Run("killed", func(t *testing.T) {
		// d: HAProxy in front of two servers; the one holding Codex's
		// socket is SIGKILLed mid-answer. 300 tokens at 10 ms: the answer
		// streams for about 3 s.
		rec := newConverseRecorder(t, mockmodel.Options{TTFT: time.Millisecond, PerToken: 10 * time.Millisecond})
		w := rec.w
		cl := w.cluster(2, map[string]string{"AWS_ENDPOINT_URL_BEDROCK_RUNTIME": rec.URL,
			"JETWAY_RESPONSES_REASONING_KEY": responsesNodeKey, "JETWAY_LOG_LEVEL": "debug"}) // debug: the first_token line
		// Server 1 is registered once the turn streams on server 0, so
		// Codex's socket is on server 0.
		lb := startHAProxy(t, cl.servers, map[int]bool{1: true})
		front := strings.TrimSuffix(strings.TrimPrefix(lb.URL, "ws://"), "/v1/ws")
		token := w.token("codex-killed", "contoso", "contoso-agent", time.Hour)
		killed := make(chan string, 1)
		go func() {
			// The turn's first token on server 0 (the warm-up calls no model).
			found := cl.servers[0].logs.Await("first_token", "", 1, codexRunTimeout)
			if len(found) == 0 {
				close(killed)
				return
			}
			if out, err := lb.command("enable server gateways/g1"); err != nil || strings.TrimSpace(out) != "" {
				t.Errorf("enable server g1: %q, %v", out, err)
			}
			cl.servers[0].signal(syscall.SIGKILL)
			killed <- fmt.Sprint(found[0]["request_id"])
		}()
		r := cx.run(t, "http://"+front+"/v1", token, true, "mock-reasoning", "tell a long story")
		id, ok := <-killed
		if !ok {
			t.Fatalf("the turn never streamed on server 0\ncodex stderr:\n%s\n%s", r.stderr, cl.servers[0].logs.Excerpt())
		}
		cl.servers[0].wait(t, 10*time.Second)
		if len(cl.servers[0].logs.Find("completed", id)) != 0 {
			t.Fatalf("request %s completed on server 0 before the kill: not a kill mid-turn", id)
		}
		r.mustSucceed(t)
		call := rec.answered(t, r.stdout)
		if call.model != "mock-reasoning" {
			t.Errorf("answered by %s, want mock-reasoning", call.model)
		}
		done := cl.servers[1].logs.Await("completed", "", 1, 30*time.Second)
		if len(done) == 0 {
			t.Fatalf("no request completed on server 1\n%s", cl.servers[1].logs.Excerpt())
		}
		for _, l := range done {
			if l["door"] != "responses" {
				t.Errorf("server 1 completed %v through door %v, want responses", l["request_id"], l["door"])
			}
		}
		// Codex said it reconnected (a new socket, the full input), or fell
		// back to HTTP after its retries.
		reconnects := regexp.MustCompile(`Reconnecting\.\.\. \d+/\d+`).FindAllString(r.stderr, -1)
		fallback := strings.Contains(r.stderr, "Falling back from WebSockets")
		if len(reconnects) == 0 && !fallback {
			t.Errorf("Codex's stderr shows neither a reconnect nor the HTTP fallback:\n%s", r.stderr)
		}
		// The cut call is ended by the survivor once the fleet judges server
		// 0 gone (its stale bound, 10 s): interrupted, charged its input and
		// what its last checkpoint saved. The turn sent again is a model
		// call of its own.
		cut := awaitDoorRecords(t, w, func(r telemetry.UsageRecord) bool { return r.RequestID == id }, 1)
		if cut[0].Outcome != "interrupted" || cut[0].Server != "task-1" || cut[0].InputTokens <= 0 || cut[0].OutputTokens >= int64(rec.tok) {
			t.Errorf("the cut request's usage record %+v: want it ended interrupted by task-1, charged its input and the output saved", cut[0])
		}
		rec.mu.Lock()
		calls := len(rec.calls)
		rec.mu.Unlock()
		if calls != 2 {
			t.Errorf("%d model calls, want 2: the cut one and the turn sent again", calls)
		}
		t.Logf("the cut request: outcome %s, %d output tokens charged, $%.6f", cut[0].Outcome, cut[0].OutputTokens, cut[0].CostUSD)
		t.Logf("killed mid-turn (request %s on server 0): Codex's stderr shows %v, HTTP fallback %v; server 1 opened %d WebSocket session(s) and completed %d request(s)",
			id, reconnects, fallback, len(cl.servers[1].logs.Find("session_opened", "")), len(done))
	})
}

// codexCLI runs `codex exec` as a user would, in a home of its own.
type codexCLI struct{ node, bin string }

type codexResult struct {
	stdout, stderr string
	err            error
	took           time.Duration
}

func (r codexResult) mustSucceed(t *testing.T) {
	t.Helper()
	if r.err != nil {
		t.Fatalf("codex exec: %v after %s\nstdout:\n%s\nstderr:\n%s", r.err, r.took.Round(time.Millisecond), r.stdout, r.stderr)
	}
	if strings.TrimSpace(r.stdout) == "" {
		t.Fatalf("codex exec printed no answer\nstderr:\n%s", r.stderr)
	}
	t.Logf("codex exec exited 0 after %s", r.took.Round(time.Millisecond))
}

// run asks prompt through the gateway at base (http://host:port/v1) with
// a token, over WebSocket mode when ws.
func (cx *codexCLI) run(t *testing.T, base, token string, ws bool, model, prompt string) codexResult {
	t.Helper()
	root := t.TempDir()
	home, codexHome, tmp, work := filepath.Join(root, "home"), filepath.Join(root, "codex-home"), filepath.Join(root, "tmp"), filepath.Join(root, "work")
	for _, d := range []string{home, codexHome, tmp, work} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	config := fmt.Sprintf(`model = %q
model_provider = "jetway"
check_for_update_on_startup = false
approval_policy = "never"

[analytics]
enabled = false

[model_providers.jetway]
name = "Jetway"
base_url = %q
env_key = "JETWAY_API_KEY"
wire_api = "responses"
supports_websockets = %v
`, model, base, ws)
	if err := os.WriteFile(filepath.Join(codexHome, "config.toml"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	proxy := newRecordingProxy(t)
	env := []string{"PATH=" + filepath.Dir(cx.node) + ":/usr/bin:/bin", "HOME=" + home, "CODEX_HOME=" + codexHome, "TMPDIR=" + tmp,
		"LANG=C.UTF-8", "JETWAY_API_KEY=" + token, "NO_PROXY=127.0.0.1,localhost", "no_proxy=127.0.0.1,localhost"}
	for _, k := range []string{"HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "https_proxy", "http_proxy", "all_proxy"} {
		env = append(env, k+"="+proxy.URL)
	}
	ctx, cancel := context.WithTimeout(context.Background(), codexRunTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, cx.node, cx.bin, "exec", "--skip-git-repo-check", "--ephemeral",
		"--disable", "plugins", "--disable", "remote_plugin", "--disable", "apps", "-s", "read-only", "-C", work, prompt)
	cmd.Dir, cmd.Env, cmd.Stdin = work, env, strings.NewReader("")
	// The launcher runs the native binary as its child: end them together.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	r := codexResult{stdout: stdout.String(), stderr: stderr.String(), err: err, took: time.Since(start)}
	if ctx.Err() != nil {
		r.err = fmt.Errorf("no exit within %s (%v)", codexRunTimeout, err)
	}
	if seen := proxy.Seen(); len(seen) > 0 {
		t.Errorf("Codex reached for other addresses than the gateway's: %v", seen)
	}
	return r
}

// converseRecorder is the mock Bedrock endpoint with a record of every
// ConverseStream call, so that a test can compute the mock's answer to
// exactly what the gateway sent.
type converseRecorder struct {
	URL   string
	w     *world
	tok   int // the mock's answer length (Options.Tokens)
	mu    sync.Mutex
	calls []converseCall
}

type converseCall struct {
	model             string
	system            string
	messages          []string
	maxTokens         int
	lastHasToolResult bool
	toolResult        string // the last message's tool result, as JSON
}

func newConverseRecorder(t *testing.T, pace mockmodel.Options) *converseRecorder {
	rec := &converseRecorder{w: newWorld(t, pace), tok: pace.Tokens}
	if rec.tok == 0 {
		rec.tok = mockmodel.DefaultTokens
	}
	ts := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(rw, err.Error(), http.StatusBadRequest)
			return
		}
		if rest, ok := strings.CutPrefix(r.URL.Path, "/model/"); ok {
			if id, ok := strings.CutSuffix(rest, "/converse-stream"); ok {
				if model, err := url.PathUnescape(id); err == nil {
					rec.record(model, body)
				}
			}
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		rec.w.mock.ServeHTTP(rw, r)
	}))
	t.Cleanup(ts.Close)
	rec.URL = ts.URL
	return rec
}

func (rec *converseRecorder) record(model string, body []byte) {
	type block struct {
		Text       *string         `json:"text"`
		ToolResult json.RawMessage `json:"toolResult"`
	}
	var b struct {
		System   []block `json:"system"`
		Messages []struct {
			Content []block `json:"content"`
		} `json:"messages"`
		InferenceConfig *struct {
			MaxTokens int `json:"maxTokens"`
		} `json:"inferenceConfig"`
	}
	if json.Unmarshal(body, &b) != nil {
		return
	}
	join := func(bs []block) string { // as the mock joins text blocks
		var texts []string
		for _, x := range bs {
			if x.Text != nil {
				texts = append(texts, *x.Text)
			}
		}
		return strings.Join(texts, "\n")
	}
	c := converseCall{model: model, system: join(b.System)}
	for _, m := range b.Messages {
		c.messages = append(c.messages, join(m.Content))
	}
	if n := len(b.Messages); n > 0 {
		for _, x := range b.Messages[n-1].Content {
			if len(x.ToolResult) > 0 {
				c.lastHasToolResult, c.toolResult = true, string(x.ToolResult)
			}
		}
	}
	if b.InferenceConfig != nil {
		c.maxTokens = b.InferenceConfig.MaxTokens
	}
	rec.mu.Lock()
	rec.calls = append(rec.calls, c)
	rec.mu.Unlock()
}

// text is the mock's text answer to the call when it calls no tool: after
// mock-reasoning's 16 reasoning pieces, the rest of its tokens.
func (rec *converseRecorder) text(c converseCall) string {
	limit := rec.tok
	if c.maxTokens > 0 && c.maxTokens < limit {
		limit = c.maxTokens
	}
	if c.model == "mock-reasoning" {
		limit -= 16
	}
	return strings.Join(mockmodel.Tokens(c.model, c.system, c.messages, limit), "")
}

// answered is the model call whose whole text answer stdout is.
func (rec *converseRecorder) answered(t *testing.T, stdout string) converseCall {
	t.Helper()
	got := strings.TrimSpace(stdout)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, c := range rec.calls {
		if got != "" && got == rec.text(c) {
			return c
		}
	}
	t.Fatalf("Codex printed %q: not the mock's whole answer to any of the gateway's %d model calls", got, len(rec.calls))
	return converseCall{}
}

// awaitDoorRecords waits for at least n usage records that match, and
// returns them all.
func awaitDoorRecords(t *testing.T, w *world, match func(telemetry.UsageRecord) bool, n int) []telemetry.UsageRecord {
	t.Helper()
	dir := w.env["JETWAY_USAGE_DIR"]
	deadline := time.Now().Add(30 * time.Second)
	for {
		recs, _, err := telemetry.ReadUsageDir(dir)
		if err != nil {
			t.Fatalf("usage records under %s: %v", dir, err)
		}
		var out []telemetry.UsageRecord
		for _, r := range recs {
			if match(r) {
				out = append(out, r)
			}
		}
		if len(out) >= n {
			time.Sleep(200 * time.Millisecond) // a later record of the same session would be written by now
			if again, _, err := telemetry.ReadUsageDir(dir); err == nil && len(again) != len(recs) {
				continue
			}
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d matching usage records under %s within 30s, want %d; all: %+v", len(out), dir, n, recs)
		}
		time.Sleep(50 * time.Millisecond) // polling a directory: nothing to wait on
	}
}

// checkCodexRecords: each record is a done request of the Responses door
// for Codex's user of contoso-agent, on model.
func checkCodexRecords(t *testing.T, recs []telemetry.UsageRecord, model string) {
	t.Helper()
	for _, r := range recs {
		if r.Door != "responses" || r.Outcome != "done" || r.App != "agent" || r.Tenant != "contoso" || r.Model != model || r.CostUSD <= 0 {
			t.Errorf("usage record %+v: want door responses, outcome done, contoso/agent, model %s, a cost", r, model)
		}
	}
}
