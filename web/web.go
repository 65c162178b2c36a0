// Package web serves the demo chat page and the browser client module
// (jetway.js), the admin console (admin/), embedded in the binary, and in
// dev mode the endpoints the pages use to offer apps and mint dev tokens.
// See web/README.md.
package web

import (
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/jetway-gateway/jetway/internal/auth"
	"github.com/jetway-gateway/jetway/internal/config"
	"github.com/jetway-gateway/jetway/internal/protocol"
)

//go:embed static
var static embed.FS

//go:embed admin
var console embed.FS

// Files is the page and the client module, rooted at the page.
func Files() fs.FS {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	return sub
}

// ConsoleFiles is the admin console, rooted at its page.
func ConsoleFiles() fs.FS {
	sub, err := fs.Sub(console, "admin")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	return sub
}

// ConsolePath is where the admin console is served.
const ConsolePath = "/admin"

// Options configure the page.
type Options struct {
	DevIssuer *auth.DevIssuer // dev mode: mint tokens at POST /dev/token; nil in production
	Config    *config.Live    // tenants and apps offered by the dev sign-in
	Cognito   Cognito         // production: the hosted UI the page signs users in with
	// Console also serves the admin console at ConsolePath; NoDemo
	// leaves the demo page out (the console, /config.json and the dev
	// endpoints stay).
	Console, NoDemo bool
}

// Cognito is the Cognito hosted UI the page uses in production (the
// authorization code flow with PKCE, for a public app client without a
// secret). Empty fields are shown on the page as settings still to make.
type Cognito struct {
	// Domain is the hosted UI's base URL, https://<prefix>.auth.<region>.amazoncognito.com.
	Domain string `json:"domain"`
	// ClientID is the app client id (one of an app's client_ids in the tenants file).
	ClientID string `json:"client_id"`
	// RedirectURI must be one of the app client's callback URLs; default: the page's own URL.
	RedirectURI string `json:"redirect_uri"`
	// Scopes is space-separated; default "openid".
	Scopes string `json:"scopes"`
}

// vendored are the page's third-party modules: the Markdown parser and the
// HTML sanitizer, committed under static/ so the binary needs no npm.
// `make web-vendor` copies them from node_modules (the versions pinned in the
// root package.json); a test fails when the copies differ. Keys are the
// paths under static/, values the paths under node_modules/.
var vendored = map[string]string{
	"vendor/marked.esm.js": "marked/lib/marked.esm.js",
	"vendor/purify.es.mjs": "dompurify/dist/purify.es.mjs",
}

// consoleVendored are the console's, as vendored but under admin/: the
// chart library (Chart.js's UMD build, which has no imports).
var consoleVendored = map[string]string{
	"vendor/chart.umd.js": "chart.js/dist/chart.umd.js",
}

// contentSecurityPolicy lets the page load only its own files and talk to
// gateways (ws:, wss:) and the Cognito token endpoint (https:).
const contentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self' ws: wss: https:; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// Mount adds the page at / with /jetway.js, /app.js, /markdown.js, /style.css, the
// vendored modules and /config.json and, in dev mode, /dev/apps and /dev/token;
// with o.Console the admin console at /admin (its files under /admin/).
func Mount(r gin.IRoutes, o Options) {
	serveFS := func(files fs.FS, page bool, name string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			h := w.Header()
			h.Set("Cache-Control", "no-cache")
			h.Set("X-Content-Type-Options", "nosniff")
			h.Set("Referrer-Policy", "no-referrer")
			if page {
				h.Set("Content-Security-Policy", contentSecurityPolicy)
			}
			http.ServeFileFS(w, r, files, name)
		}
	}
	if !o.NoDemo {
		files := Files()
		r.GET("/", gin.WrapF(serveFS(files, true, "index.html")))
		names := []string{"jetway.js", "app.js", "markdown.js", "style.css"}
		for name := range vendored {
			names = append(names, name)
		}
		for _, name := range names {
			r.GET("/"+name, gin.WrapF(serveFS(files, false, name)))
		}
	}
	if o.Console {
		files := ConsoleFiles()
		r.GET(ConsolePath, gin.WrapF(serveFS(files, true, "index.html")))
		names := []string{"console.js", "console.css"}
		for name := range consoleVendored {
			names = append(names, name)
		}
		for _, name := range names {
			r.GET(ConsolePath+"/"+name, gin.WrapF(serveFS(files, false, name)))
		}
	}
	r.GET("/config.json", gin.WrapF(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		writeJSON(w, http.StatusOK, map[string]any{"dev": o.DevIssuer != nil, "cognito": o.Cognito})
	}))
	if o.DevIssuer == nil {
		return
	}
	r.GET("/dev/apps", gin.WrapF(func(w http.ResponseWriter, r *http.Request) {
		type app struct {
			Tenant string   `json:"tenant"`
			App    string   `json:"app"`
			Models []string `json:"models"`
		}
		out := []app{}
		for _, t := range o.Config.Load().Tenants {
			for _, a := range t.Apps {
				models := append([]string{}, a.Models.Allow...)
				out = append(out, app{Tenant: t.ID, App: a.ID, Models: models})
			}
		}
		writeJSON(w, http.StatusOK, map[string]any{"apps": out})
	}))
	r.POST("/dev/token", gin.WrapF(func(w http.ResponseWriter, r *http.Request) {
		mintDevToken(w, r, o)
	}))
}

// writeJSON answers with v as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "encode: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// Bounds of POST /dev/token.
const (
	devTokenMaxBody   = 4 << 10 // bytes of the JSON body
	devTokenMaxTTL    = 24 * 60 * 60
	devTokenMaxGroups = 16  // cognito:groups entries a dev token may ask for (admin roles)
	devTokenMaxSub    = 128 // bytes: the sub becomes a log field and a usage-record value
)

// mintDevToken mints a dev token for the page. Only the page itself, served
// from this loopback listener, may ask: another site open in the same
// browser must not get tokens, nor one whose name resolves to 127.0.0.1
// (DNS rebinding: its Origin and Host agree, but neither is a loopback name).
func mintDevToken(w http.ResponseWriter, r *http.Request, o Options) {
	fail := func(status int, code, msg string) {
		writeJSON(w, status, map[string]any{"error": map[string]string{"code": code, "message": msg}})
	}
	if !loopbackHost(r.Host) {
		fail(http.StatusForbidden, "forbidden", "host not allowed: ask a loopback name or address (localhost, 127.0.0.1, [::1])")
		return
	}
	if origin := r.Header.Get("Origin"); origin != "" && !ownLoopbackOrigin(origin, listenerPort(r)) {
		fail(http.StatusForbidden, "forbidden", "origin not allowed")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, devTokenMaxBody)
	var req struct {
		Sub    string   `json:"sub"`
		Tenant string   `json:"tenant"`
		App    string   `json:"app"`
		TTLSec int64    `json:"ttl_s"`
		Groups []string `json:"groups"` // more cognito:groups: admin roles
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			fail(http.StatusRequestEntityTooLarge, "invalid_request", fmt.Sprintf("body over %d bytes", devTokenMaxBody))
			return
		}
		fail(http.StatusBadRequest, "invalid_request", "want a JSON object {sub, tenant, app, ttl_s}")
		return
	}
	switch {
	case req.Sub == "" || len(req.Sub) > devTokenMaxSub:
		fail(http.StatusBadRequest, "invalid_request", fmt.Sprintf("sub must be 1-%d bytes", devTokenMaxSub))
		return
	case len(req.Groups) > devTokenMaxGroups:
		fail(http.StatusBadRequest, "invalid_request", fmt.Sprintf("at most %d groups", devTokenMaxGroups))
		return
	case slices.ContainsFunc(req.Groups, func(g string) bool { return g == "" || len(g) > devTokenMaxSub }):
		fail(http.StatusBadRequest, "invalid_request", fmt.Sprintf("a group must be 1-%d bytes", devTokenMaxSub))
		return
	case req.TTLSec < 0 || req.TTLSec > devTokenMaxTTL:
		fail(http.StatusBadRequest, "invalid_request", fmt.Sprintf("ttl_s must be between 1 and %d (0 or absent: 1 hour)", devTokenMaxTTL))
		return
	}
	t, a, ok := o.Config.App(req.Tenant, req.App)
	if t == nil {
		fail(http.StatusNotFound, "not_found", "no tenant "+strconv.Quote(protocol.Clip(req.Tenant)))
		return
	}
	if !ok || len(a.ClientIDs) == 0 {
		fail(http.StatusNotFound, "not_found", "no app "+strconv.Quote(protocol.Clip(req.App))+" in tenant "+strconv.Quote(t.ID))
		return
	}
	ttl := time.Duration(req.TTLSec) * time.Second
	tok, err := o.DevIssuer.Mint(auth.MintOptions{Subject: req.Sub, Username: req.Sub, Tenant: req.Tenant,
		ClientID: a.ClientIDs[0], TTL: ttl, Groups: req.Groups})
	if err != nil {
		fail(http.StatusInternalServerError, "internal", "mint failed")
		return
	}
	if ttl == 0 {
		ttl = auth.DefaultMintTTL
	}
	writeJSON(w, http.StatusOK, map[string]any{"token": tok, "expires_in": int64(ttl / time.Second)})
}

// loopbackHost reports whether host (a Host header: name or address, with
// an optional port) is localhost or a loopback address.
func loopbackHost(host string) bool {
	name := host
	if h, _, err := net.SplitHostPort(host); err == nil {
		name = h
	}
	name = strings.TrimSuffix(strings.TrimPrefix(name, "["), "]")
	if strings.EqualFold(name, "localhost") {
		return true
	}
	ip := net.ParseIP(name)
	return ip != nil && ip.IsLoopback()
}

// listenerPort is the port the request arrived on (the listener's own),
// "" when unknown.
func listenerPort(r *http.Request) string {
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		if _, port, err := net.SplitHostPort(a.String()); err == nil {
			return port
		}
	}
	return ""
}

// ownLoopbackOrigin reports whether origin is this listener's own: http(s),
// a loopback name or address, and the listener's port.
func ownLoopbackOrigin(origin, port string) bool {
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || !loopbackHost(u.Host) {
		return false
	}
	p := u.Port()
	if p == "" {
		p = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	return port != "" && p == port
}
