package protocol

import (
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf8"
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
type Quota struct {
	Window    string `json:"window"`
	Limit     int64  `json:"limit"`
	Remaining int64  `json:"remaining"`
}

// Accepted proves a request landed; it precedes every chunk.
type Accepted struct {
	Type           string `json:"type"`
	RequestID      string `json:"request_id"`
	Model          string `json:"model"`
	ReservedTokens int64  `json:"reserved_tokens"`
	Quota          *Quota `json:"quota,omitempty"`
	Cached         bool   `json:"cached"`
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
	// is wrong with it (see ClientError), for the doors that name it in
	// their own terms; the WebSocket's Message names it.
	Path    Path   `json:"-"`
	Problem string `json:"-"`
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

// AppendChunk appends the chunk frame of a piece (see TextPiece) to dst
// without reflection: this is the hot path. The output is identical to
// json.Marshal of the piece's Chunk with Type, RequestID and Seq set: for a
// text piece, {"type":"chunk","request_id":..,"seq":..,"text":..}.
func AppendChunk(dst []byte, requestID string, seq int, piece string) []byte {
	dst = append(dst, `{"type":"chunk","request_id":`...)
	dst = appendJSONString(dst, requestID)
	dst = append(dst, `,"seq":`...)
	dst = strconv.AppendInt(dst, int64(seq), 10)
	dst = append(dst, ',')
	if len(piece) > 0 && piece[0] == pieceMark {
		dst = append(dst, piece[1:]...)
	} else {
		dst = append(dst, `"text":`...)
		dst = appendJSONString(dst, piece)
	}
	return append(dst, '}')
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string with encoding/json's escaping
// (HTML-safe, invalid UTF-8 replaced), so replays are byte-identical either way.
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < 0x80 {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == 0xFFFD && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
