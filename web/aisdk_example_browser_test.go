package web

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/jetway-gateway/jetway/client"
	"github.com/jetway-gateway/jetway/internal/dynalitetest"
	"github.com/jetway-gateway/jetway/internal/protocol"
	"github.com/jetway-gateway/jetway/internal/stream"
)

// The example frontend people copy (examples/ai-sdk-chat: React, useChat
// and the AI SDK's own WebSocketChatTransport on the /v1/ai-sdk door),
// built by `make test-deps` (the Makefile's example target), in Chromium.

// exampleDir is the example's directory, from this package's.
const exampleDir = "../examples/ai-sdk-chat"

// exampleDist is the example's build, checked to be newer than its sources.
func exampleDist(t *testing.T) string {
	t.Helper()
	dist, err := filepath.Abs(filepath.Join(exampleDir, "dist"))
	if err != nil {
		t.Fatal(err)
	}
	built, err := os.Stat(filepath.Join(dist, "index.html"))
	if err != nil {
		t.Fatalf("the example is not built (%v): run `make example` (make test-deps does)", err)
	}
	var stale []string
	for _, src := range []string{"index.html", "vite.config.js", "package-lock.json", "src"} {
		_ = filepath.Walk(filepath.Join(exampleDir, src), func(path string, info os.FileInfo, err error) error {
			if err == nil && !info.IsDir() && info.ModTime().After(built.ModTime()) {
				stale = append(stale, path)
			}
			return nil
		})
	}
	if len(stale) > 0 {
		t.Fatalf("the example's build is older than %v: run `make example`", stale)
	}
	return dist
}

// serveExample serves the example's build as its dev server would: the
// files, and /dev/ (the dev sign-in) forwarded to the first of gateways
// that answers, without the page's Origin (see the example's
// vite.config.js). The WebSocket goes to the gateway directly (?gateway=),
// from this server's loopback origin.
func serveExample(t *testing.T, gateways ...*gatewayProc) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("/", http.FileServer(http.Dir(exampleDist(t))))
	mux.HandleFunc("/dev/", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		for _, g := range gateways {
			req, err := http.NewRequestWithContext(r.Context(), r.Method, g.HTTP()+r.URL.Path, bytes.NewReader(body))
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			req.Header.Set("Content-Type", r.Header.Get("Content-Type"))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				continue // a dead gateway: the next one
			}
			w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
			w.WriteHeader(resp.StatusCode)
			_, _ = io.Copy(w, resp.Body)
			_ = resp.Body.Close()
			return
		}
		http.Error(w, "no gateway answers", http.StatusBadGateway)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

// openExample opens the example at site with settings q (gateway, user,
// ttl...) and waits for its chat to be ready.
func openExample(t *testing.T, site string, q url.Values) *page {
	t.Helper()
	p := openPage(t, site+"/?"+q.Encode(), 1024, 768)
	// Ready, and the resume on load (useChat's resume: true) answered.
	p.waitJS(`(() => { const m = document.querySelector('main'); return m?.dataset.status === 'ready' && m.dataset.resuming === 'false'; })()`,
		"the example's chat", 30*time.Second)
	return p
}

// answer is the example's last assistant message: what useChat assembled
// (Text: its text parts) and what the page shows.
type answer struct {
	ID     string   `json:"id"`
	State  string   `json:"state"` // streaming, done, stopped, error
	Text   string   `json:"text"`
	Shown  string   `json:"shown"`
	Tools  []string `json:"tools"` // name:state of its tool parts
	Count  int      `json:"count"` // assistant messages
	Status string   `json:"status"`
	// Recovering: the socket broke in the middle of the answer and the page resumes it.
	Recovering bool `json:"recovering"`
}

const exampleAnswerJS = `(() => {
  const el = [...document.querySelectorAll('.message.assistant')].at(-1);
  const all = window.jetwayExample.messages.filter(m => m.role === 'assistant');
  const m = all.at(-1);
  const main = document.querySelector('main');
  const status = main?.dataset.status ?? '', recovering = main?.dataset.recovering === 'true';
  if (!el || !m) return {id: '', state: '', text: '', shown: '', tools: [], count: all.length, status, recovering};
  return {id: m.id, state: el.dataset.state,
    text: m.parts.filter(p => p.type === 'text').map(p => p.text).join(''),
    shown: [...el.querySelectorAll('.text')].map(e => e.textContent).join('').trim(),
    tools: [...el.querySelectorAll('.tool')].map(e => e.dataset.tool + ':' + e.dataset.toolState),
    count: all.length, status, recovering};
})()`

func (p *page) answer() answer { return eval[answer](p, exampleAnswerJS) }

// ask types prompt into the example and presses Send (keystrokes: the
// textarea is React's).
func (p *page) askExample(prompt string) {
	p.t.Helper()
	p.do(chromedp.SendKeys(chromedp.CSS("#prompt"), prompt), chromedp.Click(chromedp.CSS("#send")))
}

// waitStreaming waits until the last answer streams with some text and returns it.
func (p *page) waitStreaming(n int) answer {
	p.t.Helper()
	p.waitJS(fmt.Sprintf(`(() => { const a = %s; return a.count >= %d && a.state === 'streaming' && a.text.length > 0; })()`, exampleAnswerJS, n),
		"the answer to stream", 30*time.Second)
	return p.answer()
}

// waitSettled waits until the n-th answer ended (done, stopped or error) and the chat is ready.
func (p *page) waitSettled(n int) answer {
	p.t.Helper()
	p.waitJS(fmt.Sprintf(`(() => { const a = %s; return a.count >= %d && ['done', 'stopped', 'error'].includes(a.state) && !a.recovering && a.status !== 'streaming' && a.status !== 'submitted'; })()`, exampleAnswerJS, n),
		"the answer to end", 60*time.Second)
	return p.answer()
}

// TestExampleChat: the example asks, streams the answer equal to the Go
// client's on /v1/ws, shows the quota from the answer's metadata, renews
// its token for every frame (?ttl=60) with no reconnect; Stop ends an
// answer part-way; a client-side tool call runs in the page and its output
// goes back to the model, which answers; a picture goes to a reasoning
// model, whose reasoning shows beside the answer.
func TestExampleChat(t *testing.T) {
	gw := browserGateway(t, "example-chat")
	site := serveExample(t, gw)
	prompts := []string{"Where is gate B12?", "Tell me everything about the lounges."}
	want := references(t, gw, prompts...)

	p := openExample(t, site, url.Values{"gateway": {gw.HTTP()}, "user": {"eve"}, "ttl": {"60"}})
	if title := eval[string](p, `document.title`); title != "AI SDK chat on Jetway" {
		t.Errorf("title %q", title)
	}
	p.askExample(prompts[0])
	partial := p.waitStreaming(1)
	first := p.waitSettled(1)
	answers := want()
	if first.State != "done" || first.Text != answers[0] {
		t.Fatalf("answer: state %s, text %q\nwant %q", first.State, first.Text, answers[0])
	}
	if first.Shown != answers[0] {
		t.Errorf("the page shows %q, want %q", first.Shown, answers[0])
	}
	if !strings.HasPrefix(answers[0], partial.Text) || len(partial.Text) >= len(answers[0]) || partial.ID != first.ID {
		t.Errorf("while streaming the page had %q (message %s), want a part of the answer (message %s)", partial.Text, partial.ID, first.ID)
	}
	quota := eval[string](p, `document.getElementById('quota').textContent`)
	if !regexp.MustCompile(`^Quota: [\d,]+ of 2,000,000 tokens left this hour$`).MatchString(quota) {
		t.Errorf("quota line %q", quota)
	}
	// The connect, the resume on load and the send each asked for a token
	// (a 60 s token is renewed whenever it is used), and the door took the
	// renewed ones from the frames' headers.
	if n := eval[int](p, `window.jetwayExample.tokenFetches`); n < 3 {
		t.Errorf("%d dev tokens fetched, want a fresh one for each frame (3 or more)", n)
	}

	// Stop in the middle of the next answer: the page keeps what came.
	p.askExample(prompts[1])
	p.waitStreaming(2)
	p.do(chromedp.Click(chromedp.CSS("#stop")))
	stopped := p.waitSettled(2)
	if stopped.State != "stopped" || stopped.Status != "ready" {
		t.Fatalf("after Stop: state %s, chat %s", stopped.State, stopped.Status)
	}
	if stopped.Text == "" || !strings.HasPrefix(answers[1], stopped.Text) || stopped.Text == answers[1] {
		t.Errorf("stopped answer %q: want a part of %q", stopped.Text, answers[1])
	}
	// The gateway cancelled the answer (the transport's abort frame), charging what was generated.
	waitFor(t, 15*time.Second, "the gateway to cancel the stopped answer", func() bool {
		for _, m := range gw.Log.Find("failed", "") {
			if m["user"] == "eve" && m["door"] == "ai-sdk" && m["code"] == "cancelled" {
				return true
			}
		}
		return false
	})
	p.screenshot("example-stopped")

	// A client-side tool: mock-tools calls the first tool it is given (the
	// page's get_local_time), the page runs it and sends its output back.
	p.do(chromedp.Click(chromedp.CSS("#new-chat")))
	p.waitJS(`window.jetwayExample.messages.length === 0 && document.querySelectorAll('.message').length === 0`, "a new chat", 10*time.Second)
	// A React select takes a value through the native setter and a change event.
	if !eval[bool](p, `(() => { const s = document.getElementById('model');
		Object.getOwnPropertyDescriptor(HTMLSelectElement.prototype, 'value').set.call(s, 'mock-tools');
		s.dispatchEvent(new Event('change', {bubbles: true})); return s.value === 'mock-tools'; })()`) {
		t.Fatal("the model picker has no mock-tools")
	}
	p.askExample("What time is it here?")
	p.waitJS(fmt.Sprintf(`(() => { const a = %s; return a.status === 'ready' && a.state === 'done' &&
		window.jetwayExample.messages.some(m => m.parts.some(p => p.type === 'tool-get_local_time' && p.state === 'output-available')) &&
		a.text.length > 0 && !a.tools.some(t => !t.endsWith(':output-available')); })()`, exampleAnswerJS),
		"the tool's round trip", 60*time.Second)
	tool := eval[map[string]any](p, `window.jetwayExample.messages.flatMap(m => m.parts).find(p => p.type === 'tool-get_local_time')`)
	out, _ := tool["output"].(map[string]any)
	if tz, _ := out["timeZone"].(string); tz == "" {
		t.Errorf("tool part %v: want the page's output with its time zone", tool)
	}
	// The model's answer after the tool comes in the last step, after the tool part.
	after := eval[string](p, `(() => { const parts = window.jetwayExample.messages.flatMap(m => m.parts);
		const i = parts.findIndex(p => p.type === 'tool-get_local_time');
		return parts.slice(i + 1).filter(p => p.type === 'text').map(p => p.text).join(''); })()`)
	if after == "" {
		t.Errorf("no answer after the tool's output: %+v", p.answer())
	}
	if shown := eval[int](p, `document.querySelectorAll('.tool[data-tool="get_local_time"] .tool-output').length`); shown != 1 {
		t.Errorf("the page shows %d tool outputs, want 1", shown)
	}
	p.screenshot("example-tool")

	// A picture attached (a data: URL file part) to a reasoning model with
	// Think ticked: the picture shows in the question, the reasoning beside
	// the answer, both equal to the Go client's for the same request.
	picture := testPNG(t, 64, 48, false)
	pngPath := filepath.Join(t.TempDir(), "gate.png")
	if err := os.WriteFile(pngPath, picture, 0o644); err != nil {
		t.Fatal(err)
	}
	const question = "What is in this picture?"
	ref, err := askGatewayDone(gw, "reference-example-picture", client.Request{Model: "mock-reasoning", Reasoning: &client.Reasoning{BudgetTokens: 1024},
		Messages: []client.Message{{Role: "user", Blocks: []client.Block{
			{Type: protocol.BlockImage, Format: "png", Data: protocol.DataOf(picture)}, {Type: protocol.BlockText, Text: question}}}}})
	if err != nil {
		t.Fatal(err)
	}
	p.do(chromedp.Click(chromedp.CSS("#new-chat")))
	p.waitJS(`window.jetwayExample.messages.length === 0 && document.querySelectorAll('.message').length === 0`, "a new chat", 10*time.Second)
	if !eval[bool](p, `(() => { const s = document.getElementById('model');
		Object.getOwnPropertyDescriptor(HTMLSelectElement.prototype, 'value').set.call(s, 'mock-reasoning');
		s.dispatchEvent(new Event('change', {bubbles: true})); return s.value === 'mock-reasoning'; })()`) {
		t.Fatal("the model picker has no mock-reasoning")
	}
	p.do(chromedp.Click(chromedp.CSS("#think")), chromedp.SetUploadFiles(chromedp.CSS("#file"), []string{pngPath}))
	p.askExample(question)
	thought := p.waitSettled(1)
	if thought.State != "done" || thought.Text != ref.Text {
		t.Fatalf("the reasoning model's answer: state %s, text %q\nwant %q", thought.State, thought.Text, ref.Text)
	}
	reasoning := eval[string](p, `[...document.querySelectorAll('.message.assistant .reasoning-text')].map(e => e.textContent).join('')`)
	if reasoning == "" || reasoning != ref.ReasoningText() {
		t.Errorf("reasoning shown %q, want %q", reasoning, ref.ReasoningText())
	}
	img := eval[string](p, `document.querySelector('.message.user img.file')?.src ?? ''`)
	if img != "data:image/png;base64,"+base64.StdEncoding.EncodeToString(picture) {
		t.Errorf("the question shows the picture as %.60q, want its data: URL", img)
	}
	p.screenshot("example-reasoning")

	// The frames' fresh tokens renewed the one socket's credentials (a
	// token minted in the same second as the last is the same token).
	var refreshed, opened int
	for _, m := range gw.Log.Find("auth_refreshed", "") {
		if m["user"] == "eve" {
			refreshed++
		}
	}
	for _, m := range gw.Log.Find("session_opened", "") {
		if m["user"] == "eve" {
			opened++
		}
	}
	if refreshed == 0 || opened != 1 {
		t.Errorf("%d sockets opened, %d credential renewals: want one socket, renewed by the frames' tokens", opened, refreshed)
	}
	p.noProblems()
}

// TestExampleReloadResumes: a reload in the middle of an answer; the
// reloaded page (resume: true, the chat id kept in localStorage) shows the
// whole answer, identical, in the same message.
func TestExampleReloadResumes(t *testing.T) {
	gw := browserGateway(t, "example-reload")
	site := serveExample(t, gw)
	const prompt = "How do I get to the train station?"
	want := references(t, gw, prompt)

	p := openExample(t, site, url.Values{"gateway": {gw.HTTP()}, "user": {"fay"}})
	chatID := eval[string](p, `window.jetwayExample.chatId`)
	p.askExample(prompt)
	partial := p.waitStreaming(1)
	p.do(chromedp.Reload())
	p.waitJS(`document.querySelector('main') != null`, "the reloaded page", 30*time.Second)
	got := p.waitSettled(1)
	answers := want()
	if id := eval[string](p, `window.jetwayExample.chatId`); id != chatID {
		t.Errorf("chat id %s after the reload, want %s", id, chatID)
	}
	if got.State != "done" || got.Text != answers[0] || got.Shown != answers[0] {
		t.Fatalf("after the reload: state %s, text %q (shown %q)\nwant %q", got.State, got.Text, got.Shown, answers[0])
	}
	if got.ID != partial.ID || got.Count != 1 {
		t.Errorf("after the reload: message %s of %d, want the one message %s", got.ID, got.Count, partial.ID)
	}
	if partial.Text == answers[0] {
		t.Logf("the answer ended before the reload (the machine is slow): the reload resumed an ended answer")
	}
	if n := eval[int](p, `document.querySelectorAll('.message.user').length`); n != 1 {
		t.Errorf("%d user messages after the reload, want 1", n)
	}
	p.noProblems()
}

// TestExampleGatewayDies: two gateways on one DynamoDB behind a balancer;
// the one streaming the answer is SIGKILLed in the middle of it (for the
// page: its frames are held back by the balancer from the first text on,
// while the answer completes in the shared request record). The socket
// breaks, the page resumes through the balancer on the other gateway and
// shows the whole answer, identical, in the same message.
func TestExampleGatewayDies(t *testing.T) {
	pace, endpoint, table := sharedTables(t)
	a := startGateway(t, pace("example-dies-a"))
	b := startGateway(t, pace("example-dies-b"))
	lb := startBalancer(t, a.Addr, b.Addr)
	site := serveExample(t, a, b)
	const prompt = "Where do I collect my bags?"
	want := references(t, b, prompt)

	p := openExample(t, site, url.Values{"gateway": {lb.URL()}, "user": {"gus"}})
	if n, m := lb.dialed(a.Addr), lb.dialed(b.Addr); n != 1 || m != 0 {
		t.Fatalf("the balancer sent %d sockets to A and %d to B, want the page's one to A", n, m)
	}
	lb.holdAfter([]byte(`"type":"text-delta"`))
	p.askExample(prompt)
	partial := p.waitStreaming(1)

	// The answer ends on A (its record says so) while the page still streams.
	records := stream.NewDynamoStore(dynalitetest.Client(t, endpoint), table+"-req")
	var requestID string
	waitFor(t, 30*time.Second, "the answer to end in the request record", func() bool {
		if requestID == "" {
			m := regexp.MustCompile(`"request_id":"([^"]+)"`).FindSubmatch(lb.heldBytes())
			if m == nil {
				return false
			}
			requestID = string(m[1])
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		rec, err := records.Get(ctx, "contoso/support-assistant/gus", requestID)
		return err == nil && rec != nil && rec.Ended()
	})
	if s := p.answer().State; s != "streaming" {
		t.Fatalf("the page's answer is %s before A died: the balancer did not hold it back", s)
	}
	a.Signal(syscall.SIGKILL)
	lb.cutHeld()

	got := p.waitSettled(1)
	answers := want()
	if got.State != "done" || got.Text != answers[0] || got.Shown != answers[0] {
		t.Fatalf("after A died: state %s, text %q\nwant %q", got.State, got.Text, answers[0])
	}
	if got.ID != partial.ID || got.Count != 1 {
		t.Errorf("after A died: message %s of %d, want the one message %s", got.ID, got.Count, partial.ID)
	}
	if n := lb.dialed(b.Addr); n < 1 {
		t.Errorf("no socket went to B")
	}
	if n := eval[int](p, `window.jetwayExample.resumes`); n < 1 {
		t.Errorf("the page resumed %d times, want 1 or more", n)
	}
	// The next question goes to B.
	p.askExample("And where is the taxi rank?")
	if next := p.waitSettled(2); next.State != "done" || next.Text == "" {
		t.Errorf("next answer: state %s, text %q", next.State, next.Text)
	}
	p.screenshot("example-failover")
	p.noProblems()
}

// balancer is a TCP load balancer in front of gateways: each connection
// goes to the first target that accepts it, as a load balancer skips a
// dead task. It can hold back what the servers send (reading it on, so
// the servers are not slowed).
type balancer struct {
	ln      net.Listener
	targets []string

	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	dials   map[string]int
	holdOn  []byte // hold once server bytes holding this went through (nil: off)
	holding bool
	held    bytes.Buffer
	heldOn  []net.Conn // the client sides of the held connections
}

func startBalancer(t *testing.T, targets ...string) *balancer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &balancer{ln: ln, targets: targets, conns: map[net.Conn]struct{}{}, dials: map[string]int{}}
	go b.serve()
	t.Cleanup(b.close)
	return b
}

// URL is the balancer's base URL for the example's ?gateway=.
func (b *balancer) URL() string { return "http://" + b.ln.Addr().String() }

func (b *balancer) serve() {
	for {
		c, err := b.ln.Accept()
		if err != nil {
			return
		}
		var up net.Conn
		for _, target := range b.targets {
			if up, err = net.Dial("tcp", target); err == nil {
				b.mu.Lock()
				b.dials[target]++
				b.mu.Unlock()
				break
			}
		}
		if up == nil {
			_ = c.Close()
			continue
		}
		b.mu.Lock()
		b.conns[c], b.conns[up] = struct{}{}, struct{}{}
		b.mu.Unlock()
		go func() { _, _ = io.Copy(up, c); b.drop(c, up) }()
		go func() { b.down(c, up); b.drop(c, up) }()
	}
}

// down copies server -> client until the hold starts, then keeps what comes.
func (b *balancer) down(c, up net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := up.Read(buf)
		if n > 0 {
			b.mu.Lock()
			holding := b.holding
			if holding {
				b.held.Write(buf[:n])
			}
			b.mu.Unlock()
			if !holding {
				if _, werr := c.Write(buf[:n]); werr != nil {
					return
				}
				b.mu.Lock()
				if b.holdOn != nil && bytes.Contains(buf[:n], b.holdOn) {
					b.holding, b.holdOn = true, nil
					b.heldOn = append(b.heldOn, c)
				}
				b.mu.Unlock()
			}
		}
		if err != nil {
			return
		}
	}
}

// holdAfter holds what servers send from the first read holding marker on.
func (b *balancer) holdAfter(marker []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.holdOn = marker
}

// heldBytes is what was held back so far.
func (b *balancer) heldBytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.held.Bytes())
}

// cutHeld resets the held connections (as a dead server's are) and stops holding.
func (b *balancer) cutHeld() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, c := range b.heldOn {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = c.Close()
	}
	b.heldOn, b.holding = nil, false
}

// dialed is how many connections went to target.
func (b *balancer) dialed(target string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.dials[target]
}

func (b *balancer) drop(cs ...net.Conn) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, c := range cs {
		_ = c.Close()
		delete(b.conns, c)
	}
}

func (b *balancer) close() {
	_ = b.ln.Close()
	b.mu.Lock()
	defer b.mu.Unlock()
	for c := range b.conns {
		_ = c.Close()
		delete(b.conns, c)
	}
}
