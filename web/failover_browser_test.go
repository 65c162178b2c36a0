package web

import (
	"context"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jetway-gateway/jetway/internal/dynalitetest"
	"github.com/jetway-gateway/jetway/internal/stream"
)

// TestPageOriginDies: the page's own gateway (its origin, where its dev
// tokens come from) is killed in the middle of an answer. With ?ws=<A>,<B>
// the page moves to B with the token it still has, resumes there and shows
// the whole answer, identical to the Go client's. A token lifetime of 60 s
// makes the page ask A for a token on every connection attempt (it renews
// tokens within 60 s of their expiry), so every one of those asks fails
// once A is dead.
//
// The answer is complete in the shared request record before A dies (the
// relay in front of A holds A's frames back from the page meanwhile): the
// page has part of it, B has all of it. A killed while its model still
// streamed would end the answer `interrupted` instead (docs/architecture.md).
func TestPageOriginDies(t *testing.T) {
	pace, endpoint, table := sharedTables(t)
	a := startGateway(t, pace("page-origin-a"))
	b := startGateway(t, pace("page-origin-b"))
	relay := startRelay(t, a.Addr)
	const prompt = "Where do I collect my bags?"
	want := references(t, b, prompt)

	p := openPage(t, a.HTTP()+"/?ttl=60&ws="+url.QueryEscape(relay.WS()+","+b.WS()), 1024, 768)
	p.signIn("contoso/support-assistant", "dee")
	// The relay holds A's frames back from the first chunk on, however
	// slowly the page notices it streams (the whole answer takes ~2.4 s).
	relay.holdAfterChunk()
	p.send(prompt)
	p.waitJS(`(() => { const l = [...document.querySelectorAll('.turn.assistant')].at(-1);
		return l && l.dataset.state === 'streaming' && l.querySelector('.text').textContent.length > 0; })()`,
		"the answer to start streaming", 15*time.Second)
	id := eval[string](p, `[...document.querySelectorAll('.turn.assistant')].at(-1).dataset.requestId`)

	records := stream.NewDynamoStore(dynalitetest.Client(t, endpoint), table+"-req")
	waitFor(t, 30*time.Second, "the answer to end in the request record", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		rec, err := records.Get(ctx, "contoso/support-assistant/dee", id)
		return err == nil && rec != nil && rec.Ended()
	})
	if eval[string](p, `[...document.querySelectorAll('.turn.assistant')].at(-1).dataset.state`) != "streaming" {
		t.Fatal("the page got the whole answer before A died: the relay did not hold it back")
	}
	a.Signal(syscall.SIGKILL)
	relay.close()

	p.waitFinished(1, 30*time.Second)
	answers := want()
	got := p.lastTurn()
	if got.State != "done" || got.Text != answers[0] {
		t.Fatalf("answer after A died: state %s, text %q\nwant %q\nconnection: %s", got.State, got.Text, answers[0], p.connText())
	}
	if u := eval[string](p, `document.getElementById('conn').dataset.url`); u != b.WS() {
		t.Errorf("connected to %s, want B %s", u, b.WS())
	}
	if !strings.Contains(got.Meta, "resumed after 1 reconnect") {
		t.Errorf("meta %q: want the resume shown", got.Meta)
	}
	states := eval[[]string](p, `window.jetwayDemo.states`)
	if !containsInOrder(states, "connected", "reconnecting", "connected") {
		t.Errorf("connection states %v", states)
	}
	// The next question goes to B as well (no new token: A is gone).
	if next := p.ask("And where is the taxi rank?"); next.State != "done" || next.Text == "" {
		t.Errorf("next answer: state %s, text %q", next.State, next.Text)
	}
	// The browser reports every refused connection to the dead A; nothing else may show.
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range p.problems {
		if !strings.Contains(m, "net::ERR_CONNECTION_REFUSED") {
			t.Errorf("the page logged %s", m)
		}
	}
}
