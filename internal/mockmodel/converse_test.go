package mockmodel_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/types"

	"github.com/jetway-gateway/jetway/internal/mockmodel"
	"github.com/jetway-gateway/jetway/internal/mockmodel/mockmodeltest"
)

// whole is one non-streaming Converse answer, as the SDK decoded it.
type whole struct {
	text, reasoning, signature string
	toolID, toolName           string
	toolInput                  map[string]any
	stop                       types.StopReason
	usage                      *types.TokenUsage
	latency                    int64
	tier                       *types.ServiceTier
}

// converseWhole calls the non-streaming Converse with the real SDK; in is
// a ConverseStream input (the request members are the same).
func converseWhole(ctx context.Context, client *bedrockruntime.Client, modelID string, in *bedrockruntime.ConverseStreamInput) (whole, error) {
	out, err := client.Converse(ctx, &bedrockruntime.ConverseInput{
		ModelId:         aws.String(modelID),
		System:          in.System,
		Messages:        in.Messages,
		InferenceConfig: in.InferenceConfig,
		ToolConfig:      in.ToolConfig,
		ServiceTier:     in.ServiceTier,
	}, sdkWorkarounds)
	if err != nil {
		return whole{}, err
	}
	w := whole{stop: out.StopReason, usage: out.Usage, tier: out.ServiceTier}
	if out.Metrics != nil {
		w.latency = aws.ToInt64(out.Metrics.LatencyMs)
	}
	msg, ok := out.Output.(*types.ConverseOutputMemberMessage)
	if !ok {
		return w, errors.New("output is not a message")
	}
	if msg.Value.Role != types.ConversationRoleAssistant {
		return w, errors.New("role " + string(msg.Value.Role))
	}
	for _, b := range msg.Value.Content {
		switch v := b.(type) {
		case *types.ContentBlockMemberText:
			w.text += v.Value
		case *types.ContentBlockMemberReasoningContent:
			rt, ok := v.Value.(*types.ReasoningContentBlockMemberReasoningText)
			if !ok {
				return w, errors.New("reasoning without text")
			}
			w.reasoning, w.signature = aws.ToString(rt.Value.Text), aws.ToString(rt.Value.Signature)
		case *types.ContentBlockMemberToolUse:
			w.toolID, w.toolName = aws.ToString(v.Value.ToolUseId), aws.ToString(v.Value.Name)
			if err := v.Value.Input.UnmarshalSmithyDocument(&w.toolInput); err != nil {
				return w, err
			}
		default:
			return w, errors.New("unexpected block")
		}
	}
	return w, nil
}

// The non-streaming Converse answers what ConverseStream streams, in one
// document: the same text, stop reason and usage, counted the same way.
func TestConverseAnswersWhatTheStreamStreams(t *testing.T) {
	srv, url := mockmodeltest.Start(t, mockmodel.Options{TTFT: mockmodel.NoDelay, PerToken: mockmodel.NoDelay, Tokens: 40})
	client := mockmodeltest.Client(t, url)
	system, msgs := "You are terse.", []string{"Hello there", "Hi!", "Tell me about jet bridges."}

	w, err := converseWhole(t.Context(), client, "mock-a", input(system, msgs...))
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.Join(mockmodel.Tokens("mock-a", system, msgs, 40), ""); w.text != want {
		t.Fatalf("text\n got %q\nwant %q", w.text, want)
	}
	tr, err := converse(t.Context(), client, "mock-a", input(system, msgs...))
	if err != nil || tr.text() != w.text {
		t.Fatalf("the stream answers %q (%v), Converse %q", tr.text(), err, w.text)
	}
	in := int32(mockmodel.InputTokens(system, msgs))
	if w.stop != types.StopReasonEndTurn {
		t.Errorf("stop %q, want end_turn", w.stop)
	}
	if u := w.usage; u == nil || aws.ToInt32(u.InputTokens) != in || aws.ToInt32(u.OutputTokens) != 40 || aws.ToInt32(u.TotalTokens) != in+40 {
		t.Errorf("usage %+v, want input %d output 40", w.usage, in)
	}
	if w.tier != nil {
		t.Errorf("serviceTier %+v echoed when none was named", w.tier)
	}
	if got := srv.Requests("mock-a"); got != 2 {
		t.Errorf("Requests(mock-a) = %d, want 2 (a Converse and a ConverseStream)", got)
	}

	capped := input("", "hi")
	capped.InferenceConfig = &types.InferenceConfiguration{MaxTokens: aws.Int32(7)}
	w, err = converseWhole(t.Context(), client, "mock-a", capped)
	if err != nil || w.text != strings.Join(mockmodel.Tokens("mock-a", "", []string{"hi"}, 7), "") ||
		w.stop != types.StopReasonMaxTokens || aws.ToInt32(w.usage.OutputTokens) != 7 {
		t.Errorf("capped: %q stop %q usage %+v err %v", w.text, w.stop, w.usage, err)
	}

	w, err = converseWhole(t.Context(), client, "mock-a", withTier(input("", "hi"), types.ServiceTierTypeFlex))
	if err != nil || w.tier == nil || w.tier.Type != types.ServiceTierTypeFlex || srv.RequestsInTier("flex") != 1 {
		t.Errorf("flex: tier %+v, err %v", w.tier, err)
	}
	w, err = converseWhole(t.Context(), client, "mock-markdown", input("", "anything"))
	if err != nil || !strings.HasPrefix(w.text, "## Gate B12") || !strings.HasSuffix(w.text, "protocol.md).") {
		t.Errorf("mock-markdown: %q %v", w.text, err)
	}
}

// The answer comes when the stream's last token would: TTFT + (tokens-1)
// x PerToken after the request, never earlier.
func TestConverseIsPacedAsTheStream(t *testing.T) {
	const ttft, perToken, tokens = 60 * time.Millisecond, 5 * time.Millisecond, 10
	_, url := mockmodeltest.Start(t, mockmodel.Options{TTFT: ttft, PerToken: perToken, Tokens: tokens})
	client := mockmodeltest.Client(t, url)
	start := time.Now()
	w, err := converseWhole(t.Context(), client, "mock-a", input("", "hi"))
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if want := ttft + (tokens-1)*perToken; took < want || w.latency < want.Milliseconds() {
		t.Errorf("answered after %v (latencyMs %d), want at least %v", took, w.latency, want)
	}
	if aws.ToInt32(w.usage.OutputTokens) != tokens {
		t.Errorf("output tokens %d, want %d", aws.ToInt32(w.usage.OutputTokens), tokens)
	}
}

func TestConverseFaultsAndBlocks(t *testing.T) {
	srv, url := mockmodeltest.Start(t, mockmodel.Options{TTFT: mockmodel.NoDelay, PerToken: mockmodel.NoDelay, Tokens: 20})
	client := mockmodeltest.Client(t, url)
	ctx := t.Context()

	_, err := converseWhole(ctx, client, "mock-throttle", input("", "hi"))
	var th *types.ThrottlingException
	if !errors.As(err, &th) {
		t.Errorf("mock-throttle: %v (%T), want ThrottlingException", err, err)
	}
	_, err = converseWhole(ctx, client, "mock-unavailable", input("", "hi"))
	var un *types.ServiceUnavailableException
	if !errors.As(err, &un) {
		t.Errorf("mock-unavailable: %v (%T), want ServiceUnavailableException", err, err)
	}
	_, err = converseWhole(ctx, client, "mock-fail-after-3", input("", "hi"))
	var me *types.ModelErrorException
	if !errors.As(err, &me) || !strings.Contains(me.ErrorMessage(), "after 3 tokens") {
		t.Errorf("mock-fail-after-3: %v (%T), want ModelErrorException", err, err)
	}
	_, err = converseWhole(ctx, client, "mock-a", &bedrockruntime.ConverseStreamInput{})
	var va *types.ValidationException
	if !errors.As(err, &va) {
		t.Errorf("no messages: %v (%T), want ValidationException", err, err)
	}

	w, err := converseWhole(ctx, client, "mock-guardrail", input("", "hi"))
	if err != nil || w.stop != types.StopReasonGuardrailIntervened || aws.ToInt32(w.usage.OutputTokens) != 5 ||
		w.text != strings.Join(mockmodel.Tokens("mock-guardrail", "", []string{"hi"}, 5), "") {
		t.Errorf("mock-guardrail: %+v %v", w, err)
	}

	w, err = converseWhole(ctx, client, "mock-reasoning", input("", "think about it"))
	if err != nil || w.reasoning == "" || w.signature == "" || w.text == "" || w.stop != types.StopReasonEndTurn ||
		aws.ToInt32(w.usage.OutputTokens) != 20 {
		t.Errorf("mock-reasoning: %+v %v", w, err)
	}
	bt, err := converseBlocks(ctx, client, "mock-reasoning", input("", "think about it"))
	if err != nil || bt.reasoning != w.reasoning || bt.text != w.text {
		t.Errorf("mock-reasoning: the stream's reasoning %q and text %q differ from Converse's %q, %q (%v)", bt.reasoning, bt.text, w.reasoning, w.text, err)
	}

	const prompt = "what time is it in Paris"
	in := input("", prompt)
	in.ToolConfig = clockTools(nil)
	wantID, _ := mockmodel.Tool(1, prompt)
	w, err = converseWhole(ctx, client, "mock-tools", in)
	if err != nil || w.stop != types.StopReasonToolUse || w.toolID != wantID || w.toolName != "clock" ||
		w.toolInput["query"] != "what time is" || w.text == "" {
		t.Errorf("mock-tools: %+v %v", w, err)
	}
	bt, err = converseBlocks(ctx, client, "mock-tools", in)
	if err != nil || aws.ToInt32(bt.usage.OutputTokens) != aws.ToInt32(w.usage.OutputTokens) {
		t.Errorf("mock-tools: output tokens %d streamed, %d by Converse (%v)", aws.ToInt32(bt.usage.OutputTokens), aws.ToInt32(w.usage.OutputTokens), err)
	}

	// A stall answers nothing until the client gives up; it counts as abandoned.
	before := srv.Abandoned()
	sctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := converseWhole(sctx, client, "mock-stall", input("", "hi")); err == nil {
		t.Error("mock-stall answered")
	}
	waitFor(t, func() bool { return srv.Active() == 0 }, "handler to return")
	if got := srv.Abandoned() - before; got != 1 {
		t.Errorf("Abandoned() grew by %d after a stalled Converse, want 1", got)
	}
}
