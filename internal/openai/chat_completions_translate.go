package openai

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/jetway-gateway/jetway/internal/call"
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
	// origin is where each turn, block and tool came from.
	origin *origins
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

func translate(req *chatRequest, in *protocol.Inbound) (*origins, error) {
	t := translation{origin: &origins{}}
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
	t.origin.turns = append(t.origin.turns, from)
	t.origin.blocks = append(t.origin.blocks, nil)
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
		t.origin.blocks[k] = append(t.origin.blocks[k], s)
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
		if len(params) == 0 || door.CompactJSON(params) == "null" {
			params = defaultToolParameters
		}
		in.Tools = append(in.Tools, protocol.Tool{Name: f.Name, Description: f.Description, InputSchema: params})
		t.origin.tools++
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
	switch door.CompactJSON(raw) {
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

// origins records where the protocol request's turns, blocks and tools
// came from, so that a field its validation names ("messages[2].content[1].data")
// is named as the OpenAI parameter ("messages[3].content[1].image_url.url").
type origins struct {
	turns  []string    // turn k's message ("messages[3]")
	blocks [][]sourced // turn k's blocks and their parameters
	tools  int         // the tools translated, in order
}

// toolFields are a tool's fields under OpenAI's function.
var toolFields = map[string]string{"name": ".function.name", "description": ".function.description", "input_schema": ".function.parameters"}

// Name is the OpenAI parameter a field of the protocol request came from.
func (o *origins) Name(p call.Path) (string, bool) {
	if o == nil || len(p) == 0 {
		return "", false
	}
	switch p[0] {
	case "temperature", "max_tokens", "service_tier":
		return p[0], len(p) == 1
	case "tool_choice":
		switch {
		case len(p) == 1:
			return "tool_choice", true
		case len(p) == 2 && p[1] == "name":
			return "tool_choice.function.name", true
		}
	case "tools":
		if len(p) == 1 {
			return "tools", true
		}
		i, ok := p.Index(1)
		if !ok || i >= o.tools {
			return "", false
		}
		from := "tools" + p[:2].Rest(1)
		if len(p) == 2 {
			return from, true
		}
		if f, ok := toolFields[p[2]]; ok && len(p) == 3 {
			return from + f, true
		}
	case "messages":
		k, ok := p.Index(1)
		switch {
		case !ok || k >= len(o.turns) || len(p) > 2 && p[2] != "content":
			return "", false
		case len(p) == 2:
			return o.turns[k], true
		case len(p) == 3:
			return o.turns[k] + ".content", true
		}
		if j, ok := p.Index(3); ok && j < len(o.blocks[k]) {
			return o.blocks[k][j].name(p[4:])
		}
	}
	return "", false
}

// name is the parameter of the block's field rest (none: the block's).
func (s sourced) name(rest call.Path) (string, bool) {
	if len(rest) == 0 {
		return s.from, true
	}
	f := rest[0]
	one := len(rest) == 1
	switch s.block.Type {
	case protocol.BlockText:
		return s.from, one && f == "text"
	case protocol.BlockImage:
		return s.from + ".image_url.url", one && (f == "data" || f == "format")
	case protocol.BlockToolUse:
		switch {
		case one && f == "id":
			return s.from + ".id", true
		case one && f == "name":
			return s.from + ".function.name", true
		case one && f == "input":
			return s.from + ".function.arguments", true
		}
	case protocol.BlockToolResult:
		switch {
		case one && f == "tool_use_id":
			return s.from + ".tool_call_id", true
		case f == "content" && (one || len(rest) <= 3 && rest[1] == "0" && (len(rest) == 2 || rest[2] == "text")):
			return s.from + ".content", true // the result is one text block: the tool message's content
		}
	}
	return "", false
}

// rename names a protocol field (see call.ClientError.Path) as the
// OpenAI parameter it came from: the parameter of the field, or of the
// nearest field it is inside of (the rest of the path follows it in the
// message). A field names does not know gives no parameter and the
// protocol's own message.
func rename(names door.Namer, p call.Path, problem string) (param, msg string) {
	for i := len(p); i > 0; i-- {
		if to, ok := names.Name(p[:i]); ok {
			return to, to + p.Rest(i) + problem
		}
	}
	return "", p.String() + problem
}

// requestErr is a protocol validation error in OpenAI's names.
func (o *origins) requestErr(err error) error {
	var ce *call.ClientError
	if !errors.As(err, &ce) {
		return err
	}
	param, msg := rename(o, ce.Path, ce.Problem)
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
