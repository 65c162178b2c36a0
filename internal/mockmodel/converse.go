package mockmodel

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// converse answers POST /model/{modelId}/converse, Bedrock's non-streaming
// Converse: the same request body, checks, faults, words, usage and pace as
// ConverseStream, answered in one JSON document when the stream would have
// ended (when its last token is due: TTFT + PerInputToken x the input
// tokens not read from the cache + PerToken x (output tokens - 1)):
//
//	{"output":{"message":{"role":"assistant","content":[{"text":"Lorem ipsum..."}]}},
//	 "stopReason":"end_turn",
//	 "usage":{"inputTokens":3,"outputTokens":16,"totalTokens":19},
//	 "metrics":{"latencyMs":250}}
//
// Content blocks are whole: mock-reasoning's reasoningContent (with its
// signature), the text, a toolUse with its input as a JSON object. The
// faults: mock-throttle, mock-unavailable and the knobs as for the stream;
// mock-fail-after-N a ModelErrorException (HTTP 424) when token N would
// have been due; mock-stall nothing at all until the client goes away;
// mock-guardrail its few tokens with stopReason "guardrail_intervened".
// serviceTier is echoed as in the stream's metadata event.
func (s *Server) converse(w http.ResponseWriter, r *http.Request) {
	s.active.Add(1)
	defer s.active.Add(-1)
	c, ok := s.prepare(w, r)
	if !ok {
		return
	}
	ctx := r.Context()
	ended := false // the answer was written
	defer func() {
		if !ended {
			s.abandoned.Add(1)
		}
	}()
	if c.f == faultStall {
		<-ctx.Done()
		return
	}
	p := s.pacer(&c, func() error { return nil })
	defer p.stop()
	if c.f == faultFailAfter {
		// The failure arrives when the next token would have.
		if p.wait(ctx, c.send) != nil {
			return
		}
		writeError(w, http.StatusFailedDependency, "ModelErrorException",
			fmt.Sprintf("mock model %s failed after %d tokens", c.named, c.send))
		ended = true
		return
	}

	content, tokens, stop := s.answerBlocks(&c)
	if p.wait(ctx, max(tokens-1, 0)) != nil {
		return
	}
	u := c.usage
	out := converseOutput{
		StopReason: stop,
		Usage: converseUsage{InputTokens: u.input, OutputTokens: tokens,
			TotalTokens: u.input + u.cacheRead + u.cacheWrite + tokens},
		Metrics: converseMetrics{LatencyMs: time.Since(c.start).Milliseconds()},
	}
	if u.cache {
		out.Usage.CacheReadInputTokens, out.Usage.CacheWriteInputTokens = &u.cacheRead, &u.cacheWrite
	}
	out.Output.Message.Role, out.Output.Message.Content = "assistant", content
	if c.tier != "" {
		out.ServiceTier = &serviceTier{Type: c.tier}
	}
	w.Header().Set("Content-Type", contentTypeJSON)
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(mustJSON(out))
	ended = true
}

// answerBlocks returns the content blocks of c's whole answer, its output
// tokens (as the stream counts them: a piece of text or reasoning, or a
// fragment of tool input, each) and its stop reason.
func (s *Server) answerBlocks(c *call) ([]converseBlock, int, string) {
	modelID, req := c.tg.base, c.req
	text := func(id string, n int) string {
		words := newWordSource(id, req.system, req.messages)
		var b strings.Builder
		for i := range n {
			b.WriteString(piece(i, words.next()))
		}
		return b.String()
	}
	if c.f == faultNone && (modelID == modelReasoning || req.tool != "") {
		a := planBlocks(modelID, req, c.limit)
		var blocks []converseBlock
		tokens, stop := a.reasoning+a.text, c.stop
		if a.reasoning > 0 {
			rt := &reasoningText{Text: text(c.tg.text+"/reasoning", a.reasoning), Signature: mockSignature}
			blocks = append(blocks, converseBlock{ReasoningContent: &reasoningContent{ReasoningText: rt}})
		}
		if a.text > 0 {
			t := text(c.tg.text, a.text)
			blocks = append(blocks, converseBlock{Text: &t})
		}
		if a.tool != "" {
			blocks = append(blocks, converseBlock{ToolUse: &toolUse{ToolUseID: a.toolID, Name: a.tool, Input: json.RawMessage(a.toolInput)}})
			tokens += toolFragments(a.toolInput)
			stop = stopToolUse
		}
		return blocks, tokens, stop
	}
	var t string
	if modelID == modelMarkdown {
		t = strings.Join(markdownPieces()[:c.send], "")
	} else {
		t = text(c.tg.text, c.send)
	}
	return []converseBlock{{Text: &t}}, c.send, c.stop
}

// converseOutput is the JSON document of a Converse answer.
type converseOutput struct {
	Output struct {
		Message struct {
			Role    string          `json:"role"`
			Content []converseBlock `json:"content"`
		} `json:"message"`
	} `json:"output"`
	StopReason  string          `json:"stopReason"`
	Usage       converseUsage   `json:"usage"`
	Metrics     converseMetrics `json:"metrics"`
	ServiceTier *serviceTier    `json:"serviceTier,omitempty"`
}

type converseUsage struct {
	InputTokens           int  `json:"inputTokens"`
	OutputTokens          int  `json:"outputTokens"`
	TotalTokens           int  `json:"totalTokens"`
	CacheReadInputTokens  *int `json:"cacheReadInputTokens,omitempty"`
	CacheWriteInputTokens *int `json:"cacheWriteInputTokens,omitempty"`
}

type converseMetrics struct {
	LatencyMs int64 `json:"latencyMs"`
}

// converseBlock is one content block of a Converse answer.
type converseBlock struct {
	Text             *string           `json:"text,omitempty"`
	ReasoningContent *reasoningContent `json:"reasoningContent,omitempty"`
	ToolUse          *toolUse          `json:"toolUse,omitempty"`
}

type reasoningContent struct {
	ReasoningText *reasoningText `json:"reasoningText"`
}

type reasoningText struct {
	Text      string `json:"text"`
	Signature string `json:"signature"`
}

type toolUse struct {
	ToolUseID string          `json:"toolUseId"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
}
