// Package openai is Jetway's second door: the OpenAI-compatible
// POST /v1/chat/completions (Server-Sent Events or one JSON body) and
// GET /v1/models. It authenticates like the WebSocket endpoint, hands each
// HTTP request to the same gateway pipeline (admission, quotas, routing,
// cache, usage records, drain) and follows the request's stream log,
// translating it to OpenAI's shapes. Idempotency-Key is the request id and
// Last-Event-ID the seq to resume after. It knows nothing of quotas or models.
package openai

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"

	"go.uber.org/zap"

	"github.com/jetway-gateway/jetway/internal/auth"
	"github.com/jetway-gateway/jetway/internal/config"
	"github.com/jetway-gateway/jetway/internal/door"
	"github.com/jetway-gateway/jetway/internal/gateway"
	"github.com/jetway-gateway/jetway/internal/protocol"
	"github.com/jetway-gateway/jetway/internal/stream"
	"github.com/jetway-gateway/jetway/internal/telemetry"
	"github.com/jetway-gateway/jetway/internal/tracing"
)

// Paths served by Handler.
const (
	PathChat   = "/v1/chat/completions"
	PathModels = "/v1/models"
)

// Gateway runs the requests this door receives. Submit has the WebSocket
// request's rules: a known request id with the same body returns the
// existing log (no second model call); another body is a conflict.
//
// Refuse is the refusal of a body that failed validation here: the
// rejected line, the user's refusal budget and the usage record every
// client-caused refusal has. It returns err, or the rate_limited that
// replaces it past the budget.
type Gateway interface {
	Submit(ctx context.Context, c gateway.Caller, req gateway.Request) (log *stream.Log, from int, err error)
	Refuse(ctx context.Context, c gateway.Caller, req gateway.Request, err error) error
}

// Apps finds the caller's app (for GET /v1/models).
type Apps interface {
	App(tenant, app string) (*config.Tenant, *config.App, bool)
}

// Handler serves PathChat and PathModels (and their CORS preflights).
type Handler struct {
	signIn   *door.SignIn
	gw       Gateway
	apps     Apps
	metrics  *telemetry.Metrics
	logger   *zap.Logger
	refusals *zap.Logger // sampled: the lines of credential refusals (telemetry.UnauthenticatedLogger)
	opts     door.Options
}

// New returns the door. metrics may be nil.
func New(v door.Verifier, gw Gateway, apps Apps, metrics *telemetry.Metrics, logger *zap.Logger, o door.Options) *Handler {
	o.Defaults()
	logger = logger.With(zap.String("door", gateway.DoorOpenAI))
	return &Handler{signIn: &door.SignIn{Verifier: v, Door: gateway.DoorOpenAI, Metrics: metrics}, gw: gw, apps: apps, metrics: metrics, logger: logger,
		refusals: telemetry.UnauthenticatedLogger(logger), opts: o}
}

// ServeHTTP routes by path and method.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if refused, answered := door.CORS(w, r, h.opts.OriginAllowed, "x-request-id, retry-after, retry-after-ms"); refused {
		h.refuse(w, "", apiError{status: http.StatusForbidden, code: protocol.CodeForbidden, msg: "origin not allowed"})
		return
	} else if answered {
		return
	}
	switch {
	case r.URL.Path == PathChat && r.Method == http.MethodPost:
		h.chat(w, r)
	case r.URL.Path == PathModels && r.Method == http.MethodGet:
		h.models(w, r)
	case r.URL.Path == PathChat || r.URL.Path == PathModels:
		h.refuse(w, "", apiError{status: http.StatusMethodNotAllowed, code: protocol.CodeInvalidRequest, msg: r.Method + " is not allowed here"})
	default:
		h.refuse(w, "", apiError{status: http.StatusNotFound, code: protocol.CodeNotFound, msg: "no such endpoint"})
	}
}

// authenticate signs the caller in (the one sign-in of every door: the
// JWT is the API key). A refused token's line is sampled.
func (h *Handler) authenticate(r *http.Request) (auth.Principal, *apiError) {
	p, ref := h.signIn.Caller(r)
	if ref == nil {
		return p, nil
	}
	if ref.Cause != nil {
		h.refusals.Info("token_rejected", zap.Error(ref.Cause))
	}
	return p, &apiError{status: ref.Status, code: ref.Code, msg: ref.Message}
}

// models lists the models the caller's app may use, its default first.
func (h *Handler) models(w http.ResponseWriter, r *http.Request) {
	p, aerr := h.authenticate(r)
	if aerr != nil {
		h.refuse(w, "", *aerr)
		return
	}
	_, app, ok := h.apps.App(p.Tenant, p.App)
	if !ok {
		h.refuse(w, "", apiError{status: http.StatusForbidden, code: protocol.CodeForbidden, msg: "forbidden"})
		return
	}
	type model struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		OwnedBy string `json:"owned_by"`
	}
	list := struct {
		Object string  `json:"object"`
		Data   []model `json:"data"`
	}{Object: "list", Data: []model{}}
	ids := append([]string{app.Models.Default}, app.Models.Allow...)
	seen := map[string]bool{}
	for _, id := range ids {
		if id != "" && !seen[id] {
			seen[id] = true
			list.Data = append(list.Data, model{ID: id, Object: "model", OwnedBy: "jetway"})
		}
	}
	writeJSON(w, http.StatusOK, list)
}

// chat serves one Chat Completions request.
func (h *Handler) chat(w http.ResponseWriter, r *http.Request) {
	received := h.opts.Now()
	requestID := r.Header.Get("Idempotency-Key")
	if requestID != "" && !protocol.ValidID(requestID) {
		h.refuse(w, "", apiError{status: http.StatusBadRequest, code: protocol.CodeInvalidRequest, param: "Idempotency-Key",
			msg: "Idempotency-Key must be 8-64 characters of [A-Za-z0-9_-]"})
		return
	}
	if requestID == "" {
		requestID = door.NewID()
	}
	w.Header().Set("x-request-id", requestID)
	logger := h.logger.With(zap.String("request_id", requestID))

	after := 0
	if v := r.Header.Get("Last-Event-ID"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			h.refuse(w, requestID, apiError{status: http.StatusBadRequest, code: protocol.CodeInvalidRequest, param: "Last-Event-ID",
				msg: "Last-Event-ID must be the id (a seq >= 0) of the last event received"})
			return
		}
		after = n
	}
	p, aerr := h.authenticate(r)
	if aerr != nil {
		h.refuse(w, requestID, *aerr)
		return
	}
	caller := gateway.Caller{Principal: p, SessionID: requestID}
	// refuseInvalid answers a body this door could not hand on, through
	// the gateway's refusal path (its record, log line and budget).
	refuseInvalid := func(in protocol.Inbound, err error, e apiError) {
		in.Type, in.RequestID = protocol.TypeRequest, requestID
		if rerr := h.gw.Refuse(r.Context(), caller, gateway.Request{Inbound: in, ReceivedAt: received, Door: gateway.DoorOpenAI,
			Trace: tracing.Parse(r.Header.Get("traceparent"))}, err); rerr != err {
			e = fromProtocol(gateway.ProtocolError(rerr), false)
		}
		h.refuse(w, requestID, e)
	}
	body, err := h.opts.Intake.Read(w, r, gateway.DoorOpenAI, p.Owner(), h.opts.MaxBodyBytes)
	if err != nil {
		var tooBig *http.MaxBytesError
		switch {
		case errors.Is(err, door.ErrRefused):
			h.refuse(w, requestID, fromProtocol(gateway.ProtocolError(err), false))
		case errors.As(err, &tooBig):
			msg := "request body over " + strconv.FormatInt(h.opts.MaxBodyBytes, 10) + " bytes"
			refuseInvalid(protocol.Inbound{}, protocol.Errorf(protocol.ErrInvalid, "%s", msg),
				apiError{status: http.StatusRequestEntityTooLarge, code: protocol.CodeInvalidRequest, msg: msg})
		default:
			// The body did not arrive (the read timeout passed, or the client
			// went): never a 200. The client may still be there to read it.
			logger.Info("body_read_failed", zap.Error(err))
			h.refuse(w, requestID, bodyReadError(err))
		}
		return
	}
	// The body's slot and bytes go back once it is handed on.
	defer body.Release()
	rc := http.NewResponseController(w)
	chatReq, in, err := parseChat(body.Bytes, requestID)
	if err != nil {
		refuseInvalid(in, err, fromRequestError(err))
		return
	}
	in.AfterSeq = after
	log, from, err := h.gw.Submit(r.Context(), caller, gateway.Request{Inbound: in, ReceivedAt: received, TopP: chatReq.TopP,
		Stop: chatReq.Stop, Door: gateway.DoorOpenAI, Trace: tracing.Parse(r.Header.Get("traceparent"))})
	body.Release()
	if err != nil {
		h.refuse(w, requestID, fromProtocol(gateway.ProtocolError(err), false).named(chatReq.origin))
		return
	}
	rsp := &responder{h: h, w: w, rc: rc, logger: logger, requestID: requestID, origin: chatReq.origin}
	if chatReq.Stream {
		rsp.stream(r.Context(), log, from, chatReq.StreamOptions != nil && chatReq.StreamOptions.IncludeUsage)
		return
	}
	rsp.whole(r.Context(), log)
}

// refuse answers with an error before any stream began.
func (h *Handler) refuse(w http.ResponseWriter, requestID string, e apiError) {
	switch {
	case e.status == http.StatusTooManyRequests:
		// A hostile client can be refused as often as it likes: sampled.
		h.refusals.Info("refused", zap.String("request_id", requestID), zap.Int("status", e.status), zap.String("code", e.code))
	case e.status >= 500:
		h.logger.Info("refused", zap.String("request_id", requestID), zap.Int("status", e.status), zap.String("code", e.code))
	}
	e.write(w)
}

// bodyReadError is the answer to a body that could not be read: 408 when
// it did not arrive within the read timeout (JETWAY_HTTP_READ_TIMEOUT),
// else 400.
func bodyReadError(err error) apiError {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return apiError{status: http.StatusRequestTimeout, code: protocol.CodeTimeout,
			msg: "the request body did not arrive within the server's read timeout: send it at once"}
	}
	return apiError{status: http.StatusBadRequest, code: protocol.CodeInvalidRequest, msg: "the request body could not be read"}
}
