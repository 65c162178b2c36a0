package socket

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
	"github.com/jetway-gateway/jetway/internal/door"
	"github.com/jetway-gateway/jetway/internal/gateway"
	"github.com/jetway-gateway/jetway/internal/stream"
	"github.com/jetway-gateway/jetway/internal/telemetry"
)

// Conn is one WebSocket connection of one user, on one door: handler
// speaks its dialect.
type Conn struct {
	hub     *Hub
	handler Handler
	conn    *websocket.Conn
	out     *batchConn // conn's network connection (nil if the upgrade did not go through the endpoint)
	id      string
	logger  Logger
	queue   *sendQueue
	share   *userShare // the user's share of the attachment budget

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
	follows   map[string]*follow // follow key (a request id) -> the follower delivering it (nil until the first)
	pending   int                // requests and resumes read and not yet followed or refused (see admitting)
	closing   bool
	slow      bool          // closed as a slow consumer
	idle      chan struct{} // closed when draining and no follower is left

	// The reader's, which runs on one goroutine at a time (see read).
	frameDue time.Time // while a frame is read: when it must have arrived whole
	over     bool      // unregistered
}

// Logger adds the socket's identity to each line when it is written,
// instead of keeping a pre-encoded child logger per idle socket.
type Logger struct {
	l                     *zap.Logger
	id, user, tenant, app string
}

func (l Logger) with(fields []zap.Field) []zap.Field {
	return append([]zap.Field{zap.String("session_id", l.id), zap.String("user", l.user),
		zap.String("tenant", l.tenant), zap.String("app", l.app)}, fields...)
}

func (l Logger) Debug(msg string, f ...zap.Field) { l.l.Debug(msg, l.with(f)...) }
func (l Logger) Info(msg string, f ...zap.Field)  { l.l.Info(msg, l.with(f)...) }
func (l Logger) Warn(msg string, f ...zap.Field)  { l.l.Warn(msg, l.with(f)...) }
func (l Logger) Error(msg string, f ...zap.Field) { l.l.Error(msg, l.with(f)...) }

// follow is one delivery of a request's log on this socket.
type follow struct {
	key          string
	log          *stream.Log
	codec        stream.Codec
	delivery     Delivery
	from         int  // the seq it delivers after
	withAccepted bool // it sends the accepted frame (a request, not a resume)
	cancel       context.CancelFunc
	done         chan struct{} // closed when the delivery has returned
	// acceptedOut is set (under the session's mu) before the accepted
	// frame goes to the queue: from then on a re-send needs a delivery of
	// its own.
	acceptedOut bool
}

func newConn(h *Hub, conn *websocket.Conn, p auth.Principal, id string, share *userShare) *Conn {
	ctx, cancel := context.WithCancel(context.Background())
	out, _ := conn.NetConn().(*batchConn)
	s := &Conn{
		hub: h, conn: conn, out: out, id: id, principal: p, ctx: ctx, cancel: cancel, share: share,
		logger: Logger{h.logger, id, p.Subject, p.Tenant, p.App},
	}
	s.activeAt = h.opts.Now()
	s.openedAt, s.heardAt = s.activeAt, s.activeAt
	s.queue = newSendQueue(h.opts.SendQueueFrames, h.opts.SendQueueBytes, s.writeLoop)
	return s
}

// Caller is who the socket's frames come from, for the gateway.
func (s *Conn) Caller() gateway.Caller {
	s.mu.Lock()
	defer s.mu.Unlock()
	return gateway.Caller{Principal: s.principal, SessionID: s.id}
}

// Principal is the socket's signed-in user (its latest credentials).
func (s *Conn) Principal() auth.Principal {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.principal
}

// ID is the socket's session id.
func (s *Conn) ID() string { return s.id }

// Context ends with the connection.
func (s *Conn) Context() context.Context { return s.ctx }

// Logger writes lines with the socket's identity.
func (s *Conn) Logger() Logger { return s.logger }

// Heartbeat is the socket's ping interval.
func (s *Conn) Heartbeat() time.Duration { return s.hub.opts.Heartbeat }

// PlainBound is the bound of a frame with no attachment (MaxFrameBytes).
func (s *Conn) PlainBound() int64 { return s.hub.opts.MaxFrameBytes }

// run opens the handler, then reads until the connection ends (see read).
func (s *Conn) run() {
	defer s.recovered()
	opts := s.hub.opts
	s.logger.Info("session_opened")
	s.mu.Lock()
	p := s.principal
	s.expiry = time.AfterFunc(time.Until(p.ExpiresAt), s.expired)
	s.pinger = time.AfterFunc(opts.Heartbeat, s.ping)
	s.mu.Unlock()
	s.handler.Opened()

	// The frame reader enforces the bounds itself (see frames.go), so it
	// can tell which bound a frame passed.
	s.conn.SetReadLimit(0)
	_ = s.conn.SetReadDeadline(s.readDeadline())
	// Called on the reader, from inside its reads (and see quiet).
	s.conn.SetPongHandler(s.pong)
	s.read(false)
}

// recovered ends a socket whose reader panicked: a bug must not leave a
// socket open and silent, so it closes with 1011 and the client
// reconnects and resumes.
func (s *Conn) recovered() {
	if v := recover(); v != nil {
		s.logger.Error("session_panic", zap.Any("panic", v), zap.Stack("stack"))
		s.CloseNow(DisconnectInternal)
		s.cancel()
		s.unregister()
	}
}

// read runs the socket's reader on this goroutine (mustRead: its first
// look at the connection is a read, see readLoop). It handles frames
// until the connection ends, then ends the session; or until the client
// is quiet and nothing it sent is left unread: then a new goroutine
// waits for the next bytes in park, and this one returns, its stack (the
// reads, the handler's work, several KB) with it.
func (s *Conn) read(mustRead bool) {
	defer s.recovered()
	if s.readLoop(mustRead) {
		go s.park()
		return
	}
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
	s.unregister()
}

// park is an idle session's reader: a goroutine waiting for the client's
// next bytes in one small frame (batchConn.await), whose stack stays at
// the smallest size, with no read buffer held; then the reader again.
func (s *Conn) park() {
	defer s.recovered()
	filled := s.out.await()
	s.read(!filled)
}

// unregister takes the ended session off the hub, once.
func (s *Conn) unregister() {
	if s.over {
		return
	}
	s.over = true
	s.hub.unregister(s.Principal(), s)
}

// readDeadline is the reader's deadline: between frames the heartbeat's,
// moved on by every pong; from a frame's first byte also at most
// FrameReadTimeout away (frameDue), which pongs do not move.
func (s *Conn) readDeadline() time.Time {
	opts := &s.hub.opts
	d := time.Now().Add(2*opts.Heartbeat + opts.Heartbeat/2)
	if !s.frameDue.IsZero() && s.frameDue.Before(d) {
		return s.frameDue
	}
	return d
}

// pong hears a pong: the heartbeat's deadline moves on.
func (s *Conn) pong(string) error { return s.conn.SetReadDeadline(s.readDeadline()) }

// quiet reports, between messages, whether the client's bytes are all
// read: the reader may then park. The pongs the buffer holds whole are
// taken first, as gorilla would (batchConn.takePong): a heartbeat's
// answer does not leave the reader inside gorilla's read.
func (s *Conn) quiet() bool {
	if s.out == nil {
		return false
	}
	for s.out.takePong() {
		_ = s.pong("")
	}
	return s.out.idle()
}

// readLoop handles inbound frames until the connection fails or closes
// (false), or until the client is quiet (true: the caller parks the
// reader; with mustRead, not before a first read, which reports what
// stopped the wait). A frame that takes longer than FrameReadTimeout from
// its first byte closes the socket (DisconnectFrameTimeout) and gives its
// bytes back; see readDeadline.
func (s *Conn) readLoop(mustRead bool) bool {
	opts := s.hub.opts
	// From a frame's first byte to its handling the frame is pending (see
	// admitting): a move decided meanwhile does not take the session, so
	// the frame is answered here, never cut off by the move's close.
	reading := false
	defer func() {
		if reading {
			s.Admitting(false)
		}
	}()
	for first := true; ; first = false {
		if reading {
			reading = false
			s.Admitting(false)
		}
		if (!first || !mustRead) && s.quiet() {
			return true
		}
		mt, r, err := s.conn.NextReader()
		if err != nil {
			s.readFailed(err, false)
			return false
		}
		s.heard()
		reading = true
		s.frameDue = time.Now().Add(opts.FrameReadTimeout)
		_ = s.conn.SetReadDeadline(s.readDeadline())
		data, held, err := s.hub.frames.read(r, s.share)
		late := !time.Now().Before(s.frameDue)
		s.frameDue = time.Time{}
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
				refusal = s.MoveIfBusy(fmt.Errorf("%w: attachment frames at this server's budget of %d bytes", gateway.ErrAtCapacity, opts.AttachmentBytesInFlight))
			}
			s.handler.Refused(spent.First, refusal)
			_ = s.conn.SetReadDeadline(s.readDeadline())
			continue
		case errors.Is(err, errFrameTooBig):
			s.logger.Info("frame_too_big", zap.Int64("limit", s.hub.frames.largest))
			s.CloseNow(DisconnectFrameTooBig)
			return false
		case err != nil:
			s.readFailed(err, late)
			return false
		}
		_ = s.conn.SetReadDeadline(s.readDeadline())
		if !s.handleFrame(mt, data, opts.Now(), held) {
			return false
		}
	}
}

// handleFrame hands one frame to the handler; false when the socket
// closed. held is what the frame took of the attachment budget: given
// back once the frame is handled, except what the handler keeps
// (Frame.Keep: a request's decoded attachments, until its model call
// ends), so the budget bounds the attachments of model calls too.
func (s *Conn) handleFrame(mt int, data []byte, received time.Time, held int64) bool {
	f := &Frame{Text: mt == websocket.TextMessage, Data: data, Received: received, held: held, c: s}
	defer func() { s.hub.frames.give(s.share, f.held-f.kept) }()
	if !f.Text && int64(len(data)) > s.hub.opts.MaxFrameBytes {
		s.TooBig(int64(len(data)))
		return false
	}
	if f.Text && !utf8.Valid(data) {
		s.logger.Info("invalid_utf8")
		s.CloseNow(DisconnectInvalidData)
		return false
	}
	return s.handler.Frame(f)
}

// TooBig closes the socket for a frame of size over the plain bound that
// may not be larger (only a request with an attachment may).
func (s *Conn) TooBig(size int64) {
	s.logger.Info("frame_too_big", zap.Int64("size", size), zap.Int64("limit", s.hub.opts.MaxFrameBytes))
	s.CloseNow(DisconnectNoAttachments)
}

// readFailed ends a read that failed; frameLate: a frame was being read
// past its FrameReadTimeout.
func (s *Conn) readFailed(err error, frameLate bool) {
	var ce *websocket.CloseError
	switch {
	case errors.As(err, &ce):
		s.logger.Info("client_closed", zap.Int("code", ce.Code))
	default:
		var ne interface{ Timeout() bool }
		if errors.As(err, &ne) && ne.Timeout() && !s.isClosing() {
			if frameLate {
				s.logger.Info("frame_read_timeout", zap.Duration("timeout", s.hub.opts.FrameReadTimeout))
				s.CloseNow(DisconnectFrameTimeout)
				return
			}
			s.logger.Info("heartbeat_timeout")
			s.CloseNow(DisconnectHeartbeat)
			return
		}
		s.logger.Debug("read_ended", zap.Error(err))
	}
}

// Follow delivers a request's log after seq `after` in codec's bytes,
// under key (the door's name for the delivery: a request id): the
// accepted event (withAccepted: for requests, not resumes), chunks in
// order, then the terminal, each written by delivery (nil: each event's
// bytes as one frame). A newer follow of the same key on this socket
// replaces the one under way, and starts only when that one has
// returned, so the wire carries one delivery's frames after the other's,
// never interleaved. The one case a new follow is not needed is a
// re-send the delivery under way already answers in full: the same log,
// not yet past its accepted frame, from no later a seq. Whatever the
// instant a follow comes, it delivers the terminal: none is ever dropped
// because an earlier delivery was ending.
func (s *Conn) Follow(key string, log *stream.Log, after int, withAccepted bool, codec stream.Codec, delivery Delivery) {
	ctx, cancel := context.WithCancel(s.ctx)
	f := &follow{key: key, log: log, codec: codec, delivery: delivery, from: after, withAccepted: withAccepted, cancel: cancel, done: make(chan struct{})}
	s.mu.Lock()
	old := s.follows[key]
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
	if s.follows == nil {
		s.follows = map[string]*follow{}
	}
	s.follows[key] = f
	s.activeAt = s.hub.opts.Now()
	s.mu.Unlock()
	go func() {
		defer func() {
			cancel()
			s.mu.Lock()
			if s.follows[key] == f {
				delete(s.follows, key)
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

func (s *Conn) deliver(ctx context.Context, f *follow) {
	out := &Out{c: s, ctx: ctx, f: f}
	deliver := f.delivery
	if deliver == nil {
		deliver = eachAsFrame
	}
	// One batch for the follow, not one per batch: the delivery takes its
	// address, so each would be a heap allocation, a paced token's.
	var cur stream.Batch
	for b := range f.log.Follow(ctx, f.codec, f.from) {
		cur = b
		if !deliver(&cur, out) {
			return
		}
	}
}

// eachAsFrame is the default Delivery: the accepted event (for a follow
// withAccepted), each chunk and the terminal, each its own frame.
func eachAsFrame(b *stream.Batch, out *Out) bool {
	if out.WithAccepted() && b.Accepted != nil && !out.Accepted(b.AcceptedBytes) {
		return false
	}
	if !out.Chunks(b.Chunks) {
		return false
	}
	if b.Terminal != nil {
		return out.Frame(b.TerminalBytes)
	}
	return true
}

// maxGroupFrames bounds the frames a follower queues as one item: the
// chunks it found waiting in the log, which the writer then sends in one
// batch (one write(2)). A replay of a long answer goes in items of this
// many frames, each waiting for room in the queue like any frame.
const maxGroupFrames = 64

// Out is where a Delivery writes one follow's frames: each call waits
// for room in the socket's queue and is false when the follow must stop
// (the socket ended, or the follow was replaced).
type Out struct {
	c   *Conn
	ctx context.Context
	f   *follow
}

// WithAccepted reports whether the follow sends the accepted event.
func (o *Out) WithAccepted() bool { return o.f.withAccepted }

// Accepted sends the accepted event's frame; from then on a re-send of
// the request needs a delivery of its own (see Follow).
func (o *Out) Accepted(frame []byte) bool {
	o.c.mu.Lock()
	o.f.acceptedOut = true
	o.c.mu.Unlock()
	if frame == nil {
		return true
	}
	return o.Frame(frame)
}

// Frame sends one frame (nil: none).
func (o *Out) Frame(frame []byte) bool {
	if frame == nil {
		return true
	}
	return o.c.deliverItem(o.ctx, item{frame: frame})
}

// Chunks sends each chunk as a frame, in groups the writer sends at once.
func (o *Out) Chunks(c stream.Chunks) bool {
	for first, n := 0, c.Len(); first < n; first += maxGroupFrames {
		it := item{frame: c.At(first)}
		if end := min(n, first+maxGroupFrames); end > first+1 {
			it = item{chunks: c.Slice(first, end)}
		}
		if !o.c.deliverItem(o.ctx, it) {
			return false
		}
	}
	return true
}

// Frames sends frames the writer sends at once (a door's frames built
// for this delivery).
func (o *Out) Frames(frames [][]byte) bool {
	if len(frames) == 0 {
		return true
	}
	return o.c.deliverItem(o.ctx, item{frames: frames})
}

// Send queues a frame for the writer; a full queue means a slow consumer.
func (s *Conn) Send(frame []byte) bool { return s.push(s.ctx, item{frame: frame}, false) }

// deliverItem is send for a follower: when no writer is running, the
// follower writes the queue itself (see sendQueue).
func (s *Conn) deliverItem(ctx context.Context, it item) bool { return s.push(ctx, it, true) }

func (s *Conn) push(ctx context.Context, it item, inline bool) bool {
	err := s.queue.push(it, s.hub.opts.WriteTimeout, ctx, inline)
	if errors.Is(err, errQueueFull) {
		s.slowConsumer()
		return false
	}
	return err == nil
}

// slowConsumer closes the session with 4008, once: the writer's timed-out
// write and producers that found the queue full may all report it.
func (s *Conn) slowConsumer() {
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
	s.CloseNow(DisconnectSlow)
}

// writeLoop is the connection's only writer of frames and of the close
// frame. It runs while the queue has items (see sendQueue). The frames of
// one take go out in one write(2) when there are several (see batchConn).
func (s *Conn) writeLoop(q *sendQueue) {
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
func (s *Conn) writeBatch(q *sendQueue, batch []item) bool {
	batching := s.out != nil && (len(batch) > 1 || batch[0].count() > 1)
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
		switch {
		case len(it.frames) > 0:
			for _, f := range it.frames {
				if err = s.writeFrame(f); err != nil {
					break
				}
			}
		case it.chunks.Len() == 0:
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
func (s *Conn) writeFrame(frame []byte) error {
	_ = s.conn.SetWriteDeadline(time.Now().Add(s.hub.opts.WriteTimeout))
	return s.conn.WriteMessage(websocket.TextMessage, frame)
}

// ping sends a WebSocket ping (WriteControl may run beside the writer) and
// re-arms itself every heartbeat until the session ends.
func (s *Conn) ping() {
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
func (s *Conn) writeClose(d Disconnect) {
	_ = s.conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(d.Code, d.Reason), time.Now().Add(time.Second))
	_ = s.conn.SetReadDeadline(time.Now().Add(2 * time.Second))
}

func (s *Conn) isClosing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closing
}

// CloseAfterQueue closes with d once every frame queued so far is written.
func (s *Conn) CloseAfterQueue(d Disconnect) {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return
	}
	s.closing = true
	s.mu.Unlock()
	if err := s.queue.push(item{close: &d}, s.hub.opts.WriteTimeout, s.ctx, false); err != nil {
		s.CloseNow(d)
	}
}

// CloseNow sends close d at once (best effort) and ends the connection.
func (s *Conn) CloseNow(d Disconnect) {
	s.mu.Lock()
	s.closing = true
	s.mu.Unlock()
	_ = s.conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(d.Code, d.Reason), time.Now().Add(100*time.Millisecond))
	s.cancel()
	_ = s.conn.Close()
}

// expired closes the socket when its token runs out without a refresh.
func (s *Conn) expired() {
	s.logger.Info("token_expired")
	s.handler.Expired()
	s.CloseAfterQueue(DisconnectTokenExpired)
}

// errOtherUser refuses a refresh whose token is valid but not the socket's user's.
var errOtherUser = errors.New("token is for another user or app")

// Refresh replaces the socket's credentials with token's, which must be
// valid and for the same user (tenant, app and sub), and returns them.
// On an error the door tells its client, then closes the socket with
// DisconnectTokenRejected.
func (s *Conn) Refresh(ctx context.Context, token string) (auth.Principal, error) {
	ctx, cancel := context.WithTimeout(ctx, door.VerifyTimeout)
	defer cancel()
	p, err := s.hub.verifier.Verify(ctx, token)
	s.mu.Lock()
	cur := s.principal
	s.mu.Unlock()
	if err == nil && (p.Subject != cur.Subject || p.Tenant != cur.Tenant || p.App != cur.App) {
		err = errOtherUser
	}
	if err != nil {
		s.logger.Info("auth_refresh_rejected", zap.Error(err))
		return auth.Principal{}, err
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
	return p, nil
}

func (s *Conn) isDraining() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.draining
}

// Admitting marks a request or resume being handled (start true) or done
// with (start false): from reading it to following its log or refusing it,
// the socket is not idle, so neither a move nor the drain's close takes
// it meanwhile. It returns whether the session is draining (at the start:
// a request is then refused draining, with the mark held).
func (s *Conn) Admitting(start bool) (draining bool) {
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
func (s *Conn) heard() {
	s.mu.Lock()
	s.pending++
	s.heardAt = s.hub.opts.Now()
	s.mu.Unlock()
}

// MoveIfBusy moves the socket when err is a busy at this server's
// capacity and another server has room: the door's draining frame goes
// out before the refusal, so the client sends the request again on its
// new connection. It returns the refusal to send.
func (s *Conn) MoveIfBusy(err error) error {
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
func (s *Conn) idleSince() (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.activeAt, len(s.follows) == 0 && s.pending == 0 && !s.draining && !s.closing
}

// movable is idleSince for a move: also false while the session is
// younger than minAge or heard a frame within quiet.
func (s *Conn) movable(now time.Time, minAge, quiet time.Duration) (time.Time, bool) {
	since, idle := s.idleSince()
	s.mu.Lock()
	defer s.mu.Unlock()
	return since, idle && now.Sub(s.openedAt) >= minAge && now.Sub(s.heardAt) >= quiet
}

// drain tells the client to move to another server.
func (s *Conn) drain() { s.startDrain(false) }

// startDrain marks the session draining and sends the `draining` frame,
// once; with idleOnly, only if nothing is being delivered (checked under
// the same lock, so a request arriving now is refused draining). False
// when it did not start a drain.
func (s *Conn) startDrain(idleOnly bool) bool {
	s.mu.Lock()
	if s.draining || s.closing || (idleOnly && (len(s.follows) > 0 || s.pending > 0)) {
		s.mu.Unlock()
		return false
	}
	s.draining = true
	s.idle = make(chan struct{})
	empty := len(s.follows) == 0 && s.pending == 0
	s.mu.Unlock()
	if frame := s.handler.Draining(); frame != nil {
		s.Send(frame)
	}
	if empty {
		s.signalIdle()
	}
	return true
}

func (s *Conn) signalIdle() {
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
func (s *Conn) closeWhenQuiet(linger time.Duration) {
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
			s.CloseAfterQueue(DisconnectShutdown)
			return
		}
		s.mu.Unlock()
		t.Reset(max(wait, linger/10))
	}
}

// closeWhenIdle closes with 1001 once the session's requests have delivered
// their terminal frames, or at once when ctx ends.
func (s *Conn) closeWhenIdle(ctx context.Context) {
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
		s.CloseAfterQueue(DisconnectShutdown)
	case <-ctx.Done():
		s.CloseNow(DisconnectShutdown)
	case <-s.ctx.Done():
	}
}

// ReconnectAfter is the hint a door's draining frame gives.
func (s *Conn) ReconnectAfter() time.Duration { return s.hub.opts.ReconnectAfter }
