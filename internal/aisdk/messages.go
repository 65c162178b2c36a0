package aisdk

import (
	"encoding/json"
	"errors"
	"regexp"
	"strconv"
	"strings"

	"github.com/jetway-gateway/jetway/internal/call"
	"github.com/jetway-gateway/jetway/internal/protocol"
)

// uiMessage is the AI SDK's UIMessage, as far as the core needs it.
type uiMessage struct {
	ID    string   `json:"id"`
	Role  string   `json:"role"`
	Parts []uiPart `json:"parts"`
}

// uiPart is one part of a UIMessage. Type says which fields are set:
// text and reasoning (Text, ProviderMetadata), file (MediaType, URL,
// Filename), tool-<name> and dynamic-tool (ToolName, ToolCallID, State,
// Input, Output, ErrorText, Approval).
type uiPart struct {
	Type             string          `json:"type"`
	Text             string          `json:"text"`
	MediaType        string          `json:"mediaType"`
	URL              string          `json:"url"`
	Filename         string          `json:"filename"`
	ToolName         string          `json:"toolName"`
	ToolCallID       string          `json:"toolCallId"`
	State            string          `json:"state"`
	Input            json.RawMessage `json:"input"`
	Output           json.RawMessage `json:"output"`
	ErrorText        string          `json:"errorText"`
	Approval         *approval       `json:"approval"`
	ProviderMetadata struct {
		Jetway struct {
			Signature string `json:"signature"`
		} `json:"jetway"`
	} `json:"providerMetadata"`
}

type approval struct {
	Approved *bool  `json:"approved"`
	Reason   string `json:"reason"`
}

// options are a send frame's body (PROTOCOL.md, "The AI SDK door"):
// unknown keys are ignored.
type options struct {
	Model       string               `json:"model"`
	System      string               `json:"system"`
	MaxTokens   int                  `json:"max_tokens"`
	Temperature *float64             `json:"temperature"`
	Tools       []protocol.Tool      `json:"tools"`
	ToolChoice  *protocol.ToolChoice `json:"tool_choice"`
	Reasoning   *protocol.Reasoning  `json:"reasoning"`
	// ServiceTier is jetway.v1's: "default", "priority" or "flex"; "":
	// the app's.
	ServiceTier string `json:"service_tier"`
}

// badRequest is a send the door refuses (invalid_request), its field named.
func badRequest(path, format string, args ...any) error {
	return call.FieldErrorf(call.ErrInvalid, path, " "+format, args...)
}

// translate turns a send's messages and body into the core's request,
// validated by the rules every door shares (the jetway.v1 request's:
// attachments decoded and bounded, blocks, tools).
func translate(requestID string, messages []uiMessage, body json.RawMessage, regenerate bool) (call.Request, error) {
	var o options
	if len(body) > 0 {
		if err := json.Unmarshal(body, &o); err != nil {
			return call.Request{}, badRequest("body", "is not a valid options object: %s", jsonProblem(err))
		}
	}
	if regenerate && len(messages) > 0 && messages[len(messages)-1].Role == "assistant" {
		// The message being regenerated is replaced, not continued.
		messages = messages[:len(messages)-1]
	}
	in := protocol.Inbound{Type: protocol.TypeRequest, RequestID: requestID, Model: o.Model, MaxTokens: o.MaxTokens,
		Temperature: o.Temperature, Tools: o.Tools, ToolChoice: o.ToolChoice, Reasoning: o.Reasoning, ServiceTier: o.ServiceTier}
	var system []string
	if o.System != "" {
		system = append(system, o.System)
	}
	t := turns{}
	for i, m := range messages {
		path := "messages[" + strconv.Itoa(i) + "]"
		switch m.Role {
		case "system":
			for _, p := range m.Parts {
				if p.Type == "text" && p.Text != "" {
					system = append(system, p.Text)
				}
			}
		case "user":
			for j, p := range m.Parts {
				b, ok, err := userBlock(p, path+".parts["+strconv.Itoa(j)+"]")
				if err != nil {
					return call.Request{}, err
				}
				if ok {
					t.add("user", b)
				}
			}
		case "assistant":
			if err := t.assistant(m, path); err != nil {
				return call.Request{}, err
			}
		default:
			return call.Request{}, badRequest(path+".role", `must be "system", "user" or "assistant"`)
		}
	}
	t.flush()
	in.System = strings.Join(system, "\n\n")
	in.Messages = t.messages
	if len(in.Messages) == 0 {
		return call.Request{}, badRequest("messages", "hold no text, file or tool result to answer")
	}
	if err := protocol.ValidateRequest(&in); err != nil {
		return call.Request{}, err
	}
	return in.Call(), nil
}

// turns builds the conversation: consecutive blocks of one role are one
// turn, and an assistant message's tool calls with their outputs become
// its tool_use blocks, then a user turn of their results.
type turns struct {
	messages []protocol.Message
	results  []protocol.Block // tool results waiting for the assistant turn to end
}

func (t *turns) add(role string, b protocol.Block) {
	if n := len(t.messages); n > 0 && t.messages[n-1].Role == role {
		t.messages[n-1].Blocks = append(t.messages[n-1].Blocks, b)
		return
	}
	t.messages = append(t.messages, protocol.Message{Role: role, Blocks: []protocol.Block{b}})
}

// flush ends an assistant turn that called tools with the user turn of
// their results.
func (t *turns) flush() {
	for _, r := range t.results {
		t.add("user", r)
	}
	t.results = nil
	// A turn of one text block is the plain form, as a jetway.v1 client
	// sends it.
	for i := range t.messages {
		m := &t.messages[i]
		if len(m.Blocks) == 1 && m.Blocks[0].Type == protocol.BlockText {
			m.Content, m.Blocks = m.Blocks[0].Text, nil
		}
	}
}

func (t *turns) assistant(m uiMessage, path string) error {
	for j, p := range m.Parts {
		pp := path + ".parts[" + strconv.Itoa(j) + "]"
		switch {
		case p.Type == "step-start":
			if len(t.results) > 0 {
				results := t.results
				t.results = nil
				for _, r := range results {
					t.add("user", r)
				}
			}
		case p.Type == "text":
			if p.Text != "" {
				t.addAssistant(protocol.Block{Type: protocol.BlockText, Text: p.Text})
			}
		case p.Type == "reasoning":
			// Bedrock takes a reasoning block back only with its
			// signature; one without is the model's and stays here.
			if sig := p.ProviderMetadata.Jetway.Signature; sig != "" && p.Text != "" {
				t.addAssistant(protocol.Block{Type: protocol.BlockReasoning, Text: p.Text, Signature: sig})
			}
		case p.Type == "dynamic-tool" || strings.HasPrefix(p.Type, "tool-"):
			name := p.ToolName
			if name == "" {
				name = strings.TrimPrefix(p.Type, "tool-")
			}
			result, ok := toolResult(p)
			if !ok {
				continue // a call still waiting for its output is not sent back
			}
			input := p.Input
			if !isObject(input) {
				input = json.RawMessage("{}")
			}
			if !protocol.ValidToolUseID(p.ToolCallID) {
				return badRequest(pp+".toolCallId", "must be 1-64 characters of [A-Za-z0-9_-]")
			}
			t.addAssistant(protocol.Block{Type: protocol.BlockToolUse, ID: p.ToolCallID, Name: name, Input: input})
			t.results = append(t.results, result)
		}
	}
	if len(t.results) > 0 {
		results := t.results
		t.results = nil
		for _, r := range results {
			t.add("user", r)
		}
	}
	return nil
}

// addAssistant adds an assistant block; after tool results it starts a
// new assistant turn, after them.
func (t *turns) addAssistant(b protocol.Block) {
	if len(t.results) > 0 && b.Type != protocol.BlockToolUse {
		results := t.results
		t.results = nil
		for _, r := range results {
			t.add("user", r)
		}
	}
	t.add("assistant", b)
}

// toolResult is the tool_result block of a tool part that has its
// outcome: its output, its error, or the user's denial.
func toolResult(p uiPart) (protocol.Block, bool) {
	r := protocol.Block{Type: protocol.BlockToolResult, ToolUseID: p.ToolCallID}
	switch p.State {
	case "output-available":
		text := string(p.Output)
		var s string
		if json.Unmarshal(p.Output, &s) == nil {
			text = s
		}
		if text == "" {
			text = "(no output)"
		}
		r.Content = []protocol.Block{{Type: protocol.BlockText, Text: text}}
	case "output-error":
		r.Status = "error"
		r.Content = []protocol.Block{{Type: protocol.BlockText, Text: nonEmpty(p.ErrorText, "the tool failed")}}
	case "output-denied":
		r.Status = "error"
		reason := "the user denied this tool call"
		if p.Approval != nil && p.Approval.Reason != "" {
			reason += ": " + p.Approval.Reason
		}
		r.Content = []protocol.Block{{Type: protocol.BlockText, Text: reason}}
	default:
		return protocol.Block{}, false
	}
	return r, true
}

// userBlock is a user part's block; false for a part the model is not
// shown (step markers, sources, data parts).
func userBlock(p uiPart, path string) (protocol.Block, bool, error) {
	switch p.Type {
	case "text":
		if p.Text == "" {
			return protocol.Block{}, false, nil
		}
		return protocol.Block{Type: protocol.BlockText, Text: p.Text}, true, nil
	case "file":
		b, err := fileBlock(p, path)
		return b, err == nil, err
	}
	return protocol.Block{}, false, nil
}

// Media types of the file parts the model reads.
var (
	imageTypes = map[string]string{"image/png": "png", "image/jpeg": "jpeg", "image/gif": "gif", "image/webp": "webp"}
	docTypes   = map[string]string{"application/pdf": "pdf", "text/csv": "csv", "application/msword": "doc",
		"application/vnd.openxmlformats-officedocument.wordprocessingml.document": "docx",
		"application/vnd.ms-excel": "xls", "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet": "xlsx",
		"text/html": "html", "text/plain": "txt", "text/markdown": "md"}
)

// docName keeps the characters a document name may hold.
var docName = regexp.MustCompile(`[^A-Za-z0-9()\[\] -]+`)

// fileBlock is a file part's image or document block: its url must be a
// base64 data: URL (any other is refused, never fetched).
func fileBlock(p uiPart, path string) (protocol.Block, error) {
	rest, ok := strings.CutPrefix(p.URL, "data:")
	if !ok {
		return protocol.Block{}, badRequest(path+".url", "must be a base64 data: URL (the gateway fetches no URL)")
	}
	meta, data, ok := strings.Cut(rest, ",")
	if !ok || !strings.HasSuffix(meta, ";base64") {
		return protocol.Block{}, badRequest(path+".url", "must be a base64 data: URL (data:<media type>;base64,<data>)")
	}
	mediaType := strings.ToLower(cmpOr(strings.TrimSuffix(meta, ";base64"), p.MediaType))
	if i := strings.IndexByte(mediaType, ';'); i >= 0 {
		mediaType = mediaType[:i]
	}
	if f, ok := imageTypes[mediaType]; ok {
		return protocol.Block{Type: protocol.BlockImage, Format: f, Data: protocol.ParseData(data)}, nil
	}
	if f, ok := docTypes[mediaType]; ok {
		name := strings.Join(strings.Fields(docName.ReplaceAllString(strings.TrimSuffix(p.Filename, "."+f), " ")), " ")
		if name == "" {
			name = "document"
		}
		if len(name) > 100 {
			name = name[:100]
		}
		return protocol.Block{Type: protocol.BlockDocument, Format: f, Name: name, Data: protocol.ParseData(data)}, nil
	}
	return protocol.Block{}, badRequest(path+".mediaType", "%q is not a media type the model reads (png, jpeg, gif or webp images; pdf, csv, doc, docx, xls, xlsx, html, txt or md documents)", mediaType)
}

func isObject(raw json.RawMessage) bool {
	var m map[string]json.RawMessage
	return len(raw) > 0 && json.Unmarshal(raw, &m) == nil && m != nil
}

func nonEmpty(s, otherwise string) string {
	if s == "" {
		return otherwise
	}
	return s
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// jsonProblem is what is wrong with a JSON value, without Go's type names.
func jsonProblem(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return te.Field + " has the wrong type"
	}
	return "it does not decode"
}
