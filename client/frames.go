package client

import (
	"encoding/json"
	"fmt"
	"time"
)

// Message is one turn of the conversation.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Request asks for an answer. RequestID is made by the client (8-64 chars
// of [A-Za-z0-9_-], unique per user); NewRequestID makes one.
type Request struct {
	RequestID   string    `json:"request_id"`
	Messages    []Message `json:"messages"`
	System      string    `json:"system,omitempty"`
	Model       string    `json:"model,omitempty"`
	MaxTokens   int       `json:"max_tokens,omitempty"`
	Temperature *float64  `json:"temperature,omitempty"`

	// OnChunk, if set, is called for every new chunk in seq order, exactly
	// once per seq, from the client's reader goroutine: keep it quick.
	OnChunk func(seq int, text string) `json:"-"`
}

// Ready is the server's first frame on a connection.
type Ready struct {
	SessionID  string `json:"session_id"`
	User       string `json:"user"`
	Tenant     string `json:"tenant"`
	App        string `json:"app"`
	Protocol   string `json:"protocol"`
	HeartbeatS int    `json:"heartbeat_s"`
	ExpiresAt  string `json:"expires_at"`
}

// Quota is the tightest quota window in an accepted frame.
type Quota struct {
	Window    string `json:"window"`
	Limit     int64  `json:"limit"`
	Remaining int64  `json:"remaining"`
}

// Accepted is the server's proof that a request landed.
type Accepted struct {
	RequestID      string `json:"request_id"`
	Model          string `json:"model"`
	ReservedTokens int64  `json:"reserved_tokens"`
	Quota          *Quota `json:"quota"`
	Cached         bool   `json:"cached"`
}

// Usage is a request's token usage.
type Usage struct {
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
}

// Done is a successful answer.
type Done struct {
	RequestID  string `json:"request_id"`
	Chunks     int    `json:"chunks"`
	Text       string `json:"text"`
	Model      string `json:"model"`
	Cached     bool   `json:"cached"`
	Usage      Usage  `json:"usage"`
	StopReason string `json:"stop_reason"`
	TTFTMs     int64  `json:"ttft_ms"`
	LatencyMs  int64  `json:"latency_ms"`
}

// Error is an error frame from the server, returned as an error.
type Error struct {
	RequestID    string  `json:"request_id"`
	Code         string  `json:"code"`
	Status       int     `json:"status"`
	Message      string  `json:"message"`
	Retryable    bool    `json:"retryable"`
	RetryAfterMs int64   `json:"retry_after_ms"`
	Chunks       *int    `json:"chunks"`
	Text         *string `json:"text"`
	Scope        string  `json:"scope"`
	Window       string  `json:"window"`
}

func (e *Error) Error() string {
	return fmt.Sprintf("jetway: %s (%d): %s", e.Code, e.Status, e.Message)
}

// RetryAfter is the server's retry hint.
func (e *Error) RetryAfter() time.Duration { return time.Duration(e.RetryAfterMs) * time.Millisecond }

// HTTPError is a refusal before the WebSocket upgrade.
type HTTPError struct {
	Status  int
	Code    string
	Message string
}

func (e *HTTPError) Error() string {
	return fmt.Sprintf("jetway: upgrade refused: %d %s: %s", e.Status, e.Code, e.Message)
}

// frame is any server frame, decoded once; fields by type.
type frame struct {
	Type      string          `json:"type"`
	RequestID string          `json:"request_id"`
	Seq       int             `json:"seq"`
	Text      string          `json:"text"`
	T         json.RawMessage `json:"t"`
	ExpiresAt string          `json:"expires_at"`
	Code      string          `json:"code"`
	Reconnect int64           `json:"reconnect_after_ms"`
}
