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
