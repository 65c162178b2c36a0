package responses

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/jetway-gateway/jetway/internal/auth"
	"github.com/jetway-gateway/jetway/internal/call"
	"github.com/jetway-gateway/jetway/internal/config"
	"github.com/jetway-gateway/jetway/internal/door"
	"github.com/jetway-gateway/jetway/internal/door/doortest"
	"github.com/jetway-gateway/jetway/internal/gateway"
	"github.com/jetway-gateway/jetway/internal/stream"
)

var update = flag.Bool("update", false, "rewrite testdata/wire.golden from the door's answers")

type fakeVerifier struct{}

func (fakeVerifier) Verify(_ context.Context, tok string) (auth.Principal, error) {
	if tok != "good" {
		return auth.Principal{}, auth.ErrBadSignature
	}
	return auth.Principal{Subject: "alice", Tenant: "contoso", App: "support"}, nil
}

// fakeGateway is the door's Gateway: submit for every request; the logs
// it made, for Resume and Rejoin.
type fakeGateway struct {
	submit func(req gateway.Request) (*stream.Log, error)
	logs   map[string]*stream.Log
}

func (g *fakeGateway) Submit(_ context.Context, _ gateway.Caller, req gateway.Request) (*stream.Log, int, error) {
	log, err := g.submit(req)
	if log != nil {
		g.logs[req.RequestID] = log
	}
	return log, 0, err
}

func (g *fakeGateway) Refuse(_ context.Context, _ gateway.Caller, _ gateway.Request, err error) error {
	return err
}

func (g *fakeGateway) Resume(ctx context.Context, c gateway.Caller, id string) (*stream.Log, error) {
	return g.Rejoin(ctx, c, id)
}

func (g *fakeGateway) Rejoin(_ context.Context, _ gateway.Caller, id string) (*stream.Log, error) {
	if log, ok := g.logs[id]; ok {
		return log, nil
	}
	return nil, gateway.ErrNotFound
}

func (g *fakeGateway) Cancel(context.Context, gateway.Caller, string) error { return nil }

type fakeConfig struct{}

func (fakeConfig) App(tenant, app string) (*config.Tenant, *config.App, bool) {
	a := &config.App{ID: app}
	a.Models.Default, a.Models.Allow = "mock-a", []string{"mock-a", "mock-r"}
	return &config.Tenant{ID: tenant}, a, tenant == "contoso"
}

func (fakeConfig) Model(id string) (*config.Model, bool) {
	if id == "mock-r" {
		return &config.Model{ID: id, Capabilities: []string{config.CapabilityReasoning}}, true
	}
	return &config.Model{ID: id}, id == "mock-a"
}

// answered is a finished log of text pieces.
func answered(req gateway.Request, pieces ...string) *stream.Log {
	return answeredBy(req, "", pieces...)
}

// answeredBy is a finished log of text pieces served by tier ("": the
// model call named none).
func answeredBy(req gateway.Request, tier string, pieces ...string) *stream.Log {
	log := stream.NewLog("alice", req.RequestID, "h", time.Unix(1700000000, 0))
	log.Accept(stream.NewAccepted(call.Accepted{RequestID: req.RequestID, Model: "mock-a"}))
	for _, p := range pieces {
		log.Append(p)
	}
	text, n := log.Text()
	log.Finish(stream.DoneTerminal(call.Done{RequestID: req.RequestID, Chunks: n, Text: text, Model: "mock-a",
		Usage: call.Usage{InputTokens: 7, OutputTokens: int64(n)}, StopReason: "end_turn", ServiceTier: tier}), time.Now())
	return log
}

// TestWire pins the door's answers and refusals (the golden file): the
// bodies the SDKs parse, every header but Date.
func TestWire(t *testing.T) {
	gw := &fakeGateway{logs: map[string]*stream.Log{}, submit: func(req gateway.Request) (*stream.Log, error) {
		log := stream.NewLog("alice", req.RequestID, "h", time.Unix(1700000000, 0))
		text := req.Messages[len(req.Messages)-1].Text()
		if l, err, ok := doortest.GatewayRefusal(text, log); ok {
			return l, err
		}
		switch text {
		case "capability":
			return nil, call.FieldErrorf(call.ErrInvalid, "tools", `: model mock-a is not configured with the "tools" capability`)
		case "tier":
			return nil, call.FieldErrorf(call.ErrInvalid, "service_tier", ` "priority" is not allowed for app support (its tier is default)`)
		case "tiered":
			return answeredBy(req, req.ServiceTier, "Hello", " there"), nil
		}
		return answered(req, "Hello", " there"), nil
	}}
	keys, _ := NewKeys(bytes.Repeat([]byte{3}, 32))
	store := NewMemoryStore()
	store.now = func() time.Time { return time.Unix(1700000000, 0) }
	d := New(fakeVerifier{}, gw, fakeConfig{}, store, nil, zap.NewNop(),
		door.Options{MaxBodyBytes: 8 << 10, OriginAllowed: func(o string) bool { return o == "https://chat.example" }},
		Options{Keys: keys, Now: func() time.Time { return time.Unix(1700000000, 0) }})
	srv := httptest.NewServer(d)
	t.Cleanup(srv.Close)

	ask := func(text string) string { return `{"model":"mock-a","input":"` + text + `"}` }
	var cases []doortest.Case
	post := func(name, body string, h map[string]string) {
		cases = append(cases, doortest.Case{Name: name, Method: "POST", Path: Path, Body: body, Header: h})
	}
	for _, c := range []struct{ name, body string }{
		{"answer", ask("hi")},
		{"answer streamed", `{"model":"mock-a","input":"hi","stream":true}`},
		{"not an object", `[1]`},
		{"syntax", `{"input":`},
		{"unsupported parameter", `{"input":"x","conversation":"c"}`},
		{"unknown parameter", `{"input":"x","seed":3}`},
		{"type error", `{"input":"x","temperature":"hot"}`},
		{"no input", `{"model":"mock-a"}`},
		{"structured output", `{"input":"x","text":{"format":{"type":"json_schema"}}}`},
		{"item type", `{"input":[{"type":"computer_call"}]}`},
		{"role", `{"input":[{"role":"robot","content":"x"}]}`},
		{"image remote", `{"input":[{"role":"user","content":[{"type":"input_image","image_url":"https://example.com/a.png"}]}]}`},
		{"unanswered output", `{"input":[{"type":"function_call_output","call_id":"c9","output":"r"}]}`},
		{"tool type refused by the protocol", `{"input":"x","tools":[{"type":"function","name":"no spaces"}]}`},
		{"unknown previous", `{"input":"x","previous_response_id":"resp_unknown1234"}`},
		{"background without store", `{"input":"x","background":true,"store":false}`},
		{"temperature (protocol)", `{"input":"x","temperature":7}`},
		{"capability (gateway)", ask("capability")},
		{"service_tier scale", `{"input":"x","service_tier":"scale"}`},
		{"service_tier value", `{"input":"x","service_tier":"standard_only"}`},
		{"service_tier (gateway)", `{"model":"mock-a","input":"tier","service_tier":"priority"}`},
		{"answer with a service tier", `{"model":"mock-a","input":"tiered","service_tier":"flex"}`},
		{"answer with a service tier streamed", `{"model":"mock-a","input":"tiered","service_tier":"priority","stream":true}`},
		{"conflict", ask("conflict")},
		{"busy", ask("busy")},
		{"draining", ask("draining")},
		{"quota", ask("quota")},
		{"quota streamed", `{"model":"mock-a","input":"quota","stream":true}`},
		{"model not allowed", ask("model")},
		{"too large", `{"input":"` + strings.Repeat("x", 9<<10) + `"}`},
	} {
		post(c.name, c.body, nil)
	}
	post("background", `{"model":"mock-a","input":"hi","background":true}`, map[string]string{"Idempotency-Key": "wire-back-001"})
	post("reasoning effort", `{"model":"mock-r","input":"hi","reasoning":{"effort":"low"},"max_output_tokens":2000}`, map[string]string{"Idempotency-Key": "wire-reason-1"})
	cases = append(cases,
		doortest.Case{Name: "get stored", Method: "GET", Path: Path + "/resp_wire-back-001"},
		doortest.Case{Name: "input items", Method: "GET", Path: Path + "/resp_wire-back-001/input_items"},
		doortest.Case{Name: "resume after 3", Method: "GET", Path: Path + "/resp_wire-back-001?stream=true&starting_after=3"},
		doortest.Case{Name: "resume past the end", Method: "GET", Path: Path + "/resp_wire-back-001?stream=true&starting_after=99"},
		doortest.Case{Name: "resume negative", Method: "GET", Path: Path + "/resp_wire-back-001?stream=true&starting_after=-1"},
		doortest.Case{Name: "get unknown", Method: "GET", Path: Path + "/resp_unknown1234"},
		doortest.Case{Name: "get not a response id", Method: "GET", Path: Path + "/chatcmpl-1"},
		doortest.Case{Name: "cancel foreground", Method: "POST", Path: Path + "/resp_wire-reason-1/cancel"},
		doortest.Case{Name: "delete", Method: "DELETE", Path: Path + "/resp_wire-back-001"},
		doortest.Case{Name: "get deleted", Method: "GET", Path: Path + "/resp_wire-back-001"},
		doortest.Case{Name: "bad Idempotency-Key", Method: "POST", Path: Path, Body: ask("hi"), Header: map[string]string{"Idempotency-Key": "bad key"}},
		doortest.Case{Name: "no credentials", Method: "POST", Path: Path, Body: ask("hi"), Header: map[string]string{"Authorization": ""}},
		doortest.Case{Name: "bad token", Method: "POST", Path: Path, Body: ask("hi"), Header: map[string]string{"Authorization": "Bearer forged"}},
		doortest.Case{Name: "origin refused", Method: "POST", Path: Path, Body: ask("hi"), Header: map[string]string{"Origin": "https://evil.example"}},
		doortest.Case{Name: "method", Method: "PUT", Path: Path},
	)
	doortest.Check(t, srv.URL, map[string]string{"Authorization": "Bearer good", "Idempotency-Key": "wire-0000001"}, cases, "testdata/wire.golden", *update)
	if _, err := gw.Rejoin(context.Background(), gateway.Caller{}, "nope"); !errors.Is(err, gateway.ErrNotFound) {
		t.Fatal(err)
	}
}
