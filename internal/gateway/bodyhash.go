package gateway

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	"github.com/jetway-gateway/jetway/internal/call"
)

// bodyHash fingerprints what a request asks for (not after_seq), so a
// re-send with the same id and body is recognised and a different body is
// a conflict. Records store it (body_hash) and the release beside this one
// in a rolling deploy compares it, so its bytes are fixed
// (TestBodyHashIsPinned): the JSON of the request as the jetway.v1 frame
// wrote it, written here from the core's request by the hash* types. An
// attachment counts by the SHA-256 of its bytes, which validation computed
// (call.Attachment.Digest): megabytes are neither encoded nor hashed again.
func bodyHash(in Request) string {
	b, _ := json.Marshal(struct {
		Messages    []hashMessage   `json:"m"`
		System      string          `json:"s"`
		Model       string          `json:"mo"`
		MaxTokens   int             `json:"mt"`
		Temperature *float64        `json:"t"`
		TopP        *float64        `json:"tp,omitempty"`
		Stop        []string        `json:"st,omitempty"`
		Tools       []hashTool      `json:"to,omitempty"`
		ToolChoice  *hashToolChoice `json:"tc,omitempty"`
		Reasoning   *hashReasoning  `json:"r,omitempty"`
		CachePoint  bool            `json:"pc,omitempty"`
		ServiceTier string          `json:"sv,omitempty"`
	}{hashMessages(in.Messages), in.System, in.Model, in.MaxTokens, in.Temperature, in.TopP, in.Stop, hashTools(in.Tools),
		(*hashToolChoice)(in.ToolChoice), (*hashReasoning)(in.Reasoning), in.PrefixCachePoint, in.ServiceTier})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}

// hashMessage is a message as the frame wrote it: content a string, or a
// list ([]hashBlock) when it has blocks. It has no MarshalJSON: encoding/json
// would check and compact again every byte a MarshalJSON returns, the
// whole conversation here.
type hashMessage struct {
	Role    string `json:"role"`
	Content any    `json:"content"`
}

func hashMessages(ms []call.Message) []hashMessage {
	if ms == nil {
		return nil
	}
	out := make([]hashMessage, len(ms))
	for i, m := range ms {
		out[i] = hashMessage{Role: m.Role, Content: m.Content}
		if m.Blocks != nil {
			out[i].Content = hashBlocks(m.Blocks)
		}
	}
	return out
}

// hashBlock is a block as the frame wrote it, an attachment's data as
// "sha256:" and the hex digest of its bytes (never valid base64, so no
// attachment's data can stand for another's digest).
type hashBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text,omitempty"`
	Format    string          `json:"format,omitempty"`
	Name      string          `json:"name,omitempty"`
	Data      string          `json:"data,omitempty"`
	ID        string          `json:"id,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
	ToolUseID string          `json:"tool_use_id,omitempty"`
	Content   []hashBlock     `json:"content,omitempty"`
	Status    string          `json:"status,omitempty"`
	Signature string          `json:"signature,omitempty"`
}

func hashBlocks(bs []call.ContentBlock) []hashBlock {
	if bs == nil {
		return nil
	}
	out := make([]hashBlock, len(bs))
	for i, b := range bs {
		out[i] = hashBlock{Type: b.Type, Text: b.Text, Format: b.Format, Name: b.Name, ID: b.ID, Input: b.Input,
			ToolUseID: b.ToolUseID, Content: hashBlocks(b.Content), Status: b.Status, Signature: b.Signature}
		if b.Data.Bytes != nil {
			out[i].Data = "sha256:" + hex.EncodeToString(b.Data.Digest[:])
		}
	}
	return out
}

type hashTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema"`
}

func hashTools(ts []call.Tool) []hashTool {
	if ts == nil {
		return nil
	}
	out := make([]hashTool, len(ts))
	for i, t := range ts {
		out[i] = hashTool(t)
	}
	return out
}

// hashToolChoice is "auto", "any" or {"name": "..."}.
type hashToolChoice call.ToolChoice

func (c hashToolChoice) MarshalJSON() ([]byte, error) {
	if c.Mode == call.ToolChoiceTool {
		return json.Marshal(struct {
			Name string `json:"name"`
		}{c.Name})
	}
	return json.Marshal(c.Mode)
}

type hashReasoning struct {
	BudgetTokens int `json:"budget_tokens"`
}
