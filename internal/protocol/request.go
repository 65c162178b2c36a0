package protocol

import "github.com/jetway-gateway/jetway/internal/call"

// Call is the core's request for a request frame: the wire's one
// translation, used by the session and by the HTTP doors, which validate
// what they build as a frame (ValidateRequest). Validation decoded and
// hashed the attachments; the translation shares their bytes.
func (in *Inbound) Call() call.Request {
	r := call.Request{System: in.System, Messages: callMessages(in.Messages),
		Options: call.Options{Model: in.Model, MaxTokens: in.MaxTokens, Temperature: in.Temperature,
			ServiceTier: in.ServiceTier}}
	if in.Tools != nil {
		r.Tools = make([]call.Tool, len(in.Tools))
		for i, t := range in.Tools {
			r.Tools[i] = call.Tool(t)
		}
	}
	if in.ToolChoice != nil {
		r.ToolChoice = &call.ToolChoice{Mode: in.ToolChoice.Mode, Name: in.ToolChoice.Name}
	}
	if in.Reasoning != nil {
		r.Reasoning = &call.Reasoning{BudgetTokens: in.Reasoning.BudgetTokens}
	}
	return r
}

func callMessages(ms []Message) []call.Message {
	if ms == nil {
		return nil
	}
	out := make([]call.Message, len(ms))
	for i, m := range ms {
		out[i] = call.Message{Role: m.Role, Content: m.Content, Blocks: callBlocks(m.Blocks)}
	}
	return out
}

func callBlocks(bs []Block) []call.ContentBlock {
	if bs == nil {
		return nil
	}
	out := make([]call.ContentBlock, len(bs))
	for i, b := range bs {
		out[i] = call.ContentBlock{Type: b.Type, Text: b.Text, Format: b.Format, Name: b.Name, ID: b.ID, Input: b.Input,
			ToolUseID: b.ToolUseID, Content: callBlocks(b.Content), Status: b.Status, Signature: b.Signature}
		if b.Data.bytes != nil {
			out[i].Data = call.Attachment{Bytes: b.Data.bytes, Digest: b.Data.digest}
		}
	}
	return out
}
