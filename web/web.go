// Package web serves the demo chat page and the browser client module
// (jetway.js), embedded in the binary, and in dev mode the endpoint the page
// uses to mint dev tokens.
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
}

// Mount adds the page at / and, in dev mode, /dev/token and /dev/apps.
func Mount(r gin.IRoutes, o Options) {
	files := http.FS(Files())
	r.GET("/", func(c *gin.Context) { c.FileFromFS("/", files) })
	r.GET("/jetway.js", func(c *gin.Context) { c.FileFromFS("/jetway.js", files) })
	r.GET("/app.js", func(c *gin.Context) { c.FileFromFS("/app.js", files) })
	r.GET("/style.css", func(c *gin.Context) { c.FileFromFS("/style.css", files) })
	if o.DevIssuer == nil {
		return
	}
	r.GET("/dev/apps", func(c *gin.Context) {
		type app struct {
			Tenant string   `json:"tenant"`
			App    string   `json:"app"`
			Models []string `json:"models"`
		}
		var out []app
		for _, t := range o.Config.Tenants {
			for _, a := range t.Apps {
				out = append(out, app{Tenant: t.ID, App: a.ID, Models: a.Models.Allow})
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
