package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"go.uber.org/zap"

	"github.com/jetway-gateway/jetway/internal/call"
	"github.com/jetway-gateway/jetway/internal/door"
	"github.com/jetway-gateway/jetway/internal/gateway"
	"github.com/jetway-gateway/jetway/internal/protocol"
	"github.com/jetway-gateway/jetway/internal/stream"
)

// chatRequest is the part of a Chat Completions body Jetway serves.
type chatRequest struct {
	Model               string        `json:"model"`
	Messages            []chatMessage `json:"messages"`
	MaxTokens           *int          `json:"max_tokens"`
	MaxCompletionTokens *int          `json:"max_completion_tokens"`
	Temperature         *float64      `json:"temperature"`
	TopP                *float64      `json:"top_p"`
	Stop                stopList      `json:"stop"`
	Stream              bool          `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	User        string          `json:"user"`
	Tools       []chatTool      `json:"tools"`
	ToolChoice  json.RawMessage `json:"tool_choice"`
	ServiceTier *string         `json:"service_tier"`

	// origin names the OpenAI parameters behind the protocol request's fields.
	origin *origins
}

type chatMessage struct {
	Role       string         `json:"role"`
	Content    content        `json:"content"`
	ToolCalls  []chatToolCall `json:"tool_calls"`   // assistant
	ToolCallID string         `json:"tool_call_id"` // tool
}

// chatTool is one entry of `tools`.
type chatTool struct {
	Type     string `json:"type"`
	Function struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
		Strict      *bool           `json:"strict"`
	} `json:"function"`
}

// chatToolCall is one entry of an assistant message's `tool_calls`.
type chatToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// stopList is `stop`: a string or an array of strings.
type stopList []string

func (s *stopList) UnmarshalJSON(b []byte) error {
	if bytes.Equal(b, []byte("null")) {
		*s = nil
		return nil
	}
	var one string
	if json.Unmarshal(b, &one) == nil {
		*s = stopList{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return errors.New("stop must be a string or an array of strings")
	}
	*s = many
	return nil
}

// served are the parameters Jetway honours; answerNeutral are accepted
// because they do not change the answer. Every other parameter is refused
// with a 400 naming it, unless it is null or one of its neutral values.
var (
	served = map[string]bool{"model": true, "messages": true, "max_tokens": true, "max_completion_tokens": true,
		"temperature": true, "top_p": true, "stop": true, "stream": true, "stream_options": true, "user": true,
		"tools": true, "tool_choice": true, "service_tier": true}
	answerNeutral = map[string]bool{"metadata": true, "store": true,
		"prompt_cache_key": true, "safety_identifier": true}
	// neutralValues: values of otherwise unsupported parameters that ask for
	// nothing Jetway does not do (compact JSON).
	neutralValues = map[string][]string{
		"n": {"1"}, "logprobs": {"false"}, "presence_penalty": {"0"}, "frequency_penalty": {"0"},
		"functions": {"[]"}, "parallel_tool_calls": {"true"},
		"response_format": {`{"type":"text"}`}, "modalities": {`["text"]`},
	}
)

// requestError is a 400 that names the offending parameter.
type requestError struct {
	code, param, msg string
}

func (e *requestError) Error() string { return e.msg }

// Unwrap makes it an invalid request to the gateway (its usage record and
// refusal budget); the door answers with its own shape.
func (e *requestError) Unwrap() error { return call.ErrInvalid }

func badParam(param, format string, args ...any) *requestError {
	return &requestError{code: "invalid_request", param: param, msg: fmt.Sprintf(format, args...)}
}

func unsupported(param, why string) *requestError {
	return &requestError{code: "unsupported_parameter", param: param,
		msg: fmt.Sprintf("%s is not supported by this gateway%s: remove it (it would change the answer)", param, why)}
}

// chat is a Chat Completions body turned into the core's request.
type chat struct {
	req chatRequest
	in  protocol.Inbound
}

func parse(body []byte, requestID string) (*chat, error) {
	req, in, err := parseChat(body, requestID)
	return &chat{req: req, in: in}, err
}

// Request is the core's request.
func (c *chat) Request() gateway.Request {
	r := c.in.Call()
	r.TopP, r.Stop = c.req.TopP, c.req.Stop
	return gateway.Request{Request: r, RequestID: c.in.RequestID, IsRequest: true}
}

// Codec is chat.completion.chunk events, or one chat.completion body.
func (c *chat) Codec() (stream.Codec, bool) {
	if c.req.Stream {
		return events{usage: c.req.StreamOptions != nil && c.req.StreamOptions.IncludeUsage}, true
	}
	return completion{}, false
}

// Log logs nothing: user is not logged.
func (c *chat) Log(*zap.Logger) {}

// Names names the protocol request's fields as the OpenAI parameters.
func (c *chat) Names() door.Namer {
	if c.req.origin == nil {
		return nil
	}
	return c.req.origin
}

// parseChat decodes and checks a Chat Completions body and turns it into
// the WebSocket protocol's request fields (validated by the same rules).
func parseChat(body []byte, requestID string) (chatRequest, protocol.Inbound, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil {
		return chatRequest{}, protocol.Inbound{}, badParam("", "the body is not a JSON object: %s", door.JSONProblem(err))
	}
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	sort.Strings(keys) // the same body names the same parameter first
	for _, k := range keys {
		if served[k] || answerNeutral[k] {
			continue
		}
		v := door.CompactJSON(raw[k])
		if v == "null" || slices.Contains(neutralValues[k], v) {
			continue
		}
		why := ""
		switch k {
		case "n":
			why = " (n > 1: one choice per request)"
		case "functions", "function_call":
			why = " (the deprecated function calling: use tools)"
		case "parallel_tool_calls":
			why = " (parallel_tool_calls false: Bedrock cannot hold an answer to one tool call)"
		}
		return chatRequest{}, protocol.Inbound{}, unsupported(truncate(k, 64), why)
	}
	var req chatRequest
	if err := json.Unmarshal(body, &req); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			path, problem := door.TypeProblem(te)
			return req, protocol.Inbound{}, badParam(path, "%s", problem)
		}
		return req, protocol.Inbound{}, badParam("stop", "%s", err.Error())
	}
	if req.StreamOptions != nil && !req.Stream {
		return req, protocol.Inbound{}, badParam("stream_options", "stream_options is only allowed with stream: true")
	}
	in := protocol.Inbound{Type: protocol.TypeRequest, RequestID: requestID, Temperature: req.Temperature}
	if req.Model != "default" {
		in.Model = req.Model
	}
	switch mt, mct := req.MaxTokens, req.MaxCompletionTokens; {
	case mt != nil && mct != nil && *mt != *mct:
		return req, in, badParam("max_completion_tokens", "max_tokens and max_completion_tokens disagree: send one")
	case mct != nil:
		in.MaxTokens = *mct
	case mt != nil:
		in.MaxTokens = *mt
	}
	if in.MaxTokens < 0 || (req.MaxTokens != nil || req.MaxCompletionTokens != nil) && in.MaxTokens == 0 {
		return req, in, badParam("max_tokens", "max_tokens must be positive")
	}
	if t := req.TopP; t != nil && (*t < 0 || *t > 1) {
		return req, in, badParam("top_p", "top_p must be between 0 and 1")
	}
	if i, problem := protocol.StopProblem(req.Stop); problem != "" && i < 0 {
		return req, in, badParam("stop", "stop: %s", problem)
	} else if problem != "" {
		return req, in, badParam("stop", "stop[%d]: %s", i, problem)
	}
	if req.ServiceTier != nil {
		tier, err := serviceTier(*req.ServiceTier)
		if err != nil {
			return req, in, err
		}
		in.ServiceTier = tier
	}
	origin, err := translate(&req, &in)
	req.origin = origin
	if err != nil {
		return req, in, err
	}
	if err := protocol.ValidateRequest(&in); err != nil {
		return req, in, origin.requestErr(err)
	}
	return req, in, nil
}

// serviceTier reads service_tier as OpenAI defines it (door.OpenAIServiceTier).
func serviceTier(v string) (string, *requestError) {
	tier, code, msg := door.OpenAIServiceTier(v)
	if code != "" {
		return "", &requestError{code: code, param: "service_tier", msg: msg}
	}
	return tier, nil
}

// content is a message's content, decoded in one pass over its bytes (an
// image's data URL is not copied through a json.RawMessage first): a
// string or content parts. Another shape sets bad, which the translation
// refuses naming the message.
type content struct {
	text  string
	parts []contentPart // nil: the string form (or null)
	bad   bool
}

func (c *content) UnmarshalJSON(data []byte) error {
	switch {
	case string(data) == "null":
	case data[0] == '"':
		c.bad = json.Unmarshal(data, &c.text) != nil
	case data[0] == '[':
		c.bad = json.Unmarshal(data, &c.parts) != nil
		if c.parts == nil {
			c.parts = []contentPart{}
		}
	default:
		c.bad = true
	}
	return nil
}

// contentPart is one entry of a content array.
type contentPart struct {
	Type     string `json:"type"`
	Text     string `json:"text"`
	ImageURL *struct {
		URL    string `json:"url"`
		Detail string `json:"detail"`
	} `json:"image_url"`
}

// contentText reads a message's content: a string, or text content parts.
func contentText(c content, param string) (string, error) {
	if c.bad {
		return "", badParam(param+".content", "%s.content must be a string or an array of content parts", param)
	}
	if c.parts == nil {
		return c.text, nil
	}
	var b strings.Builder
	for j, p := range c.parts {
		if p.Type != "text" {
			return "", unsupported(fmt.Sprintf("%s.content[%d].type", param, j), fmt.Sprintf(" (content type %q: text only)", truncate(p.Type, 40)))
		}
		b.WriteString(p.Text)
	}
	return b.String(), nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
