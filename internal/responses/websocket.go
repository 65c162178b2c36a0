package responses

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/jetway-gateway/jetway/internal/call"
	"github.com/jetway-gateway/jetway/internal/door"
	"github.com/jetway-gateway/jetway/internal/gateway"
	"github.com/jetway-gateway/jetway/internal/socket"
	"github.com/jetway-gateway/jetway/internal/stream"
)

// # WebSocket mode
//
// GET /v1/responses upgraded: the client sends response.create events
// (a create body less stream and background) and gets the same typed
// events as the HTTP stream, one per message. One response is in flight
// per socket, as on OpenAI: a second response.create meanwhile is an
// error event (response_in_flight), and the first goes on. The socket
// remembers the conversation of the responses it ran, so
// previous_response_id continues with no store read, even with
// store:false; and every response is also kept in the Store (store:false
// for the resume window), so a new socket, on any server, continues the
// chain too. Beyond OpenAI, response.resume {response_id, starting_after}
// replays a response's events after a sequence_number, then goes on live:
// an in-flight turn survives a dropped socket (docs/responses.md).

// Subprotocol is offered beside bearer.<JWT> by a browser; other clients
// send the Authorization header and no subprotocol.
const Subprotocol = "jetway.responses.v1"

// maxChains bounds the conversations a socket remembers.
const maxChains = 16

// Subprotocol is the door's WebSocket protocol.
func (*Door) Subprotocol() string { return Subprotocol }

// SessionID is made by the socket.
func (*Door) SessionID(*http.Request) (string, error) { return "", nil }

// Open returns the handler of socket c.
func (d *Door) Open(c *socket.Conn) socket.Handler {
	return &wsConn{d: d, c: c, chains: map[string][]json.RawMessage{}}
}

type wsConn struct {
	d *Door
	c *socket.Conn

	mu       sync.Mutex
	inflight string                       // the response being delivered ("" none)
	chains   map[string][]json.RawMessage // response id -> its conversation with its output
}

// Opened arms the connection's age limit.
func (s *wsConn) Opened() {
	go func() {
		t := time.NewTimer(s.d.opts.MaxConnectionAge)
		defer t.Stop()
		select {
		case <-t.C:
			s.c.Send(wsError(apiError{status: http.StatusBadRequest, code: "websocket_connection_limit_reached",
				msg: "Responses websocket connection limit reached (" + s.d.opts.MaxConnectionAge.String() + "). Create a new websocket connection to continue."}, ""))
			s.c.CloseAfterQueue(socket.Disconnect{Code: 1000, Reason: "connection limit reached"})
		case <-s.c.Context().Done():
		}
	}()
}

func (s *wsConn) Expired()         {}
func (s *wsConn) Draining() []byte { return nil }

// Refused answers a frame dropped for the attachment budget.
func (s *wsConn) Refused(_ []byte, err error) {
	s.c.Send(wsError(fromProtocol(gateway.Failure(err)), ""))
}

// event is a client event's type and the fields Jetway's own events use.
type event struct {
	Type          string          `json:"type"`
	ResponseID    string          `json:"response_id"`
	StartingAfter json.RawMessage `json:"starting_after"`
}

func (s *wsConn) Frame(f *socket.Frame) bool {
	if !f.Text {
		s.c.Send(wsError(badParam("", "binary messages are not served: send JSON events as text").api(), ""))
		return true
	}
	if size := int64(len(f.Data)); size > s.c.PlainBound() && !bytes.Contains(f.Data, []byte(`"input_image"`)) && !bytes.Contains(f.Data, []byte(`"input_file"`)) {
		s.c.Send(wsError(badParam("", "the event is %d bytes: events without images or files may be at most %d bytes", size, s.c.PlainBound()).api(), ""))
		return true
	}
	var ev event
	if err := json.Unmarshal(f.Data, &ev); err != nil {
		s.c.Send(wsError(badParam("", "the event is not a JSON object: %s", door.JSONProblem(err)).api(), ""))
		return true
	}
	switch ev.Type {
	case "response.create":
		s.create(f)
	case "response.resume":
		s.resume(ev)
	case "":
		s.c.Send(wsError(badParam("type", "type is required (response.create)").api(), ""))
	default:
		s.c.Send(wsError(badParam("type", "unknown event type %q: response.create (and Jetway's response.resume)", clipped(ev.Type)).api(), ""))
	}
	return true
}

func (e *requestError) api() apiError {
	return apiError{status: http.StatusBadRequest, code: e.code, param: e.param, msg: e.msg}
}

func clipped(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// wsError is an error event (OpenAI's WebSocket mode shape).
func wsError(e apiError, requestID string) []byte {
	b, _ := json.Marshal(struct {
		Type   string      `json:"type"`
		Status int         `json:"status"`
		Error  errorDetail `json:"error"`
	}{"error", e.status, e.detail(requestID)})
	return b
}

// claim makes requestID the socket's response in flight; false when one is.
func (s *wsConn) claim(requestID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inflight != "" {
		return false
	}
	s.inflight = requestID
	return true
}

func (s *wsConn) release(requestID string) {
	s.mu.Lock()
	if s.inflight == requestID {
		s.inflight = ""
	}
	s.mu.Unlock()
}

// memory is the socket's conversation of a response it ran.
func (s *wsConn) memory(responseID string) []json.RawMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.chains[responseID]
}

func (s *wsConn) remember(requestID string, conversation []json.RawMessage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.chains) >= maxChains {
		clear(s.chains)
	}
	s.chains[ResponseID(requestID)] = conversation
}

func (s *wsConn) create(f *socket.Frame) {
	ctx, caller := s.c.Context(), s.c.Caller()
	requestID := door.NewID()
	if !s.claim(requestID) {
		s.c.Send(wsError(apiError{status: http.StatusBadRequest, code: "response_in_flight",
			msg: "a response is in progress on this connection: send response.create once it has ended (one at a time)"}, ""))
		return
	}
	delivered := false
	defer func() {
		if !delivered {
			s.release(requestID)
		}
	}()
	s.c.Admitting(true)
	defer s.c.Admitting(false)
	base := gateway.Request{RequestID: requestID, IsRequest: true, ReceivedAt: f.Received, Door: gateway.DoorResponses}
	p, err := s.d.parse(f.Data, requestID, true)
	if err == nil && p.b.Generate != nil && !*p.b.Generate {
		s.warmUp(ctx, caller, p, f.Received)
		return
	}
	if err == nil {
		err = s.d.prepareWith(ctx, caller, p, s.memory)
	}
	if err != nil {
		req := p.Request()
		req.RequestID, req.IsRequest, req.ReceivedAt, req.Door = requestID, true, f.Received, gateway.DoorResponses
		err = s.d.gw.Refuse(ctx, caller, req, err)
		s.c.Send(wsError(answerOf(err, p.Names()), requestID))
		return
	}
	p.Log(s.d.log.With(zap.String("request_id", requestID), zap.String("session_id", s.c.ID())))
	req := p.Request()
	req.ReceivedAt, req.Door = base.ReceivedAt, base.Door
	req.Release = f.Keep(req.Features().AttachmentBytes)
	log, _, err := s.d.gw.Submit(ctx, caller, req)
	if err != nil {
		s.c.Send(wsError(fromProtocol(gateway.Failure(s.c.MoveIfBusy(err))).named(p.names), requestID))
		return
	}
	s.d.keep(ctx, caller, p, log, nil)
	delivered = true
	s.follow(log, -1, p.conversation)
}

// warmUp answers generate:false: a response with no output and no model
// call, whose conversation the next response.create continues.
func (s *wsConn) warmUp(ctx context.Context, caller gateway.Caller, p *parsed, received time.Time) {
	if err := s.d.prepareWith(ctx, caller, p, s.memory); err != nil {
		s.c.Send(wsError(answerOf(err, p.Names()), p.requestID))
		return
	}
	log := stream.NewLog(caller.Principal.Owner(), p.requestID, "", received)
	e := s.d.lines.NewEncoder(log).(*encoder)
	e.model = p.in.Model
	obj := e.object("in_progress", nil, nil, nil)
	s.c.Send(bytes.TrimSuffix(e.event(nil, "response.created", func(dst []byte) []byte { return appendField(dst, "response", obj) }), []byte("\n")))
	obj = e.object("completed", &call.Usage{}, nil, nil)
	ended, _ := json.Marshal(obj)
	s.d.keep(ctx, caller, p, log, ended)
	s.remember(p.requestID, p.conversation)
	s.release(p.requestID) // before the ending: the next create may follow at once
	s.c.Send(bytes.TrimSuffix(e.event(nil, "response.completed", func(dst []byte) []byte { return appendField(dst, "response", obj) }), []byte("\n")))
}

// resume is Jetway's response.resume: the events of a response of this
// user (any server's, within the resume window) after starting_after.
func (s *wsConn) resume(ev event) {
	reqID, ok := requestIDOf(ev.ResponseID)
	if !ok {
		s.c.Send(wsError(badParam("response_id", "response_id must be a response id of this gateway (resp_...)").api(), ""))
		return
	}
	after := -1
	if len(ev.StartingAfter) > 0 && string(ev.StartingAfter) != "null" {
		n, err := strconv.Atoi(string(ev.StartingAfter))
		if err != nil || n < 0 {
			s.c.Send(wsError(badParam("starting_after", "starting_after must be a sequence_number (an integer >= 0)").api(), ""))
			return
		}
		after = n
	}
	if !s.claim(reqID) {
		s.c.Send(wsError(apiError{status: http.StatusBadRequest, code: "response_in_flight",
			msg: "a response is in progress on this connection: resume once it has ended (one at a time)"}, ""))
		return
	}
	log, err := s.d.gw.Resume(s.c.Context(), s.c.Caller(), reqID)
	if err != nil {
		s.release(reqID)
		e := fromProtocol(gateway.Failure(err))
		if e.code == call.CodeNotFound {
			e.msg = "Response with id " + strconv.Quote(ev.ResponseID) + " not found."
		}
		s.c.Send(wsError(e, reqID))
		return
	}
	if log.Ended().IsZero() == false {
		if n := s.d.countLines(log); after+1 > n {
			s.release(reqID)
			s.c.Send(wsError(badParam("starting_after", "starting_after is %d: the stream's last sequence_number is %d", after, n-1).api(), reqID))
			return
		}
	}
	var conversation []json.RawMessage
	sctx, cancel := context.WithTimeout(s.c.Context(), s.d.opts.StoreTimeout)
	if st, err := s.d.store.Get(sctx, s.c.Caller().Principal.Owner(), reqID); err == nil && st != nil {
		conversation = st.Items
	}
	cancel()
	s.follow(log, after, conversation)
}

// countLines is how many events an ended log has.
func (d *Door) countLines(log *stream.Log) int {
	n := 0
	for b := range log.Follow(context.Background(), d.lines, 0) {
		n += bytes.Count(b.AcceptedBytes, []byte("\n")) + bytes.Count(b.TerminalBytes, []byte("\n"))
		for i := range b.Chunks.Len() {
			n += bytes.Count(b.Chunks.At(i), []byte("\n"))
		}
	}
	return n
}

// follow delivers the log's events after sequence_number `after`, one per
// message; at the end the socket remembers the conversation with the
// response's output (conversation nil: not continued from memory).
func (s *wsConn) follow(log *stream.Log, after int, conversation []json.RawMessage) {
	skip := after + 1
	s.c.Follow(log.RequestID, log, 0, true, s.d.lines, func(b *stream.Batch, out *socket.Out) bool {
		if b.Accepted != nil && !out.Accepted(nil) {
			return false
		}
		var frames [][]byte
		add := func(enc []byte) {
			for len(enc) > 0 {
				i := bytes.IndexByte(enc, '\n')
				if i < 0 {
					return
				}
				line := enc[:i:i]
				enc = enc[i+1:]
				if skip > 0 {
					skip--
					continue
				}
				frames = append(frames, line)
			}
		}
		add(b.AcceptedBytes)
		for i := range b.Chunks.Len() {
			add(b.Chunks.At(i))
		}
		add(b.TerminalBytes)
		if b.Terminal != nil && skip > 0 {
			// The client saw more than the log holds (a survivor's log
			// has what its owner saved): it still gets the ending.
			frames = append(frames, bytes.TrimSuffix(lastEvent(b.TerminalBytes, "\n"), []byte("\n")))
		}
		if b.Terminal != nil {
			// Before the ending goes out: a client that has it may send
			// its next response.create at once.
			if b.Terminal.Done != nil && conversation != nil {
				s.remember(log.RequestID, append(conversation[:len(conversation):len(conversation)], outputOf(b.TerminalBytes)...))
			}
			s.release(log.RequestID)
		}
		ok := out.Frames(frames)
		if !ok {
			s.release(log.RequestID)
		}
		return ok
	})
}

// outputOf is the output items of a terminal event's response.
func outputOf(terminal []byte) []json.RawMessage {
	i := bytes.LastIndexByte(bytes.TrimRight(terminal, "\n"), '\n')
	line := terminal[i+1:]
	var ev struct {
		Response struct {
			Output []json.RawMessage `json:"output"`
		} `json:"response"`
	}
	if json.Unmarshal(line, &ev) != nil {
		return nil
	}
	return ev.Response.Output
}
