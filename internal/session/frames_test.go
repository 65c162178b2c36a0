package session

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/jetway-gateway/jetway/internal/gateway"
	"github.com/jetway-gateway/jetway/internal/protocol"
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
		l := stream.NewLog("u1", r.RequestID, "")
		l.Accept(protocol.Encode(protocol.Accepted{Type: protocol.TypeAccepted, RequestID: r.RequestID, Model: "m"}))
		text := fmt.Sprintf("seen %d attachment bytes", r.Features().AttachmentBytes)
		l.Append(text)
		l.Finish(protocol.Encode(protocol.Done{Type: protocol.TypeDone, RequestID: r.RequestID, Chunks: 1, Text: text}), time.Now())
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
	_, url := serve(t, newAnswering(), nil, Options{MaxFrameBytes: plain, MaxAttachmentFrameBytes: attach})

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
	if ce := closeOf(t, ws); ce.Code != protocol.DisconnectNoAttachments.Code || ce.Text != protocol.DisconnectNoAttachments.Reason {
		t.Fatalf("a large frame without attachments: close %d %q, want %v", ce.Code, ce.Text, protocol.DisconnectNoAttachments)
	}

	ws = dial(t, url)
	if got := served(t, ws, imageFrame("small-req-2", 1<<10, true), "small-req-2"); got != "seen 0 attachment bytes" {
		t.Fatalf("on a new connection: %q", got)
	}
	if err := ws.WriteMessage(websocket.TextMessage, imageFrame("huge-req-1", attach+1, false)); err != nil {
		t.Fatal(err)
	}
	if ce := closeOf(t, ws); ce.Code != protocol.DisconnectFrameTooBig.Code || ce.Text != protocol.DisconnectFrameTooBig.Reason {
		t.Fatalf("a frame over the attachment bound: close %d %q, want %v", ce.Code, ce.Text, protocol.DisconnectFrameTooBig)
	}
	ws = dial(t, url)
	served(t, ws, imageFrame("small-req-3", 1<<10, true), "small-req-3")
}

// With the attachment bound at most the plain one, every frame has the
// plain bound, images too.
func TestAttachmentBoundOff(t *testing.T) {
	_, url := serve(t, newAnswering(), nil, Options{MaxFrameBytes: 16 << 10, MaxAttachmentFrameBytes: 16 << 10})
	ws := dial(t, url)
	if err := ws.WriteMessage(websocket.TextMessage, imageFrame("image-req-2", 20<<10, false)); err != nil {
		t.Fatal(err)
	}
	if ce := closeOf(t, ws); ce.Code != protocol.DisconnectFrameTooBig.Code || ce.Text != protocol.DisconnectFrameTooBig.Reason {
		t.Fatalf("close %d %q, want %v", ce.Code, ce.Text, protocol.DisconnectFrameTooBig)
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
	hub, url := serve(t, gw, nil, Options{MaxFrameBytes: plain, MaxAttachmentFrameBytes: 1 << 20, AttachmentBytesInFlight: 150 << 10})

	first, second := dial(t, url), dial(t, url)
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
	for deadline := time.Now().Add(5 * time.Second); hub.frames.budget.used.Load() != 0; {
		if time.Now().After(deadline) {
			t.Fatalf("%d bytes of the budget still taken", hub.frames.budget.used.Load())
		}
		time.Sleep(time.Millisecond)
	}
}

// BenchmarkReadImageFrame is the session's read of a frame with a 1 MiB
// image (1.4 MB) from the connection, before decoding: 64 KiB pooled
// pieces, one copy into a buffer of the frame's size, the budget taken
// and given back.
func BenchmarkReadImageFrame(b *testing.B) {
	frame := imageFrame("bench-image-1", 1400<<10, false)
	fr := frameReader{plain: DefaultMaxFrameBytes, largest: DefaultMaxAttachmentFrameBytes,
		budget: &byteBudget{limit: DefaultAttachmentBytesInFlight, observe: func(int64) {}}}
	r := bytes.NewReader(frame)
	b.ReportAllocs()
	b.SetBytes(int64(len(frame)))
	for b.Loop() {
		r.Reset(frame)
		data, held, err := fr.read(r)
		if err != nil || len(data) != len(frame) {
			b.Fatal(len(data), err)
		}
		fr.budget.give(held)
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
			t.Errorf("refusal of %+v by %+v", r.Inbound, c)
		}
		refused <- r
		if r.RequestID == "spent-budget" {
			return gateway.ErrBusy // stands for whatever the gateway answers instead
		}
		return err
	}
	_, url := serve(t, a, nil, Options{})
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
			if r.RequestID != c.id || r.Type != c.typ {
				t.Fatalf("%s: refused as %q %q, want %q %q", c.frame, r.Type, r.RequestID, c.typ, c.id)
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
	_, url := serve(t, newAnswering(), nil, Options{MaxFrameBytes: plain, MaxAttachmentFrameBytes: attach})
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
		if ce := closeOf(t, ws); ce.Code != protocol.DisconnectNoAttachments.Code || ce.Text != protocol.DisconnectNoAttachments.Reason {
			t.Fatalf("%s...: close %d %q, want %v", frame[:30], ce.Code, ce.Text, protocol.DisconnectNoAttachments)
		}
	}
	ws := dial(t, url)
	if got := served(t, ws, imageFrame("image-req-1", 200<<10, false), "image-req-1"); got != fmt.Sprintf("seen %d attachment bytes", 200<<10*3/4) {
		t.Fatalf("a request with an image: %q", got)
	}
}
