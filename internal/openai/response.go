package openai

import (
	"encoding/json"
	"strconv"

	"github.com/jetway-gateway/jetway/internal/call"
	"github.com/jetway-gateway/jetway/internal/protocol"
	"github.com/jetway-gateway/jetway/internal/stream"
)

// events is the door's streaming codec: a request's events as
// chat.completion.chunk Server-Sent Events, each encoded once per request
// (and per include_usage choice) for every follower and resume.
type events struct{ usage bool }

func (c events) NewEncoder(l *stream.Log) stream.Encoder {
	return &eventEncoder{requestID: l.RequestID, created: l.Created.Unix(), usage: c.usage}
}

type eventEncoder struct {
	requestID string
	created   int64
	usage     bool
	prefix    []byte      // a chunk event's JSON up to the delta object
	toolIndex map[int]int // the answer's block index -> its tool call's index in tool_calls
}

// Accepted sends nothing: it names the model of the chunk events.
func (e *eventEncoder) Accepted(a *stream.Accepted) []byte {
	e.prefix = appendHead(nil, e.requestID, e.created, a.Model, "")
	return nil
}

// toolCall is the index in delta.tool_calls of the tool call in answer
// block `block`: tool calls are numbered 0, 1, ... in the order they start.
func (e *eventEncoder) toolCall(block int) int {
	i, ok := e.toolIndex[block]
	if !ok {
		if e.toolIndex == nil {
			e.toolIndex = map[int]int{}
		}
		i = len(e.toolIndex)
		e.toolIndex[block] = i
	}
	return i
}

// Chunk is one chunk event. The first chunk also carries the role. A text
// piece is delta.content; a tool call's first piece is a delta.tool_calls
// entry with its id, type and name, its input fragments entries with
// function.arguments; a reasoning piece, which OpenAI's chat API has no
// field for, is an event with an empty delta, so every seq still has its
// event (a client counting events knows its Last-Event-ID).
func (e *eventEncoder) AppendChunk(dst []byte, seq int, c call.Piece) []byte {
	if e.prefix == nil {
		e.prefix = appendHead(nil, e.requestID, e.created, "", "")
	}
	dst = append(dst, "id: "...)
	dst = strconv.AppendInt(dst, int64(seq), 10)
	dst = append(dst, "\ndata: "...)
	dst = append(dst, e.prefix...)
	dst = append(dst, '{')
	if seq == 1 {
		dst = append(dst, `"role":"assistant"`...)
	}
	switch c.Kind {
	case protocol.KindReasoning:
	case protocol.KindToolUse:
		if seq == 1 {
			dst = append(dst, ',')
		}
		dst = append(dst, `"tool_calls":[{"index":`...)
		dst = strconv.AppendInt(dst, int64(e.toolCall(c.Block)), 10)
		if c.ID != "" || c.Name != "" {
			dst = append(dst, `,"id":`...)
			dst = appendString(dst, c.ID)
			dst = append(dst, `,"type":"function","function":{"name":`...)
			dst = appendString(dst, c.Name)
			dst = append(dst, ',')
		} else {
			dst = append(dst, `,"function":{`...)
		}
		dst = append(dst, `"arguments":`...)
		dst = appendString(dst, c.Input)
		dst = append(dst, "}}]"...)
	default:
		if seq == 1 {
			dst = append(dst, ',')
		}
		dst = append(dst, `"content":`...)
		dst = appendString(dst, c.Text)
	}
	return append(dst, "},\"finish_reason\":null}]}\n\n"...)
}

// Terminal is the finish event (and the usage event when asked for) or
// one error event carrying what was streamed, then [DONE]. Both carry the
// answer's last seq as their id: the log's, or fewer when the terminal
// says the answer has fewer chunks (a Last-Event-ID past the end is never
// echoed back). They carry service_tier, the tier that served, when the
// model call named one: OpenAI sends it on every chunk, but the tier is
// known only at the end (an encoder's bytes depend on the log's events
// alone, and the chunks before come before the terminal).
func (e *eventEncoder) Terminal(t *stream.Terminal, chunks int) []byte {
	last := chunks
	if n := t.Chunks(); n >= 0 {
		last = min(last, n)
	}
	id := "id: " + strconv.Itoa(last) + "\ndata: "
	var dst []byte
	if t.Error != nil {
		b, _ := json.Marshal(fromProtocol(*t.Error, true).body(e.requestID))
		dst = append(dst, id...)
		dst = append(dst, b...)
		return append(dst, "\n\ndata: [DONE]\n\n"...)
	}
	done := t.Done
	dst = append(dst, id...)
	dst = appendHead(dst, e.requestID, e.created, done.Model, done.ServiceTier)
	dst = append(dst, `{},"finish_reason":`...)
	dst = appendString(dst, finishReason(done.StopReason))
	dst = append(dst, "}]}\n\n"...)
	if e.usage {
		u, _ := json.Marshal(usageOf(done.Usage))
		dst = append(dst, id...)
		head := appendHead(nil, e.requestID, e.created, done.Model, done.ServiceTier)
		dst = append(dst, head[:len(head)-len(`{"index":0,"delta":`)]...) // `...,"choices":[`
		dst = append(dst, `],"usage":`...)
		dst = append(dst, u...)
		dst = append(dst, "}\n\n"...)
	}
	return append(dst, "data: [DONE]\n\n"...)
}

// appendHead appends a chunk object's opening: id, object, created,
// model, service_tier (when tier is not ""), choices[0].
func appendHead(dst []byte, requestID string, created int64, model, tier string) []byte {
	dst = append(dst, `{"id":"chatcmpl-`...)
	dst = append(dst, requestID...) // [A-Za-z0-9_-]: nothing to escape
	dst = append(dst, `","object":"chat.completion.chunk","created":`...)
	dst = strconv.AppendInt(dst, created, 10)
	dst = append(dst, `,"model":`...)
	dst = appendString(dst, model)
	if tier != "" {
		dst = append(dst, `,"service_tier":`...)
		dst = appendString(dst, tier)
	}
	return append(dst, `,"choices":[{"index":0,"delta":`...)
}

// appendString appends v as JSON (json.Marshal's bytes, without its
// allocation per chunk).
func appendString(dst []byte, v string) []byte { return call.AppendJSONString(dst, v) }

// completion is the door's codec of a whole answer: only the terminal, as
// one chat.completion body (nil for an error, which the door answers with
// its HTTP status).
type completion struct{}

func (completion) NewEncoder(l *stream.Log) stream.Encoder {
	return completionEncoder{requestID: l.RequestID, created: l.Created.Unix()}
}

type completionEncoder struct {
	requestID string
	created   int64
}

func (completionEncoder) Accepted(*stream.Accepted) []byte                   { return nil }
func (completionEncoder) AppendChunk(dst []byte, _ int, _ call.Piece) []byte { return dst }

func (e completionEncoder) Terminal(t *stream.Terminal, _ int) []byte {
	done := t.Done
	if done == nil {
		return nil
	}
	type function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	}
	type toolCall struct {
		ID       string   `json:"id"`
		Type     string   `json:"type"`
		Function function `json:"function"`
	}
	type message struct {
		Role      string     `json:"role"`
		Content   *string    `json:"content"`
		Refusal   *string    `json:"refusal"`
		ToolCalls []toolCall `json:"tool_calls,omitempty"`
	}
	msg := message{Role: "assistant", Content: &done.Text}
	for _, b := range done.Blocks {
		if b.Type != call.BlockToolUse {
			continue
		}
		msg.ToolCalls = append(msg.ToolCalls, toolCall{ID: b.ID, Type: "function", Function: function{Name: b.Name, Arguments: string(b.Input)}})
	}
	if done.Text == "" && len(msg.ToolCalls) > 0 {
		msg.Content = nil // OpenAI's content of a message that only calls tools
	}
	type choice struct {
		Index        int       `json:"index"`
		Message      message   `json:"message"`
		FinishReason string    `json:"finish_reason"`
		Logprobs     *struct{} `json:"logprobs"`
	}
	b, _ := json.Marshal(struct {
		ID          string   `json:"id"`
		Object      string   `json:"object"`
		Created     int64    `json:"created"`
		Model       string   `json:"model"`
		ServiceTier string   `json:"service_tier,omitempty"` // the tier that served, when the model call named one
		Choices     []choice `json:"choices"`
		Usage       usage    `json:"usage"`
	}{ID: "chatcmpl-" + e.requestID, Object: "chat.completion", Created: e.created, Model: done.Model,
		ServiceTier: done.ServiceTier, Choices: []choice{{Message: msg, FinishReason: finishReason(done.StopReason)}},
		Usage: usageOf(done.Usage)})
	return append(b, '\n')
}

type usage struct {
	PromptTokens        int64          `json:"prompt_tokens"`
	CompletionTokens    int64          `json:"completion_tokens"`
	TotalTokens         int64          `json:"total_tokens"`
	PromptTokensDetails *promptDetails `json:"prompt_tokens_details,omitempty"`
}

// promptDetails is OpenAI's breakdown of prompt_tokens: cached_tokens
// were read from the prompt cache.
type promptDetails struct {
	CachedTokens int64 `json:"cached_tokens"`
}

// usageOf is OpenAI's usage: prompt_tokens counts every input token
// (cached or not, as OpenAI's does); prompt_tokens_details.cached_tokens,
// present when the model used its prompt cache, those read from it.
func usageOf(u protocol.Usage) usage {
	out := usage{PromptTokens: u.AllInput(), CompletionTokens: u.OutputTokens, TotalTokens: u.Total()}
	if u.CacheReadInputTokens > 0 || u.CacheWriteInputTokens > 0 {
		out.PromptTokensDetails = &promptDetails{CachedTokens: u.CacheReadInputTokens}
	}
	return out
}

// finishReason maps Bedrock's stop reason to OpenAI's.
func finishReason(stop string) string {
	switch stop {
	case "max_tokens":
		return "length"
	case "guardrail_intervened", "content_filtered":
		return "content_filter"
	case protocol.StopToolUse:
		return "tool_calls"
	default:
		return "stop"
	}
}
