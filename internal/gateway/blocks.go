package gateway

import (
	"github.com/jetway-gateway/jetway/internal/config"
	"github.com/jetway-gateway/jetway/internal/protocol"
	"github.com/jetway-gateway/jetway/internal/quota"
	"github.com/jetway-gateway/jetway/internal/router"
)

// checkBlocks refuses, before any reservation or model call, a request
// that uses what a model of its chain is not configured for (the model's
// capabilities in the tenants file; a fallback must take the request as
// well as the first model). Tools and reasoning are refused even then: the
// answer's blocks are not streamed, stored or replayed yet, only the
// request's attachments reach the model.
func (f *flight) checkBlocks() error {
	feats := f.req.Features()
	if !feats.UsesBlocks() {
		return nil
	}
	needs := []struct {
		used         bool
		field, capab string
	}{
		{feats.Tools, "tools", config.CapabilityTools},
		{feats.Reasoning, "reasoning", config.CapabilityReasoning},
		{feats.Images > 0, "messages[].content: image blocks", config.CapabilityImages},
		{feats.Documents > 0, "messages[].content: document blocks", config.CapabilityDocuments},
	}
	for _, n := range needs {
		if !n.used {
			continue
		}
		for _, t := range f.chain {
			if m, ok := f.g.cfg.Model(t.ID); !ok || !m.Supports(n.capab) {
				return protocol.Errorf(protocol.ErrInvalid, "%s: model %s is not configured with the %q capability",
					n.field, t.ID, n.capab)
			}
		}
	}
	if feats.Tools {
		return protocol.Errorf(protocol.ErrInvalid, "tools: this server does not stream tool calls yet")
	}
	if feats.Reasoning {
		return protocol.Errorf(protocol.ErrInvalid, "reasoning: this server does not stream reasoning yet")
	}
	f.messages = make([]router.Message, len(f.req.Messages))
	for i, m := range f.req.Messages {
		f.messages[i] = router.Message{Role: m.Role, Content: m.Content}
		if m.Blocks != nil {
			f.messages[i].Blocks = routerBlocks(m.Blocks)
		}
	}
	return nil
}

// attachmentEstimate is the input-token bound of the request's attachments.
func (f *flight) attachmentEstimate() int64 {
	feats := f.req.Features()
	return quota.EstimateAttachmentTokens(feats.Images, feats.Documents, feats.DocumentBytes)
}

// routerBlocks converts a message's blocks for the model call. Attachments
// were decoded and hashed by validation (protocol.Block.Bytes, Digest):
// the model call and the cache key share those bytes.
func routerBlocks(bs []protocol.Block) []router.Block {
	out := make([]router.Block, len(bs))
	for i, b := range bs {
		out[i] = router.Block{Kind: b.Type, Text: b.Text, Format: b.Format, Name: b.Name, ID: b.ID, Input: b.Input,
			Status: b.Status, Signature: b.Signature, Data: b.Bytes, Digest: b.Digest}
		if b.Type == protocol.BlockToolResult {
			out[i].ID = b.ToolUseID
		}
		if b.Content != nil {
			out[i].Content = routerBlocks(b.Content)
		}
	}
	return out
}
