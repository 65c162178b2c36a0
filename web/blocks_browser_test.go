package web

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/jetway-gateway/jetway/client"
	"github.com/jetway-gateway/jetway/internal/protocol"
)

// testPNG is a picture to attach: a w x h gradient, with noise when noisy
// (it then compresses badly: a big file).
func testPNG(t *testing.T, w, h int, noisy bool) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	n := uint32(1)
	for y := range h {
		for x := range w {
			c := color.RGBA{R: uint8(40 + x*96/w), G: uint8(90 + y*128/h), B: 200, A: 255}
			if noisy {
				n = n*1664525 + 1013904223
				c.B = uint8(n >> 24)
			}
			img.Set(x, y, c)
		}
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// pageCalculator is the page's tool as the page offers it (app.js).
var pageCalculator = client.Tool{Name: "calculator",
	Description: "Evaluates an arithmetic expression: numbers, + - * / % ^ and parentheses.",
	InputSchema: json.RawMessage(`{"type":"object","properties":{"query":{"type":"string","description":"the expression, for example 12 * (3 + 4)"}},"required":["query"]}`)}

// blockTurn is an assistant turn with what the page shows of its blocks.
type blockTurn struct {
	turn
	StopReason string   `json:"stopReason"`
	Tools      []string `json:"tools"` // each call: name | input | result
	Reasoning  string   `json:"reasoning"`
	Summary    string   `json:"summary"`
	Hidden     bool     `json:"hidden"` // the reasoning section
	Open       bool     `json:"open"`
}

func (p *page) blockTurn(i int) blockTurn {
	p.t.Helper()
	return eval[blockTurn](p, fmt.Sprintf(`(() => {
  const l = document.querySelectorAll('.turn.assistant')[%d];
  const d = l.querySelector('details.reasoning');
  return {state: l.dataset.state, code: l.dataset.code || '', text: l.querySelector('.text').textContent.trim(),
    meta: l.querySelector('.meta').textContent, error: l.querySelector('.error')?.textContent || '',
    who: l.querySelector('.who').textContent, stopReason: l.dataset.stopReason || '',
    tools: [...l.querySelectorAll('.tool-call')].map((c) => [...c.children].map((e) => e.textContent).join(' | ')),
    reasoning: d.querySelector('.thought').textContent, summary: d.querySelector('summary').textContent,
    hidden: d.hidden, open: d.open};
})()`, i))
}

// TestPageBlocks: an image attached through the file input goes with the
// question and shows as a thumbnail in the user's turn; with the calculator
// ticked, mock-tools calls it, the page shows the call, runs it and sends
// the result, and shows the model's final answer; mock-reasoning's thinking
// streams into a section that is open while it streams and folded (still
// openable) once done. Each answer equals the Go client's for the same
// conversation.
func TestPageBlocks(t *testing.T) {
	gw := browserGateway(t, "page-blocks")
	picture := testPNG(t, 96, 64, false)
	pngPath := filepath.Join(t.TempDir(), "boarding-pass.png")
	if err := os.WriteFile(pngPath, picture, 0o644); err != nil {
		t.Fatal(err)
	}
	big := testPNG(t, 1600, 1200, true)
	bigPath := filepath.Join(t.TempDir(), "photo.png")
	if err := os.WriteFile(bigPath, big, 0o644); err != nil {
		t.Fatal(err)
	}

	// The conversation as the page will hold it, asked with the Go client.
	image := client.Block{Type: protocol.BlockImage, Format: "png", Data: protocol.DataOf(picture)}
	msgs := []client.Message{{Role: "user", Blocks: []client.Block{image, {Type: protocol.BlockText, Text: "What is in this picture?"}}}}
	var reasoning *client.Reasoning
	ref := func(model string, tools []client.Tool) *client.Done {
		t.Helper()
		done, err := askGatewayDone(gw, "reference-page-blocks", client.Request{Messages: msgs, Model: model, Tools: tools, Reasoning: reasoning})
		if err != nil {
			t.Fatal(err)
		}
		return done
	}
	tools := []client.Tool{pageCalculator}
	wantImage := ref("", nil)
	msgs = append(msgs, client.Message{Role: "assistant", Content: wantImage.Text}, client.Message{Role: "user", Content: "12 * 7 please"})
	wantCall := ref("mock-tools", tools)
	calls := wantCall.ToolCalls()
	if wantCall.StopReason != protocol.StopToolUse || len(calls) != 1 || string(calls[0].Input) != `{"query":"12 * 7"}` {
		t.Fatalf("reference tool call: stop %s, calls %+v", wantCall.StopReason, calls)
	}
	msgs = append(msgs, wantCall.Turn(), client.Message{Role: "user", Blocks: []client.Block{{Type: protocol.BlockToolResult,
		ToolUseID: calls[0].ID, Content: []client.Block{{Type: protocol.BlockText, Text: "84"}}}}})
	wantFinal := ref("mock-tools", tools)
	// The conversation keeps a question's final answer, not its tool round
	// trip; the next question offers the tool only if Calculator is ticked.
	msgs = append(msgs[:len(msgs)-2], client.Message{Role: "assistant", Content: wantFinal.Text}, client.Message{Role: "user", Content: "Which gate for Oslo?"})
	reasoning = &client.Reasoning{BudgetTokens: 1024}
	wantThought := ref("mock-reasoning", nil)
	reasoning = nil
	msgs = append(msgs, client.Message{Role: "assistant", Content: wantThought.Text}, client.Message{Role: "user", Content: "12 * 7 please"})
	wantNoTool := ref("mock-tools", nil)

	p := openPage(t, gw.HTTP()+"/", 1024, 900)
	p.signIn("contoso/support-assistant", "di")

	// A big image is scaled down to fit a request frame; Remove drops it.
	p.do(chromedp.SetUploadFiles(chromedp.CSS("#attach"), []string{bigPath}))
	p.do(chromedp.WaitVisible(chromedp.CSS("#attachment")))
	scaled := eval[map[string]any](p, `(() => { const i = document.getElementById('attachment-thumb');
		return {jpeg: i.src.startsWith('data:image/jpeg;base64,'), bytes: atob(i.src.split(',')[1]).length,
		  label: document.getElementById('attachment-name').textContent}; })()`)
	if scaled["jpeg"] != true || scaled["bytes"].(float64) >= float64(len(big)) || scaled["bytes"].(float64) > 262144*3/4 ||
		!strings.HasPrefix(scaled["label"].(string), "photo.png · ") {
		t.Errorf("a %d-byte image attached as %v", len(big), scaled)
	}
	p.do(chromedp.Click(chromedp.CSS("#attachment-remove")), chromedp.WaitNotVisible(chromedp.CSS("#attachment")))

	// An image through the file input: previewed, then sent with the question.
	p.do(chromedp.SetUploadFiles(chromedp.CSS("#attach"), []string{pngPath}))
	p.do(chromedp.WaitVisible(chromedp.CSS("#attachment")))
	dataURL := "data:image/png;base64," + base64.StdEncoding.EncodeToString(picture)
	if src := eval[string](p, `document.getElementById('attachment-thumb').src`); src != dataURL {
		t.Errorf("preview %q, want %q", src, dataURL)
	}
	if got := p.ask("What is in this picture?"); got.State != "done" || got.Text != wantImage.Text {
		t.Fatalf("answer about the image: state %s, text %q\nwant %q", got.State, got.Text, wantImage.Text)
	}
	thumb := eval[map[string]string](p, `(() => { const i = document.querySelector('.turn.user img.thumb');
		return i ? {src: i.src, alt: i.alt} : {}; })()`)
	if thumb["src"] != dataURL || thumb["alt"] != "Attached image boarding-pass.png" {
		t.Errorf("thumbnail in the user's turn: %v", thumb)
	}
	if eval[bool](p, `!document.getElementById('attachment').hidden`) {
		t.Error("the attachment is still offered after it was sent")
	}
	p.do(chromedp.Evaluate[chromedp.Void](`document.querySelector('.turn.user').scrollIntoView()`))
	p.screenshot("image-question")

	// A tool round trip: the call, the page's result, the final answer.
	p.do(
		chromedp.SetValue(chromedp.CSS("#model"), "mock-tools"),
		chromedp.Click(chromedp.CSS("#use-tools")),
	)
	p.send("12 * 7 please")
	p.waitFinished(3, 30*time.Second)
	call, final := p.blockTurn(1), p.blockTurn(2)
	if call.State != "done" || call.StopReason != "tool_use" || call.Text != wantCall.Text || call.Who != "Assistant · mock-tools" {
		t.Fatalf("the tool call's turn: %+v\nwant text %q", call, wantCall.Text)
	}
	if want := `Calls calculator | {"query":"12 * 7"} | → 84`; len(call.Tools) != 1 || call.Tools[0] != want {
		t.Errorf("tool calls shown %q, want [%q]", call.Tools, want)
	}
	if final.State != "done" || final.StopReason == "tool_use" || final.Text != wantFinal.Text || len(final.Tools) != 0 {
		t.Fatalf("the answer after the tool result: %+v\nwant text %q", final, wantFinal.Text)
	}
	p.do(chromedp.Evaluate[chromedp.Void](`document.querySelectorAll('.turn.assistant')[1].scrollIntoView()`))
	p.screenshot("tool-round-trip")

	// Reasoning: open while it streams, folded once done.
	p.do(
		chromedp.SetValue(chromedp.CSS("#model"), "mock-reasoning"),
		chromedp.Click(chromedp.CSS("#use-tools")), // off
		chromedp.Click(chromedp.CSS("#use-reasoning")),
	)
	p.send("Which gate for Oslo?")
	p.waitJS(`(() => { const l = document.querySelectorAll('.turn.assistant')[3];
		const d = l && l.querySelector('details.reasoning');
		return d && l.dataset.state === 'streaming' && !d.hidden && d.open && d.querySelector('.thought').textContent.length > 0; })()`,
		"the reasoning shown open while the answer streams", 15*time.Second)
	p.waitFinished(4, 30*time.Second)
	thought := p.blockTurn(3)
	if thought.State != "done" || thought.Text != wantThought.Text {
		t.Fatalf("the reasoning model's answer: state %s, text %q\nwant %q", thought.State, thought.Text, wantThought.Text)
	}
	words := len(strings.Fields(wantThought.ReasoningText()))
	if thought.Hidden || thought.Open || thought.Reasoning != wantThought.ReasoningText() || thought.Summary != fmt.Sprintf("Reasoning · %d words", words) {
		t.Errorf("reasoning section: hidden %v, open %v, summary %q, text %q\nwant folded, %d words, %q",
			thought.Hidden, thought.Open, thought.Summary, thought.Reasoning, words, wantThought.ReasoningText())
	}
	p.do(chromedp.Click(chromedp.CSS("#conversation > li:last-child details.reasoning summary")))
	if !eval[bool](p, `document.querySelectorAll('.turn.assistant')[3].querySelector('details.reasoning').open`) {
		t.Error("the folded reasoning does not open on a click")
	}
	p.screenshot("reasoning-desktop")

	// With Calculator off, the same tool question gets no tool: a text answer.
	p.do(chromedp.SetValue(chromedp.CSS("#model"), "mock-tools"), chromedp.Click(chromedp.CSS("#use-reasoning")))
	if got := p.ask("12 * 7 please"); got.State != "done" || got.Text != wantNoTool.Text || len(p.blockTurn(4).Tools) != 0 {
		t.Fatalf("a tool question without the tool: %+v\nwant text %q", got, wantNoTool.Text)
	}
	p.noProblems()
}

// TestPageMarkdown: answers render as Markdown (headings, lists, tables,
// code blocks, also cut mid-stream), and HTML in an answer is inert: no
// script, no event handler, no javascript: link survives the sanitizer.
func TestPageMarkdown(t *testing.T) {
	gw := browserGateway(t, "page-markdown")
	p := openPage(t, gw.HTTP()+"/", 1024, 768)
	p.do(chromedp.WaitVisible(chromedp.CSS("#signin-form")))
	hostile := "# Gate changes\n\n" +
		"<script>window.__xss = 1</script>\n\n" +
		"<img src=\"data:,\" onerror=\"window.__xss = 2\"> <b onmouseover=\"window.__xss = 3\">bold</b>\n\n" +
		"[a link](javascript:window.__xss=4) and <a href=\"javascript:window.__xss=5\">another</a> and [docs](https://example.com/docs)\n\n" +
		"<iframe src=\"https://example.com\"></iframe><svg><script>window.__xss = 6</script></svg><style>body{display:none}</style><p style=\"display:none\">styled</p>\n\n" +
		"- first\n- second\n\n" +
		"| flight | gate |\n|---|---|\n| TP 1234 | B12 |\n\n" +
		"```go\nfmt.Println(\"<script>\")\n```\n"
	type rendered struct {
		H1, Code, Partial string
		Items, Cells      int
		Dangerous         []string
		Links             []string
		XSS               bool
	}
	got, err := chromedp.Run(p.ctx, chromedp.Evaluate[rendered](fmt.Sprintf(`(async () => {
  const { renderMarkdown } = await import('/markdown.js');
  const box = document.createElement('div');
  document.body.append(box);
  renderMarkdown(box, %s);
  const partial = document.createElement('div');
  renderMarkdown(partial, %s);
  const dangerous = [...box.querySelectorAll('script, iframe, style, object, embed')].map((e) => e.tagName);
  for (const e of box.querySelectorAll('*')) {
    for (const a of e.attributes) if (/^on/i.test(a.name) || a.name === 'style' || /^\s*javascript:/i.test(a.value)) dangerous.push(e.tagName + ' ' + a.name + '=' + a.value);
  }
  return {H1: box.querySelector('h1')?.textContent ?? '', Code: box.querySelector('pre code')?.textContent ?? '',
    Partial: partial.querySelector('pre code')?.textContent ?? '', Items: box.querySelectorAll('ul li').length,
    Cells: box.querySelectorAll('table td').length, Dangerous: dangerous,
    Links: [...box.querySelectorAll('a[href]')].map((a) => a.getAttribute('href') + ' ' + a.rel + ' ' + a.target),
    XSS: '__xss' in window};
})()`, mustJSON(hostile), mustJSON("Boarding:\n\n```sh\necho \"gate B12")), chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("render in the page: %v", err)
	}
	if len(got.Dangerous) > 0 || got.XSS {
		t.Errorf("active content survived the sanitizer: %q (script ran: %v)", got.Dangerous, got.XSS)
	}
	if got.H1 != "Gate changes" || got.Items != 2 || got.Cells != 2 || got.Code != "fmt.Println(\"<script>\")\n" {
		t.Errorf("rendered: %+v", got)
	}
	if got.Partial != "echo \"gate B12\n" {
		t.Errorf("an open code fence (mid-stream) renders as code: %q", got.Partial)
	}
	if want := "https://example.com/docs noopener noreferrer _blank"; len(got.Links) != 1 || got.Links[0] != want {
		t.Errorf("links %q, want [%q]", got.Links, want)
	}
	// Parsing the hostile HTML (inertly, to sanitize it) makes Chromium
	// report what the page's CSP would block: the second line of defence,
	// not a problem. Anything else is.
	p.mu.Lock()
	var other []string
	for _, m := range p.problems {
		if !strings.Contains(m, "violates the following Content Security Policy directive") {
			other = append(other, m)
		}
	}
	p.problems = other
	p.mu.Unlock()
	p.noProblems()
}
