package mockmodel_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/schemas"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/types"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/aws/smithy-go/transport/http/protocol/restjson1"
	"go.uber.org/goleak"

	"github.com/jetway-gateway/jetway/internal/mockmodel"
	"github.com/jetway-gateway/jetway/internal/mockmodel/mockmodeltest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fast answers without any pacing.
var fast = mockmodel.Options{TTFT: mockmodel.NoDelay, PerToken: mockmodel.NoDelay}

// sdkWorkarounds is the per-call option router.Bedrock applies for two
// smithy-go defects (its doc comment explains them): a fresh restJson1
// protocol per call, and request bodies without WriteTo.
func sdkWorkarounds(o *bedrockruntime.Options) {
	o.Protocol = restjson1.New(schemas.AmazonBedrockFrontendService)
	o.HTTPClient = readOnlyBodies{o.HTTPClient}
}

type readOnlyBodies struct{ client bedrockruntime.HTTPClient }

func (c readOnlyBodies) Do(req *http.Request) (*http.Response, error) {
	if req.Body != nil && req.Body != http.NoBody {
		req.Body = struct{ io.ReadCloser }{req.Body}
	}
	return c.client.Do(req)
}

// transcript is everything one ConverseStream call produced, in order.
type transcript struct {
	events   []string // event kinds in arrival order
	deltas   []string
	stop     types.StopReason
	usage    *types.TokenUsage
	latency  int64
	firstAt  time.Duration      // from the call to the first delta
	tier     *types.ServiceTier // the metadata event's serviceTier
	streamEr error
}

func (tr transcript) text() string { return strings.Join(tr.deltas, "") }

func input(system string, messages ...string) *bedrockruntime.ConverseStreamInput {
	in := &bedrockruntime.ConverseStreamInput{}
	if system != "" {
		in.System = []types.SystemContentBlock{&types.SystemContentBlockMemberText{Value: system}}
	}
	for i, m := range messages {
		role := types.ConversationRoleUser
		if i%2 == 1 {
			role = types.ConversationRoleAssistant
		}
		in.Messages = append(in.Messages, types.Message{
			Role:    role,
			Content: []types.ContentBlock{&types.ContentBlockMemberText{Value: m}},
		})
	}
	return in
}

// converse runs one call to the end of its stream with the real SDK.
func converse(ctx context.Context, client *bedrockruntime.Client, modelID string, in *bedrockruntime.ConverseStreamInput) (transcript, error) {
	in.ModelId = aws.String(modelID)
	start := time.Now()
	out, err := client.ConverseStream(ctx, in, sdkWorkarounds)
	if err != nil {
		return transcript{}, err
	}
	stream := out.GetStream()
	defer stream.Close()
	var tr transcript
	for ev := range stream.Events() {
		switch v := ev.(type) {
		case *types.ConverseStreamOutputMemberMessageStart:
			tr.events = append(tr.events, "messageStart:"+string(v.Value.Role))
		case *types.ConverseStreamOutputMemberContentBlockDelta:
			text, ok := v.Value.Delta.(*types.ContentBlockDeltaMemberText)
			if !ok {
				return tr, fmt.Errorf("delta of type %T", v.Value.Delta)
			}
			if len(tr.deltas) == 0 {
				tr.firstAt = time.Since(start)
				tr.events = append(tr.events, "contentBlockDelta")
			}
			tr.deltas = append(tr.deltas, text.Value)
		case *types.ConverseStreamOutputMemberContentBlockStop:
			tr.events = append(tr.events, "contentBlockStop")
		case *types.ConverseStreamOutputMemberMessageStop:
			tr.events = append(tr.events, "messageStop")
			tr.stop = v.Value.StopReason
		case *types.ConverseStreamOutputMemberMetadata:
			tr.events = append(tr.events, "metadata")
			tr.usage = v.Value.Usage
			tr.tier = v.Value.ServiceTier
			if v.Value.Metrics != nil && v.Value.Metrics.LatencyMs != nil {
				tr.latency = *v.Value.Metrics.LatencyMs
			}
		default:
			return tr, fmt.Errorf("unexpected event %T", ev)
		}
	}
	tr.streamEr = stream.Err()
	return tr, nil
}

func TestAnswerIsDeterministicAndComplete(t *testing.T) {
	srv, url := mockmodeltest.Start(t, mockmodel.Options{TTFT: mockmodel.NoDelay, PerToken: mockmodel.NoDelay, Tokens: 40})
	client := mockmodeltest.Client(t, url)
	system, msgs := "You are terse.", []string{"Hello there", "Hi!", "Tell me about jet bridges."}

	tr, err := converse(t.Context(), client, "mock-a", input(system, msgs...))
	if err != nil {
		t.Fatal(err)
	}
	if tr.streamEr != nil {
		t.Fatalf("stream error: %v", tr.streamEr)
	}
	want := mockmodel.Tokens("mock-a", system, msgs, 40)
	if !slices.Equal(tr.deltas, want) {
		t.Fatalf("deltas:\n got %q\nwant %q", tr.deltas, want)
	}
	if !strings.HasPrefix(want[0], strings.ToUpper(want[0][:1])) || !strings.HasPrefix(want[1], " ") {
		t.Errorf("pieces are not shaped like words: %q", want[:2])
	}
	wantEvents := []string{"messageStart:assistant", "contentBlockDelta", "contentBlockStop", "messageStop", "metadata"}
	if !slices.Equal(tr.events, wantEvents) {
		t.Errorf("events %v, want %v", tr.events, wantEvents)
	}
	if tr.stop != types.StopReasonEndTurn {
		t.Errorf("stop reason %q, want end_turn", tr.stop)
	}
	in := int32(mockmodel.InputTokens(system, msgs))
	if u := tr.usage; u == nil || aws.ToInt32(u.InputTokens) != in || aws.ToInt32(u.OutputTokens) != 40 || aws.ToInt32(u.TotalTokens) != in+40 {
		t.Errorf("usage %+v, want input %d output 40", u, in)
	}
	if got := srv.Requests("mock-a"); got != 1 {
		t.Errorf("Requests(mock-a) = %d, want 1", got)
	}

	// The same prompt to the same model gives the same text; another model
	// or prompt gives another.
	again, err := converse(t.Context(), client, "mock-a", input(system, msgs...))
	if err != nil || again.text() != tr.text() {
		t.Errorf("second answer differs (err %v)", err)
	}
	if other := mockmodel.Tokens("mock-b", system, msgs, 40); slices.Equal(other, want) {
		t.Error("model id does not change the answer")
	}
	if other := mockmodel.Tokens("mock-a", system, []string{"Hello there", "Hi!", "Tell me about jet bridges"}, 40); slices.Equal(other, want) {
		t.Error("prompt does not change the answer")
	}
}

func TestDefaultsAndMaxTokensCap(t *testing.T) {
	_, url := mockmodeltest.Start(t, fast)
	client := mockmodeltest.Client(t, url)

	tr, err := converse(t.Context(), client, "mock-a", input("", "hi"))
	if err != nil || tr.streamEr != nil {
		t.Fatal(err, tr.streamEr)
	}
	if len(tr.deltas) != mockmodel.DefaultTokens || tr.stop != types.StopReasonEndTurn {
		t.Errorf("default answer: %d tokens, stop %q; want %d, end_turn", len(tr.deltas), tr.stop, mockmodel.DefaultTokens)
	}

	in := input("", "hi")
	in.InferenceConfig = &types.InferenceConfiguration{MaxTokens: aws.Int32(7), Temperature: aws.Float32(0.2)}
	tr, err = converse(t.Context(), client, "mock-a", in)
	if err != nil || tr.streamEr != nil {
		t.Fatal(err, tr.streamEr)
	}
	if !slices.Equal(tr.deltas, mockmodel.Tokens("mock-a", "", []string{"hi"}, 7)) {
		t.Errorf("capped deltas %q", tr.deltas)
	}
	if tr.stop != types.StopReasonMaxTokens || aws.ToInt32(tr.usage.OutputTokens) != 7 {
		t.Errorf("capped answer: stop %q, output tokens %d; want max_tokens, 7", tr.stop, aws.ToInt32(tr.usage.OutputTokens))
	}

	// A cap above the answer length changes nothing.
	in.InferenceConfig.MaxTokens = aws.Int32(10_000)
	tr, err = converse(t.Context(), client, "mock-a", in)
	if err != nil || len(tr.deltas) != mockmodel.DefaultTokens || tr.stop != types.StopReasonEndTurn {
		t.Errorf("large cap: %d tokens, stop %q, err %v", len(tr.deltas), tr.stop, err)
	}
}

// TestMarkdown: mock-markdown answers in Markdown (a heading, a list, a
// table, a code block, a link), the same whatever the prompt, streamed word
// by word; maxTokens cuts it.
func TestMarkdown(t *testing.T) {
	_, url := mockmodeltest.Start(t, mockmodel.Options{TTFT: mockmodel.NoDelay, PerToken: mockmodel.NoDelay, Tokens: 5})
	client := mockmodeltest.Client(t, url)
	tr, err := converse(t.Context(), client, "mock-markdown", input("", "Where is gate B12?"))
	if err != nil || tr.streamEr != nil {
		t.Fatal(err, tr.streamEr)
	}
	want := mockmodel.Tokens("mock-markdown", "", []string{"anything"}, 1000)
	if !slices.Equal(tr.deltas, want) || tr.stop != types.StopReasonEndTurn || aws.ToInt32(tr.usage.OutputTokens) != int32(len(want)) {
		t.Fatalf("answer: %d deltas, stop %q, usage %+v; want %d deltas, end_turn", len(tr.deltas), tr.stop, tr.usage, len(want))
	}
	text := tr.text()
	for _, part := range []string{"\n## ", "\n- ", "\n|---|", "\n```js\n", "\n```\n", "](https://"} {
		if !strings.Contains("\n"+text, part) {
			t.Errorf("the answer has no %q:\n%s", part, text)
		}
	}
	if len(want) < 50 || strings.Join(mockmodel.Tokens("mock-markdown", "", nil, 3), "") != "## Gate B12" {
		t.Errorf("pieces: %d, first %q", len(want), want[:3])
	}

	in := input("", "hi")
	in.InferenceConfig = &types.InferenceConfiguration{MaxTokens: aws.Int32(7)}
	tr, err = converse(t.Context(), client, "mock-markdown", in)
	if err != nil || !slices.Equal(tr.deltas, want[:7]) || tr.stop != types.StopReasonMaxTokens {
		t.Errorf("capped: %q, stop %q, err %v", tr.deltas, tr.stop, err)
	}
}

// The SDK path-escapes the model id; ARNs contain ':' and '/'.
func TestModelIDIsUnescaped(t *testing.T) {
	srv, url := mockmodeltest.Start(t, mockmodel.Options{TTFT: mockmodel.NoDelay, PerToken: mockmodel.NoDelay, Tokens: 5})
	client := mockmodeltest.Client(t, url)
	const arn = "arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude-3-5-haiku-20241022-v1:0"
	tr, err := converse(t.Context(), client, arn, input("", "hi"))
	if err != nil || tr.streamEr != nil {
		t.Fatal(err, tr.streamEr)
	}
	if !slices.Equal(tr.deltas, mockmodel.Tokens(arn, "", []string{"hi"}, 5)) {
		t.Errorf("deltas %q", tr.deltas)
	}
	if srv.Requests(arn) != 1 {
		t.Errorf("Requests(arn) = %d, want 1", srv.Requests(arn))
	}
}

func TestErrorsBeforeTheStream(t *testing.T) {
	srv, url := mockmodeltest.Start(t, fast)
	client := mockmodeltest.Client(t, url)

	cases := []struct {
		name, model string
		in          *bedrockruntime.ConverseStreamInput
		status      int
		check       func(error) bool
	}{
		{"throttle", "mock-throttle", input("", "hi"), 429, func(err error) bool {
			var e *types.ThrottlingException
			return errors.As(err, &e) && e.ErrorMessage() != ""
		}},
		{"unavailable", "mock-unavailable", input("", "hi"), 503, func(err error) bool {
			var e *types.ServiceUnavailableException
			return errors.As(err, &e)
		}},
		{"no messages", "mock-a", input("system only"), 400, func(err error) bool {
			var e *types.ValidationException
			return errors.As(err, &e) && strings.Contains(e.ErrorMessage(), "messages")
		}},
		{"bad role", "mock-a", &bedrockruntime.ConverseStreamInput{Messages: []types.Message{{
			Role: "robot", Content: []types.ContentBlock{&types.ContentBlockMemberText{Value: "x"}},
		}}}, 400, func(err error) bool {
			var e *types.ValidationException
			return errors.As(err, &e) && strings.Contains(e.ErrorMessage(), "role")
		}},
		{"max tokens zero", "mock-a", func() *bedrockruntime.ConverseStreamInput {
			in := input("", "hi")
			in.InferenceConfig = &types.InferenceConfiguration{MaxTokens: aws.Int32(0)}
			return in
		}(), 400, func(err error) bool {
			var e *types.ValidationException
			return errors.As(err, &e)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := converse(t.Context(), client, c.model, c.in)
			if err == nil {
				t.Fatal("call succeeded, want an error")
			}
			if !c.check(err) {
				t.Errorf("error %v (%T) is not the expected type", err, errors.Unwrap(err))
			}
			var re *smithyhttp.ResponseError
			if !errors.As(err, &re) || re.HTTPStatusCode() != c.status {
				t.Errorf("error %v: want HTTP status %d", err, c.status)
			}
		})
	}
	if srv.Requests("mock-throttle") != 1 || srv.Requests("mock-unavailable") != 1 {
		t.Errorf("fault requests counted %d, %d; want 1, 1", srv.Requests("mock-throttle"), srv.Requests("mock-unavailable"))
	}
}

func TestFailAfterN(t *testing.T) {
	_, url := mockmodeltest.Start(t, fast)
	client := mockmodeltest.Client(t, url)
	for _, n := range []int{0, 1, 3} {
		model := fmt.Sprintf("mock-fail-after-%d", n)
		tr, err := converse(t.Context(), client, model, input("sys", "hi"))
		if err != nil {
			t.Fatalf("%s: call failed before the stream: %v", model, err)
		}
		if !slices.Equal(tr.deltas, mockmodel.Tokens(model, "sys", []string{"hi"}, n)) {
			t.Errorf("%s: deltas %q, want the first %d tokens", model, tr.deltas, n)
		}
		var e *types.ModelStreamErrorException
		if !errors.As(tr.streamEr, &e) || aws.ToInt32(e.OriginalStatusCode) != 500 {
			t.Errorf("%s: stream error %v (%T), want ModelStreamErrorException", model, tr.streamEr, tr.streamEr)
		}
		if tr.stop != "" || tr.usage != nil {
			t.Errorf("%s: a failed stream must not stop normally (stop %q)", model, tr.stop)
		}
	}
}

func TestGuardrail(t *testing.T) {
	_, url := mockmodeltest.Start(t, fast)
	client := mockmodeltest.Client(t, url)
	in := input("", "hi")
	in.GuardrailConfig = &types.GuardrailStreamConfiguration{
		GuardrailIdentifier:  aws.String("gr-1"),
		GuardrailVersion:     aws.String("1"),
		StreamProcessingMode: types.GuardrailStreamProcessingModeAsync,
	}
	tr, err := converse(t.Context(), client, "mock-guardrail", in)
	if err != nil || tr.streamEr != nil {
		t.Fatal(err, tr.streamEr)
	}
	if tr.stop != types.StopReasonGuardrailIntervened || len(tr.deltas) != 5 || aws.ToInt32(tr.usage.OutputTokens) != 5 {
		t.Errorf("stop %q after %d tokens (usage %d), want guardrail_intervened after 5", tr.stop, len(tr.deltas), aws.ToInt32(tr.usage.OutputTokens))
	}
}

// A stalled stream holds the handler until the client goes away, then the
// handler returns at once and nothing is left running.
func TestStallEndsWhenTheClientGoesAway(t *testing.T) {
	before := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, before) }) // runs after the server and client are closed
	srv, url := mockmodeltest.Start(t, fast)
	client := mockmodeltest.Client(t, url)

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	in := input("", "hi")
	in.ModelId = aws.String("mock-stall")
	out, err := client.ConverseStream(ctx, in, sdkWorkarounds)
	if err != nil {
		t.Fatalf("the stall must accept the request: %v", err)
	}
	stream := out.GetStream()
	defer stream.Close()
	if srv.Active() != 1 {
		t.Fatalf("Active() = %d during the stall, want 1", srv.Active())
	}
	select {
	case ev := <-stream.Events():
		t.Fatalf("stalled stream sent %T", ev)
	case <-time.After(50 * time.Millisecond): // proves silence, not waiting for an event
	}
	cancel()
	select {
	case _, ok := <-stream.Events():
		if ok {
			t.Fatal("event after cancel")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("stream did not end after cancel")
	}
	waitFor(t, func() bool { return srv.Active() == 0 }, "handler to return")
	if srv.Abandoned() != 1 {
		t.Errorf("Abandoned() = %d after the client gave up on the stall, want 1", srv.Abandoned())
	}
}

// Tokens are never early: the first waits TTFT, token i waits TTFT+i*PerToken.
func TestPacingLowerBounds(t *testing.T) {
	o := mockmodel.Options{TTFT: 40 * time.Millisecond, PerToken: 5 * time.Millisecond, Tokens: 9}
	_, url := mockmodeltest.Start(t, o)
	client := mockmodeltest.Client(t, url)
	start := time.Now()
	tr, err := converse(t.Context(), client, "mock-a", input("", "hi"))
	total := time.Since(start)
	if err != nil || tr.streamEr != nil {
		t.Fatal(err, tr.streamEr)
	}
	if tr.firstAt < o.TTFT {
		t.Errorf("first token after %v, before TTFT %v", tr.firstAt, o.TTFT)
	}
	if min := o.TTFT + 8*o.PerToken; total < min || time.Duration(tr.latency)*time.Millisecond < min-time.Millisecond {
		t.Errorf("answer took %v (server says %dms), faster than %v", total, tr.latency, min)
	}
}

// A due event never waits in a buffer: with the second token an hour away,
// the first one still arrives.
func TestPacedEventsAreFlushedWhenDue(t *testing.T) {
	srv, url := mockmodeltest.Start(t, mockmodel.Options{TTFT: mockmodel.NoDelay, PerToken: time.Hour, Tokens: 2})
	client := mockmodeltest.Client(t, url)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	in := input("", "hi")
	in.ModelId = aws.String("mock-a")
	out, err := client.ConverseStream(ctx, in, sdkWorkarounds)
	if err != nil {
		t.Fatal(err)
	}
	stream := out.GetStream()
	defer stream.Close()
	want := mockmodel.Tokens("mock-a", "", []string{"hi"}, 1)[0]
	for {
		select {
		case ev := <-stream.Events():
			if d, ok := ev.(*types.ConverseStreamOutputMemberContentBlockDelta); ok {
				if got := d.Value.Delta.(*types.ContentBlockDeltaMemberText).Value; got != want {
					t.Fatalf("first delta %q, want %q", got, want)
				}
				cancel()
				waitFor(t, func() bool { return srv.Active() == 0 }, "handler to return")
				return
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the first token did not arrive while the second was pending")
		}
	}
}

func TestStatsEndpoint(t *testing.T) {
	srv, url := mockmodeltest.Start(t, mockmodel.Options{TTFT: mockmodel.NoDelay, PerToken: mockmodel.NoDelay, Tokens: 3})
	client := mockmodeltest.Client(t, url)
	for range 3 {
		if _, err := converse(t.Context(), client, "mock-a", input("", "hi")); err != nil {
			t.Fatal(err)
		}
	}
	_, _ = converse(t.Context(), client, "mock-throttle", input("", "hi"))

	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: tr}
	get := func() mockmodel.Stats {
		t.Helper()
		resp, err := hc.Get(url + "/stats")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var st mockmodel.Stats
		if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	st := get()
	if st.Requests["mock-a"] != 3 || st.Requests["mock-throttle"] != 1 || len(st.Requests) != 2 {
		t.Errorf("stats %+v, want mock-a 3, mock-throttle 1", st)
	}
	if st.Abandoned != 0 || srv.Abandoned() != 0 {
		t.Errorf("abandoned %d (%d), want 0: every answer ran to its end", st.Abandoned, srv.Abandoned())
	}
	if srv.Requests("mock-a") != 3 || srv.Requests("never") != 0 {
		t.Errorf("Requests: mock-a %d never %d", srv.Requests("mock-a"), srv.Requests("never"))
	}
	resp, err := hc.Post(url+"/stats/reset", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Errorf("reset status %d", resp.StatusCode)
	}
	if st := get(); len(st.Requests) != 0 || srv.Requests("mock-a") != 0 {
		t.Errorf("after reset: %+v", st)
	}
}

// 1,000 paced streams at once, all complete and correct. The client is a
// lean raw HTTP + event stream decoder (the SDK's compatibility is proven
// above), so that the test measures the server, not the SDK's per-call cost.
func TestThousandConcurrentStreams(t *testing.T) {
	const n = 1000
	o := mockmodel.Options{TTFT: 50 * time.Millisecond, PerToken: time.Millisecond, Tokens: 5}
	srv, url := mockmodeltest.Start(t, o)
	tr := &http.Transport{MaxIdleConnsPerHost: n}
	t.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: tr}

	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			prompt := fmt.Sprintf("question %d", i)
			deltas, err := rawConverse(t.Context(), hc, url, "mock-a", prompt)
			switch {
			case err != nil:
				errs <- fmt.Errorf("stream %d: %w", i, err)
			case !slices.Equal(deltas, mockmodel.Tokens("mock-a", "", []string{prompt}, o.Tokens)):
				errs <- fmt.Errorf("stream %d: wrong text %q", i, strings.Join(deltas, ""))
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if srv.Requests("mock-a") != n {
		t.Errorf("Requests = %d, want %d", srv.Requests("mock-a"), n)
	}
}

// rawConverse posts a one-message ConverseStream request and decodes the
// event stream with the SDK's decoder, returning the text deltas.
func rawConverse(ctx context.Context, hc *http.Client, url, modelID, prompt string) ([]string, error) {
	body, _ := json.Marshal(map[string]any{
		"messages": []any{map[string]any{"role": "user", "content": []any{map[string]string{"text": prompt}}}},
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/model/"+modelID+"/converse-stream", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/vnd.amazon.eventstream" {
		return nil, fmt.Errorf("status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	dec := eventstream.NewDecoder()
	var deltas []string
	var payload []byte
	for {
		msg, err := dec.Decode(resp.Body, payload[:0])
		if errors.Is(err, io.EOF) {
			return deltas, nil
		}
		if err != nil {
			return deltas, err
		}
		if mt := msg.Headers.Get(":message-type"); mt == nil || mt.String() != "event" {
			return deltas, fmt.Errorf("message type %v", mt)
		}
		if msg.Headers.Get(":event-type").String() == "contentBlockDelta" {
			var d struct {
				Delta struct{ Text string } `json:"delta"`
			}
			if err := json.Unmarshal(msg.Payload, &d); err != nil {
				return deltas, err
			}
			deltas = append(deltas, d.Delta.Text)
		}
	}
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
