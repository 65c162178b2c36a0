package protocol

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"image"
	_ "image/gif" // image.DecodeConfig reads their headers
	_ "image/jpeg"
	_ "image/png"
	"regexp"
	"strconv"
	"strings"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	_ "golang.org/x/image/webp"
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
	// BlockCachePoint marks the end of a prompt-cache prefix (Bedrock's
	// cachePoint content block): the conversation up to it may be cached.
	BlockCachePoint = "cache_point"
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
//   - image: Format (png|jpeg|gif|webp), Data
//   - document: Format (pdf|csv|doc|docx|xls|xlsx|html|txt|md), Name, Data
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
	Data      Data            `json:"data,omitzero"`
	ID        string          `json:"id,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
	ToolUseID string          `json:"tool_use_id,omitempty"`
	Content   []Block         `json:"content,omitempty"`
	Status    string          `json:"status,omitempty"`
	Signature string          `json:"signature,omitempty"`
}

// Data is an image's or a document's content: base64 text on the wire (standard
// alphabet, padded, no line breaks), its decoded bytes in memory. Decoding a
// frame decodes the base64 once, straight from the frame's buffer (the
// text is never copied), and skips the decoding when the text stands
// for more than any attachment may have, so an oversized attachment costs
// no allocation. Validation (Decode, ValidateRequest) checks the size
// against the block's limit and hashes the bytes once (Digest): the model
// call, the request's fingerprint and the cache key use these. The zero
// Data is absent.
type Data struct {
	bytes  []byte // the decoded bytes; nil when absent, not base64 or oversized
	size   int    // the decoded size the text stands for; 0 absent, -1 not valid base64
	digest [sha256.Size]byte
	// text is wire text that stands for no bytes, sent as given: data
	// built in code that was not decoded (ParseData; the server names the
	// problem), or a digest (Digested).
	text string
}

// DataOf returns the Data of b (encoded as its base64 on the wire).
func DataOf(b []byte) Data {
	if len(b) == 0 {
		return Data{size: -1}
	}
	return Data{bytes: b, size: len(b)}
}

// ParseData decodes base64 text (a door's data URL, a Go client's string)
// once into a Data; text it does not decode (not valid base64, or over
// every attachment limit) is kept as given, for validation to name.
func ParseData(text string) Data {
	var d Data
	d.read([]byte(text)) // not copied: read only reads its argument
	if d.bytes == nil {
		d.text = text
	}
	return d
}

// Bytes returns the decoded bytes (nil when absent, not valid base64 or
// over every attachment limit).
func (d Data) Bytes() []byte { return d.bytes }

// Digest returns the SHA-256 of the bytes, computed by validation.
func (d Data) Digest() [sha256.Size]byte { return d.digest }

// IsZero reports whether d is absent (the field is then left out).
func (d Data) IsZero() bool { return d.size == 0 && d.text == "" }

// Digested returns a Data that encodes as "sha256:" and the hex digest of
// d's bytes (never valid base64, so no attachment's data can stand for
// another's digest): a request's fingerprint counts an attachment by its
// digest, neither encoding nor hashing megabytes again.
func (d Data) Digested() Data {
	return Data{size: -1, text: "sha256:" + hex.EncodeToString(d.digest[:])}
}

// MarshalJSON writes the data as a JSON string: the base64 of its bytes.
func (d Data) MarshalJSON() ([]byte, error) {
	if d.bytes == nil {
		return json.Marshal(d.text)
	}
	n := base64.StdEncoding.EncodedLen(len(d.bytes))
	out := make([]byte, n+2)
	out[0], out[n+1] = '"', '"'
	base64.StdEncoding.Encode(out[1:], d.bytes)
	return out, nil
}

// UnmarshalJSON reads a JSON string of base64 (null is absent data). The
// decoder hands it the value inside the frame's buffer; a string
// with escapes (which base64 never needs, but encoders may write "\/")
// is unquoted first. Text that is not valid base64 is validation's to
// report, with the field's path.
func (d *Data) UnmarshalJSON(v []byte) error {
	*d = Data{}
	if string(v) == "null" {
		return nil
	}
	if len(v) < 2 || v[0] != '"' {
		return errors.New("data must be a string")
	}
	text := v[1 : len(v)-1]
	if bytes.IndexByte(text, '\\') >= 0 {
		var err error
		if text, err = jsontext.AppendUnquote(nil, v); err != nil {
			return err
		}
	}
	d.read(text)
	return nil
}

// read reads base64 text (standard, padded, strict: no line breaks,
// zero padding bits): its decoded size, and its bytes unless it stands
// for more than any attachment may have (the size is checked before
// decoding).
func (d *Data) read(text []byte) {
	d.size, d.bytes = -1, nil
	if len(text) == 0 || len(text)%4 != 0 {
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
		d.size = n
		return
	}
	b := make([]byte, n)
	// Go's decoder skips line breaks, which the wire refuses: text with
	// any decodes to fewer bytes than its length stands for (or fails).
	if m, err := base64.StdEncoding.Strict().Decode(b, text); err != nil || m != n {
		return
	}
	d.size, d.bytes = n, b
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

// UnmarshalJSONFrom decodes a message as part of a whole frame (Decode),
// in the one pass over the frame's bytes: no value is read twice, so a
// large attachment costs one scan and one decoding of its base64. Keys
// match as the frame's other keys do (any case; the last of a repeated
// key wins; others are ignored): read here rather than through a wire
// struct, which would cost an allocation per message.
func (m *Message) UnmarshalJSONFrom(dec *jsontext.Decoder) error {
	*m = Message{}
	if dec.PeekKind() != '{' {
		return errors.New("a message must be a JSON object")
	}
	if _, err := dec.ReadToken(); err != nil {
		return err
	}
	for dec.PeekKind() != '}' {
		k, err := dec.ReadValue()
		if err != nil {
			return err
		}
		switch {
		case nameIs(k, "role"):
			err = jsonv2.UnmarshalDecode(dec, &m.Role)
		case nameIs(k, "content"):
			err = m.decodeContent(dec)
		default:
			err = dec.SkipValue()
		}
		if err != nil {
			return err
		}
	}
	_, err := dec.ReadToken()
	return err
}

// nameIs reports whether the object name k (a JSON string as read)
// is name in any case; names with escapes are compared unquoted.
func nameIs(k jsontext.Value, name string) bool {
	if bytes.IndexByte(k, '\\') < 0 {
		return len(k) == len(name)+2 && strings.EqualFold(string(k[1:len(k)-1]), name)
	}
	u, err := jsontext.AppendUnquote(nil, k)
	return err == nil && strings.EqualFold(string(u), name)
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
		return jsonv2.Unmarshal(data, &c.Mode, decodeOptions)
	}
	var named struct {
		Name string `json:"name"`
	}
	if err := jsonv2.Unmarshal(data, &named, decodeOptions); err != nil {
		return err
	}
	*c = ToolChoice{Mode: ToolChoiceTool, Name: named.Name}
	return nil
}

// Reasoning asks a reasoning model to think, with a budget of output tokens.
type Reasoning struct {
	BudgetTokens int `json:"budget_tokens"`
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
		if err := checkImageSize(b.Data.bytes, path); err != nil {
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
	case BlockCachePoint:
		if inResult {
			return invalidAt(path, ": cache_point blocks belong in a message's content, not in a tool result")
		}
		if strings.HasSuffix(path, "[0]") {
			return invalidAt(path, ": a cache_point follows the content it marks; it cannot be a message's first block")
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
		return invalidAt(path+".type", " %q is unknown (text, image, document, tool_use, tool_result, reasoning, cache_point)", Clip(b.Type))
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
	return len(raw) > 0 && raw[0] == '{' && jsontext.Value(raw).IsValid(decodeOptions)
}

// MaxImageSide bounds an image's width and height in pixels: Bedrock's
// documented maximum (8,000 px per side). Past it the request is refused
// here, before any reservation, not by Bedrock after one.
const MaxImageSide = 8000

// checkImageSize reads an image's header dimensions (png, jpeg, gif,
// webp) and refuses a side over MaxImageSide, naming the field. A header
// it cannot read (bytes that are no image it knows) is left to the model.
func checkImageSize(data []byte, path string) error {
	cfg, _, err := image.DecodeConfig(bytes.NewReader(data))
	if err != nil && len(data) >= 24 && string(data[:8]) == "\x89PNG\r\n\x1a\n" && string(data[12:16]) == "IHDR" {
		// image/png refuses sides past 2^31-1 as a format error: its IHDR
		// still says them.
		cfg.Width, cfg.Height, err = int(binary.BigEndian.Uint32(data[16:20])), int(binary.BigEndian.Uint32(data[20:24])), nil
	}
	if err != nil {
		return nil
	}
	if cfg.Width > MaxImageSide || cfg.Height > MaxImageSide {
		return invalidAt(path+".data", " is an image of %dx%d pixels: at most %d per side", cfg.Width, cfg.Height, MaxImageSide)
	}
	return nil
}

// decodeAttachment checks an attachment's data, read when the frame was
// decoded (or the block built), against limit, and hashes its bytes.
func decodeAttachment(b *Block, path, what string, limit int) error {
	switch d := &b.Data; {
	case d.size <= 0:
		return invalidAt(path+".data", " is not valid base64")
	case d.size > limit:
		return invalidAt(path+".data", " is %d bytes, over the %d bytes %s may have", d.size, limit, what)
	default:
		d.digest = sha256.Sum256(d.bytes)
		return nil
	}
}
