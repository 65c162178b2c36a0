package anthropic

import (
	"context"
	"net/http"

	"go.uber.org/zap"

	"github.com/jetway-gateway/jetway/internal/door"
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
	sse       door.SSE
}

// stream writes the log after seq `from` as Server-Sent Events (events).
// The 200 goes out with the first chunk, so a request that fails before
// any text (and was not resumed mid-answer) gets a plain HTTP error with
// its status; message_start waits for it. A resumed stream is the
// original's bytes after the group of seq `from`.
func (s *responder) stream(ctx context.Context, log *stream.Log, from int) {
	var head []byte // message_start and ping, sent with the 200
	accepted := false
	s.sse = door.SSE{W: s.w, RC: s.rc, Timeout: s.h.opts.WriteTimeout, Logger: s.logger, Metrics: s.h.metrics}
	for b := range log.Follow(ctx, events{}, from) {
		if b.Accepted != nil {
			accepted = true
			if from == 0 {
				head = b.AcceptedBytes
			}
		}
		if !s.sse.Started {
			if (from == 0 || !accepted) && len(b.Pieces) == 0 && b.Terminal != nil && b.Terminal.Error != nil {
				s.h.refuse(s.w, s.requestID, s.names.rename(fromProtocol(protocol.ErrorFrame(b.Terminal.Error)))) // nothing streamed: a plain HTTP error
				return
			}
			if from > 0 && b.Accepted != nil || len(b.Pieces) > 0 || b.Terminal != nil {
				s.sse.Start()
			}
		}
		if !s.sse.Started {
			continue
		}
		if b.Terminal != nil && b.Terminal.Error != nil {
			s.logger.Info("stream_error", zap.String("code", b.Terminal.Error.Code), zap.Int("chunks", b.Last()))
		}
		if !s.sse.Write(head, &b) {
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
	door.WriteWhole(ctx, log, wholeMessage{}, s.w, s.rc, s.h.opts.WriteTimeout, s.logger, func(e *protocol.Error) {
		s.h.refuse(s.w, s.requestID, s.names.rename(fromProtocol(*e)))
	})
}
