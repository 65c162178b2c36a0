package protocol

import (
	"encoding/json"

	"github.com/jetway-gateway/jetway/internal/call"
	"strconv"
	"time"
)

// Ready is sent once per connection, first.
type Ready struct {
	Type       string `json:"type"`
	SessionID  string `json:"session_id"`
	User       string `json:"user"`
	Tenant     string `json:"tenant"`
	App        string `json:"app"`
	Protocol   string `json:"protocol"`
	HeartbeatS int    `json:"heartbeat_s"`
	ExpiresAt  string `json:"expires_at"`
}

// Quota is the tightest window's state in an accepted frame.
type Quota = call.Quota

// Accepted proves a request landed; it precedes every chunk.
type Accepted struct {
	Type           string `json:"type"`
	RequestID      string `json:"request_id"`
	Model          string `json:"model"`
	ReservedTokens int64  `json:"reserved_tokens"`
	Quota          *Quota `json:"quota,omitempty"`
	Cached         bool   `json:"cached"`
}

// Usage is a request's token usage (the core's, call.Usage).
type Usage = call.Usage

// Done is the successful terminal frame.
type Done struct {
	Type       string `json:"type"`
	RequestID  string `json:"request_id"`
	Chunks     int    `json:"chunks"`
	Text       string `json:"text"`
	Model      string `json:"model"`
	Cached     bool   `json:"cached"`
	Usage      Usage  `json:"usage"`
	StopReason string `json:"stop_reason"`
	TTFTMs     int64  `json:"ttft_ms"`
	LatencyMs  int64  `json:"latency_ms"`
	// Blocks is the complete answer block by block (text, reasoning with
	// its signature, tool_use with its parsed input), set when the request
	// used tools or reasoning or the answer has a block that is not text.
	Blocks []Block `json:"blocks,omitempty"`
	// ServiceTier is the Bedrock service tier that served the answer, set
	// only when the model call named one, the request's or the app's
	// (docs/protocol.md, "Service tier").
	ServiceTier string `json:"service_tier,omitempty"`
}

// ToolCalls returns the answer's tool_use blocks, in order.
func (d *Done) ToolCalls() []Block {
	var calls []Block
	for _, b := range d.Blocks {
		if b.Type == BlockToolUse {
			calls = append(calls, b)
		}
	}
	return calls
}

// Turn is the answer as the assistant message of the conversation's next
// request: its blocks (reasoning with its signature and tool calls
// included, as a tool loop must send them back), else its text.
func (d *Done) Turn() Message {
	if d.Blocks != nil {
		return Message{Role: "assistant", Blocks: d.Blocks}
	}
	return Message{Role: "assistant", Content: d.Text}
}

// ReasoningText returns the answer's reasoning, its blocks joined.
func (d *Done) ReasoningText() string {
	var s string
	for _, b := range d.Blocks {
		if b.Type == BlockReasoning {
			s += b.Text
		}
	}
	return s
}

// Error is an error frame: the terminal frame of a failed request, or the
// only answer to a frame that was rejected.
type Error struct {
	Type         string  `json:"type"`
	RequestID    string  `json:"request_id,omitempty"`
	Code         string  `json:"code"`
	Status       int     `json:"status"`
	Message      string  `json:"message"`
	Retryable    bool    `json:"retryable"`
	RetryAfterMs int64   `json:"retry_after_ms,omitempty"`
	Chunks       *int    `json:"chunks,omitempty"`
	Text         *string `json:"text,omitempty"`
	Scope        string  `json:"scope,omitempty"`
	Window       string  `json:"window,omitempty"`
	// Path is the request field an invalid_request names and Problem what
	// is wrong with it (see call.ClientError), for the doors that name it in
	// their own terms; the WebSocket's Message names it.
	Path    call.Path `json:"-"`
	Problem string    `json:"-"`
}

// Draining tells the client this server is shutting down.
type Draining struct {
	Type             string `json:"type"`
	ReconnectAfterMs int64  `json:"reconnect_after_ms"`
}

// AuthOK acknowledges an auth frame.
type AuthOK struct {
	Type      string `json:"type"`
	ExpiresAt string `json:"expires_at"`
}

// Pong answers a ping frame, echoing t.
type Pong struct {
	Type string          `json:"type"`
	T    json.RawMessage `json:"t,omitempty"`
}

// Outbound frame types.
const (
	TypeReady    = "ready"
	TypeAccepted = "accepted"
	TypeChunk    = "chunk"
	TypeDone     = "done"
	TypeError    = "error"
	TypeDraining = "draining"
	TypeAuthOK   = "auth_ok"
	TypePong     = "pong"
)

// Timestamp formats t the way every frame does (RFC 3339, UTC).
func Timestamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// Encode marshals a frame. Frames are plain structs, so this cannot fail for
// them; a failure is a programming error and yields an internal error frame.
func Encode(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(Error{Type: TypeError, Code: CodeInternal, Status: 500, Message: "internal error"})
	}
	return b
}

// AppendChunk appends the chunk frame of piece p to dst without
// reflection: this is the hot path. The output is identical to
// json.Marshal of p's Chunk (ChunkOf) with Type, RequestID and Seq set: for
// a text piece, {"type":"chunk","request_id":..,"seq":..,"text":..}.
func AppendChunk(dst []byte, requestID string, seq int, p call.Piece) []byte {
	dst = append(dst, `{"type":"chunk","request_id":`...)
	dst = call.AppendJSONString(dst, requestID)
	dst = append(dst, `,"seq":`...)
	dst = strconv.AppendInt(dst, int64(seq), 10)
	dst = append(dst, `,"text":`...)
	dst = call.AppendJSONString(dst, p.Text)
	if p.Block != 0 || p.Kind != "" || p.ID != "" || p.Name != "" || p.Input != "" || p.Reasoning != "" || p.Signature != "" {
		dst = appendBlockFields(dst, &p)
	}
	return append(dst, '}')
}

// appendBlockFields appends the chunk fields after text of a piece that
// is not plain text of block 0.
func appendBlockFields(dst []byte, p *call.Piece) []byte {
	if p.Block != 0 {
		dst = append(dst, `,"block":`...)
		dst = strconv.AppendInt(dst, int64(p.Block), 10)
	}
	for _, f := range [...]struct{ name, value string }{{`,"kind":`, p.Kind}, {`,"id":`, p.ID},
		{`,"name":`, p.Name}, {`,"input":`, p.Input}, {`,"reasoning":`, p.Reasoning}, {`,"signature":`, p.Signature}} {
		if f.value != "" {
			dst = append(dst, f.name...)
			dst = call.AppendJSONString(dst, f.value)
		}
	}
	return dst
}
