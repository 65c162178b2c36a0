// Package session is the jetway.v1 WebSocket door (GET /v1/ws): a
// dialect over the shared socket lifecycle (internal/socket). It decodes
// jetway.v1 frames, hands requests, resumes and cancels to the gateway,
// and writes the core's events as jetway.v1 frames; it knows nothing of
// quotas or models.
package session

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/jetway-gateway/jetway/internal/call"
	"github.com/jetway-gateway/jetway/internal/gateway"
	"github.com/jetway-gateway/jetway/internal/protocol"
	"github.com/jetway-gateway/jetway/internal/socket"
	"github.com/jetway-gateway/jetway/internal/stream"
	"github.com/jetway-gateway/jetway/internal/tracing"
)

// Gateway runs the requests a session receives.
type Gateway interface {
	Submit(ctx context.Context, c gateway.Caller, req gateway.Request) (log *stream.Log, from int, err error)
	Resume(ctx context.Context, c gateway.Caller, requestID string) (*stream.Log, error)
	Rejoin(ctx context.Context, c gateway.Caller, requestID string) (*stream.Log, error)
	Cancel(ctx context.Context, c gateway.Caller, requestID string) error
	Refuse(ctx context.Context, c gateway.Caller, req gateway.Request, err error) error
}

// Door is the jetway.v1 dialect: mount it with socket.Hub.Handler.
type Door struct {
	gw Gateway
}

// New returns the jetway.v1 door over gw.
func New(gw Gateway) *Door { return &Door{gw: gw} }

// Subprotocol is jetway.v1.
func (*Door) Subprotocol() string { return protocol.Subprotocol }

// errSessionID refuses a session_id that is not an id.
var errSessionID = errors.New("session_id must be 8-64 characters of [A-Za-z0-9_-]")

// SessionID is the upgrade's session_id: the one a client reconnects with.
func (*Door) SessionID(r *http.Request) (string, error) {
	id := r.URL.Query().Get("session_id")
	if id != "" && !protocol.ValidID(id) {
		return "", errSessionID
	}
	return id, nil
}

// Open returns the session of socket c.
func (d *Door) Open(c *socket.Conn) socket.Handler { return &Session{gw: d.gw, c: c} }

// Session is one jetway.v1 connection: one chat session of one user.
type Session struct {
	gw Gateway
	c  *socket.Conn
}

// Opened sends ready.
func (s *Session) Opened() {
	p := s.c.Principal()
	s.c.Send(protocol.Encode(protocol.Ready{Type: protocol.TypeReady, SessionID: s.c.ID(), User: p.Subject,
		Tenant: p.Tenant, App: p.App, Protocol: protocol.Subprotocol, HeartbeatS: int(s.c.Heartbeat() / time.Second),
		ExpiresAt: protocol.Timestamp(p.ExpiresAt)}))
}

// Refused answers a request whose frame was dropped for the attachment
// budget, with the request id its first bytes name.
func (s *Session) Refused(first []byte, err error) {
	s.sendError(protocol.PeekRequestID(first), gateway.Failure(err))
}

// Expired says the token ran out, before the close.
func (s *Session) Expired() {
	s.sendError("", call.Failure{Code: protocol.CodeUnauthorized, Message: "token expired: reconnect with a fresh token"})
}

// Draining asks the client to reconnect elsewhere and resume.
func (s *Session) Draining() []byte {
	return protocol.Encode(protocol.Draining{Type: protocol.TypeDraining,
		ReconnectAfterMs: s.c.ReconnectAfter().Milliseconds()})
}

// Frame decodes and handles one frame; false when it closed the socket.
// A request holds its decoded attachments' share of the attachment budget
// until its model call ends (Request.Release, from Frame.Keep).
func (s *Session) Frame(f *socket.Frame) bool {
	size := int64(len(f.Data))
	if !f.Text {
		s.refuse(gateway.Request{ReceivedAt: f.Received}, call.Errorf(call.ErrInvalid, "frames must be JSON text frames"))
		return true
	}
	in, err := protocol.Decode(f.Data)
	req := frameRequest(in, f.Received) // translated once: its features, its refusal or the request
	feat := req.Features()
	if size > s.c.PlainBound() && (!req.IsRequest || feat.Images+feat.Documents == 0) {
		// Only a request's image or document may make a frame larger than
		// the plain bound; otherwise it is refused as every oversized frame is.
		s.c.TooBig(size)
		return false
	}
	if err != nil {
		s.refuse(req, err)
		return true
	}
	if req.IsRequest {
		req.Release = f.Keep(feat.AttachmentBytes)
	}
	s.handle(in, req)
	return true
}

// refuse answers a frame that failed validation, through the gateway's
// refusal path (a `rejected` line, the user's refusal budget, and for a
// request its usage record); the socket stays open.
func (s *Session) refuse(req gateway.Request, err error) {
	err = s.gw.Refuse(s.c.Context(), s.c.Caller(), req, err)
	s.sendError(req.RequestID, gateway.Failure(err))
}

// handle handles a decoded frame; req is its translation, for a request
// (whose Release, when set, is called here if it goes no further).
func (s *Session) handle(in protocol.Inbound, req gateway.Request) {
	ctx := s.c.Context()
	switch in.Type {
	case protocol.TypePing:
		s.c.Send(protocol.Encode(protocol.Pong{Type: protocol.TypePong, T: in.T}))
	case protocol.TypeAuth:
		s.refresh(in.Token)
	case protocol.TypeCancel:
		if err := s.gw.Cancel(ctx, s.c.Caller(), in.RequestID); err != nil {
			s.sendError(in.RequestID, gateway.Failure(err))
		}
	case protocol.TypeResume:
		s.c.Admitting(true)
		defer s.c.Admitting(false)
		log, err := s.gw.Resume(ctx, s.c.Caller(), in.RequestID)
		if err != nil {
			s.sendError(in.RequestID, gateway.Failure(err))
			return
		}
		s.follow(log, in.AfterSeq, false)
	case protocol.TypeRequest:
		draining := s.c.Admitting(true)
		defer s.c.Admitting(false)
		if draining {
			if req.Release != nil {
				req.Release()
			}
			if log, err := s.gw.Rejoin(ctx, s.c.Caller(), in.RequestID); err == nil {
				// A re-send of a request this server knows is a resume, even while draining.
				s.follow(log, in.AfterSeq, true)
				return
			}
			s.sendError(in.RequestID, gateway.Failure(gateway.ErrDraining))
			return
		}
		log, from, err := s.gw.Submit(ctx, s.c.Caller(), req)
		if err != nil {
			s.sendError(in.RequestID, gateway.Failure(s.c.MoveIfBusy(err)))
			return
		}
		s.follow(log, from, true)
	}
}

// follow delivers a request's log in jetway.v1 frames, one frame per event.
func (s *Session) follow(log *stream.Log, after int, withAccepted bool) {
	s.c.Follow(log.RequestID, log, after, withAccepted, frames{}, nil)
}

// refresh replaces the session's credentials (same user required).
func (s *Session) refresh(token string) {
	p, err := s.c.Refresh(s.c.Context(), token)
	if err != nil {
		s.sendError("", call.Failure{Code: protocol.CodeUnauthorized, Message: "invalid token for this session"})
		s.c.CloseAfterQueue(socket.DisconnectTokenRejected)
		return
	}
	s.c.Send(protocol.Encode(protocol.AuthOK{Type: protocol.TypeAuthOK, ExpiresAt: protocol.Timestamp(p.ExpiresAt)}))
}

func (s *Session) sendError(requestID string, e call.Failure) {
	e.RequestID = requestID
	if e.Status == 0 {
		e.Status = call.Status(e.Code)
	}
	s.c.Send(protocol.Encode(protocol.ErrorFrame(&e)))
}

// frameRequest is the core's request for a jetway.v1 frame: one that passed
// validation, or the part of one that failed it, for its refusal.
func frameRequest(in protocol.Inbound, received time.Time) gateway.Request {
	return gateway.Request{Request: in.Call(), RequestID: in.RequestID, AfterSeq: in.AfterSeq,
		IsRequest: in.Type == protocol.TypeRequest, ReceivedAt: received, Trace: tracing.Parse(in.TraceParent())}
}

// frames is the jetway.v1 codec: the accepted and terminal events'
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
