package mockmodel

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
)

// Bedrock's own bounds on attachments (Converse API), which the mock
// enforces with a ValidationException as Bedrock does.
const (
	maxImageBytes    = 3932160 // 3.75 MiB
	maxDocumentBytes = 4718592 // 4.5 MiB
	maxImages        = 20
	maxDocuments     = 5
	// attachmentBytesPerToken is the mock's input-token rule for images and
	// documents: one token per started 1,000 bytes.
	attachmentBytesPerToken = 1000
	// reasoningTokens is how many reasoning pieces mock-reasoning streams
	// before its text (fewer when maxTokens or the budget is smaller).
	reasoningTokens = 16
	// toolPreambleTokens is how many text pieces precede a tool call.
	toolPreambleTokens = 4
	// toolInputFragment is the size in bytes of each toolUse input delta.
	toolInputFragment = 8
	// mockSignature is the signature of every reasoning block.
	mockSignature = "mock-signature"
)

// Model ids with block behaviour (see the package comment).
const (
	modelTools     = "mock-tools"
	modelReasoning = "mock-reasoning"
)

var (
	imageFormats    = map[string]bool{"png": true, "jpeg": true, "gif": true, "webp": true}
	documentFormats = map[string]bool{"pdf": true, "csv": true, "doc": true, "docx": true, "xls": true,
		"xlsx": true, "html": true, "txt": true, "md": true}
)

// contentBlock is one ContentBlock union of a Converse request (blobs are
// base64 in JSON, which encoding/json decodes into []byte).
type contentBlock struct {
	Text       *string   `json:"text"`
	CachePoint *struct{} `json:"cachePoint"`
	Image      *struct {
		Format string `json:"format"`
		Source struct {
			Bytes []byte `json:"bytes"`
		} `json:"source"`
	} `json:"image"`
	Document *struct {
		Format string `json:"format"`
		Name   string `json:"name"`
		Source struct {
			Bytes []byte `json:"bytes"`
		} `json:"source"`
	} `json:"document"`
	ToolUse *struct {
		ToolUseID string          `json:"toolUseId"`
		Name      string          `json:"name"`
		Input     json.RawMessage `json:"input"`
	} `json:"toolUse"`
	ToolResult *struct {
		ToolUseID string         `json:"toolUseId"`
		Content   []contentBlock `json:"content"`
		Status    string         `json:"status"`
	} `json:"toolResult"`
	ReasoningContent *struct {
		ReasoningText *struct {
			Text      string `json:"text"`
			Signature string `json:"signature"`
		} `json:"reasoningText"`
	} `json:"reasoningContent"`
}

// toolConfig is a Converse request's toolConfig.
type toolConfig struct {
	Tools []struct {
		CachePoint *struct{} `json:"cachePoint"`
		ToolSpec   *struct {
			Name        string `json:"name"`
			Description string `json:"description"`
			InputSchema struct {
				JSON json.RawMessage `json:"json"`
			} `json:"inputSchema"`
		} `json:"toolSpec"`
	} `json:"tools"`
	ToolChoice *struct {
		Auto *struct{} `json:"auto"`
		Any  *struct{} `json:"any"`
		Tool *struct {
			Name string `json:"name"`
		} `json:"tool"`
	} `json:"toolChoice"`
}

// blockCounts is what validation found in a request's blocks.
type blockCounts struct {
	images, documents, toolBlocks int
	attachmentBytes               int
	lastHasToolResult             bool
	cachePoints                   bool // any cachePoint block (system, messages, tools)
}

// checkBlocks validates one message's blocks as Bedrock does.
func checkBlocks(path string, blocks []contentBlock, c *blockCounts, inResult bool) error {
	for j, b := range blocks {
		p := path + "[" + strconv.Itoa(j) + "]"
		switch {
		case b.Text != nil:
		case b.CachePoint != nil && !inResult:
			c.cachePoints = true
		case b.Image != nil:
			if !imageFormats[b.Image.Format] {
				return fmt.Errorf("%s.image.format: unsupported format %q", p, b.Image.Format)
			}
			if n := len(b.Image.Source.Bytes); n == 0 || n > maxImageBytes {
				return fmt.Errorf("%s.image.source.bytes: size %d is not between 1 and %d bytes", p, n, maxImageBytes)
			}
			c.images++
			c.attachmentBytes += len(b.Image.Source.Bytes)
		case b.Document != nil:
			if !documentFormats[b.Document.Format] {
				return fmt.Errorf("%s.document.format: unsupported format %q", p, b.Document.Format)
			}
			if b.Document.Name == "" {
				return fmt.Errorf("%s.document.name: a name is required", p)
			}
			if n := len(b.Document.Source.Bytes); n == 0 || n > maxDocumentBytes {
				return fmt.Errorf("%s.document.source.bytes: size %d is not between 1 and %d bytes", p, n, maxDocumentBytes)
			}
			c.documents++
			c.attachmentBytes += len(b.Document.Source.Bytes)
		case b.ToolUse != nil && !inResult:
			if b.ToolUse.ToolUseID == "" || b.ToolUse.Name == "" {
				return fmt.Errorf("%s.toolUse: toolUseId and name are required", p)
			}
			c.toolBlocks++
		case b.ToolResult != nil && !inResult:
			if b.ToolResult.ToolUseID == "" {
				return fmt.Errorf("%s.toolResult.toolUseId: required", p)
			}
			if err := checkBlocks(p+".toolResult.content", b.ToolResult.Content, c, true); err != nil {
				return err
			}
			c.toolBlocks++
		case b.ReasoningContent != nil && !inResult:
		default:
			return fmt.Errorf("%s: the content block has no member the model accepts", p)
		}
	}
	return nil
}

// checkTools validates toolConfig and returns the tool the answer calls
// ("" for none): the named tool of toolChoice.tool; the first tool for
// toolChoice.any or for model mock-tools.
func checkTools(tc *toolConfig, modelID string, c *blockCounts) (string, error) {
	if tc == nil {
		if c.toolBlocks > 0 {
			return "", fmt.Errorf("toolConfig: the messages contain toolUse or toolResult blocks, so toolConfig is required")
		}
		return "", nil
	}
	if len(tc.Tools) == 0 {
		return "", fmt.Errorf("toolConfig.tools: at least one tool is required")
	}
	names := make(map[string]bool, len(tc.Tools))
	first := ""
	for i, t := range tc.Tools {
		if t.CachePoint != nil && t.ToolSpec == nil {
			c.cachePoints = true
			continue
		}
		if t.ToolSpec == nil || t.ToolSpec.Name == "" || len(t.ToolSpec.InputSchema.JSON) == 0 {
			return "", fmt.Errorf("toolConfig.tools[%d].toolSpec: name and inputSchema.json are required", i)
		}
		names[t.ToolSpec.Name] = true
		if first == "" {
			first = t.ToolSpec.Name
		}
	}
	if first == "" {
		return "", fmt.Errorf("toolConfig.tools: at least one tool is required")
	}
	call := ""
	if modelID == modelTools {
		call = first
	}
	if ch := tc.ToolChoice; ch != nil {
		switch {
		case ch.Tool != nil:
			if !names[ch.Tool.Name] {
				return "", fmt.Errorf("toolConfig.toolChoice.tool.name: %q is not one of the tools", ch.Tool.Name)
			}
			call = ch.Tool.Name
		case ch.Any != nil:
			call = first
		case ch.Auto != nil:
		default:
			return "", fmt.Errorf("toolConfig.toolChoice: one of auto, any or tool is required")
		}
	}
	if c.lastHasToolResult {
		call = "" // the tool answered: the model answers in text
	}
	return call, nil
}

// checkThinking validates additionalModelRequestFields.thinking (Claude's
// extended thinking) and returns its budget (0: not given).
func checkThinking(fields json.RawMessage, maxTokens int) (int, error) {
	if len(fields) == 0 {
		return 0, nil
	}
	var f struct {
		Thinking *struct {
			Type         string `json:"type"`
			BudgetTokens int    `json:"budget_tokens"`
		} `json:"thinking"`
	}
	if err := json.Unmarshal(fields, &f); err != nil {
		return 0, fmt.Errorf("additionalModelRequestFields: %v", err)
	}
	t := f.Thinking
	if t == nil {
		return 0, nil
	}
	if t.Type != "enabled" || t.BudgetTokens < 1024 {
		return 0, fmt.Errorf("additionalModelRequestFields.thinking: type must be \"enabled\" and budget_tokens at least 1024")
	}
	if maxTokens > 0 && t.BudgetTokens >= maxTokens {
		return 0, fmt.Errorf("additionalModelRequestFields.thinking.budget_tokens: must be less than maxTokens")
	}
	return t.BudgetTokens, nil
}

// attachmentTokens is the mock's input-token count for attachments.
func attachmentTokens(c blockCounts) int {
	return (c.attachmentBytes + attachmentBytesPerToken - 1) / attachmentBytesPerToken
}

// blockAnswer is an answer with more than one text block: reasoning
// first (mock-reasoning), then text, then a tool call when one is due.
type blockAnswer struct {
	reasoning int    // reasoning pieces
	text      int    // text pieces
	tool      string // the tool called, "" for none
	toolID    string
	toolInput string
}

// planBlocks decides the answer's blocks within limit output tokens.
func planBlocks(modelID string, req request, limit int) blockAnswer {
	var a blockAnswer
	if modelID == modelReasoning {
		a.reasoning = min(reasoningTokens, limit)
		if req.thinkingBudget > 0 {
			a.reasoning = min(a.reasoning, req.thinkingBudget)
		}
	}
	a.text = limit - a.reasoning
	if req.tool != "" && a.text > 0 {
		a.text = min(a.text, toolPreambleTokens)
		a.tool = req.tool
		a.toolID, a.toolInput = Tool(len(req.messages), req.messages[len(req.messages)-1])
	}
	return a
}

// Tool returns the tool call the server makes for a conversation of n
// messages whose last message's text is lastText: the call's id and its
// input JSON, {"query": the first three words of lastText}.
func Tool(n int, lastText string) (id, input string) {
	f := strings.Fields(lastText)
	return "tooluse_mock_" + strconv.Itoa(n), string(mustJSON(map[string]string{"query": strings.Join(f[:min(3, len(f))], " ")}))
}

// streamBlocks writes a blockAnswer's events after messageStart and returns
// the output tokens sent and the stop reason; ok is false when the client
// went away.
func (s *Server) streamBlocks(ctx context.Context, w io.Writer, p *pacer, modelID string, req request, a blockAnswer, stop string) (int, string, bool) {
	enc := eventstream.NewEncoder()
	event := func(eventType string, v any) bool {
		return writeEvent(enc, w, eventType, mustJSON(v)) == nil
	}
	type delta map[string]any
	i, block := 0, 0
	if a.reasoning > 0 {
		words := newWordSource(modelID+"/reasoning", req.system, req.messages)
		for k := range a.reasoning {
			if p.wait(ctx, i) != nil || !event("contentBlockDelta", delta{"contentBlockIndex": block,
				"delta": delta{"reasoningContent": delta{"text": piece(k, words.next())}}}) {
				return i, stop, false
			}
			i++
		}
		if !event("contentBlockDelta", delta{"contentBlockIndex": block, "delta": delta{"reasoningContent": delta{"signature": mockSignature}}}) ||
			!event("contentBlockStop", delta{"contentBlockIndex": block}) {
			return i, stop, false
		}
		block++
	}
	if a.text > 0 {
		words := newWordSource(modelID, req.system, req.messages)
		for k := range a.text {
			if p.wait(ctx, i) != nil || !event("contentBlockDelta", delta{"contentBlockIndex": block, "delta": delta{"text": piece(k, words.next())}}) {
				return i, stop, false
			}
			i++
		}
		if !event("contentBlockStop", delta{"contentBlockIndex": block}) {
			return i, stop, false
		}
		block++
	}
	if a.tool != "" {
		if !event("contentBlockStart", delta{"contentBlockIndex": block, "start": delta{"toolUse": delta{"toolUseId": a.toolID, "name": a.tool}}}) {
			return i, stop, false
		}
		for in := a.toolInput; in != ""; {
			n := toolFragment(in)
			if p.wait(ctx, i) != nil || !event("contentBlockDelta", delta{"contentBlockIndex": block, "delta": delta{"toolUse": delta{"input": in[:n]}}}) {
				return i, stop, false
			}
			in = in[n:]
			i++
		}
		if !event("contentBlockStop", delta{"contentBlockIndex": block}) {
			return i, stop, false
		}
		stop = stopToolUse
	}
	return i, stop, true
}

// toolFragment returns the length of the first toolUse input delta of in
// (non-empty): toolInputFragment bytes, more to end on a whole UTF-8 rune.
func toolFragment(in string) int {
	n := min(toolInputFragment, len(in))
	for n < len(in) && !utf8.RuneStart(in[n]) {
		n++
	}
	return n
}

// toolFragments is how many toolUse input deltas stream in: an output
// token each.
func toolFragments(in string) int {
	n := 0
	for ; in != ""; n++ {
		in = in[toolFragment(in):]
	}
	return n
}
