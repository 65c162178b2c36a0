package openai

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jetway-gateway/jetway/internal/call"
	"github.com/jetway-gateway/jetway/internal/door"
	"github.com/jetway-gateway/jetway/internal/gateway"
	"github.com/jetway-gateway/jetway/internal/protocol"
	"github.com/jetway-gateway/jetway/internal/stream"
)

// servedBy returns a log that streamed chunks and ended done, served by
// tier ("": the model call named none).
func servedBy(req gateway.Request, tier string, chunks ...string) *stream.Log {
	log := stream.NewLog("alice", req.RequestID, "h", time.Now())
	log.Accept(stream.NewAccepted(call.Accepted{RequestID: req.RequestID, Model: "mock-a"}))
	for _, c := range chunks {
		log.Append(c)
	}
	text, n := log.Text()
	log.Finish(stream.DoneTerminal(call.Done{RequestID: req.RequestID, Chunks: n, Text: text, Model: "mock-a",
		Usage: protocol.Usage{InputTokens: 7, OutputTokens: int64(n)}, StopReason: "end_turn", ServiceTier: tier}), time.Now())
	return log
}

// OpenAI's service_tier is the core's Options.ServiceTier: "auto" (and
// absent, and null) the app's tier, the others as they are.
func TestServiceTierMapsToTheCore(t *testing.T) {
	got := make(chan gateway.Request, 1)
	srv, _ := newDoor(t, func(c gateway.Caller, req gateway.Request) (*stream.Log, int, error) {
		got <- req
		return finished(req, "ok"), 0, nil
	}, door.Options{})
	for value, want := range map[string]string{"": "", `null`: "", `"auto"`: "", `"default"`: call.TierDefault,
		`"flex"`: call.TierFlex, `"priority"`: call.TierPriority} {
		body := `{"messages":[{"role":"user","content":"hi"}]`
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

// A service_tier Jetway does not serve is a 400 naming it, and nothing
// reaches the model; the gateway's own refusal of a tier (the app does not
// allow it, the model has none) names it too.
func TestServiceTierRefusalsNameIt(t *testing.T) {
	srv, _ := newDoor(t, func(c gateway.Caller, req gateway.Request) (*stream.Log, int, error) {
		if req.ServiceTier != call.TierFlex {
			t.Errorf("a refused tier reached the gateway: %+v", req.Options)
		}
		return nil, 0, call.FieldErrorf(call.ErrInvalid, "service_tier", ` "flex" is not allowed for this app (allowed: "default")`)
	}, door.Options{})
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	for _, tc := range []struct{ tier, code, msg string }{
		{`"scale"`, "unsupported_parameter", `service_tier "scale" is not supported`},
		{`"standard_only"`, "invalid_request", `service_tier must be "auto", "default", "flex" or "priority", got "standard_only"`},
		{`"Priority"`, "invalid_request", "service_tier must be"},
		{`7`, "invalid_request", "service_tier"},
		{`"flex"`, "invalid_request", `service_tier "flex" is not allowed for this app`},
	} {
		resp := post(t, srv.URL, `{`+msgs+`,"service_tier":`+tc.tier+`}`, nil)
		e := decodeError(t, resp.Body)
		if resp.StatusCode != 400 || e.Type != "invalid_request_error" || e.Code != tc.code || e.Param == nil ||
			*e.Param != "service_tier" || !strings.HasPrefix(e.Message, tc.msg) {
			t.Errorf("service_tier %s: %d %+v %v, want %s naming service_tier: %s", tc.tier, resp.StatusCode, e, e.Param, tc.code, tc.msg)
		}
	}
}

// The tier that served is the answer's service_tier: the chat.completion
// body's, and the streamed finish and usage chunks' (the chunks before do
// not know it); an answer whose model call named no tier has none.
func TestServiceTierIsEchoed(t *testing.T) {
	tiers := map[string]string{"tier-flex-01": call.TierFlex, "tier-none-01": ""}
	srv, _ := newDoor(t, func(c gateway.Caller, req gateway.Request) (*stream.Log, int, error) {
		tier, ok := tiers[strings.TrimSuffix(strings.TrimSuffix(req.RequestID, "-s"), "-w")]
		if !ok {
			return nil, 0, errors.New("unknown request")
		}
		return servedBy(req, tier, "Hel", "lo"), 0, nil
	}, door.Options{})
	for key, tier := range tiers {
		resp := post(t, srv.URL, hello+`}`, map[string]string{"Idempotency-Key": key + "-w"})
		var body map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			t.Fatal(err)
		}
		if got, has := body["service_tier"]; tier == "" && has || tier != "" && got != tier {
			t.Errorf("%s: the body's service_tier is %v (%v), want %q", key, got, has, tier)
		}
		evs := readEvents(t, post(t, srv.URL, hello+`,"stream":true,"stream_options":{"include_usage":true}}`,
			map[string]string{"Idempotency-Key": key + "-s"}).Body)
		if len(evs) != 5 || evs[4].data != "[DONE]" {
			t.Fatalf("%s: events %+v", key, evs)
		}
		for i, ev := range evs[:4] {
			var chunk map[string]any
			if err := json.Unmarshal([]byte(ev.data), &chunk); err != nil {
				t.Fatalf("%s: event %d: %v", key, i, err)
			}
			got, has := chunk["service_tier"]
			if final := i >= 2; final && tier != "" && got != tier || (!final || tier == "") && has {
				t.Errorf("%s: event %d's service_tier is %v (%v): %s", key, i, got, has, ev.data)
			}
		}
	}
}
