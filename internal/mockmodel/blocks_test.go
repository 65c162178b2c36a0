package mockmodel_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/document"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/types"

	"github.com/jetway-gateway/jetway/internal/mockmodel"
	"github.com/jetway-gateway/jetway/internal/mockmodel/mockmodeltest"
)

// blockTranscript is a ConverseStream answer block by block.
type blockTranscript struct {
	events    []string // "reasoning", "signature", "text", "start:<name>", "input", "stop", per event
	reasoning string
	signature string
	text      string
	toolID    string
	toolName  string
	toolInput string
	blocks    []int32 // contentBlockIndex of each delta
	stop      types.StopReason
	usage     *types.TokenUsage
	tier      *types.ServiceTier
}

func converseBlocks(ctx context.Context, client *bedrockruntime.Client, modelID string, in *bedrockruntime.ConverseStreamInput) (blockTranscript, error) {
	in.ModelId = aws.String(modelID)
	out, err := client.ConverseStream(ctx, in, sdkWorkarounds)
	if err != nil {
		return blockTranscript{}, err
	}
	stream := out.GetStream()
	defer stream.Close()
	var tr blockTranscript
	for ev := range stream.Events() {
		switch v := ev.(type) {
		case *types.ConverseStreamOutputMemberMessageStart:
		case *types.ConverseStreamOutputMemberContentBlockStart:
			tu, ok := v.Value.Start.(*types.ContentBlockStartMemberToolUse)
			if !ok {
				return tr, fmt.Errorf("start of type %T", v.Value.Start)
			}
			tr.toolID, tr.toolName = aws.ToString(tu.Value.ToolUseId), aws.ToString(tu.Value.Name)
			tr.events = append(tr.events, "start:"+tr.toolName)
		case *types.ConverseStreamOutputMemberContentBlockDelta:
			tr.blocks = append(tr.blocks, aws.ToInt32(v.Value.ContentBlockIndex))
			switch d := v.Value.Delta.(type) {
			case *types.ContentBlockDeltaMemberText:
				tr.text += d.Value
				tr.events = append(tr.events, "text")
			case *types.ContentBlockDeltaMemberToolUse:
				tr.toolInput += aws.ToString(d.Value.Input)
				tr.events = append(tr.events, "input")
			case *types.ContentBlockDeltaMemberReasoningContent:
				switch r := d.Value.(type) {
				case *types.ReasoningContentBlockDeltaMemberText:
					tr.reasoning += r.Value
					tr.events = append(tr.events, "reasoning")
				case *types.ReasoningContentBlockDeltaMemberSignature:
					tr.signature = r.Value
					tr.events = append(tr.events, "signature")
				default:
					return tr, fmt.Errorf("reasoning delta of type %T", r)
				}
			default:
				return tr, fmt.Errorf("delta of type %T", d)
			}
		case *types.ConverseStreamOutputMemberContentBlockStop:
			tr.events = append(tr.events, "stop")
		case *types.ConverseStreamOutputMemberMessageStop:
			tr.stop = v.Value.StopReason
		case *types.ConverseStreamOutputMemberMetadata:
			tr.usage = v.Value.Usage
			tr.tier = v.Value.ServiceTier
		default:
			return tr, fmt.Errorf("unexpected event %T", ev)
		}
	}
	return tr, stream.Err()
}

func clockTools(choice types.ToolChoice) *types.ToolConfiguration {
	return &types.ToolConfiguration{
		Tools: []types.Tool{
			&types.ToolMemberToolSpec{Value: types.ToolSpecification{Name: aws.String("clock"),
				InputSchema: &types.ToolInputSchemaMemberJson{Value: document.NewLazyDocument(map[string]any{"type": "object"})}}},
			&types.ToolMemberToolSpec{Value: types.ToolSpecification{Name: aws.String("calc"),
				InputSchema: &types.ToolInputSchemaMemberJson{Value: document.NewLazyDocument(map[string]any{"type": "object"})}}},
		},
		ToolChoice: choice,
	}
}

func TestReasoningModelStreamsReasoningThenText(t *testing.T) {
	_, url := mockmodeltest.Start(t, mockmodel.Options{TTFT: mockmodel.NoDelay, PerToken: mockmodel.NoDelay, Tokens: 20})
	client := mockmodeltest.Client(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tr, err := converseBlocks(ctx, client, "mock-reasoning", input("", "think about it"))
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Repeat("reasoning ", 16) + "signature stop " + strings.Repeat("text ", 4) + "stop"
	if got := strings.Join(tr.events, " "); got != want {
		t.Fatalf("events\n got %s\nwant %s", got, want)
	}
	if tr.reasoning == "" || tr.signature == "" || tr.text == "" || tr.blocks[0] != 0 || tr.blocks[len(tr.blocks)-1] != 1 {
		t.Fatalf("transcript %+v", tr)
	}
	if tr.stop != types.StopReasonEndTurn || aws.ToInt32(tr.usage.OutputTokens) != 20 {
		t.Fatalf("stop %s, usage %+v", tr.stop, tr.usage)
	}
}

func TestToolCalls(t *testing.T) {
	_, url := mockmodeltest.Start(t, fast)
	client := mockmodeltest.Client(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const prompt = "what time is it in Paris"
	wantID, wantInput := mockmodel.Tool(1, prompt)
	if wantInput != `{"query":"what time is"}` {
		t.Fatalf("Tool input %s", wantInput)
	}
	cases := []struct {
		name, model, tool string
		choice            types.ToolChoice
	}{
		{"mock-tools, auto", "mock-tools", "clock", &types.ToolChoiceMemberAuto{}},
		{"mock-tools, no choice", "mock-tools", "clock", nil},
		{"any model, any", "mock-a", "clock", &types.ToolChoiceMemberAny{}},
		{"any model, named", "mock-a", "calc", &types.ToolChoiceMemberTool{Value: types.SpecificToolChoice{Name: aws.String("calc")}}},
		{"reasoning and tools", "mock-reasoning", "clock", &types.ToolChoiceMemberAny{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := input("", prompt)
			in.ToolConfig = clockTools(c.choice)
			tr, err := converseBlocks(ctx, client, c.model, in)
			if err != nil {
				t.Fatal(err)
			}
			if tr.stop != types.StopReasonToolUse || tr.toolName != c.tool || tr.toolID != wantID || tr.toolInput != wantInput {
				t.Fatalf("stop %s, call %s %s %s", tr.stop, tr.toolID, tr.toolName, tr.toolInput)
			}
			ev := strings.Join(tr.events, " ")
			if !strings.Contains(ev, "text stop start:"+c.tool+" input input") || !strings.HasSuffix(ev, "input stop") {
				t.Fatalf("events %s", ev)
			}
		})
	}
	t.Run("auto on a plain model answers in text", func(t *testing.T) {
		in := input("", prompt)
		in.ToolConfig = clockTools(&types.ToolChoiceMemberAuto{})
		tr, err := converseBlocks(ctx, client, "mock-a", in)
		if err != nil || tr.stop != types.StopReasonEndTurn || tr.toolName != "" {
			t.Fatalf("%+v %v", tr, err)
		}
	})
	t.Run("a tool result is answered in text", func(t *testing.T) {
		in := input("", prompt)
		in.ToolConfig = clockTools(&types.ToolChoiceMemberAny{})
		in.Messages = append(in.Messages,
			types.Message{Role: types.ConversationRoleAssistant, Content: []types.ContentBlock{&types.ContentBlockMemberToolUse{
				Value: types.ToolUseBlock{ToolUseId: aws.String(wantID), Name: aws.String("clock"), Input: document.NewLazyDocument(map[string]any{})}}}},
			types.Message{Role: types.ConversationRoleUser, Content: []types.ContentBlock{&types.ContentBlockMemberToolResult{
				Value: types.ToolResultBlock{ToolUseId: aws.String(wantID), Content: []types.ToolResultContentBlock{&types.ToolResultContentBlockMemberText{Value: "14:02"}}}}}})
		tr, err := converseBlocks(ctx, client, "mock-tools", in)
		if err != nil || tr.stop != types.StopReasonEndTurn || tr.toolName != "" || tr.text == "" {
			t.Fatalf("%+v %v", tr, err)
		}
	})
}

func imageMessage(format types.ImageFormat, size int) *bedrockruntime.ConverseStreamInput {
	return &bedrockruntime.ConverseStreamInput{Messages: []types.Message{{Role: types.ConversationRoleUser, Content: []types.ContentBlock{
		&types.ContentBlockMemberText{Value: "what is this?"},
		&types.ContentBlockMemberImage{Value: types.ImageBlock{Format: format, Source: &types.ImageSourceMemberBytes{Value: make([]byte, size)}}},
	}}}}
}

func TestAttachmentsAreCheckedAsBedrockDoes(t *testing.T) {
	srv, url := mockmodeltest.Start(t, mockmodel.Options{TTFT: mockmodel.NoDelay, PerToken: mockmodel.NoDelay, Tokens: 3})
	client := mockmodeltest.Client(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	tr, err := converseBlocks(ctx, client, "mock-a", imageMessage(types.ImageFormatPng, 2500))
	if err != nil {
		t.Fatal(err)
	}
	// The image's 2,500 bytes count 3 input tokens; the text is the only text.
	if want := int32(mockmodel.InputTokens("", []string{"what is this?"}) + 3); aws.ToInt32(tr.usage.InputTokens) != want || tr.text != strings.Join(mockmodel.Tokens("mock-a", "", []string{"what is this?"}, 3), "") {
		t.Fatalf("input tokens %d, want %d; text %q", aws.ToInt32(tr.usage.InputTokens), want, tr.text)
	}
	doc := &bedrockruntime.ConverseStreamInput{Messages: []types.Message{{Role: types.ConversationRoleUser, Content: []types.ContentBlock{
		&types.ContentBlockMemberText{Value: "summarise"},
		&types.ContentBlockMemberDocument{Value: types.DocumentBlock{Format: types.DocumentFormatPdf, Name: aws.String("report"), Source: &types.DocumentSourceMemberBytes{Value: []byte("%PDF-1.7")}}},
	}}}}
	if _, err := converseBlocks(ctx, client, "mock-a", doc); err != nil {
		t.Fatal(err)
	}

	srv.ResetStats()
	// (A document without a name never leaves the SDK: it checks that itself.)
	sixDocs := &bedrockruntime.ConverseStreamInput{Messages: []types.Message{{Role: types.ConversationRoleUser}}}
	for range 6 {
		sixDocs.Messages[0].Content = append(sixDocs.Messages[0].Content, &types.ContentBlockMemberDocument{Value: types.DocumentBlock{
			Format: types.DocumentFormatTxt, Name: aws.String("notes"), Source: &types.DocumentSourceMemberBytes{Value: []byte("x")}}})
	}
	toolResultNoConfig := input("", "hi")
	toolResultNoConfig.Messages[0].Content = []types.ContentBlock{&types.ContentBlockMemberToolResult{Value: types.ToolResultBlock{
		ToolUseId: aws.String("t1"), Content: []types.ToolResultContentBlock{&types.ToolResultContentBlockMemberText{Value: "x"}}}}}
	unknownTool := input("", "hi")
	unknownTool.ToolConfig = clockTools(&types.ToolChoiceMemberTool{Value: types.SpecificToolChoice{Name: aws.String("weather")}})
	smallBudget := input("", "hi")
	smallBudget.AdditionalModelRequestFields = document.NewLazyDocument(map[string]any{"thinking": map[string]any{"type": "enabled", "budget_tokens": 10}})
	cases := []struct {
		name, want string
		in         *bedrockruntime.ConverseStreamInput
	}{
		{"image format", "image.format", imageMessage("bmp", 10)},
		{"oversized image", "image.source.bytes: size 3932161", imageMessage(types.ImageFormatJpeg, 3932161)},
		{"six documents", "at most 20 images and 5 documents", sixDocs},
		{"tool result without toolConfig", "toolConfig is required", toolResultNoConfig},
		{"tool choice of an unknown tool", "toolChoice.tool.name", unknownTool},
		{"thinking budget", "budget_tokens at least 1024", smallBudget},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := converseBlocks(ctx, client, "mock-a", c.in)
			var ve *types.ValidationException
			if !errors.As(err, &ve) || !strings.Contains(ve.ErrorMessage(), c.want) {
				t.Fatalf("error %v, want a ValidationException containing %q", err, c.want)
			}
		})
	}
	if got := srv.Requests("mock-a"); got != int64(len(cases)) {
		t.Fatalf("requests %d, want %d (each refused, none answered)", got, len(cases))
	}
}
