package protocol

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"unsafe"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// Content block types. A message's content is a string (one text block) or
// a list of these; a done frame's blocks use text, reasoning and tool_use.
const (
	BlockText       = "text"
	BlockImage      = "image"
	BlockDocument   = "document"
	BlockToolUse    = "tool_use"
	BlockToolResult = "tool_result"
	BlockReasoning  = "reasoning"
)

// Chunk kinds: a chunk without a kind is text.
const (
	KindReasoning = "reasoning"
	KindToolUse   = "tool_use"
)

// StopToolUse is the stop_reason of an answer that asks for tool results.
const StopToolUse = "tool_use"

// Attachment and tool bounds. The byte limits are Bedrock's own (Converse
// API: 3.75 MB per image, 4.5 MB per document, 20 images and 5 documents per
// request), checked on the decoded size before any model call.
const (
	MaxImageBytes        = 3932160 // 3.75 MiB decoded
	MaxDocumentBytes     = 4718592 // 4.5 MiB decoded
	MaxImagesPerRequest  = 20
	MaxDocsPerRequest    = 5
	MaxBlocksPerMessage  = 100
	MaxTools             = 64
	MaxToolDescription   = 16384 // Claude Code's longest reach 6.4 KB (2.1.328)
	MinReasoningBudget   = 1024
	maxDocumentNameBytes = 200
)

var (
	imageFormats    = map[string]bool{"png": true, "jpeg": true, "gif": true, "webp": true}
	documentFormats = map[string]bool{"pdf": true, "csv": true, "doc": true, "docx": true, "xls": true,
		"xlsx": true, "html": true, "txt": true, "md": true}
	// toolNamePattern is Bedrock's ToolSpecification name rule.
	toolNamePattern = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)
	// documentNamePattern is Bedrock's DocumentBlock name rule (letters,
	// digits, single spaces, hyphens, parentheses, square brackets).
	documentNamePattern = regexp.MustCompile(`^[A-Za-z0-9\-()\[\]]+( [A-Za-z0-9\-()\[\]]+)*$`)
)

// Block is one content block. Which fields are set depends on Type:
//   - text: Text
//   - image: Format (png|jpeg|gif|webp), Data (base64; see Bytes)
//   - document: Format (pdf|csv|doc|docx|xls|xlsx|html|txt|md), Name, Data (base64; see Bytes)
//   - tool_use (assistant turns, done): ID, Name, Input (a JSON object)
//   - tool_result (user turns): ToolUseID, Content (text, image or document
//     blocks), Status ("success", "error" or absent)
//   - reasoning (assistant turns, done): Text, Signature (pass it back
//     unchanged in the next turn of a tool loop)
type Block struct {
	Type      string          `json:"type"`
	Text      string          `json:"text,omitempty"`
	Format    string          `json:"format,omitempty"`
	Name      string          `json:"name,omitempty"`
	Data      string          `json:"data,omitempty"`
	ID        string          `json:"id,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
	ToolUseID string          `json:"tool_use_id,omitempty"`
	Content   []Block         `json:"content,omitempty"`
	Status    string          `json:"status,omitempty"`
	Signature string          `json:"signature,omitempty"`

	// Bytes is an image's or a document's decoded data and Digest its
	// SHA-256, set by validation (Decode, ValidateRequest): the server
	// decodes and hashes an attachment once, and the model call, the
	// request's fingerprint and the cache key use these. Decoding a frame
	// (Decode) decodes the base64 straight out of the frame into Bytes and
	// leaves Data empty: the base64 text is never copied. A block encodes
	// Bytes as its data when Data is empty.
	Bytes  []byte            `json:"-"`
	Digest [sha256.Size]byte `json:"-"`

	// data is what reading the base64 found: dataRead once it was read
	// (from the frame, or from Data by validation), dataSize the decoded
	// size the text stands for, -1 when it is not valid base64.
	dataRead bool
	dataSize int
}

// blockWire is Block without its methods, for encoding/json.
type blockWire Block

// MarshalJSON writes the block, its data from Bytes when Data is empty (a
// block decoded from a frame).
func (b Block) MarshalJSON() ([]byte, error) {
	if b.Data == "" && b.Bytes != nil {
		b.Data = base64.StdEncoding.EncodeToString(b.Bytes)
	}
	return json.Marshal(blockWire(b))
}

// UnmarshalJSONFrom decodes a block from the token stream, matching keys
// as encoding/json does (any case; the last of a repeated key wins;
// others are ignored). An attachment's base64 is decoded straight from
// the frame's bytes into Bytes (readData); its errors are validation's to
// report, with the field's path.
func (b *Block) UnmarshalJSONFrom(dec *jsontext.Decoder) error {
	*b = Block{}
	if dec.PeekKind() != '{' {
		return errors.New("a block must be a JSON object")
	}
	if _, err := dec.ReadToken(); err != nil {
		return err
	}
	for dec.PeekKind() != '}' {
		k, err := dec.ReadToken()
		if err != nil {
			return err
		}
		var field any
		switch name := k.String(); {
		case strings.EqualFold(name, "data"):
			if err := b.decodeData(dec); err != nil {
				return err
			}
			continue
		case strings.EqualFold(name, "type"):
			field = &b.Type
		case strings.EqualFold(name, "text"):
			field = &b.Text
		case strings.EqualFold(name, "format"):
			field = &b.Format
		case strings.EqualFold(name, "name"):
			field = &b.Name
		case strings.EqualFold(name, "id"):
			field = &b.ID
		case strings.EqualFold(name, "input"):
			field = &b.Input
		case strings.EqualFold(name, "tool_use_id"):
			field = &b.ToolUseID
		case strings.EqualFold(name, "content"):
			field = &b.Content
		case strings.EqualFold(name, "status"):
			field = &b.Status
		case strings.EqualFold(name, "signature"):
			field = &b.Signature
		default:
			if err := dec.SkipValue(); err != nil {
				return err
			}
			continue
		}
		if err := jsonv2.UnmarshalDecode(dec, field); err != nil {
			return err
		}
	}
	_, err := dec.ReadToken()
	return err
}

// decodeData reads "data": null (absent), or a string whose base64 is
// decoded in place (the decoder's buffer; unquoted first only when the
// text has escapes, which base64 never needs).
func (b *Block) decodeData(dec *jsontext.Decoder) error {
	b.Data, b.Bytes, b.dataRead = "", nil, false
	switch dec.PeekKind() {
	case 'n':
		_, err := dec.ReadToken()
		return err
	case '"':
	default:
		return errors.New("data must be a string")
	}
	v, err := dec.ReadValue()
	if err != nil {
		return err
	}
	text := []byte(v[1 : len(v)-1])
	if bytes.IndexByte(text, '\\') >= 0 {
		if text, err = jsontext.AppendUnquote(nil, v); err != nil {
			return err
		}
	}
	b.readData(text)
	return nil
}

// readData reads base64 text (standard, padded, strict: no line breaks,
// zero padding bits): its decoded size, and its bytes into Bytes unless it
// stands for more than any attachment may have (the size is checked before
// decoding, so an oversized attachment costs no allocation).
func (b *Block) readData(text []byte) {
	b.dataRead, b.dataSize, b.Bytes = true, -1, nil
	// (Go's decoder skips line breaks; IndexByte is vectorized.)
	if len(text) == 0 || len(text)%4 != 0 || bytes.IndexByte(text, '\n') >= 0 || bytes.IndexByte(text, '\r') >= 0 {
		return
	}
	n := len(text) / 4 * 3
	if text[len(text)-1] == '=' {
		n--
		if text[len(text)-2] == '=' {
			n--
		}
	}
	if n > max(MaxImageBytes, MaxDocumentBytes) {
		b.dataSize = n
		return
	}
	data := make([]byte, n)
	if m, err := base64.StdEncoding.Strict().Decode(data, text); err != nil || m != n {
		return
	}
	b.dataSize, b.Bytes = n, data
}

// Message is one turn of the conversation. Its content is either Content (a
// string, as in every text-only request) or Blocks (the list form); exactly
// one is set. A message with Blocks encodes its content as a list, one
// without as the string, so text-only messages keep their encoding.
type Message struct {
	Role    string  `json:"role"`
	Content string  `json:"-"`
	Blocks  []Block `json:"-"`
}

type textMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type blockMessage struct {
	Role    string  `json:"role"`
	Content []Block `json:"content"`
}

// MarshalJSON writes content as a string, or as a list when Blocks is set.
func (m Message) MarshalJSON() ([]byte, error) {
	if m.Blocks != nil {
		return json.Marshal(blockMessage{m.Role, m.Blocks})
	}
	return json.Marshal(textMessage{m.Role, m.Content})
}

// UnmarshalJSON accepts content as a string or as a list of blocks (see
// UnmarshalJSONFrom).
func (m *Message) UnmarshalJSON(data []byte) error {
	return jsonv2.Unmarshal(data, m, decodeOptions)
}

// UnmarshalJSONFrom decodes a message in one pass over its bytes, as part
// of a whole frame (Decode): no value is scanned twice, so a large
// attachment costs one validation and one decoding of its base64. Keys match
// as encoding/json matches them (any case; the last of a repeated key wins;
// others are ignored).
func (m *Message) UnmarshalJSONFrom(dec *jsontext.Decoder) error {
	*m = Message{}
	if dec.PeekKind() != '{' {
		return errors.New("a message must be a JSON object")
	}
	if _, err := dec.ReadToken(); err != nil {
		return err
	}
	for dec.PeekKind() != '}' {
		k, err := dec.ReadToken()
		if err != nil {
			return err
		}
		switch name := k.String(); {
		case strings.EqualFold(name, "role"):
			if err := jsonv2.UnmarshalDecode(dec, &m.Role); err != nil {
				return err
			}
		case strings.EqualFold(name, "content"):
			if err := m.decodeContent(dec); err != nil {
				return err
			}
		default:
			if err := dec.SkipValue(); err != nil {
				return err
			}
		}
	}
	_, err := dec.ReadToken()
	return err
}

// decodeContent reads content: a string, a list of blocks, or null.
func (m *Message) decodeContent(dec *jsontext.Decoder) error {
	m.Content, m.Blocks = "", nil
	switch dec.PeekKind() {
	case 'n':
		_, err := dec.ReadToken()
		return err
	case '"':
		return jsonv2.UnmarshalDecode(dec, &m.Content)
	case '[':
		if err := jsonv2.UnmarshalDecode(dec, &m.Blocks); err != nil {
			return err
		}
		if m.Blocks == nil {
			m.Blocks = []Block{} // present but empty: refused by validation, not taken for absent
		}
		return nil
	default:
		return errors.New("content must be a string or a list of blocks")
	}
}

// Tool is a function the model may call: Bedrock's toolSpec.
type Tool struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema"`
}

// Tool choice modes.
const (
	ToolChoiceAuto = "auto"
	ToolChoiceAny  = "any"
	ToolChoiceTool = "tool"
)

// ToolChoice is "auto", "any" or {"name": "..."} on the wire. Mode is
// ToolChoiceAuto, ToolChoiceAny or ToolChoiceTool (with Name).
type ToolChoice struct {
	Mode string
	Name string
}

// MarshalJSON writes the wire form.
func (c ToolChoice) MarshalJSON() ([]byte, error) {
	if c.Mode == ToolChoiceTool {
		return json.Marshal(struct {
			Name string `json:"name"`
		}{c.Name})
	}
	return json.Marshal(c.Mode)
}

// UnmarshalJSON reads "auto", "any" or {"name": "..."}; validation checks the values.
func (c *ToolChoice) UnmarshalJSON(data []byte) error {
	if len(data) > 0 && data[0] == '"' {
		return json.Unmarshal(data, &c.Mode)
	}
	var named struct {
		Name string `json:"name"`
	}
	if err := json.Unmarshal(data, &named); err != nil {
		return err
	}
	*c = ToolChoice{Mode: ToolChoiceTool, Name: named.Name}
	return nil
}

// Reasoning asks a reasoning model to think, with a budget of output tokens.
type Reasoning struct {
	BudgetTokens int `json:"budget_tokens"`
}

// Features is what a request uses beyond text, for capability checks and
// the quota estimate.
type Features struct {
	Tools     bool // tools, tool_choice or tool_use/tool_result blocks
	Reasoning bool
	Images    int
	Documents int
	// AttachmentBytes is the decoded size of every image and document;
	// DocumentBytes of the documents alone.
	AttachmentBytes int64
	DocumentBytes   int64
}

// Features reports what in uses beyond text.
func (in *Inbound) Features() Features {
	f := Features{Tools: len(in.Tools) > 0 || in.ToolChoice != nil, Reasoning: in.Reasoning != nil}
	var walk func([]Block)
	walk = func(bs []Block) {
		for _, b := range bs {
			switch b.Type {
			case BlockImage:
				f.Images++
				f.AttachmentBytes += int64(len(b.Bytes))
			case BlockDocument:
				f.Documents++
				f.AttachmentBytes += int64(len(b.Bytes))
				f.DocumentBytes += int64(len(b.Bytes))
			case BlockToolUse:
				f.Tools = true
			case BlockToolResult:
				f.Tools = true
				walk(b.Content)
			}
		}
	}
	for _, m := range in.Messages {
		walk(m.Blocks)
	}
	return f
}

// Text returns the message's text: Content, or its text blocks (and the
// text of its tool results) joined with "\n".
func (m Message) Text() string {
	if m.Blocks == nil {
		return m.Content
	}
	var b []byte
	var walk func([]Block)
	walk = func(bs []Block) {
		for _, bl := range bs {
			switch bl.Type {
			case BlockText:
				if len(b) > 0 {
					b = append(b, '\n')
				}
				b = append(b, bl.Text...)
			case BlockToolResult:
				walk(bl.Content)
			}
		}
	}
	walk(m.Blocks)
	return string(b)
}

// UsesBlocks reports whether in uses anything beyond text messages.
func (f Features) UsesBlocks() bool {
	return f.Tools || f.Reasoning || f.Images > 0 || f.Documents > 0
}

// validateBlocks checks every message's block list and the request's tools,
// tool choice and reasoning options; errors name the field.
func validateBlocks(in *Inbound) error {
	var images, docs int
	toolBlocks := false
	var unanswered error // a tool_result for no call: refused once the tools are known valid
	for i, m := range in.Messages {
		if m.Blocks == nil {
			continue
		}
		var calls []Block // the tool_use blocks a tool_result here may answer
		if i > 0 && m.Role == "user" && in.Messages[i-1].Role == "assistant" {
			calls = in.Messages[i-1].Blocks
		}
		answered := map[string]bool{}
		path := "messages[" + strconv.Itoa(i) + "].content"
		if len(m.Blocks) == 0 {
			return invalidAt(path, " must not be empty")
		}
		if len(m.Blocks) > MaxBlocksPerMessage {
			return invalidAt(path, " has more than %d blocks", MaxBlocksPerMessage)
		}
		for j := range m.Blocks {
			b := &m.Blocks[j]
			bp := path + "[" + strconv.Itoa(j) + "]"
			if err := validateBlock(b, bp, m.Role, &images, &docs, false); err != nil {
				return err
			}
			if b.Type == BlockToolResult && unanswered == nil {
				unanswered = answers(b.ToolUseID, calls, answered, bp)
			}
			if b.Type == BlockToolUse || b.Type == BlockToolResult {
				toolBlocks = true
			}
		}
	}
	if images > MaxImagesPerRequest {
		return invalid("at most %d images per request", MaxImagesPerRequest)
	}
	if docs > MaxDocsPerRequest {
		return invalid("at most %d documents per request", MaxDocsPerRequest)
	}
	if err := validateTools(in); err != nil {
		return err
	}
	if toolBlocks && len(in.Tools) == 0 {
		return invalidAt("tools", " are required when messages contain tool_use or tool_result blocks")
	}
	if unanswered != nil {
		return unanswered
	}
	if r := in.Reasoning; r != nil {
		if r.BudgetTokens < MinReasoningBudget {
			return invalidAt("reasoning.budget_tokens", " must be at least %d", MinReasoningBudget)
		}
		if in.MaxTokens > 0 && r.BudgetTokens >= in.MaxTokens {
			return invalidAt("reasoning.budget_tokens", " must be less than max_tokens")
		}
	}
	return nil
}

// answers checks that a tool_result at path answers one of calls, the
// tool_use blocks of the assistant message right before it (Bedrock's
// rule), and no call twice: a result for no call is refused before any
// quota is reserved, whichever door it came through.
func answers(id string, calls []Block, answered map[string]bool, path string) error {
	if answered[id] {
		return invalidAt(path+".tool_use_id", " %q answers a tool_use already answered in this message", id)
	}
	for _, c := range calls {
		if c.Type == BlockToolUse && c.ID == id {
			answered[id] = true
			return nil
		}
	}
	return invalidAt(path+".tool_use_id", " %q matches no tool_use block of the assistant message before it", id)
}

func validateBlock(b *Block, path, role string, images, docs *int, inResult bool) error {
	switch b.Type {
	case BlockText:
		if b.Text == "" {
			return invalidAt(path+".text", " must not be empty")
		}
	case BlockImage:
		if !imageFormats[b.Format] {
			return invalidAt(path+".format", " must be one of png, jpeg, gif, webp")
		}
		if err := decodeAttachment(b, path, "an image", MaxImageBytes); err != nil {
			return err
		}
		*images++
	case BlockDocument:
		if !documentFormats[b.Format] {
			return invalidAt(path+".format", " must be one of pdf, csv, doc, docx, xls, xlsx, html, txt, md")
		}
		if len(b.Name) > maxDocumentNameBytes || !documentNamePattern.MatchString(b.Name) {
			return invalidAt(path+".name", " must be 1-%d characters of letters, digits, single spaces, hyphens, parentheses and square brackets", maxDocumentNameBytes)
		}
		if err := decodeAttachment(b, path, "a document", MaxDocumentBytes); err != nil {
			return err
		}
		*docs++
	case BlockToolUse:
		if inResult || role != "assistant" {
			return invalidAt(path, ": tool_use blocks belong in assistant messages")
		}
		if !ValidToolUseID(b.ID) {
			return invalidAt(path+".id", " must be 1-64 characters of [A-Za-z0-9_-]")
		}
		if !toolNamePattern.MatchString(b.Name) {
			return invalidAt(path+".name", " must be 1-64 characters of [A-Za-z0-9_-]")
		}
		if !isJSONObject(b.Input) {
			return invalidAt(path+".input", " must be a JSON object")
		}
	case BlockToolResult:
		if inResult || role != "user" {
			return invalidAt(path, ": tool_result blocks belong in user messages")
		}
		if !ValidToolUseID(b.ToolUseID) {
			return invalidAt(path+".tool_use_id", " must be 1-64 characters of [A-Za-z0-9_-]")
		}
		if b.Status != "" && b.Status != "success" && b.Status != "error" {
			return invalidAt(path+".status", " must be \"success\" or \"error\"")
		}
		if len(b.Content) == 0 {
			return invalidAt(path+".content", " must not be empty")
		}
		if len(b.Content) > MaxBlocksPerMessage {
			return invalidAt(path+".content", " has more than %d blocks", MaxBlocksPerMessage)
		}
		for k := range b.Content {
			c := &b.Content[k]
			cp := path + ".content[" + strconv.Itoa(k) + "]"
			if c.Type != BlockText && c.Type != BlockImage && c.Type != BlockDocument {
				return invalidAt(cp+".type", " must be text, image or document")
			}
			if err := validateBlock(c, cp, role, images, docs, true); err != nil {
				return err
			}
		}
	case BlockReasoning:
		if inResult || role != "assistant" {
			return invalidAt(path, ": reasoning blocks belong in assistant messages")
		}
		if b.Text == "" {
			return invalidAt(path+".text", " must not be empty")
		}
	case "":
		return invalidAt(path+".type", " is required")
	default:
		return invalidAt(path+".type", " %q is unknown (text, image, document, tool_use, tool_result, reasoning)", Clip(b.Type))
	}
	return nil
}

func validateTools(in *Inbound) error {
	if len(in.Tools) > MaxTools {
		return invalid("at most %d tools", MaxTools)
	}
	for i, t := range in.Tools {
		p := "tools[" + strconv.Itoa(i) + "]"
		if !toolNamePattern.MatchString(t.Name) {
			return invalidAt(p+".name", " must be 1-64 characters of [A-Za-z0-9_-]")
		}
		for _, u := range in.Tools[:i] {
			if u.Name == t.Name {
				return invalidAt(p+".name", " %q is not unique", t.Name)
			}
		}
		if len(t.Description) > MaxToolDescription {
			return invalidAt(p+".description", " is longer than %d bytes", MaxToolDescription)
		}
		if !isJSONObject(t.InputSchema) {
			return invalidAt(p+".input_schema", " must be a JSON object (a JSON Schema)")
		}
	}
	c := in.ToolChoice
	if c == nil {
		return nil
	}
	if len(in.Tools) == 0 {
		return invalidAt("tool_choice", " needs tools")
	}
	switch c.Mode {
	case ToolChoiceAuto, ToolChoiceAny:
	case ToolChoiceTool:
		for _, t := range in.Tools {
			if t.Name == c.Name {
				return nil
			}
		}
		return invalidAt("tool_choice.name", " must name one of the tools")
	default:
		return invalidAt("tool_choice", " must be \"auto\", \"any\" or {\"name\": \"<tool>\"}")
	}
	return nil
}

var toolUseIDPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ValidToolUseID reports whether s is a valid tool_use id (Bedrock's rule).
func ValidToolUseID(s string) bool { return toolUseIDPattern.MatchString(s) }

func isJSONObject(raw json.RawMessage) bool {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	return len(raw) > 0 && raw[0] == '{' && json.Valid(raw)
}

// decodeAttachment checks an attachment's data, read from the frame or
// (for a block built in code) from b.Data now, against limit, and hashes
// its bytes into b.Digest.
func decodeAttachment(b *Block, path, what string, limit int) error {
	if b.Data != "" || !b.dataRead {
		// A block built in code (a frame's leaves Data empty). Decode
		// only reads its source: the string's bytes are used in place
		// rather than copied (an attachment is megabytes).
		b.readData(unsafe.Slice(unsafe.StringData(b.Data), len(b.Data)))
	}
	switch {
	case b.dataSize < 0:
		return invalidAt(path+".data", " is not valid base64")
	case b.dataSize > limit:
		return invalidAt(path+".data", " is %d bytes, over the %d bytes %s may have", b.dataSize, limit, what)
	}
	b.Digest = sha256.Sum256(b.Bytes)
	return nil
}
