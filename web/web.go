// Package web serves the demo chat page and the browser client module
// (jetway.js), embedded in the binary, and in dev mode the endpoints the page
// uses to offer apps and mint dev tokens. See web/README.md.
package web

import (
	"embed"
	"io/fs"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/jetway-gateway/jetway/internal/auth"
	"github.com/jetway-gateway/jetway/internal/config"
)

//go:embed static
var static embed.FS

// Files is the page and the client module, rooted at the page.
func Files() fs.FS {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	return sub
}

// Options configure the page.
type Options struct {
	DevIssuer *auth.DevIssuer // dev mode: mint tokens at POST /dev/token; nil in production
	Config    *config.Config  // tenants and apps offered by the dev sign-in
	Cognito   Cognito         // production: the hosted UI the page signs users in with
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

// contentSecurityPolicy lets the page load only its own files and talk to
// gateways (ws:, wss:) and the Cognito token endpoint (https:).
const contentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self' ws: wss: https:; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// Mount adds the page at / with /jetway.js, /app.js, /style.css and
// /config.json and, in dev mode, /dev/apps and /dev/token.
func Mount(r gin.IRoutes, o Options) {
	files := http.FS(Files())
	serve := func(name string) gin.HandlerFunc {
		return func(c *gin.Context) {
			h := c.Writer.Header()
			h.Set("Cache-Control", "no-cache")
			h.Set("X-Content-Type-Options", "nosniff")
			h.Set("Referrer-Policy", "no-referrer")
			if name == "/" {
				h.Set("Content-Security-Policy", contentSecurityPolicy)
			}
			c.FileFromFS(name, files)
		}
	}
	for _, name := range []string{"/", "/jetway.js", "/app.js", "/style.css"} {
		r.GET(name, serve(name))
	}
	r.GET("/config.json", func(c *gin.Context) {
		c.Header("Cache-Control", "no-cache")
		c.JSON(http.StatusOK, gin.H{"dev": o.DevIssuer != nil, "cognito": o.Cognito})
	})
	if o.DevIssuer == nil {
		return
	}
	r.GET("/dev/apps", func(c *gin.Context) {
		type app struct {
			Tenant string   `json:"tenant"`
			App    string   `json:"app"`
			Models []string `json:"models"`
		}
		out := []app{}
		for _, t := range o.Config.Tenants {
			for _, a := range t.Apps {
				models := append([]string{}, a.Models.Allow...)
				out = append(out, app{Tenant: t.ID, App: a.ID, Models: models})
			}
		}
		c.JSON(http.StatusOK, gin.H{"apps": out})
	})
	r.POST("/dev/token", func(c *gin.Context) {
		var req struct {
			Sub    string `json:"sub"`
			Tenant string `json:"tenant"`
			App    string `json:"app"`
			TTLSec int    `json:"ttl_s"`
		}
		if err := c.ShouldBindJSON(&req); err != nil || req.Sub == "" {
			c.JSON(http.StatusBadRequest, gin.H{"error": gin.H{"code": "invalid_request", "message": "want {sub, tenant, app}"}})
			return
		}
		_, a, ok := o.Config.App(req.Tenant, req.App)
		if !ok || len(a.ClientIDs) == 0 {
			c.JSON(http.StatusNotFound, gin.H{"error": gin.H{"code": "not_found", "message": "no such tenant/app"}})
			return
		}
		ttl := time.Hour
		if req.TTLSec > 0 {
			ttl = time.Duration(req.TTLSec) * time.Second
		}
		tok, err := o.DevIssuer.Mint(auth.MintOptions{Subject: req.Sub, Username: req.Sub, Tenant: req.Tenant,
			ClientID: a.ClientIDs[0], TTL: ttl})
		if err != nil {
			c.JSON(http.StatusInternalServerError, gin.H{"error": gin.H{"code": "internal", "message": "mint failed"}})
			return
		}
		c.JSON(http.StatusOK, gin.H{"token": tok, "expires_in": int(ttl / time.Second)})
	})
}
