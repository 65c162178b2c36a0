package openai

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/jetway-gateway/jetway/internal/protocol"
	"github.com/jetway-gateway/jetway/internal/stream"
)

// responder follows one request's stream log and writes it in OpenAI's shapes.
type responder struct {
	h            *Handler
	w            http.ResponseWriter
	rc           *http.ResponseController
	logger       *zap.Logger
	requestID    string
	created      int64
	includeUsage bool
	origin       fieldMap // the request's OpenAI parameters, for refusals that name a field

	model     string      // the accepted frame's model
	prefix    []byte      // a chunk event's JSON up to the delta object
	toolIndex map[int]int // the answer's block index -> its tool call's index in tool_calls
}

// toolCall is the index in delta.tool_calls of the tool call in answer
// block `block`: tool calls are numbered 0, 1, ... in the order they start.
func (s *responder) toolCall(block int) int {
	i, ok := s.toolIndex[block]
	if !ok {
		if s.toolIndex == nil {
			s.toolIndex = map[int]int{}
		}
		i = len(s.toolIndex)
		s.toolIndex[block] = i
	}
	return i
}

func decodeTerminal(frame []byte) (done *protocol.Done, perr *protocol.Error) {
	var t struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(frame, &t)
	if t.Type == protocol.TypeDone {
		var d protocol.Done
		if json.Unmarshal(frame, &d) == nil {
			return &d, nil
		}
	}
	var e protocol.Error
	if json.Unmarshal(frame, &e) != nil || e.Code == "" {
		e = protocol.Error{Code: protocol.CodeInternal, Status: 500, Message: "internal error"}
	}
	return nil, &e
}

// stream writes the log after seq `from` as Server-Sent Events: one event
// per chunk with `id: <seq>`, then the finish (and usage) event or one
// error event, then `data: [DONE]`. The 200 and its headers go out with the
// first chunk, so a request that fails before any text (and was not
// resumed mid-answer) gets a plain HTTP error with its status.
func (s *responder) stream(ctx context.Context, log *stream.Log, from int) {
	cursor, started := from, from > 0
	if started {
		// A resumed stream numbers its tool calls as the first stream did.
		pieces := log.Pieces()
		for _, p := range pieces[:min(from, len(pieces))] {
			if c := protocol.DecodePiece(p); c.Kind == protocol.KindToolUse {
				s.toolCall(c.Block)
			}
		}
	}
	var buf []byte
	for {
		snap := log.Read(cursor)
		if s.model == "" && snap.Accepted != nil {
			s.accepted(snap.Accepted)
		}
		if !s.headersSent() {
			if !started && len(snap.Chunks) == 0 && snap.Terminal != nil {
				if _, perr := decodeTerminal(snap.Terminal); perr != nil {
					s.h.refuse(s.w, s.requestID, fromProtocol(*perr, false).named(s.origin)) // nothing streamed: a plain HTTP error
					return
				}
			}
			if started && snap.Accepted != nil || len(snap.Chunks) > 0 || snap.Terminal != nil {
				s.startSSE()
			}
		}
		buf = buf[:0]
		for i, piece := range snap.Chunks {
			buf = s.appendChunk(buf, snap.First+i, protocol.DecodePiece(piece))
		}
		cursor += len(snap.Chunks)
		if snap.Terminal != nil {
			buf = s.appendTerminal(buf, snap.Terminal, cursor)
			s.write(buf)
			return
		}
		if len(buf) > 0 && !s.write(buf) {
			return
		}
		select {
		case <-snap.Changed:
		case <-ctx.Done():
			s.logger.Info("client_gone", zap.Int("after_seq", cursor), zap.String("hint", "the answer continues: resume with Idempotency-Key and Last-Event-ID"))
			return
		}
	}
}

// whole waits for the terminal and writes one chat.completion body (or the error).
func (s *responder) whole(ctx context.Context, log *stream.Log) {
	cursor := 0
	for {
		snap := log.Read(cursor)
		cursor += len(snap.Chunks)
		if snap.Accepted != nil && s.model == "" {
			s.accepted(snap.Accepted)
		}
		if snap.Terminal != nil {
			done, perr := decodeTerminal(snap.Terminal)
			_ = s.rc.SetWriteDeadline(time.Now().Add(s.h.opts.WriteTimeout))
			if perr != nil {
				partial := perr.Chunks != nil && *perr.Chunks > 0
				s.h.refuse(s.w, s.requestID, fromProtocol(*perr, partial).named(s.origin))
				return
			}
			type function struct {
				Name      string `json:"name"`
				Arguments string `json:"arguments"`
			}
			type toolCall struct {
				ID       string   `json:"id"`
				Type     string   `json:"type"`
				Function function `json:"function"`
			}
			type message struct {
				Role      string     `json:"role"`
				Content   *string    `json:"content"`
				Refusal   *string    `json:"refusal"`
				ToolCalls []toolCall `json:"tool_calls,omitempty"`
			}
			msg := message{Role: "assistant", Content: &done.Text}
			for _, b := range done.ToolCalls() {
				msg.ToolCalls = append(msg.ToolCalls, toolCall{ID: b.ID, Type: "function", Function: function{Name: b.Name, Arguments: string(b.Input)}})
			}
			if done.Text == "" && len(msg.ToolCalls) > 0 {
				msg.Content = nil // OpenAI's content of a message that only calls tools
			}
			type choice struct {
				Index        int       `json:"index"`
				Message      message   `json:"message"`
				FinishReason string    `json:"finish_reason"`
				Logprobs     *struct{} `json:"logprobs"`
			}
			writeJSON(s.w, http.StatusOK, struct {
				ID      string   `json:"id"`
				Object  string   `json:"object"`
				Created int64    `json:"created"`
				Model   string   `json:"model"`
				Choices []choice `json:"choices"`
				Usage   usage    `json:"usage"`
			}{ID: "chatcmpl-" + s.requestID, Object: "chat.completion", Created: s.created, Model: done.Model,
				Choices: []choice{{Message: msg, FinishReason: finishReason(done.StopReason)}},
				Usage:   usageOf(done.Usage)})
			return
		}
		select {
		case <-snap.Changed:
		case <-ctx.Done():
			s.logger.Info("client_gone", zap.String("hint", "the answer continues: send the request again with the same Idempotency-Key"))
			return
		}
	}
}

func (s *responder) accepted(frame []byte) {
	var a protocol.Accepted
	_ = json.Unmarshal(frame, &a)
	s.model = a.Model
}

func (s *responder) headersSent() bool { return s.prefix != nil }

func (s *responder) startSSE() {
	if s.headersSent() {
		return
	}
	h := s.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	s.w.WriteHeader(http.StatusOK)
	s.prefix = s.appendHead(nil, s.model)
}

// appendHead appends a chunk object's opening: id, object, created, model, choices[0].
func (s *responder) appendHead(dst []byte, model string) []byte {
	dst = append(dst, `{"id":"chatcmpl-`...)
	dst = append(dst, s.requestID...) // [A-Za-z0-9_-]: nothing to escape
	dst = append(dst, `","object":"chat.completion.chunk","created":`...)
	dst = strconv.AppendInt(dst, s.created, 10)
	dst = append(dst, `,"model":`...)
	m, _ := json.Marshal(model)
	dst = append(dst, m...)
	return append(dst, `,"choices":[{"index":0,"delta":`...)
}

// appendChunk appends one chunk event. The first chunk also carries the
// role. A text piece is delta.content; a tool call's first piece is a
// delta.tool_calls entry with its id, type and name, its input fragments
// entries with function.arguments; a reasoning piece, which OpenAI's chat
// API has no field for, is an event with an empty delta, so every seq
// still has its event (a client counting events knows its Last-Event-ID).
func (s *responder) appendChunk(dst []byte, seq int, c protocol.Chunk) []byte {
	dst = append(dst, "id: "...)
	dst = strconv.AppendInt(dst, int64(seq), 10)
	dst = append(dst, "\ndata: "...)
	dst = append(dst, s.prefix...)
	dst = append(dst, '{')
	if seq == 1 {
		dst = append(dst, `"role":"assistant"`...)
	}
	switch c.Kind {
	case protocol.KindReasoning:
	case protocol.KindToolUse:
		if seq == 1 {
			dst = append(dst, ',')
		}
		dst = append(dst, `"tool_calls":[{"index":`...)
		dst = strconv.AppendInt(dst, int64(s.toolCall(c.Block)), 10)
		if c.ID != "" || c.Name != "" {
			dst = append(dst, `,"id":`...)
			dst = appendString(dst, c.ID)
			dst = append(dst, `,"type":"function","function":{"name":`...)
			dst = appendString(dst, c.Name)
			dst = append(dst, ',')
		} else {
			dst = append(dst, `,"function":{`...)
		}
		dst = append(dst, `"arguments":`...)
		dst = appendString(dst, c.Input)
		dst = append(dst, "}}]"...)
	default:
		if seq == 1 {
			dst = append(dst, ',')
		}
		dst = append(dst, `"content":`...)
		dst = appendString(dst, c.Text)
	}
	return append(dst, "},\"finish_reason\":null}]}\n\n"...)
}

func appendString(dst []byte, v string) []byte {
	b, _ := json.Marshal(v)
	return append(dst, b...)
}

// appendTerminal appends the finish event (and the usage event when asked
// for) or one error event carrying what was streamed, then [DONE]. Both
// carry the answer's last seq as their id: last, the cursor, or fewer when
// the terminal says the answer has fewer chunks (a Last-Event-ID past the
// end is never echoed back).
func (s *responder) appendTerminal(dst []byte, frame []byte, last int) []byte {
	done, perr := decodeTerminal(frame)
	switch {
	case done != nil:
		last = min(last, done.Chunks)
	case perr.Chunks != nil:
		last = min(last, *perr.Chunks)
	}
	id := "id: " + strconv.Itoa(last) + "\ndata: "
	if perr != nil {
		s.logger.Info("stream_error", zap.String("code", perr.Code), zap.Int("chunks", last))
		b, _ := json.Marshal(fromProtocol(*perr, true).body(s.requestID))
		dst = append(dst, id...)
		dst = append(dst, b...)
		return append(dst, "\n\ndata: [DONE]\n\n"...)
	}
	dst = append(dst, id...)
	dst = s.appendHead(dst, done.Model)
	dst = append(dst, `{},"finish_reason":`...)
	fr, _ := json.Marshal(finishReason(done.StopReason))
	dst = append(dst, fr...)
	dst = append(dst, "}]}\n\n"...)
	if s.includeUsage {
		u, _ := json.Marshal(usageOf(done.Usage))
		dst = append(dst, id...)
		head := s.appendHead(nil, done.Model)
		dst = append(dst, head[:len(head)-len(`{"index":0,"delta":`)]...) // `...,"choices":[`
		dst = append(dst, `],"usage":`...)
		dst = append(dst, u...)
		dst = append(dst, "}\n\n"...)
	}
	return append(dst, "data: [DONE]\n\n"...)
}

// write sends bytes within the write timeout; a client that does not take
// them is cut, as a slow WebSocket consumer is. It reports success.
func (s *responder) write(b []byte) bool {
	_ = s.rc.SetWriteDeadline(time.Now().Add(s.h.opts.WriteTimeout))
	_, err := s.w.Write(b)
	if err == nil {
		err = s.rc.Flush()
	}
	if err == nil {
		return true
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		s.logger.Warn("slow_consumer", zap.Duration("write_timeout", s.h.opts.WriteTimeout))
		s.h.metrics.SlowConsumerClosed()
	} else {
		s.logger.Info("client_gone", zap.Error(err))
	}
	return false
}

type usage struct {
	PromptTokens        int64          `json:"prompt_tokens"`
	CompletionTokens    int64          `json:"completion_tokens"`
	TotalTokens         int64          `json:"total_tokens"`
	PromptTokensDetails *promptDetails `json:"prompt_tokens_details,omitempty"`
}

// promptDetails is OpenAI's breakdown of prompt_tokens: cached_tokens
// were read from the prompt cache.
type promptDetails struct {
	CachedTokens int64 `json:"cached_tokens"`
}

// usageOf is OpenAI's usage: prompt_tokens counts every input token
// (cached or not, as OpenAI's does); prompt_tokens_details.cached_tokens,
// present when the model used its prompt cache, those read from it.
func usageOf(u protocol.Usage) usage {
	out := usage{PromptTokens: u.AllInput(), CompletionTokens: u.OutputTokens, TotalTokens: u.Total()}
	if u.CacheReadInputTokens > 0 || u.CacheWriteInputTokens > 0 {
		out.PromptTokensDetails = &promptDetails{CachedTokens: u.CacheReadInputTokens}
	}
	return out
}

// finishReason maps Bedrock's stop reason to OpenAI's.
func finishReason(stop string) string {
	switch stop {
	case "max_tokens":
		return "length"
	case "guardrail_intervened", "content_filtered":
		return "content_filter"
	case protocol.StopToolUse:
		return "tool_calls"
	default:
		return "stop"
	}
}
