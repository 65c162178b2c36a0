package anthropic

import (
	"encoding/json"
	"strconv"

	"github.com/jetway-gateway/jetway/internal/call"
	"github.com/jetway-gateway/jetway/internal/protocol"
	"github.com/jetway-gateway/jetway/internal/stream"
)

// events is the door's streaming codec: a request's events as Anthropic's
// Server-Sent Events, encoded once per log for every follower and resume.
type events struct{}

func (events) NewEncoder(l *stream.Log) stream.Encoder { return newEncoder(l.RequestID) }

// encoder writes one request's events as Anthropic's Server-Sent Events.
// Its output is a function of the log's events alone (never of the HTTP
// request), so every follower and every resume gets the same bytes: the
// message id is "msg_" + the request id, and the state it keeps (the open
// content block) comes from the chunks it was given, in seq order from 1.
//
// Content blocks are numbered 0, 1, 2, ... in the order they start (the
// SDKs' accumulators index them so). A chunk's event group ends with the
// event that carries `id: <seq>`: a client that saw that id saw the
// whole group, and Last-Event-ID resumes after it exactly.
type encoder struct {
	requestID string
	open      bool   // a content block is open
	block     int    // the open block's number in the core's answer
	kind      string // the open block's kind ("" text)
	index     int    // the open block's index here
}

func newEncoder(requestID string) *encoder {
	return &encoder{requestID: requestID, index: -1}
}

// Accepted is message_start (the message with no content yet; its usage
// comes in message_delta) and a ping.
func (e *encoder) Accepted(a *stream.Accepted) []byte {
	dst := append([]byte(nil), "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":"...)
	dst = appendString(dst, "msg_"+e.requestID)
	dst = append(dst, `,"type":"message","role":"assistant","model":`...)
	dst = appendString(dst, a.Model)
	dst = append(dst, `,"content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":0,"output_tokens":0}}}`+"\n\n"...)
	return append(dst, "event: ping\ndata: {\"type\":\"ping\"}\n\n"...)
}

// AppendChunk appends the event group of chunk seq: the stop of the open
// block and the start of a new one when the chunk begins a block, then its
// delta.
func (e *encoder) AppendChunk(dst []byte, seq int, c call.Piece) []byte {
	last := func() { // the group's last event carries the seq
		dst = append(dst, "id: "...)
		dst = strconv.AppendInt(dst, int64(seq), 10)
		dst = append(dst, '\n')
	}
	if !e.open || c.Block != e.block {
		dst = e.stop(dst)
		e.open, e.block, e.kind = true, c.Block, c.Kind
		e.index++
		startOnly := c.Kind == protocol.KindToolUse && c.Input == ""
		if startOnly {
			last()
		}
		dst = append(dst, "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":"...)
		dst = strconv.AppendInt(dst, int64(e.index), 10)
		switch c.Kind {
		case protocol.KindReasoning:
			dst = append(dst, `,"content_block":{"type":"thinking","thinking":"","signature":""}}`...)
		case protocol.KindToolUse:
			dst = append(dst, `,"content_block":{"type":"tool_use","id":`...)
			dst = appendString(dst, c.ID)
			dst = append(dst, `,"name":`...)
			dst = appendString(dst, c.Name)
			dst = append(dst, `,"input":{}}}`...)
		default:
			dst = append(dst, `,"content_block":{"type":"text","text":""}}`...)
		}
		dst = append(dst, "\n\n"...)
		if startOnly {
			return dst
		}
	}
	delta := func(typ, field, value string, withID bool) {
		if withID {
			last()
		}
		dst = append(dst, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":"...)
		dst = strconv.AppendInt(dst, int64(e.index), 10)
		dst = append(dst, `,"delta":{"type":"`...)
		dst = append(dst, typ...)
		dst = append(dst, `","`...)
		dst = append(dst, field...)
		dst = append(dst, `":`...)
		dst = appendString(dst, value)
		dst = append(dst, "}}\n\n"...)
	}
	switch c.Kind {
	case protocol.KindReasoning:
		if c.Reasoning != "" || c.Signature == "" {
			delta("thinking_delta", "thinking", c.Reasoning, c.Signature == "")
		}
		if c.Signature != "" {
			delta("signature_delta", "signature", c.Signature, true)
		}
	case protocol.KindToolUse:
		delta("input_json_delta", "partial_json", c.Input, true)
	default:
		delta("text_delta", "text", c.Text, true)
	}
	return dst
}

// stop appends the open block's content_block_stop.
func (e *encoder) stop(dst []byte) []byte {
	if !e.open {
		return dst
	}
	e.open = false
	dst = append(dst, "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":"...)
	dst = strconv.AppendInt(dst, int64(e.index), 10)
	return append(dst, "}\n\n"...)
}

// Terminal ends the stream: the open block's stop, message_delta (stop
// reason and usage) and message_stop; or one error event.
func (e *encoder) Terminal(t *stream.Terminal, _ int) []byte {
	if t.Error != nil {
		b, _ := json.Marshal(fromProtocol(*t.Error).body(e.requestID))
		dst := append([]byte(nil), "event: error\ndata: "...)
		dst = append(dst, b...)
		return append(dst, "\n\n"...)
	}
	d := t.Done
	dst := e.stop(nil)
	dst = append(dst, "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":"...)
	dst = appendString(dst, stopReason(d.StopReason))
	dst = append(dst, `,"stop_sequence":null},"usage":`...)
	u, _ := json.Marshal(usageOf(d))
	dst = append(dst, u...)
	dst = append(dst, "}\n\n"...)
	return append(dst, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"...)
}

// usage is Anthropic's usage: input_tokens are those not read from nor
// written to the prompt cache, as Bedrock's (and the core's) are;
// service_tier is the tier that served, when the model call named one.
type usage struct {
	InputTokens              int64  `json:"input_tokens"`
	CacheCreationInputTokens int64  `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64  `json:"cache_read_input_tokens"`
	OutputTokens             int64  `json:"output_tokens"`
	ServiceTier              string `json:"service_tier,omitempty"`
}

func usageOf(d *call.Done) usage {
	u := d.Usage
	return usage{InputTokens: u.InputTokens, CacheCreationInputTokens: u.CacheWriteInputTokens,
		CacheReadInputTokens: u.CacheReadInputTokens, OutputTokens: u.OutputTokens, ServiceTier: serviceTier(d.ServiceTier)}
}

// serviceTier is Anthropic's usage.service_tier of the tier that served:
// the default tier is "standard"; priority is "priority". Flex, which
// Anthropic's enum (standard, priority, batch) has no value for, is
// "flex": "batch" would say the Batches API served it, and "standard"
// would hide the discounted, slower tier the answer came from.
func serviceTier(tier string) string {
	if tier == call.TierDefault {
		return "standard"
	}
	return tier
}

// stopReason maps Bedrock's stop reason to Anthropic's.
func stopReason(s string) string {
	switch s {
	case "max_tokens", "stop_sequence", protocol.StopToolUse:
		return s
	case "guardrail_intervened", "content_filtered":
		return "refusal"
	default:
		return "end_turn"
	}
}

// appendString appends v as JSON (json.Marshal's bytes, without its
// allocation per chunk).
func appendString(dst []byte, v string) []byte { return call.AppendJSONString(dst, v) }

// wholeMessage is the door's codec of a whole answer: the terminal of a done
// answer is the message body; nothing else is sent (an error is answered
// with its status).
type wholeMessage struct{}

func (wholeMessage) NewEncoder(l *stream.Log) stream.Encoder {
	return wholeEncoder{requestID: l.RequestID}
}

type wholeEncoder struct{ requestID string }

func (wholeEncoder) Accepted(*stream.Accepted) []byte                   { return nil }
func (wholeEncoder) AppendChunk(dst []byte, _ int, _ call.Piece) []byte { return dst }

func (e wholeEncoder) Terminal(t *stream.Terminal, _ int) []byte {
	d := t.Done
	if d == nil {
		return nil
	}
	b, _ := json.Marshal(struct {
		ID           string  `json:"id"`
		Type         string  `json:"type"`
		Role         string  `json:"role"`
		Model        string  `json:"model"`
		Content      []any   `json:"content"`
		StopReason   string  `json:"stop_reason"`
		StopSequence *string `json:"stop_sequence"`
		Usage        usage   `json:"usage"`
	}{ID: "msg_" + e.requestID, Type: "message", Role: "assistant", Model: d.Model, Content: content(d),
		StopReason: stopReason(d.StopReason), Usage: usageOf(d)})
	return append(b, '\n')
}

// content is the whole answer's content blocks in Anthropic's shape.
func content(d *call.Done) []any {
	type text struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if d.Blocks == nil {
		if d.Text == "" {
			return []any{}
		}
		return []any{text{"text", d.Text}}
	}
	out := make([]any, 0, len(d.Blocks))
	for _, b := range d.Blocks {
		switch b.Type {
		case protocol.BlockReasoning:
			out = append(out, struct {
				Type      string `json:"type"`
				Thinking  string `json:"thinking"`
				Signature string `json:"signature"`
			}{"thinking", b.Text, b.Signature})
		case protocol.BlockToolUse:
			out = append(out, struct {
				Type  string          `json:"type"`
				ID    string          `json:"id"`
				Name  string          `json:"name"`
				Input json.RawMessage `json:"input"`
			}{"tool_use", b.ID, b.Name, b.Input})
		default:
			out = append(out, text{"text", b.Text})
		}
	}
	return out
}
