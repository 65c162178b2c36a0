package call

import "encoding/json"

// Quota is the tightest window's state when a request was accepted.
type Quota struct {
	Window    string `json:"window"`
	Limit     int64  `json:"limit"`
	Remaining int64  `json:"remaining"`
}

// Accepted is the event that a request landed: it precedes every piece.
type Accepted struct {
	RequestID      string
	Model          string
	ReservedTokens int64
	Quota          *Quota
	Cached         bool
}

// Usage is a request's token usage. InputTokens are the input tokens
// read at the full input price; the prompt cache's are apart:
// CacheReadInputTokens were read from the cache, CacheWriteInputTokens
// written to it (Bedrock's and Anthropic's split). Both are omitted when
// zero, so a request that used no cache has the v1 usage object.
type Usage struct {
	InputTokens           int64 `json:"input_tokens"`
	OutputTokens          int64 `json:"output_tokens"`
	CacheReadInputTokens  int64 `json:"cache_read_input_tokens,omitempty"`
	CacheWriteInputTokens int64 `json:"cache_write_input_tokens,omitempty"`
}

// AllInput is every input token of the request, cached or not.
func (u Usage) AllInput() int64 {
	return u.InputTokens + u.CacheReadInputTokens + u.CacheWriteInputTokens
}

// Total is every token of the request: all input and the output. Token
// limits count this (docs/configuration.md, "Prompt caching").
func (u Usage) Total() int64 { return u.AllInput() + u.OutputTokens }

// Block is one block of a complete answer: text, reasoning (with its
// signature) or a tool call (with its input parsed).
type Block struct {
	Type      string
	Text      string
	ID        string
	Name      string
	Input     json.RawMessage
	Signature string
}

// Done is the outcome of an answer that completed.
type Done struct {
	RequestID  string
	Chunks     int
	Text       string
	Model      string
	Cached     bool
	Usage      Usage
	StopReason string
	TTFTMs     int64
	LatencyMs  int64
	// Blocks is the complete answer block by block, set when the request
	// used tools or reasoning or the answer has a block that is not text.
	Blocks []Block
	// ServiceTier is the Bedrock service tier that served the answer (as
	// Bedrock reported it, else as asked); "": the call named none.
	ServiceTier string
	// CostMicroUSD is the answer's one price (the gateway's price: model,
	// placement and tier), what its quota was charged, in micro-USD.
	CostMicroUSD int64
}

// Failure is the outcome of a request that failed, or was refused.
type Failure struct {
	RequestID    string
	Code         string
	Status       int
	Message      string
	Retryable    bool
	RetryAfterMs int64
	// Chunks and Text are the answer so far, set once it was accepted.
	Chunks *int
	Text   *string
	Scope  string
	Window string
	// Path is the request field an invalid_request names (its path of
	// field names and indexes) and Problem what is wrong with it, for the
	// doors that name the field in their own terms.
	Path    Path
	Problem string
}
