package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/jetway-gateway/jetway/client"
	"github.com/jetway-gateway/jetway/internal/mockmodel"
	"github.com/jetway-gateway/jetway/internal/protocol"
	"github.com/jetway-gateway/jetway/internal/socket"
)

// TestAttachmentsReachTheModel: an image and a document go through the
// gateway to the mock (which checks them as Bedrock does) and the text
// answer comes back as for any request; refusals (a model without the
// capability, an unknown block type, bad base64, an oversized image, tools
// for a model without the tools capability) are invalid_request naming the
// field, and none reaches the model.
func TestAttachmentsReachTheModel(t *testing.T) {
	w := newWorld(t, fastPace())
	g := w.start(nil) // the default bounds take an image at Bedrock's limit
	dialApp := func(sub, clientID string) *client.Client {
		tok := w.token(sub, "contoso", clientID, time.Hour)
		return w.dial(g, sub, func(o *client.Options) { o.Token = func(context.Context) (string, error) { return tok, nil } })
	}
	kb := dialApp("blocks-kb", "contoso-kb") // mock-cheap: images, documents
	nofb := dialApp("blocks-nofb", "contoso-nofallback")

	image := func(n int) client.Block {
		return client.Block{Type: protocol.BlockImage, Format: "png", Data: client.DataOf(make([]byte, n))}
	}
	withBlocks := func(bs ...client.Block) client.Request {
		return client.Request{Messages: []client.Message{{Role: "user", Blocks: bs}}}
	}
	const question = "what is in the picture?"
	req := withBlocks(client.Block{Type: protocol.BlockText, Text: question}, image(2500),
		client.Block{Type: protocol.BlockDocument, Format: "txt", Name: "notes", Data: client.DataOf([]byte("some notes"))})
	call, err := kb.Send(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	done, err := waitCall(t, call, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Join(mockmodel.Tokens("mock-cheap", "", []string{question}, mockmodel.DefaultTokens), "")
	if done.Text != want || call.Text() != want || done.Model != "mock-cheap" {
		t.Fatalf("done %q from %s, want the mock's answer to the text", done.Text, done.Model)
	}
	// The mock counts one token per started 1,000 attachment bytes (2,510).
	if in := int64(mockmodel.InputTokens("", []string{question}) + 3); done.Usage.InputTokens != in {
		t.Fatalf("input tokens %d, want %d", done.Usage.InputTokens, in)
	}
	if acc := call.AcceptedFrame(); acc == nil || acc.ReservedTokens < 4000 {
		t.Fatalf("accepted %+v: the reservation must count the image", acc)
	}

	before := w.mock.Requests("mock-a") + w.mock.Requests("mock-cheap")
	tools := withBlocks(client.Block{Type: protocol.BlockText, Text: "hi"})
	tools.Tools = []client.Tool{{Name: "clock", InputSchema: json.RawMessage(`{"type":"object"}`)}}
	cases := []struct {
		name string
		c    *client.Client
		req  client.Request
		want string
	}{
		{"model without images", nofb, withBlocks(image(10)), `messages[].content: image blocks: model mock-a is not configured with the "images" capability`},
		{"unknown block type", kb, withBlocks(client.Block{Type: "video", Data: protocol.ParseData("AAAA")}), `messages[0].content[0].type "video" is unknown`},
		{"bad base64", kb, withBlocks(client.Block{Type: protocol.BlockImage, Format: "png", Data: protocol.ParseData("not base64")}), "messages[0].content[0].data is not valid base64"},
		{"oversized image", kb, withBlocks(image(protocol.MaxImageBytes + 1)), "over the 3932160 bytes an image may have"},
		{"tools without the capability", kb, tools, `tools: model mock-cheap is not configured with the "tools" capability`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			call, err := c.c.Send(context.Background(), c.req)
			if err != nil {
				t.Fatal(err)
			}
			_, err = waitCall(t, call, 20*time.Second)
			if e, ok := err.(*client.Error); !ok || e.Code != protocol.CodeInvalidRequest || !strings.Contains(e.Message, c.want) {
				t.Fatalf("error %v, want invalid_request containing %q", err, c.want)
			}
		})
	}
	if after := w.mock.Requests("mock-a") + w.mock.Requests("mock-cheap"); after != before {
		t.Fatalf("%d refused requests reached the model", after-before)
	}
}

// TestAttachmentFrameBounds, through the real socket with the default
// bounds (256 KiB, 8 MiB for frames with attachments): a 1 MiB image
// (1.4 MB of frame) is served; a frame as large without an attachment
// closes 1009, and so does an image frame over 8 MiB, each with its
// reason; nothing is lost: the request in flight when the socket closed
// is resumed on the next one, and new requests are served.
func TestAttachmentFrameBounds(t *testing.T) {
	w := newWorld(t, fastPace())
	g := w.start(nil)
	tok := w.token("bounds-kb", "contoso", "contoso-kb", time.Hour) // mock-cheap: images
	const question = "what is in the picture?"
	image := func(id string, n int) string {
		return `{"type":"request","request_id":"` + id + `","messages":[{"role":"user","content":[{"type":"text","text":"` +
			question + `"},{"type":"image","format":"png","data":"` + base64.StdEncoding.EncodeToString(make([]byte, n)) + `"}]}]}`
	}
	text := func(id, prompt string) string {
		return `{"type":"request","request_id":"` + id + `","messages":[{"role":"user","content":"` + prompt + `"}]}`
	}
	closed := func(rc *rawConn) *websocket.CloseError {
		t.Helper()
		_ = rc.ws.SetReadDeadline(time.Now().Add(20 * time.Second))
		for {
			if _, _, err := rc.ws.ReadMessage(); err != nil {
				var ce *websocket.CloseError
				if !errors.As(err, &ce) {
					t.Fatalf("connection ended without a close frame: %v", err)
				}
				return ce
			}
		}
	}
	answer := strings.Join(mockmodel.Tokens("mock-cheap", "", []string{question}, mockmodel.DefaultTokens), "")

	rc := w.raw(g, tok, nil)
	rc.send(image("bounds-image-1", 1<<20))
	if done, _ := rc.readUntil("done"); done["text"] != answer {
		t.Fatalf("1 MiB image: %v", done)
	}
	rc.send(text("bounds-inflight-1", "keep going"))
	if acc := rc.read(); acc["type"] != "accepted" {
		t.Fatalf("got %v, want accepted", acc)
	}
	rc.send(text("bounds-text-1", strings.Repeat("x", 1400_000)))
	if ce := closed(rc); ce.Code != 1009 || ce.Text != socket.DisconnectNoAttachments.Reason {
		t.Fatalf("a 1.4 MB frame without attachments: close %d %q", ce.Code, ce.Text)
	}

	rc = w.raw(g, tok, nil)
	rc.send(map[string]any{"type": "resume", "request_id": "bounds-inflight-1", "after_seq": 0})
	if done, _ := rc.readUntil("done"); done["text"] != expected("mock-cheap", "keep going", mockmodel.DefaultTokens) {
		t.Fatalf("the request in flight at the close: %v", done)
	}
	rc.send(image("bounds-image-2", 6_400_000)) // 8.5 MB of base64
	if ce := closed(rc); ce.Code != 1009 || ce.Text != socket.DisconnectFrameTooBig.Reason {
		t.Fatalf("a frame over 8 MiB: close %d %q", ce.Code, ce.Text)
	}

	rc = w.raw(g, tok, nil)
	rc.send(text("bounds-after-1", "hello again"))
	if done, _ := rc.readUntil("done"); done["text"] != expected("mock-cheap", "hello again", mockmodel.DefaultTokens) {
		t.Fatalf("after the closes: %v", done)
	}
}
