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
	"github.com/jetway-gateway/jetway/internal/protocol"
	"github.com/jetway-gateway/jetway/internal/telemetry"
)

// Paths served by Handler.
const (
	PathChat   = "/v1/chat/completions"
	PathModels = "/v1/models"
)

// Handler serves PathChat and PathModels (and their CORS preflights).
type Handler struct {
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
	return &Handler{l: door.NewLifecycle(dialect, v, gw, metrics, logger, o), apps: apps}
}

// ServeHTTP routes by path and method.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h.l.CORS(w, r) {
		return
	}
	switch {
	case r.URL.Path == PathChat && r.Method == http.MethodPost:
		h.l.Serve(w, r)
	case r.URL.Path == PathModels && r.Method == http.MethodGet:
		h.models(w, r)
	case r.URL.Path == PathChat || r.URL.Path == PathModels:
		h.l.Fail(w, protocol.Error{Code: protocol.CodeInvalidRequest, Message: r.Method + " is not allowed here"}, http.StatusMethodNotAllowed)
	default:
		h.l.Fail(w, protocol.Error{Code: protocol.CodeNotFound, Message: "no such endpoint"}, 0)
	}
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
