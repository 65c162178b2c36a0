// Package selfservice answers a signed-in caller's own standing:
// GET /v1/me of the admin API (docs/admin.md). The limits come from
// quota.LimitsFor and their usage from the quota's store (Usage), as
// admission reserves against them.
package selfservice

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/jetway-gateway/jetway/internal/auth"
	"github.com/jetway-gateway/jetway/internal/config"
	"github.com/jetway-gateway/jetway/internal/door"
	"github.com/jetway-gateway/jetway/internal/quota"
)

// Path is where the standing is served, on the public listener.
const Path = "/v1/me"

// Error codes of the admin API's errors this package answers besides
// the sign-in's (unauthorized, forbidden: door.Refusal.Code).
const (
	CodeForbidden   = "forbidden"
	CodeUnavailable = "unavailable"
)

// ReadTimeout bounds reading the usage of one caller's limits.
const ReadTimeout = 5 * time.Second

// Apps finds a caller's tenant, app and user override (config.Live).
type Apps interface {
	App(tenant, app string) (*config.Tenant, *config.App, bool)
	User(tenant, app, sub string) (*config.UserOverride, bool)
}

// Usage reads limits' usage in their current windows (quota.Quota).
type Usage interface {
	Standings(ctx context.Context, limits []quota.Limit) ([]quota.Standing, error)
}

// Handler serves GET /v1/me.
type Handler struct {
	SignIn *door.SignIn // the one sign-in of every door
	Apps   Apps
	Usage  Usage
	Logger *zap.Logger // nil: no logs
	// OriginAllowed is the browser Origin policy (JETWAY_ALLOWED_ORIGINS);
	// nil: no browser origin is allowed.
	OriginAllowed func(origin string) bool
}

// Me is the caller's standing.
type Me struct {
	Tenant   string  `json:"tenant"`
	App      string  `json:"app"`
	User     string  `json:"user"`
	Limits   []Entry `json:"limits"`
	Disabled bool    `json:"disabled"`
}

// Entry is one measure of one limit: exactly one of Tokens, Requests
// and USD is set (the limit's cap in that measure), and Used and
// Remaining are in it (dollars for usd).
type Entry struct {
	Scope     string   `json:"scope"`
	Window    string   `json:"window"`
	Tokens    *int64   `json:"tokens,omitempty"`
	Requests  *int64   `json:"requests,omitempty"`
	USD       *float64 `json:"usd,omitempty"`
	Used      float64  `json:"used"`
	Remaining float64  `json:"remaining"`
	ResetsAt  string   `json:"resets_at"`
}

// Standing is the caller p's standing: one entry per measure of each
// limit that applies to p, in quota.LimitsFor's order (tenant, app,
// user). ok is false when p's app is not configured.
func Standing(ctx context.Context, apps Apps, usage Usage, p auth.Principal) (me Me, ok bool, err error) {
	tenant, app, ok := apps.App(p.Tenant, p.App)
	if !ok {
		return Me{}, false, nil
	}
	override, _ := apps.User(p.Tenant, p.App, p.Subject)
	me = Me{Tenant: tenant.ID, App: app.ID, User: p.Subject, Limits: []Entry{}, Disabled: override != nil && override.Disabled}
	st, err := usage.Standings(ctx, quota.LimitsFor(tenant, app, p.Subject, override))
	if err != nil {
		return Me{}, true, err
	}
	for _, s := range st {
		base := Entry{Scope: s.Limit.Scope.Kind, Window: string(s.Limit.Window),
			ResetsAt: s.Item.End().UTC().Format(time.RFC3339)}
		if c := s.Limit.Tokens; c > 0 {
			e := base
			e.Tokens, e.Used, e.Remaining = &c, float64(s.Used.Tokens), float64(max(c-s.Used.Tokens, 0))
			me.Limits = append(me.Limits, e)
		}
		if c := s.Limit.Requests; c > 0 {
			e := base
			e.Requests, e.Used, e.Remaining = &c, float64(s.Used.Requests), float64(max(c-s.Used.Requests, 0))
			me.Limits = append(me.Limits, e)
		}
		if c := s.Limit.MicroUSD; c > 0 {
			e := base
			usd := dollars(c)
			e.USD, e.Used, e.Remaining = &usd, dollars(s.Used.MicroUSD), dollars(max(c-s.Used.MicroUSD, 0))
			me.Limits = append(me.Limits, e)
		}
	}
	return me, true, nil
}

func dollars(micro int64) float64 { return float64(micro) / 1e6 }

// ServeHTTP answers GET /v1/me.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	allowed := h.OriginAllowed
	if allowed == nil {
		allowed = func(string) bool { return false }
	}
	refused, answered := door.CORS(w, r, allowed, "")
	switch {
	case answered:
		return
	case refused:
		writeError(w, http.StatusForbidden, CodeForbidden, "origin not allowed")
		return
	}
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", "only GET is served at "+Path)
		return
	}
	p, ref := h.SignIn.Caller(r)
	if ref != nil {
		writeError(w, ref.Status, ref.Code, ref.Message)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), ReadTimeout)
	defer cancel()
	me, ok, err := Standing(ctx, h.Apps, h.Usage, p)
	switch {
	case !ok:
		writeError(w, http.StatusForbidden, CodeForbidden, "app "+p.Tenant+"/"+p.App+" is not configured")
	case err != nil:
		if h.Logger != nil {
			h.Logger.Warn("me_unavailable", zap.String("tenant", p.Tenant), zap.String("app", p.App), zap.Error(err))
		}
		msg := "the quota store cannot be read now; retry"
		if !errors.Is(err, quota.ErrUnavailable) {
			msg = "the standing cannot be read"
		}
		writeError(w, http.StatusServiceUnavailable, CodeUnavailable, msg)
	default:
		writeJSON(w, http.StatusOK, me)
	}
}

func writeError(w http.ResponseWriter, status int, code, message string) {
	writeJSON(w, status, map[string]any{"error": map[string]string{"code": code, "message": message}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
