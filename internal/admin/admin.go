// Package admin serves the admin API v1 (ADMIN-API.md, docs/admin.md)
// under /v1/admin/ on the public listener: tenants with their apps, user
// overrides and the model catalogue as whole, versioned documents
// (configstore), the audit trail and a tenant's usage. Roles come from
// the token's cognito:groups: jetway:admin may do everything,
// jetway:admin:<tenant> that tenant only.
package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"go.uber.org/zap"

	"github.com/jetway-gateway/jetway/internal/auth"
	"github.com/jetway-gateway/jetway/internal/config"
	"github.com/jetway-gateway/jetway/internal/configstore"
	"github.com/jetway-gateway/jetway/internal/door"
	"github.com/jetway-gateway/jetway/internal/telemetry"
)

// Prefix is where the API is served.
const Prefix = "/v1/admin"

// Roles (cognito:groups entries).
const (
	RoleAdmin       = "jetway:admin"
	RoleTenantAdmin = "jetway:admin:" // + tenant
)

// Bounds of the API.
const (
	MaxBodyBytes = 1 << 20 // a larger body is 413
	PageSize     = 100
	CallTimeout  = 10 * time.Second // one request's store calls
)

// Error codes (ADMIN-API.md, "Where and who").
const (
	CodeInvalid              = "invalid_request"
	CodeUnauthorized         = "unauthorized"
	CodeForbidden            = "forbidden"
	CodeNotFound             = "not_found"
	CodeConflict             = "conflict"
	CodePreconditionFailed   = "precondition_failed"
	CodePayloadTooLarge      = "payload_too_large"
	CodePreconditionRequired = "precondition_required"
	CodeUnavailable          = "unavailable"
)

// idPattern is the admin API's id rule for tenants, apps and models.
var idPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// Verifier checks an admin token (auth.Verifier.VerifyAdmin).
type Verifier interface {
	VerifyAdmin(ctx context.Context, token string) (auth.Principal, error)
}

// Handler serves the admin API.
type Handler struct {
	Verifier Verifier
	Live     *config.Live
	// Service writes documents; nil: the tenants file is the
	// configuration, and writes get 409 naming JETWAY_CONFIG_TABLE.
	Service *configstore.Service
	// Audit reads the trail; nil without a config table.
	Audit *configstore.Store
	// UsageDir holds the usage records written in dev mode (the file
	// sink); "" when they go to the analytics store.
	UsageDir      string
	Metrics       *telemetry.Metrics
	Logger        *zap.Logger
	OriginAllowed func(origin string) bool
}

// Route is one route of the API (the OpenAPI document is checked
// against these).
type Route struct{ Method, Path string }

// Routes lists every route Mount serves, in OpenAPI's path style.
func Routes() []Route {
	var out []Route
	for _, r := range routes {
		out = append(out, Route{r.method, toOpenAPI(r.path)})
	}
	return out
}

func toOpenAPI(p string) string {
	parts := strings.Split(p, "/")
	for i, s := range parts {
		if strings.HasPrefix(s, ":") {
			parts[i] = "{" + s[1:] + "}"
		}
	}
	return strings.Join(parts, "/")
}

type route struct {
	method, path string
	serve        func(h *Handler, c *call)
}

var routes = []route{
	{http.MethodGet, Prefix + "/tenants", (*Handler).listTenants},
	{http.MethodGet, Prefix + "/tenants/:tenant", (*Handler).getTenant},
	{http.MethodPut, Prefix + "/tenants/:tenant", (*Handler).putTenant},
	{http.MethodDelete, Prefix + "/tenants/:tenant", (*Handler).deleteTenant},
	{http.MethodGet, Prefix + "/tenants/:tenant/apps/:app", (*Handler).getApp},
	{http.MethodPut, Prefix + "/tenants/:tenant/apps/:app", (*Handler).putApp},
	{http.MethodDelete, Prefix + "/tenants/:tenant/apps/:app", (*Handler).deleteApp},
	{http.MethodGet, Prefix + "/tenants/:tenant/apps/:app/users", (*Handler).listUsers},
	{http.MethodGet, Prefix + "/tenants/:tenant/apps/:app/users/:sub", (*Handler).getUser},
	{http.MethodPut, Prefix + "/tenants/:tenant/apps/:app/users/:sub", (*Handler).putUser},
	{http.MethodDelete, Prefix + "/tenants/:tenant/apps/:app/users/:sub", (*Handler).deleteUser},
	{http.MethodGet, Prefix + "/tenants/:tenant/usage", (*Handler).usage},
	{http.MethodGet, Prefix + "/models", (*Handler).listModels},
	{http.MethodGet, Prefix + "/models/:id", (*Handler).getModel},
	{http.MethodPut, Prefix + "/models/:id", (*Handler).putModel},
	{http.MethodDelete, Prefix + "/models/:id", (*Handler).deleteModel},
	{http.MethodGet, Prefix + "/audit", (*Handler).audit},
}

// Mount adds the API's routes to r.
func (h *Handler) Mount(r gin.IRouter) {
	paths := map[string]bool{}
	for _, rt := range routes {
		r.Handle(rt.method, rt.path, func(g *gin.Context) { h.serve(g, rt.serve) })
		if !paths[rt.path] {
			paths[rt.path] = true
			r.OPTIONS(rt.path, func(g *gin.Context) { h.cors(g.Writer, g.Request) })
		}
	}
}

// call is one request: its caller, and its answer.
type call struct {
	g      *gin.Context
	w      http.ResponseWriter
	r      *http.Request
	ctx    context.Context
	caller auth.Principal
}

func (c *call) param(name string) string { return c.g.Param(name) }

func (h *Handler) cors(w http.ResponseWriter, r *http.Request) bool {
	allowed := h.OriginAllowed
	if allowed == nil {
		allowed = func(string) bool { return false }
	}
	refused, answered := door.CORS(w, r, allowed, "ETag")
	if answered {
		return false
	}
	if refused {
		writeError(w, http.StatusForbidden, CodeForbidden, "origin not allowed", "")
		return false
	}
	return true
}

func (h *Handler) serve(g *gin.Context, f func(*Handler, *call)) {
	w, r := g.Writer, g.Request
	if !h.cors(w, r) {
		return
	}
	signIn := door.SignIn{Verifier: adminVerifier{h.Verifier}, Door: "admin", Metrics: h.Metrics}
	p, ref := signIn.Caller(r)
	if ref != nil {
		code := CodeUnauthorized
		if ref.Status == http.StatusForbidden {
			code = CodeForbidden
		}
		writeError(w, ref.Status, code, ref.Message, "")
		return
	}
	if !isAdmin(p) {
		writeError(w, http.StatusForbidden, CodeForbidden, "the token's cognito:groups hold no jetway:admin role", "")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), CallTimeout)
	defer cancel()
	f(h, &call{g: g, w: w, r: r, ctx: ctx, caller: p})
}

// adminVerifier is door.Verifier over VerifyAdmin: the one sign-in's
// rules (header, no query-string tokens), without an app.
type adminVerifier struct{ v Verifier }

func (a adminVerifier) Verify(ctx context.Context, token string) (auth.Principal, error) {
	return a.v.VerifyAdmin(ctx, token)
}

func isAdmin(p auth.Principal) bool {
	return slices.ContainsFunc(p.Groups, func(g string) bool { return g == RoleAdmin || strings.HasPrefix(g, RoleTenantAdmin) })
}

// superAdmin reports whether p may do everything.
func superAdmin(p auth.Principal) bool { return slices.Contains(p.Groups, RoleAdmin) }

// mayTenant reports whether p may read and change tenant.
func mayTenant(p auth.Principal, tenant string) bool {
	return superAdmin(p) || slices.Contains(p.Groups, RoleTenantAdmin+tenant)
}

// tenantParam checks the path's tenant and the caller's right to it.
func (h *Handler) tenantParam(c *call) (string, bool) {
	id := c.param("tenant")
	if !idPattern.MatchString(id) {
		writeError(c.w, http.StatusBadRequest, CodeInvalid, fmt.Sprintf("tenant id %q: want [a-z0-9][a-z0-9-]{0,62}", id), "tenant")
		return "", false
	}
	if !mayTenant(c.caller, id) {
		writeError(c.w, http.StatusForbidden, CodeForbidden, "no admin role for tenant "+id, "")
		return "", false
	}
	return id, true
}

func (h *Handler) idParam(c *call, name, kind string) (string, bool) {
	id := c.param(name)
	if !idPattern.MatchString(id) {
		writeError(c.w, http.StatusBadRequest, CodeInvalid, fmt.Sprintf("%s id %q: want [a-z0-9][a-z0-9-]{0,62}", kind, id), name)
		return "", false
	}
	return id, true
}

func (h *Handler) subParam(c *call) (string, bool) {
	sub := c.param("sub")
	if msg := config.SubProblem(sub); msg != "" {
		writeError(c.w, http.StatusBadRequest, CodeInvalid, "user "+msg, "sub")
		return "", false
	}
	return sub, true
}

func (h *Handler) modelsAllowed(c *call) bool {
	if !superAdmin(c.caller) {
		writeError(c.w, http.StatusForbidden, CodeForbidden, "the model catalogue needs the jetway:admin role", "")
		return false
	}
	return true
}

// precondition reads If-None-Match: * or If-Match; a write with neither is 428.
func precondition(c *call, del bool) (configstore.Precondition, bool) {
	if !del && strings.TrimSpace(c.r.Header.Get("If-None-Match")) == "*" {
		return configstore.Precondition{Create: true}, true
	}
	if m := strings.TrimSpace(c.r.Header.Get("If-Match")); m != "" {
		m = strings.TrimPrefix(m, "W/")
		return configstore.Precondition{IfMatch: strings.Trim(m, `"`)}, true
	}
	want := "If-Match: <version> (or If-None-Match: * to create)"
	if del {
		want = "If-Match: <version>"
	}
	writeError(c.w, http.StatusPreconditionRequired, CodePreconditionRequired, "a write needs "+want, "")
	return configstore.Precondition{}, false
}

// writable answers 409 when the tenants file is the configuration.
func (h *Handler) writable(c *call) bool {
	if h.Service == nil {
		writeError(c.w, http.StatusConflict, CodeConflict,
			"the configuration is the tenants file, read-only: set JETWAY_CONFIG_TABLE to change it at runtime", "")
		return false
	}
	return true
}

// body reads a write's body, at most MaxBodyBytes.
func body(c *call) ([]byte, bool) {
	b, err := io.ReadAll(http.MaxBytesReader(c.w, c.r.Body, MaxBodyBytes))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		writeError(c.w, http.StatusRequestEntityTooLarge, CodePayloadTooLarge, fmt.Sprintf("the body is over %d bytes", MaxBodyBytes), "")
		return nil, false
	case err != nil:
		writeError(c.w, http.StatusBadRequest, CodeInvalid, "the body could not be read: "+err.Error(), "")
		return nil, false
	}
	return b, true
}

// fail answers a write's or read's error.
func (h *Handler) fail(c *call, err error) {
	if errs := config.Errors(err); len(errs) > 0 {
		msgs := make([]string, len(errs))
		for i, e := range errs {
			msgs[i] = e.Error()
		}
		writeError(c.w, http.StatusBadRequest, CodeInvalid, strings.Join(msgs, "; "), errs[0].Path)
		return
	}
	switch {
	case errors.Is(err, configstore.ErrStale):
		writeError(c.w, http.StatusPreconditionFailed, CodePreconditionFailed, "the document's version is not the one in If-Match: read it again", "")
	case errors.Is(err, configstore.ErrExists):
		writeError(c.w, http.StatusPreconditionFailed, CodePreconditionFailed, "the document exists (If-None-Match: *)", "")
	case errors.Is(err, configstore.ErrNotFound):
		writeError(c.w, http.StatusNotFound, CodeNotFound, strings.TrimPrefix(err.Error(), "configstore: "), "")
	case errors.Is(err, configstore.ErrInUse):
		writeError(c.w, http.StatusConflict, CodeConflict, strings.TrimPrefix(err.Error(), "configstore: the document is in use: "), "")
	case errors.Is(err, configstore.ErrTooLarge):
		writeError(c.w, http.StatusRequestEntityTooLarge, CodePayloadTooLarge, strings.TrimPrefix(err.Error(), "configstore: "), "")
	default:
		if h.Logger != nil {
			h.Logger.Warn("admin_store_unavailable", zap.String("path", c.r.URL.Path), zap.String("actor", c.caller.Subject), zap.Error(err))
		}
		writeError(c.w, http.StatusServiceUnavailable, CodeUnavailable, "the config store cannot be written now; nothing was stored: retry", "")
	}
}

func (h *Handler) logWrite(c *call, action, version string) {
	if h.Logger != nil {
		h.Logger.Info("admin_write", zap.String("actor", c.caller.Subject), zap.String("action", action),
			zap.String("path", c.r.URL.Path), zap.String("version", version))
	}
}

// put is every document write: the store must be writable, the write
// conditional, the body a document of D by the tenants file's rules;
// store writes it, and answer is the stored document's form.
func put[D any](h *Handler, c *call, decode func([]byte) (*D, error),
	store func(*D, configstore.Precondition) (configstore.Result, error), answer func(*D, string) any) {
	if !h.writable(c) {
		return
	}
	pre, ok := precondition(c, false)
	if !ok {
		return
	}
	b, ok := body(c)
	if !ok {
		return
	}
	d, err := decode(b)
	if err == nil {
		var res configstore.Result
		res, err = store(d, pre)
		if errors.Is(err, configstore.ErrAuditLost) && res.Version != "" {
			// Stored: the answer says so; the missing entry is logged.
			if h.Logger != nil {
				h.Logger.Error("admin_audit_lost", zap.String("path", c.r.URL.Path), zap.String("actor", c.caller.Subject), zap.Error(err))
			}
			err = nil
		}
		if err == nil {
			h.logWrite(c, "put", res.Version)
			writeJSON(c.w, created(res), res.Version, answer(d, res.Version))
			return
		}
	}
	h.fail(c, err)
}

// remove is every document delete: writable, with If-Match.
func (h *Handler) remove(c *call, del func(configstore.Precondition) error) {
	if !h.writable(c) {
		return
	}
	pre, ok := precondition(c, true)
	if !ok {
		return
	}
	if err := del(pre); err != nil && !errors.Is(err, configstore.ErrAuditLost) {
		h.fail(c, err)
		return
	} else if err != nil && h.Logger != nil {
		h.Logger.Error("admin_audit_lost", zap.String("path", c.r.URL.Path), zap.String("actor", c.caller.Subject), zap.Error(err))
	}
	h.logWrite(c, "delete", "")
	c.w.WriteHeader(http.StatusNoContent)
}

// ---- tenants

func (h *Handler) listTenants(c *call) {
	type entry struct {
		ID      string `json:"id"`
		Version string `json:"version,omitempty"`
	}
	out := []entry{}
	for _, t := range h.Live.Load().Tenants {
		if mayTenant(c.caller, t.ID) {
			out = append(out, entry{t.ID, t.Version})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	writeJSON(c.w, http.StatusOK, "", map[string]any{"tenants": out})
}

// tenantDoc is a tenant's document: apps carry their tenant's version.
func tenantDoc(t *config.Tenant) config.Tenant {
	d := *t
	d.Apps = slices.Clone(t.Apps)
	for i := range d.Apps {
		d.Apps[i].Version = t.Version
	}
	if d.Limits == nil {
		d.Limits = []config.Limit{}
	}
	return d
}

func (h *Handler) getTenant(c *call) {
	id, ok := h.tenantParam(c)
	if !ok {
		return
	}
	t, found := h.Live.Load().Tenant(id)
	if !found {
		writeError(c.w, http.StatusNotFound, CodeNotFound, "no tenant "+id, "")
		return
	}
	writeJSON(c.w, http.StatusOK, t.Version, tenantDoc(t))
}

func (h *Handler) putTenant(c *call) {
	id, ok := h.tenantParam(c)
	if ok {
		put(h, c, config.DecodeTenant, func(t *config.Tenant, pre configstore.Precondition) (configstore.Result, error) {
			return h.Service.PutTenant(c.ctx, c.caller.Subject, c.r.URL.Path, id, t, pre)
		}, func(t *config.Tenant, version string) any {
			t.Version = version
			if cur, found := h.Live.Load().Tenant(id); found && cur.Version == version {
				t = cur
			}
			return tenantDoc(t)
		})
	}
}
func created(r configstore.Result) int {
	if r.Created {
		return http.StatusCreated
	}
	return http.StatusOK
}

func (h *Handler) deleteTenant(c *call) {
	if id, ok := h.tenantParam(c); ok {
		h.remove(c, func(pre configstore.Precondition) error {
			return h.Service.DeleteTenant(c.ctx, c.caller.Subject, c.r.URL.Path, id, pre)
		})
	}
}

// ---- apps

func (h *Handler) appParams(c *call) (tenant, app string, ok bool) {
	if tenant, ok = h.tenantParam(c); !ok {
		return
	}
	app, ok = h.idParam(c, "app", "app")
	return
}

func (h *Handler) getApp(c *call) {
	tenant, app, ok := h.appParams(c)
	if !ok {
		return
	}
	t, a, found := h.Live.Load().App(tenant, app)
	if !found {
		writeError(c.w, http.StatusNotFound, CodeNotFound, "no app "+app+" in tenant "+tenant, "")
		return
	}
	d := *a
	d.Version = t.Version
	writeJSON(c.w, http.StatusOK, t.Version, d)
}

func (h *Handler) putApp(c *call) {
	if tenant, app, ok := h.appParams(c); ok {
		put(h, c, config.DecodeApp, func(a *config.App, pre configstore.Precondition) (configstore.Result, error) {
			return h.Service.PutApp(c.ctx, c.caller.Subject, c.r.URL.Path, tenant, app, a, pre)
		}, func(a *config.App, version string) any { a.Version = version; return a })
	}
}
func (h *Handler) deleteApp(c *call) {
	if tenant, app, ok := h.appParams(c); ok {
		h.remove(c, func(pre configstore.Precondition) error {
			return h.Service.DeleteApp(c.ctx, c.caller.Subject, c.r.URL.Path, tenant, app, pre)
		})
	}
}

// ---- users

func userDoc(u config.UserOverride) config.UserOverride { return u }

func (h *Handler) listUsers(c *call) {
	tenant, app, ok := h.appParams(c)
	if !ok {
		return
	}
	_, a, found := h.Live.Load().App(tenant, app)
	if !found {
		writeError(c.w, http.StatusNotFound, CodeNotFound, "no app "+app+" in tenant "+tenant, "")
		return
	}
	after := c.r.URL.Query().Get("after")
	var page []config.UserOverride
	for _, u := range a.Users {
		if u.Sub > after {
			page = append(page, u)
		}
	}
	sort.Slice(page, func(i, j int) bool { return page[i].Sub < page[j].Sub })
	out := map[string]any{}
	if len(page) > PageSize {
		page = page[:PageSize]
		out["next"] = page[PageSize-1].Sub
	}
	users := make([]config.UserOverride, len(page))
	for i, u := range page {
		users[i] = userDoc(u)
	}
	out["users"] = users
	writeJSON(c.w, http.StatusOK, "", out)
}

func (h *Handler) userParams(c *call) (tenant, app, sub string, ok bool) {
	if tenant, app, ok = h.appParams(c); !ok {
		return
	}
	sub, ok = h.subParam(c)
	return
}

func (h *Handler) getUser(c *call) {
	tenant, app, sub, ok := h.userParams(c)
	if !ok {
		return
	}
	u, found := h.Live.Load().User(tenant, app, sub)
	if !found {
		writeError(c.w, http.StatusNotFound, CodeNotFound, "no override of user "+sub+" in app "+tenant+"/"+app, "")
		return
	}
	writeJSON(c.w, http.StatusOK, u.Version, userDoc(*u))
}

func (h *Handler) putUser(c *call) {
	if tenant, app, sub, ok := h.userParams(c); ok {
		put(h, c, config.DecodeUser, func(u *config.UserOverride, pre configstore.Precondition) (configstore.Result, error) {
			return h.Service.PutUser(c.ctx, c.caller.Subject, c.r.URL.Path, tenant, app, sub, u, pre)
		}, func(u *config.UserOverride, version string) any { u.Version = version; return u })
	}
}
func (h *Handler) deleteUser(c *call) {
	if tenant, app, sub, ok := h.userParams(c); ok {
		h.remove(c, func(pre configstore.Precondition) error {
			return h.Service.DeleteUser(c.ctx, c.caller.Subject, c.r.URL.Path, tenant, app, sub, pre)
		})
	}
}

// ---- models

func (h *Handler) listModels(c *call) {
	if !h.modelsAllowed(c) {
		return
	}
	writeJSON(c.w, http.StatusOK, "", map[string]any{"models": h.Live.Load().Models})
}

func (h *Handler) getModel(c *call) {
	if !h.modelsAllowed(c) {
		return
	}
	id, ok := h.idParam(c, "id", "model")
	if !ok {
		return
	}
	m, found := h.Live.Load().Model(id)
	if !found {
		writeError(c.w, http.StatusNotFound, CodeNotFound, "no model "+id, "")
		return
	}
	writeJSON(c.w, http.StatusOK, m.Version, m)
}

func (h *Handler) putModel(c *call) {
	if !h.modelsAllowed(c) {
		return
	}
	if id, ok := h.idParam(c, "id", "model"); ok {
		put(h, c, config.DecodeModel, func(m *config.Model, pre configstore.Precondition) (configstore.Result, error) {
			return h.Service.PutModel(c.ctx, c.caller.Subject, c.r.URL.Path, id, m, pre)
		}, func(m *config.Model, version string) any { m.Version = version; return m })
	}
}
func (h *Handler) deleteModel(c *call) {
	if !h.modelsAllowed(c) {
		return
	}
	if id, ok := h.idParam(c, "id", "model"); ok {
		h.remove(c, func(pre configstore.Precondition) error {
			return h.Service.DeleteModel(c.ctx, c.caller.Subject, c.r.URL.Path, id, pre)
		})
	}
}

// ---- audit and usage

// since reads ?since= as a duration back from now (24h) or an RFC 3339 time.
func since(c *call, name string, def time.Duration) (time.Time, bool) {
	v := c.r.URL.Query().Get(name)
	if v == "" {
		if def == 0 {
			return time.Time{}, true
		}
		return time.Now().Add(-def), true
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return time.Now().Add(-d), true
	}
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, true
	}
	writeError(c.w, http.StatusBadRequest, CodeInvalid, fmt.Sprintf("%s=%q: want a duration back from now (24h) or an RFC 3339 time", name, v), name)
	return time.Time{}, false
}

func (h *Handler) audit(c *call) {
	from, ok := since(c, "since", 24*time.Hour)
	if !ok {
		return
	}
	tenant := c.r.URL.Query().Get("tenant")
	if tenant == "" && !superAdmin(c.caller) {
		var mine []string
		for _, g := range c.caller.Groups {
			if t, ok := strings.CutPrefix(g, RoleTenantAdmin); ok {
				mine = append(mine, t)
			}
		}
		if len(mine) != 1 {
			writeError(c.w, http.StatusBadRequest, CodeInvalid, "name the tenant: ?tenant=<id>", "tenant")
			return
		}
		tenant = mine[0]
	}
	if tenant != "" && !mayTenant(c.caller, tenant) {
		writeError(c.w, http.StatusForbidden, CodeForbidden, "no admin role for tenant "+tenant, "")
		return
	}
	if h.Audit == nil {
		writeJSON(c.w, http.StatusOK, "", map[string]any{"entries": []any{}})
		return
	}
	entries, next, err := h.Audit.AuditEntries(c.ctx, configstore.AuditQuery{Tenant: tenant, Since: from,
		After: c.r.URL.Query().Get("after"), Limit: PageSize})
	if err != nil {
		h.fail(c, err)
		return
	}
	type entry struct {
		At     string          `json:"at"`
		Actor  string          `json:"actor"`
		Action string          `json:"action"`
		Path   string          `json:"path"`
		Before json.RawMessage `json:"before"`
		After  json.RawMessage `json:"after"`
	}
	out := make([]entry, 0, len(entries))
	for _, e := range entries {
		raw := func(b []byte) json.RawMessage {
			if len(b) == 0 {
				return json.RawMessage("null")
			}
			return b
		}
		out = append(out, entry{At: e.At.UTC().Format(time.RFC3339Nano), Actor: e.Actor, Action: e.Action, Path: e.Path,
			Before: raw(e.Before), After: raw(e.After)})
	}
	res := map[string]any{"entries": out}
	if next != "" {
		res["next"] = next
	}
	writeJSON(c.w, http.StatusOK, "", res)
}

// usage groups the usage records of a tenant (local files in dev mode).
func (h *Handler) usage(c *call) {
	tenant, ok := h.tenantParam(c)
	if !ok {
		return
	}
	from, ok := since(c, "since", 24*time.Hour)
	if !ok {
		return
	}
	until, ok := since(c, "until", 0)
	if !ok {
		return
	}
	by := []string{"app", "model"}
	if v := c.r.URL.Query().Get("by"); v != "" {
		by = nil
		for _, k := range strings.Split(v, ",") {
			if k = strings.TrimSpace(k); k != "app" && k != "user" && k != "model" {
				writeError(c.w, http.StatusBadRequest, CodeInvalid, fmt.Sprintf("by=%q: group by any of app, user, model", v), "by")
				return
			}
			by = append(by, strings.TrimSpace(k))
		}
	}
	if h.UsageDir == "" {
		writeError(c.w, http.StatusServiceUnavailable, CodeUnavailable,
			"usage records go to the analytics store (Firehose, Athena): query them there (docs/analytics.md)", "")
		return
	}
	recs, _, err := telemetry.ReadUsageDir(h.UsageDir)
	if err != nil {
		writeError(c.w, http.StatusServiceUnavailable, CodeUnavailable, "the usage records cannot be read: "+err.Error(), "")
		return
	}
	type row struct {
		App          string  `json:"app,omitempty"`
		User         string  `json:"user,omitempty"`
		Model        string  `json:"model,omitempty"`
		Requests     int64   `json:"requests"`
		InputTokens  int64   `json:"input_tokens"`
		OutputTokens int64   `json:"output_tokens"`
		CacheRead    int64   `json:"cache_read_input_tokens"`
		CostUSD      float64 `json:"cost_usd"`
	}
	rows := map[[3]string]*row{}
	var order [][3]string
	for _, r := range recs {
		if r.Tenant != tenant || r.TS.Before(from) || (!until.IsZero() && !r.TS.Before(until)) {
			continue
		}
		var k [3]string
		for _, b := range by {
			switch b {
			case "app":
				k[0] = r.App
			case "user":
				k[1] = r.User
			case "model":
				k[2] = r.Model
			}
		}
		g := rows[k]
		if g == nil {
			g = &row{App: k[0], User: k[1], Model: k[2]}
			rows[k] = g
			order = append(order, k)
		}
		g.Requests++
		g.InputTokens += r.InputTokens
		g.OutputTokens += r.OutputTokens
		g.CacheRead += r.CacheReadInputTokens
		g.CostUSD += r.CostUSD
	}
	out := make([]row, 0, len(order))
	for _, k := range order {
		out = append(out, *rows[k])
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CostUSD > out[j].CostUSD })
	writeJSON(c.w, http.StatusOK, "", map[string]any{"rows": out})
}

func writeError(w http.ResponseWriter, status int, code, message, field string) {
	e := map[string]string{"code": code, "message": message}
	if field != "" {
		e["field"] = field
	}
	writeJSON(w, status, "", map[string]any{"error": e})
}

func writeJSON(w http.ResponseWriter, status int, version string, v any) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	if version != "" {
		h.Set("ETag", `"`+version+`"`)
	}
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}
