package router

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/document"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/types"
	smithydoc "github.com/aws/smithy-go/document"
)

// Block kinds of a message's content (Message.Blocks) and of an answer's
// blocks (BlockDelta.Kind).
const (
	BlockText       = "text"
	BlockImage      = "image"
	BlockDocument   = "document"
	BlockToolUse    = "tool_use"
	BlockToolResult = "tool_result"
	BlockReasoning  = "reasoning"
	BlockCachePoint = "cache_point"
)

// Block is one content block of a message. Which fields are set depends
// on Kind (see the protocol's blocks): Data holds an attachment's decoded
// bytes and Digest their SHA-256 (the cache key uses it); Input a tool
// call's JSON object.
type Block struct {
	Kind      string
	Text      string
	Format    string
	Name      string
	Data      []byte
	Digest    [sha256.Size]byte
	ID        string // tool_use id; tool_result's tool_use id
	Input     json.RawMessage
	Content   []Block // tool_result
	Status    string  // tool_result: "", "success" or "error"
	Signature string  // reasoning
}

// Tool is a function the model may call.
type Tool struct {
	Name, Description string
	InputSchema       json.RawMessage // a JSON object
}

// Tool choice modes (ToolChoice.Mode).
const (
	ToolChoiceAuto = "auto"
	ToolChoiceAny  = "any"
	ToolChoiceTool = "tool"
)

// ToolChoice says whether and which tool the model must call.
type ToolChoice struct {
	Mode string
	Name string // for ToolChoiceTool
}

// BlockDelta is one streamed piece of an answer in block mode (Call.OnBlock):
//   - text, reasoning: Text is the next piece of block Block
//   - reasoning with Signature set: the block's signature (no text)
//   - tool_use with ID and Name: the block starts; with Input: the next
//     fragment of the call's input JSON
//
// Blocks arrive in order; a block's pieces end before the next block's begin.
type BlockDelta struct {
	Block     int
	Kind      string
	Text      string
	Signature string
	ID, Name  string
	Input     string
}

// blockDeltaEvent is a contentBlockDelta event in block mode.
type blockDeltaEvent struct {
	ContentBlockIndex int `json:"contentBlockIndex"`
	Delta             struct {
		Text    *string `json:"text"`
		ToolUse *struct {
			Input string `json:"input"`
		} `json:"toolUse"`
		ReasoningContent *struct {
			Text      *string `json:"text"`
			Signature *string `json:"signature"`
		} `json:"reasoningContent"`
	} `json:"delta"`
}

// blockStartEvent is a contentBlockStart event (tool use starts).
type blockStartEvent struct {
	ContentBlockIndex int `json:"contentBlockIndex"`
	Start             struct {
		ToolUse *struct {
			ToolUseID string `json:"toolUseId"`
			Name      string `json:"name"`
		} `json:"toolUse"`
	} `json:"start"`
}

// blockDeltas turns a contentBlockDelta payload into its block deltas (at
// most one; none for kinds the gateway does not stream).
func decodeBlockDelta(payload []byte) (BlockDelta, bool, error) {
	var ev blockDeltaEvent
	if err := json.Unmarshal(payload, &ev); err != nil {
		return BlockDelta{}, false, err
	}
	d := BlockDelta{Block: ev.ContentBlockIndex}
	switch {
	case ev.Delta.Text != nil && *ev.Delta.Text != "":
		d.Kind, d.Text = BlockText, *ev.Delta.Text
	case ev.Delta.ToolUse != nil && ev.Delta.ToolUse.Input != "":
		d.Kind, d.Input = BlockToolUse, ev.Delta.ToolUse.Input
	case ev.Delta.ReasoningContent != nil:
		r := ev.Delta.ReasoningContent
		d.Kind = BlockReasoning
		switch {
		case r.Text != nil && *r.Text != "":
			d.Text = *r.Text
		case r.Signature != nil && *r.Signature != "":
			d.Signature = *r.Signature
		default:
			return d, false, nil
		}
	default:
		return d, false, nil
	}
	return d, true, nil
}

func decodeBlockStart(payload []byte) (BlockDelta, bool, error) {
	var ev blockStartEvent
	if err := json.Unmarshal(payload, &ev); err != nil {
		return BlockDelta{}, false, err
	}
	tu := ev.Start.ToolUse
	if tu == nil {
		return BlockDelta{}, false, nil
	}
	return BlockDelta{Block: ev.ContentBlockIndex, Kind: BlockToolUse, ID: tu.ToolUseID, Name: tu.Name}, true, nil
}

// contentBlocks converts a message's blocks to Bedrock's.
func contentBlocks(bs []Block) ([]types.ContentBlock, error) {
	out := make([]types.ContentBlock, 0, len(bs))
	for i, b := range bs {
		var cb types.ContentBlock
		switch b.Kind {
		case BlockText:
			cb = &types.ContentBlockMemberText{Value: b.Text}
		case BlockImage:
			cb = &types.ContentBlockMemberImage{Value: types.ImageBlock{Format: types.ImageFormat(b.Format),
				Source: &types.ImageSourceMemberBytes{Value: b.Data}}}
		case BlockDocument:
			cb = &types.ContentBlockMemberDocument{Value: types.DocumentBlock{Format: types.DocumentFormat(b.Format),
				Name: aws.String(b.Name), Source: &types.DocumentSourceMemberBytes{Value: b.Data}}}
		case BlockToolUse:
			input, err := jsonDocument(b.Input)
			if err != nil {
				return nil, fmt.Errorf("block %d: tool_use input: %w", i, err)
			}
			cb = &types.ContentBlockMemberToolUse{Value: types.ToolUseBlock{ToolUseId: aws.String(b.ID),
				Name: aws.String(b.Name), Input: input}}
		case BlockToolResult:
			content := make([]types.ToolResultContentBlock, 0, len(b.Content))
			for _, c := range b.Content {
				switch c.Kind {
				case BlockText:
					content = append(content, &types.ToolResultContentBlockMemberText{Value: c.Text})
				case BlockImage:
					content = append(content, &types.ToolResultContentBlockMemberImage{Value: types.ImageBlock{
						Format: types.ImageFormat(c.Format), Source: &types.ImageSourceMemberBytes{Value: c.Data}}})
				case BlockDocument:
					content = append(content, &types.ToolResultContentBlockMemberDocument{Value: types.DocumentBlock{
						Format: types.DocumentFormat(c.Format), Name: aws.String(c.Name), Source: &types.DocumentSourceMemberBytes{Value: c.Data}}})
				default:
					return nil, fmt.Errorf("block %d: tool_result content of kind %q", i, c.Kind)
				}
			}
			cb = &types.ContentBlockMemberToolResult{Value: types.ToolResultBlock{ToolUseId: aws.String(b.ID),
				Content: content, Status: types.ToolResultStatus(b.Status)}}
		case BlockCachePoint:
			cb = &types.ContentBlockMemberCachePoint{Value: cachePoint}
		case BlockReasoning:
			rt := types.ReasoningTextBlock{Text: aws.String(b.Text)}
			if b.Signature != "" {
				rt.Signature = aws.String(b.Signature)
			}
			cb = &types.ContentBlockMemberReasoningContent{Value: &types.ReasoningContentBlockMemberReasoningText{Value: rt}}
		default:
			return nil, fmt.Errorf("block %d: unknown kind %q", i, b.Kind)
		}
		out = append(out, cb)
	}
	return out, nil
}

// cachePoint is Bedrock's cache point block (the default 5-minute cache).
var cachePoint = types.CachePointBlock{Type: types.CachePointTypeDefault}

// toolConfig converts tools and a tool choice to Bedrock's toolConfig.
func toolConfig(tools []Tool, choice *ToolChoice) (*types.ToolConfiguration, error) {
	tc := &types.ToolConfiguration{Tools: make([]types.Tool, len(tools))}
	for i, t := range tools {
		schema, err := jsonDocument(t.InputSchema)
		if err != nil {
			return nil, fmt.Errorf("tool %q: input schema: %w", t.Name, err)
		}
		spec := types.ToolSpecification{Name: aws.String(t.Name), InputSchema: &types.ToolInputSchemaMemberJson{Value: schema}}
		if t.Description != "" {
			spec.Description = aws.String(t.Description)
		}
		tc.Tools[i] = &types.ToolMemberToolSpec{Value: spec}
	}
	if choice != nil {
		switch choice.Mode {
		case ToolChoiceAuto:
			tc.ToolChoice = &types.ToolChoiceMemberAuto{}
		case ToolChoiceAny:
			tc.ToolChoice = &types.ToolChoiceMemberAny{}
		case ToolChoiceTool:
			tc.ToolChoice = &types.ToolChoiceMemberTool{Value: types.SpecificToolChoice{Name: aws.String(choice.Name)}}
		default:
			return nil, fmt.Errorf("tool choice %q", choice.Mode)
		}
	}
	return tc, nil
}

// reasoningFields is additionalModelRequestFields asking for reasoning
// with a budget, in the form Anthropic's models on Bedrock take.
func reasoningFields(budget int) document.Interface {
	return document.NewLazyDocument(map[string]any{"thinking": map[string]any{"type": "enabled", "budget_tokens": budget}})
}

// jsonDocument turns a JSON value into a Bedrock document, numbers kept
// exactly (document.Number) rather than rounded through float64.
func jsonDocument(raw json.RawMessage) (document.Interface, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return document.NewLazyDocument(exactNumbers(v)), nil
}

func exactNumbers(v any) any {
	switch v := v.(type) {
	case json.Number:
		return smithydoc.Number(v)
	case map[string]any:
		for k, e := range v {
			v[k] = exactNumbers(e)
		}
	case []any:
		for i, e := range v {
			v[i] = exactNumbers(e)
		}
	}
	return v
}
