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
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/jetway-gateway/jetway/internal/call"
	"github.com/jetway-gateway/jetway/internal/door"
	"github.com/jetway-gateway/jetway/internal/gateway"
	"github.com/jetway-gateway/jetway/internal/protocol"
	"github.com/jetway-gateway/jetway/internal/telemetry"
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

// Handler serves the door's paths (and their CORS preflights).
type Handler struct {
	http.Handler
	l    *door.Lifecycle[*parsed]
	apps door.Apps
}

// dialect is Anthropic Messages over the HTTP doors' one lifecycle.
var dialect = door.Dialect[*parsed]{
	Door:            gateway.DoorAnthropic,
	RequestIDHeader: headerRequestID,
	Also:            []door.Source{door.APIKey},
	Parse: func(body []byte, requestID string) (*parsed, error) {
		p, e := parseRequest(body, requestID, false)
		if e != nil {
			return &p, &call.ClientError{Err: call.ErrInvalid, Problem: e.msg}
		}
		return &p, nil
	},
	Invalid: func(err error, names door.Namer) door.Answer {
		return refusal(gateway.Failure(err), 0, names)
	},
	Refusal:               refusal,
	RefuseUnstartedResume: true,
}

// New returns the door. metrics may be nil.
func New(v door.Verifier, gw door.Gateway, apps door.Apps, metrics *telemetry.Metrics, logger *zap.Logger, o door.Options) *Handler {
	h := &Handler{l: door.NewLifecycle(dialect, v, gw, metrics, logger, o), apps: apps}
	h.Handler = h.l.Routes(door.Route{Method: http.MethodPost, Path: PathMessages, Serve: h.l.Serve},
		door.Route{Method: http.MethodPost, Path: PathCountTokens, Serve: h.countTokens},
		door.Route{Method: http.MethodGet, Path: PathModels, Prefix: true, Serve: h.models})
	return h
}

// modelEpoch is every model's created_at: the configuration has no date.
var modelEpoch = time.Unix(0, 0).UTC().Format(time.RFC3339)

// models lists the app's models (GET /v1/models) or one of them (GET
// /v1/models/{id}) in Anthropic's shape; one page holds them all.
func (h *Handler) models(w http.ResponseWriter, r *http.Request) {
	_, app, ok := h.l.App(w, r, h.apps)
	if !ok {
		return
	}
	type model struct {
		Type        string `json:"type"`
		ID          string `json:"id"`
		DisplayName string `json:"display_name"`
		CreatedAt   string `json:"created_at"`
	}
	ids := door.AppModels(app)
	if one, found := strings.CutPrefix(r.URL.Path, PathModels+"/"); found {
		for _, id := range ids {
			if id == one {
				writeJSON(w, http.StatusOK, model{Type: "model", ID: id, DisplayName: id, CreatedAt: modelEpoch})
				return
			}
		}
		h.l.Fail(w, call.Failure{Code: protocol.CodeNotFound, Message: "model " + strconv.Quote(protocol.Clip(one)) + " is not available to this app"}, 0)
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

// countTokens answers POST /v1/messages/count_tokens with the input-token
// bound admission would reserve for the same body
// (gateway.EstimateInputTokens). Nothing is reserved and no model is called.
// It costs CPU in the body's size, so it has the bounds of every body
// (door.Intake: the user's requests arriving and the server's body bytes),
// its metric (jetway_count_tokens_total) and a sampled line.
func (h *Handler) countTokens(w http.ResponseWriter, r *http.Request) {
	h.l.Metrics().CountTokens()
	p, app, ok := h.l.App(w, r, h.apps)
	if !ok {
		return
	}
	body, a := h.l.ReadBody(w, r, p)
	if a != nil {
		h.l.Refuse(w, "", a)
		return
	}
	defer body.Release()
	h.l.Refusals().Info("count_tokens", zap.String("user", p.Subject), zap.Int("body_bytes", len(body.Bytes)))
	req, perr := parseRequest(body.Bytes, door.NewID(), true)
	if perr != nil {
		h.l.Refuse(w, "", *perr)
		return
	}
	if m := req.in.Model; m != "" {
		allowed := false
		for _, id := range door.AppModels(app) {
			allowed = allowed || id == m
		}
		if !allowed {
			h.l.Fail(w, call.Failure{Code: protocol.CodeModelNotAllowed,
				Message: "model " + strconv.Quote(protocol.Clip(m)) + " is not allowed for this app"}, 0)
			return
		}
	}
	core := req.Request()
	writeJSON(w, http.StatusOK, struct {
		InputTokens int64 `json:"input_tokens"`
	}{gateway.EstimateInputTokens(&core.Request)})
}
