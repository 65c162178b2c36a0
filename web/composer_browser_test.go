package web

import (
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// While an answer streams, the composer's button is Stop (issue 30): it
// stops the answer, and is Send again once the answer ended.
func TestPageComposerStops(t *testing.T) {
	g := startGateway(t, gatewayOpts{Name: "slow", TTFT: 50 * time.Millisecond, PerToken: 50 * time.Millisecond})
	p := openPage(t, g.HTTP()+"/", 1280, 800)
	p.signIn("contoso/support-assistant", "alice")
	if mode := eval[string](p, `document.getElementById('send').dataset.mode || 'send'`); mode != "send" {
		t.Fatalf("before any answer the button is %q, want send", mode)
	}
	p.send("Tell me about gates")
	p.waitJS(`document.querySelector('.turn.assistant')?.dataset.state === 'streaming'`, "the answer to stream", 30*time.Second)
	if mode := eval[string](p, `document.getElementById('send').dataset.mode`); mode != "stop" {
		t.Fatalf("while the answer streams the button is %q, want stop", mode)
	}
	p.screenshot("composer-stop")
	p.do(chromedp.Click(chromedp.CSS("#send")))
	p.waitFinished(1, 30*time.Second)
	if got := p.lastTurn(); got.State != "stopped" {
		t.Fatalf("after Stop the answer is %q, want stopped", got.State)
	}
	p.waitJS(`document.getElementById('send').dataset.mode === 'send'`, "the button to be Send again", 5*time.Second)
	if got := p.ask("And now?"); got.State != "stopped" && got.State != "done" {
		t.Errorf("the next question ended %q", got.State)
	}
	p.noProblems()
}

// An example card asks with the model and options it names (issue 30).
func TestPageExamplesApplyOptions(t *testing.T) {
	g := browserGateway(t, "examples")
	p := openPage(t, g.HTTP()+"/", 1280, 800)
	p.signIn("contoso/support-assistant", "alice")
	p.waitJS(`[...document.getElementById('model').options].some((o) => o.value === 'mock-reasoning')`, "the app's models", 15*time.Second)
	p.do(chromedp.Click(chromedp.CSS("#examples li:nth-child(4) .example")))
	set := eval[map[string]any](p, `({model: document.getElementById('model').value, tools: document.getElementById('use-tools').checked,
		reasoning: document.getElementById('use-reasoning').checked})`)
	if set["model"] != "mock-reasoning" || set["tools"] != false || set["reasoning"] != true {
		t.Errorf("the reasoning card set %v, want mock-reasoning with Reasoning on", set)
	}
	p.waitFinished(1, 30*time.Second)
	if got := p.lastTurn(); got.State != "done" || got.Who != "Assistant · mock-reasoning" {
		t.Errorf("the reasoning card's answer: %+v", got)
	}
	p.noProblems()
}

// At 375 px every option of the composer (model, Calculator, Reasoning) is
// on screen: the row wraps instead of hiding them past its edge (issue 30).
func TestPageOptionsFitPhone(t *testing.T) {
	g := browserGateway(t, "phone")
	p := openPage(t, g.HTTP()+"/", 375, 800)
	p.signIn("contoso/support-assistant", "alice")
	outside := eval[[]string](p, `(() => {
		const box = document.querySelector('.composer-box').getBoundingClientRect();
		return [...document.querySelectorAll('.options > *')].filter((e) => {
			const r = e.getBoundingClientRect();
			return r.width > 0 && (r.left < box.left || r.right > box.right || r.right > window.innerWidth);
		}).map((e) => e.textContent.trim() || e.id);
	})()`)
	if len(outside) > 0 {
		t.Errorf("at 375 px these options are past the composer's edge: %q", outside)
	}
	p.screenshot("composer-phone")
	p.noProblems()
}

// A code block in an answer names its language and copies its own text
// (issue 30).
func TestPageCodeBlocks(t *testing.T) {
	g := browserGateway(t, "code")
	p := openPage(t, g.HTTP()+"/", 1280, 900)
	p.signIn("contoso/support-assistant", "alice")
	p.do(chromedp.SetValue(chromedp.CSS("#model"), "mock-markdown"))
	if got := p.ask("Where is gate B12?"); got.State != "done" {
		t.Fatalf("the Markdown answer: %+v", got)
	}
	p.do(chromedp.Evaluate[chromedp.Void](`navigator.clipboard.writeText = async (text) => { window.__copied = text; }`))
	blocks := eval[[]map[string]string](p, `[...document.querySelectorAll('.turn.assistant .code-block')].map((b) => ({
		lang: b.querySelector('.code-lang').textContent, code: b.querySelector('pre code').textContent}))`)
	if len(blocks) != 1 || blocks[0]["lang"] != "js" || blocks[0]["code"] == "" {
		t.Fatalf("code blocks %v, want one labelled js", blocks)
	}
	p.do(chromedp.Click(chromedp.CSS(".turn.assistant .code-block .code-copy")))
	p.waitJS(`window.__copied !== undefined`, "the code to be copied", 5*time.Second)
	if copied := eval[string](p, `window.__copied`); copied != blocks[0]["code"] {
		t.Errorf("copied %q, want the block's code %q", copied, blocks[0]["code"])
	}
	p.screenshot("code-block")
	p.noProblems()
}

// A reload keeps the sign-in and the conversation (sessionStorage), and the
// conversation goes on from it; Sign out forgets both (issue 30).
func TestPageReloadKeepsConversation(t *testing.T) {
	g := browserGateway(t, "reload")
	p := openPage(t, g.HTTP()+"/", 1280, 800)
	p.signIn("contoso/support-assistant", "alice")
	p.do(chromedp.SetValue(chromedp.CSS("#model"), "mock-a"))
	first := p.ask("Hello")
	if first.State != "done" || first.Text == "" {
		t.Fatalf("the first answer: %+v", first)
	}
	p.do(chromedp.Reload())
	p.waitJS(`document.getElementById('conn').dataset.state === 'connected'`, "connected again after the reload", 30*time.Second)
	kept := eval[[]string](p, `[...document.querySelectorAll('#conversation .turn')].map((l) => l.querySelector('.text').textContent.trim())`)
	if len(kept) != 2 || kept[0] != "Hello" || kept[1] != first.Text {
		t.Fatalf("after the reload the conversation is %q, want the question and its answer", kept)
	}
	if who := eval[string](p, `document.getElementById('who').textContent`); who != "alice · contoso / support-assistant" {
		t.Errorf("after the reload signed in as %q", who)
	}
	if got := p.ask("And then?"); got.State != "done" {
		t.Errorf("the question after the reload: %+v", got)
	}
	p.screenshot("reload-kept")
	p.do(chromedp.Click(chromedp.CSS("#signout")))
	p.do(chromedp.WaitVisible(chromedp.CSS("#signin-form")))
	if n := eval[int](p, `document.querySelectorAll('#conversation .turn').length`); n != 0 {
		t.Errorf("after Sign out %d turns are shown", n)
	}
	p.noProblems()
}
