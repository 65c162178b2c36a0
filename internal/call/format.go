package call

import (
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// Format is a version of the stored forms of a request's events: the
// pieces, accepted and terminal events that request records and response
// cache entries hold, so that servers of two releases share them during a
// rolling deploy (docs/operations.md, "Record formats").
//
//   - FormatV1 is the format of every release before formats had a
//     version: a marked piece is pieceMark and JSON fields
//     (`"text":"","block":1,"kind":"tool_use","input":"{\"q\""`), accepted and
//     terminal events are JSON objects with a "type" (the shape of the
//     jetway.v1 frames of that release, frozen here). An item without a
//     format attribute is v1.
//   - FormatV2 keeps pieces in this package's compact codec (Encode); its
//     accepted and terminal events are v1's.
//
// Text pieces of block 0 are the same in both: a text-only answer is
// stored alike whatever the format.
type Format int

// Formats.
const (
	FormatV1 Format = 1
	FormatV2 Format = 2
)

// ParseFormat reads a format setting: "v1" or "v2".
func ParseFormat(s string) (Format, error) {
	switch s {
	case "v1":
		return FormatV1, nil
	case "v2":
		return FormatV2, nil
	}
	return 0, fmt.Errorf("record format %q: want v1 or v2", s)
}

func (f Format) String() string { return "v" + strconv.Itoa(int(f)) }

// compact reports whether f keeps pieces in this package's codec; the
// zero Format is v1.
func (f Format) compact() bool { return f >= FormatV2 }

// StoredPieces are pieces in format f, for an item of that format; the
// pieces themselves are not changed.
func StoredPieces(f Format, pieces []string) []string {
	if f.compact() {
		return pieces
	}
	var out []string // a copy, from the first marked piece on
	for i, p := range pieces {
		if len(p) == 0 || p[0] != pieceMark {
			continue
		}
		if out == nil {
			out = append([]string(nil), pieces...)
		}
		out[i] = pieceV1(Decode(p))
	}
	if out == nil {
		return pieces
	}
	return out
}

// LoadPieces are the pieces an item of format f holds, in this
// release's codec (stored may be changed in place).
func LoadPieces(f Format, stored []string) []string {
	if f.compact() {
		return stored
	}
	for i, p := range stored {
		if len(p) > 0 && p[0] == pieceMark {
			stored[i] = Encode(pieceFromV1(p))
		}
	}
	return stored
}

// pieceV1 is a marked piece in format v1.
func pieceV1(c Piece) string {
	dst := append(make([]byte, 0, 32+len(c.Text)+len(c.Input)+len(c.Reasoning)), pieceMark)
	dst = append(dst, `"text":`...)
	dst = AppendJSONString(dst, c.Text)
	if c.Block != 0 {
		dst = append(dst, `,"block":`...)
		dst = strconv.AppendInt(dst, int64(c.Block), 10)
	}
	for _, f := range [...]struct{ name, value string }{{`,"kind":`, c.Kind}, {`,"id":`, c.ID},
		{`,"name":`, c.Name}, {`,"input":`, c.Input}, {`,"reasoning":`, c.Reasoning}, {`,"signature":`, c.Signature}} {
		if f.value != "" {
			dst = append(dst, f.name...)
			dst = AppendJSONString(dst, f.value)
		}
	}
	return string(dst)
}

// pieceFromV1 decodes a marked v1 piece; one that does not decode reads
// as empty text, as v1 readers read it.
func pieceFromV1(s string) Piece {
	var c struct {
		Text      string `json:"text"`
		Block     int    `json:"block"`
		Kind      string `json:"kind"`
		ID        string `json:"id"`
		Name      string `json:"name"`
		Input     string `json:"input"`
		Reasoning string `json:"reasoning"`
		Signature string `json:"signature"`
	}
	if json.Unmarshal([]byte("{"+s[1:]+"}"), &c) != nil {
		return Piece{}
	}
	return Piece{Block: c.Block, Kind: c.Kind, Text: c.Text, ID: c.ID, Name: c.Name, Input: c.Input,
		Reasoning: c.Reasoning, Signature: c.Signature}
}

// The v1 accepted and terminal events: JSON objects whose keys and order
// are frozen (they are what every earlier release stored).
type (
	acceptedV1 struct {
		Type           string `json:"type"`
		RequestID      string `json:"request_id"`
		Model          string `json:"model"`
		ReservedTokens int64  `json:"reserved_tokens"`
		Quota          *Quota `json:"quota,omitempty"`
		Cached         bool   `json:"cached"`
	}
	blockV1 struct {
		Type      string          `json:"type"`
		Text      string          `json:"text,omitempty"`
		Name      string          `json:"name,omitempty"`
		ID        string          `json:"id,omitempty"`
		Input     json.RawMessage `json:"input,omitempty"`
		Signature string          `json:"signature,omitempty"`
	}
	doneV1 struct {
		Type       string    `json:"type"`
		RequestID  string    `json:"request_id"`
		Chunks     int       `json:"chunks"`
		Text       string    `json:"text"`
		Model      string    `json:"model"`
		Cached     bool      `json:"cached"`
		Usage      Usage     `json:"usage"`
		StopReason string    `json:"stop_reason"`
		TTFTMs     int64     `json:"ttft_ms"`
		LatencyMs  int64     `json:"latency_ms"`
		Blocks     []blockV1 `json:"blocks,omitempty"`
		// ServiceTier is set only when the call named a tier.
		ServiceTier string `json:"service_tier,omitempty"`
		// CostMicroUSD is the price charged; not a wire field of any door.
		CostMicroUSD int64 `json:"cost_micro_usd,omitempty"`
	}
	failureV1 struct {
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
	}
)

// The "type" of each stored event.
const (
	typeAccepted = "accepted"
	typeDone     = "done"
	typeError    = "error"
)

// EncodeAccepted is a's stored form.
func EncodeAccepted(a Accepted) []byte {
	return marshal(acceptedV1{Type: typeAccepted, RequestID: a.RequestID, Model: a.Model,
		ReservedTokens: a.ReservedTokens, Quota: a.Quota, Cached: a.Cached})
}

// DecodeAccepted is the accepted event of its stored form.
func DecodeAccepted(b []byte) Accepted {
	var v acceptedV1
	_ = json.Unmarshal(b, &v) // a form this server's peers stored
	return Accepted{RequestID: v.RequestID, Model: v.Model, ReservedTokens: v.ReservedTokens, Quota: v.Quota, Cached: v.Cached}
}

// EncodeDone is d's stored form.
func EncodeDone(d *Done) []byte {
	v := doneV1{Type: typeDone, RequestID: d.RequestID, Chunks: d.Chunks, Text: d.Text, Model: d.Model,
		Cached: d.Cached, Usage: d.Usage, StopReason: d.StopReason, TTFTMs: d.TTFTMs, LatencyMs: d.LatencyMs,
		ServiceTier: d.ServiceTier, CostMicroUSD: d.CostMicroUSD}
	if d.Blocks != nil {
		v.Blocks = make([]blockV1, len(d.Blocks))
		for i, b := range d.Blocks {
			v.Blocks[i] = blockV1{Type: b.Type, Text: b.Text, Name: b.Name, ID: b.ID, Input: b.Input, Signature: b.Signature}
		}
	}
	return marshal(v)
}

// EncodeFailure is f's stored form (its Path and Problem are not kept).
func EncodeFailure(f *Failure) []byte {
	return marshal(failureV1{Type: typeError, RequestID: f.RequestID, Code: f.Code, Status: f.Status,
		Message: f.Message, Retryable: f.Retryable, RetryAfterMs: f.RetryAfterMs, Chunks: f.Chunks, Text: f.Text,
		Scope: f.Scope, Window: f.Window})
}

// DecodeTerminal is the outcome of a stored terminal event: exactly one
// of its results is set. A form that is neither reads as an internal
// failure (nil, nil).
func DecodeTerminal(b []byte) (*Done, *Failure) {
	var head struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(b, &head)
	if head.Type == typeDone {
		var v doneV1
		if json.Unmarshal(b, &v) == nil {
			d := &Done{RequestID: v.RequestID, Chunks: v.Chunks, Text: v.Text, Model: v.Model, Cached: v.Cached,
				Usage: v.Usage, StopReason: v.StopReason, TTFTMs: v.TTFTMs, LatencyMs: v.LatencyMs,
				ServiceTier: v.ServiceTier, CostMicroUSD: v.CostMicroUSD}
			if v.Blocks != nil {
				d.Blocks = make([]Block, len(v.Blocks))
				for i, b := range v.Blocks {
					d.Blocks[i] = Block{Type: b.Type, Text: b.Text, Name: b.Name, ID: b.ID, Input: b.Input, Signature: b.Signature}
				}
			}
			return d, nil
		}
	}
	var v failureV1
	if json.Unmarshal(b, &v) != nil || v.Code == "" {
		return nil, nil
	}
	return nil, &Failure{RequestID: v.RequestID, Code: v.Code, Status: v.Status, Message: v.Message,
		Retryable: v.Retryable, RetryAfterMs: v.RetryAfterMs, Chunks: v.Chunks, Text: v.Text, Scope: v.Scope, Window: v.Window}
}

func marshal(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(failureV1{Type: typeError, Code: CodeInternal, Status: 500, Message: "internal error"})
	}
	return b
}

const hexDigits = "0123456789abcdef"

// AppendJSONString appends s as a JSON string with encoding/json's escaping
// (HTML-safe, invalid UTF-8 replaced), so hand-written JSON is
// byte-identical to json.Marshal's.
func AppendJSONString(dst []byte, s string) []byte {
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
