package anthropic

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"go.uber.org/zap"

	"github.com/jetway-gateway/jetway/internal/call"
	"github.com/jetway-gateway/jetway/internal/door"
	"github.com/jetway-gateway/jetway/internal/gateway"
	"github.com/jetway-gateway/jetway/internal/protocol"
	"github.com/jetway-gateway/jetway/internal/stream"
)

// messagesBody is the part of a Messages body Jetway serves.
type messagesBody struct {
	Model         string           `json:"model"`
	MaxTokens     *int             `json:"max_tokens"`
	Messages      []message        `json:"messages"`
	System        json.RawMessage  `json:"system"`
	StopSequences []string         `json:"stop_sequences"`
	Temperature   *float64         `json:"temperature"`
	TopP          *float64         `json:"top_p"`
	Stream        bool             `json:"stream"`
	Metadata      *json.RawMessage `json:"metadata"`
	Tools         []tool           `json:"tools"`
	ToolChoice    *toolChoice      `json:"tool_choice"`
	Thinking      *thinking        `json:"thinking"`
	ServiceTier   *string          `json:"service_tier"`

	CacheControl      json.RawMessage    `json:"cache_control"`
	ContextManagement *contextManagement `json:"context_management"`
	OutputConfig      *outputConfig      `json:"output_config"`
}

// contextManagement is served when it asks for nothing: every edit
// clears thinking keeping all of it (what Claude Code sends).
type contextManagement struct {
	Edits []struct {
		Type string          `json:"type"`
		Keep json.RawMessage `json:"keep"`
	} `json:"edits"`
}

// outputConfig is served at its defaults: effort "high", no format.
type outputConfig struct {
	Effort *string          `json:"effort"`
	Format *json.RawMessage `json:"format"`
}

type message struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// block is one content block of a message (every type's fields).
type block struct {
	Type         string          `json:"type"`
	Text         string          `json:"text"`
	Source       *source         `json:"source"`
	ID           string          `json:"id"`
	Name         string          `json:"name"`
	Input        json.RawMessage `json:"input"`
	ToolUseID    string          `json:"tool_use_id"`
	Content      json.RawMessage `json:"content"`
	IsError      *bool           `json:"is_error"`
	Thinking     *string         `json:"thinking"`
	Signature    string          `json:"signature"`
	Title        *string         `json:"title"`
	Context      *string         `json:"context"`
	Citations    json.RawMessage `json:"citations"`
	CacheControl json.RawMessage `json:"cache_control"`
}

type source struct {
	Type      string `json:"type"`
	MediaType string `json:"media_type"`
	Data      string `json:"data"`
}

type tool struct {
	Type         string          `json:"type"`
	DeferLoading bool            `json:"defer_loading"`
	Name         string          `json:"name"`
	Description  string          `json:"description"`
	InputSchema  json.RawMessage `json:"input_schema"`
	CacheControl json.RawMessage `json:"cache_control"`
}

type toolChoice struct {
	Type                   string `json:"type"`
	Name                   string `json:"name"`
	DisableParallelToolUse *bool  `json:"disable_parallel_tool_use"`
}

type thinking struct {
	Type         string `json:"type"`
	BudgetTokens *int   `json:"budget_tokens"`
}

// served are the parameters Jetway honours. Anything else is refused
// naming it, unless it is null.
var (
	served = map[string]bool{"model": true, "max_tokens": true, "messages": true, "system": true, "stop_sequences": true,
		"temperature": true, "top_p": true, "stream": true, "metadata": true, "tools": true, "tool_choice": true, "thinking": true,
		"cache_control": true, "context_management": true, "output_config": true, "service_tier": true}
	// why says why a known Anthropic parameter is refused.
	why = map[string]string{
		"top_k":       "Bedrock's Converse API has no top_k (it would need model-specific fields): use temperature or top_p",
		"container":   "code execution containers are Anthropic's own servers",
		"mcp_servers": "the MCP connector runs on Anthropic's servers",
	}
)

// parsed is a body turned into the core's request.
type parsed struct {
	in     protocol.Inbound
	topP   *float64
	stop   []string
	stream bool
	userID string // metadata.user_id, clipped to MaxUserIDBytes
	names  *names // where the protocol request's turns and blocks came from
	// prefixCache: a system block or a tool has cache_control (the
	// gateway's point after the system prompt and tools).
	prefixCache bool
}

// parseRequest decodes and checks a Messages body (count: a count_tokens
// body, where max_tokens is optional and unused) and turns it into the
// protocol's request, validated by the WebSocket's rules. Every refusal is
// a 400 invalid_request_error naming the field.
func parseRequest(data []byte, requestID string, count bool) (parsed, *apiError) {
	p := parsed{in: protocol.Inbound{Type: protocol.TypeRequest, RequestID: requestID}}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil || raw == nil {
		return p, ref(invalid("the body is not a JSON object: %s", door.JSONProblem(err)))
	}
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	sort.Strings(keys) // the same body names the same parameter first
	for _, k := range keys {
		if served[k] {
			continue // checked below: a served value may be megabytes (messages)
		}
		if door.CompactJSON(raw[k]) == "null" {
			continue
		}
		reason, known := why[k]
		if !known {
			reason = "it is not a parameter this gateway serves"
		}
		return p, ref(invalid("%s: not supported by this gateway (%s): remove it", protocol.Clip(k), reason))
	}
	var b messagesBody
	if err := json.Unmarshal(data, &b); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			_, problem := door.TypeProblem(te)
			return p, ref(invalid("%s", problem))
		}
		return p, ref(invalid("the body could not be read: %s", door.JSONProblem(err)))
	}
	p.stream = b.Stream
	if b.Model != "default" {
		p.in.Model = b.Model
	}
	switch {
	case count:
	case b.MaxTokens == nil:
		return p, ref(invalid("max_tokens: field required"))
	case *b.MaxTokens < 1:
		return p, ref(invalid("max_tokens: must be at least 1"))
	default:
		p.in.MaxTokens = *b.MaxTokens
	}
	p.in.Temperature = b.Temperature
	if t := b.TopP; t != nil && (*t < 0 || *t > 1) {
		return p, ref(invalid("top_p: must be between 0 and 1"))
	}
	p.topP = b.TopP
	if i, problem := protocol.StopProblem(b.StopSequences); problem != "" && i < 0 {
		return p, ref(invalid("stop_sequences: %s", problem))
	} else if problem != "" {
		return p, ref(invalid("stop_sequences[%d]: %s", i, problem))
	}
	p.stop = b.StopSequences
	if b.ServiceTier != nil {
		tier, ok := serviceTiers[*b.ServiceTier]
		if !ok {
			return p, ref(invalid(`service_tier: must be "auto" or "standard_only" (or Jetway's "priority" or "flex"), got %q`, protocol.Clip(*b.ServiceTier)))
		}
		p.in.ServiceTier = tier
	}
	if b.Metadata != nil {
		var md map[string]json.RawMessage
		if json.Unmarshal(*b.Metadata, &md) != nil {
			return p, ref(invalid("metadata: must be an object"))
		}
		for k, v := range md {
			if k != "user_id" {
				return p, ref(invalid("metadata.%s: unknown field (metadata takes user_id)", protocol.Clip(k)))
			}
			if door.CompactJSON(v) != "null" && json.Unmarshal(v, &p.userID) != nil {
				return p, ref(invalid("metadata.user_id: must be a string"))
			}
		}
		p.userID = clip(p.userID, MaxUserIDBytes)
	}
	if _, err := cacheControl(b.CacheControl, "body"); err != nil {
		return p, err // automatic caching: the app's prompt_cache places the points
	}
	if cm := b.ContextManagement; cm != nil {
		for i, e := range cm.Edits {
			if !strings.HasPrefix(e.Type, "clear_thinking_") || door.CompactJSON(e.Keep) != `"all"` {
				return p, ref(invalid("context_management.edits[%d]: not supported by this gateway (context editing runs on Anthropic's servers); only clear_thinking keeping \"all\", which edits nothing, is accepted", i))
			}
		}
	}
	if oc := b.OutputConfig; oc != nil {
		if oc.Effort != nil && *oc.Effort != "high" {
			return p, ref(invalid(`output_config.effort: only "high" (the default) is supported by this gateway: Bedrock's Converse API does not carry effort`))
		}
		if oc.Format != nil && door.CompactJSON(*oc.Format) != "null" {
			return p, ref(invalid("output_config.format: structured outputs are not supported by this gateway: remove it"))
		}
	}
	system, cached, err := system(b.System)
	if err != nil {
		return p, err
	}
	t := translation{names: &names{}, system: system, prefixCache: cached}
	if err := t.messages(b.Messages); err != nil {
		return p, err
	}
	p.in.System = strings.Join(t.system, "\n\n")
	p.in.Messages, p.names = t.turns, t.names
	if err := tools(&p.in, b.Tools, b.ToolChoice, &t); err != nil {
		return p, err
	}
	p.prefixCache = t.prefixCache
	if th := b.Thinking; th != nil {
		switch th.Type {
		case "enabled":
			if th.BudgetTokens == nil {
				return p, ref(invalid("thinking.budget_tokens: field required"))
			}
			p.in.Reasoning = &protocol.Reasoning{BudgetTokens: *th.BudgetTokens}
		case "disabled", "adaptive":
			// adaptive lets the model decide whether to think; Bedrock's
			// Converse takes a budget or nothing, so nothing is asked.
		default:
			return p, ref(invalid(`thinking.type: must be "enabled", "adaptive" or "disabled"`))
		}
	}
	if err := protocol.ValidateRequest(&p.in); err != nil {
		e := rename(p.Names(), fromProtocol(gateway.Failure(err)))
		return p, &e
	}
	return p, nil
}

func ref(e apiError) *apiError { return &e }

// serviceTiers are the service_tier values served, as the core's tiers:
// Anthropic's "auto" (the app's tier) and "standard_only" (the default
// tier), and Jetway's "priority" and "flex" (docs/anthropic.md, "Service
// tier").
var serviceTiers = map[string]string{"auto": "", "standard_only": call.TierDefault, "priority": call.TierPriority,
	"flex": call.TierFlex}

// Request is the core's request.
func (p *parsed) Request() gateway.Request {
	r := p.in.Call()
	r.TopP, r.Stop, r.PrefixCachePoint = p.topP, p.stop, p.prefixCache
	return gateway.Request{Request: r, RequestID: p.in.RequestID, IsRequest: true}
}

// Codec is Anthropic's events, or one message body.
func (p *parsed) Codec() (stream.Codec, bool) {
	if p.stream {
		return events{}, true
	}
	return wholeMessage{}, false
}

// Log logs metadata.user_id, the end user the client names.
func (p *parsed) Log(logger *zap.Logger) {
	if p.userID != "" {
		logger.Info("metadata", zap.String("user_id", p.userID))
	}
}

// Names names the protocol request's fields as Anthropic's.
func (p *parsed) Names() door.Namer {
	if p.names == nil {
		return nil
	}
	return p.names
}

// system reads a system prompt (path: where it is): a string or text
// blocks; the parts are joined by a blank line. cached: a block has
// cache_control.
func system(raw json.RawMessage, paths ...string) (parts []string, cached bool, err *apiError) {
	path := "system"
	if len(paths) > 0 {
		path = paths[0]
	}
	switch v := first(raw); {
	case v == 0 || v == 'n':
		return nil, false, nil
	case v == '"':
		var s string
		_ = json.Unmarshal(raw, &s)
		return []string{s}, false, nil
	}
	var blocks []block
	if json.Unmarshal(raw, &blocks) != nil {
		return nil, false, ref(invalid("%s: must be a string or an array of text blocks", path))
	}
	texts := make([]string, 0, len(blocks))
	for i, b := range blocks {
		bp := fmt.Sprintf("%s[%d]", path, i)
		if b.Type != "text" {
			return nil, false, ref(invalid("%s.type: must be \"text\"", bp))
		}
		set, err := cacheControl(b.CacheControl, bp)
		if err != nil {
			return nil, false, err
		}
		cached = cached || set
		texts = append(texts, b.Text)
	}
	return texts, cached, nil
}

// cacheControl checks a cache_control: {"type":"ephemeral"} (with any
// ttl: Bedrock's cache lives 5 minutes) marks a cache point; set says one
// is there.
func cacheControl(raw json.RawMessage, path string) (set bool, err *apiError) {
	if v := first(raw); v == 0 || v == 'n' {
		return false, nil
	}
	var cc struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(raw, &cc) != nil || cc.Type != "ephemeral" {
		return false, ref(invalid(`%s.cache_control: must be {"type":"ephemeral"}`, path))
	}
	return true, nil
}

// translation turns messages into protocol turns. Consecutive messages of
// one role make one turn (Anthropic's API merges them; Bedrock needs
// turns that alternate).
type translation struct {
	system      []string // the system prompt's parts, then those of system messages
	prefixCache bool     // a system block or a tool has cache_control
	marked      bool     // the block just read (or a block inside it) has cache_control
	turns       []protocol.Message
	names       *names
	toolBlocks  bool // the messages hold tool_use or tool_result blocks
	documents   int  // documents so far, for their generated names
}

func (t *translation) messages(msgs []message) *apiError {
	if len(msgs) == 0 {
		return ref(invalid("messages: must not be empty"))
	}
	for i, m := range msgs {
		path := "messages[" + strconv.Itoa(i) + "]"
		if m.Role == "system" {
			// Bedrock has one system prompt: a system message (Claude
			// Code sends its environment as one) is appended to it.
			parts, cached, err := system(m.Content, path+".content")
			if err != nil {
				return err
			}
			t.system = append(t.system, parts...)
			t.prefixCache = t.prefixCache || cached
			continue
		}
		if m.Role != "user" && m.Role != "assistant" {
			return ref(invalid(`%s.role: must be "user", "assistant" or "system"`, path))
		}
		blocks, text, err := t.content(m, path)
		if err != nil {
			return err
		}
		k := len(t.turns) - 1
		if k < 0 || t.turns[k].Role != m.Role {
			k++
			t.turns = append(t.turns, protocol.Message{Role: m.Role, Content: text, Blocks: nil})
			t.names.message(path)
			if blocks == nil {
				continue
			}
			t.turns[k].Blocks = []protocol.Block{}
		} else if t.turns[k].Blocks == nil {
			// A merged turn is a list of blocks: its string content first.
			prev := t.turns[k].Content
			t.turns[k].Content, t.turns[k].Blocks = "", []protocol.Block{}
			t.names.block(k, sourced{protocol.Block{Type: protocol.BlockText, Text: prev}, t.names.turns[k] + ".content"})
			t.turns[k].Blocks = append(t.turns[k].Blocks, protocol.Block{Type: protocol.BlockText, Text: prev})
		}
		if blocks == nil {
			blocks = []sourced{{protocol.Block{Type: protocol.BlockText, Text: text}, path + ".content"}}
		}
		for _, s := range blocks {
			t.names.block(k, s)
			t.turns[k].Blocks = append(t.turns[k].Blocks, s.block)
		}
	}
	// A turn of one text block is its text: the request a WebSocket client
	// sends for the same prompt, with the same answer and cache key.
	for k := range t.turns {
		if b := t.turns[k].Blocks; len(b) == 1 && b[0].Type == protocol.BlockText {
			t.turns[k].Content, t.turns[k].Blocks = b[0].Text, nil
		}
	}
	for i := len(msgs) - 1; i >= 0; i-- {
		switch msgs[i].Role {
		case "system":
			continue
		case "assistant":
			return ref(invalid("messages[%d].role: the last message must be a user message (a final assistant message, a prefill, is not supported by this gateway)", i))
		}
		return nil
	}
	return ref(invalid("messages: must hold a user message"))
}

// sourced is a protocol block and the Anthropic path it came from.
type sourced struct {
	block protocol.Block
	from  string
}

// content reads a message's content: a string (text) or blocks.
func (t *translation) content(m message, path string) ([]sourced, string, *apiError) {
	switch first(m.Content) {
	case 0, 'n':
		return nil, "", ref(invalid("%s.content: field required", path))
	case '"':
		var s string
		_ = json.Unmarshal(m.Content, &s)
		return nil, s, nil
	}
	var blocks []block
	if err := json.Unmarshal(m.Content, &blocks); err != nil {
		return nil, "", ref(invalid("%s.content: must be a string or an array of content blocks", path))
	}
	if len(blocks) == 0 {
		return nil, "", ref(invalid("%s.content: must not be empty", path))
	}
	out := make([]sourced, 0, len(blocks))
	for j, b := range blocks {
		bp := path + ".content[" + strconv.Itoa(j) + "]"
		t.marked = false
		pb, err := t.block(b, bp, m.Role, false)
		if err != nil {
			return nil, "", err
		}
		out = append(out, sourced{pb, bp})
		if t.marked {
			// Bedrock's cache point follows the content it marks (one
			// inside a tool result marks the result).
			out = append(out, sourced{protocol.Block{Type: protocol.BlockCachePoint}, bp + ".cache_control"})
		}
	}
	return out, "", nil
}

// block translates one content block at path (inResult: inside a tool_result).
func (t *translation) block(b block, path, role string, inResult bool) (protocol.Block, *apiError) {
	set, err := cacheControl(b.CacheControl, path)
	if err != nil {
		return protocol.Block{}, err
	}
	t.marked = t.marked || set
	switch b.Type {
	case "text":
		return protocol.Block{Type: protocol.BlockText, Text: b.Text}, nil
	case "image":
		return image(b, path)
	case "document":
		return t.document(b, path)
	case "tool_use":
		t.toolBlocks = true
		input := b.Input
		if v := first(input); v == 0 || v == 'n' {
			input = json.RawMessage(`{}`)
		}
		return protocol.Block{Type: protocol.BlockToolUse, ID: b.ID, Name: b.Name, Input: input}, nil
	case "tool_result":
		if inResult {
			break
		}
		t.toolBlocks = true
		out := protocol.Block{Type: protocol.BlockToolResult, ToolUseID: b.ToolUseID}
		if b.IsError != nil && *b.IsError {
			out.Status = "error"
		}
		v := first(b.Content)
		switch {
		case v == 0 || v == 'n' || bytes.Equal(bytes.TrimSpace(b.Content), []byte(`""`)) || door.CompactJSON(b.Content) == "[]":
			return out, ref(invalid("%s.content: a tool result must have content (Bedrock's rule): send the tool's output, or a line saying it had none", path))
		case v == '"':
			var s string
			_ = json.Unmarshal(b.Content, &s)
			out.Content = []protocol.Block{{Type: protocol.BlockText, Text: s}}
			return out, nil
		}
		var inner []block
		if json.Unmarshal(b.Content, &inner) != nil {
			return out, ref(invalid("%s.content: must be a string or an array of text, image or document blocks", path))
		}
		for k, c := range inner {
			cb, err := t.block(c, path+".content["+strconv.Itoa(k)+"]", role, true)
			if err != nil {
				return out, err
			}
			out.Content = append(out.Content, cb)
		}
		return out, nil
	case "thinking":
		if b.Thinking == nil {
			return protocol.Block{}, ref(invalid("%s.thinking: field required", path))
		}
		return protocol.Block{Type: protocol.BlockReasoning, Text: *b.Thinking, Signature: b.Signature}, nil
	case "redacted_thinking":
		return protocol.Block{}, ref(invalid("%s.type: redacted_thinking blocks are not supported by this gateway: it never answers with them (Bedrock's redacted reasoning is not passed through), so they cannot come from one of its answers", path))
	case "":
		return protocol.Block{}, ref(invalid("%s.type: field required", path))
	}
	if inResult {
		return protocol.Block{}, ref(invalid("%s.type: a tool result holds text, image or document blocks", path))
	}
	return protocol.Block{}, ref(invalid("%s.type: %q is not supported by this gateway (text, image, document, tool_use, tool_result, thinking)", path, protocol.Clip(b.Type)))
}

// imageFormats are the image media types Bedrock takes, by format.
var imageFormats = map[string]string{"image/png": "png", "image/jpeg": "jpeg", "image/gif": "gif", "image/webp": "webp"}

// image reads an image block. Only base64 sources are served: the gateway
// makes no request on a user's behalf (no server-side request forgery, no
// unbounded download on the admission path).
func image(b block, path string) (protocol.Block, *apiError) {
	data, err := base64Source(b.Source, path)
	if err != nil {
		return protocol.Block{}, err
	}
	format, ok := imageFormats[b.Source.MediaType]
	if !ok {
		return protocol.Block{}, ref(invalid("%s.source.media_type: must be image/png, image/jpeg, image/gif or image/webp", path))
	}
	return protocol.Block{Type: protocol.BlockImage, Format: format, Data: protocol.ParseData(data)}, nil
}

// document reads a document block: a PDF (base64) or plain text (a text
// source, or base64 text/plain). Its name (Bedrock needs one) is its
// title made to fit Bedrock's name rule, else document-N.
func (t *translation) document(b block, path string) (protocol.Block, *apiError) {
	if b.Context != nil && *b.Context != "" {
		return protocol.Block{}, ref(invalid("%s.context: not supported by this gateway (Bedrock's documents have no context): put it in a text block", path))
	}
	if v := door.CompactJSON(b.Citations); v != "" && v != "null" && !strings.Contains(v, `"enabled":false`) {
		return protocol.Block{}, ref(invalid("%s.citations: not supported by this gateway: remove it", path))
	}
	t.documents++
	out := protocol.Block{Type: protocol.BlockDocument, Name: documentName(b.Title, t.documents)}
	if b.Source != nil && b.Source.Type == "text" {
		if b.Source.Data == "" {
			return out, ref(invalid("%s.source.data: must be the document's text", path))
		}
		out.Format, out.Data = "txt", protocol.DataOf([]byte(b.Source.Data))
		return out, nil
	}
	data, err := base64Source(b.Source, path)
	if err != nil {
		return out, err
	}
	switch b.Source.MediaType {
	case "application/pdf":
		out.Format = "pdf"
	case "text/plain":
		out.Format = "txt"
	default:
		return out, ref(invalid("%s.source.media_type: must be application/pdf or text/plain", path))
	}
	out.Data = protocol.ParseData(data)
	return out, nil
}

// base64Source reads a {"type":"base64","media_type","data"} source; a
// url or file source is refused: the gateway fetches nothing.
func base64Source(s *source, path string) (string, *apiError) {
	if s == nil {
		return "", ref(invalid("%s.source: field required", path))
	}
	switch s.Type {
	case "base64":
	case "url":
		return "", ref(invalid("%s.source.type: url sources are not supported: this gateway does not fetch URLs; send the bytes as a base64 source", path))
	case "file":
		return "", ref(invalid("%s.source.type: file sources (the Files API) are not supported: send the bytes as a base64 source", path))
	default:
		return "", ref(invalid(`%s.source.type: must be "base64"`, path))
	}
	if s.Data == "" {
		return "", ref(invalid("%s.source.data: must be a base64 string", path))
	}
	return s.Data, nil
}

// documentName is a document's name for Bedrock: the title with every
// character outside Bedrock's rule (letters, digits, hyphens, parentheses,
// square brackets, single spaces) made a space, at most 200 bytes; an
// empty one is document-n.
func documentName(title *string, n int) string {
	var b strings.Builder
	space := false
	if title != nil {
		for _, r := range *title {
			ok := r < 128 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-()[]", r))
			switch {
			case ok:
				if space && b.Len() > 0 {
					b.WriteByte(' ')
				}
				space = false
				b.WriteRune(r)
			default:
				space = true
			}
			if b.Len() >= 190 {
				break
			}
		}
	}
	if b.Len() == 0 {
		return "document-" + strconv.Itoa(n)
	}
	return b.String()
}

// tools translates tools and tool_choice. tool_choice none passes no
// tools, so the model cannot call one.
func tools(in *protocol.Inbound, ts []tool, choice *toolChoice, t *translation) *apiError {
	if choice != nil {
		if d := choice.DisableParallelToolUse; d != nil && *d {
			return ref(invalid("tool_choice.disable_parallel_tool_use: true is not supported by this gateway (Bedrock cannot hold an answer to one tool call): remove it"))
		}
		switch choice.Type {
		case "auto":
			in.ToolChoice = &protocol.ToolChoice{Mode: protocol.ToolChoiceAuto}
		case "any":
			in.ToolChoice = &protocol.ToolChoice{Mode: protocol.ToolChoiceAny}
		case "tool":
			if choice.Name == "" {
				return ref(invalid("tool_choice.name: field required"))
			}
			in.ToolChoice = &protocol.ToolChoice{Mode: protocol.ToolChoiceTool, Name: choice.Name}
		case "none":
			if t.toolBlocks {
				return ref(invalid(`tool_choice: "none" is not supported for a conversation that holds tool_use or tool_result blocks (the model reads them only with the tools given, and Bedrock cannot forbid a new call then): send "auto"`))
			}
			return nil
		default:
			return ref(invalid(`tool_choice.type: must be "auto", "any", "tool" or "none"`))
		}
	}
	for i, tl := range ts {
		p := "tools[" + strconv.Itoa(i) + "]"
		set, err := cacheControl(tl.CacheControl, p)
		if err != nil {
			return err
		}
		if tl.Type != "" && tl.Type != "custom" {
			return ref(invalid("%s.type: %q is a tool that runs on Anthropic's servers; this gateway serves client tools only (no type, or \"custom\")", p, protocol.Clip(tl.Type)))
		}
		if tl.DeferLoading {
			continue // not in the model's prompt until tool search loads it, which this gateway does not do
		}
		in.Tools = append(in.Tools, protocol.Tool{Name: tl.Name, Description: tl.Description, InputSchema: tl.InputSchema})
		t.prefixCache = t.prefixCache || set
	}
	return nil
}

// names records where the protocol request's turns and blocks came
// from, so that a field its validation names ("messages[2].content[1].data")
// is named as the Anthropic field ("messages[3].content[0].source.data").
type names struct {
	turns  []string    // turn k's message ("messages[3]")
	blocks [][]sourced // turn k's blocks and where they came from
}

func (n *names) message(from string) {
	n.turns = append(n.turns, from)
	n.blocks = append(n.blocks, nil)
}

// block records the next block of turn k.
func (n *names) block(k int, s sourced) { n.blocks[k] = append(n.blocks[k], s) }

// Name is the Anthropic field a field of the protocol request came from.
func (n *names) Name(p call.Path) (string, bool) {
	k, ok := p.Index(1)
	if !ok || p[0] != "messages" || k >= len(n.turns) {
		return "", false
	}
	switch {
	case len(p) == 2:
		return n.turns[k], true
	case len(p) == 3 && (p[2] == "content" || p[2] == "role"):
		return n.turns[k] + "." + p[2], true
	case p[2] != "content":
		return "", false
	}
	j, ok := p.Index(3)
	if !ok || j >= len(n.blocks[k]) {
		return "", false
	}
	return blockName(n.blocks[k][j].from, n.blocks[k][j].block, p[4:])
}

// sourceFields are an image's or a document's fields in Anthropic's names.
var sourceFields = map[string]string{"data": ".source.data", "format": ".source.media_type", "name": ".title"}

// blockName is the Anthropic field of field rest of block b, which came
// from `from` (none: the block's).
func blockName(from string, b protocol.Block, rest call.Path) (string, bool) {
	if len(rest) == 0 {
		return from, true
	}
	if len(rest) == 1 {
		switch f := rest[0]; {
		case b.Type == protocol.BlockImage || b.Type == protocol.BlockDocument:
			to, ok := sourceFields[f]
			return from + to, ok
		case b.Type == protocol.BlockReasoning && f == "text":
			return from + ".thinking", true
		case b.Type == protocol.BlockText && f == "text":
			if !strings.HasSuffix(from, "]") { // a string content
				return from, true
			}
			return from + ".text", true
		}
		return "", false
	}
	if i, ok := rest.Index(1); ok && b.Type == protocol.BlockToolResult && rest[0] == "content" && i < len(b.Content) {
		return blockName(from+rest[:2].Rest(0), b.Content[i], rest[2:])
	}
	return "", false
}

// rename names the protocol field an invalid request names (its path,
// call.ClientError.Path) as the Anthropic field it came from, followed
// by the problem; reasoning is thinking. A field names does not know has
// the same name here (tools, tool_choice, max_tokens, temperature,
// service_tier).
func rename(n door.Namer, e apiError) apiError {
	if n == nil || e.code != protocol.CodeInvalidRequest || e.path == nil {
		return e
	}
	to, ok := n.Name(e.path)
	if e.path[0] == "reasoning" {
		to, ok = "thinking"+e.path.Rest(1), true
	}
	if ok {
		e.msg = to + e.problem
	}
	return e
}

// first is the first byte of a JSON value (0 when there is none): the
// kind of a value that may be megabytes, without reading it all.
func first(raw json.RawMessage) byte {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	if len(raw) == 0 {
		return 0
	}
	return raw[0]
}

// clip cuts s to at most n bytes, never inside a UTF-8 sequence.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}
