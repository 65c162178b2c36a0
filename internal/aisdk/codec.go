package aisdk

import (
	"bytes"
	"encoding/json"
	"strconv"

	"github.com/jetway-gateway/jetway/internal/call"
	"github.com/jetway-gateway/jetway/internal/socket"
	"github.com/jetway-gateway/jetway/internal/stream"
)

// # The codec
//
// A log's events are encoded once into UI message chunks (the AI SDK's
// UIMessageChunk JSON), kept beside the events for every follower and
// replay (stream.Codec). One event may be several chunks (a text piece
// that starts a block is text-start and text-delta), so an event's
// encoding is lines, each ended by '\n' (JSON never holds a raw newline):
//
//	c<chunk JSON>   a chunk frame's chunk
//	e<JSON string>  the error frame, with this errorText
//	n               the end frame
//
// A delivery (frames) wraps each line in its transport frame for the
// socket's requestId, numbering the chunks from 0: the chunk bytes are
// the same on every delivery, on every server.

const (
	lineChunk = 'c'
	lineError = 'e'
	lineEnd   = 'n'
)

// codec is the AI SDK door's stream.Codec.
type codec struct{}

func (c codec) NewEncoder(l *stream.Log) stream.Encoder {
	return &encoder{requestID: l.RequestID, open: -1}
}

// encoder keeps, from one event to the next, the block the answer is in
// (its chunks are opened and closed around it), a tool call's input so
// far, and the accepted event's quota for the metadata.
type encoder struct {
	requestID string
	quota     *call.Quota

	open      int    // the answer block being streamed, -1 none
	kind      string // its kind: call.BlockText, call.BlockReasoning or call.BlockToolUse
	toolID    string // its tool call's id and name (tool_use)
	toolName  string
	toolInput []byte // its tool call's input so far
	signature string // its reasoning's signature
}

// MessageID is the UI message id of a request's answer: stable on every
// delivery and server.
func MessageID(requestID string) string { return "msg-" + requestID }

func (e *encoder) Accepted(a *stream.Accepted) []byte {
	e.quota = a.Quota
	var b []byte
	b = appendLine(b, lineChunk, func(b []byte) []byte {
		b = append(b, startPrefix...)
		b = appendString(b, MessageID(e.requestID))
		return append(b, '}')
	})
	return appendLine(b, lineChunk, func(b []byte) []byte { return append(b, `{"type":"start-step"}`...) })
}

func (e *encoder) AppendChunk(dst []byte, _ int, p call.Piece) []byte {
	kind := p.Kind
	if kind == "" {
		kind = call.BlockText
	}
	if e.open != p.Block || e.kind != kind {
		dst = e.close(dst)
		dst = e.start(dst, p, kind)
	}
	switch kind {
	case call.BlockText:
		if p.Text != "" {
			dst = e.delta(dst, "text-delta", "id", textID(p.Block), "delta", p.Text)
		}
	case call.BlockReasoning:
		if p.Signature != "" {
			e.signature += p.Signature
		}
		if p.Reasoning != "" {
			dst = e.delta(dst, "reasoning-delta", "id", reasoningID(p.Block), "delta", p.Reasoning)
		}
	case call.BlockToolUse:
		if p.Input != "" {
			e.toolInput = append(e.toolInput, p.Input...)
			dst = e.delta(dst, "tool-input-delta", "toolCallId", e.toolID, "inputTextDelta", p.Input)
		}
	}
	return dst
}

// start opens piece p's block.
func (e *encoder) start(dst []byte, p call.Piece, kind string) []byte {
	e.open, e.kind = p.Block, kind
	return appendLine(dst, lineChunk, func(b []byte) []byte {
		switch kind {
		case call.BlockReasoning:
			b = append(b, `{"type":"reasoning-start","id":`...)
			b = appendString(b, reasoningID(p.Block))
		case call.BlockToolUse:
			e.toolID, e.toolName, e.toolInput = p.ID, p.Name, e.toolInput[:0]
			b = append(b, `{"type":"tool-input-start","toolCallId":`...)
			b = appendString(b, p.ID)
			b = append(b, `,"toolName":`...)
			b = appendString(b, p.Name)
		default:
			b = append(b, `{"type":"text-start","id":`...)
			b = appendString(b, textID(p.Block))
		}
		return append(b, '}')
	})
}

// close ends the block being streamed, if any.
func (e *encoder) close(dst []byte) []byte {
	if e.open < 0 {
		return dst
	}
	block := e.open
	e.open = -1
	return appendLine(dst, lineChunk, func(b []byte) []byte {
		switch e.kind {
		case call.BlockReasoning:
			b = append(b, `{"type":"reasoning-end","id":`...)
			b = appendString(b, reasoningID(block))
			if e.signature != "" {
				// Bedrock needs the signature of a reasoning block passed
				// back; the UI part keeps it in its providerMetadata.
				b = append(b, `,"providerMetadata":{"jetway":{"signature":`...)
				b = appendString(b, e.signature)
				b = append(b, `}}`...)
				e.signature = ""
			}
		case call.BlockToolUse:
			b = append(b, `{"type":"tool-input-available","toolCallId":`...)
			b = appendString(b, e.toolID)
			b = append(b, `,"toolName":`...)
			b = appendString(b, e.toolName)
			b = append(b, `,"input":`...)
			b = append(b, toolInput(e.toolInput)...)
		default:
			b = append(b, `{"type":"text-end","id":`...)
			b = appendString(b, textID(block))
		}
		return append(b, '}')
	})
}

func (e *encoder) delta(dst []byte, typ, idKey, id, deltaKey, delta string) []byte {
	return appendLine(dst, lineChunk, func(b []byte) []byte {
		b = append(b, `{"type":"`...)
		b = append(b, typ...)
		b = append(b, `","`...)
		b = append(b, idKey...)
		b = append(b, `":`...)
		b = appendString(b, id)
		b = append(b, `,"`...)
		b = append(b, deltaKey...)
		b = append(b, `":`...)
		b = appendString(b, delta)
		return append(b, '}')
	})
}

func (e *encoder) Terminal(t *stream.Terminal, _ int) []byte {
	b := e.close(nil)
	if d := t.Done; d != nil {
		b = appendJSONLine(b, metadataChunk{Type: "message-metadata", MessageMetadata: metadata{Jetway: e.facts(d)}})
		b = appendLine(b, lineChunk, func(b []byte) []byte { return append(b, `{"type":"finish-step"}`...) })
		b = appendLine(b, lineChunk, func(b []byte) []byte {
			b = append(b, `{"type":"finish","finishReason":"`...)
			b = append(b, finishReason(d.StopReason)...)
			return append(b, `"}`...)
		})
		return appendLine(b, lineEnd, nil)
	}
	f := t.Error
	if f.Code == call.CodeCancelled {
		// An abort, from this socket or any other door: the stream ends
		// as the transport's own abort does.
		b = appendLine(b, lineChunk, func(b []byte) []byte { return append(b, `{"type":"abort"}`...) })
		return appendLine(b, lineEnd, nil)
	}
	if f.Chunks != nil {
		// What was streamed stays visible, with the failure below it.
		b = appendJSONLine(b, struct {
			Type      string `json:"type"`
			ErrorText string `json:"errorText"`
		}{"error", f.Message})
	}
	return appendFailure(b, f)
}

// appendFailure is a refusal's or failure's ending: the machine-readable
// metadata chunk, then the error frame.
func appendFailure(b []byte, f *call.Failure) []byte {
	b = appendJSONLine(b, metadataChunk{Type: "message-metadata", MessageMetadata: metadata{Jetway: facts{Error: failureOf(f)}}})
	return appendLine(b, lineError, func(b []byte) []byte { return appendString(b, f.Message) })
}

// facts are the Jetway facts of an answer (PROTOCOL.md, "The AI SDK door").
func (e *encoder) facts(d *call.Done) facts {
	u := d.Usage
	cost := float64(d.CostMicroUSD) / 1e6 // the usage record's cost_usd
	return facts{RequestID: d.RequestID, Model: d.Model, Cached: &d.Cached, TTFTMs: &d.TTFTMs, LatencyMs: &d.LatencyMs,
		Usage: &usage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens,
			CacheReadInputTokens: u.CacheReadInputTokens, CacheWriteInputTokens: u.CacheWriteInputTokens},
		CostUSD: &cost, Quota: e.quota, ServiceTier: d.ServiceTier}
}

type metadataChunk struct {
	Type            string   `json:"type"`
	MessageMetadata metadata `json:"messageMetadata"`
}

type metadata struct {
	Jetway facts `json:"jetway"`
}

type facts struct {
	RequestID string      `json:"request_id,omitempty"`
	Model     string      `json:"model,omitempty"`
	Cached    *bool       `json:"cached,omitempty"`
	TTFTMs    *int64      `json:"ttft_ms,omitempty"`
	LatencyMs *int64      `json:"latency_ms,omitempty"`
	Usage     *usage      `json:"usage,omitempty"`
	CostUSD   *float64    `json:"cost_usd,omitempty"`
	Quota     *call.Quota `json:"quota,omitempty"`
	// ServiceTier is the tier that served, when the model call named one.
	ServiceTier string      `json:"service_tier,omitempty"`
	Error       *errorFacts `json:"error,omitempty"`
}

type usage struct {
	InputTokens           int64 `json:"input_tokens"`
	OutputTokens          int64 `json:"output_tokens"`
	CacheReadInputTokens  int64 `json:"cache_read_input_tokens"`
	CacheWriteInputTokens int64 `json:"cache_write_input_tokens"`
}

type errorFacts struct {
	Code         string `json:"code"`
	Status       int    `json:"status"`
	Message      string `json:"message"`
	Retryable    bool   `json:"retryable"`
	RetryAfterMs int64  `json:"retry_after_ms"`
}

func failureOf(f *call.Failure) *errorFacts {
	status := f.Status
	if status == 0 {
		status = call.Status(f.Code)
	}
	return &errorFacts{Code: f.Code, Status: status, Message: f.Message, Retryable: f.Retryable, RetryAfterMs: f.RetryAfterMs}
}

// finishReason is the AI SDK's finish reason for a stop reason.
func finishReason(stop string) string {
	switch stop {
	case "end_turn", "stop_sequence", "":
		return "stop"
	case "max_tokens":
		return "length"
	case "tool_use":
		return "tool-calls"
	case "content_filtered", "guardrail_intervened":
		return "content-filter"
	}
	return "other"
}

func textID(block int) string      { return "text-" + strconv.Itoa(block) }
func reasoningID(block int) string { return "reasoning-" + strconv.Itoa(block) }

// toolInput is a tool call's input as JSON: {} when empty, a JSON string
// when it is not valid JSON (a stream cut inside it).
func toolInput(in []byte) []byte {
	if len(bytes.TrimSpace(in)) == 0 {
		return []byte("{}")
	}
	if json.Valid(in) {
		return in
	}
	b, _ := json.Marshal(string(in))
	return b
}

func appendLine(dst []byte, kind byte, body func([]byte) []byte) []byte {
	dst = append(dst, kind)
	if body != nil {
		dst = body(dst)
	}
	return append(dst, '\n')
}

func appendJSONLine(dst []byte, v any) []byte {
	return appendLine(dst, lineChunk, func(b []byte) []byte {
		j, err := json.Marshal(v)
		if err != nil {
			panic(err) // the types above always marshal
		}
		return append(b, j...)
	})
}

// appendString appends s as a JSON string (encoding/json's escaping, so
// the bytes are those json.Marshal writes).
func appendString(dst []byte, s string) []byte {
	j, _ := json.Marshal(s)
	return append(dst, j...)
}

// # Frames

// frames is a delivery's writer: each line of the codec's bytes becomes
// the transport's frame for requestId, chunks numbered from 0; chunks up
// to lastSequence are skipped (a resume that names one).
type frames struct {
	requestID    []byte // JSON string
	start        []byte // the start chunk: its messageId is the response's (Response.MessageID)
	next         int    // the next chunk's sequence
	lastSequence int
}

// newFrames writes one delivery for requestId of the response whose UI
// message is messageID ("": the codec's, MessageID of its request).
func newFrames(requestID string, lastSequence int, messageID string) *frames {
	f := &frames{requestID: appendString(nil, requestID), lastSequence: lastSequence}
	if messageID != "" {
		f.start = appendString(append([]byte(nil), startPrefix...), messageID)
		f.start = append(f.start, '}')
	}
	return f
}

// startPrefix begins the codec's start chunk.
const startPrefix = `{"type":"start","messageId":`

// delivery is the socket.Delivery of a follow with these frames.
func (f *frames) delivery(b *stream.Batch, out *socket.Out) bool {
	if b.Accepted != nil && !out.Accepted(nil) {
		return false
	}
	return out.Frames(f.build(b))
}

// build is a batch's frames, in one buffer.
func (f *frames) build(b *stream.Batch) [][]byte {
	var buf []byte
	var ends []int
	add := func(enc []byte) {
		for len(enc) > 0 {
			i := bytes.IndexByte(enc, '\n')
			if i < 0 {
				return
			}
			line := enc[:i]
			enc = enc[i+1:]
			if len(line) == 0 {
				continue
			}
			switch line[0] {
			case lineChunk:
				seq := f.next
				f.next++
				if seq <= f.lastSequence {
					continue
				}
				chunk := line[1:]
				if f.start != nil && bytes.HasPrefix(chunk, []byte(startPrefix)) {
					// A continuation's message is the client's: the chunk
					// names it on every delivery (the chat index keeps it).
					chunk = f.start
				}
				buf = f.appendChunk(buf, seq, chunk)
			case lineError:
				buf = append(buf, `{"type":"error","requestId":`...)
				buf = append(buf, f.requestID...)
				buf = append(buf, `,"errorText":`...)
				buf = append(append(buf, line[1:]...), '}')
			case lineEnd:
				buf = f.appendEnd(buf)
			}
			ends = append(ends, len(buf))
		}
	}
	if b.Accepted != nil {
		add(b.AcceptedBytes)
	}
	for i := range b.Chunks.Len() {
		add(b.Chunks.At(i))
	}
	if b.Terminal != nil {
		add(b.TerminalBytes)
	}
	if len(ends) == 0 {
		return nil
	}
	all := make([][]byte, len(ends))
	start := 0
	for i, end := range ends {
		all[i] = buf[start:end:end]
		start = end
	}
	return all
}

func (f *frames) appendChunk(dst []byte, seq int, chunk []byte) []byte {
	dst = append(dst, `{"type":"chunk","requestId":`...)
	dst = append(dst, f.requestID...)
	dst = append(dst, `,"sequence":`...)
	dst = strconv.AppendInt(dst, int64(seq), 10)
	dst = append(dst, `,"chunk":`...)
	dst = append(dst, chunk...)
	return append(dst, '}')
}

func (f *frames) appendEnd(dst []byte) []byte {
	dst = append(dst, `{"type":"end","requestId":`...)
	dst = append(dst, f.requestID...)
	return append(dst, '}')
}

// refusal is the frames of a refusal of requestID's send or resume attempt
// that reached no log: the metadata chunk (sequence 0), then the error frame.
func refusal(requestID string, f call.Failure) [][]byte {
	fr := newFrames(requestID, -1, "")
	enc := appendFailure(nil, &f)
	var out [][]byte
	for _, line := range bytes.Split(bytes.TrimSuffix(enc, []byte{'\n'}), []byte{'\n'}) {
		switch line[0] {
		case lineChunk:
			out = append(out, fr.appendChunk(nil, 0, line[1:]))
		case lineError:
			b := append([]byte(`{"type":"error","requestId":`), fr.requestID...)
			b = append(b, `,"errorText":`...)
			out = append(out, append(append(b, line[1:]...), '}'))
		}
	}
	return out
}
