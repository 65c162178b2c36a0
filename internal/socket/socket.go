// Package socket is what every WebSocket door shares: the sign-in before
// the upgrade, the registry of this server's sockets (per-user caps,
// drain, moves), inbound frame bounds and the attachment budget, one
// reader and one writer per connection with a bounded send queue,
// heartbeats, token expiry and refresh, and the delivery of stream logs.
// A door is a Dialect over it (the jetway.v1 session, the AI SDK's
// transport): its subprotocol, its frames and their handling. It knows
// nothing of quotas or models, nor of any door's frames.
package socket

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"go.uber.org/zap"

	"github.com/jetway-gateway/jetway/internal/auth"
	"github.com/jetway-gateway/jetway/internal/call"
	"github.com/jetway-gateway/jetway/internal/door"
	"github.com/jetway-gateway/jetway/internal/fleet"
	"github.com/jetway-gateway/jetway/internal/telemetry"
)

// The defaults of Options, written once: the gateway's settings and
// docs/configuration.md use these.
const (
	DefaultHeartbeat     = 25 * time.Second
	DefaultMaxFrameBytes = door.DefaultMaxFrameBytes
	// DefaultMaxAttachmentFrameBytes takes one image at Bedrock's limit
	// (3.75 MiB, 5.2 MB in base64) with room for text, or a few smaller ones.
	DefaultMaxAttachmentFrameBytes = 8 << 20
	// DefaultAttachmentBytesInFlight is 16 frames at the default
	// attachment bound, or about 180 frames of a 1 MiB image, at once.
	DefaultAttachmentBytesInFlight = 128 << 20
	// DefaultAttachmentShareDivisor makes one user's default share of the
	// attachment budget a quarter of it (32 MiB: four frames at the
	// default attachment bound), so it takes four users to spend it.
	DefaultAttachmentShareDivisor = 4
	// DefaultFrameReadTimeout is the time an inbound frame may take from
	// its first byte to its last: an 8 MiB frame at 1.2 Mbit/s.
	DefaultFrameReadTimeout = 60 * time.Second
	DefaultSendQueueFrames  = 1024
	DefaultSendQueueBytes   = 4 << 20
	DefaultWriteTimeout     = 10 * time.Second
	DefaultMaxConnsPerUser  = 16
	DefaultReconnectAfter   = time.Second
	// DefaultMoveMinAge: a session younger than this is never moved. A
	// fresh session is most often a reconnect the fleet's view has not
	// counted yet (membership load is a heartbeat old), and its client is
	// likely sending `resume`s right now. Longer than a heartbeat (2 s);
	// short enough that a moved session the load balancer sent back here
	// can move again soon.
	DefaultMoveMinAge = 3 * time.Second
	// DefaultMoveQuiet: a session that sent a frame within this is never
	// moved: its client is talking, and the answer to a frame it sent must
	// not race the move. Many round trips.
	DefaultMoveQuiet = 250 * time.Millisecond
	// DefaultMoveLinger: a moved session closes (1001) only after it has
	// been idle this long since its `draining` frame or its last inbound
	// frame: a frame the client sent before it read `draining` arrives
	// meanwhile and is answered (a request with `error draining`, a
	// resume served), never cut off by the close.
	DefaultMoveLinger = time.Second
)

// Options bound every session. Zero values mean the Default constants.
type Options struct {
	Heartbeat     time.Duration // ping interval
	MaxFrameBytes int64         // largest inbound frame
	// MaxAttachmentFrameBytes is the largest inbound frame carrying an
	// image or document block; not above MaxFrameBytes: no larger bound.
	MaxAttachmentFrameBytes int64
	// AttachmentBytesInFlight is the server-wide budget of the bytes past
	// MaxFrameBytes of frames being read or admitted; past it: `busy`.
	AttachmentBytesInFlight int64
	// AttachmentBytesPerUser is one user's share of that budget, over all
	// of the user's sessions; past it: `rate_limited` for that user only.
	// 0: AttachmentBytesInFlight / DefaultAttachmentShareDivisor.
	AttachmentBytesPerUser int64
	// FrameReadTimeout bounds the time from an inbound frame's first byte
	// to its last; pings and pongs do not extend it. Past it: close 1008.
	FrameReadTimeout time.Duration
	SendQueueFrames  int           // send queue bound in frames; over it: 4008
	SendQueueBytes   int           // send queue bound in bytes; over it: 4008
	WriteTimeout     time.Duration // longest wait for room in the queue, and for one socket write
	MaxConnsPerUser  int           // open WebSockets per user on this server
	AllowedOrigins   []string      // exact origins, or "*"
	AllowLoopback    bool          // also allow http(s)://localhost|127.0.0.1|[::1] origins (dev mode)
	ReconnectAfter   time.Duration // the hint in draining frames
	SocketSendBuffer int           // SO_SNDBUF of each connection in bytes; 0: the OS autotunes
	// RoomElsewhere, when set, is asked when a request is refused busy at
	// this server's capacity: true when another server has room and the
	// move rate allows a move (the balancer's RoomElsewhere). The session
	// is then moved, and its busy says so (a short retry_after_ms).
	RoomElsewhere func() (fleet.Spread, bool)
	MoveMinAge    time.Duration // a session younger than this is not moved (DefaultMoveMinAge)
	MoveQuiet     time.Duration // a session that sent a frame within this is not moved (DefaultMoveQuiet)
	MoveLinger    time.Duration // a moved session closes after this long idle (DefaultMoveLinger)
	Now           func() time.Time
}

func (o *Options) defaults() {
	if o.Heartbeat <= 0 {
		o.Heartbeat = DefaultHeartbeat
	}
	if o.MaxFrameBytes <= 0 {
		o.MaxFrameBytes = DefaultMaxFrameBytes
	}
	if o.MaxAttachmentFrameBytes <= 0 {
		o.MaxAttachmentFrameBytes = DefaultMaxAttachmentFrameBytes
	}
	if o.AttachmentBytesInFlight <= 0 {
		o.AttachmentBytesInFlight = DefaultAttachmentBytesInFlight
	}
	if o.AttachmentBytesPerUser <= 0 {
		o.AttachmentBytesPerUser = o.AttachmentBytesInFlight / DefaultAttachmentShareDivisor
	}
	if o.FrameReadTimeout <= 0 {
		o.FrameReadTimeout = DefaultFrameReadTimeout
	}
	if o.SendQueueFrames <= 0 {
		o.SendQueueFrames = DefaultSendQueueFrames
	}
	if o.SendQueueBytes <= 0 {
		o.SendQueueBytes = DefaultSendQueueBytes
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = DefaultWriteTimeout
	}
	if o.MaxConnsPerUser <= 0 {
		o.MaxConnsPerUser = DefaultMaxConnsPerUser
	}
	if o.ReconnectAfter <= 0 {
		o.ReconnectAfter = DefaultReconnectAfter
	}
	if o.MoveMinAge <= 0 {
		o.MoveMinAge = DefaultMoveMinAge
	}
	if o.MoveQuiet <= 0 {
		o.MoveQuiet = DefaultMoveQuiet
	}
	if o.MoveLinger <= 0 {
		o.MoveLinger = DefaultMoveLinger
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// Hub is the registry of this server's sockets, over every WebSocket
// door: Handler is a door's endpoint. The per-user connection cap, the
// attachment budget, drain and moves count every door's sockets.
type Hub struct {
	verifier door.Verifier
	metrics  *telemetry.Metrics
	logger   *zap.Logger
	refusals *zap.Logger // sampled: the lines of refusals before the upgrade (telemetry.UnauthenticatedLogger)
	opts     Options
	frames   frameReader // the inbound bounds and the server's attachment budget

	mu       sync.Mutex
	draining bool
	sessions map[*Conn]struct{}
	moving   int                   // of sockets, how many were asked to move (Conn.moved)
	perUser  map[string]*userShare // by auth.Principal.Owner, while the user has a session
	idle     chan struct{}         // closed when draining and the last session ends
}

// NewHub returns the registry. metrics may be nil.
func NewHub(v door.Verifier, metrics *telemetry.Metrics, logger *zap.Logger, o Options) *Hub {
	o.defaults()
	return &Hub{verifier: v, metrics: metrics, logger: logger, refusals: telemetry.UnauthenticatedLogger(logger), opts: o,
		sessions: map[*Conn]struct{}{}, perUser: map[string]*userShare{}, idle: make(chan struct{}),
		frames: frameReader{plain: o.MaxFrameBytes, largest: max(o.MaxFrameBytes, o.MaxAttachmentFrameBytes),
			budget:  door.NewByteBudget(o.AttachmentBytesInFlight, metrics.AttachmentBytesInFlight),
			perUser: o.AttachmentBytesPerUser}}
}

// idleReadBuffer is a socket's read buffer (the hijacked connection's
// 4 KiB reader is let go), held only while the session reads: an idle
// session gives it back (see batchConn.await). A frame larger than it is
// read straight into the message, past the buffer, so only small frames
// (pings, pongs, short requests) go through it.
const idleReadBuffer = 1024

// writeBuffers are every socket's write buffers, pooled: an idle socket holds none.
var writeBuffers = &sync.Pool{}

// Handler is door d's endpoint (GET, upgraded to WebSocket), its sign-in
// counted under the door's name.
func (h *Hub) Handler(d Dialect, doorName string) http.Handler {
	return &endpoint{hub: h, dialect: d, signIn: &door.SignIn{Verifier: h.verifier, Door: doorName, Metrics: h.metrics},
		upgrader: websocket.Upgrader{
			Subprotocols: []string{d.Subprotocol()},
			// 0: gorilla reads through the reader batchingWriter hands it,
			// of idleReadBuffer bytes.
			ReadBufferSize:    0,
			WriteBufferPool:   writeBuffers,
			HandshakeTimeout:  10 * time.Second,
			EnableCompression: false,
			// Origin is checked before the upgrade, with a JSON error; see admit.
			CheckOrigin: func(*http.Request) bool { return true },
		}}
}

// endpoint is one door's upgrade.
type endpoint struct {
	hub      *Hub
	dialect  Dialect
	signIn   *door.SignIn
	upgrader websocket.Upgrader
}

// httpError is a failure before the upgrade.
type httpError struct {
	status  int
	code    string
	message string
	cause   error // for the log: why the credentials were refused
}

func writeHTTPError(w http.ResponseWriter, e httpError) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(e.status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": e.code, "message": e.message}})
}

// ServeHTTP authenticates, then upgrades and runs the socket until it ends.
func (e *endpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := e.hub
	p, sessionID, herr := e.admit(r)
	if herr != nil {
		// Anyone can be refused here, as often as they like: the lines are
		// sampled, the metric counts every refusal.
		fields := []zap.Field{zap.Int("status", herr.status), zap.String("code", herr.code),
			zap.String("reason", herr.message), zap.String("remote", r.RemoteAddr)}
		if herr.cause != nil {
			fields = append(fields, zap.Error(herr.cause))
		}
		h.refusals.Info("upgrade_refused", fields...)
		h.metrics.ConnectionRejected(herr.code)
		writeHTTPError(w, *herr)
		return
	}
	share := h.register(p)
	if share == nil {
		writeHTTPError(w, httpError{http.StatusTooManyRequests, call.CodeRateLimited,
			fmt.Sprintf("too many connections for this user (at most %d)", h.opts.MaxConnsPerUser), nil})
		if h.metrics != nil {
			h.metrics.ConnectionRejected(call.CodeRateLimited)
		}
		return
	}
	conn, err := e.upgrader.Upgrade(batchingWriter{w}, r, nil)
	if err != nil {
		h.unregister(p, nil)
		h.logger.Info("upgrade_failed", zap.Error(err))
		return
	}
	if n := h.opts.SocketSendBuffer; n > 0 {
		if tc, ok := tcpConn(conn.NetConn()); ok {
			_ = tc.SetWriteBuffer(n)
		}
	}
	s := newConn(h, conn, p, sessionID, share)
	s.handler = e.dialect.Open(s)
	h.track(s)
	// The socket runs on its own goroutine so net/http's handler goroutine,
	// with its request, headers and buffers, is released: an idle session
	// then holds only what it needs. It unregisters when it ends.
	go s.run()
}

// admit does everything before the upgrade: drain, origin, subprotocol,
// session id, credentials.
func (e *endpoint) admit(r *http.Request) (auth.Principal, string, *httpError) {
	h := e.hub
	h.mu.Lock()
	draining := h.draining
	h.mu.Unlock()
	if draining {
		return auth.Principal{}, "", &httpError{http.StatusServiceUnavailable, call.CodeDraining, "server is draining: connect to another server", nil}
	}
	if origin := r.Header.Get("Origin"); origin != "" && !h.originAllowed(origin) {
		return auth.Principal{}, "", &httpError{http.StatusForbidden, call.CodeForbidden, "origin not allowed", nil}
	}
	if offered := websocket.Subprotocols(r); len(offered) > 0 && !offers(offered, e.dialect.Subprotocol()) {
		return auth.Principal{}, "", &httpError{http.StatusBadRequest, call.CodeInvalidRequest,
			"unsupported subprotocol: offer " + e.dialect.Subprotocol() + " (the only protocol this endpoint speaks)", nil}
	}
	sessionID, err := e.dialect.SessionID(r)
	if err != nil {
		return auth.Principal{}, "", &httpError{http.StatusBadRequest, call.CodeInvalidRequest, err.Error(), nil}
	}
	if sessionID == "" {
		sessionID = door.NewID()
	}
	p, ref := e.signIn.Caller(r, subprotocolToken)
	if ref != nil {
		return auth.Principal{}, "", &httpError{ref.Status, ref.Code, ref.Message, ref.Cause}
	}
	return p, sessionID, nil
}

// BearerPrefix starts the subprotocol that carries the token on every
// WebSocket door (bearer.<JWT>), for browsers, which cannot set headers
// on an upgrade.
const BearerPrefix = "bearer."

// subprotocolToken is the WebSocket's second place for the token, for
// browsers, which cannot set headers on an upgrade: a bearer.<JWT> subprotocol.
var subprotocolToken = door.Source{Describe: "the bearer.<JWT> subprotocol", Find: func(r *http.Request) string {
	for _, p := range websocket.Subprotocols(r) {
		if strings.HasPrefix(p, BearerPrefix) {
			return strings.TrimPrefix(p, BearerPrefix)
		}
	}
	return ""
}}

// OriginAllowed is the browser Origin policy (JETWAY_ALLOWED_ORIGINS), for
// the other doors on the public listener.
func (h *Hub) OriginAllowed(origin string) bool { return h.originAllowed(origin) }

// offers reports whether the client offered the protocol the door speaks
// (bearer.<JWT> is a credential, not a protocol).
func offers(offered []string, protocol string) bool {
	return slices.Contains(offered, protocol)
}

func (h *Hub) originAllowed(origin string) bool {
	for _, o := range h.opts.AllowedOrigins {
		if o == "*" || strings.EqualFold(o, origin) {
			return true
		}
	}
	if h.opts.AllowLoopback {
		if u, err := url.Parse(origin); err == nil && (u.Scheme == "http" || u.Scheme == "https") {
			host := u.Hostname()
			if host == "localhost" {
				return true
			}
			if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
				return true
			}
		}
	}
	return false
}

// register counts a connection for its user and returns the user's share
// of the attachment budget; nil when the user is at the connection cap.
func (h *Hub) register(p auth.Principal) *userShare {
	h.mu.Lock()
	defer h.mu.Unlock()
	u := h.perUser[p.Owner()]
	if u == nil {
		u = &userShare{}
		h.perUser[p.Owner()] = u
	}
	if u.sessions >= h.opts.MaxConnsPerUser {
		return nil
	}
	u.sessions++
	return u
}

func (h *Hub) track(s *Conn) {
	h.mu.Lock()
	h.sessions[s] = struct{}{}
	draining := h.draining
	h.mu.Unlock()
	if h.metrics != nil {
		h.metrics.SessionOpened()
	}
	if draining {
		s.drain()
	}
}

func (h *Hub) unregister(p auth.Principal, s *Conn) {
	h.mu.Lock()
	defer h.mu.Unlock()
	k := p.Owner()
	if u := h.perUser[k]; u.sessions <= 1 {
		delete(h.perUser, k) // its frames gave their bytes back as its sessions ended
	} else {
		u.sessions--
	}
	if s == nil {
		return
	}
	delete(h.sessions, s)
	if s.moved {
		h.moving--
	}
	if h.metrics != nil {
		h.metrics.SessionClosed()
	}
	if h.draining && len(h.sessions) == 0 {
		select {
		case <-h.idle:
		default:
			close(h.idle)
		}
	}
}

// Sessions is the number of open sessions.
func (h *Hub) Sessions() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.sessions)
}

// Staying is the number of open sessions not asked to move.
func (h *Hub) Staying() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.sessions) - h.moving
}

// MoveIdle asks up to n idle sessions (no request being delivered) to move
// to another server, those idle longest first, and returns how many it
// asked. Sessions younger than MoveMinAge, or that sent a frame within
// MoveQuiet, stay. A moved session is drained as at shutdown: a
// `draining` frame, new requests on it refused `draining`, and a close
// with 1001 once what it delivers has ended and it has been quiet for
// MoveLinger (its answers stay resumable). reason is
// telemetry.MoveBalance or telemetry.MoveBusy; at is logged with each move.
func (h *Hub) MoveIdle(n int, reason string, at fleet.Spread) int {
	if n <= 0 {
		return 0
	}
	h.mu.Lock()
	if h.draining {
		h.mu.Unlock()
		return 0
	}
	all := make([]*Conn, 0, len(h.sessions)-h.moving)
	for s := range h.sessions {
		if !s.moved {
			all = append(all, s)
		}
	}
	h.mu.Unlock()
	type candidate struct {
		s     *Conn
		since time.Time
	}
	now := h.opts.Now()
	idle := make([]candidate, 0, len(all))
	for _, s := range all {
		if since, ok := s.movable(now, h.opts.MoveMinAge, h.opts.MoveQuiet); ok {
			idle = append(idle, candidate{s, since})
		}
	}
	sort.Slice(idle, func(i, j int) bool { return idle[i].since.Before(idle[j].since) })
	moved := 0
	for _, c := range idle {
		if moved == n {
			break
		}
		if h.move(c.s, reason, at, true) {
			moved++
		}
	}
	return moved
}

// move drains one session for a move (with idleOnly, only if it has
// nothing in flight and no frame being read), counts and logs it; false
// if it was not moved.
func (h *Hub) move(s *Conn, reason string, at fleet.Spread, idleOnly bool) bool {
	if !s.startDrain(idleOnly) {
		return false
	}
	h.mu.Lock()
	if _, open := h.sessions[s]; open && !s.moved {
		s.moved = true
		h.moving++
	}
	h.mu.Unlock()
	h.metrics.SessionMoved(reason)
	s.logger.Info("session_moved", zap.String("reason", reason), zap.Int("sessions", at.Sessions),
		zap.Float64("fleet_mean", math.Round(at.Mean*10)/10), zap.Int("members", at.Members))
	go s.closeWhenQuiet(h.opts.MoveLinger)
	return true
}

// Drain refuses new upgrades (503 draining) and tells every session to
// move: a `draining` frame, and `error draining` for new requests.
func (h *Hub) Drain() {
	h.mu.Lock()
	if h.draining {
		h.mu.Unlock()
		return
	}
	h.draining = true
	all := make([]*Conn, 0, len(h.sessions))
	for s := range h.sessions {
		all = append(all, s)
	}
	if len(h.sessions) == 0 {
		close(h.idle)
	}
	h.mu.Unlock()
	for _, s := range all {
		s.drain()
	}
}

// Close ends every session with code 1001 once its followed requests have
// delivered their terminal frames, or at once when ctx ends. Call after Drain.
func (h *Hub) Close(ctx context.Context) error {
	h.mu.Lock()
	all := make([]*Conn, 0, len(h.sessions))
	for s := range h.sessions {
		all = append(all, s)
	}
	h.mu.Unlock()
	for _, s := range all {
		go s.closeWhenIdle(ctx)
	}
	select {
	case <-h.idle:
		return nil
	case <-ctx.Done():
		for _, s := range all {
			s.CloseNow(DisconnectShutdown)
		}
		return fmt.Errorf("close sessions: %w", ctx.Err())
	}
}

// AttachmentBytesHeld is what the attachment budget holds now.
func (h *Hub) AttachmentBytesHeld() int64 { return h.frames.budget.Used() }
