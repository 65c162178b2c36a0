package openai

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/jetway-gateway/jetway/internal/door"
	"github.com/jetway-gateway/jetway/internal/protocol"
)

// translation turns Chat Completions messages, tools and tool choice into
// a protocol request. OpenAI's shapes differ from Bedrock's in three ways
// it bridges: system messages become the system prompt; tool calls ride on
// assistant messages and each result is its own `tool` message, while
// Bedrock wants tool_use blocks in the assistant turn and every result in
// the one user turn that follows (so consecutive tool messages, and a user
// message right after them, make one user turn); a tool result must answer
// a call of the assistant turn before it.
type translation struct {
	system []string
	turns  []protocol.Message
	// origin names, for each field of the protocol request that validation
	// may name, the OpenAI parameter it came from.
	origin fieldMap
	// awaiting are the last assistant turn's tool calls, until the
	// messages after it answered each one.
	awaiting []pendingCall
	// resultsTurn: the last turn is a user turn made of tool results.
	resultsTurn bool
	// toolCalls: the history holds a tool call.
	toolCalls bool
}

type pendingCall struct {
	id, param string
	answered  bool
}

// sourced is a block and the OpenAI parameter it came from.
type sourced struct {
	block protocol.Block
	from  string
}

// defaultToolParameters is the schema of a function declared without
// parameters (OpenAI allows it; Bedrock needs a schema).
var defaultToolParameters = json.RawMessage(`{"type":"object","properties":{}}`)

func translate(req *chatRequest, in *protocol.Inbound) (fieldMap, error) {
	t := translation{origin: fieldMap{"tools": "tools", "tool_choice": "tool_choice", "tool_choice.name": "tool_choice.function.name",
		"temperature": "temperature", "max_tokens": "max_tokens"}}
	if err := t.messages(req.Messages); err != nil {
		return t.origin, err
	}
	in.System, in.Messages = strings.Join(t.system, "\n\n"), t.turns
	return t.origin, t.tools(in, req.Tools, req.ToolChoice)
}

func (t *translation) messages(msgs []chatMessage) error {
	for i, m := range msgs {
		param := fmt.Sprintf("messages[%d]", i)
		if m.Role != "tool" {
			if err := t.unanswered(); err != nil {
				return err
			}
		}
		var err error
		switch m.Role {
		case "system", "developer":
			var text string
			text, err = contentText(m.Content, param)
			t.system = append(t.system, text)
		case "user":
			err = t.user(m, param)
		case "assistant":
			err = t.assistant(m, param)
		case "tool":
			err = t.tool(m, param)
		case "function":
			err = unsupported(param+".role", " (the deprecated function role: use tool messages)")
		default:
			err = badParam(param+".role", "%s.role must be system, developer, user, assistant or tool", param)
		}
		if err != nil {
			return err
		}
	}
	return t.unanswered()
}

// unanswered refuses a tool call that no tool message answered (Bedrock
// needs a result for each call in the next turn) and ends the wait.
func (t *translation) unanswered() error {
	for _, c := range t.awaiting {
		if !c.answered {
			return badParam(c.param, "%s: tool call %q has no tool message answering it (each call needs a tool message with its tool_call_id right after the assistant message)", c.param, truncate(c.id, 64))
		}
	}
	t.awaiting = nil
	return nil
}

func (t *translation) user(m chatMessage, param string) error {
	text, blocks, err := userContent(m.Content, param)
	if err != nil {
		return err
	}
	if text == "" && blocks == nil {
		return badParam(param+".content", "%s.content must not be empty", param)
	}
	if t.resultsTurn {
		// A user message right after tool results joins their turn.
		if blocks == nil {
			blocks = []sourced{{protocol.Block{Type: protocol.BlockText, Text: text}, param + ".content"}}
		}
		t.extend(blocks)
	} else {
		t.add("user", text, blocks, param)
	}
	t.resultsTurn = false
	return nil
}

func (t *translation) assistant(m chatMessage, param string) error {
	text, err := contentText(m.Content, param)
	if err != nil {
		return err
	}
	t.resultsTurn = false
	if len(m.ToolCalls) == 0 {
		if text == "" {
			return badParam(param+".content", "%s.content must not be empty", param)
		}
		t.add("assistant", text, nil, param)
		return nil
	}
	var blocks []sourced
	if text != "" {
		blocks = append(blocks, sourced{protocol.Block{Type: protocol.BlockText, Text: text}, param + ".content"})
	}
	for j, c := range m.ToolCalls {
		p := fmt.Sprintf("%s.tool_calls[%d]", param, j)
		if err := functionType(p, c.Type, "tool call type %q: function calls only"); err != nil {
			return err
		}
		args := json.RawMessage(c.Function.Arguments)
		if strings.TrimSpace(c.Function.Arguments) == "" {
			args = json.RawMessage(`{}`)
		}
		var obj map[string]json.RawMessage
		if json.Unmarshal(args, &obj) != nil || obj == nil {
			return badParam(p+".function.arguments", "%s.function.arguments must be a JSON object (in a string)", p)
		}
		blocks = append(blocks, sourced{protocol.Block{Type: protocol.BlockToolUse, ID: c.ID, Name: c.Function.Name, Input: args}, p})
		t.awaiting = append(t.awaiting, pendingCall{id: c.ID, param: p})
	}
	t.toolCalls = true
	t.add("assistant", "", blocks, param)
	return nil
}

func (t *translation) tool(m chatMessage, param string) error {
	i := -1
	for k, c := range t.awaiting {
		if c.id == m.ToolCallID && !c.answered {
			i = k
			break
		}
	}
	switch {
	case m.ToolCallID == "":
		return badParam(param+".tool_call_id", "%s.tool_call_id is required", param)
	case i < 0:
		return badParam(param+".tool_call_id", "%s.tool_call_id %q matches no unanswered tool call of the assistant message before it", param, truncate(m.ToolCallID, 64))
	}
	t.awaiting[i].answered = true
	text, err := contentText(m.Content, param)
	if err != nil {
		return err
	}
	if text == "" {
		return badParam(param+".content", "%s.content must not be empty (the tool's result)", param)
	}
	result := sourced{protocol.Block{Type: protocol.BlockToolResult, ToolUseID: m.ToolCallID,
		Content: []protocol.Block{{Type: protocol.BlockText, Text: text}}}, param}
	if t.resultsTurn {
		t.extend([]sourced{result})
	} else {
		t.add("user", "", []sourced{result}, param)
	}
	t.resultsTurn = true
	return nil
}

// add appends a turn: text, or blocks when there are any.
func (t *translation) add(role, text string, blocks []sourced, from string) {
	k := len(t.turns)
	path := fmt.Sprintf("messages[%d]", k)
	t.origin[path] = from
	t.origin[path+".content"] = from + ".content"
	if blocks == nil {
		t.turns = append(t.turns, protocol.Message{Role: role, Content: text})
		return
	}
	t.turns = append(t.turns, protocol.Message{Role: role, Blocks: []protocol.Block{}})
	t.extend(blocks)
}

// extend appends blocks to the last turn.
func (t *translation) extend(blocks []sourced) {
	k := len(t.turns) - 1
	turn := &t.turns[k]
	for _, s := range blocks {
		t.origin.block(fmt.Sprintf("messages[%d].content[%d]", k, len(turn.Blocks)), s)
		turn.Blocks = append(turn.Blocks, s.block)
	}
}

// tools translates `tools` and `tool_choice`. "none" passes no tools, so
// the model cannot call one.
func (t *translation) tools(in *protocol.Inbound, tools []chatTool, choice json.RawMessage) error {
	tc, none, err := toolChoice(choice)
	if err != nil {
		return err
	}
	if none {
		if t.toolCalls {
			return &requestError{code: "unsupported_parameter", param: "tool_choice",
				msg: `tool_choice "none" is not supported for a conversation that holds tool calls: the model reads them only with the tools given, and Bedrock cannot forbid a new call then; send "auto"`}
		}
		return nil
	}
	for i, tl := range tools {
		p := fmt.Sprintf("tools[%d]", i)
		if err := functionType(p, tl.Type, "tool type %q: function tools only"); err != nil {
			return err
		}
		f := tl.Function
		if f.Strict != nil && *f.Strict {
			return unsupported(p+".function.strict", " (strict: true, guaranteed schema adherence)")
		}
		params := f.Parameters
		if len(params) == 0 || compact(params) == "null" {
			params = defaultToolParameters
		}
		in.Tools = append(in.Tools, protocol.Tool{Name: f.Name, Description: f.Description, InputSchema: params})
		t.origin[p] = p
		t.origin[p+".name"] = p + ".function.name"
		t.origin[p+".description"] = p + ".function.description"
		t.origin[p+".input_schema"] = p + ".function.parameters"
	}
	in.ToolChoice = tc
	if t.toolCalls && len(in.Tools) == 0 {
		return badParam("tools", "the messages hold tool calls, so tools must be given: the model reads a tool loop only with its tools (Bedrock's rule)")
	}
	return nil
}

// toolChoice reads tool_choice: "auto", "required" (Bedrock's any), "none"
// (none is true) or a named function.
func toolChoice(raw json.RawMessage) (tc *protocol.ToolChoice, none bool, err error) {
	const shapes = `tool_choice must be "none", "auto", "required" or {"type":"function","function":{"name":"..."}}`
	switch compact(raw) {
	case "", "null":
		return nil, false, nil
	case `"auto"`:
		return &protocol.ToolChoice{Mode: protocol.ToolChoiceAuto}, false, nil
	case `"required"`:
		return &protocol.ToolChoice{Mode: protocol.ToolChoiceAny}, false, nil
	case `"none"`:
		return nil, true, nil
	}
	var named struct {
		Type     string `json:"type"`
		Function *struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if json.Unmarshal(raw, &named) != nil {
		return nil, false, badParam("tool_choice", shapes)
	}
	switch named.Type {
	case "function":
		if named.Function == nil || named.Function.Name == "" {
			return nil, false, badParam("tool_choice.function.name", "tool_choice.function.name is required")
		}
		return &protocol.ToolChoice{Mode: protocol.ToolChoiceTool, Name: named.Function.Name}, false, nil
	case "allowed_tools", "custom":
		return nil, false, unsupported("tool_choice", fmt.Sprintf(" (tool_choice type %q)", named.Type))
	}
	return nil, false, badParam("tool_choice", shapes)
}

// userContent reads a user message's content: a string, text parts (one
// string, as before) or text and image_url parts (blocks).
func userContent(c content, param string) (string, []sourced, error) {
	if c.bad || c.parts == nil {
		text, err := contentText(c, param)
		return text, nil, err
	}
	parts := c.parts
	images := false
	var text strings.Builder
	for j, p := range parts {
		switch p.Type {
		case "text":
			text.WriteString(p.Text)
		case "image_url":
			images = true
		default:
			return "", nil, unsupported(fmt.Sprintf("%s.content[%d].type", param, j), fmt.Sprintf(" (content type %q: text and image_url only)", truncate(p.Type, 40)))
		}
	}
	if !images {
		return text.String(), nil, nil
	}
	blocks := make([]sourced, 0, len(parts))
	for j, p := range parts {
		from := fmt.Sprintf("%s.content[%d]", param, j)
		switch {
		case p.Type == "text" && p.Text != "":
			blocks = append(blocks, sourced{protocol.Block{Type: protocol.BlockText, Text: p.Text}, from + ".text"})
		case p.Type == "image_url":
			b, err := imageBlock(p, from)
			if err != nil {
				return "", nil, err
			}
			blocks = append(blocks, sourced{b, from})
		}
	}
	return "", blocks, nil
}

// imageFormats are the data URL media types Bedrock takes, by format.
var imageFormats = map[string]string{"image/png": "png", "image/jpeg": "jpeg", "image/jpg": "jpeg", "image/gif": "gif", "image/webp": "webp"}

// imageBlock reads an image_url part. Only data URLs are served: the
// gateway makes no request on a user's behalf (no server-side request
// forgery, no unbounded download on the admission path).
func imageBlock(p contentPart, from string) (protocol.Block, error) {
	urlParam := from + ".image_url.url"
	if p.ImageURL == nil || p.ImageURL.URL == "" {
		return protocol.Block{}, badParam(urlParam, "%s is required", urlParam)
	}
	switch p.ImageURL.Detail {
	case "", "auto", "high":
	case "low":
		return protocol.Block{}, &requestError{code: "unsupported_parameter", param: from + ".image_url.detail",
			msg: from + `.image_url.detail "low" is not supported by this gateway: the model gets the image as sent; remove detail or send "auto"`}
	default:
		return protocol.Block{}, badParam(from+".image_url.detail", `%s.image_url.detail must be "auto", "low" or "high"`, from)
	}
	url := p.ImageURL.URL
	scheme, rest, _ := strings.Cut(url, ":")
	switch strings.ToLower(scheme) {
	case "data":
	case "http", "https":
		return protocol.Block{}, &requestError{code: "unsupported_parameter", param: urlParam,
			msg: urlParam + " is a remote URL: this gateway does not fetch URLs; send the image inline as a data URL (data:image/png;base64,...)"}
	default:
		return protocol.Block{}, badParam(urlParam, "%s must be a data URL (data:image/png;base64,...)", urlParam)
	}
	meta, data, ok := strings.Cut(rest, ",")
	media, enc, _ := strings.Cut(meta, ";")
	if !ok || !strings.EqualFold(enc, "base64") {
		return protocol.Block{}, badParam(urlParam, "%s must be a base64 data URL (data:image/png;base64,...)", urlParam)
	}
	format, ok := imageFormats[strings.ToLower(media)]
	if !ok {
		return protocol.Block{}, badParam(urlParam, "%s has media type %q: images must be image/png, image/jpeg, image/gif or image/webp", urlParam, truncate(media, 40))
	}
	return protocol.Block{Type: protocol.BlockImage, Format: format, Data: protocol.ParseData(data)}, nil
}

// fieldMap maps a protocol request's field paths, as its validation names
// them ("messages[2].content[1].data"), to the OpenAI parameters they came
// from ("messages[3].content[1].image_url.url").
type fieldMap map[string]string

// block records where a block at path came from.
func (f fieldMap) block(path string, s sourced) {
	f[path] = s.from
	switch s.block.Type {
	case protocol.BlockText:
		f[path+".text"] = s.from
	case protocol.BlockImage:
		f[path+".data"] = s.from + ".image_url.url"
		f[path+".format"] = s.from + ".image_url.url"
	case protocol.BlockToolUse:
		f[path+".id"] = s.from + ".id"
		f[path+".name"] = s.from + ".function.name"
		f[path+".input"] = s.from + ".function.arguments"
	case protocol.BlockToolResult:
		f[path+".tool_use_id"] = s.from + ".tool_call_id"
		f[path+".content"] = s.from + ".content"
		f[path+".content[0]"] = s.from + ".content"
		f[path+".content[0].text"] = s.from + ".content"
	}
}

// Name is the OpenAI parameter a protocol field came from.
func (f fieldMap) Name(field string) (string, bool) {
	to, ok := f[field]
	return to, ok
}

// rename names a protocol field (see protocol.ClientError.Field) as the
// OpenAI parameter it came from: the parameter of the field, or of the
// nearest field it is inside of, and the message (which starts with the
// field) with that parameter instead. A field names does not know gives
// no parameter and the message unchanged.
func rename(names door.Namer, field, msg string) (param, renamed string) {
	for k := field; k != ""; k = enclosing(k) {
		if to, ok := names.Name(k); ok && strings.HasPrefix(msg, k) {
			return to, to + msg[len(k):]
		}
	}
	return "", msg
}

// enclosing is the field a field path is inside of ("" at the top):
// "messages[2].content" -> "messages[2]" -> "messages".
func enclosing(path string) string {
	i := strings.LastIndexAny(path, ".[")
	if i < 0 {
		return ""
	}
	return path[:i]
}

// requestErr is a protocol validation error in OpenAI's names.
func (f fieldMap) requestErr(err error) error {
	var ce *protocol.ClientError
	if !errors.As(err, &ce) {
		return err
	}
	param, msg := rename(f, ce.Field, ce.Msg)
	return &requestError{code: "invalid_request", param: param, msg: msg}
}

// functionType checks the "type" of a tool or tool call at param p: only
// "function" is taken; why (with %q for the type) says what else is not.
func functionType(p, typ, why string) *requestError {
	switch typ {
	case "function":
		return nil
	case "":
		return badParam(p+".type", `%s.type must be "function"`, p)
	default:
		return unsupported(p+".type", " ("+fmt.Sprintf(why, truncate(typ, 40))+")")
	}
}
