package web

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"github.com/jetway-gateway/jetway/client"
)

// colorScheme makes the page's prefers-color-scheme light or dark.
func (p *page) colorScheme(scheme string) {
	p.t.Helper()
	p.do(chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := cdp.Call(ctx, t, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
			Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: scheme}}})
		return err
	}))
}

// TestPageChatApp: the page as people use a chat app. An empty conversation
// offers example questions (a click asks one); mock-markdown's answer shows
// as Markdown (a heading, a list, a table, code, a link); Copy copies the
// answer's text; Stop leaves a quiet note, not an error; Retry asks the same
// question again as a new request; screenshots at 1280 and 375 px wide, light
// and dark.
func TestPageChatApp(t *testing.T) {
	gw := browserGateway(t, "page-app")
	const question = "Where is gate B12?"
	ref, err := askGatewayDone(gw, "reference-page-app", client.Request{Model: "mock-markdown",
		Messages: []client.Message{{Role: "user", Content: question}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, size := range []struct {
		name string
		w, h int64
	}{{"desktop", 1280, 900}, {"phone", 375, 800}} {
		p := openPage(t, gw.HTTP()+"/", size.w, size.h)
		p.signIn("contoso/support-assistant", "ana")
		if eval[bool](p, `document.getElementById('empty').hidden`) {
			t.Fatalf("%s: an empty conversation shows no examples", size.name)
		}
		examples := eval[[]string](p, `[...document.querySelectorAll('#examples .example')].map((b) => b.firstChild.textContent)`)
		if len(examples) < 3 || examples[0] != question {
			t.Fatalf("%s: examples %q", size.name, examples)
		}
		p.screenshot("empty-" + size.name)
		p.colorScheme("dark")
		p.screenshot("empty-" + size.name + "-dark")
		p.colorScheme("light")

		// A click on an example asks it.
		p.do(chromedp.SetValue(chromedp.CSS("#model"), "mock-markdown"))
		p.do(chromedp.Click(chromedp.CSS("#examples li:first-child .example")))
		p.waitFinished(1, 30*time.Second)
		got := p.lastTurn()
		if got.State != "done" || got.Who != "Assistant · mock-markdown" || !eval[bool](p, `document.getElementById('empty').hidden`) {
			t.Fatalf("%s: the example's answer: %+v", size.name, got)
		}
		shown := eval[map[string]int](p, `(() => { const m = [...document.querySelectorAll('.turn.assistant')].at(-1).querySelector('.markdown');
			return {h2: m.querySelectorAll('h2').length, li: m.querySelectorAll('ul li').length, td: m.querySelectorAll('table td').length,
			  code: m.querySelectorAll('pre code').length, a: m.querySelectorAll('a[href^="https://"]').length}; })()`)
		if shown["h2"] != 1 || shown["li"] != 3 || shown["td"] != 9 || shown["code"] != 1 || shown["a"] != 1 {
			t.Errorf("%s: the Markdown answer rendered as %v", size.name, shown)
		}
		if user := eval[string](p, `document.querySelector('.turn.user .text').textContent`); user != question {
			t.Errorf("%s: question shown %q", size.name, user)
		}
		p.screenshot("markdown-" + size.name)
		p.colorScheme("dark")
		p.screenshot("markdown-" + size.name + "-dark")
		p.colorScheme("light")

		// Copy copies the answer's Markdown.
		p.do(chromedp.Evaluate[chromedp.Void](`navigator.clipboard.writeText = async (text) => { window.__copied = text; }`))
		p.do(chromedp.Click(chromedp.CSS("#conversation > li:last-child .copy")))
		p.waitJS(`window.__copied !== undefined`, "the copy", 5*time.Second)
		if copied := eval[string](p, `window.__copied`); copied != ref.Text {
			t.Errorf("%s: copied %q\nwant %q", size.name, copied, ref.Text)
		}
		if label := eval[string](p, `document.querySelector('#conversation > li:last-child .copy').textContent`); label != "Copied" {
			t.Errorf("%s: the copy button says %q", size.name, label)
		}
		p.noProblems()
	}

	// Stop, then Retry: a quiet note, then the same question as a new request.
	p := openPage(t, gw.HTTP()+"/", 1280, 900)
	p.signIn("contoso/support-assistant", "bea")
	p.do(chromedp.SetValue(chromedp.CSS("#model"), "mock-a"))
	p.send("How long does boarding take?")
	p.waitJS(`(() => { const l = [...document.querySelectorAll('.turn.assistant')].at(-1);
		return l && l.dataset.state === 'streaming' && l.querySelector('.text').textContent.length > 0; })()`,
		"the answer to start streaming", 15*time.Second)
	p.do(chromedp.Click(chromedp.CSS("#conversation > li:last-child .stop")))
	p.waitFinished(1, 30*time.Second)
	stopped := p.lastTurn()
	note := eval[string](p, `[...document.querySelectorAll('.turn.assistant')].at(-1).querySelector('.note')?.textContent ?? ''`)
	if stopped.State != "stopped" || stopped.Code != "cancelled" || stopped.Error != "" || note != "Stopped" {
		t.Fatalf("a stopped answer: %+v, note %q", stopped, note)
	}
	p.screenshot("stopped-desktop")
	firstID := eval[string](p, `[...document.querySelectorAll('.turn.assistant')].at(-1).dataset.requestId`)
	p.do(chromedp.Click(chromedp.CSS("#conversation > li:last-child .retry")))
	p.waitJS(`(() => { const a = document.querySelectorAll('.turn.assistant');
		return a.length === 1 && a[0].dataset.state === 'done'; })()`, "the retried answer", 30*time.Second)
	again := p.lastTurn()
	want, err := askGateway(gw, "reference-page-app", []client.Message{{Role: "user", Content: "How long does boarding take?"}})
	if err != nil {
		t.Fatal(err)
	}
	if again.Text != want || strings.Contains(again.Meta, "resumed") {
		t.Errorf("the retried answer: %+v\nwant text %q", again, want)
	}
	if id := eval[string](p, `document.querySelector('.turn.assistant').dataset.requestId`); id == "" || id == firstID {
		t.Errorf("retry request id %q, first %q: want a new one", id, firstID)
	}
	if n := eval[int](p, `document.querySelectorAll('.turn.user').length`); n != 1 {
		t.Errorf("user turns after a retry: %d, want 1", n)
	}
	p.noProblems()
}
