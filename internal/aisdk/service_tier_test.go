package aisdk

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jetway-gateway/jetway/internal/call"
	"github.com/jetway-gateway/jetway/internal/stream"
)

// The body's service_tier is jetway.v1's: the core's Options.ServiceTier
// (absent: the app's); another value is an invalid_request naming it,
// refused before anything is submitted (send refuses translate's error).
func TestTranslateServiceTier(t *testing.T) {
	msgs := ui(t, `[{"id":"u1","role":"user","parts":[{"type":"text","text":"hi"}]}]`)
	for body, want := range map[string]string{``: "", `{}`: "", `{"service_tier":null}`: "",
		`{"service_tier":"default"}`: call.TierDefault, `{"service_tier":"priority"}`: call.TierPriority,
		`{"service_tier":"flex"}`: call.TierFlex} {
		r, err := translate("req12345678", msgs, json.RawMessage(body), false)
		if err != nil || r.ServiceTier != want {
			t.Errorf("body %s: Options.ServiceTier %q, %v; want %q", body, r.ServiceTier, err, want)
		}
	}
	for body, says := range map[string]string{
		`{"service_tier":"auto"}`:  `service_tier must be "default", "priority" or "flex" (absent: the app's tier), got "auto"`,
		`{"service_tier":"scale"}`: `service_tier must be`,
		`{"service_tier":7}`:       "body is not a valid options object: service_tier has the wrong type",
	} {
		_, err := translate("req12345678", msgs, json.RawMessage(body), false)
		var ce *call.ClientError
		if !errors.As(err, &ce) || !errors.Is(err, call.ErrInvalid) || !strings.HasPrefix(ce.Path.String()+ce.Problem, says) {
			t.Errorf("body %s: %v, want an invalid_request: %s", body, err, says)
		}
	}
}

// The tier that served is the metadata's jetway.service_tier; an answer
// whose model call named no tier has none.
func TestServiceTierInTheMetadata(t *testing.T) {
	for tier, want := range map[string]string{call.TierPriority: `"service_tier":"priority"`, "": ""} {
		l := stream.NewLog("u", "req12345678", "h", time.Time{})
		l.Accept(stream.NewAccepted(call.Accepted{RequestID: "req12345678", Model: "mock-a"}))
		l.Append(call.Encode(call.Piece{Text: "hi"}))
		l.Finish(stream.DoneTerminal(call.Done{RequestID: "req12345678", Chunks: 1, Text: "hi", Model: "mock-a",
			StopReason: "end_turn", ServiceTier: tier}), time.Now())
		var meta string
		for _, f := range deliver(t, l, "r1", -1) {
			if strings.Contains(f, `"message-metadata"`) {
				meta = f
			}
		}
		if has := strings.Contains(meta, "service_tier"); want == "" && has || want != "" && !strings.Contains(meta, want) {
			t.Errorf("tier %q: metadata %s", tier, meta)
		}
	}
}
