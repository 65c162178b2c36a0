// Package anthropic is Jetway's Anthropic Messages door: POST /v1/messages
// (Anthropic's Server-Sent Events or one JSON body), POST
// /v1/messages/count_tokens and GET /v1/models, so the official Anthropic
// SDKs and Claude Code (ANTHROPIC_BASE_URL) use Jetway unchanged. It signs
// the caller in like every door, turns the body into the core's request,
// hands it to the same gateway pipeline (admission, quotas, routing,
// fallback, cache, request records, usage records, drain) and encodes the
// request's stream log in Anthropic's events (encoder.go). Idempotency-Key
// is the request id and Last-Event-ID the seq to resume after, as on the
// OpenAI door. It knows nothing of quotas or models, and nothing of the
// other doors.
package anthropic

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
	"github.com/jetway-gateway/jetway/internal/config"
	"github.com/jetway-gateway/jetway/internal/door"
	"github.com/jetway-gateway/jetway/internal/gateway"
	"github.com/jetway-gateway/jetway/internal/protocol"
	"github.com/jetway-gateway/jetway/internal/stream"
	"github.com/jetway-gateway/jetway/internal/telemetry"
	"github.com/jetway-gateway/jetway/internal/tracing"
)

// Paths served by Handler. PathModels is shared with the OpenAI door: the
// server routes a request that carries VersionHeader here.
const (
	PathMessages    = "/v1/messages"
	PathCountTokens = "/v1/messages/count_tokens"
	PathModels      = "/v1/models"
)

// VersionHeader is the header every Anthropic SDK sends (any value is
// accepted).
const VersionHeader = "anthropic-version"

// headerRequestID is Anthropic's response header naming the request.
const headerRequestID = "request-id"

// MaxUserIDBytes bounds metadata.user_id as it is logged.
const MaxUserIDBytes = 64

// Gateway runs the requests this door receives. Submit has the WebSocket
// request's rules: a known request id with the same body returns the
// existing log (no second model call); another body is a conflict.
// Refuse is the refusal of a body that failed validation here (its
// rejected line, the user's refusal budget, its usage record); it returns
// err, or the rate_limited that replaces it past the budget.
type Gateway interface {
	Submit(ctx context.Context, c gateway.Caller, req gateway.Request) (log *stream.Log, from int, err error)
	Refuse(ctx context.Context, c gateway.Caller, req gateway.Request, err error) error
}

// Apps finds the caller's app (models, count_tokens).
type Apps interface {
	App(tenant, app string) (*config.Tenant, *config.App, bool)
}

// Handler serves the door's paths (and their CORS preflights).
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
	logger = logger.With(zap.String("door", gateway.DoorAnthropic))
	return &Handler{signIn: &door.SignIn{Verifier: v, Door: gateway.DoorAnthropic, Metrics: metrics}, gw: gw, apps: apps, metrics: metrics, logger: logger,
		refusals: telemetry.UnauthenticatedLogger(logger), opts: o}
}

// ServeHTTP routes by path and method.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if refused, answered := door.CORS(w, r, h.opts.OriginAllowed, "request-id, retry-after, retry-after-ms"); refused {
		h.refuse(w, "", apiError{status: http.StatusForbidden, typ: typePermission, code: protocol.CodeForbidden, msg: "origin not allowed"})
		return
	} else if answered {
		return
	}
	p := r.URL.Path
	switch {
	case p == PathMessages && r.Method == http.MethodPost:
		h.messages(w, r)
	case p == PathCountTokens && r.Method == http.MethodPost:
		h.countTokens(w, r)
	case (p == PathModels || strings.HasPrefix(p, PathModels+"/")) && r.Method == http.MethodGet:
		h.models(w, r)
	case p == PathMessages || p == PathCountTokens || p == PathModels:
		h.refuse(w, "", apiError{status: http.StatusMethodNotAllowed, typ: typeInvalidRequest, code: protocol.CodeInvalidRequest,
			msg: r.Method + " is not allowed here"})
	default:
		h.refuse(w, "", apiError{status: http.StatusNotFound, typ: typeNotFound, code: protocol.CodeNotFound, msg: "no such endpoint"})
	}
}

// authenticate signs the caller in (the one sign-in of every door), the
// token from Authorization: Bearer or x-api-key (the JWT either way). A
// refused token's line is sampled.
func (h *Handler) authenticate(r *http.Request) (auth.Principal, *apiError) {
	p, ref := h.signIn.Caller(r, door.APIKey)
	if ref == nil {
		return p, nil
	}
	if ref.Cause != nil {
		h.refusals.Info("token_rejected", zap.Error(ref.Cause))
	}
	e := fromProtocol(protocol.Error{Code: ref.Code, Message: ref.Message})
	return p, &e
}

// appModels are the models the caller's app may use, its default first.
func appModels(app *config.App) []string {
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

// modelEpoch is every model's created_at: the configuration has no date.
var modelEpoch = time.Unix(0, 0).UTC().Format(time.RFC3339)

// models lists the app's models (GET /v1/models) or one of them (GET
// /v1/models/{id}) in Anthropic's shape; one page holds them all.
func (h *Handler) models(w http.ResponseWriter, r *http.Request) {
	p, aerr := h.authenticate(r)
	if aerr != nil {
		h.refuse(w, "", *aerr)
		return
	}
	_, app, ok := h.apps.App(p.Tenant, p.App)
	if !ok {
		h.refuse(w, "", apiError{status: http.StatusForbidden, typ: typePermission, code: protocol.CodeForbidden, msg: "forbidden"})
		return
	}
	type model struct {
		Type        string `json:"type"`
		ID          string `json:"id"`
		DisplayName string `json:"display_name"`
		CreatedAt   string `json:"created_at"`
	}
	ids := appModels(app)
	if one, found := strings.CutPrefix(r.URL.Path, PathModels+"/"); found {
		for _, id := range ids {
			if id == one {
				writeJSON(w, http.StatusOK, model{Type: "model", ID: id, DisplayName: id, CreatedAt: modelEpoch})
				return
			}
		}
		h.refuse(w, "", apiError{status: http.StatusNotFound, typ: typeNotFound, code: protocol.CodeNotFound,
			msg: "model " + strconv.Quote(protocol.Clip(one)) + " is not available to this app"})
		return
	}
	list := struct {
		Data    []model `json:"data"`
		HasMore bool    `json:"has_more"`
		FirstID *string `json:"first_id"`
		LastID  *string `json:"last_id"`
	}{Data: []model{}}
	for _, id := range ids {
		list.Data = append(list.Data, model{Type: "model", ID: id, DisplayName: id, CreatedAt: modelEpoch})
	}
	if len(ids) > 0 {
		list.FirstID, list.LastID = &ids[0], &ids[len(ids)-1]
	}
	writeJSON(w, http.StatusOK, list)
}

// readBody reads a request body within the door's bounds (door.Intake):
// the caller releases it once it is handed on.
func (h *Handler) readBody(w http.ResponseWriter, r *http.Request, p auth.Principal) (*door.Body, *apiError) {
	body, err := h.opts.Intake.Read(w, r, gateway.DoorAnthropic, p.Owner(), h.opts.MaxBodyBytes)
	if err == nil {
		return body, nil
	}
	if errors.Is(err, door.ErrRefused) {
		e := fromProtocol(gateway.ProtocolError(err))
		return nil, &e
	}
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return nil, &apiError{status: http.StatusRequestEntityTooLarge, typ: typeInvalidRequest, code: protocol.CodeInvalidRequest,
			msg: "request body over " + strconv.FormatInt(h.opts.MaxBodyBytes, 10) + " bytes"}
	}
	// The body did not arrive (the read timeout passed, or the client
	// went): never a 200. The client may still be there to read it.
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return nil, &apiError{status: http.StatusRequestTimeout, typ: typeInvalidRequest, code: protocol.CodeTimeout,
			msg: "the request body did not arrive within the server's read timeout: send it at once"}
	}
	return nil, &apiError{status: http.StatusBadRequest, typ: typeInvalidRequest, code: protocol.CodeInvalidRequest, msg: "the request body could not be read"}
}

// messages serves one Messages request.
func (h *Handler) messages(w http.ResponseWriter, r *http.Request) {
	received := h.opts.Now()
	requestID := r.Header.Get("Idempotency-Key")
	if requestID != "" && !protocol.ValidID(requestID) {
		h.refuse(w, "", invalid("Idempotency-Key must be 8-64 characters of [A-Za-z0-9_-]"))
		return
	}
	if requestID == "" {
		requestID = door.NewID()
	}
	w.Header().Set(headerRequestID, requestID)
	logger := h.logger.With(zap.String("request_id", requestID))

	after := 0
	if v := r.Header.Get("Last-Event-ID"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			h.refuse(w, requestID, invalid("Last-Event-ID must be the id (a seq >= 0) of the last event received"))
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
	refuseInvalid := func(in protocol.Inbound, e apiError) {
		in.Type, in.RequestID = protocol.TypeRequest, requestID
		err := &protocol.ClientError{Err: protocol.ErrInvalid, Msg: e.msg}
		if rerr := h.gw.Refuse(r.Context(), caller, gateway.Request{Inbound: in, ReceivedAt: received, Door: gateway.DoorAnthropic,
			Trace: tracing.Parse(r.Header.Get("traceparent"))}, err); rerr != err {
			e = fromProtocol(gateway.ProtocolError(rerr))
		}
		h.refuse(w, requestID, e)
	}
	body, berr := h.readBody(w, r, p)
	if berr != nil {
		switch berr.status {
		case http.StatusRequestEntityTooLarge:
			refuseInvalid(protocol.Inbound{}, *berr)
		case http.StatusTooManyRequests, http.StatusServiceUnavailable:
			h.refuse(w, requestID, *berr)
		default:
			logger.Info("body_read_failed", zap.String("error", berr.msg))
			h.refuse(w, requestID, *berr)
		}
		return
	}
	// The body's slot and bytes go back once it is handed on.
	defer body.Release()
	req, perr := parseRequest(body.Bytes, requestID, false)
	if perr != nil {
		refuseInvalid(req.in, *perr)
		return
	}
	if req.userID != "" {
		logger.Info("metadata", zap.String("user_id", req.userID))
	}
	req.in.AfterSeq = after
	log, from, err := h.gw.Submit(r.Context(), caller, gateway.Request{Inbound: req.in, ReceivedAt: received,
		Trace: tracing.Parse(r.Header.Get("traceparent")),
		TopP:  req.topP, Stop: req.stop, PrefixCachePoint: req.prefixCache, Door: gateway.DoorAnthropic})
	body.Release()
	if err != nil {
		h.refuse(w, requestID, req.names.rename(fromProtocol(gateway.ProtocolError(err))))
		return
	}
	rsp := &responder{h: h, w: w, rc: http.NewResponseController(w), logger: logger, requestID: requestID, names: req.names}
	if req.stream {
		rsp.stream(r.Context(), log, from)
		return
	}
	rsp.whole(r.Context(), log)
}

// countTokens answers POST /v1/messages/count_tokens with the input-token
// bound admission would reserve for the same body
// (gateway.EstimateInputTokens). Nothing is reserved and no model is called.
// It costs CPU in the body's size, so it has the bounds of every body
// (door.Intake: the user's requests arriving and the server's body bytes),
// its metric (jetway_count_tokens_total) and a sampled line.
func (h *Handler) countTokens(w http.ResponseWriter, r *http.Request) {
	h.metrics.CountTokens()
	p, aerr := h.authenticate(r)
	if aerr != nil {
		h.refuse(w, "", *aerr)
		return
	}
	_, app, ok := h.apps.App(p.Tenant, p.App)
	if !ok {
		h.refuse(w, "", apiError{status: http.StatusForbidden, typ: typePermission, code: protocol.CodeForbidden, msg: "forbidden"})
		return
	}
	body, berr := h.readBody(w, r, p)
	if berr != nil {
		h.refuse(w, "", *berr)
		return
	}
	defer body.Release()
	h.refusals.Info("count_tokens", zap.String("user", p.Subject), zap.Int("body_bytes", len(body.Bytes)))
	req, perr := parseRequest(body.Bytes, door.NewID(), true)
	if perr != nil {
		h.refuse(w, "", *perr)
		return
	}
	if m := req.in.Model; m != "" {
		allowed := false
		for _, id := range appModels(app) {
			allowed = allowed || id == m
		}
		if !allowed {
			h.refuse(w, "", fromProtocol(protocol.Error{Code: protocol.CodeModelNotAllowed,
				Message: "model " + strconv.Quote(protocol.Clip(m)) + " is not allowed for this app"}))
			return
		}
	}
	writeJSON(w, http.StatusOK, struct {
		InputTokens int64 `json:"input_tokens"`
	}{gateway.EstimateInputTokens(&req.in)})
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
