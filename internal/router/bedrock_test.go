package router_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/types"
	"go.uber.org/goleak"

	"github.com/jetway-gateway/jetway/internal/mockmodel"
	"github.com/jetway-gateway/jetway/internal/mockmodel/mockmodeltest"
	"github.com/jetway-gateway/jetway/internal/router"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// unpaced answers at once.
var unpaced = mockmodel.Options{TTFT: mockmodel.NoDelay, PerToken: mockmodel.NoDelay}

func start(t testing.TB, o mockmodel.Options) (*mockmodel.Server, *router.Bedrock) {
	t.Helper()
	srv, url := mockmodeltest.Start(t, o)
	return srv, router.NewBedrock(mockmodeltest.Client(t, url))
}

func call(model string, system string, turns ...string) router.Call {
	c := router.Call{ModelID: model, System: system}
	for i, text := range turns {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		c.Messages = append(c.Messages, router.Message{Role: role, Content: text})
	}
	return c
}

func contents(c router.Call) []string {
	out := make([]string, len(c.Messages))
	for i, m := range c.Messages {
		out[i] = m.Content
	}
	return out
}

// run streams c and returns the deltas in the order onDelta saw them.
func run(ctx context.Context, b *router.Bedrock, c router.Call) ([]string, router.Result, error) {
	var deltas []string
	res, err := b.Stream(ctx, c, func(text string) { deltas = append(deltas, text) })
	return deltas, res, err
}

func modelError(t *testing.T, err error) *router.ModelError {
	t.Helper()
	var me *router.ModelError
	if !errors.As(err, &me) {
		t.Fatalf("error %v (%T) is not a *router.ModelError", err, err)
	}
	return me
}

func TestStreamAnswer(t *testing.T) {
	srv, b := start(t, unpaced)
	temp := 0.3
	c := call("mock-a", "You are terse.", "Hello", "Hi!", "What is a jet bridge?")
	c.Temperature = &temp

	deltas, res, err := run(t.Context(), b, c)
	if err != nil {
		t.Fatal(err)
	}
	want := mockmodel.Tokens("mock-a", c.System, contents(c), mockmodel.DefaultTokens)
	if !slices.Equal(deltas, want) {
		t.Fatalf("deltas differ from mockmodel.Tokens:\n got %.200q\nwant %.200q", deltas, want)
	}
	wantRes := router.Result{
		Usage:         router.Usage{InputTokens: mockmodel.InputTokens(c.System, contents(c)), OutputTokens: mockmodel.DefaultTokens},
		UsageReported: true,
		StopReason:    "end_turn",
	}
	if res != wantRes {
		t.Errorf("result %+v, want %+v", res, wantRes)
	}
	if srv.Requests("mock-a") != 1 {
		t.Errorf("mock saw %d requests, want 1", srv.Requests("mock-a"))
	}
}

func TestMaxTokensCap(t *testing.T) {
	_, b := start(t, unpaced)
	c := call("mock-a", "", "hi")
	c.MaxTokens = 7
	deltas, res, err := run(t.Context(), b, c)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(deltas, mockmodel.Tokens("mock-a", "", []string{"hi"}, 7)) {
		t.Errorf("deltas %q", deltas)
	}
	if res.StopReason != "max_tokens" || res.Usage.OutputTokens != 7 || !res.UsageReported {
		t.Errorf("result %+v, want 7 output tokens and max_tokens", res)
	}
}

func TestGuardrailStopsTheAnswer(t *testing.T) {
	_, b := start(t, unpaced)
	c := call("mock-guardrail", "", "hi")
	c.Guardrail = &router.Guardrail{ID: "gr-123", Version: "1", StreamMode: "async"}
	deltas, res, err := run(t.Context(), b, c)
	if err != nil {
		t.Fatal(err)
	}
	if res.StopReason != "guardrail_intervened" || len(deltas) != 5 || res.Usage.OutputTokens != 5 {
		t.Errorf("result %+v after %d deltas, want guardrail_intervened after 5", res, len(deltas))
	}
}

func TestFaultsBeforeTheFirstToken(t *testing.T) {
	srv, b := start(t, unpaced)
	cases := []struct {
		call      router.Call
		sentinel  error
		kind      router.ErrorKind
		retryable bool
		sdkType   any
	}{
		{call("mock-throttle", "", "hi"), router.ErrThrottled, router.KindThrottled, true, new(*types.ThrottlingException)},
		{call("mock-unavailable", "", "hi"), router.ErrUnavailable, router.KindUnavailable, true, new(*types.ServiceUnavailableException)},
		{call("mock-fail-after-0", "", "hi"), router.ErrUnavailable, router.KindUnavailable, true, new(*types.ModelStreamErrorException)},
		{call("mock-a", "only a system prompt"), router.ErrValidation, router.KindValidation, false, new(*types.ValidationException)},
		{call("mock-a", "", "bad temperature"), router.ErrValidation, router.KindValidation, false, new(*types.ValidationException)},
	}
	cases[4].call.Temperature = new(1.5)
	for _, c := range cases {
		t.Run(string(c.kind)+"/"+c.call.ModelID, func(t *testing.T) {
			deltas, _, err := run(t.Context(), b, c.call)
			if !errors.Is(err, c.sentinel) {
				t.Fatalf("error %v, want %v", err, c.sentinel)
			}
			me := modelError(t, err)
			if me.Kind != c.kind || me.Model != c.call.ModelID || me.Streamed || len(deltas) != 0 || me.Retryable() != c.retryable {
				t.Errorf("%+v (retryable %v) after %d deltas", me, me.Retryable(), len(deltas))
			}
			if !errors.As(err, c.sdkType) {
				t.Errorf("error %v does not wrap the SDK's %T", err, c.sdkType)
			}
			// A refused request says why (the model's message), for the client.
			if reason := me.Reason(); (c.kind == router.KindValidation) != (reason != "") {
				t.Errorf("reason %q for a %s failure", reason, c.kind)
			}
		})
	}
	// One attempt each: the SDK retryer did not repeat the throttled call.
	if n := srv.Requests("mock-throttle"); n != 1 {
		t.Errorf("mock-throttle saw %d requests, want 1", n)
	}
}

func TestFailureMidStream(t *testing.T) {
	_, b := start(t, unpaced)
	c := call("mock-fail-after-3", "sys", "hi")
	deltas, res, err := run(t.Context(), b, c)
	if !errors.Is(err, router.ErrMidStream) {
		t.Fatalf("error %v, want ErrMidStream", err)
	}
	me := modelError(t, err)
	if !me.Streamed || me.Retryable() || me.Kind != router.KindMidStream {
		t.Errorf("%+v, want streamed and not retryable", me)
	}
	var sdkErr *types.ModelStreamErrorException
	if !errors.As(err, &sdkErr) {
		t.Errorf("error %v does not wrap ModelStreamErrorException", err)
	}
	if !slices.Equal(deltas, mockmodel.Tokens(c.ModelID, "sys", []string{"hi"}, 3)) {
		t.Errorf("deltas %q, want exactly the first 3 tokens", deltas)
	}
	if res.UsageReported {
		t.Errorf("usage reported for a failed stream: %+v", res)
	}
}

// A stalled model ends with the caller's context, without leaking.
func TestStallEndsWithTheContext(t *testing.T) {
	before := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, before) }) // after the server and client are closed
	srv, b := start(t, unpaced)

	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	_, _, err := run(ctx, b, call("mock-stall", "", "hi"))
	if !errors.Is(err, router.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error %v, want ErrTimeout wrapping the deadline", err)
	}
	if me := modelError(t, err); me.Streamed || !me.Retryable() {
		t.Errorf("%+v: a timeout before the first token is retryable", me)
	}

	ctx, cancel = context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, _, err := run(ctx, b, call("mock-stall", "", "hi"))
		done <- err
	}()
	waitFor(t, func() bool { return srv.Active() == 1 }, "the stalled request")
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, router.ErrCanceled) || modelError(t, err).Retryable() {
			t.Fatalf("error %v, want ErrCanceled, not retryable", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Stream did not return after cancel")
	}
	waitFor(t, func() bool { return srv.Active() == 0 }, "the mock handler to end")
}

// Canceling after the first token is still ErrCanceled, marked Streamed.
func TestCancelMidStream(t *testing.T) {
	_, b := start(t, mockmodel.Options{TTFT: mockmodel.NoDelay, PerToken: time.Hour, Tokens: 5})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var deltas []string
	_, err := b.Stream(ctx, call("mock-a", "", "hi"), func(text string) {
		deltas = append(deltas, text)
		cancel()
	})
	if !errors.Is(err, router.ErrCanceled) || !modelError(t, err).Streamed || len(deltas) != 1 {
		t.Fatalf("error %v after %d deltas, want ErrCanceled, streamed, after 1", err, len(deltas))
	}
}

// Bedrock errors the mock has no knob for, served by a small handler that
// speaks the same wire format.
func TestOtherBedrockErrors(t *testing.T) {
	cases := []struct {
		name      string
		handler   http.HandlerFunc
		sentinel  error
		retryable bool
		streamed  bool
	}{
		{"not ready", errorHandler(429, "ModelNotReadyException"), router.ErrNotReady, true, false},
		{"access denied", errorHandler(403, "AccessDeniedException"), router.ErrAccessDenied, false, false},
		{"not found", errorHandler(404, "ResourceNotFoundException"), router.ErrAccessDenied, false, false},
		{"model timeout", errorHandler(408, "ModelTimeoutException"), router.ErrTimeout, true, false},
		{"internal", errorHandler(500, "InternalServerException"), router.ErrUnavailable, true, false},
		{"quota", errorHandler(400, "ServiceQuotaExceededException"), router.ErrThrottled, true, false},
		{"unknown 502", errorHandler(502, "SomethingNewException"), router.ErrUnavailable, true, false},
		{"unknown 429", errorHandler(429, "SomethingNewException"), router.ErrThrottled, true, false},
		{"throttled event before the first token", streamHandler(0, "throttlingException"), router.ErrThrottled, true, false},
		{"throttled event after a token", streamHandler(1, "throttlingException"), router.ErrMidStream, false, true},
		{"cut before the first token", streamHandler(0, ""), router.ErrUnavailable, true, false},
		{"cut after two tokens", streamHandler(2, ""), router.ErrMidStream, false, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ts := httptest.NewServer(c.handler)
			defer ts.Close()
			b := router.NewBedrock(mockmodeltest.Client(t, ts.URL))
			_, _, err := run(t.Context(), b, call("some-model", "", "hi"))
			if !errors.Is(err, c.sentinel) {
				t.Fatalf("error %v, want %v", err, c.sentinel)
			}
			if me := modelError(t, err); me.Retryable() != c.retryable || me.Streamed != c.streamed {
				t.Errorf("%+v: retryable %v, want %v; streamed want %v", me, me.Retryable(), c.retryable, c.streamed)
			}
		})
	}
}

func errorHandler(status int, errorType string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Amzn-ErrorType", errorType+":http://internal.amazon.com/coral/com.amazon.bedrock/")
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"message":"%s from the test"}`, errorType)
	}
}

// streamHandler sends messageStart and n deltas, then the exception event
// exceptionType or, when that is empty, just ends the response.
func streamHandler(n int, exceptionType string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/vnd.amazon.eventstream")
		enc := eventstream.NewEncoder()
		var buf bytes.Buffer
		send := func(msgType, typeHeader, name, payload string) {
			var msg eventstream.Message
			msg.Headers.Set(":message-type", eventstream.StringValue(msgType))
			msg.Headers.Set(typeHeader, eventstream.StringValue(name))
			msg.Headers.Set(":content-type", eventstream.StringValue("application/json"))
			msg.Payload = []byte(payload)
			if err := enc.Encode(&buf, msg); err != nil {
				panic(err)
			}
		}
		send("event", ":event-type", "messageStart", `{"role":"assistant"}`)
		for i := range n {
			send("event", ":event-type", "contentBlockDelta", fmt.Sprintf(`{"contentBlockIndex":0,"delta":{"text":" w%d"}}`, i))
		}
		if exceptionType != "" {
			send("exception", ":exception-type", exceptionType, `{"message":"from the test"}`)
		}
		_, _ = w.Write(buf.Bytes())
	}
}

func TestConnectionRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	ln.Close()
	b := router.NewBedrock(mockmodeltest.Client(t, url))
	_, _, err = run(t.Context(), b, call("mock-a", "", "hi"))
	if !errors.Is(err, router.ErrUnavailable) || !modelError(t, err).Retryable() {
		t.Fatalf("error %v, want retryable ErrUnavailable", err)
	}
}

// Many calls on one client in a row: each reuses a kept-alive connection,
// the pattern that exposed the SDK's request-body defect (bedrock.go).
func TestManySequentialCalls(t *testing.T) {
	srv, b := start(t, mockmodel.Options{TTFT: mockmodel.NoDelay, PerToken: mockmodel.NoDelay, Tokens: 30})
	for i := range 200 {
		c := call("mock-a", "", fmt.Sprintf("question %d", i))
		deltas, _, err := run(t.Context(), b, c)
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if !slices.Equal(deltas, mockmodel.Tokens("mock-a", "", contents(c), 30)) {
			t.Fatalf("call %d: wrong text", i)
		}
	}
	if srv.Requests("mock-a") != 200 {
		t.Errorf("mock saw %d requests, want 200", srv.Requests("mock-a"))
	}
}

// 200 streams at once through one client, all correct (run with -race: it
// also proves the per-call protocol workaround).
func TestConcurrentStreams(t *testing.T) {
	const n = 200
	o := mockmodel.Options{TTFT: mockmodel.NoDelay, PerToken: mockmodel.NoDelay, Tokens: 40}
	srv, b := start(t, o)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			c := call(fmt.Sprintf("mock-%d", i%7), "sys", fmt.Sprintf("question %d", i))
			deltas, res, err := run(t.Context(), b, c)
			switch {
			case err != nil:
				errs <- err
			case strings.Join(deltas, "") != strings.Join(mockmodel.Tokens(c.ModelID, "sys", contents(c), o.Tokens), ""):
				errs <- fmt.Errorf("stream %d: wrong text", i)
			case res.Usage.OutputTokens != o.Tokens || res.StopReason != "end_turn":
				errs <- fmt.Errorf("stream %d: result %+v", i, res)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	var total int64
	for m := range 7 {
		total += srv.Requests(fmt.Sprintf("mock-%d", m))
	}
	if total != n {
		t.Errorf("mock saw %d requests, want %d", total, n)
	}
}

// BenchmarkStream is one full round trip through the real SDK client to the
// mock endpoint at 0 ms pacing: a 300-token answer.
func BenchmarkStream(b *testing.B) {
	_, bedrock := start(b, unpaced)
	c := call("mock-a", "You are terse.", "What is a jet bridge?")
	deltas := 0
	b.ReportAllocs()
	for b.Loop() {
		if _, err := bedrock.Stream(b.Context(), c, func(string) { deltas++ }); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(deltas)/b.Elapsed().Seconds(), "tokens/s")
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestTopPAndStopReachBedrock: the OpenAI door's top_p and stop become
// ConverseStream's inferenceConfig.topP and stopSequences.
func TestTopPAndStopReachBedrock(t *testing.T) {
	bodies := make(chan string, 1)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b bytes.Buffer
		_, _ = b.ReadFrom(r.Body)
		select {
		case bodies <- b.String():
		default:
		}
		http.Error(w, `{"message":"bad"}`, http.StatusBadRequest)
	}))
	defer ts.Close()
	b := router.NewBedrock(mockmodeltest.Client(t, ts.URL))
	c := call("mock-a", "", "hi")
	c.TopP, c.Stop = new(0.5), []string{"END", "STOP"}
	_, _, _ = run(t.Context(), b, c)
	body := <-bodies
	for _, want := range []string{`"topP":0.5`, `"stopSequences":["END","STOP"]`} {
		if !strings.Contains(body, want) {
			t.Errorf("request body lacks %s: %s", want, body)
		}
	}
}

// Over HTTP/2 (as the SDK talks to AWS's TLS endpoints) the adapter reads
// the event stream from the HTTP/2 body itself: a whole answer arrives in
// order, and a stalled stream still ends with the caller's context.
func TestStreamOverHTTP2(t *testing.T) {
	before := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, before) })
	ts := httptest.NewUnstartedServer(mockmodel.New(unpaced))
	ts.EnableHTTP2 = true
	ts.StartTLS()
	t.Cleanup(ts.Close)
	hc := ts.Client()
	t.Cleanup(hc.CloseIdleConnections)
	var proto string
	b := router.NewBedrock(bedrockruntime.New(bedrockruntime.Options{Region: "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
		BaseEndpoint: aws.String(ts.URL), RetryMaxAttempts: 1,
		HTTPClient: doFunc(func(r *http.Request) (*http.Response, error) {
			resp, err := hc.Do(r)
			if err == nil {
				proto = resp.Proto
			}
			return resp, err
		})}))

	c := call("mock-a", "", "over h2")
	deltas, res, err := run(t.Context(), b, c)
	if err != nil || !slices.Equal(deltas, mockmodel.Tokens("mock-a", "", contents(c), mockmodel.DefaultTokens)) ||
		res.StopReason != "end_turn" || !res.UsageReported {
		t.Fatalf("answer over HTTP/2: %d deltas, %+v, %v", len(deltas), res, err)
	}
	if proto != "HTTP/2.0" {
		t.Fatalf("negotiated %q, want HTTP/2.0", proto)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	if _, _, err := run(ctx, b, call("mock-stall", "", "hi")); !errors.Is(err, router.ErrTimeout) {
		t.Fatalf("stall over HTTP/2: %v, want ErrTimeout", err)
	}
}

type doFunc func(*http.Request) (*http.Response, error)

func (f doFunc) Do(r *http.Request) (*http.Response, error) { return f(r) }
