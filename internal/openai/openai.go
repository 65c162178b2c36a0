// Package openai is Jetway's second door: the OpenAI-compatible
// POST /v1/chat/completions (Server-Sent Events or one JSON body) and
// GET /v1/models. It authenticates like the WebSocket endpoint, hands each
// HTTP request to the same gateway pipeline (admission, quotas, routing,
// cache, usage records, drain) and follows the request's stream log,
// translating it to OpenAI's shapes. Idempotency-Key is the request id and
// Last-Event-ID the seq to resume after. It knows nothing of quotas or models.
package openai

import (
	"net/http"

	"go.uber.org/zap"

	"github.com/jetway-gateway/jetway/internal/door"
	"github.com/jetway-gateway/jetway/internal/gateway"
	"github.com/jetway-gateway/jetway/internal/telemetry"
)

// Paths served by Handler.
const (
	PathChat   = "/v1/chat/completions"
	PathModels = "/v1/models"
)

// Handler serves PathChat and PathModels (and their CORS preflights).
type Handler struct {
	http.Handler
	l    *door.Lifecycle[*chat]
	apps door.Apps
}

// dialect is Chat Completions over the HTTP doors' one lifecycle.
var dialect = door.Dialect[*chat]{
	Door:            gateway.DoorOpenAI,
	RequestIDHeader: "x-request-id",
	Parse:           parse,
	Invalid:         fromRequestError,
	Refusal:         refusal,
}

// New returns the door. metrics may be nil.
func New(v door.Verifier, gw door.Gateway, apps door.Apps, metrics *telemetry.Metrics, logger *zap.Logger, o door.Options) *Handler {
	h := &Handler{l: door.NewLifecycle(dialect, v, gw, metrics, logger, o), apps: apps}
	h.Handler = h.l.Routes(door.Route{Method: http.MethodPost, Path: PathChat, Serve: h.l.Serve},
		door.Route{Method: http.MethodGet, Path: PathModels, Serve: h.models})
	return h
}

// models lists the models the caller's app may use, its default first.
func (h *Handler) models(w http.ResponseWriter, r *http.Request) {
	_, app, ok := h.l.App(w, r, h.apps)
	if !ok {
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
	for _, id := range door.AppModels(app) {
		list.Data = append(list.Data, model{ID: id, Object: "model", OwnedBy: "jetway"})
	}
	writeJSON(w, http.StatusOK, list)
}
