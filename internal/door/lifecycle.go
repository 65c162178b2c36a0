package door

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/jetway-gateway/jetway/internal/auth"
	"github.com/jetway-gateway/jetway/internal/call"
	"github.com/jetway-gateway/jetway/internal/config"
	"github.com/jetway-gateway/jetway/internal/gateway"
	"github.com/jetway-gateway/jetway/internal/protocol"
	"github.com/jetway-gateway/jetway/internal/stream"
	"github.com/jetway-gateway/jetway/internal/telemetry"
	"github.com/jetway-gateway/jetway/internal/tracing"
)

// Gateway runs the requests an HTTP door receives. Submit has the
// WebSocket request's rules: a known request id with the same body
// returns the existing log (no second model call); another body is a
// conflict. Refuse is the refusal of a body that failed the door's
// checks: the rejected line, the user's refusal budget and the usage
// record every client-caused refusal has. It returns err, or the
// rate_limited that replaces it past the budget.
type Gateway interface {
	Submit(ctx context.Context, c gateway.Caller, req gateway.Request) (log *stream.Log, from int, err error)
	Refuse(ctx context.Context, c gateway.Caller, req gateway.Request, err error) error
}

// Answer is an error in a door's own shape, ready to be the whole response.
type Answer interface {
	HTTPStatus() int
	ErrorCode() string // Jetway's code, for the log
	Write(w http.ResponseWriter)
}

// Parsed is a body a dialect turned into the core's request.
type Parsed interface {
	// Request is the core's request (the part read so far, when the
	// body was refused).
	Request() gateway.Request
	// Codec encodes the answer: Server-Sent Events when sse, else one body.
	Codec() (c stream.Codec, sse bool)
	// Log logs what the body tells the operator (may do nothing).
	Log(logger *zap.Logger)
	// Names names the request's fields in the dialect's terms.
	Names() Namer
}

// Namer names a field of the core's request, as its validation names it
// (call.ClientError), in a door's own terms; ok is false for a field
// it does not know.
type Namer interface {
	Name(p call.Path) (name string, ok bool)
}

// headers names a request header the lifecycle refuses as itself.
type headers struct{}

func (headers) Name(p call.Path) (string, bool) { return p.String(), true }

// Dialect is what an HTTP door supplies to the one lifecycle (its
// endpoint spec): the rest, from sign-in to the slow-consumer cut, is
// Lifecycle's.
type Dialect[R Parsed] struct {
	Door            string   // gateway.DoorOpenAI, ...: metrics, logs, records
	RequestIDHeader string   // the response header naming the request
	Also            []Source // where the token may be besides Authorization
	// Parse turns a body into the core's request. Its error is handed to
	// the gateway's refusal as it is, and answered through Invalid.
	Parse func(body []byte, requestID string) (R, error)
	// Invalid is the answer to Parse's error, in the dialect's names.
	Invalid func(err error, names Namer) Answer
	// Refusal is the answer to a protocol error before any stream began;
	// status, when not 0, is the HTTP status the lifecycle chose (a body
	// too large, or too slow). names (nil: none) names the field an
	// invalid request names.
	Refusal func(f call.Failure, status int, names Namer) Answer
	// RefuseUnstartedResume: a resume whose log never accepted the request
	// and ended in an error is answered with the error's status, as a new
	// request is, rather than as a stream (Anthropic: a stream has to
	// begin with its message_start).
	RefuseUnstartedResume bool
	// Prepare, when set, completes a parsed body with what the caller's
	// own state holds (the Responses door's previous_response_id and its
	// app's policy) before it is submitted; its error is refused as
	// Parse's is, through Invalid.
	Prepare func(ctx context.Context, c gateway.Caller, parsed R) error
	// Submitted, when set, runs once the gateway took the request (its
	// log): it may keep what the request needs beyond its log (the
	// Responses door's stored response), and answer the request itself
	// (background mode), reporting true.
	Submitted func(w http.ResponseWriter, r *http.Request, c gateway.Caller, parsed R, log *stream.Log) bool
}

// Lifecycle is the one lifecycle of an HTTP door's requests: sign-in,
// body bounds counted from the first byte (Intake), Idempotency-Key as
// the request id, Last-Event-ID as the seq to resume after, refusal
// through the gateway, then Server-Sent Events or the whole answer, with
// the slow consumer cut.
type Lifecycle[R Parsed] struct {
	d        Dialect[R]
	signIn   *SignIn
	gw       Gateway
	metrics  *telemetry.Metrics
	logger   *zap.Logger
	refusals *zap.Logger // sampled: lines anyone can cause as often as they like
	opts     Options
}

// NewLifecycle returns the lifecycle of dialect d. metrics may be nil.
func NewLifecycle[R Parsed](d Dialect[R], v Verifier, gw Gateway, metrics *telemetry.Metrics, logger *zap.Logger, o Options) *Lifecycle[R] {
	o.Defaults()
	logger = logger.With(zap.String("door", d.Door))
	return &Lifecycle[R]{d: d, signIn: &SignIn{Verifier: v, Door: d.Door, Metrics: metrics}, gw: gw, metrics: metrics,
		logger: logger, refusals: telemetry.UnauthenticatedLogger(logger), opts: o}
}

// Metrics is the door's metrics (may be nil).
func (l *Lifecycle[R]) Metrics() *telemetry.Metrics { return l.metrics }

// WriteTimeout is the door's write bound (Options.WriteTimeout).
func (l *Lifecycle[R]) WriteTimeout() time.Duration { return l.opts.WriteTimeout }

// Refusals is the sampled logger of the door's lines anyone can cause.
func (l *Lifecycle[R]) Refusals() *zap.Logger { return l.refusals }

// Fail answers pe in the dialect's shape (status 0: the code's).
func (l *Lifecycle[R]) Fail(w http.ResponseWriter, pe call.Failure, status int) {
	l.Refuse(w, "", l.d.Refusal(pe, status, nil))
}

// Apps finds a caller's app.
type Apps interface {
	App(tenant, app string) (*config.Tenant, *config.App, bool)
}

// App signs the caller in and finds its app (the door's lists of
// models); ok is false when it answered the refusal.
func (l *Lifecycle[R]) App(w http.ResponseWriter, r *http.Request, apps Apps) (p auth.Principal, app *config.App, ok bool) {
	p, a := l.Authenticate(r)
	if a != nil {
		l.Refuse(w, "", a)
		return p, nil, false
	}
	if _, app, ok = apps.App(p.Tenant, p.App); !ok {
		l.Fail(w, call.Failure{Code: protocol.CodeForbidden, Message: "forbidden"}, 0)
	}
	return p, app, ok
}

// AppModels are the models an app may use, its default first.
func AppModels(app *config.App) []string {
	var ids []string
	seen := map[string]bool{}
	for _, id := range append([]string{app.Models.Default}, app.Models.Allow...) {
		if id != "" && !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	return ids
}

// Route is a handler of a path and method. Prefix also routes the
// paths under Path ("/v1/models/{id}").
type Route struct {
	Method, Path string
	Prefix       bool
	Serve        http.HandlerFunc
}

// Routes is a door's handler: the CORS policy, then the route of the
// path and method; another method of a route's path is 405, any other
// path 404, in the dialect's shape.
func (l *Lifecycle[R]) Routes(routes ...Route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if l.cors(w, r) {
			return
		}
		p, known := r.URL.Path, false
		for _, rt := range routes {
			if (p == rt.Path || rt.Prefix && strings.HasPrefix(p, rt.Path+"/")) && r.Method == rt.Method {
				rt.Serve(w, r)
				return
			}
			known = known || p == rt.Path
		}
		if known {
			l.Fail(w, call.Failure{Code: protocol.CodeInvalidRequest, Message: r.Method + " is not allowed here"}, http.StatusMethodNotAllowed)
			return
		}
		l.Fail(w, call.Failure{Code: protocol.CodeNotFound, Message: "no such endpoint"}, 0)
	})
}

// cors applies the browser Origin policy (see CORS); it reports whether
// the request was answered (a refused origin, or a preflight).
func (l *Lifecycle[R]) cors(w http.ResponseWriter, r *http.Request) bool {
	refused, answered := CORS(w, r, l.opts.OriginAllowed, l.d.RequestIDHeader+", retry-after, retry-after-ms")
	if refused {
		l.Fail(w, call.Failure{Code: protocol.CodeForbidden, Message: "origin not allowed"}, 0)
	}
	return refused || answered
}

// Authenticate signs the caller in (the one sign-in of every door); a
// refused token's line is sampled.
func (l *Lifecycle[R]) Authenticate(r *http.Request) (auth.Principal, Answer) {
	p, ref := l.signIn.Caller(r, l.d.Also...)
	if ref == nil {
		return p, nil
	}
	if ref.Cause != nil {
		l.refusals.Info("token_rejected", zap.Error(ref.Cause))
	}
	return p, l.d.Refusal(call.Failure{Code: ref.Code, Message: ref.Message}, 0, nil)
}

// Refuse answers with an error before any stream began.
func (l *Lifecycle[R]) Refuse(w http.ResponseWriter, requestID string, a Answer) {
	switch status := a.HTTPStatus(); {
	case status == http.StatusTooManyRequests:
		// A hostile client can be refused as often as it likes: sampled.
		l.refusals.Info("refused", zap.String("request_id", requestID), zap.Int("status", status), zap.String("code", a.ErrorCode()))
	case status >= 500:
		l.logger.Info("refused", zap.String("request_id", requestID), zap.Int("status", status), zap.String("code", a.ErrorCode()))
	}
	a.Write(w)
}

// bodyFault is why a body was not read.
type bodyFault int

const (
	bodyRefused bodyFault = iota // the intake's bounds: nothing was read
	bodyTooLarge
	bodyUnread // it did not arrive (a timeout, or the client went)
)

// ReadBody reads a request body within the door's bounds (Intake); the
// caller releases it once it is handed on. The answer to a body not read
// is in the dialect's shape.
func (l *Lifecycle[R]) ReadBody(w http.ResponseWriter, r *http.Request, p auth.Principal) (*Body, Answer) {
	body, a, _, _ := l.readBody(w, r, p)
	return body, a
}

func (l *Lifecycle[R]) readBody(w http.ResponseWriter, r *http.Request, p auth.Principal) (*Body, Answer, bodyFault, error) {
	body, err := l.opts.Intake.Read(w, r, l.d.Door, p.Owner(), l.opts.MaxBodyBytes)
	if err == nil {
		return body, nil, 0, nil
	}
	var tooBig *http.MaxBytesError
	switch {
	case errors.Is(err, ErrRefused):
		return nil, l.d.Refusal(gateway.Failure(err), 0, nil), bodyRefused, err
	case errors.As(err, &tooBig):
		msg := "request body over " + strconv.FormatInt(l.opts.MaxBodyBytes, 10) + " bytes"
		return nil, l.d.Refusal(call.Failure{Code: protocol.CodeInvalidRequest, Message: msg}, http.StatusRequestEntityTooLarge, nil),
			bodyTooLarge, call.Errorf(call.ErrInvalid, "%s", msg)
	}
	// The body did not arrive (the read timeout passed, or the client
	// went): never a 200. The client may still be there to read it.
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return nil, l.d.Refusal(call.Failure{Code: protocol.CodeTimeout,
			Message: "the request body did not arrive within the server's read timeout: send it at once"}, http.StatusRequestTimeout, nil), bodyUnread, err
	}
	return nil, l.d.Refusal(call.Failure{Code: protocol.CodeInvalidRequest, Message: "the request body could not be read"}, http.StatusBadRequest, nil),
		bodyUnread, err
}

// headerProblem is the refusal of a request header's value.
func (l *Lifecycle[R]) headerProblem(w http.ResponseWriter, requestID, header, problem string) {
	pe := gateway.Failure(call.FieldErrorf(call.ErrInvalid, header, "%s", problem))
	l.Refuse(w, requestID, l.d.Refusal(pe, 0, headers{}))
}

// Serve serves one request of the door's main endpoint.
func (l *Lifecycle[R]) Serve(w http.ResponseWriter, r *http.Request) {
	received := l.opts.Now()
	requestID := r.Header.Get("Idempotency-Key")
	if requestID != "" && !protocol.ValidID(requestID) {
		l.headerProblem(w, "", "Idempotency-Key", " must be 8-64 characters of [A-Za-z0-9_-]")
		return
	}
	if requestID == "" {
		requestID = NewID()
	}
	w.Header().Set(l.d.RequestIDHeader, requestID)
	logger := l.logger.With(zap.String("request_id", requestID))

	after := 0
	if v := r.Header.Get("Last-Event-ID"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			l.headerProblem(w, requestID, "Last-Event-ID", " must be the id (a seq >= 0) of the last event received")
			return
		}
		after = n
	}
	p, a := l.Authenticate(r)
	if a != nil {
		l.Refuse(w, requestID, a)
		return
	}
	caller := gateway.Caller{Principal: p, SessionID: requestID}
	trace := tracing.Parse(r.Header.Get("traceparent"))
	// refuseInvalid answers a body this door could not hand on, through
	// the gateway's refusal path (its record, log line and budget).
	refuseInvalid := func(req gateway.Request, err error, a Answer) {
		req.IsRequest, req.RequestID, req.ReceivedAt, req.Door, req.Trace = true, requestID, received, l.d.Door, trace
		if rerr := l.gw.Refuse(r.Context(), caller, req, err); rerr != err {
			a = l.d.Refusal(gateway.Failure(rerr), 0, nil)
		}
		l.Refuse(w, requestID, a)
	}
	body, a, fault, err := l.readBody(w, r, p)
	if a != nil {
		switch fault {
		case bodyTooLarge:
			refuseInvalid(gateway.Request{}, err, a)
		case bodyUnread:
			logger.Info("body_read_failed", zap.Error(err))
			l.Refuse(w, requestID, a)
		default:
			l.Refuse(w, requestID, a)
		}
		return
	}
	// The body's slot and bytes go back once it is handed on.
	defer body.Release()
	parsed, err := l.d.Parse(body.Bytes, requestID)
	if err != nil {
		refuseInvalid(parsed.Request(), err, l.d.Invalid(err, parsed.Names()))
		return
	}
	if l.d.Prepare != nil {
		if err := l.d.Prepare(r.Context(), caller, parsed); err != nil {
			refuseInvalid(parsed.Request(), err, l.d.Invalid(err, parsed.Names()))
			return
		}
	}
	parsed.Log(logger)
	req := parsed.Request()
	req.AfterSeq, req.ReceivedAt, req.Trace, req.Door = after, received, trace, l.d.Door
	log, from, err := l.gw.Submit(r.Context(), caller, req)
	body.Release()
	if err != nil {
		l.Refuse(w, requestID, l.d.Refusal(gateway.Failure(err), 0, parsed.Names()))
		return
	}
	if l.d.Submitted != nil && l.d.Submitted(w, r, caller, parsed, log) {
		return
	}
	rsp := &responder[R]{l: l, w: w, rc: http.NewResponseController(w), logger: logger, requestID: requestID, req: parsed}
	codec, sse := parsed.Codec()
	if sse {
		rsp.stream(r.Context(), log, codec, from)
		return
	}
	WriteWhole(r.Context(), log, codec, w, rsp.rc, l.opts.WriteTimeout, logger, func(e *call.Failure) {
		l.Refuse(w, requestID, l.d.Refusal(*e, 0, parsed.Names()))
	})
}

// responder follows one request's stream log and writes it in the dialect's events.
type responder[R Parsed] struct {
	l         *Lifecycle[R]
	w         http.ResponseWriter
	rc        *http.ResponseController
	logger    *zap.Logger
	requestID string
	req       R
}

// stream writes the log after seq `from` as Server-Sent Events. The 200
// and its headers go out with the first chunk, so a request that fails
// before any text (and was not resumed mid-answer) gets a plain HTTP
// error with its status. The accepted event (when the codec has one)
// goes out with the 200 unless this is a resume: a resumed stream is the
// original's bytes after the group of seq `from`.
func (s *responder[R]) stream(ctx context.Context, log *stream.Log, codec stream.Codec, from int) {
	var head []byte
	accepted := false
	sse := SSE{W: s.w, RC: s.rc, Timeout: s.l.opts.WriteTimeout, Logger: s.logger, Metrics: s.l.metrics}
	for b := range log.Follow(ctx, codec, from) {
		if b.Accepted != nil {
			accepted = true
			if from == 0 {
				head = b.AcceptedBytes
			}
		}
		if !sse.Started {
			plain := from == 0 || s.l.d.RefuseUnstartedResume && !accepted
			if plain && len(b.Pieces) == 0 && b.Terminal != nil && b.Terminal.Error != nil {
				s.l.Refuse(s.w, s.requestID, s.l.d.Refusal(*b.Terminal.Error, 0, s.req.Names())) // nothing streamed: a plain HTTP error
				return
			}
			if from > 0 && b.Accepted != nil || len(b.Pieces) > 0 || b.Terminal != nil {
				sse.Start()
			}
		}
		if !sse.Started {
			continue
		}
		if b.Terminal != nil && b.Terminal.Error != nil {
			s.logger.Info("stream_error", zap.String("code", b.Terminal.Error.Code), zap.Int("chunks", b.Last()))
		}
		if !sse.Write(head, &b) {
			return
		}
		head = nil
	}
	if ctx.Err() != nil {
		s.logger.Info("client_gone", zap.String("hint", "the answer continues: resume with Idempotency-Key and Last-Event-ID"))
	}
}
