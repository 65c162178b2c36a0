package call

import (
	"crypto/sha256"
	"encoding/json"
)

// Request is what a caller asks the model for, in the core's terms: the
// conversation (messages of typed blocks), the tools the model may call,
// and the call's options. Each door translates its own body or frame into
// one (the WebSocket door's jetway.v1 request frame, the OpenAI and
// Anthropic doors' bodies) after validating it: a Request's attachments
// are decoded and hashed.
type Request struct {
	Messages   []Message
	System     string
	Tools      []Tool
	ToolChoice *ToolChoice
	Options
}

// Options are how the model is called.
type Options struct {
	Model       string   // "": the app's default
	MaxTokens   int      // 0: the app's default
	Temperature *float64 // nil: the model's default
	TopP        *float64 // nil: the model's default
	Stop        []string // stop sequences
	Reasoning   *Reasoning
	// PrefixCachePoint is the client's own prompt cache point after the
	// system prompt and tools (a door whose wire marks them, as Anthropic's
	// cache_control does): it counts toward the model's maximum like a
	// cache_point block.
	PrefixCachePoint bool
	// ServiceTier is the Bedrock service tier the client asks for
	// (TierDefault, TierPriority, TierFlex); "": the app's.
	ServiceTier string
}

// Bedrock service tiers (Options.ServiceTier, Done.ServiceTier).
const (
	TierDefault  = "default"
	TierPriority = "priority"
	TierFlex     = "flex"
)

// Tiers lists the service tiers, in the order errors name them.
var Tiers = []string{TierDefault, TierPriority, TierFlex}

// Reasoning asks a reasoning model to think, with a budget of output tokens.
type Reasoning struct {
	BudgetTokens int
}

// Message is one turn of the conversation: its content is either Content
// (text only) or Blocks; exactly one is set.
type Message struct {
	Role    string
	Content string
	Blocks  []ContentBlock
}

// Content block types beyond those of an answer (BlockText,
// BlockReasoning, BlockToolUse).
const (
	BlockImage      = "image"
	BlockDocument   = "document"
	BlockToolResult = "tool_result"
	// BlockCachePoint marks the end of a prompt-cache prefix: the
	// conversation up to it may be cached.
	BlockCachePoint = "cache_point"
)

// ContentBlock is one part of a message's content. Type says which fields are
// set: Text (text, reasoning with its Signature), Format, Name and Data
// (image, document), ID, Name and Input (tool_use), ToolUseID, Content and
// Status (tool_result).
type ContentBlock struct {
	Type      string
	Text      string
	Format    string
	Name      string
	Data      Attachment
	ID        string
	Input     json.RawMessage
	ToolUseID string
	Content   []ContentBlock
	Status    string
	Signature string
}

// Attachment is an image's or a document's decoded bytes and their
// SHA-256, computed once by the door's validation: the model call, the
// request's body hash and the cache key use these. Bytes is nil when absent.
type Attachment struct {
	Bytes  []byte
	Digest [sha256.Size]byte
}

// Tool is a function the model may call.
type Tool struct {
	Name        string
	Description string
	InputSchema json.RawMessage
}

// Tool choice modes.
const (
	ToolChoiceAuto = "auto"
	ToolChoiceAny  = "any"
	ToolChoiceTool = "tool"
)

// ToolChoice is ToolChoiceAuto, ToolChoiceAny or ToolChoiceTool (with Name).
type ToolChoice struct {
	Mode string
	Name string
}

// Features is what a request uses beyond text, for capability checks and
// the quota estimate.
type Features struct {
	Tools     bool // tools, tool_choice or tool_use/tool_result blocks
	Reasoning bool
	// CachePoints counts the client's cache_point blocks.
	CachePoints int
	Images      int
	Documents   int
	// AttachmentBytes is the decoded size of every image and document;
	// DocumentBytes of the documents alone.
	AttachmentBytes int64
	DocumentBytes   int64
}

// UsesBlocks reports whether a request uses anything beyond text messages.
func (f Features) UsesBlocks() bool {
	return f.Tools || f.Reasoning || f.Images > 0 || f.Documents > 0
}

// Features reports what r uses beyond text.
func (r *Request) Features() Features {
	f := Features{Tools: len(r.Tools) > 0 || r.ToolChoice != nil, Reasoning: r.Reasoning != nil}
	var walk func([]ContentBlock)
	walk = func(bs []ContentBlock) {
		for _, b := range bs {
			switch b.Type {
			case BlockImage:
				f.Images++
				f.AttachmentBytes += int64(len(b.Data.Bytes))
			case BlockDocument:
				f.Documents++
				f.AttachmentBytes += int64(len(b.Data.Bytes))
				f.DocumentBytes += int64(len(b.Data.Bytes))
			case BlockToolUse:
				f.Tools = true
			case BlockCachePoint:
				f.CachePoints++
			case BlockToolResult:
				f.Tools = true
				walk(b.Content)
			}
		}
	}
	for _, m := range r.Messages {
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
	var walk func([]ContentBlock)
	walk = func(bs []ContentBlock) {
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
