package anthropic

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"time"

	"go.uber.org/zap"

	"github.com/jetway-gateway/jetway/internal/protocol"
	"github.com/jetway-gateway/jetway/internal/stream"
)

// responder follows one request's stream log and writes it in Anthropic's shapes.
type responder struct {
	h         *Handler
	w         http.ResponseWriter
	rc        *http.ResponseController
	logger    *zap.Logger
	requestID string
	names     names // the request's Anthropic names, for refusals that name a field
	started   bool  // the 200 and its headers went out
}

// stream writes the log after seq `from` as Server-Sent Events (encoder).
// The 200 goes out with the first chunk, so a request that fails before
// any text (and was not resumed mid-answer) gets a plain HTTP error with
// its status. A resumed stream is the original's events after the group
// of seq `from`: the encoder is first given the events up to it.
func (s *responder) stream(ctx context.Context, log *stream.Log, from int) {
	enc := newEncoder(s.requestID)
	cursor, accepted := 0, false
	var head, buf []byte // head: message_start, sent with the 200
	for {
		snap := log.Read(cursor)
		if !accepted && snap.Accepted != nil {
			accepted = true
			var a protocol.Accepted
			_ = json.Unmarshal(snap.Accepted, &a)
			if head = enc.Accepted(&a); from > 0 {
				head = nil // a resumed stream continues after the group of seq from
			}
		}
		var t *terminal
		if snap.Terminal != nil {
			t = terminalOf(snap.Terminal)
		}
		// The encoder sees every chunk from seq 1; what the client already
		// has (seq <= from) is not sent again.
		buf = buf[:0]
		for i, piece := range snap.Chunks {
			if ev := enc.Chunk(snap.First+i, piece); snap.First+i > from {
				buf = append(buf, ev...)
			}
		}
		cursor += len(snap.Chunks)
		if !s.started {
			if (from == 0 || !accepted) && len(buf) == 0 && t != nil && t.Error != nil {
				s.h.refuse(s.w, s.requestID, s.names.rename(fromProtocol(*t.Error))) // nothing streamed: a plain HTTP error
				return
			}
			if from > 0 && accepted || len(buf) > 0 || t != nil {
				s.startSSE()
				buf = append(head, buf...)
			}
		}
		if t != nil {
			if t.Error != nil {
				s.logger.Info("stream_error", zap.String("code", t.Error.Code), zap.Int("chunks", cursor))
			}
			s.write(append(buf, enc.Terminal(t, cursor)...))
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

// whole waits for the terminal and writes one message body (or the error).
func (s *responder) whole(ctx context.Context, log *stream.Log) {
	for {
		snap := log.Read(0)
		if snap.Terminal != nil {
			t := terminalOf(snap.Terminal)
			_ = s.rc.SetWriteDeadline(time.Now().Add(s.h.opts.WriteTimeout))
			if t.Error != nil {
				s.h.refuse(s.w, s.requestID, s.names.rename(fromProtocol(*t.Error)))
				return
			}
			d := t.Done
			writeJSON(s.w, http.StatusOK, struct {
				ID           string  `json:"id"`
				Type         string  `json:"type"`
				Role         string  `json:"role"`
				Model        string  `json:"model"`
				Content      []any   `json:"content"`
				StopReason   string  `json:"stop_reason"`
				StopSequence *string `json:"stop_sequence"`
				Usage        usage   `json:"usage"`
			}{ID: "msg_" + s.requestID, Type: "message", Role: "assistant", Model: d.Model, Content: content(d),
				StopReason: stopReason(d.StopReason), Usage: usageOf(d.Usage)})
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

func (s *responder) startSSE() {
	h := s.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	s.w.WriteHeader(http.StatusOK)
	_ = s.rc.Flush()
	s.started = true
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
