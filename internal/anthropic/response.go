package anthropic

import (
	"context"
	"errors"
	"net/http"
	"os"
	"time"

	"go.uber.org/zap"

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

// stream writes the log after seq `from` as Server-Sent Events (events).
// The 200 goes out with the first chunk, so a request that fails before
// any text (and was not resumed mid-answer) gets a plain HTTP error with
// its status; message_start waits for it. A resumed stream is the
// original's bytes after the group of seq `from`.
func (s *responder) stream(ctx context.Context, log *stream.Log, from int) {
	var head []byte // message_start and ping, sent with the 200
	accepted := false
	for b := range log.Follow(ctx, events{}, from) {
		if b.Accepted != nil {
			accepted = true
			if from == 0 {
				head = b.AcceptedBytes
			}
		}
		if !s.started {
			if (from == 0 || !accepted) && len(b.Pieces) == 0 && b.Terminal != nil && b.Terminal.Error != nil {
				s.h.refuse(s.w, s.requestID, s.names.rename(fromProtocol(*b.Terminal.Error))) // nothing streamed: a plain HTTP error
				return
			}
			if from > 0 && b.Accepted != nil || len(b.Pieces) > 0 || b.Terminal != nil {
				s.startSSE()
			}
		}
		if !s.started {
			continue
		}
		if b.Terminal != nil && b.Terminal.Error != nil {
			s.logger.Info("stream_error", zap.String("code", b.Terminal.Error.Code), zap.Int("chunks", b.Last()))
		}
		if !s.write(head, &b) {
			return
		}
		head = nil
	}
	if ctx.Err() != nil {
		s.logger.Info("client_gone", zap.String("hint", "the answer continues: resume with Idempotency-Key and Last-Event-ID"))
	}
}

// whole waits for the terminal and writes one message body (wholeMessage), or
// the error.
func (s *responder) whole(ctx context.Context, log *stream.Log) {
	for b := range log.Follow(ctx, wholeMessage{}, 0) {
		if b.Terminal == nil {
			continue
		}
		_ = s.rc.SetWriteDeadline(time.Now().Add(s.h.opts.WriteTimeout))
		if e := b.Terminal.Error; e != nil {
			s.h.refuse(s.w, s.requestID, s.names.rename(fromProtocol(*e)))
			return
		}
		h := s.w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("Cache-Control", "no-store")
		s.w.WriteHeader(http.StatusOK)
		_, _ = s.w.Write(b.TerminalBytes)
		return
	}
	s.logger.Info("client_gone", zap.String("hint", "the answer continues: send the request again with the same Idempotency-Key"))
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

// write sends prepared events within the write timeout; a client that
// does not take them is cut, as a slow WebSocket consumer is. It reports
// success.
func (s *responder) write(head []byte, b *stream.Batch) bool {
	if head == nil && len(b.Pieces) == 0 && b.TerminalBytes == nil {
		return true
	}
	_ = s.rc.SetWriteDeadline(time.Now().Add(s.h.opts.WriteTimeout))
	_, err := s.w.Write(head)
	for i := range b.Chunks.Len() {
		if err != nil {
			break
		}
		_, err = s.w.Write(b.Chunks.At(i))
	}
	if err == nil && b.TerminalBytes != nil {
		_, err = s.w.Write(b.TerminalBytes)
	}
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
