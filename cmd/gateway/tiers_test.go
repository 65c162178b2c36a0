package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aopt "github.com/anthropics/anthropic-sdk-go/v2/option"
	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"

	"github.com/jetway-gateway/jetway/client"
	"github.com/jetway-gateway/jetway/internal/protocol"
)

// TestServiceTiersOnEveryDoor (issue 35): flex and priority reach the
// model, and the price and the usage record follow the tier; a tier the
// model lacks is invalid_request naming service_tier on every door, with
// nothing charged and no model call.
func TestServiceTiersOnEveryDoor(t *testing.T) {
	w, g, dir := placementWorld(t, nil)
	tok := w.token("tier-user", "acme", "acme-chat", time.Hour)
	ws := w.dialApp(g, "tier-user", "acme", "acme-chat")
	oc := openaiClient(g, tok)
	ac := anthropicClient(g, tok)
	rc := responsesClient(g.Addr, tok)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// The prices of testdata/placements.yaml's claude, by tier.
	price := map[string][2]float64{"default": {0.003, 0.015}, "priority": {0.00525, 0.02625}, "flex": {0.0015, 0.0075}}
	type sent struct{ id, tier, door string }
	var sents []sent
	idOf := func(door string, i int) string { return fmt.Sprintf("tier-%s-%d", door, i) }

	// jetway.v1: the request's service_tier; done echoes it.
	for i, tier := range []string{"flex", "priority", ""} {
		id := idOf("ws", i)
		d, err := sendOn(t, ws, client.Request{RequestID: id, ServiceTier: tier, Messages: []client.Message{{Role: "user", Content: "tier " + id}}, MaxTokens: 20})
		want := tier
		if want == "" {
			want = "default"
		}
		if err != nil || d.ServiceTier != want {
			t.Fatalf("ws %q: %+v %v, want done with service_tier %s", tier, d, err, want)
		}
		sents = append(sents, sent{id, want, "ws"})
	}
	// The app whose own tier is flex: a request naming none runs in flex.
	d, err := sendOn(t, w.dialApp(g, "batch-user", "acme", "acme-batch"), client.Request{RequestID: "tier-batch-0", Messages: []client.Message{{Role: "user", Content: "batch"}}, MaxTokens: 20})
	if err != nil || d.ServiceTier != "flex" {
		t.Fatalf("batch app: %+v %v, want flex", d, err)
	}
	sents = append(sents, sent{"tier-batch-0", "flex", "ws"})

	// OpenAI chat completions.
	cc, err := oc.Chat.Completions.New(ctx, oai.ChatCompletionNewParams{Model: "claude", ServiceTier: oai.ChatCompletionNewParamsServiceTierFlex,
		Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("tier openai")}, MaxTokens: oai.Int(20)})
	if err != nil || cc.ServiceTier != "flex" {
		t.Fatalf("openai flex: %v, service_tier %q", err, cc.ServiceTier)
	}
	// Anthropic Messages: standard_only is the default tier; priority is Jetway's extension.
	am, err := ac.Messages.New(ctx, anthropic.MessageNewParams{Model: "claude", MaxTokens: 20, ServiceTier: anthropic.MessageNewParamsServiceTierStandardOnly,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("tier anthropic"))}})
	if err != nil || am.Usage.ServiceTier != "standard" {
		t.Fatalf("anthropic standard_only: %v, usage.service_tier %q", err, am.Usage.ServiceTier)
	}
	ap, err := ac.Messages.New(ctx, anthropic.MessageNewParams{Model: "claude", MaxTokens: 20,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("tier anthropic priority"))}},
		aopt.WithJSONSet("service_tier", "priority"))
	if err != nil || ap.Usage.ServiceTier != "priority" {
		t.Fatalf("anthropic priority: %v, usage.service_tier %q", err, ap.Usage.ServiceTier)
	}
	// Responses.
	rs, err := rc.Responses.New(ctx, responses.ResponseNewParams{Model: "claude",
		ServiceTier: responses.ResponseNewParamsServiceTierPriority, Input: responses.ResponseNewParamsInputUnion{OfString: oai.String("tier responses")},
		MaxOutputTokens: oai.Int(20)})
	if err != nil || rs.ServiceTier != "priority" {
		t.Fatalf("responses priority: %v, service_tier %q", err, rs.ServiceTier)
	}

	// Every answer's record is at its tier's price, and the mock saw the tiers.
	until(t, 20*time.Second, "every tier's record", func() string {
		recs := readUsage(t, dir)
		byTier := map[string]int{}
		for _, rs := range recs {
			r := rs[0]
			if r.Outcome != "done" {
				continue
			}
			byTier[r.ServiceTier]++
			p := price[r.ServiceTier]
			want := (float64(r.InputTokens)*p[0] + float64(r.OutputTokens)*p[1]) / 1000
			if math.Abs(r.CostUSD-want) > 1.5e-6 {
				t.Errorf("%s (%s, %s): cost %v, want %v", r.RequestID, r.Door, r.ServiceTier, r.CostUSD, want)
			}
		}
		if byTier["flex"] != 3 || byTier["priority"] != 3 || byTier["default"] != 2 {
			return fmt.Sprintf("records by tier %v, want flex 3, priority 3, default 2", byTier)
		}
		return ""
	})
	for _, s := range sents {
		if r := readUsage(t, dir)[s.id]; len(r) != 1 || r[0].ServiceTier != s.tier {
			t.Errorf("%s: record %+v, want tier %s", s.id, r, s.tier)
		}
	}
	if st := w.mock.Stats(); st.ByTier["flex"] != 3 || st.ByTier["priority"] != 3 || st.ByTier["default"] != 2 {
		t.Errorf("the mock's calls by tier %v, want flex 3, priority 3, default 2", st.ByTier)
	}

	// A tier the model lacks (plain takes none), and one the app does not
	// allow: refused naming service_tier on every door, before any call.
	calls := w.mock.Stats().Requests
	_, err = sendOn(t, ws, client.Request{RequestID: "tier-refused-ws", Model: "plain", ServiceTier: "flex", Messages: []client.Message{{Role: "user", Content: "x"}}})
	var pe *client.Error
	if !errors.As(err, &pe) || pe.Code != protocol.CodeInvalidRequest || !strings.Contains(pe.Message, "service_tier") {
		t.Errorf("ws flex on plain: %v, want invalid_request naming service_tier", err)
	}
	_, err = sendOn(t, w.dialApp(g, "solo-tier", "acme", "acme-solo"), client.Request{RequestID: "tier-refused-app", ServiceTier: "priority", Messages: []client.Message{{Role: "user", Content: "x"}}})
	if !errors.As(err, &pe) || pe.Code != protocol.CodeInvalidRequest || !strings.Contains(pe.Message, "not allowed for app solo") {
		t.Errorf("ws priority on an app without it: %v, want invalid_request naming service_tier", err)
	}
	_, err = oc.Chat.Completions.New(ctx, oai.ChatCompletionNewParams{Model: "plain", ServiceTier: oai.ChatCompletionNewParamsServiceTierFlex,
		Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("x")}})
	var oe *oai.Error
	if !errors.As(err, &oe) || oe.StatusCode != 400 || oe.Param != "service_tier" {
		t.Errorf("openai flex on plain: %v, want 400 with param service_tier", err)
	}
	_, err = ac.Messages.New(ctx, anthropic.MessageNewParams{Model: "plain", MaxTokens: 20,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("x"))}}, aopt.WithJSONSet("service_tier", "flex"))
	var ae *anthropic.Error
	if !errors.As(err, &ae) || ae.StatusCode != 400 || !strings.Contains(ae.Error(), "service_tier") {
		t.Errorf("anthropic flex on plain: %v, want 400 naming service_tier", err)
	}
	_, err = rc.Responses.New(ctx, responses.ResponseNewParams{Model: "plain",
		ServiceTier: responses.ResponseNewParamsServiceTierFlex, Input: responses.ResponseNewParamsInputUnion{OfString: oai.String("x")}})
	if !errors.As(err, &oe) || oe.StatusCode != 400 || oe.Param != "service_tier" {
		t.Errorf("responses flex on plain: %v, want 400 with param service_tier", err)
	}
	if after := w.mock.Stats().Requests; fmt.Sprint(after) != fmt.Sprint(calls) {
		t.Errorf("a refused request reached the model: calls %v, then %v", calls, after)
	}
	for _, id := range []string{"tier-refused-ws", "tier-refused-app"} {
		if l := g.logs.Find("rejected", id); len(l) != 1 || l[0]["reserved"] != nil {
			t.Errorf("%s: rejected lines %v, want one that reserved nothing", id, l)
		}
	}
}
