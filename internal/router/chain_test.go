package router_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap/zaptest"

	"github.com/jetway-gateway/jetway/internal/mockmodel"
	"github.com/jetway-gateway/jetway/internal/router"
	"github.com/jetway-gateway/jetway/internal/telemetry"
)

// world is a Router over the real Bedrock client and the mock endpoint,
// with metrics on a registry of its own.
type world struct {
	srv *mockmodel.Server
	r   *router.Router
	reg *prometheus.Registry
}

func newWorld(t *testing.T, mo mockmodel.Options, o router.Options) *world {
	t.Helper()
	srv, b := start(t, mo)
	reg := prometheus.NewRegistry()
	o.Metrics = telemetry.NewMetrics(reg)
	o.Logger = zaptest.NewLogger(t)
	return &world{srv: srv, r: router.New(b, o), reg: reg}
}

// target maps a configured id to a mock model id.
func target(id, bedrockID string) router.Target {
	return router.Target{ID: id, BedrockID: bedrockID}
}

// stream runs the chain and returns the deltas it delivered.
func (w *world) stream(ctx context.Context, chain []router.Target, c router.Call) ([]string, router.Outcome, error) {
	var deltas []string
	out, err := w.r.Stream(ctx, chain, c, func(text string) { deltas = append(deltas, text) })
	return deltas, out, err
}

// metric returns the value of the series name{labels}, or -1 when absent.
func (w *world) metric(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := w.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if want, ok := labels[lp.GetName()]; ok && want != lp.GetValue() {
					continue next
				}
			}
			return value(m)
		}
	}
	return -1
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	return -1
}

func TestFallbackWhenThrottled(t *testing.T) {
	w := newWorld(t, unpaced, router.Options{})
	c := call("", "sys", "hello")
	deltas, out, err := w.stream(t.Context(), []router.Target{target("primary", "mock-throttle"), target("second", "mock-b")}, c)
	if err != nil {
		t.Fatal(err)
	}
	want := mockmodel.Tokens("mock-b", "sys", []string{"hello"}, mockmodel.DefaultTokens)
	if !slices.Equal(deltas, want) {
		t.Fatalf("deltas are not mock-b's answer:\n got %.120q\nwant %.120q", deltas, want)
	}
	if out.Model != "second" || out.FallbackFrom != "primary" || out.StopReason != "end_turn" || !out.UsageReported {
		t.Errorf("outcome %+v, want second answering after primary", out)
	}
	if a, b := w.srv.Requests("mock-throttle"), w.srv.Requests("mock-b"); a != 1 || b != 1 {
		t.Errorf("mock saw %d throttled and %d fallback requests, want 1 and 1", a, b)
	}
	if n := w.metric(t, "jetway_bedrock_errors_total", map[string]string{"model": "primary", "kind": "throttled"}); n != 1 {
		t.Errorf("bedrock_errors_total{primary,throttled} = %v, want 1", n)
	}
	if n := w.metric(t, "jetway_bedrock_call_duration_seconds", map[string]string{"model": "second"}); n != 1 {
		t.Errorf("bedrock_call_duration_seconds{second} has %v samples, want 1", n)
	}
}

func TestFallbackOnFirstTokenTimeout(t *testing.T) {
	w := newWorld(t, unpaced, router.Options{})
	stall := target("primary", "mock-stall")
	stall.FirstTokenTimeout = 100 * time.Millisecond
	deltas, out, err := w.stream(t.Context(), []router.Target{stall, target("second", "mock-b")}, call("", "", "hi"))
	if err != nil {
		t.Fatal(err)
	}
	if out.Model != "second" || out.FallbackFrom != "primary" || len(deltas) != mockmodel.DefaultTokens {
		t.Errorf("outcome %+v after %d deltas, want second's full answer", out, len(deltas))
	}
	if n := w.metric(t, "jetway_bedrock_errors_total", map[string]string{"model": "primary", "kind": "timeout"}); n != 1 {
		t.Errorf("bedrock_errors_total{primary,timeout} = %v, want 1", n)
	}
	// The abandoned stalled call is closed, not left hanging.
	waitFor(t, func() bool { return w.srv.Active() == 0 }, "the stalled call to end")
}

func TestEveryModelFailing(t *testing.T) {
	w := newWorld(t, unpaced, router.Options{})
	stall := target("c", "mock-stall")
	stall.FirstTokenTimeout = 50 * time.Millisecond
	chain := []router.Target{target("a", "mock-throttle"), target("b", "mock-unavailable"), stall}
	deltas, out, err := w.stream(t.Context(), chain, call("", "", "hi"))
	if !errors.Is(err, router.ErrAllUnavailable) {
		t.Fatalf("error %v, want ErrAllUnavailable", err)
	}
	if me := modelError(t, err); me.Kind != router.KindTimeout || me.Model != "c" {
		t.Errorf("last error %+v, want c's timeout", me)
	}
	if len(deltas) != 0 || out.Model != "c" || out.FallbackFrom != "a" {
		t.Errorf("outcome %+v after %d deltas", out, len(deltas))
	}

	_, _, err = w.stream(t.Context(), nil, call("", "", "hi"))
	if !errors.Is(err, router.ErrAllUnavailable) {
		t.Errorf("empty chain: %v, want ErrAllUnavailable", err)
	}
}

func TestFailureAfterTokensDoesNotFallBack(t *testing.T) {
	w := newWorld(t, unpaced, router.Options{})
	c := call("", "sys", "hi")
	deltas, out, err := w.stream(t.Context(), []router.Target{target("primary", "mock-fail-after-4"), target("second", "mock-b")}, c)
	if !errors.Is(err, router.ErrMidStream) || errors.Is(err, router.ErrAllUnavailable) {
		t.Fatalf("error %v, want ErrMidStream alone", err)
	}
	if want := mockmodel.Tokens("mock-fail-after-4", "sys", []string{"hi"}, 4); !slices.Equal(deltas, want) {
		t.Errorf("deltas %q, want exactly the 4 streamed tokens %q", deltas, want)
	}
	if out.Model != "primary" || out.FallbackFrom != "" || w.srv.Requests("mock-b") != 0 {
		t.Errorf("outcome %+v, mock-b saw %d requests: want no fallback", out, w.srv.Requests("mock-b"))
	}
}

func TestGuardrailInterventionIsAnAnswer(t *testing.T) {
	w := newWorld(t, unpaced, router.Options{})
	c := call("", "", "something the guardrail blocks")
	c.Guardrail = &router.Guardrail{ID: "gr-1", Version: "DRAFT", StreamMode: "sync"}
	deltas, out, err := w.stream(t.Context(), []router.Target{target("guarded", "mock-guardrail"), target("second", "mock-b")}, c)
	if err != nil {
		t.Fatalf("a guardrail intervention is an answer, got error %v", err)
	}
	if out.StopReason != "guardrail_intervened" || out.Model != "guarded" || out.FallbackFrom != "" || len(deltas) != 5 {
		t.Errorf("outcome %+v after %d deltas, want guarded's guardrail_intervened after 5", out, len(deltas))
	}
	if w.srv.Requests("mock-b") != 0 {
		t.Error("the fallback was called")
	}
}

// The breaker opens after FailureThreshold failures; then the chain skips
// the model without calling it; after the cool-down one probe goes
// through: a failure reopens the breaker, a first token closes it.
func TestBreakerOpensAndCloses(t *testing.T) {
	const threshold = 3
	w := newWorld(t, unpaced, router.Options{FailureThreshold: threshold, OpenTimeout: 400 * time.Millisecond})
	// The breaker is keyed by the configured id; which Bedrock id it points
	// at is how the test makes "primary" fail and later recover.
	failing := []router.Target{target("primary", "mock-throttle"), target("second", "mock-b")}
	healthy := []router.Target{target("primary", "mock-a"), target("second", "mock-b")}
	state := func() float64 {
		return w.metric(t, "jetway_breaker_state", map[string]string{"model": "primary"})
	}

	for i := range threshold {
		_, out, err := w.stream(t.Context(), failing, call("", "", "q", fmt.Sprint(i)))
		if err != nil || out.Model != "second" {
			t.Fatalf("call %d: %+v %v", i, out, err)
		}
	}
	if got := w.r.BreakerState("primary", ""); got != telemetry.BreakerOpen {
		t.Fatalf("breaker %v after %d failures, want open", got, threshold)
	}
	if s := state(); s != float64(telemetry.BreakerOpen) {
		t.Errorf("breaker_state{primary} = %v, want 2 (open)", s)
	}

	// Open: the chain moves on at once, and no call reaches the model.
	_, out, err := w.stream(t.Context(), healthy, call("", "", "while open"))
	if err != nil || out.Model != "second" || out.FallbackFrom != "primary" {
		t.Fatalf("while open: %+v %v, want second answering, fallback from primary", out, err)
	}
	if n := w.srv.Requests("mock-throttle") + w.srv.Requests("mock-a"); n != threshold {
		t.Fatalf("primary saw %d calls, want %d: the open breaker let one through", n, threshold)
	}
	// Alone in the chain, a skipped model is ErrAllUnavailable without a call.
	_, _, err = w.stream(t.Context(), healthy[:1], call("", "", "alone"))
	if !errors.Is(err, router.ErrAllUnavailable) || !errors.Is(err, router.ErrBreakerOpen) || !errors.Is(err, router.ErrUnavailable) {
		t.Fatalf("open breaker alone: %v, want ErrAllUnavailable wrapping ErrBreakerOpen", err)
	}
	if w.srv.Requests("mock-a") != 0 {
		t.Fatal("a call reached the model while its breaker was open")
	}

	// After the cool-down, a failing probe reopens it at once.
	waitFor(t, func() bool { return w.r.BreakerState("primary", "") == telemetry.BreakerHalfOpen }, "half-open")
	if s := state(); s != float64(telemetry.BreakerHalfOpen) {
		t.Errorf("breaker_state{primary} = %v, want 1 (half-open)", s)
	}
	if _, out, err := w.stream(t.Context(), failing, call("", "", "probe")); err != nil || out.Model != "second" {
		t.Fatalf("failing probe: %+v %v", out, err)
	}
	if w.srv.Requests("mock-throttle") != threshold+1 || w.r.BreakerState("primary", "") != telemetry.BreakerOpen {
		t.Fatalf("after a failed probe: %d calls, breaker %v; want %d and open",
			w.srv.Requests("mock-throttle"), w.r.BreakerState("primary", ""), threshold+1)
	}

	// The model recovers: once the cool-down passes, the next call is a
	// probe, answers, and closes the breaker.
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, out, err := w.stream(t.Context(), healthy, call("", "", "recovered?"))
		if err != nil {
			t.Fatal(err)
		}
		if out.Model == "primary" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the breaker never let a probe through")
		}
		time.Sleep(5 * time.Millisecond) // poll interval
	}
	if got := w.r.BreakerState("primary", ""); got != telemetry.BreakerClosed {
		t.Fatalf("breaker %v after a successful probe, want closed", got)
	}
	if s := state(); s != float64(telemetry.BreakerClosed) {
		t.Errorf("breaker_state{primary} = %v, want 0 (closed)", s)
	}
	if w.srv.Requests("mock-a") != 1 {
		t.Errorf("primary's healthy model saw %d calls, want exactly the one probe", w.srv.Requests("mock-a"))
	}
}

// Validation errors, client cancels and the request's own deadline say
// nothing about the model: they never open its breaker.
func TestBreakerIgnoresNonHealthFailures(t *testing.T) {
	const threshold = 2
	w := newWorld(t, unpaced, router.Options{FailureThreshold: threshold, OpenTimeout: time.Hour})
	chain := []router.Target{target("primary", "mock-a"), target("second", "mock-b")}
	for i := range threshold + 2 {
		bad := call("", "", "bad temperature")
		bad.Temperature = new(1.5)
		_, out, err := w.stream(t.Context(), chain, bad)
		if !errors.Is(err, router.ErrValidation) || out.FallbackFrom != "" {
			t.Fatalf("validation %d: %+v %v, want ErrValidation without fallback", i, out, err)
		}

		canceled, cancel := context.WithCancel(t.Context())
		cancel()
		if _, _, err := w.stream(canceled, chain, call("", "", "canceled")); !errors.Is(err, router.ErrCanceled) {
			t.Fatalf("canceled %d: %v", i, err)
		}

		short, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
		_, _, err = w.stream(short, []router.Target{target("primary", "mock-stall")}, call("", "", "deadline"))
		cancel()
		if !errors.Is(err, router.ErrTimeout) {
			t.Fatalf("deadline %d: %v", i, err)
		}
	}
	if got := w.r.BreakerState("primary", ""); got != telemetry.BreakerClosed {
		t.Fatalf("breaker %v, want closed", got)
	}
	if w.srv.Requests("mock-b") != 0 {
		t.Errorf("the fallback saw %d calls, want 0", w.srv.Requests("mock-b"))
	}
}

// flaky is a Streamer in front of the real adapter: its first calls to the
// Bedrock id "flaky" go to mock-throttle, later ones to mock-a.
type flaky struct {
	next     router.Streamer
	failures int64
	calls    atomic.Int64
}

func (f *flaky) Stream(ctx context.Context, c router.Call, onDelta func(string)) (router.Result, error) {
	if c.ModelID == "flaky" {
		c.ModelID = "mock-a"
		if f.calls.Add(1) <= f.failures {
			c.ModelID = "mock-throttle"
		}
	}
	return f.next.Stream(ctx, c, onDelta)
}

func TestRetrySameModel(t *testing.T) {
	fast := router.Options{RetryBackoff: time.Millisecond, MaxRetryBackoff: 2 * time.Millisecond}

	t.Run("recovers on the same model", func(t *testing.T) {
		srv, b := start(t, unpaced)
		f := &flaky{next: b, failures: 2}
		r := router.New(f, fast)
		primary := target("primary", "flaky")
		primary.Retries = 2
		out, err := r.Stream(t.Context(), []router.Target{primary, target("second", "mock-b")}, call("", "", "hi"), func(string) {})
		if err != nil || out.Model != "primary" || out.FallbackFrom != "" {
			t.Fatalf("%+v %v, want primary answering after two retries", out, err)
		}
		if srv.Requests("mock-throttle") != 2 || srv.Requests("mock-a") != 1 || srv.Requests("mock-b") != 0 {
			t.Errorf("calls: throttle %d, a %d, b %d; want 2, 1, 0",
				srv.Requests("mock-throttle"), srv.Requests("mock-a"), srv.Requests("mock-b"))
		}
	})

	t.Run("bounded, then falls back", func(t *testing.T) {
		o := fast
		o.MaxRetries = 2
		w := newWorld(t, unpaced, o)
		primary := target("primary", "mock-throttle")
		primary.Retries = 10 // capped at MaxRetries
		_, out, err := w.stream(t.Context(), []router.Target{primary, target("second", "mock-b")}, call("", "", "hi"))
		if err != nil || out.Model != "second" || out.FallbackFrom != "primary" {
			t.Fatalf("%+v %v", out, err)
		}
		if n := w.srv.Requests("mock-throttle"); n != 3 {
			t.Errorf("primary saw %d calls, want 1 + 2 retries", n)
		}
	})

	t.Run("stops when the breaker opens", func(t *testing.T) {
		o := fast
		o.FailureThreshold = 2
		w := newWorld(t, unpaced, o)
		primary := target("primary", "mock-throttle")
		primary.Retries = 3
		_, out, err := w.stream(t.Context(), []router.Target{primary, target("second", "mock-b")}, call("", "", "hi"))
		if err != nil || out.Model != "second" {
			t.Fatalf("%+v %v", out, err)
		}
		if n := w.srv.Requests("mock-throttle"); n != 2 {
			t.Errorf("primary saw %d calls, want 2 (the breaker opened)", n)
		}
	})

	t.Run("not after a first-token timeout", func(t *testing.T) {
		w := newWorld(t, unpaced, fast)
		primary := target("primary", "mock-stall")
		primary.FirstTokenTimeout = 30 * time.Millisecond
		primary.Retries = 2
		_, out, err := w.stream(t.Context(), []router.Target{primary, target("second", "mock-b")}, call("", "", "hi"))
		// At most one: under load the 30 ms deadline can pass before the
		// mock even counts the call; what matters is that it is not retried.
		if err != nil || out.Model != "second" || w.srv.Requests("mock-stall") > 1 {
			t.Fatalf("%+v %v after %d stalled calls, want at most one", out, err, w.srv.Requests("mock-stall"))
		}
	})
}

// Concurrent calls share breakers safely (run with -race).
func TestConcurrentRouting(t *testing.T) {
	w := newWorld(t, unpaced, router.Options{FailureThreshold: 1000})
	chain := []router.Target{target("primary", "mock-throttle"), target("second", "mock-b")}
	errs := make(chan error, 16)
	for i := range cap(errs) {
		go func() {
			_, out, err := w.stream(context.Background(), chain, call("", "", fmt.Sprint("q", i)))
			if err == nil && out.Model != "second" {
				err = fmt.Errorf("answered by %s", out.Model)
			}
			errs <- err
		}()
	}
	for range cap(errs) {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

// BenchmarkFallbackFirstToken measures the time to the first token of a
// direct call, of a fallback after a throttled primary (one extra round
// trip), and of a fallback past a primary whose breaker is open (no call).
// The mock answers at once, so the differences are the routing's cost.
func BenchmarkFallbackFirstToken(b *testing.B) {
	cases := []struct {
		name  string
		chain []router.Target
		o     router.Options
	}{
		{"direct", []router.Target{target("second", "mock-b")}, router.Options{}},
		{"throttled-primary", []router.Target{target("primary", "mock-throttle"), target("second", "mock-b")},
			router.Options{FailureThreshold: 1 << 30}},
		{"breaker-open", []router.Target{target("primary", "mock-throttle"), target("second", "mock-b")},
			router.Options{FailureThreshold: 1, OpenTimeout: time.Hour}},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			_, bed := start(b, mockmodel.Options{TTFT: mockmodel.NoDelay, PerToken: mockmodel.NoDelay, Tokens: 1})
			r := router.New(bed, tc.o)
			c := call("", "", "hi")
			var ttfts []time.Duration
			for b.Loop() {
				start := time.Now()
				var first time.Duration
				out, err := r.Stream(context.Background(), tc.chain, c, func(string) {
					if first == 0 {
						first = time.Since(start)
					}
				})
				if err != nil || out.Model != "second" {
					b.Fatalf("%+v %v", out, err)
				}
				ttfts = append(ttfts, first)
			}
			sort.Slice(ttfts, func(i, j int) bool { return ttfts[i] < ttfts[j] })
			b.ReportMetric(float64(ttfts[len(ttfts)/2].Microseconds()), "p50-ttft-µs")
		})
	}
}
