package router_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/jetway-gateway/jetway/internal/mockmodel"
	"github.com/jetway-gateway/jetway/internal/router"
	"github.com/jetway-gateway/jetway/internal/telemetry"
)

// quick answers five tokens at once.
var quick = mockmodel.Options{TTFT: mockmodel.NoDelay, PerToken: mockmodel.NoDelay, Tokens: 5}

// twoRegions is a model served in us-east-1 and us-west-2.
func twoRegions() router.Target {
	return router.Target{ID: "claude", BedrockID: "mock-a", Places: []router.Place{
		{Name: "us-east-1", Region: "us-east-1", BedrockID: "mock-a"},
		{Name: "us-west-2", Region: "us-west-2", BedrockID: "mock-a"},
	}}
}

// conversationOn finds a conversation key whose first choice is region.
func conversationOn(t *testing.T, w *world, region string) string {
	t.Helper()
	for i := range 100 {
		conv := fmt.Sprintf("conversation-%d", i)
		_, out, err := w.stream(context.Background(), []router.Target{twoRegions()}, router.Call{Affinity: conv,
			Messages: []router.Message{{Role: "user", Content: "probe"}}})
		if err == nil && out.Place.Name == region {
			return conv
		}
	}
	t.Fatalf("no conversation ranks %s first", region)
	return ""
}

func TestPlacementsAbsorbThrottling(t *testing.T) {
	w := newWorld(t, quick, router.Options{FailureThreshold: 1000})
	if err := w.srv.SetFault(mockmodel.Fault{Region: "us-east-1", Model: "mock-a", ThrottlePercent: 50}); err != nil {
		t.Fatal(err)
	}
	chain := []router.Target{twoRegions(), target("other", "mock-b")}
	for i := range 40 {
		_, out, err := w.stream(context.Background(), chain, router.Call{Affinity: fmt.Sprintf("c%d", i),
			Messages: []router.Message{{Role: "user", Content: "hi"}}})
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if out.Model != "claude" || out.FallbackFrom != "" {
			t.Fatalf("request %d answered by %q (fallback from %q), want claude itself", i, out.Model, out.FallbackFrom)
		}
	}
	if n := w.srv.Requests("mock-b"); n != 0 {
		t.Errorf("the other model was called %d times", n)
	}
	if w.srv.ThrottledIn("us-east-1") == 0 || w.srv.RequestsIn("us-west-2", "mock-a") == 0 {
		t.Errorf("throttled in us-east-1 %d, calls in us-west-2 %d: both regions should have served",
			w.srv.ThrottledIn("us-east-1"), w.srv.RequestsIn("us-west-2", "mock-a"))
	}

	// Every placement throttling: throttled, after both were tried, then the fallback.
	if err := w.srv.SetFault(mockmodel.Fault{Region: "us-west-2", ThrottlePercent: 100}); err != nil {
		t.Fatal(err)
	}
	if err := w.srv.SetFault(mockmodel.Fault{Region: "us-east-1", Model: "mock-a", ThrottlePercent: 100}); err != nil {
		t.Fatal(err)
	}
	_, _, err := w.stream(context.Background(), []router.Target{twoRegions()}, router.Call{Affinity: "x",
		Messages: []router.Message{{Role: "user", Content: "hi"}}})
	if !errors.Is(err, router.ErrThrottled) || !errors.Is(err, router.ErrAllUnavailable) {
		t.Fatalf("every placement throttling: %v, want throttled and all unavailable", err)
	}
	_, out, err := w.stream(context.Background(), chain, router.Call{Affinity: "x",
		Messages: []router.Message{{Role: "user", Content: "hi"}}})
	if err != nil || out.Model != "other" || out.FallbackFrom != "claude" {
		t.Fatalf("with a fallback: %q from %q, %v; want other from claude", out.Model, out.FallbackFrom, err)
	}
}

func TestConversationStaysOnItsPlacement(t *testing.T) {
	w := newWorld(t, quick, router.Options{FailureThreshold: 1000})
	conv := conversationOn(t, w, "us-east-1")
	// Every second call to us-east-1 throttles from here on.
	if err := w.srv.SetFault(mockmodel.Fault{Region: "us-east-1", ThrottlePercent: 50}); err != nil {
		t.Fatal(err)
	}
	var places []string
	moves := 0
	for turn := range 20 {
		_, out, err := w.stream(context.Background(), []router.Target{twoRegions()}, router.Call{Affinity: conv,
			Messages: []router.Message{{Role: "user", Content: fmt.Sprintf("turn %d", turn)}}})
		if err != nil {
			t.Fatalf("turn %d: %v", turn, err)
		}
		if n := len(places); n > 0 && places[n-1] != out.Place.Name {
			moves++
		}
		places = append(places, out.Place.Name)
	}
	// Call 1 of the knob answers (turn 0 in us-east-1), call 2 throttles
	// (turn 1 moves to us-west-2), and the conversation stays there.
	if moves != 1 || places[0] != "us-east-1" || places[19] != "us-west-2" {
		t.Fatalf("placements by turn %v (%d moves), want us-east-1 then us-west-2 with one move", places, moves)
	}
	if n := w.srv.RequestsIn("us-east-1", "mock-a"); n != 2+1 { // the probe, turn 0, turn 1's throttled call
		t.Errorf("us-east-1 got %d calls, want 3", n)
	}
}

func TestConversationReturnsWhenItsPlacementRecovers(t *testing.T) {
	w := newWorld(t, quick, router.Options{FailureThreshold: 1, OpenTimeout: 50 * time.Millisecond})
	conv := conversationOn(t, w, "us-east-1")
	if err := w.srv.SetFault(mockmodel.Fault{Region: "us-east-1", Unavailable: true}); err != nil {
		t.Fatal(err)
	}
	ask := func(what string) router.Outcome {
		t.Helper()
		_, out, err := w.stream(context.Background(), []router.Target{twoRegions()}, router.Call{Affinity: conv,
			Messages: []router.Message{{Role: "user", Content: what}}})
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return out
	}
	for i := range 3 {
		if out := ask(fmt.Sprintf("outage %d", i)); out.Place.Name != "us-west-2" {
			t.Fatalf("during the outage answered in %s", out.Place.Name)
		}
	}
	if got := w.r.BreakerState("claude", "us-east-1"); got != telemetry.BreakerOpen {
		t.Fatalf("us-east-1 breaker %v, want open", got)
	}
	if s := w.metric(t, "jetway_breaker_state", map[string]string{"model": "claude", "placement": "us-east-1"}); s != 2 {
		t.Errorf("breaker_state{claude, us-east-1} = %v, want 2", s)
	}
	before := w.srv.RequestsIn("us-east-1", "mock-a")
	_, out, err := w.stream(context.Background(), []router.Target{twoRegions()}, router.Call{ // no conversation: us-east-1 first
		Messages: []router.Message{{Role: "user", Content: "while open"}}})
	if err != nil || out.Place.Name != "us-west-2" || w.srv.RequestsIn("us-east-1", "mock-a") != before {
		t.Fatalf("an open breaker's placement was called (answered in %s, %v)", out.Place.Name, err)
	}
	w.srv.ClearFaults()
	// Once the cool-down passes, a conversation whose first choice is
	// us-east-1 and that did not move probes it (this one is remembered
	// in us-west-2), and the probe's first token closes the breaker.
	waitFor(t, func() bool { return w.r.BreakerState("claude", "us-east-1") == telemetry.BreakerHalfOpen },
		"the us-east-1 breaker to half-open")
	conversationOn(t, w, "us-east-1")
	if got := w.r.BreakerState("claude", "us-east-1"); got != telemetry.BreakerClosed {
		t.Fatalf("after a good probe the breaker is %v, want closed", got)
	}
	if out := ask("after recovery"); out.Place.Name != "us-east-1" {
		t.Fatalf("after the recovery the conversation answered in %s, want back in us-east-1", out.Place.Name)
	}
}

func TestServiceTierReachesBedrock(t *testing.T) {
	w := newWorld(t, quick, router.Options{})
	tgt := twoRegions()
	tgt.Tier = "flex"
	_, out, err := w.stream(context.Background(), []router.Target{tgt}, router.Call{
		Messages: []router.Message{{Role: "user", Content: "hi"}}})
	if err != nil {
		t.Fatal(err)
	}
	if out.ServiceTier != "flex" || w.srv.RequestsInTier("flex") != 1 {
		t.Fatalf("tier %q, mock flex calls %d; want flex and 1", out.ServiceTier, w.srv.RequestsInTier("flex"))
	}
	// A flex call throttled everywhere is not retried in another tier.
	if err := w.srv.SetFault(mockmodel.Fault{Region: "us-east-1", ThrottlePercent: 100}); err != nil {
		t.Fatal(err)
	}
	if err := w.srv.SetFault(mockmodel.Fault{Region: "us-west-2", ThrottlePercent: 100}); err != nil {
		t.Fatal(err)
	}
	w.srv.ResetStats()
	if _, _, err := w.stream(context.Background(), []router.Target{tgt}, router.Call{
		Messages: []router.Message{{Role: "user", Content: "hi"}}}); !errors.Is(err, router.ErrThrottled) {
		t.Fatalf("throttled flex: %v", err)
	}
	st := w.srv.Stats()
	if st.ByTier["flex"] != 2 || len(st.ByTier) != 1 {
		t.Fatalf("calls by tier %v, want 2 flex and nothing else", st.ByTier)
	}
}

func TestPlacementInAnotherAccount(t *testing.T) {
	srv, b := start(t, quick)
	tgt := router.Target{ID: "claude", Places: []router.Place{{Name: "us-west-2/111122223333", Region: "us-west-2",
		RoleARN: "arn:aws:iam::111122223333:role/jetway", BedrockID: "mock-a"}}}
	c := router.Call{Messages: []router.Message{{Role: "user", Content: "hi"}}}
	_, err := router.New(b, router.Options{}).Stream(context.Background(), []router.Target{tgt}, c, func(string) {})
	if !errors.Is(err, router.ErrAccessDenied) {
		t.Fatalf("a role without AssumeRoles: %v, want access denied", err)
	}
	var assumed []string
	b.AssumeRoles(func(role string) aws.CredentialsProvider {
		assumed = append(assumed, role)
		return credentials.NewStaticCredentialsProvider("role", "role", "")
	})
	r := router.New(b, router.Options{})
	for range 3 {
		if _, err := r.Stream(context.Background(), []router.Target{tgt}, c, func(string) {}); err != nil {
			t.Fatal(err)
		}
	}
	if len(assumed) != 1 || srv.RequestsIn("us-west-2", "mock-a") != 3 {
		t.Fatalf("roles assumed %v, calls in us-west-2 %d; want the role once and 3 calls", assumed, srv.RequestsIn("us-west-2", "mock-a"))
	}
}

// TestEveryServerRanksAlike: a conversation's first choice is the same
// on every Router (every server of a fleet), and conversations spread
// over the placements.
func TestEveryServerRanksAlike(t *testing.T) {
	a, b := newWorld(t, quick, router.Options{}), newWorld(t, quick, router.Options{})
	first := map[string]int{}
	for i := range 200 {
		c := router.Call{Affinity: fmt.Sprintf("conv-%d", i), Messages: []router.Message{{Role: "user", Content: "hi"}}}
		_, oa, err1 := a.stream(context.Background(), []router.Target{twoRegions()}, c)
		_, ob, err2 := b.stream(context.Background(), []router.Target{twoRegions()}, c)
		if err1 != nil || err2 != nil || oa.Place.Name != ob.Place.Name {
			t.Fatalf("conversation %d: %s (%v) and %s (%v)", i, oa.Place.Name, err1, ob.Place.Name, err2)
		}
		first[oa.Place.Name]++
	}
	if first["us-east-1"] < 60 || first["us-west-2"] < 60 {
		t.Errorf("first choices %v: conversations should spread over both placements", first)
	}
}

// BenchmarkPlacementTTFT is issue 35's cost, side by side on one mock
// answering at once over loopback HTTP with the real SDK: the time to the
// first token of a model without placements, of one with two placements
// and a conversation key (its rank and the affinity lookup), and of a
// failover (the first choice throttles, the second answers; its breaker
// never opens, so every iteration pays the throttled round trip).
func BenchmarkPlacementTTFT(b *testing.B) {
	srv, bed := start(b, mockmodel.Options{TTFT: mockmodel.NoDelay, PerToken: mockmodel.NoDelay, Tokens: 1})
	r := router.New(bed, router.Options{FailureThreshold: 1 << 30})
	msgs := []router.Message{{Role: "user", Content: "hi"}}
	// A conversation whose first choice is us-east-1.
	conv := ""
	for i := 0; conv == ""; i++ {
		k := fmt.Sprintf("bench-%d", i)
		out, err := r.Stream(context.Background(), []router.Target{twoRegions()}, router.Call{Affinity: k, Messages: msgs}, func(string) {})
		if err != nil {
			b.Fatal(err)
		}
		if out.Place.Name == "us-east-1" {
			conv = k
		}
	}
	run := func(b *testing.B, tgt router.Target, affinity string) {
		var ttft time.Duration
		for b.Loop() {
			start := time.Now()
			first := true
			_, err := r.Stream(context.Background(), []router.Target{tgt}, router.Call{Affinity: affinity, Messages: msgs}, func(string) {
				if first {
					ttft += time.Since(start)
					first = false
				}
			})
			if err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(ttft.Microseconds())/float64(b.N), "ttft-µs")
	}
	b.Run("no placements", func(b *testing.B) { run(b, target("claude", "mock-a"), "") })
	b.Run("two placements", func(b *testing.B) { run(b, twoRegions(), conv) })
	b.Run("failover", func(b *testing.B) {
		if err := srv.SetFault(mockmodel.Fault{Region: "us-east-1", ThrottlePercent: 100}); err != nil {
			b.Fatal(err)
		}
		defer srv.ClearFaults()
		// A fresh conversation each time would be moved once and then
		// stay; "" keeps the configured order, us-east-1 first, so every
		// call is a failover.
		run(b, twoRegions(), "")
	})
}
