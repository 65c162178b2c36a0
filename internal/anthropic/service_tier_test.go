package anthropic

import (
	"encoding/json"
	"errors"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/jetway-gateway/jetway/internal/call"
	"github.com/jetway-gateway/jetway/internal/door"
	"github.com/jetway-gateway/jetway/internal/gateway"
	"github.com/jetway-gateway/jetway/internal/protocol"
	"github.com/jetway-gateway/jetway/internal/stream"
)

// servedBy returns a log that streamed text and ended done, served by
// tier ("": the model call named none).
func servedBy(req gateway.Request, tier string) *stream.Log {
	log := stream.NewLog("alice", req.RequestID, "h", time.Now())
	log.Accept(stream.NewAccepted(call.Accepted{RequestID: req.RequestID, Model: "mock-a"}))
	log.Append("ok")
	log.Finish(stream.DoneTerminal(call.Done{RequestID: req.RequestID, Chunks: 1, Text: "ok", Model: "mock-a",
		Usage: protocol.Usage{InputTokens: 7, OutputTokens: 1}, StopReason: "end_turn", ServiceTier: tier}), time.Now())
	return log
}

// Anthropic's service_tier ("auto": the app's tier, "standard_only": the
// default tier) and Jetway's "priority" and "flex" are the core's
// Options.ServiceTier.
func TestServiceTierMapsToTheCore(t *testing.T) {
	got := make(chan gateway.Request, 1)
	srv := newDoor(t, func(c gateway.Caller, req gateway.Request) (*stream.Log, int, error) {
		got <- req
		return finished(req, "end_turn", "ok"), 0, nil
	})
	for value, want := range map[string]string{"": "", `null`: "", `"auto"`: "", `"standard_only"`: call.TierDefault,
		`"priority"`: call.TierPriority, `"flex"`: call.TierFlex} {
		body := hello
		if value != "" {
			body += `,"service_tier":` + value
		}
		resp := post(t, srv.URL, body+"}", nil)
		if resp.StatusCode != 200 {
			t.Fatalf("service_tier %s: %d %+v", value, resp.StatusCode, decodeError(t, resp.Body))
		}
		if req := <-got; req.ServiceTier != want {
			t.Errorf("service_tier %s: Options.ServiceTier %q, want %q", value, req.ServiceTier, want)
		}
	}
}

// A tier the door does not serve is a 400 invalid_request_error naming
// service_tier, refused through the gateway's refusal and never
// submitted; the gateway's refusal of a tier the app does not allow names
// it the same way.
func TestServiceTierRefusalsNameIt(t *testing.T) {
	refused := make(chan gateway.Request, 8)
	srv := httptest.NewServer(New(fakeVerifier{}, fakeGateway{refused: refused, submit: func(c gateway.Caller, req gateway.Request) (*stream.Log, int, error) {
		if req.ServiceTier != call.TierPriority {
			t.Errorf("a refused tier reached the gateway: %+v", req.Options)
			return nil, 0, errors.New("unreachable")
		}
		return nil, 0, call.FieldErrorf(call.ErrInvalid, "service_tier", ` "priority" is not allowed for this app (allowed: "default")`)
	}}, fakeApps{}, nil, zap.NewNop(), door.Options{}))
	t.Cleanup(srv.Close)
	for _, tc := range []struct{ tier, msg string }{
		{`"batch"`, `service_tier: must be "auto" or "standard_only" (or Jetway's "priority" or "flex"), got "batch"`},
		{`"standard"`, `service_tier: must be "auto" or "standard_only"`},
		{`"default"`, `service_tier: must be "auto" or "standard_only"`},
		{`["auto"]`, "service_tier: expected a string"},
		{`"priority"`, `service_tier "priority" is not allowed for this app`},
	} {
		resp := post(t, srv.URL, hello+`,"service_tier":`+tc.tier+`}`, nil)
		e := decodeError(t, resp.Body)
		if resp.StatusCode != 400 || e.Type != "error" || e.Error.Type != typeInvalidRequest || e.Error.Code != protocol.CodeInvalidRequest ||
			!strings.HasPrefix(e.Error.Message, tc.msg) {
			t.Errorf("service_tier %s: %d %+v, want %q", tc.tier, resp.StatusCode, e, tc.msg)
		}
	}
	if n := len(refused); n != 4 {
		t.Errorf("%d refusals through the gateway, want 4 (the door's)", n)
	}
}

// The tier that served is usage.service_tier in Anthropic's terms
// ("standard" for the default tier), in the whole message and in the
// stream's message_delta; an answer whose model call named no tier has
// none.
func TestServiceTierIsEchoed(t *testing.T) {
	tiers := map[string]string{"tier-default": call.TierDefault, "tier-priority": call.TierPriority,
		"tier-flexible": call.TierFlex, "tier-none-001": ""}
	srv := newDoor(t, func(c gateway.Caller, req gateway.Request) (*stream.Log, int, error) {
		tier, ok := tiers[strings.TrimSuffix(strings.TrimSuffix(req.RequestID, "-s"), "-w")]
		if !ok {
			return nil, 0, errors.New("unknown request")
		}
		return servedBy(req, tier), 0, nil
	})
	want := map[string]string{"tier-default": "standard", "tier-priority": "priority", "tier-flexible": "flex", "tier-none-001": ""}
	for key, tier := range want {
		check := func(how string, usage map[string]any) {
			t.Helper()
			if got, has := usage["service_tier"]; tier == "" && has || tier != "" && got != tier {
				t.Errorf("%s %s: usage.service_tier %v (%v), want %q", key, how, got, has, tier)
			}
		}
		var whole struct{ Usage map[string]any }
		if err := json.NewDecoder(post(t, srv.URL, hello+"}", map[string]string{"Idempotency-Key": key + "-w"}).Body).Decode(&whole); err != nil {
			t.Fatal(err)
		}
		check("whole", whole.Usage)
		full, _ := io.ReadAll(post(t, srv.URL, hello+`,"stream":true}`, map[string]string{"Idempotency-Key": key + "-s"}).Body)
		for _, ev := range readEvents(t, strings.NewReader(string(full))) {
			var e struct {
				Message struct{ Usage map[string]any }
				Usage   map[string]any
			}
			if err := json.Unmarshal([]byte(ev.data), &e); err != nil {
				t.Fatalf("%s: %v", ev.data, err)
			}
			switch ev.name {
			case "message_start":
				if _, has := e.Message.Usage["service_tier"]; has {
					t.Errorf("%s: message_start knows no tier yet: %s", key, ev.data)
				}
			case "message_delta":
				check("message_delta", e.Usage)
			}
		}
	}
}
