package web

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/gorilla/websocket"

	"github.com/jetway-gateway/jetway/internal/protocol"
)

// fakeOwner is a WebSocket server that plays the gateway's side for the page
// after sign-in: it answers the first request with every chunk, then (when
// the test says) with the `interrupted` terminal a dead owner's successor
// sends, holding fewer chunks than were streamed; later requests get a whole
// answer. No live gateway can be made to send that terminal on cue (it takes
// a server killed between checkpoints), hence the fake.
type fakeOwner struct {
	url       string
	requests  chan protocol.Inbound // every request frame, in order
	interrupt chan struct{}         // closed by the test: send the first request's terminal
}

var interruptedChunks = []string{"Gate ", "B12 ", "is ", "past ", "security, ", "on ", "the ", "left."}

func startFakeOwner(t *testing.T) *fakeOwner {
	f := &fakeOwner{requests: make(chan protocol.Inbound, 10), interrupt: make(chan struct{})}
	up := websocket.Upgrader{Subprotocols: []string{protocol.Subprotocol}, CheckOrigin: func(*http.Request) bool { return true }}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer ws.Close()
		send := func(v any) bool { return ws.WriteMessage(websocket.TextMessage, protocol.Encode(v)) == nil }
		send(protocol.Ready{Type: protocol.TypeReady, SessionID: r.URL.Query().Get("session_id"), User: "dee",
			Tenant: "contoso", App: "support-assistant", Protocol: protocol.Subprotocol, HeartbeatS: 25,
			ExpiresAt: protocol.Timestamp(time.Now().Add(time.Hour))})
		answered := 0
		for {
			_, data, err := ws.ReadMessage()
			if err != nil {
				return
			}
			in, err := protocol.Decode(data)
			if err != nil || in.Type != protocol.TypeRequest {
				continue
			}
			f.requests <- in
			id := in.RequestID
			send(protocol.Accepted{Type: protocol.TypeAccepted, RequestID: id, Model: "fake-model"})
			for i, c := range interruptedChunks {
				send(protocol.Chunk{Type: protocol.TypeChunk, RequestID: id, Seq: i + 1, Text: c})
			}
			all := strings.Join(interruptedChunks, "")
			answered++
			if answered == 1 {
				<-f.interrupt
				saved, text := 3, strings.Join(interruptedChunks[:3], "")
				send(protocol.Error{Type: protocol.TypeError, RequestID: id, Code: protocol.CodeInterrupted, Status: 503,
					Message: "the server that owned this answer stopped", Retryable: true, Chunks: &saved, Text: &text})
				continue
			}
			send(protocol.Done{Type: protocol.TypeDone, RequestID: id, Chunks: len(interruptedChunks), Text: all,
				Model: "fake-model", StopReason: "end_turn", Usage: protocol.Usage{InputTokens: 10, OutputTokens: 8}})
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() {
		select {
		case <-f.interrupt:
		default:
			close(f.interrupt)
		}
	})
	f.url = "ws" + strings.TrimPrefix(srv.URL, "http") + "/v1/ws"
	return f
}

func (f *fakeOwner) request(t *testing.T) protocol.Inbound {
	t.Helper()
	select {
	case in := <-f.requests:
		return in
	case <-time.After(30 * time.Second):
		t.Fatal("the page sent no request")
		return protocol.Inbound{}
	}
}

// TestPageInterruptedKeepsTheLongerAnswer: an `interrupted` terminal that
// saved 3 chunks arrives after the page showed all 8: the page keeps the
// whole answer it showed (PROTOCOL.md v1.1: never shrink), says it was
// interrupted, and offers Retry, which sends the same question again as a
// new request (a new request id) and shows its answer in its place.
func TestPageInterruptedKeepsTheLongerAnswer(t *testing.T) {
	gw := browserGateway(t, "page-interrupted")
	owner := startFakeOwner(t)
	whole := strings.Join(interruptedChunks, "")

	p := openPage(t, gw.HTTP()+"/?ws="+url.QueryEscape(owner.url), 1024, 768)
	p.signIn("contoso/support-assistant", "dee")
	p.send("Where is gate B12?")
	first := owner.request(t)
	p.waitJS(`(() => { const l = [...document.querySelectorAll('.turn.assistant')].at(-1);
		return l && l.querySelector('.text').textContent.trim() === `+mustJSON(strings.TrimSpace(whole))+`; })()`,
		"the whole answer streamed", 15*time.Second)
	close(owner.interrupt)
	p.waitFinished(1, 15*time.Second)
	got := p.lastTurn()
	if got.State != "error" || got.Code != "interrupted" {
		t.Fatalf("answer after the interrupted terminal: state %s code %s, want error interrupted", got.State, got.Code)
	}
	if got.Text != strings.TrimSpace(whole) {
		t.Fatalf("answer shown after the interrupted terminal: %q, want the longer %q it showed before", got.Text, whole)
	}
	if !strings.Contains(got.Error, "interrupted") {
		t.Errorf("error shown: %q", got.Error)
	}
	if !eval[bool](p, `!!document.querySelector('.turn.assistant .retry')`) {
		t.Fatal("no Retry button on the interrupted answer")
	}
	p.screenshot("interrupted-desktop")

	p.do(chromedp.Click(chromedp.CSS(".turn.assistant .retry")))
	again := owner.request(t)
	if again.RequestID == first.RequestID {
		t.Fatalf("Retry re-sent request id %s, want a new request", again.RequestID)
	}
	if a, b := mustJSON(again.Messages), mustJSON(first.Messages); a != b {
		t.Fatalf("Retry sent messages %s, want the question again: %s", a, b)
	}
	p.waitFinished(1, 15*time.Second)
	if got := p.lastTurn(); got.State != "done" || got.Text != strings.TrimSpace(whole) {
		t.Fatalf("retried answer: state %s text %q", got.State, got.Text)
	}
	turns := eval[[]string](p, `[...document.querySelectorAll('.turn.assistant')].map((l) => l.dataset.state + ':' + l.querySelector('.text').textContent.trim())`)
	if len(turns) != 1 || turns[0] != "done:"+strings.TrimSpace(whole) {
		t.Fatalf("answers on the page: %q, want the retried answer in place of the interrupted one", turns)
	}
	p.noProblems()
}
