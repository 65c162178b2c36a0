package session

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/gorilla/websocket"
	"go.uber.org/zap"

	"github.com/jetway-gateway/jetway/internal/auth"
	"github.com/jetway-gateway/jetway/internal/call"
	"github.com/jetway-gateway/jetway/internal/gateway"
	"github.com/jetway-gateway/jetway/internal/protocol"
	"github.com/jetway-gateway/jetway/internal/stream"
	"github.com/jetway-gateway/jetway/internal/telemetry"
	"github.com/jetway-gateway/jetway/internal/tracing"
)

// Session is one WebSocket connection: one chat session of one user.
type Session struct {
	hub    *Hub
	conn   *websocket.Conn
	out    *batchConn // conn's network connection (nil if the upgrade did not go through Hub.ServeHTTP)
	id     string
	logger sessionLogger
	queue  *sendQueue
	share  *userShare // the user's share of the attachment budget

	ctx    context.Context // ends with the connection
	cancel context.CancelFunc

	mu        sync.Mutex
	principal auth.Principal
	expiry    *time.Timer
	pinger    *time.Timer // sends a WebSocket ping every heartbeat
	draining  bool
	moved     bool               // asked to move to another server (guarded by hub.mu, not mu)
	activeAt  time.Time          // when a request was last delivered, or the session opened
	openedAt  time.Time          // when the session opened
	heardAt   time.Time          // when the client's last frame began to arrive (or the session opened)
	follows   map[string]*follow // request id -> the follower delivering it
	pending   int                // requests and resumes read and not yet followed or refused (see admitting)
	closing   bool
	slow      bool          // closed as a slow consumer
	idle      chan struct{} // closed when draining and no follower is left
}

// sessionLogger adds the session's identity to each line when it is
// written, instead of keeping a pre-encoded child logger per idle session.
type sessionLogger struct {
	l                     *zap.Logger
	id, user, tenant, app string
}

func (l sessionLogger) with(fields []zap.Field) []zap.Field {
	return append([]zap.Field{zap.String("session_id", l.id), zap.String("user", l.user),
		zap.String("tenant", l.tenant), zap.String("app", l.app)}, fields...)
}

func (l sessionLogger) Debug(msg string, f ...zap.Field) { l.l.Debug(msg, l.with(f)...) }
func (l sessionLogger) Info(msg string, f ...zap.Field)  { l.l.Info(msg, l.with(f)...) }
func (l sessionLogger) Warn(msg string, f ...zap.Field)  { l.l.Warn(msg, l.with(f)...) }
func (l sessionLogger) Error(msg string, f ...zap.Field) { l.l.Error(msg, l.with(f)...) }

// follow is one delivery of a request's log on this session.
type follow struct {
	log          *stream.Log
	from         int  // the seq it delivers after
	withAccepted bool // it sends the accepted frame (a request, not a resume)
	cancel       context.CancelFunc
	done         chan struct{} // closed when the delivery has returned
	// acceptedOut is set (under the session's mu) before the accepted
	// frame goes to the queue: from then on a re-send needs a delivery of
	// its own.
	acceptedOut bool
}

func newSession(h *Hub, conn *websocket.Conn, p auth.Principal, id string, share *userShare) *Session {
	ctx, cancel := context.WithCancel(context.Background())
	out, _ := conn.NetConn().(*batchConn)
	s := &Session{
		hub: h, conn: conn, out: out, id: id, principal: p, ctx: ctx, cancel: cancel, share: share,
		logger:  sessionLogger{h.logger, id, p.Subject, p.Tenant, p.App},
		follows: map[string]*follow{},
	}
	s.activeAt = h.opts.Now()
	s.openedAt, s.heardAt = s.activeAt, s.activeAt
	s.queue = newSendQueue(h.opts.SendQueueFrames, h.opts.SendQueueBytes, s.writeLoop)
	return s
}

func (s *Session) caller() gateway.Caller {
	s.mu.Lock()
	defer s.mu.Unlock()
	return gateway.Caller{Principal: s.principal, SessionID: s.id}
}

// run sends ready, then reads until the connection ends.
func (s *Session) run() {
	defer s.cancel()
	defer func() {
		// A bug must not leave a socket open and silent: close it with 1011
		// so the client reconnects and resumes.
		if v := recover(); v != nil {
			s.logger.Error("session_panic", zap.Any("panic", v), zap.Stack("stack"))
			s.closeNow(protocol.DisconnectInternal)
		}
	}()
	opts := s.hub.opts
	s.logger.Info("session_opened")
	s.mu.Lock()
	p := s.principal
	s.expiry = time.AfterFunc(time.Until(p.ExpiresAt), s.expired)
	s.pinger = time.AfterFunc(opts.Heartbeat, s.ping)
	s.mu.Unlock()
	s.send(protocol.Encode(protocol.Ready{Type: protocol.TypeReady, SessionID: s.id, User: p.Subject,
		Tenant: p.Tenant, App: p.App, Protocol: protocol.Subprotocol, HeartbeatS: int(opts.Heartbeat / time.Second),
		ExpiresAt: protocol.Timestamp(p.ExpiresAt)}))

	s.readLoop()

	s.mu.Lock()
	s.expiry.Stop()
	s.pinger.Stop()
	for _, f := range s.follows {
		f.cancel()
	}
	s.mu.Unlock()
	s.cancel()
	s.queue.shutAndWait()
	_ = s.conn.Close()
	s.logger.Info("session_closed")
}

// readLoop handles inbound frames until the connection fails or closes.
// Between frames the read deadline is the heartbeat's, moved on by every
// pong; from a frame's first byte it is also at most FrameReadTimeout
// away, which pongs do not move: a frame that takes longer closes the
// socket (DisconnectFrameTimeout) and gives its bytes back.
func (s *Session) readLoop() {
	opts := s.hub.opts
	var frameDue time.Time // while a frame is read: when it must have arrived whole
	deadline := func() time.Time {
		d := time.Now().Add(2*opts.Heartbeat + opts.Heartbeat/2)
		if !frameDue.IsZero() && frameDue.Before(d) {
			return frameDue
		}
		return d
	}
	// The frame reader enforces the bounds itself (see frames.go), so it
	// can tell which bound a frame passed.
	s.conn.SetReadLimit(0)
	_ = s.conn.SetReadDeadline(deadline())
	// Called on this goroutine, from inside the reads below.
	s.conn.SetPongHandler(func(string) error { return s.conn.SetReadDeadline(deadline()) })
	// From a frame's first byte to its handling the frame is pending (see
	// admitting): a move decided meanwhile does not take the session, so
	// the frame is answered here, never cut off by the move's close.
	reading := false
	defer func() {
		if reading {
			s.admitting(false)
		}
	}()
	for {
		if reading {
			reading = false
			s.admitting(false)
		}
		mt, r, err := s.conn.NextReader()
		if err != nil {
			s.readFailed(err, false)
			return
		}
		s.heard()
		reading = true
		frameDue = time.Now().Add(opts.FrameReadTimeout)
		_ = s.conn.SetReadDeadline(deadline())
		data, held, err := s.hub.frames.read(r, s.share)
		late := !time.Now().Before(frameDue)
		frameDue = time.Time{}
		var spent *budgetSpentError
		switch {
		case errors.As(err, &spent):
			// Nothing was admitted and the socket stays open: the client
			// sends the request again, here or elsewhere (busy), or once
			// its other large frames are through (rate_limited).
			s.logger.Info("attachment_budget_spent", zap.Int64("frame_bytes_read", spent.Size),
				zap.Bool("user_share", spent.By == userSpent), zap.Int64("budget", opts.AttachmentBytesInFlight),
				zap.Int64("user_share_bytes", opts.AttachmentBytesPerUser))
			s.hub.metrics.AttachmentFrameRefused()
			var refusal error
			if spent.By == userSpent {
				refusal = call.Errorf(gateway.ErrRateLimited, "this user's frames with attachments hold their share of %d bytes of this server's budget: send when one is through",
					opts.AttachmentBytesPerUser)
			} else {
				refusal = s.moveIfBusy(fmt.Errorf("%w: attachment frames at this server's budget of %d bytes", gateway.ErrAtCapacity, opts.AttachmentBytesInFlight))
			}
			s.sendError(protocol.PeekRequestID(spent.First), gateway.Failure(refusal))
			_ = s.conn.SetReadDeadline(deadline())
			continue
		case errors.Is(err, errFrameTooBig):
			s.logger.Info("frame_too_big", zap.Int64("limit", s.hub.frames.largest))
			s.closeNow(protocol.DisconnectFrameTooBig)
			return
		case err != nil:
			s.readFailed(err, late)
			return
		}
		_ = s.conn.SetReadDeadline(deadline())
		if !s.handleFrame(mt, data, opts.Now(), held) {
			return
		}
	}
}

// handleFrame decodes and handles one frame; false when it closed the
// session. held is what the frame took of the attachment budget: given
// back once the frame is handled, except its decoded attachments' share,
// which a request holds until its model call ends (Request.Release), so
// the budget bounds the attachments of model calls too.
func (s *Session) handleFrame(mt int, data []byte, received time.Time, held int64) bool {
	keep := int64(0)
	defer func() { s.hub.frames.give(s.share, held-keep) }()
	plain := s.hub.opts.MaxFrameBytes
	size := int64(len(data))
	if mt != websocket.TextMessage {
		if size > plain {
			s.logger.Info("frame_too_big", zap.Int64("size", size), zap.Int64("limit", plain))
			s.closeNow(protocol.DisconnectNoAttachments)
			return false
		}
		s.refuse(gateway.Request{ReceivedAt: received}, call.Errorf(call.ErrInvalid, "frames must be JSON text frames"))
		return true
	}
	if !utf8.Valid(data) {
		s.logger.Info("invalid_utf8")
		s.closeNow(protocol.DisconnectInvalidData)
		return false
	}
	in, err := protocol.Decode(data)
	req := frameRequest(in, received) // translated once: its features, its refusal or the request
	f := req.Features()
	if size > plain && (!req.IsRequest || f.Images+f.Documents == 0) {
		// Only a request's image or document may make a frame larger than
		// the plain bound; otherwise it is refused as every oversized frame is.
		s.logger.Info("frame_too_big", zap.Int64("size", size), zap.Int64("limit", plain))
		s.closeNow(protocol.DisconnectNoAttachments)
		return false
	}
	if err != nil {
		s.refuse(req, err)
		return true
	}
	if req.IsRequest {
		if keep = min(held, f.AttachmentBytes); keep > 0 {
			req.Release = sync.OnceFunc(func() { s.hub.frames.give(s.share, keep) })
		}
	}
	s.handle(in, req)
	return true
}

// refuse answers a frame that failed validation, through the gateway's
// refusal path (a `rejected` line, the user's refusal budget, and for a
// request its usage record); the socket stays open.
func (s *Session) refuse(req gateway.Request, err error) {
	err = s.hub.gw.Refuse(s.ctx, s.caller(), req, err)
	s.sendError(req.RequestID, gateway.Failure(err))
}

// readFailed ends a read that failed; frameLate: a frame was being read
// past its FrameReadTimeout.
func (s *Session) readFailed(err error, frameLate bool) {
	var ce *websocket.CloseError
	switch {
	case errors.As(err, &ce):
		s.logger.Info("client_closed", zap.Int("code", ce.Code))
	default:
		var ne interface{ Timeout() bool }
		if errors.As(err, &ne) && ne.Timeout() && !s.isClosing() {
			if frameLate {
				s.logger.Info("frame_read_timeout", zap.Duration("timeout", s.hub.opts.FrameReadTimeout))
				s.closeNow(protocol.DisconnectFrameTimeout)
				return
			}
			s.logger.Info("heartbeat_timeout")
			s.closeNow(protocol.DisconnectHeartbeat)
			return
		}
		s.logger.Debug("read_ended", zap.Error(err))
	}
}

// handle handles a decoded frame; req is its translation, for a request
// (whose Release, when set, is called here if it goes no further).
func (s *Session) handle(in protocol.Inbound, req gateway.Request) {
	switch in.Type {
	case protocol.TypePing:
		s.send(protocol.Encode(protocol.Pong{Type: protocol.TypePong, T: in.T}))
	case protocol.TypeAuth:
		s.refresh(in.Token)
	case protocol.TypeCancel:
		if err := s.hub.gw.Cancel(s.ctx, s.caller(), in.RequestID); err != nil {
			s.sendError(in.RequestID, gateway.Failure(err))
		}
	case protocol.TypeResume:
		s.admitting(true)
		defer s.admitting(false)
		log, err := s.hub.gw.Resume(s.ctx, s.caller(), in.RequestID)
		if err != nil {
			s.sendError(in.RequestID, gateway.Failure(err))
			return
		}
		s.follow(log, in.AfterSeq, false)
	case protocol.TypeRequest:
		draining := s.admitting(true)
		defer s.admitting(false)
		if draining {
			if req.Release != nil {
				req.Release()
			}
			if log, err := s.hub.gw.Rejoin(s.ctx, s.caller(), in.RequestID); err == nil {
				// A re-send of a request this server knows is a resume, even while draining.
				s.follow(log, in.AfterSeq, true)
				return
			}
			s.sendError(in.RequestID, gateway.Failure(gateway.ErrDraining))
			return
		}
		log, from, err := s.hub.gw.Submit(s.ctx, s.caller(), req)
		if err != nil {
			s.sendError(in.RequestID, gateway.Failure(s.moveIfBusy(err)))
			return
		}
		s.follow(log, from, true)
	}
}

// frameRequest is the core's request for a jetway.v1 frame: one that passed
// validation, or the part of one that failed it, for its refusal.
func frameRequest(in protocol.Inbound, received time.Time) gateway.Request {
	return gateway.Request{Request: in.Call(), RequestID: in.RequestID, AfterSeq: in.AfterSeq,
		IsRequest: in.Type == protocol.TypeRequest, ReceivedAt: received, Trace: tracing.Parse(in.TraceParent())}
}

// maxGroupFrames bounds the chunks a follower queues as one item: the
// chunks it found waiting in the log, which the writer then sends in one
// batch (one write(2)). A replay of a long answer goes in items of this
// many frames, each waiting for room in the queue like any frame.
const maxGroupFrames = 64

// frames is the WebSocket door's codec: the accepted and terminal events'
// frames, and a chunk frame per piece (see protocol.AppendChunk), each
// encoded once per request.
type frames struct{}

func (frames) NewEncoder(l *stream.Log) stream.Encoder { return frameEncoder{requestID: l.RequestID} }

type frameEncoder struct{ requestID string }

func (frameEncoder) Accepted(a *stream.Accepted) []byte {
	return protocol.Encode(protocol.AcceptedFrame(a.Accepted))
}

func (e frameEncoder) AppendChunk(dst []byte, seq int, p call.Piece) []byte {
	return protocol.AppendChunk(dst, e.requestID, seq, p)
}

func (frameEncoder) Terminal(t *stream.Terminal, _ int) []byte { return terminalFrame(t) }

// terminalFrame is the frame of outcome t.
func terminalFrame(t *stream.Terminal) []byte {
	if t.Done != nil {
		return protocol.Encode(protocol.DoneFrame(t.Done))
	}
	return protocol.Encode(protocol.ErrorFrame(t.Error))
}

// follow delivers a request's log after seq `after`: the accepted frame
// (for requests, not resumes), chunks in order, then the terminal frame. A
// newer follow of the same request on this session replaces the one under
// way, and starts only when that one has returned, so the wire carries one
// delivery's frames after the other's, never interleaved. The one case a
// new follow is not needed is a re-send the delivery under way already
// answers in full: the same log, not yet past its accepted frame, from no
// later a seq. Whatever the instant a follow comes, it delivers the
// terminal: none is ever dropped because an earlier delivery was ending.
func (s *Session) follow(log *stream.Log, after int, withAccepted bool) {
	ctx, cancel := context.WithCancel(s.ctx)
	f := &follow{log: log, from: after, withAccepted: withAccepted, cancel: cancel, done: make(chan struct{})}
	s.mu.Lock()
	old := s.follows[log.RequestID]
	if old != nil && withAccepted && old.withAccepted && old.log == log && !old.acceptedOut && old.from <= after {
		// A re-send while the delivery under way has not sent accepted
		// yet (the client saw none in time): that delivery sends accepted
		// and everything after; another would only duplicate frames.
		s.mu.Unlock()
		cancel()
		return
	}
	if old != nil {
		old.cancel()
	}
	s.follows[log.RequestID] = f
	s.activeAt = s.hub.opts.Now()
	s.mu.Unlock()
	go func() {
		defer func() {
			cancel()
			s.mu.Lock()
			if s.follows[log.RequestID] == f {
				delete(s.follows, log.RequestID)
			}
			s.activeAt = s.hub.opts.Now()
			idle := s.draining && len(s.follows) == 0 && s.pending == 0 && s.idle != nil
			s.mu.Unlock()
			close(f.done)
			if idle {
				s.signalIdle()
			}
		}()
		if old != nil {
			select {
			case <-old.done:
			case <-ctx.Done():
				return
			}
		}
		s.deliver(ctx, f)
	}()
}

func (s *Session) deliver(ctx context.Context, f *follow) {
	for b := range f.log.Follow(ctx, frames{}, f.from) {
		if f.withAccepted && b.Accepted != nil {
			s.mu.Lock()
			f.acceptedOut = true
			s.mu.Unlock()
			if !s.deliverItem(ctx, item{frame: b.AcceptedBytes}) {
				return
			}
		}
		for first, n := 0, len(b.Pieces); first < n; first += maxGroupFrames {
			it := item{frame: b.Chunks.At(first)}
			if end := min(n, first+maxGroupFrames); end > first+1 {
				it = item{chunks: b.Chunks.Slice(first, end)}
			}
			if !s.deliverItem(ctx, it) {
				return
			}
		}
		if b.Terminal != nil {
			s.deliverItem(ctx, item{frame: b.TerminalBytes})
		}
	}
}

// send queues a frame for the writer; a full queue means a slow consumer.
func (s *Session) send(frame []byte) bool { return s.push(s.ctx, item{frame: frame}, false) }

// deliverItem is send for a follower: when no writer is running, the
// follower writes the queue itself (see sendQueue).
func (s *Session) deliverItem(ctx context.Context, it item) bool { return s.push(ctx, it, true) }

func (s *Session) push(ctx context.Context, it item, inline bool) bool {
	err := s.queue.push(it, s.hub.opts.WriteTimeout, ctx.Done(), inline)
	if errors.Is(err, errQueueFull) {
		s.slowConsumer()
		return false
	}
	return err == nil
}

func (s *Session) sendError(requestID string, e call.Failure) {
	e.RequestID = requestID
	if e.Status == 0 {
		e.Status = call.Status(e.Code)
	}
	s.send(protocol.Encode(protocol.ErrorFrame(&e)))
}

// slowConsumer closes the session with 4008, once: the writer's timed-out
// write and producers that found the queue full may all report it.
func (s *Session) slowConsumer() {
	s.mu.Lock()
	again := s.slow
	s.slow = true
	s.mu.Unlock()
	if again {
		return
	}
	s.logger.Warn("slow_consumer", zap.Int("queue_frames", s.hub.opts.SendQueueFrames))
	if s.hub.metrics != nil {
		s.hub.metrics.SlowConsumerClosed()
	}
	s.closeNow(protocol.DisconnectSlow)
}

// writeLoop is the connection's only writer of frames and of the close
// frame. It runs while the queue has items (see sendQueue). The frames of
// one take go out in one write(2) when there are several (see batchConn).
func (s *Session) writeLoop(q *sendQueue) {
	var batch []item
	for {
		batch = q.take(batch[:0])
		if len(batch) == 0 {
			return
		}
		if !s.writeBatch(q, batch) {
			return
		}
		clear(batch)
	}
}

// writeBatch writes one take's items; false when the writer must stop.
func (s *Session) writeBatch(q *sendQueue, batch []item) bool {
	batching := s.out != nil && (len(batch) > 1 || batch[0].chunks.Len() > 0)
	if batching {
		s.out.begin()
	}
	var err error
	for _, it := range batch {
		if it.close != nil {
			if batching {
				err = s.out.flush()
			}
			if err == nil {
				s.writeClose(*it.close)
				q.shut()
				return false
			}
			break
		}
		if it.chunks.Len() == 0 {
			err = s.writeFrame(it.frame)
		}
		for i := range it.chunks.Len() {
			if err = s.writeFrame(it.chunks.At(i)); err != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	if batching {
		if ferr := s.out.flush(); err == nil {
			err = ferr
		}
	}
	if err != nil {
		var ne interface{ Timeout() bool }
		if errors.As(err, &ne) && ne.Timeout() {
			s.slowConsumer()
		}
		q.shut()
		s.cancel()
		_ = s.conn.Close()
		return false
	}
	return true
}

// writeFrame writes one text message; every frame has the whole write
// timeout to go out (in a batch: the batch's write ends by the last
// frame's deadline).
func (s *Session) writeFrame(frame []byte) error {
	_ = s.conn.SetWriteDeadline(time.Now().Add(s.hub.opts.WriteTimeout))
	return s.conn.WriteMessage(websocket.TextMessage, frame)
}

// ping sends a WebSocket ping (WriteControl may run beside the writer) and
// re-arms itself every heartbeat until the session ends.
func (s *Session) ping() {
	if s.ctx.Err() != nil {
		return
	}
	if err := s.conn.WriteControl(websocket.PingMessage, nil, time.Now().Add(s.hub.opts.WriteTimeout)); err != nil {
		s.cancel()
		_ = s.conn.Close()
		return
	}
	s.mu.Lock()
	s.pinger.Reset(s.hub.opts.Heartbeat)
	s.mu.Unlock()
}

// writeClose sends the close frame after everything queued before it, then
// gives the client a moment to answer before the reader gives up.
func (s *Session) writeClose(d protocol.Disconnect) {
	_ = s.conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(d.Code, d.Reason), time.Now().Add(time.Second))
	_ = s.conn.SetReadDeadline(time.Now().Add(2 * time.Second))
}

func (s *Session) isClosing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closing
}

// closeAfterQueue closes once every frame queued so far is written.
func (s *Session) closeAfterQueue(d protocol.Disconnect) {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return
	}
	s.closing = true
	s.mu.Unlock()
	if err := s.queue.push(item{close: &d}, s.hub.opts.WriteTimeout, s.ctx.Done(), false); err != nil {
		s.closeNow(d)
	}
}

// closeNow sends the close frame at once (best effort) and ends the connection.
func (s *Session) closeNow(d protocol.Disconnect) {
	s.mu.Lock()
	s.closing = true
	s.mu.Unlock()
	_ = s.conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(d.Code, d.Reason), time.Now().Add(100*time.Millisecond))
	s.cancel()
	_ = s.conn.Close()
}

// expired closes the session when its token runs out without an auth refresh.
func (s *Session) expired() {
	s.logger.Info("token_expired")
	s.sendError("", call.Failure{Code: protocol.CodeUnauthorized, Message: "token expired: reconnect with a fresh token"})
	s.closeAfterQueue(protocol.DisconnectTokenExpired)
}

// refresh replaces the session's credentials (same user required).
func (s *Session) refresh(token string) {
	ctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
	defer cancel()
	p, err := s.hub.signIn.Verifier.Verify(ctx, token)
	s.mu.Lock()
	cur := s.principal
	s.mu.Unlock()
	if err == nil && (p.Subject != cur.Subject || p.Tenant != cur.Tenant || p.App != cur.App) {
		err = errors.New("token is for another user or app")
	}
	if err != nil {
		s.logger.Info("auth_refresh_rejected", zap.Error(err))
		s.sendError("", call.Failure{Code: protocol.CodeUnauthorized, Message: "invalid token for this session"})
		s.closeAfterQueue(protocol.DisconnectTokenRejected)
		return
	}
	s.mu.Lock()
	s.principal = p
	s.expiry.Stop()
	s.expiry = time.AfterFunc(time.Until(p.ExpiresAt), s.expired)
	s.mu.Unlock()
	// A token re-sent (the same expiry) changes nothing worth a line: a
	// client may send it as often as it likes.
	if !p.ExpiresAt.Equal(cur.ExpiresAt) {
		s.logger.Info("auth_refreshed", zap.Time("expires_at", p.ExpiresAt))
	}
	s.send(protocol.Encode(protocol.AuthOK{Type: protocol.TypeAuthOK, ExpiresAt: protocol.Timestamp(p.ExpiresAt)}))
}

func (s *Session) isDraining() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.draining
}

// admitting marks a request or resume being handled (start true) or done
// with (start false): from reading it to following its log or refusing it,
// the session is not idle, so neither a move nor the drain's close takes
// it meanwhile. It returns whether the session is draining (at the start:
// a request is then refused draining, with the mark held).
func (s *Session) admitting(start bool) (draining bool) {
	s.mu.Lock()
	if start {
		s.pending++
		draining = s.draining
		s.mu.Unlock()
		return draining
	}
	s.pending--
	idle := s.draining && len(s.follows) == 0 && s.pending == 0 && s.idle != nil
	s.mu.Unlock()
	if idle {
		s.signalIdle()
	}
	return false
}

// heard marks an inbound frame arriving: pending until readLoop has
// handled it, and the session's last sign of a talking client.
func (s *Session) heard() {
	s.mu.Lock()
	s.pending++
	s.heardAt = s.hub.opts.Now()
	s.mu.Unlock()
}

// moveIfBusy moves the session when err is a busy at this server's
// capacity and another server has room: the `draining` frame goes out
// before the refusal, so the client sends the request again on its new
// connection. It returns the refusal to send.
func (s *Session) moveIfBusy(err error) error {
	if !errors.Is(err, gateway.ErrAtCapacity) || s.hub.opts.RoomElsewhere == nil || s.isDraining() {
		return err
	}
	at, ok := s.hub.opts.RoomElsewhere()
	if !ok || !s.hub.move(s, telemetry.MoveBusy, at, false) {
		return err
	}
	return fmt.Errorf("%w (%w)", err, gateway.ErrRoomElsewhere)
}

// idleSince is when the session last delivered a request (or opened),
// if it delivers nothing now and is not draining.
func (s *Session) idleSince() (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.activeAt, len(s.follows) == 0 && s.pending == 0 && !s.draining && !s.closing
}

// movable is idleSince for a move: also false while the session is
// younger than minAge or heard a frame within quiet.
func (s *Session) movable(now time.Time, minAge, quiet time.Duration) (time.Time, bool) {
	since, idle := s.idleSince()
	s.mu.Lock()
	defer s.mu.Unlock()
	return since, idle && now.Sub(s.openedAt) >= minAge && now.Sub(s.heardAt) >= quiet
}

// drain tells the client to move to another server.
func (s *Session) drain() { s.startDrain(false) }

// startDrain marks the session draining and sends the `draining` frame,
// once; with idleOnly, only if nothing is being delivered (checked under
// the same lock, so a request arriving now is refused draining). False
// when it did not start a drain.
func (s *Session) startDrain(idleOnly bool) bool {
	s.mu.Lock()
	if s.draining || s.closing || (idleOnly && (len(s.follows) > 0 || s.pending > 0)) {
		s.mu.Unlock()
		return false
	}
	s.draining = true
	s.idle = make(chan struct{})
	empty := len(s.follows) == 0 && s.pending == 0
	s.mu.Unlock()
	s.send(protocol.Encode(protocol.Draining{Type: protocol.TypeDraining,
		ReconnectAfterMs: s.hub.opts.ReconnectAfter.Milliseconds()}))
	if empty {
		s.signalIdle()
	}
	return true
}

func (s *Session) signalIdle() {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.idle:
	default:
		close(s.idle)
	}
}

// closeWhenQuiet is closeWhenIdle for a moved session: it closes with
// 1001 only once the session has been idle for linger since its
// `draining` frame and since its last inbound frame, so a frame its
// client sent before reading `draining` is answered, not cut off.
func (s *Session) closeWhenQuiet(linger time.Duration) {
	s.mu.Lock()
	idle := s.idle
	s.mu.Unlock()
	t := time.NewTimer(linger)
	defer t.Stop()
	for {
		select {
		case <-idle:
		case <-s.ctx.Done():
			return
		}
		select {
		case <-t.C:
		case <-s.ctx.Done():
			return
		}
		now := s.hub.opts.Now()
		s.mu.Lock()
		busy := len(s.follows) > 0 || s.pending > 0
		wait := linger - now.Sub(s.heardAt)
		if !busy && wait <= 0 {
			s.mu.Unlock()
			s.closeAfterQueue(protocol.DisconnectShutdown)
			return
		}
		s.mu.Unlock()
		t.Reset(max(wait, linger/10))
	}
}

// closeWhenIdle closes with 1001 once the session's requests have delivered
// their terminal frames, or at once when ctx ends.
func (s *Session) closeWhenIdle(ctx context.Context) {
	s.mu.Lock()
	idle := s.idle
	s.mu.Unlock()
	if idle == nil {
		s.drain()
		s.mu.Lock()
		idle = s.idle
		s.mu.Unlock()
	}
	select {
	case <-idle:
		s.closeAfterQueue(protocol.DisconnectShutdown)
	case <-ctx.Done():
		s.closeNow(protocol.DisconnectShutdown)
	case <-s.ctx.Done():
	}
}
