// Package protocol holds the Jetway wire protocol v1 (see docs/protocol.md and
// ../shared/PROTOCOL.md): frame types, error codes and their HTTP-like
// statuses, and the decoding of inbound frames. It knows nothing about
// sockets, quotas or models; the session and the gateway both speak it.
package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/jetway-gateway/jetway/internal/call"
)

// Subprotocol is the WebSocket subprotocol the server selects.
const Subprotocol = "jetway.v1"

// BearerPrefix prefixes a JWT offered as a WebSocket subprotocol by browsers.
const BearerPrefix = "bearer."

// Error codes, each with its fixed status (see Status): the core's
// (package call), which the jetway.v1 wire sends as they are.
const (
	CodeInvalidRequest   = call.CodeInvalidRequest
	CodeUnauthorized     = call.CodeUnauthorized
	CodeForbidden        = call.CodeForbidden
	CodeModelNotAllowed  = call.CodeModelNotAllowed
	CodeNotFound         = call.CodeNotFound
	CodeConflict         = call.CodeConflict
	CodeQuotaExceeded    = call.CodeQuotaExceeded
	CodeRateLimited      = call.CodeRateLimited
	CodeCancelled        = call.CodeCancelled
	CodeInternal         = call.CodeInternal
	CodeModelError       = call.CodeModelError
	CodeModelUnavailable = call.CodeModelUnavailable
	CodeBusy             = call.CodeBusy
	CodeDraining         = call.CodeDraining
	CodeTimeout          = call.CodeTimeout
	CodeInterrupted      = call.CodeInterrupted
)

// Status is the HTTP-like status of an error code (500 for an unknown code).
func Status(code string) int { return call.Status(code) }

// DefaultMaxFrame is the default bound of an inbound frame in bytes; a
// larger frame closes the socket with 1009.
const DefaultMaxFrame = 256 << 10

const (
	maxIDLength        = 64
	minIDLength        = 8
	maxMessagesPerTurn = 1000
)

var idPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{8,64}$`)

// ValidID reports whether s is a valid request or session id: 8-64 chars of [A-Za-z0-9_-].
func ValidID(s string) bool {
	return len(s) >= minIDLength && len(s) <= maxIDLength && idPattern.MatchString(s)
}

// Inbound is a decoded client frame. Only the fields of its Type are set.
type Inbound struct {
	Type        string      `json:"type"`
	RequestID   string      `json:"request_id,omitempty"`
	Messages    []Message   `json:"messages,omitempty"`
	System      string      `json:"system,omitempty"`
	Model       string      `json:"model,omitempty"`
	MaxTokens   int         `json:"max_tokens,omitempty"`
	Temperature *float64    `json:"temperature,omitempty"`
	Tools       []Tool      `json:"tools,omitempty"`
	ToolChoice  *ToolChoice `json:"tool_choice,omitempty"`
	Reasoning   *Reasoning  `json:"reasoning,omitempty"`
	// ServiceTier is the Bedrock service tier a request asks for
	// (call.Tiers); "": the app's (docs/protocol.md, "Service tier").
	ServiceTier string          `json:"service_tier,omitempty"`
	AfterSeq    int             `json:"after_seq,omitempty"`
	Token       string          `json:"token,omitempty"`
	T           json.RawMessage `json:"t,omitempty"`
	// Traceparent is a request's W3C trace context (docs/protocol.md,
	// "Tracing"), raw: any value that is not a valid traceparent string is
	// ignored, never refused (see TraceParent).
	Traceparent json.RawMessage `json:"traceparent,omitempty"`
}

// maxTraceparentBytes bounds the traceparent value read (version 00 is
// 55 characters; later versions may append fields).
const maxTraceparentBytes = 256

// TraceParent is the frame's traceparent string, "" when it has none or
// it is not a JSON string of at most maxTraceparentBytes: the door hands
// it to tracing.Parse, which ignores an invalid one.
func (in Inbound) TraceParent() string {
	if len(in.Traceparent) < 2 || len(in.Traceparent) > maxTraceparentBytes+2 || in.Traceparent[0] != '"' {
		return ""
	}
	var s string
	if json.Unmarshal(in.Traceparent, &s) != nil {
		return ""
	}
	return s
}

// Inbound frame types.
const (
	TypeRequest = "request"
	TypeResume  = "resume"
	TypeCancel  = "cancel"
	TypeAuth    = "auth"
	TypePing    = "ping"
)

func invalid(format string, args ...any) error {
	return call.Errorf(call.ErrInvalid, format, args...)
}

func invalidAt(field, format string, args ...any) error {
	return call.FieldErrorf(call.ErrInvalid, field, format, args...)
}

// Decode parses and validates one inbound text frame. The returned error wraps
// call.ErrInvalid and names the problem. When the frame carried a readable
// request_id, it is returned even on error so the error frame can name it;
// so is its type when it is TypeRequest (else "").
func Decode(data []byte) (Inbound, error) {
	in, err := decode(data)
	if err != nil && !ValidID(in.RequestID) {
		in.RequestID = "" // an error frame never echoes an invalid id
	}
	return in, err
}

// decodeOptions make the decoder take what encoding/json takes: keys in
// any case, a repeated key (the last one wins). Invalid UTF-8 is the
// session's to refuse (close 1007) before decoding.
var decodeOptions = jsonv2.JoinOptions(jsonv2.MatchCaseInsensitiveNames(true),
	jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))

// decode parses a frame in one pass with the JSON v2 decoder
// (github.com/go-json-experiment/json, encoding/json/v2 to be):
// encoding/json validates a value again at every custom decoder on its
// way down, and a request's attachments, megabytes of base64 three levels
// deep, were scanned seven times (docs/benchmarks.md).
func decode(data []byte) (Inbound, error) {
	var in Inbound
	if err := jsonv2.Unmarshal(data, &in, decodeOptions); err != nil {
		// Recover the request_id, and whether it is a request, if the
		// frame is JSON of another shape.
		var probe struct {
			Type      any `json:"type"`
			RequestID any `json:"request_id"`
		}
		typ, id := "", ""
		if jsonv2.Unmarshal(data, &probe, decodeOptions) == nil {
			if s, ok := probe.RequestID.(string); ok && ValidID(s) {
				id = s
			}
			if probe.Type == TypeRequest {
				typ = TypeRequest
			}
		}
		// What was decoded stays (the session tells a frame with
		// attachments by its blocks); its type is kept only when it is a
		// request (a refused request is recorded as one).
		in.Type, in.RequestID = typ, id
		if trailing(data) {
			return in, invalid("frame has data after the JSON object")
		}
		return in, invalid("frame is not a valid JSON object: %s", jsonProblem(err))
	}
	switch in.Type {
	case TypeRequest:
		return in, validateRequest(&in)
	case TypeResume:
		if err := validateRequestID(in.RequestID); err != nil {
			return in, err
		}
		if in.AfterSeq < 0 {
			return in, invalidAt("after_seq", " must be >= 0")
		}
	case TypeCancel:
		return in, validateRequestID(in.RequestID)
	case TypeAuth:
		if in.Token == "" {
			return in, invalid("auth needs a token")
		}
	case TypePing:
		return in, validatePingT(in.T)
	case "":
		return in, invalid("frame has no type")
	default:
		return in, invalid("unknown frame type %q", Clip(in.Type))
	}
	return in, nil
}

// PeekRequestID returns the request_id of a frame of which only the first
// bytes are at hand (the rest was dropped), or "" when those bytes do not
// hold a valid one before anything unreadable.
func PeekRequestID(prefix []byte) string {
	dec := json.NewDecoder(bytes.NewReader(prefix))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return ""
	}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return ""
		}
		if k == "request_id" {
			v, _ := dec.Token()
			if id, ok := v.(string); ok && ValidID(id) {
				return id
			}
			return ""
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return ""
		}
	}
	return ""
}

func validateRequestID(id string) error {
	if id == "" {
		return invalidAt("request_id", " is required")
	}
	if !ValidID(id) {
		return invalidAt("request_id", " must be 8-64 characters of [A-Za-z0-9_-]")
	}
	return nil
}

// ValidateRequest checks a request's fields by the rules Decode applies to
// request frames (for the other doors, which build an Inbound themselves).
func ValidateRequest(in *Inbound) error { return validateRequest(in) }

func validateRequest(in *Inbound) error {
	if err := validateRequestID(in.RequestID); err != nil {
		return err
	}
	if len(in.Messages) == 0 {
		return invalidAt("messages", " must not be empty")
	}
	if len(in.Messages) > maxMessagesPerTurn {
		return invalid("at most %d messages", maxMessagesPerTurn)
	}
	for i, m := range in.Messages {
		if m.Role != "user" && m.Role != "assistant" {
			return invalidAt(fmt.Sprintf("messages[%d].role", i), " must be \"user\" or \"assistant\"")
		}
		if m.Content == "" && m.Blocks == nil {
			return invalidAt(fmt.Sprintf("messages[%d].content", i), " must not be empty")
		}
	}
	if in.Messages[len(in.Messages)-1].Role != "user" {
		return invalid("the last message must have role \"user\"")
	}
	if in.MaxTokens < 0 {
		// 0 and absent are the same on the wire (clients omit zero values):
		// both mean the app's default.
		return invalidAt("max_tokens", " must be >= 0 (0 or absent: the app's default)")
	}
	if t := in.Temperature; t != nil && (*t < 0 || *t > 1) {
		return invalidAt("temperature", " must be between 0 and 1")
	}
	if !ValidServiceTier(in.ServiceTier) {
		return invalidAt("service_tier", " must be %s (absent: the app's tier), got %q", TierList, Clip(in.ServiceTier))
	}
	if in.AfterSeq < 0 {
		return invalidAt("after_seq", " must be >= 0")
	}
	return validateBlocks(in)
}

// ValidServiceTier reports whether tier is "" (the app's) or one of the
// core's tiers (call.Tiers): what every door hands the core.
func ValidServiceTier(tier string) bool {
	return tier == "" || slices.Contains(call.Tiers, tier)
}

// TierList is the core's tiers as an error message names them:
// "default", "priority" or "flex".
var TierList = func() string {
	q := make([]string, len(call.Tiers))
	for i, t := range call.Tiers {
		q[i] = strconv.Quote(t)
	}
	return strings.Join(q[:len(q)-1], ", ") + " or " + q[len(q)-1]
}()

func jsonProblem(err error) string {
	var se *jsontext.SyntacticError
	if errors.As(err, &se) {
		return "syntax error at byte " + strconv.FormatInt(se.ByteOffset, 10)
	}
	var te *jsonv2.SemanticError
	if errors.As(err, &te) {
		if te.JSONPointer == "" {
			return "not a JSON object"
		}
		field := strings.ReplaceAll(strings.TrimPrefix(string(te.JSONPointer), "/"), "/", ".")
		return "field " + strconv.Quote(Clip(field)) + " has the wrong type"
	}
	return Clip(err.Error())
}

// trailing reports whether data is one JSON value followed by more than
// white space.
func trailing(data []byte) bool {
	dec := jsontext.NewDecoder(bytes.NewReader(data), decodeOptions)
	if dec.SkipValue() != nil {
		return false
	}
	_, err := dec.ReadToken()
	return !errors.Is(err, io.EOF)
}

// validatePingT accepts what a pong can echo back exactly: nothing, null, a
// finite number, or a string of at most MaxEchoBytes.
func validatePingT(t json.RawMessage) error {
	const want = "t must be a finite number or a string of at most %d bytes"
	if len(t) == 0 || string(t) == "null" {
		return nil
	}
	switch t[0] {
	case '"':
		var s string
		if json.Unmarshal(t, &s) != nil || len(s) > MaxEchoBytes {
			return invalid(want, MaxEchoBytes)
		}
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		// 1e400 is valid JSON but no float64: json.Marshal would turn it into null.
		if _, err := strconv.ParseFloat(string(t), 64); err != nil {
			return invalid(want, MaxEchoBytes)
		}
	default:
		return invalid(want, MaxEchoBytes)
	}
	return nil
}

// MaxEchoBytes bounds every client-sent string the server repeats (the
// core's bound, call.MaxEchoBytes).
const MaxEchoBytes = call.MaxEchoBytes

// Clip returns s cut to at most MaxEchoBytes bytes (call.Clip).
func Clip(s string) string { return call.Clip(s) }

// MaxStopSequences bounds a request's stop sequences (OpenAI's stop,
// Anthropic's stop_sequences): Bedrock Converse's
// inferenceConfig.stopSequences takes at most 4.
const MaxStopSequences = 4

// MaxStopSequenceBytes bounds one stop sequence: a stop sequence is a
// delimiter, and every answer's text is searched for each one.
const MaxStopSequenceBytes = 1024

// StopProblem says what is wrong with stops for every door: index is the
// sequence at fault (-1: the list), problem is "" when nothing is.
func StopProblem(stops []string) (index int, problem string) {
	if len(stops) > MaxStopSequences {
		return -1, fmt.Sprintf("at most %d stop sequences (Bedrock's limit), got %d", MaxStopSequences, len(stops))
	}
	for i, s := range stops {
		switch {
		case s == "":
			return i, "must not be empty"
		case len(s) > MaxStopSequenceBytes:
			return i, fmt.Sprintf("at most %d bytes, got %d", MaxStopSequenceBytes, len(s))
		}
	}
	return 0, ""
}
