package responses

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/jetway-gateway/jetway/internal/call"
	"github.com/jetway-gateway/jetway/internal/door"
	"github.com/jetway-gateway/jetway/internal/protocol"
)

// body is the part of a Responses create body (POST /v1/responses, or a
// WebSocket mode response.create event) Jetway serves.
type body struct {
	Model              string            `json:"model"`
	Input              json.RawMessage   `json:"input"`
	Instructions       *string           `json:"instructions"`
	Tools              []json.RawMessage `json:"tools"`
	ToolChoice         json.RawMessage   `json:"tool_choice"`
	ParallelToolCalls  *bool             `json:"parallel_tool_calls"`
	MaxOutputTokens    *int              `json:"max_output_tokens"`
	Temperature        *float64          `json:"temperature"`
	TopP               *float64          `json:"top_p"`
	Reasoning          *reasoningParam   `json:"reasoning"`
	Metadata           map[string]string `json:"metadata"`
	User               string            `json:"user"`
	Store              *bool             `json:"store"`
	Stream             bool              `json:"stream"`
	Background         bool              `json:"background"`
	Include            []string          `json:"include"`
	PreviousResponseID string            `json:"previous_response_id"`
	ServiceTier        *string           `json:"service_tier"`
	// Generate false is WebSocket mode's warm-up: nothing is generated.
	Generate *bool `json:"generate"`

	tier string // ServiceTier as the core's tier ("": the app's)
}

type reasoningParam struct {
	Effort          *string `json:"effort"`
	Summary         *string `json:"summary"`
	GenerateSummary *string `json:"generate_summary"`
}

// Parameters that are read above; ignored ones change nothing Jetway does
// (a cache key, the client's own metadata, text format "text"); anything
// else is refused naming it, unless it is null.
var (
	served = map[string]bool{"model": true, "input": true, "instructions": true, "tools": true, "tool_choice": true,
		"parallel_tool_calls": true, "max_output_tokens": true, "temperature": true, "top_p": true, "reasoning": true,
		"metadata": true, "user": true, "store": true, "stream": true, "background": true, "include": true,
		"previous_response_id": true, "generate": true, "service_tier": true}
	ignored = map[string]bool{"prompt_cache_key": true, "client_metadata": true, "safety_identifier": true,
		"prompt_cache_retention": true, "stream_options": true, "text": true, "truncation": true,
		"top_logprobs": true, "type": true, "event_id": true, "stream_id": true}
	// why says why a known Responses parameter is refused.
	why = map[string]string{
		"conversation":   "conversations are OpenAI's objects: continue with previous_response_id",
		"prompt":         "prompt templates are OpenAI's objects",
		"max_tool_calls": "the gateway runs no tools",
	}
	// includes are the include values served (the rest are refused).
	includes = map[string]bool{"reasoning.encrypted_content": true, "message.output_text.logprobs": false}
)

// Bounds of a request (docs/responses.md, "Bounds").
const (
	// MaxInputItems bounds the items of one request's conversation (its
	// input and every response it continues).
	MaxInputItems = 4096
	// MaxMetadata is OpenAI's bound of metadata pairs.
	MaxMetadata = 16
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

func unsupported(param, reason string) *requestError {
	return &requestError{code: "unsupported_parameter", param: param,
		msg: fmt.Sprintf("%s is not supported by this gateway (%s): remove it", param, reason)}
}

// decodeBody reads a create body and checks its parameters' names and
// types; ws: a response.create event (stream and background are not its).
func decodeBody(data []byte, ws bool) (body, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil || raw == nil {
		return body{}, badParam("", "the body is not a JSON object: %s", door.JSONProblem(err))
	}
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	sort.Strings(keys) // the same body names the same parameter first
	for _, k := range keys {
		// WebSocket mode always streams: Codex sends "stream":true there.
		if (served[k] && !(ws && k == "background")) || ignored[k] || door.CompactJSON(raw[k]) == "null" {
			continue
		}
		reason, known := why[k]
		if !known {
			reason = "it is not a parameter this gateway serves"
			if ws && k == "background" {
				reason = "WebSocket mode's responses run in the foreground"
			}
		}
		return body{}, unsupported(protocol.Clip(k), reason)
	}
	var b body
	if err := json.Unmarshal(data, &b); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			path, problem := door.TypeProblem(te)
			return body{}, badParam(path, "%s", problem)
		}
		return body{}, badParam("", "the body could not be read: %s", door.JSONProblem(err))
	}
	if t, ok := raw["text"]; ok && door.CompactJSON(t) != "null" {
		var text struct {
			Format *struct {
				Type string `json:"type"`
			} `json:"format"`
		}
		if json.Unmarshal(t, &text) != nil || text.Format != nil && text.Format.Type != "text" {
			return body{}, unsupported("text.format", `structured outputs are not served: only {"type":"text"}`)
		}
	}
	if t, ok := raw["truncation"]; ok && door.CompactJSON(t) != `"disabled"` && door.CompactJSON(t) != "null" {
		return body{}, unsupported("truncation", `only "disabled": the gateway never drops input`)
	}
	for i, inc := range b.Include {
		if !includes[inc] {
			return body{}, unsupported(fmt.Sprintf("include[%d]", i), fmt.Sprintf("%q is not served: only reasoning.encrypted_content", protocol.Clip(inc)))
		}
	}
	if len(b.Metadata) > MaxMetadata {
		return body{}, badParam("metadata", "metadata has %d pairs: at most %d", len(b.Metadata), MaxMetadata)
	}
	for k, v := range b.Metadata {
		if len(k) > 64 || len(v) > 512 {
			return body{}, badParam("metadata", "metadata keys are at most 64 characters and values at most 512")
		}
	}
	if b.MaxOutputTokens != nil && *b.MaxOutputTokens < 1 {
		return body{}, badParam("max_output_tokens", "max_output_tokens must be at least 1")
	}
	if t := b.TopP; t != nil && (*t < 0 || *t > 1) {
		return body{}, badParam("top_p", "top_p must be between 0 and 1")
	}
	if b.PreviousResponseID != "" {
		if _, ok := requestIDOf(b.PreviousResponseID); !ok {
			return body{}, badParam("previous_response_id", "previous_response_id %q is not a response id of this gateway (resp_...)", protocol.Clip(b.PreviousResponseID))
		}
	}
	if b.Background && b.Store != nil && !*b.Store {
		return body{}, badParam("background", "background responses must be stored: remove store:false")
	}
	if b.ServiceTier != nil {
		tier, err := serviceTier(*b.ServiceTier)
		if err != nil {
			return body{}, err
		}
		b.tier = tier
	}
	return b, nil
}

// serviceTier reads service_tier as OpenAI defines it (door.OpenAIServiceTier).
func serviceTier(v string) (string, error) {
	tier, code, msg := door.OpenAIServiceTier(v)
	if code != "" {
		return "", &requestError{code: code, param: "service_tier", msg: msg}
	}
	return tier, nil
}

// items reads input: a string (one user message) or a list of items.
func items(raw json.RawMessage) ([]json.RawMessage, error) {
	switch first(raw) {
	case 0, 'n':
		return nil, nil
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, badParam("input", "input could not be read")
		}
		b, _ := json.Marshal(map[string]any{"type": "message", "role": "user", "content": s})
		return []json.RawMessage{b}, nil
	case '[':
		var list []json.RawMessage
		if err := json.Unmarshal(raw, &list); err != nil {
			return nil, badParam("input", "input must be a string or an array of items")
		}
		if len(list) > MaxInputItems {
			return nil, badParam("input", "input has %d items: at most %d (with the responses it continues)", len(list), MaxInputItems)
		}
		return list, nil
	}
	return nil, badParam("input", "input must be a string or an array of items")
}

// item is one input (or output) item: every type's fields.
type item struct {
	Type      string          `json:"type"`
	ID        string          `json:"id"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments *string         `json:"arguments"`
	Output    json.RawMessage `json:"output"`
	Status    string          `json:"status"`
	// reasoning
	Summary          json.RawMessage `json:"summary"`
	EncryptedContent *string         `json:"encrypted_content"`
}

// part is one content part of a message item.
type part struct {
	Type     string  `json:"type"`
	Text     string  `json:"text"`
	Refusal  string  `json:"refusal"`
	ImageURL *string `json:"image_url"`
	FileID   *string `json:"file_id"`
	Detail   string  `json:"detail"`
	FileData *string `json:"file_data"`
	FileURL  *string `json:"file_url"`
	Filename string  `json:"filename"`
}

// translation turns input items into the protocol's turns: system and
// developer messages become the system prompt; function_call items ride
// in assistant turns and function_call_output items in the user turn
// after them, as Bedrock wants; reasoning items passed back become
// reasoning blocks again (their encrypted_content decrypted).
type translation struct {
	keys   *Keys
	system []string
	turns  []protocol.Message
	origin names
	// awaiting are the calls of the assistant turns not yet answered.
	awaiting map[string]bool
	dropped  int // reasoning items that could not be read back
}

// names records where each protocol turn and block came from, so a field
// the protocol's validation names is named as the input item.
type names struct {
	turns  []string
	blocks [][]string
	tools  []string
}

func (t *translation) add(role, from string) {
	n := len(t.turns)
	if n > 0 && t.turns[n-1].Role == role {
		return
	}
	t.turns = append(t.turns, protocol.Message{Role: role, Blocks: []protocol.Block{}})
	t.origin.turns = append(t.origin.turns, from)
	t.origin.blocks = append(t.origin.blocks, nil)
}

func (t *translation) block(role string, b protocol.Block, from string) {
	t.add(role, from)
	k := len(t.turns) - 1
	t.turns[k].Blocks = append(t.turns[k].Blocks, b)
	t.origin.blocks[k] = append(t.origin.blocks[k], from)
}

// translate reads the conversation's items (input[i] named as param(i)).
func (t *translation) translate(list []json.RawMessage, param func(i int) string) error {
	for i, raw := range list {
		p := param(i)
		var it item
		if err := json.Unmarshal(raw, &it); err != nil {
			var te *json.UnmarshalTypeError
			if errors.As(err, &te) {
				_, problem := door.TypeProblem(te)
				return badParam(p+"."+te.Field, "%s.%s", p, problem)
			}
			return badParam(p, "%s must be an item object", p)
		}
		if it.Type == "" && it.Role != "" {
			it.Type = "message" // EasyInputMessage
		}
		var err error
		switch it.Type {
		case "message":
			err = t.message(it, p)
		case "function_call":
			err = t.call(it, p)
		case "function_call_output":
			err = t.result(it, p)
		case "reasoning":
			t.reasoning(it, p)
		case "item_reference":
			err = unsupported(p+".type", "item_reference: send the item itself, or continue with previous_response_id")
		case "":
			err = badParam(p+".type", "%s.type is required", p)
		default:
			err = unsupported(p+".type", fmt.Sprintf("item type %q: message, function_call, function_call_output and reasoning are served", protocol.Clip(it.Type)))
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (t *translation) message(it item, p string) error {
	switch it.Role {
	case "system", "developer":
		text, err := t.text(it.Content, p, "input_text")
		if err != nil {
			return err
		}
		if text != "" {
			t.system = append(t.system, text)
		}
		return nil
	case "assistant":
		text, err := t.text(it.Content, p, "output_text")
		if err != nil {
			return err
		}
		if text != "" {
			t.block("assistant", protocol.Block{Type: protocol.BlockText, Text: text}, p+".content")
		}
		return nil
	case "user":
		return t.user(it.Content, p)
	case "":
		return badParam(p+".role", "%s.role is required", p)
	}
	return badParam(p+".role", `%s.role must be "user", "assistant", "system" or "developer"`, p)
}

// text reads a message's content as text: a string, or parts of type
// want (and refusal, for an assistant's).
func (t *translation) text(raw json.RawMessage, p, want string) (string, error) {
	if first(raw) == '"' {
		var s string
		_ = json.Unmarshal(raw, &s)
		return s, nil
	}
	var parts []part
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", badParam(p+".content", "%s.content must be a string or an array of content parts", p)
	}
	var sb strings.Builder
	for j, pt := range parts {
		switch {
		case pt.Type == want || pt.Type == "input_text" || pt.Type == "output_text":
			sb.WriteString(pt.Text)
		case pt.Type == "refusal":
			sb.WriteString(pt.Refusal)
		default:
			return "", unsupported(fmt.Sprintf("%s.content[%d].type", p, j), fmt.Sprintf("content type %q here: text only", protocol.Clip(pt.Type)))
		}
	}
	return sb.String(), nil
}

func (t *translation) user(raw json.RawMessage, p string) error {
	if first(raw) == '"' {
		var s string
		_ = json.Unmarshal(raw, &s)
		if s == "" {
			return badParam(p+".content", "%s.content must not be empty", p)
		}
		t.block("user", protocol.Block{Type: protocol.BlockText, Text: s}, p+".content")
		return nil
	}
	blocks, err := userParts(raw, p+".content")
	if err != nil {
		return err
	}
	if len(blocks) == 0 {
		return badParam(p+".content", "%s.content must not be empty", p)
	}
	for _, b := range blocks {
		t.block("user", b.block, b.from)
	}
	return nil
}

type sourced struct {
	block protocol.Block
	from  string
}

// userParts reads content parts: input_text, input_image (data URLs) and
// input_file (file_data).
func userParts(raw json.RawMessage, p string) ([]sourced, error) {
	var parts []part
	if err := json.Unmarshal(raw, &parts); err != nil {
		return nil, badParam(p, "%s must be a string or an array of content parts", p)
	}
	out := make([]sourced, 0, len(parts))
	for j, pt := range parts {
		from := fmt.Sprintf("%s[%d]", p, j)
		switch pt.Type {
		case "input_text", "output_text":
			if pt.Text != "" {
				out = append(out, sourced{protocol.Block{Type: protocol.BlockText, Text: pt.Text}, from + ".text"})
			}
		case "input_image":
			b, err := image(pt, from)
			if err != nil {
				return nil, err
			}
			out = append(out, sourced{b, from + ".image_url"})
		case "input_file":
			b, err := file(pt, from)
			if err != nil {
				return nil, err
			}
			out = append(out, sourced{b, from + ".file_data"})
		case "":
			return nil, badParam(from+".type", "%s.type is required", from)
		default:
			return nil, unsupported(from+".type", fmt.Sprintf("content type %q: input_text, input_image and input_file are served", protocol.Clip(pt.Type)))
		}
	}
	return out, nil
}

// imageFormats are the data URL media types Bedrock takes, by format.
var imageFormats = map[string]string{"image/png": "png", "image/jpeg": "jpeg", "image/jpg": "jpeg", "image/gif": "gif", "image/webp": "webp"}

// documentFormats are the file media types Bedrock takes, by format.
var documentFormats = map[string]string{"application/pdf": "pdf", "text/csv": "csv", "text/plain": "txt", "text/markdown": "md",
	"text/html": "html", "application/msword": "doc", "application/vnd.ms-excel": "xls",
	"application/vnd.openxmlformats-officedocument.wordprocessingml.document": "docx",
	"application/vnd.openxmlformats-officedocument.spreadsheetml.sheet":       "xlsx"}

// image reads an input_image part. Only data URLs are served: the gateway
// makes no request on a user's behalf.
func image(pt part, from string) (protocol.Block, error) {
	param := from + ".image_url"
	switch pt.Detail {
	case "", "auto", "high", "low":
	default:
		return protocol.Block{}, badParam(from+".detail", `%s.detail must be "auto", "low" or "high"`, from)
	}
	if pt.FileID != nil {
		return protocol.Block{}, unsupported(from+".file_id", "files are OpenAI's objects: send the image as a data URL")
	}
	if pt.ImageURL == nil || *pt.ImageURL == "" {
		return protocol.Block{}, badParam(param, "%s is required (a data URL)", param)
	}
	media, data, err := dataURL(*pt.ImageURL, param, "data:image/png;base64,...")
	if err != nil {
		return protocol.Block{}, err
	}
	format, ok := imageFormats[media]
	if !ok {
		return protocol.Block{}, badParam(param, "%s has media type %q: images must be image/png, image/jpeg, image/gif or image/webp", param, protocol.Clip(media))
	}
	return protocol.Block{Type: protocol.BlockImage, Format: format, Data: protocol.ParseData(data)}, nil
}

// file reads an input_file part (file_data: a data URL).
func file(pt part, from string) (protocol.Block, error) {
	param := from + ".file_data"
	switch {
	case pt.FileID != nil:
		return protocol.Block{}, unsupported(from+".file_id", "files are OpenAI's objects: send file_data as a data URL")
	case pt.FileURL != nil:
		return protocol.Block{}, unsupported(from+".file_url", "this gateway does not fetch URLs: send file_data as a data URL")
	case pt.FileData == nil || *pt.FileData == "":
		return protocol.Block{}, badParam(param, "%s is required (a data URL)", param)
	}
	media, data, err := dataURL(*pt.FileData, param, "data:application/pdf;base64,...")
	if err != nil {
		return protocol.Block{}, err
	}
	format, ok := documentFormats[media]
	if !ok {
		return protocol.Block{}, badParam(param, "%s has media type %q: files must be PDF, CSV, text, Markdown, HTML, Word or Excel", param, protocol.Clip(media))
	}
	return protocol.Block{Type: protocol.BlockDocument, Format: format, Name: documentName(pt.Filename), Data: protocol.ParseData(data)}, nil
}

// documentName is a Bedrock document name from a filename: its letters,
// digits and hyphens, "document" when none are left.
func documentName(filename string) string {
	filename, _, _ = strings.Cut(filename, ".")
	var b strings.Builder
	for _, r := range filename {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-':
			b.WriteRune(r)
		case r == ' ' || r == '_':
			b.WriteByte('-')
		}
		if b.Len() >= 100 {
			break
		}
	}
	if b.Len() == 0 {
		return "document"
	}
	return b.String()
}

// dataURL splits a base64 data URL into its media type and data.
func dataURL(url, param, example string) (media, data string, err error) {
	scheme, rest, _ := strings.Cut(url, ":")
	switch strings.ToLower(scheme) {
	case "data":
	case "http", "https":
		return "", "", &requestError{code: "unsupported_parameter", param: param,
			msg: param + " is a remote URL: this gateway does not fetch URLs; send it inline as a data URL (" + example + ")"}
	default:
		return "", "", badParam(param, "%s must be a data URL (%s)", param, example)
	}
	meta, data, ok := strings.Cut(rest, ",")
	media, enc, _ := strings.Cut(meta, ";")
	if !ok || !strings.EqualFold(enc, "base64") {
		return "", "", badParam(param, "%s must be a base64 data URL (%s)", param, example)
	}
	return strings.ToLower(media), data, nil
}

func (t *translation) call(it item, p string) error {
	switch {
	case it.CallID == "":
		return badParam(p+".call_id", "%s.call_id is required", p)
	case it.Name == "":
		return badParam(p+".name", "%s.name is required", p)
	}
	args := "{}"
	if it.Arguments != nil && strings.TrimSpace(*it.Arguments) != "" {
		args = *it.Arguments
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal([]byte(args), &obj) != nil || obj == nil {
		return badParam(p+".arguments", "%s.arguments must be a JSON object (in a string)", p)
	}
	t.block("assistant", protocol.Block{Type: protocol.BlockToolUse, ID: it.CallID, Name: it.Name, Input: json.RawMessage(args)}, p)
	if t.awaiting == nil {
		t.awaiting = map[string]bool{}
	}
	t.awaiting[it.CallID] = true
	return nil
}

func (t *translation) result(it item, p string) error {
	switch {
	case it.CallID == "":
		return badParam(p+".call_id", "%s.call_id is required", p)
	case !t.awaiting[it.CallID]:
		return badParam(p+".call_id", "%s.call_id %q answers no function_call before it (in the input or the responses it continues)", p, protocol.Clip(it.CallID))
	}
	delete(t.awaiting, it.CallID)
	var content []protocol.Block
	switch first(it.Output) {
	case '"':
		var s string
		_ = json.Unmarshal(it.Output, &s)
		if s == "" {
			s = "(no output)"
		}
		content = []protocol.Block{{Type: protocol.BlockText, Text: s}}
	case '[':
		parts, err := userParts(it.Output, p+".output")
		if err != nil {
			return err
		}
		for _, s := range parts {
			content = append(content, s.block)
		}
		if len(content) == 0 {
			content = []protocol.Block{{Type: protocol.BlockText, Text: "(no output)"}}
		}
	default:
		return badParam(p+".output", "%s.output must be a string or an array of content parts", p)
	}
	t.block("user", protocol.Block{Type: protocol.BlockToolResult, ToolUseID: it.CallID, Content: content}, p)
	return nil
}

// reasoning reads a reasoning item passed back: its encrypted_content is
// the reasoning block this gateway streamed (text and signature). One
// that is not readable here (another key, or none) is left out of the
// model call: a model continues without its earlier reasoning.
func (t *translation) reasoning(it item, _ string) {
	if it.EncryptedContent == nil {
		t.dropped++
		return
	}
	text, sig, ok := t.keys.open(*it.EncryptedContent)
	if !ok || sig == "" {
		t.dropped++
		return
	}
	t.block("assistant", protocol.Block{Type: protocol.BlockReasoning, Text: text, Signature: sig}, "")
}

// tools reads tools and tool_choice. A tool the gateway cannot run for the
// model (hosted tools, custom and namespace tools) is dropped (its type
// and name in dropped) or, under the refuse policy, refused.
func tools(in *protocol.Inbound, list []json.RawMessage, choice json.RawMessage, refuse bool, n *names) (dropped []string, err error) {
	for i, raw := range list {
		p := fmt.Sprintf("tools[%d]", i)
		var tl struct {
			Type        string          `json:"type"`
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Parameters  json.RawMessage `json:"parameters"`
		}
		if err := json.Unmarshal(raw, &tl); err != nil {
			return nil, badParam(p, "%s must be a tool object", p)
		}
		if tl.Type != "function" {
			what := tl.Type
			if tl.Name != "" {
				what += ":" + tl.Name
			}
			if refuse {
				return nil, unsupported(p+".type", fmt.Sprintf("tool type %q: this app serves function tools only", protocol.Clip(tl.Type)))
			}
			dropped = append(dropped, protocol.Clip(what))
			continue
		}
		params := tl.Parameters
		if door.CompactJSON(params) == "null" || len(params) == 0 {
			params = json.RawMessage(`{"type":"object","properties":{}}`)
		}
		in.Tools = append(in.Tools, protocol.Tool{Name: tl.Name, Description: tl.Description, InputSchema: params})
		n.tools = append(n.tools, p)
	}
	switch c := door.CompactJSON(choice); {
	case c == "" || c == "null" || c == `"auto"`:
	case c == `"none"`:
		in.Tools = nil // the model may not call any: it gets none
	case c == `"required"`:
		in.ToolChoice = &protocol.ToolChoice{Mode: protocol.ToolChoiceAny}
	default:
		var tc struct {
			Type string `json:"type"`
			Name string `json:"name"`
		}
		if json.Unmarshal(choice, &tc) != nil || tc.Type != "function" || tc.Name == "" {
			return nil, unsupported("tool_choice", `only "auto", "none", "required" or {"type":"function","name":...}`)
		}
		in.ToolChoice = &protocol.ToolChoice{Mode: protocol.ToolChoiceTool, Name: tc.Name}
	}
	if len(in.Tools) == 0 && in.ToolChoice != nil {
		in.ToolChoice = nil
	}
	return dropped, nil
}

// Name is the input item a field of the protocol request came from.
func (n *names) Name(p call.Path) (string, bool) {
	if n == nil || len(p) == 0 {
		return "", false
	}
	switch p[0] {
	case "temperature", "service_tier":
		return p[0], len(p) == 1
	case "max_tokens":
		return "max_output_tokens", len(p) == 1
	case "reasoning":
		return "reasoning.effort", true
	case "tool_choice":
		return "tool_choice", true
	case "tools":
		if i, ok := p.Index(1); ok && i < len(n.tools) {
			return n.tools[i], true
		}
		return "tools", true
	case "messages":
		k, ok := p.Index(1)
		if !ok || k >= len(n.turns) {
			return "input", true
		}
		if j, ok := p.Index(3); ok && j < len(n.blocks[k]) && n.blocks[k][j] != "" {
			return n.blocks[k][j], true
		}
		return n.turns[k], true
	}
	return "", false
}

func first(raw json.RawMessage) byte {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	if len(raw) == 0 {
		return 0
	}
	return raw[0]
}

// effortBudgets map reasoning.effort to a Bedrock reasoning budget of
// output tokens (docs/responses.md, "Reasoning").
var effortBudgets = map[string]int{"low": 1024, "medium": 4096, "high": 16384, "xhigh": 32768}

func contains(list []string, s string) bool { return slices.Contains(list, s) }
