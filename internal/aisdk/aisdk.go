// Package aisdk is the AI SDK door (GET /v1/ai-sdk): the wire of the AI
// SDK's WebSocketChatTransport (package `ai` 7.x), a dialect over the
// shared socket lifecycle (internal/socket). A send's UI messages become
// the core's request, the core's events become UI message chunks (its
// codec), and a chat id maps to its latest response durably (Chats), so
// a resume on any server replays that response from sequence 0, live or
// ended within the resume window. PROTOCOL.md, "The AI SDK door".
package aisdk

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/jetway-gateway/jetway/internal/call"
	"github.com/jetway-gateway/jetway/internal/door"
	"github.com/jetway-gateway/jetway/internal/gateway"
	"github.com/jetway-gateway/jetway/internal/socket"
	"github.com/jetway-gateway/jetway/internal/stream"
)

// Path is the door's route.
const Path = "/v1/ai-sdk"

// Subprotocol is the protocol this door speaks (with bearer.<JWT> beside
// it for the token).
const Subprotocol = "jetway.ai-sdk.v1"

// Gateway runs the requests of the door's sockets.
type Gateway interface {
	Submit(ctx context.Context, c gateway.Caller, req gateway.Request) (log *stream.Log, from int, err error)
	Resume(ctx context.Context, c gateway.Caller, requestID string) (*stream.Log, error)
	Rejoin(ctx context.Context, c gateway.Caller, requestID string) (*stream.Log, error)
	Cancel(ctx context.Context, c gateway.Caller, requestID string) error
	Refuse(ctx context.Context, c gateway.Caller, req gateway.Request, err error) error
}

// Options bound the door.
type Options struct {
	// Retain is how long a chat remembers its latest response: as long as
	// the response may run, plus the resume window after it ends.
	Retain time.Duration
	// MaxStreams bounds the responses one socket delivers at once (sends
	// and resumes); past it a send or resume is refused rate_limited.
	MaxStreams int
}

// Defaults of Options.
const (
	DefaultRetain     = 30 * time.Minute
	DefaultMaxStreams = 32
)

// Door is the AI SDK dialect: mount it with socket.Hub.Handler.
type Door struct {
	gw    Gateway
	chats Chats
	opts  Options
	codec codec
}

// New returns the door over gw, its chats kept in chats.
func New(gw Gateway, chats Chats, o Options) *Door {
	if o.Retain <= 0 {
		o.Retain = DefaultRetain
	}
	if o.MaxStreams <= 0 {
		o.MaxStreams = DefaultMaxStreams
	}
	return &Door{gw: gw, chats: chats, opts: o, codec: codec{}}
}

// Subprotocol is jetway.ai-sdk.v1.
func (*Door) Subprotocol() string { return Subprotocol }

// SessionID is made by the socket: the transport names none.
func (*Door) SessionID(*http.Request) (string, error) { return "", nil }

// Open returns the handler of socket c.
func (d *Door) Open(c *socket.Conn) socket.Handler {
	return &chatSocket{d: d, c: c, streams: map[string]string{}, claimed: map[string]string{}}
}

// chatSocket is one transport's connection.
type chatSocket struct {
	d *Door
	c *socket.Conn

	mu        sync.Mutex
	streams   map[string]string // the transport's requestId -> the core request it delivers
	lastToken string            // the last token a frame's headers carried (verified)
	// claimed is the latest response of the chats this socket sent in,
	// as its own claims left them: a chat's next send then needs no read
	// of the index (a claim that finds another's latest is refused).
	claimed map[string]string
}

// maxClaimed bounds the chats a socket remembers its claims of.
const maxClaimed = 64

func (s *chatSocket) Opened()          {}
func (s *chatSocket) Expired()         {}
func (s *chatSocket) Draining() []byte { return nil }

// Refused answers a frame dropped for the attachment budget.
func (s *chatSocket) Refused(first []byte, err error) {
	if id := peekRequestID(first); id != "" {
		s.refusal(id, gateway.Failure(err))
	}
}

// inbound is a client frame, each field kept raw until its type is checked
// as the transport's own schema does (safeValidateWebSocketChatTransportRequest).
type inbound struct {
	Type         string          `json:"type"`
	RequestID    json.RawMessage `json:"requestId"`
	ID           json.RawMessage `json:"id"`
	Trigger      json.RawMessage `json:"trigger"`
	MessageID    json.RawMessage `json:"messageId"`
	Messages     json.RawMessage `json:"messages"`
	Headers      json.RawMessage `json:"headers"`
	Body         json.RawMessage `json:"body"`
	LastSequence json.RawMessage `json:"lastSequence"`
}

// request is a frame that passed the transport's schema.
type request struct {
	typ          string
	requestID    string
	chatID       string
	regenerate   bool
	messages     []uiMessage
	headers      map[string]string
	body         json.RawMessage
	lastSequence int
	files        bool // a user message has a file part
}

// errSchema is a frame that fails the transport's request schema.
var errSchema = errors.New("the frame does not pass the WebSocketChatTransport request schema")

// Invalid frames close the socket as the transport's reference server does.
var disconnectInvalid = socket.Disconnect{Code: 1008, Reason: "invalid frame: not a WebSocketChatTransport request"}

func (s *chatSocket) Frame(f *socket.Frame) bool {
	if !f.Text {
		s.c.Logger().Info("aisdk_invalid_frame", zap.String("why", "binary frame"))
		s.c.CloseAfterQueue(disconnectInvalid)
		return false
	}
	r, err := parse(f.Data)
	if err != nil {
		s.c.Logger().Info("aisdk_invalid_frame", zap.Error(err))
		s.c.CloseAfterQueue(disconnectInvalid)
		return false
	}
	if size := int64(len(f.Data)); size > s.c.PlainBound() && !(r.typ == "send" && r.files) {
		// Only a send with a file part may be larger than the plain bound;
		// the frame was read whole, so it is refused and the socket stays.
		err := call.Errorf(call.ErrInvalid, "the frame is %d bytes: frames without file parts may be at most %d bytes", size, s.c.PlainBound())
		req := gateway.Request{ReceivedAt: f.Received, Door: gateway.DoorAISDK}
		if r.typ == "send" {
			req.RequestID, req.IsRequest = door.NewID(), true // its usage record's
		}
		s.refuse(r, req, err)
		return true
	}
	if tok, ok := bearer(r.headers); ok && !s.refresh(r.requestID, tok) {
		return false
	}
	switch r.typ {
	case "abort":
		s.abort(r.requestID)
	case "resume":
		s.resume(r)
	case "send":
		s.send(r, f)
	}
	return true
}

// refresh takes a frame's token as the socket's credentials; false when it
// was refused (the socket then closes 4001 after the refusal).
func (s *chatSocket) refresh(requestID, token string) bool {
	s.mu.Lock()
	same := token == s.lastToken
	s.mu.Unlock()
	if same {
		return true
	}
	if _, err := s.c.Refresh(s.c.Context(), token); err != nil {
		s.refusal(requestID, call.Failure{Code: call.CodeUnauthorized, Message: "invalid token for this socket"})
		s.c.CloseAfterQueue(socket.DisconnectTokenRejected)
		return false
	}
	s.mu.Lock()
	s.lastToken = token
	s.mu.Unlock()
	return true
}

func (s *chatSocket) send(r request, f *socket.Frame) {
	ctx, caller := s.c.Context(), s.c.Caller()
	owner := caller.Principal.Owner()
	coreID := door.NewID()
	base := gateway.Request{RequestID: coreID, IsRequest: true, ReceivedAt: f.Received, Door: gateway.DoorAISDK}
	if !validChatID(r.chatID) {
		s.refuse(r, base, call.FieldErrorf(call.ErrInvalid, "id", " must be 8-128 characters of [A-Za-z0-9_-] (the chat id)"))
		return
	}
	if !s.claimStream(r.requestID) {
		return
	}
	delivered := false
	defer func() {
		if !delivered {
			s.dropStream(r.requestID)
		}
	}()
	s.c.Admitting(true)
	defer s.c.Admitting(false)
	cr, err := translate(coreID, r.messages, r.body, r.regenerate)
	if err != nil {
		s.refuse(r, base, err)
		return
	}
	s.mu.Lock()
	latest, known := s.claimed[r.chatID]
	s.mu.Unlock()
	if !known {
		cur, err := s.d.chats.Latest(ctx, owner, r.chatID)
		if err != nil {
			s.refuse(r, base, fmt.Errorf("%w: the chat index: %w", gateway.ErrBusy, err))
			return
		}
		latest = cur.RequestID
	}
	if latest != "" {
		if log, err := s.d.gw.Rejoin(ctx, caller, latest); err == nil && log.Ended().IsZero() {
			s.refusal(r.requestID, call.Failure{Code: call.CodeConflict,
				Message: "this chat has a response in flight: resume it, or abort it, before sending"})
			return
		}
	}
	// The claim runs beside the admission: its round trip is not the
	// answer's. A claim that loses (another send of this chat won the
	// race) cancels what was admitted, before the model's first token.
	resp := Response{RequestID: coreID, MessageID: continued(r)}
	claimed := make(chan error, 1)
	go func() {
		claimed <- s.d.chats.Claim(ctx, owner, r.chatID, latest, resp, time.Now().Add(s.d.opts.Retain))
	}()
	req := base
	req.Request = cr
	req.Release = f.Keep(req.Features().AttachmentBytes)
	log, _, err := s.d.gw.Submit(ctx, caller, req)
	claimErr := <-claimed
	s.remember(r.chatID, coreID, claimErr == nil)
	if err != nil {
		s.refusal(r.requestID, gateway.Failure(s.c.MoveIfBusy(err)))
		return
	}
	if claimErr != nil {
		if cerr := s.d.gw.Cancel(context.WithoutCancel(ctx), caller, coreID); cerr != nil {
			s.c.Logger().Warn("aisdk_cancel_failed", zap.String("request_id", coreID), zap.Error(cerr))
		}
		if errors.Is(claimErr, ErrChatMoved) {
			s.refusal(r.requestID, call.Failure{Code: call.CodeConflict,
				Message: "this chat has a newer response: resume it before sending"})
			return
		}
		s.refusal(r.requestID, gateway.Failure(fmt.Errorf("%w: the chat index: %w", gateway.ErrBusy, claimErr)))
		return
	}
	delivered = true
	s.follow(r.requestID, log, -1, resp.MessageID)
}

// continued is the UI message a send continues: the last message's, when
// it is the assistant's (a client tool's output, or an approval, sent
// back to go on), as the AI SDK's own server answers; "" otherwise (a new
// message, MessageID of the request).
func continued(r request) string {
	if n := len(r.messages); n > 0 && !r.regenerate && r.messages[n-1].Role == "assistant" {
		return r.messages[n-1].ID
	}
	return ""
}

func (s *chatSocket) resume(r request) {
	ctx, caller := s.c.Context(), s.c.Caller()
	if !validChatID(r.chatID) {
		s.noActive(r.requestID)
		return
	}
	s.c.Admitting(true)
	defer s.c.Admitting(false)
	latest, err := s.d.chats.Latest(ctx, caller.Principal.Owner(), r.chatID)
	if err != nil {
		s.refusal(r.requestID, gateway.Failure(fmt.Errorf("%w: the chat index: %w", gateway.ErrBusy, err)))
		return
	}
	if latest.RequestID == "" {
		s.noActive(r.requestID)
		return
	}
	if !s.claimStream(r.requestID) {
		return
	}
	log, err := s.d.gw.Resume(ctx, caller, latest.RequestID)
	if err != nil {
		s.dropStream(r.requestID)
		if f := gateway.Failure(err); f.Code == call.CodeNotFound {
			s.noActive(r.requestID)
		} else {
			s.refusal(r.requestID, f)
		}
		return
	}
	s.c.Send(s.frameFor("start", r.requestID))
	s.follow(r.requestID, log, r.lastSequence, latest.MessageID)
}

// remember keeps the chat's latest response as this socket's claim left
// it; a lost claim forgets the chat (the index knows better).
func (s *chatSocket) remember(chatID, requestID string, won bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !won {
		delete(s.claimed, chatID)
		return
	}
	if _, ok := s.claimed[chatID]; !ok && len(s.claimed) >= maxClaimed {
		clear(s.claimed)
	}
	s.claimed[chatID] = requestID
}

// abort cancels the response a requestId of this socket delivers; an
// unknown or finished one is ignored.
func (s *chatSocket) abort(requestID string) {
	s.mu.Lock()
	coreID, ok := s.streams[requestID]
	s.mu.Unlock()
	if !ok {
		return
	}
	if err := s.d.gw.Cancel(s.c.Context(), s.c.Caller(), coreID); err != nil {
		s.c.Logger().Info("aisdk_abort_failed", zap.String("request_id", coreID), zap.Error(err))
	}
}

// claimStream registers a delivery for requestId (its core request is
// set by follow); false, with the refusal sent, when the id is in use on
// this socket or the socket delivers MaxStreams already.
func (s *chatSocket) claimStream(requestID string) bool {
	s.mu.Lock()
	_, used := s.streams[requestID]
	full := len(s.streams) >= s.d.opts.MaxStreams
	if !used && !full {
		s.streams[requestID] = ""
	}
	s.mu.Unlock()
	switch {
	case used:
		s.refusal(requestID, call.Failure{Code: call.CodeConflict, Message: "requestId is in use on this socket: use a new one"})
		return false
	case full:
		s.refusal(requestID, gateway.Failure(call.Errorf(gateway.ErrRateLimited,
			"this socket delivers %d responses at once (its bound): send when one has ended", s.d.opts.MaxStreams)))
		return false
	}
	return true
}

func (s *chatSocket) dropStream(requestID string) {
	s.mu.Lock()
	delete(s.streams, requestID)
	s.mu.Unlock()
}

// follow delivers log to requestId from its first chunk, its UI message
// messageID ("": the request's); chunks up to lastSequence are skipped.
func (s *chatSocket) follow(requestID string, log *stream.Log, lastSequence int, messageID string) {
	s.mu.Lock()
	s.streams[requestID] = log.RequestID
	s.mu.Unlock()
	fr := newFrames(requestID, lastSequence, messageID)
	s.c.Follow(requestID, log, 0, true, s.d.codec, func(b *stream.Batch, out *socket.Out) bool {
		ok := fr.delivery(b, out)
		if b.Terminal != nil || !ok {
			s.dropStream(requestID)
		}
		return ok
	})
}

// refuse answers a frame the door or the core refused, through the
// gateway's refusal path (a `rejected` line, the refusal budget, a
// refused send's usage record).
func (s *chatSocket) refuse(r request, req gateway.Request, err error) {
	err = s.d.gw.Refuse(s.c.Context(), s.c.Caller(), req, err)
	s.refusal(r.requestID, gateway.Failure(err))
}

// refusal sends a refusal's frames: the metadata chunk, then error.
func (s *chatSocket) refusal(requestID string, f call.Failure) {
	for _, fr := range refusal(requestID, f) {
		s.c.Send(fr)
	}
}

func (s *chatSocket) noActive(requestID string) { s.c.Send(s.frameFor("no-active", requestID)) }

func (s *chatSocket) frameFor(typ, requestID string) []byte {
	b := append([]byte(`{"type":"`), typ...)
	b = append(b, `","requestId":`...)
	b = appendString(b, requestID)
	return append(b, '}')
}

// parse checks a frame against the transport's request schema.
func parse(data []byte) (request, error) {
	var in inbound
	if err := json.Unmarshal(data, &in); err != nil {
		return request{}, fmt.Errorf("%w: not a JSON object (%s)", errSchema, jsonProblem(err))
	}
	r := request{typ: in.Type, lastSequence: -1}
	if !str(in.RequestID, &r.requestID) {
		return request{}, fmt.Errorf("%w: requestId must be a string", errSchema)
	}
	if r.typ == "abort" {
		return r, nil
	}
	if r.typ != "send" && r.typ != "resume" {
		return request{}, fmt.Errorf("%w: type must be send, resume or abort", errSchema)
	}
	if !str(in.ID, &r.chatID) {
		return request{}, fmt.Errorf("%w: id must be a string", errSchema)
	}
	if err := json.Unmarshal(in.Headers, &r.headers); err != nil || r.headers == nil {
		return request{}, fmt.Errorf("%w: headers must be an object of strings", errSchema)
	}
	if !object(in.Body) {
		return request{}, fmt.Errorf("%w: body must be an object", errSchema)
	}
	r.body = in.Body
	if r.typ == "resume" {
		if present(in.LastSequence) {
			var n int64
			if err := json.Unmarshal(in.LastSequence, &n); err != nil || n < 0 || n > 1<<53 {
				return request{}, fmt.Errorf("%w: lastSequence must be a non-negative integer", errSchema)
			}
			r.lastSequence = int(n)
		}
		return r, nil
	}
	var trigger string
	if !str(in.Trigger, &trigger) || (trigger != "submit-message" && trigger != "regenerate-message") {
		return request{}, fmt.Errorf("%w: trigger must be submit-message or regenerate-message", errSchema)
	}
	r.regenerate = trigger == "regenerate-message"
	var messageID string
	if present(in.MessageID) && !str(in.MessageID, &messageID) {
		return request{}, fmt.Errorf("%w: messageId must be a string", errSchema)
	}
	if err := json.Unmarshal(in.Messages, &r.messages); err != nil || r.messages == nil || len(r.messages) == 0 {
		return request{}, fmt.Errorf("%w: messages must be a non-empty array of UI messages", errSchema)
	}
	for i, m := range r.messages {
		if m.ID == "" || (m.Role != "system" && m.Role != "user" && m.Role != "assistant") || len(m.Parts) == 0 {
			return request{}, fmt.Errorf("%w: messages[%d] must have an id, a role (system, user, assistant) and parts (at least one)", errSchema, i)
		}
		for j, p := range m.Parts {
			if p.Type == "" {
				return request{}, fmt.Errorf("%w: messages[%d].parts[%d] has no type", errSchema, i, j)
			}
			if p.Type == "file" {
				r.files = true
			}
		}
	}
	return r, nil
}

func present(raw json.RawMessage) bool { return len(raw) > 0 && string(raw) != "null" }

func str(raw json.RawMessage, dst *string) bool {
	return len(raw) > 0 && raw[0] == '"' && json.Unmarshal(raw, dst) == nil
}

func object(raw json.RawMessage) bool { return len(raw) > 0 && raw[0] == '{' }

// bearer is the token a frame's headers carry (authorization: Bearer <JWT>).
func bearer(h map[string]string) (string, bool) {
	for k, v := range h {
		if strings.EqualFold(k, "authorization") {
			tok, ok := strings.CutPrefix(strings.TrimSpace(v), "Bearer ")
			return strings.TrimSpace(tok), ok && tok != ""
		}
	}
	return "", false
}

var chatIDPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{8,128}$`)

func validChatID(id string) bool { return chatIDPattern.MatchString(id) }

// peekRequestID finds the requestId in a frame's first bytes (the
// transport writes it second, after the type).
func peekRequestID(first []byte) string {
	i := bytes.Index(first, []byte(`"requestId":"`))
	if i < 0 {
		return ""
	}
	rest := first[i+len(`"requestId":"`):]
	j := bytes.IndexByte(rest, '"')
	if j < 0 || j > 256 {
		return ""
	}
	return string(rest[:j])
}
