package gateway_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jetway-gateway/jetway/internal/gateway"
	"github.com/jetway-gateway/jetway/internal/protocol"
	"github.com/jetway-gateway/jetway/internal/quota"
	"github.com/jetway-gateway/jetway/internal/router"
)

func imageRequest(id string) gateway.Request {
	r := request(id, "")
	r.Messages = []protocol.Message{{Role: "user", Blocks: []protocol.Block{{Type: protocol.BlockText, Text: "look"},
		{Type: protocol.BlockImage, Format: "png", Data: base64.StdEncoding.EncodeToString([]byte("\x89PNG data"))}}}}
	if err := protocol.ValidateRequest(&r.Inbound); err != nil { // decodes the attachment, as Decode does
		panic(err)
	}
	return r
}

// Every model of the chain must have a capability the request uses (a
// fallback could otherwise get what it cannot take); refusals happen
// before any reservation or model call.
func TestCapabilitiesAreCheckedBeforeTheModelCall(t *testing.T) {
	e := newEnv(t)
	var calls atomic.Int32
	var seen router.Call
	g := e.gateway(streamFunc(func(ctx context.Context, chain []router.Target, c router.Call, onDelta func(string)) (router.Outcome, error) {
		calls.Add(1)
		seen = c
		return reply("cheap", "a cat")(ctx, chain, c, onDelta)
	}), gateway.Options{})

	// chat: cheap (images) falls back to dear (none).
	log, _, _ := g.Submit(caller("chat"), imageRequest("req-img-chain"))
	if f := terminal(t, log); f["code"] != protocol.CodeInvalidRequest ||
		f["message"] != `messages[].content: image blocks: model dear is not configured with the "images" capability` {
		t.Errorf("terminal %v", f)
	}
	tools := request("req-tools-1", "")
	tools.Tools = []protocol.Tool{{Name: "clock", InputSchema: []byte(`{}`)}}
	log, _, _ = g.Submit(caller("solo"), tools)
	if f := terminal(t, log); f["code"] != protocol.CodeInvalidRequest || !strings.HasPrefix(f["message"].(string), "tools: ") {
		t.Errorf("terminal %v", f)
	}
	if calls.Load() != 0 || len(e.quotas.settled) != 0 {
		t.Fatalf("%d model calls, settlements %v: refusals must not reach the model or the quota", calls.Load(), e.quotas.settled)
	}

	// solo: cheap alone takes images; the model gets the decoded bytes.
	log, _, _ = g.Submit(caller("solo"), imageRequest("req-img-solo"))
	if f := terminal(t, log); f["type"] != "done" || f["text"] != "a cat" {
		t.Fatalf("terminal %v", f)
	}
	var acc protocol.Accepted
	if err := json.Unmarshal(log.Read(0).Accepted, &acc); err != nil || acc.ReservedTokens < quota.EstimateImageTokens || calls.Load() != 1 {
		t.Fatalf("accepted %+v (%v), calls %d: the reservation must count the image", acc, err, calls.Load())
	}
	bs := seen.Messages[0].Blocks
	if len(bs) != 2 || bs[0].Text != "look" || string(bs[1].Data) != "\x89PNG data" || bs[1].Format != "png" {
		t.Fatalf("blocks the model got: %+v", bs)
	}
	recs := e.settle(g)
	images := map[string]int{}
	for _, r := range recs {
		images[r.RequestID] = r.Images
	}
	if len(recs) != 3 || images["req-img-chain"] != 1 || images["req-tools-1"] != 0 || images["req-img-solo"] != 1 {
		t.Fatalf("usage records %+v: images must be counted, refused requests too", recs)
	}
}

// The cache key covers blocks: the same image is a hit, another is not.
func TestAttachmentRequestsAreCachedByTheirBytes(t *testing.T) {
	e := newEnv(t)
	var calls atomic.Int32
	g := e.gateway(streamFunc(func(ctx context.Context, chain []router.Target, c router.Call, onDelta func(string)) (router.Outcome, error) {
		calls.Add(1)
		return reply("cheap", "a cat")(ctx, chain, c, onDelta)
	}), gateway.Options{})
	other := imageRequest("req-cache-img-3")
	other.Messages[0].Blocks[1].Data = base64.StdEncoding.EncodeToString([]byte("another image"))
	if err := protocol.ValidateRequest(&other.Inbound); err != nil {
		t.Fatal(err)
	}
	for i, r := range []gateway.Request{imageRequest("req-cache-img-1"), imageRequest("req-cache-img-2"), other} {
		log, _, _ := g.Submit(caller("cached"), r)
		f := terminal(t, log)
		if want := i == 1; f["type"] != "done" || f["cached"] != want {
			t.Fatalf("request %d: terminal %v, want cached=%v", i, f, want)
		}
	}
	if calls.Load() != 2 {
		t.Fatalf("%d model calls, want 2 (the second request was a hit)", calls.Load())
	}
	e.settle(g)
}
