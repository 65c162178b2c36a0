package session

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/jetway-gateway/jetway/internal/call"
	"github.com/jetway-gateway/jetway/internal/gateway"
	"github.com/jetway-gateway/jetway/internal/protocol"
	"github.com/jetway-gateway/jetway/internal/socket"
	"github.com/jetway-gateway/jetway/internal/stream"
)

// answering is a Gateway that answers every request at once with "seen N
// attachment bytes", after waiting on hold when the request's id is in it
// (its admission then holds on; waiting receives the id when it starts).
type answering struct {
	fakeGateway
	mu      sync.Mutex
	hold    map[string]chan struct{}
	waiting chan string
}

func newAnswering() *answering {
	a := &answering{hold: map[string]chan struct{}{}, waiting: make(chan string, 1)}
	a.submit = func(_ gateway.Caller, r gateway.Request) (*stream.Log, int, error) {
		a.mu.Lock()
		wait := a.hold[r.RequestID]
		a.mu.Unlock()
		if wait != nil {
			a.waiting <- r.RequestID
			<-wait
		}
		l := stream.NewLog("u1", r.RequestID, "", time.Now())
		l.Accept(stream.NewAccepted(call.Accepted{RequestID: r.RequestID, Model: "m"}))
		text := fmt.Sprintf("seen %d attachment bytes", r.Features().AttachmentBytes)
		l.Append(text)
		l.Finish(stream.DoneTerminal(call.Done{RequestID: r.RequestID, Chunks: 1, Text: text}), time.Now())
		return l, 0, nil
	}
	return a
}

// imageFrame is a request frame of about size bytes: one image, or the
// same bytes as text when text is set.
func imageFrame(id string, size int, text bool) []byte {
	img := base64.StdEncoding.EncodeToString(make([]byte, size*3/4))
	content := `[{"type":"image","format":"png","data":"` + img + `"}]`
	if text {
		content = `"` + strings.Repeat("x", len(img)) + `"`
	}
	return []byte(`{"type":"request","request_id":"` + id + `","messages":[{"role":"user","content":` + content + `}]}`)
}

// served sends a request frame (unless frame is nil) and waits for its done frame.
func served(t *testing.T, ws *websocket.Conn, frame []byte, id string) string {
	t.Helper()
	if frame != nil {
		if err := ws.WriteMessage(websocket.TextMessage, frame); err != nil {
			t.Fatal(err)
		}
	}
	for {
		f := read(t, ws)
		if f["request_id"] != id {
			t.Fatalf("got %v while waiting for %s", f, id)
		}
		switch f["type"] {
		case protocol.TypeDone:
			return f["text"].(string)
		case protocol.TypeError:
			t.Fatalf("%s: %v", id, f)
		}
	}
}

// closeOf reads until the socket ends and returns its close frame.
func closeOf(t *testing.T, ws *websocket.Conn) *websocket.CloseError {
	t.Helper()
	_ = ws.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		if _, _, err := ws.ReadMessage(); err != nil {
			var ce *websocket.CloseError
			if !errors.As(err, &ce) {
				t.Fatalf("socket ended without a close: %v", err)
			}
			return ce
		}
	}
}

// A frame with an image may pass the plain bound up to the attachment
// bound; the same size without an attachment, or over the attachment
// bound, closes with 1009 and its own reason. After each, the next
// connection's requests are served.
func TestAttachmentFrameBound(t *testing.T) {
	const plain, attach = 16 << 10, 300 << 10
	_, url := serve(t, newAnswering(), nil, socket.Options{MaxFrameBytes: plain, MaxAttachmentFrameBytes: attach})

	ws := dial(t, url)
	big := imageFrame("image-req-1", 200<<10, false) // several read chunks
	if got, want := served(t, ws, big, "image-req-1"), fmt.Sprintf("seen %d attachment bytes", 200<<10*3/4); got != want {
		t.Fatalf("answer %q, want %q", got, want)
	}
	if got := served(t, ws, imageFrame("small-req-1", 1<<10, true), "small-req-1"); got != "seen 0 attachment bytes" {
		t.Fatalf("after the image: %q", got)
	}

	if err := ws.WriteMessage(websocket.TextMessage, imageFrame("text-req-1", 200<<10, true)); err != nil {
		t.Fatal(err)
	}
	if ce := closeOf(t, ws); ce.Code != socket.DisconnectNoAttachments.Code || ce.Text != socket.DisconnectNoAttachments.Reason {
		t.Fatalf("a large frame without attachments: close %d %q, want %v", ce.Code, ce.Text, socket.DisconnectNoAttachments)
	}

	ws = dial(t, url)
	if got := served(t, ws, imageFrame("small-req-2", 1<<10, true), "small-req-2"); got != "seen 0 attachment bytes" {
		t.Fatalf("on a new connection: %q", got)
	}
	if err := ws.WriteMessage(websocket.TextMessage, imageFrame("huge-req-1", attach+1, false)); err != nil {
		t.Fatal(err)
	}
	if ce := closeOf(t, ws); ce.Code != socket.DisconnectFrameTooBig.Code || ce.Text != socket.DisconnectFrameTooBig.Reason {
		t.Fatalf("a frame over the attachment bound: close %d %q, want %v", ce.Code, ce.Text, socket.DisconnectFrameTooBig)
	}
	ws = dial(t, url)
	served(t, ws, imageFrame("small-req-3", 1<<10, true), "small-req-3")
}

// With the attachment bound at most the plain one, every frame has the
// plain bound, images too.
func TestAttachmentBoundOff(t *testing.T) {
	_, url := serve(t, newAnswering(), nil, socket.Options{MaxFrameBytes: 16 << 10, MaxAttachmentFrameBytes: 16 << 10})
	ws := dial(t, url)
	if err := ws.WriteMessage(websocket.TextMessage, imageFrame("image-req-2", 20<<10, false)); err != nil {
		t.Fatal(err)
	}
	if ce := closeOf(t, ws); ce.Code != socket.DisconnectFrameTooBig.Code || ce.Text != socket.DisconnectFrameTooBig.Reason {
		t.Fatalf("close %d %q, want %v", ce.Code, ce.Text, socket.DisconnectFrameTooBig)
	}
}

// The server's attachment budget: while one large frame is being admitted,
// another that does not fit is answered busy (retryable, naming its
// request), the socket stays open, and the same request is served once
// the first one is through.
func TestAttachmentBudgetAnswersBusy(t *testing.T) {
	gw := newAnswering()
	release := make(chan struct{})
	gw.hold["held-image-1"] = release
	const plain = 16 << 10
	hub, url := serve(t, gw, nil, socket.Options{MaxFrameBytes: plain, MaxAttachmentFrameBytes: 1 << 20, AttachmentBytesInFlight: 150 << 10,
		AttachmentBytesPerUser: 150 << 10})

	first, second := dial(t, url), dialWith(t, url, &websocket.Dialer{Subprotocols: []string{protocol.Subprotocol}}, "other")
	if err := first.WriteMessage(websocket.TextMessage, imageFrame("held-image-1", 120<<10, false)); err != nil {
		t.Fatal(err)
	}
	// The first frame holds about 104 KiB of the 150 KiB budget until its
	// admission returns; the second's 104 KiB do not fit.
	select {
	case <-gw.waiting:
	case <-time.After(10 * time.Second):
		t.Fatal("the first request never reached the gateway")
	}
	frame := imageFrame("second-image-1", 120<<10, false)
	if err := second.WriteMessage(websocket.TextMessage, frame); err != nil {
		t.Fatal(err)
	}
	f := read(t, second)
	id, _ := f["request_id"].(string)
	if f["code"] != protocol.CodeBusy || f["retryable"] != true || f["retry_after_ms"] == nil || id != "second-image-1" {
		t.Fatalf("refusal %v, want busy, retryable, naming the request", f)
	}
	if !strings.Contains(f["message"].(string), "server busy") {
		t.Fatalf("message %q", f["message"])
	}
	close(release)
	if got := served(t, first, nil, "held-image-1"); got != fmt.Sprintf("seen %d attachment bytes", 120<<10*3/4) {
		t.Fatalf("first: %q", got)
	}
	served(t, second, frame, id)
	// Every byte taken is given back once its request is through.
	for deadline := time.Now().Add(5 * time.Second); hub.AttachmentBytesHeld() != 0; {
		if time.Now().After(deadline) {
			t.Fatalf("%d bytes of the budget still taken", hub.AttachmentBytesHeld())
		}
		time.Sleep(time.Millisecond)
	}
}

// Frames that fail validation are refused through the gateway (Refuse:
// the refusal budget, the rejected line, a request's usage record) and
// answered with what it returns; the socket stays open and the next
// request on it is served (issue 23).
func TestInvalidFramesAreRefusedThroughTheGateway(t *testing.T) {
	a := newAnswering()
	refused := make(chan gateway.Request, 16)
	a.refuse = func(c gateway.Caller, r gateway.Request, err error) error {
		if c.Principal.Subject != "u1" || r.ReceivedAt.IsZero() {
			t.Errorf("refusal of %+v by %+v", r, c)
		}
		refused <- r
		if r.RequestID == "spent-budget" {
			return gateway.ErrBusy // stands for whatever the gateway answers instead
		}
		return err
	}
	_, url := serve(t, a, nil, socket.Options{})
	ws := dial(t, url)
	cases := []struct {
		frame, id, typ, code, msg string
	}{
		{`{"type":"request","request_id":"bad-temp-01","temperature":5,"messages":[{"role":"user","content":"hi"}]}`,
			"bad-temp-01", protocol.TypeRequest, protocol.CodeInvalidRequest, "temperature must be between 0 and 1"},
		{`{"type":"request","request_id":"bad-b64-001","messages":[{"role":"user","content":[{"type":"image","format":"png","data":"not base64!"}]}]}`,
			"bad-b64-001", protocol.TypeRequest, protocol.CodeInvalidRequest, "messages[0].content[0].data is not valid base64"},
		{`{"type":"request","request_id":"no-msgs-001","messages":[]}`, "no-msgs-001", protocol.TypeRequest, protocol.CodeInvalidRequest, "messages must not be empty"},
		{`{"type":"request","request_id":"bad-type-01","max_tokens":"many","messages":[{"role":"user","content":"hi"}]}`,
			"bad-type-01", protocol.TypeRequest, protocol.CodeInvalidRequest, `field "max_tokens" has the wrong type`},
		{`{"type":"request","messages":[{"role":"user","content":"hi"}]}`, "", protocol.TypeRequest, protocol.CodeInvalidRequest, "request_id is required"},
		{`{"type":"request","request_id":"spent-budget","temperature":5,"messages":[{"role":"user","content":"hi"}]}`,
			"spent-budget", protocol.TypeRequest, protocol.CodeBusy, ""},
		{`{"type":"bogus","request_id":"bogus-00001"}`, "bogus-00001", "bogus", protocol.CodeInvalidRequest, "unknown frame type"},
		{`not json`, "", "", protocol.CodeInvalidRequest, "not a valid JSON object"},
	}
	for i, c := range cases {
		if err := ws.WriteMessage(websocket.TextMessage, []byte(c.frame)); err != nil {
			t.Fatal(err)
		}
		f := read(t, ws)
		msg, _ := f["message"].(string)
		if f["type"] != protocol.TypeError || f["code"] != c.code || f["request_id"] != nil && f["request_id"] != c.id ||
			!strings.Contains(msg, c.msg) {
			t.Fatalf("%s: %v, want %s naming %q", c.frame, f, c.code, c.msg)
		}
		select {
		case r := <-refused:
			if r.RequestID != c.id || r.IsRequest != (c.typ == protocol.TypeRequest) {
				t.Fatalf("%s: refused as %q (a request: %v), want %q %q", c.frame, r.RequestID, r.IsRequest, c.typ, c.id)
			}
		default:
			t.Fatalf("%s: answered without the gateway's refusal", c.frame)
		}
		id := fmt.Sprintf("good-req-%02d", i)
		if got := served(t, ws, imageFrame(id, 1<<10, true), id); got != "seen 0 attachment bytes" {
			t.Fatalf("after %s: %q", c.frame, got)
		}
	}
	if err := ws.WriteMessage(websocket.BinaryMessage, []byte(`{"type":"ping"}`)); err != nil {
		t.Fatal(err)
	}
	if f := read(t, ws); f["code"] != protocol.CodeInvalidRequest || len(refused) != 1 {
		t.Fatalf("a binary frame: %v, %d refusals", f, len(refused))
	}
}

// Only a request's image or document may take a frame past the plain
// bound: any other frame type carrying an image block over it closes 1009
// as any oversized frame does (issue 23: a 400 KB ping passed).
func TestOnlyRequestsUseTheAttachmentBound(t *testing.T) {
	const plain, attach = 16 << 10, 300 << 10
	_, url := serve(t, newAnswering(), nil, socket.Options{MaxFrameBytes: plain, MaxAttachmentFrameBytes: attach})
	img := base64.StdEncoding.EncodeToString(make([]byte, 100<<10))
	blocks := `"messages":[{"role":"user","content":[{"type":"image","format":"png","data":"` + img + `"}]}]`
	for _, frame := range []string{
		`{"type":"ping","t":1,` + blocks + `}`,
		`{"type":"resume","request_id":"resume-0001",` + blocks + `}`,
		`{"type":"cancel","request_id":"cancel-0001",` + blocks + `}`,
		`{"type":"auth","token":"good",` + blocks + `}`,
		`{"type":"bogus",` + blocks + `}`,
	} {
		ws := dial(t, url)
		if err := ws.WriteMessage(websocket.TextMessage, []byte(frame)); err != nil {
			t.Fatal(err)
		}
		if ce := closeOf(t, ws); ce.Code != socket.DisconnectNoAttachments.Code || ce.Text != socket.DisconnectNoAttachments.Reason {
			t.Fatalf("%s...: close %d %q, want %v", frame[:30], ce.Code, ce.Text, socket.DisconnectNoAttachments)
		}
	}
	ws := dial(t, url)
	if got := served(t, ws, imageFrame("image-req-1", 200<<10, false), "image-req-1"); got != fmt.Sprintf("seen %d attachment bytes", 200<<10*3/4) {
		t.Fatalf("a request with an image: %q", got)
	}
}

// partialFrame starts an image request's frame of about size bytes on ws
// and writes its first n bytes without ending it. The caller must keep
// reading ws (pings are answered there) and may finish the frame with Close.
func partialFrame(t *testing.T, ws *websocket.Conn, id string, size, n int) io.WriteCloser {
	t.Helper()
	w, err := ws.NextWriter(websocket.TextMessage)
	if err != nil {
		t.Fatal(err)
	}
	frame := imageFrame(id, size, false)
	if _, err := w.Write(frame[:n]); err != nil {
		t.Fatal(err)
	}
	return &frameRest{w, frame[n:]}
}

// frameRest writes the rest of a partial frame, then ends it.
type frameRest struct {
	io.WriteCloser
	rest []byte
}

func (f *frameRest) Close() error {
	if _, err := f.WriteCloser.Write(f.rest); err != nil {
		return err
	}
	return f.WriteCloser.Close()
}

// readAll reads ws on its own goroutine (answering pings, as a live
// client does) and hands over each frame; the socket's end is the last
// value, then the channel closes.
func readAll(ws *websocket.Conn) <-chan any {
	out := make(chan any, 16)
	go func() {
		defer close(out)
		for {
			_ = ws.SetReadDeadline(time.Now().Add(30 * time.Second))
			_, data, err := ws.ReadMessage()
			if err != nil {
				out <- err
				return
			}
			var f map[string]any
			_ = json.Unmarshal(data, &f)
			out <- f
		}
	}()
	return out
}

// awaitUsed polls the server's attachment budget until at least n bytes are taken.
func awaitUsed(t *testing.T, hub *testHub, n int64) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); hub.AttachmentBytesHeld() < n; {
		if time.Now().After(deadline) {
			t.Fatalf("the budget holds %d bytes, want at least %d", hub.AttachmentBytesHeld(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// awaitBudgetFree polls until every byte of the attachment budget is back.
func awaitBudgetFree(t *testing.T, hub *testHub) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); hub.AttachmentBytesHeld() != 0; {
		if time.Now().After(deadline) {
			t.Fatalf("%d bytes of the budget still taken", hub.AttachmentBytesHeld())
		}
		time.Sleep(time.Millisecond)
	}
}

// A frame must arrive whole within the frame read timeout, however
// faithfully its sender answers pings meanwhile: past it the socket is
// closed with 1008 and the frame's share of the attachment budget is
// given back (issue 23: 16 sockets held the whole budget for minutes).
func TestFrameReadTimeout(t *testing.T) {
	// Several heartbeats fit in the frame timeout: the pings they bring
	// are answered, and must not move it.
	const heartbeat, frameTimeout = 200 * time.Millisecond, 1500 * time.Millisecond
	hub, url := serve(t, newAnswering(), nil, socket.Options{Heartbeat: heartbeat, FrameReadTimeout: frameTimeout,
		MaxFrameBytes: 16 << 10, MaxAttachmentFrameBytes: 1 << 20})
	ws := dial(t, url)
	frames := readAll(ws) // answers every ping
	partialFrame(t, ws, "stalled-image-1", 400<<10, 200<<10)
	select {
	case v := <-frames:
		err, ok := v.(error)
		if !ok {
			t.Fatalf("frame %v before the close", v)
		}
		var ce *websocket.CloseError
		if !errors.As(err, &ce) || ce.Code != socket.DisconnectFrameTimeout.Code || ce.Text != socket.DisconnectFrameTimeout.Reason {
			t.Fatalf("a frame never finished: %v, want close %v", err, socket.DisconnectFrameTimeout)
		}
	case <-time.After(20 * frameTimeout): // generous: a busy machine
		t.Fatalf("a frame unfinished for %s, its sender answering pings, is still being read", 20*frameTimeout)
	}
	awaitBudgetFree(t, hub)

	// A socket idle for longer than the frame timeout (its pings keep it
	// open: idle time is the heartbeat's) is served a frame sent at once.
	ws = dial(t, url)
	pings := make(chan struct{}, 64)
	ws.SetPingHandler(func(data string) error {
		select {
		case pings <- struct{}{}:
		default:
		}
		return ws.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(time.Second))
	})
	frames = readAll(ws)
	idle := time.Now()
	for time.Since(idle) < frameTimeout+frameTimeout/2 {
		select {
		case <-pings:
		case v := <-frames:
			t.Fatalf("an idle socket got %v", v)
		}
	}
	if err := ws.WriteMessage(websocket.TextMessage, imageFrame("whole-image-1", 200<<10, false)); err != nil {
		t.Fatal(err)
	}
	for v := range frames {
		f, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("after idling: %v", v)
		}
		if f["type"] == protocol.TypeDone {
			break
		}
	}
}

// One user's frames hold at most AttachmentBytesPerUser of the server's
// budget: past it, that user's frame is read and dropped and its request
// answered rate_limited, while another user's image is served (issue 23:
// one user's 16 stalled frames made every other user's image busy).
func TestAttachmentBudgetPerUser(t *testing.T) {
	const plain = 16 << 10
	hub, url := serve(t, newAnswering(), nil, socket.Options{MaxFrameBytes: plain, MaxAttachmentFrameBytes: 1 << 20,
		AttachmentBytesInFlight: 1 << 20, AttachmentBytesPerUser: 300 << 10})
	stalled := dial(t, url)
	stalledFrames := readAll(stalled)
	rest := partialFrame(t, stalled, "stalled-image-2", 250<<10, 200<<10)
	awaitUsed(t, hub, 150<<10) // read up to its last whole 64 KiB piece: 176 KiB of the user's 300

	// The same user's second frame does not fit in the user's share.
	second := dial(t, url)
	if err := second.WriteMessage(websocket.TextMessage, imageFrame("second-image-2", 200<<10, false)); err != nil {
		t.Fatal(err)
	}
	f := read(t, second)
	if f["code"] != protocol.CodeRateLimited || f["request_id"] != "second-image-2" || f["retryable"] != true {
		t.Fatalf("over the user's share: %v, want rate_limited naming the request", f)
	}

	// Another user's image fits in the server's budget.
	other := dialWith(t, url, &websocket.Dialer{Subprotocols: []string{protocol.Subprotocol}}, "other")
	served(t, other, imageFrame("other-image-1", 200<<10, false), "other-image-1")

	if err := rest.Close(); err != nil {
		t.Fatal(err)
	}
	for v := range stalledFrames {
		if f, ok := v.(map[string]any); ok && f["type"] == protocol.TypeDone && f["request_id"] == "stalled-image-2" {
			break
		}
		if err, ok := v.(error); ok {
			t.Fatalf("the finished frame: %v", err)
		}
	}
	awaitBudgetFree(t, hub)
}
