package gateway

import (
	"slices"

	"go.uber.org/zap"

	"github.com/jetway-gateway/jetway/internal/call"
	"github.com/jetway-gateway/jetway/internal/config"
	"github.com/jetway-gateway/jetway/internal/router"
)

// checkBlocks checks, before any reservation or model call, what a request
// uses beyond text against the model capabilities in the tenants file: the
// chosen model must have each one (else invalid_request naming the field);
// a fallback that lacks one is left out of this request's chain, since it
// could not answer it. It sets the call's max_tokens for reasoning and
// converts the blocks for the model call (validation decoded the attachments).
func (f *flight) checkBlocks() error {
	feats := f.feats
	if !feats.UsesBlocks() {
		return nil
	}
	type need struct {
		used         bool
		field, capab string
	}
	needs := []need{
		{feats.Tools, "tools", config.CapabilityTools},
		{feats.Reasoning, "reasoning", config.CapabilityReasoning},
		{feats.Images > 0, "messages[].content: image blocks", config.CapabilityImages},
		{feats.Documents > 0, "messages[].content: document blocks", config.CapabilityDocuments},
	}
	chain := f.chain[:0:0]
	for i, t := range f.chain {
		m, _ := f.g.cfg.Model(t.ID) // policy checked that every model of the chain is configured
		lacks := slices.IndexFunc(needs, func(n need) bool { return n.used && !m.Supports(n.capab) })
		switch {
		case lacks < 0:
			chain = append(chain, t)
		case i == 0:
			return call.FieldErrorf(call.ErrInvalid, needs[lacks].field, ": model %s is not configured with the %q capability",
				t.ID, needs[lacks].capab)
		default:
			f.logger.Info("fallback_skipped", zap.String("model", t.ID), zap.String("capability", needs[lacks].capab))
		}
	}
	f.chain = chain
	f.blockMode = feats.Tools || feats.Reasoning
	if err := f.reasoningTokens(); err != nil {
		return err
	}
	f.messages = routerMessages(f.req.Messages)
	return nil
}

// reasoningTokens makes room for a reasoning budget: the model's answer
// (max_tokens) includes its reasoning, so a request that gives no
// max_tokens gets the budget plus the app's default answer length, up to
// the app's limit. The budget must stay below max_tokens.
func (f *flight) reasoningTokens() error {
	r := f.req.Reasoning
	if r == nil {
		return nil
	}
	if r.BudgetTokens >= f.app.MaxTokensLimit {
		// Refused before any sum: a budget near the int range must not wrap.
		return call.FieldErrorf(call.ErrInvalid, "reasoning.budget_tokens", " %d must be less than this app's max_tokens limit of %d",
			r.BudgetTokens, f.app.MaxTokensLimit)
	}
	if f.req.MaxTokens == 0 {
		f.maxTokens = min(r.BudgetTokens+f.app.MaxTokens, f.app.MaxTokensLimit)
	}
	if r.BudgetTokens >= f.maxTokens {
		return call.FieldErrorf(call.ErrInvalid, "reasoning.budget_tokens", " %d must be less than max_tokens (%d for this request; this app allows up to %d)",
			r.BudgetTokens, f.maxTokens, f.app.MaxTokensLimit)
	}
	return nil
}

// tools is the request's tools, tool choice and reasoning budget on call.
func (f *flight) tools(c *router.Call) {
	for _, t := range f.req.Tools {
		c.Tools = append(c.Tools, router.Tool{Name: t.Name, Description: t.Description, InputSchema: t.InputSchema})
	}
	if tc := f.req.ToolChoice; tc != nil {
		c.ToolChoice = &router.ToolChoice{Mode: tc.Mode, Name: tc.Name}
	}
	if r := f.req.Reasoning; r != nil {
		c.ReasoningBudget = r.BudgetTokens
	}
}

// onBlock appends one streamed piece of a block-mode answer to the log.
func (f *flight) onBlock(d router.BlockDelta) {
	c := call.Piece{Block: d.Block, Text: d.Text}
	switch d.Kind {
	case router.BlockReasoning:
		c.Kind, c.Text, c.Reasoning, c.Signature = call.KindReasoning, "", d.Text, d.Signature
	case router.BlockToolUse:
		c.Kind, c.ID, c.Name, c.Input = call.KindToolUse, d.ID, d.Name, d.Input
	}
	f.appendPiece(call.Encode(c))
}

// routerBlocks converts a message's blocks for the model call. Attachments
// were decoded and hashed by validation (call.Attachment):
// the model call and the cache key share those bytes.
func routerBlocks(bs []call.ContentBlock) []router.Block {
	out := make([]router.Block, len(bs))
	for i, b := range bs {
		out[i] = router.Block{Kind: b.Type, Text: b.Text, Format: b.Format, Name: b.Name, ID: b.ID, Input: b.Input,
			Status: b.Status, Signature: b.Signature, Data: b.Data.Bytes, Digest: b.Data.Digest}
		if b.Type == call.BlockToolResult {
			out[i].ID = b.ToolUseID
		}
		if b.Content != nil {
			out[i].Content = routerBlocks(b.Content)
		}
	}
	return out
}
