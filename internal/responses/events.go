package responses

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/jetway-gateway/jetway/internal/call"
	"github.com/jetway-gateway/jetway/internal/protocol"
	"github.com/jetway-gateway/jetway/internal/stream"
)

// # The codec
//
// A log's events are encoded once into the Responses API's typed stream
// events, kept beside the events for every follower and replay
// (stream.Codec), in one of three framings: Server-Sent Events
// ("event: <type>\ndata: <json>\n\n"), lines ("<json>\n", one WebSocket
// mode message each), or whole (nothing but the terminal: the response
// object). The encoder is a function of the log's events alone, so the
// bytes (and every sequence_number) are the same for every follower, on
// every server: a resume from starting_after N skips the first N+1
// events (each one is one SSE event, or one line).

type framing int

const (
	framingSSE framing = iota
	framingLines
	framingWhole
)

// codec is the door's stream.Codec in one framing.
type codec struct {
	framing framing
	keys    *Keys
}

func (c codec) NewEncoder(l *stream.Log) stream.Encoder {
	return &encoder{c: c, requestID: l.RequestID, created: l.Created.Unix(), index: -1}
}

// ResponseID is the response id of a core request.
func ResponseID(requestID string) string { return "resp_" + requestID }

// requestIDOf is the core request id of a response id.
func requestIDOf(responseID string) (string, bool) {
	id, ok := strings.CutPrefix(responseID, "resp_")
	return id, ok && protocol.ValidID(id)
}

// encoder writes one request's events. It keeps the open output item
// (the core's answer block being streamed) and every finished item, for
// the items' done events and the final response object.
type encoder struct {
	c         codec
	requestID string
	created   int64
	model     string
	tier      string // the service tier that served (the terminal's)
	seq       int    // the next event's sequence_number
	accepted  bool

	items []json.RawMessage // the finished output items

	open   bool
	block  int    // the open item's block in the core's answer
	kind   string // its kind ("" text)
	index  int    // its output_index
	itemID string
	text   strings.Builder // its text, arguments or reasoning so far
	sig    string          // its reasoning's signature
	callID string
	name   string
}

// event appends one event: its framing, then
// {"type":typ,"sequence_number":n<fields>}.
func (e *encoder) event(dst []byte, typ string, fields func(dst []byte) []byte) []byte {
	n := e.seq
	e.seq++
	switch e.c.framing {
	case framingWhole:
		return dst
	case framingSSE:
		dst = append(dst, "event: "...)
		dst = append(dst, typ...)
		dst = append(dst, "\ndata: "...)
	}
	dst = append(dst, `{"type":"`...)
	dst = append(dst, typ...)
	dst = append(dst, `","sequence_number":`...)
	dst = strconv.AppendInt(dst, int64(n), 10)
	dst = fields(dst)
	dst = append(dst, '}')
	if e.c.framing == framingSSE {
		return append(dst, "\n\n"...)
	}
	return append(dst, '\n')
}

func (e *encoder) Accepted(a *stream.Accepted) []byte {
	e.model, e.accepted = a.Model, true
	obj := e.object("in_progress", nil, nil, nil)
	dst := e.event(nil, "response.created", func(dst []byte) []byte { return appendField(dst, "response", obj) })
	return e.event(dst, "response.in_progress", func(dst []byte) []byte { return appendField(dst, "response", obj) })
}

func (e *encoder) AppendChunk(dst []byte, _ int, c call.Piece) []byte {
	if !e.open || c.Block != e.block {
		dst = e.close(dst, "completed")
		dst = e.start(dst, c)
	}
	switch c.Kind {
	case protocol.KindReasoning:
		if c.Signature != "" {
			e.sig += c.Signature
		}
		if c.Reasoning == "" {
			return dst
		}
		e.text.WriteString(c.Reasoning)
		return e.event(dst, "response.reasoning_summary_text.delta", func(dst []byte) []byte {
			dst = e.itemFields(dst)
			dst = append(dst, `,"summary_index":0,"delta":`...)
			return appendString(dst, c.Reasoning)
		})
	case protocol.KindToolUse:
		if c.Input == "" {
			return dst
		}
		e.text.WriteString(c.Input)
		return e.event(dst, "response.function_call_arguments.delta", func(dst []byte) []byte {
			dst = e.itemFields(dst)
			dst = append(dst, `,"delta":`...)
			return appendString(dst, c.Input)
		})
	default:
		e.text.WriteString(c.Text)
		return e.event(dst, "response.output_text.delta", func(dst []byte) []byte {
			dst = e.itemFields(dst)
			dst = append(dst, `,"content_index":0,"delta":`...)
			dst = appendString(dst, c.Text)
			return append(dst, `,"logprobs":[]`...)
		})
	}
}

func (e *encoder) itemFields(dst []byte) []byte {
	dst = append(dst, `,"item_id":`...)
	dst = appendString(dst, e.itemID)
	dst = append(dst, `,"output_index":`...)
	return strconv.AppendInt(dst, int64(e.index), 10)
}

// start opens the output item of a piece's block.
func (e *encoder) start(dst []byte, c call.Piece) []byte {
	e.open, e.block, e.kind = true, c.Block, c.Kind
	e.index = len(e.items)
	e.text.Reset()
	e.sig, e.callID, e.name = "", c.ID, c.Name
	n := strconv.Itoa(e.index)
	switch c.Kind {
	case protocol.KindReasoning:
		e.itemID = "rs_" + e.requestID + "_" + n
		item := reasoningItem{ID: e.itemID, Type: "reasoning", Summary: []summaryPart{}}
		dst = e.added(dst, item)
		return e.event(dst, "response.reasoning_summary_part.added", func(dst []byte) []byte {
			dst = e.itemFields(dst)
			return append(dst, `,"summary_index":0,"part":{"type":"summary_text","text":""}`...)
		})
	case protocol.KindToolUse:
		e.itemID = "fc_" + e.requestID + "_" + n
		return e.added(dst, functionCall{ID: e.itemID, Type: "function_call", Status: "in_progress", CallID: c.ID, Name: c.Name})
	default:
		e.itemID = "msg_" + e.requestID + "_" + n
		dst = e.added(dst, message{ID: e.itemID, Type: "message", Status: "in_progress", Role: "assistant", Content: []outputText{}})
		return e.event(dst, "response.content_part.added", func(dst []byte) []byte {
			dst = e.itemFields(dst)
			return append(dst, `,"content_index":0,"part":{"type":"output_text","text":"","annotations":[]}`...)
		})
	}
}

func (e *encoder) added(dst []byte, item any) []byte {
	return e.event(dst, "response.output_item.added", func(dst []byte) []byte {
		dst = append(dst, `,"output_index":`...)
		dst = strconv.AppendInt(dst, int64(e.index), 10)
		return appendField(dst, "item", item)
	})
}

// close finishes the open item: its done events, then output_item.done.
func (e *encoder) close(dst []byte, status string) []byte {
	if !e.open {
		return dst
	}
	e.open = false
	text := e.text.String()
	var item any
	switch e.kind {
	case protocol.KindReasoning:
		r := reasoningItem{ID: e.itemID, Type: "reasoning", Summary: []summaryPart{}}
		if text != "" {
			r.Summary = append(r.Summary, summaryPart{Type: "summary_text", Text: text})
		}
		if e.c.keys != nil && e.sig != "" {
			r.EncryptedContent = e.c.keys.seal(text, e.sig)
		}
		dst = e.event(dst, "response.reasoning_summary_text.done", func(dst []byte) []byte {
			dst = e.itemFields(dst)
			dst = append(dst, `,"summary_index":0,"text":`...)
			return appendString(dst, text)
		})
		dst = e.event(dst, "response.reasoning_summary_part.done", func(dst []byte) []byte {
			dst = e.itemFields(dst)
			dst = append(dst, `,"summary_index":0,"part":{"type":"summary_text","text":`...)
			dst = appendString(dst, text)
			return append(dst, '}')
		})
		item = r
	case protocol.KindToolUse:
		if strings.TrimSpace(text) == "" {
			text = "{}"
		}
		dst = e.event(dst, "response.function_call_arguments.done", func(dst []byte) []byte {
			dst = e.itemFields(dst)
			dst = append(dst, `,"name":`...)
			dst = appendString(dst, e.name)
			dst = append(dst, `,"arguments":`...)
			return appendString(dst, text)
		})
		item = functionCall{ID: e.itemID, Type: "function_call", Status: status, CallID: e.callID, Name: e.name, Arguments: &text}
	default:
		dst = e.event(dst, "response.output_text.done", func(dst []byte) []byte {
			dst = e.itemFields(dst)
			dst = append(dst, `,"content_index":0,"text":`...)
			dst = appendString(dst, text)
			return append(dst, `,"logprobs":[]`...)
		})
		part := outputText{Type: "output_text", Text: text, Annotations: []any{}, Logprobs: []any{}}
		dst = e.event(dst, "response.content_part.done", func(dst []byte) []byte {
			dst = e.itemFields(dst)
			dst = append(dst, `,"content_index":0`...)
			return appendField(dst, "part", part)
		})
		item = message{ID: e.itemID, Type: "message", Status: status, Role: "assistant", Content: []outputText{part}}
	}
	b, _ := json.Marshal(item)
	e.items = append(e.items, b)
	return e.event(dst, "response.output_item.done", func(dst []byte) []byte {
		dst = append(dst, `,"output_index":`...)
		dst = strconv.AppendInt(dst, int64(e.index), 10)
		dst = append(dst, `,"item":`...)
		return append(dst, b...)
	})
}

// Terminal ends the response: the open item's done events, then
// response.completed, response.incomplete (max_output_tokens, a content
// filter, or the owner's loss: interrupted, with what was saved) or
// response.failed; a request refused before it was accepted is one error
// event. In the whole framing it is the response object alone.
func (e *encoder) Terminal(t *stream.Terminal, _ int) []byte {
	if t.Error != nil && !e.accepted {
		if e.c.framing == framingWhole {
			return nil
		}
		f := fromProtocol(*t.Error)
		return e.event(nil, "error", func(dst []byte) []byte {
			dst = append(dst, `,"code":`...)
			dst = appendString(dst, f.code)
			dst = append(dst, `,"message":`...)
			dst = appendString(dst, f.msg)
			dst = append(dst, `,"param":null`...)
			return appendField(dst, "error", f.detail(e.requestID))
		})
	}
	status, typ := "completed", "response.completed"
	var incomplete *incompleteDetails
	var failure *responseError
	var usage *call.Usage
	if d := t.Done; d != nil {
		if e.model == "" {
			e.model = d.Model
		}
		e.tier = d.ServiceTier
		usage = &d.Usage
		switch d.StopReason {
		case "max_tokens":
			incomplete = &incompleteDetails{Reason: "max_output_tokens"}
		case "guardrail_intervened", "content_filtered":
			incomplete = &incompleteDetails{Reason: "content_filter"}
		}
	} else {
		switch t.Error.Code {
		case call.CodeInterrupted:
			incomplete = &incompleteDetails{Reason: "interrupted"}
		case call.CodeCancelled:
			status = "cancelled"
		}
		if incomplete == nil && status != "cancelled" {
			f := fromProtocol(*t.Error)
			failure = &responseError{Code: f.code, Message: f.msg}
		}
	}
	itemStatus := "completed"
	switch {
	case incomplete != nil:
		status, typ, itemStatus = "incomplete", "response.incomplete", "incomplete"
	case failure != nil || status == "cancelled":
		if status != "cancelled" {
			status = "failed"
		}
		typ, itemStatus = "response.failed", "incomplete"
	}
	if e.c.framing == framingWhole {
		// The whole framing is given no chunks (stream.Codec: a codec
		// silent on the first chunk gets no more): its items are the
		// terminal's answer.
		e.items = e.answerItems(t, itemStatus)
		b, _ := json.Marshal(e.object(status, usage, incomplete, failure))
		return append(b, '\n')
	}
	dst := e.close(nil, itemStatus)
	obj := e.object(status, usage, incomplete, failure)
	return e.event(dst, typ, func(dst []byte) []byte { return appendField(dst, "response", obj) })
}

// answerItems are the output items of a terminal's answer, numbered as
// the stream numbers them (blocks with nothing streamed are not items).
func (e *encoder) answerItems(t *stream.Terminal, status string) []json.RawMessage {
	var blocks []call.Block
	switch {
	case t.Done != nil && t.Done.Blocks != nil:
		blocks = t.Done.Blocks
	case t.Done != nil:
		blocks = []call.Block{{Type: call.BlockText, Text: t.Done.Text}}
	case t.Error.Text != nil:
		blocks = []call.Block{{Type: call.BlockText, Text: *t.Error.Text}}
	}
	var items []json.RawMessage
	for _, b := range blocks {
		n := strconv.Itoa(len(items))
		var item any
		switch b.Type {
		case call.BlockReasoning:
			if b.Text == "" && b.Signature == "" {
				continue
			}
			r := reasoningItem{ID: "rs_" + e.requestID + "_" + n, Type: "reasoning", Summary: []summaryPart{}}
			if b.Text != "" {
				r.Summary = append(r.Summary, summaryPart{Type: "summary_text", Text: b.Text})
			}
			if e.c.keys != nil && b.Signature != "" {
				r.EncryptedContent = e.c.keys.seal(b.Text, b.Signature)
			}
			item = r
		case call.BlockToolUse:
			args := string(b.Input)
			if strings.TrimSpace(args) == "" {
				args = "{}"
			}
			item = functionCall{ID: "fc_" + e.requestID + "_" + n, Type: "function_call", Status: status, CallID: b.ID, Name: b.Name, Arguments: &args}
		default:
			if b.Text == "" {
				continue
			}
			item = message{ID: "msg_" + e.requestID + "_" + n, Type: "message", Status: status, Role: "assistant",
				Content: []outputText{{Type: "output_text", Text: b.Text, Annotations: []any{}, Logprobs: []any{}}}}
		}
		j, _ := json.Marshal(item)
		items = append(items, j)
	}
	return items
}

// object is the response object as the log knows it.
func (e *encoder) object(status string, u *call.Usage, incomplete *incompleteDetails, failure *responseError) response {
	r := response{ID: ResponseID(e.requestID), Object: "response", CreatedAt: e.created, Status: status, Model: e.model,
		Output: e.items, ServiceTier: e.tier, Error: failure, IncompleteDetails: incomplete}
	if r.Output == nil {
		r.Output = []json.RawMessage{}
	}
	if u != nil {
		r.Usage = usageOf(*u, e.reasoningChars())
	}
	return r
}

// reasoningChars is the length of the answer's reasoning summaries.
func (e *encoder) reasoningChars() int {
	n := 0
	for _, it := range e.items {
		var r reasoningItem
		if json.Unmarshal(it, &r) == nil && r.Type == "reasoning" {
			for _, s := range r.Summary {
				n += len(s.Text)
			}
		}
	}
	return n
}

// response is the Responses API's response object as the log knows it:
// the answer. What echoes the request (store, background, instructions,
// previous_response_id, metadata, tools, ...) is not in the log, so the
// events leave it out rather than say something false; whole answers add
// it (decorate).
type response struct {
	ID                string             `json:"id"`
	Object            string             `json:"object"`
	CreatedAt         int64              `json:"created_at"`
	Status            string             `json:"status"`
	Error             *responseError     `json:"error"`
	IncompleteDetails *incompleteDetails `json:"incomplete_details"`
	Model             string             `json:"model"`
	Output            []json.RawMessage  `json:"output"`
	Usage             *usage             `json:"usage"`
	// ServiceTier is the tier that served, known at the end and only when
	// the model call named one.
	ServiceTier string `json:"service_tier,omitempty"`
}

type responseError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

type incompleteDetails struct {
	Reason string `json:"reason"`
}

type usage struct {
	InputTokens        int64 `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens        int64 `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int64 `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int64 `json:"total_tokens"`
}

// usageOf is OpenAI's usage: input_tokens counts every input token
// (cached or not); cached_tokens those read from the prompt cache.
// Bedrock does not report reasoning tokens apart, so reasoning_tokens is
// the reasoning's length at four characters a token, at most the output's.
func usageOf(u call.Usage, reasoningChars int) *usage {
	out := &usage{InputTokens: u.AllInput(), OutputTokens: u.OutputTokens, TotalTokens: u.Total()}
	out.InputTokensDetails.CachedTokens = u.CacheReadInputTokens
	out.OutputTokensDetails.ReasoningTokens = min(int64((reasoningChars+3)/4), u.OutputTokens)
	return out
}

type message struct {
	ID      string       `json:"id"`
	Type    string       `json:"type"`
	Status  string       `json:"status"`
	Role    string       `json:"role"`
	Content []outputText `json:"content"`
}

type outputText struct {
	Type        string `json:"type"`
	Text        string `json:"text"`
	Annotations []any  `json:"annotations"`
	Logprobs    []any  `json:"logprobs"`
}

type functionCall struct {
	ID        string  `json:"id"`
	Type      string  `json:"type"`
	Status    string  `json:"status"`
	CallID    string  `json:"call_id"`
	Name      string  `json:"name"`
	Arguments *string `json:"arguments"`
}

func (f functionCall) MarshalJSON() ([]byte, error) {
	type plain functionCall
	if f.Arguments == nil {
		empty := ""
		f.Arguments = &empty
	}
	return json.Marshal(plain(f))
}

type reasoningItem struct {
	ID               string        `json:"id"`
	Type             string        `json:"type"`
	Summary          []summaryPart `json:"summary"`
	EncryptedContent string        `json:"encrypted_content,omitempty"`
}

type summaryPart struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

func appendField(dst []byte, name string, v any) []byte {
	b, _ := json.Marshal(v)
	dst = append(dst, `,"`...)
	dst = append(dst, name...)
	dst = append(dst, `":`...)
	return append(dst, b...)
}

// appendString appends v as JSON (json.Marshal's bytes, without its
// allocation per chunk).
func appendString(dst []byte, v string) []byte { return call.AppendJSONString(dst, v) }
