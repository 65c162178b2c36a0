package web

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/jetway-gateway/jetway/internal/auth"
	"github.com/jetway-gateway/jetway/internal/config"
)

// TestConsoleIsServed: with Console the admin console and its files are
// at /admin (the page with the CSP), beside or without the demo page;
// without it /admin is not there. The dev endpoints serve both.
func TestConsoleIsServed(t *testing.T) {
	cfg, err := config.Load("testdata/jetway.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dev, err := auth.LoadOrCreateDevIssuer(filepath.Join(t.TempDir(), "key.pem"), "jetway-dev")
	if err != nil {
		t.Fatal(err)
	}
	serve := func(o Options) string {
		o.DevIssuer, o.Config = dev, config.NewLive(cfg)
		r := gin.New()
		Mount(r, o)
		srv := httptest.NewServer(r)
		t.Cleanup(srv.Close)
		return srv.URL
	}
	status := func(url string) int {
		resp, _ := get(t, url)
		return resp.StatusCode
	}

	only := serve(Options{Console: true, NoDemo: true})
	for path, want := range map[string]string{
		"/admin":                     "text/html",
		"/admin/console.js":          "text/javascript",
		"/admin/console.css":         "text/css",
		"/admin/vendor/chart.umd.js": "text/javascript",
	} {
		resp, body := get(t, only+path)
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), want) || body == "" {
			t.Errorf("%s: %d %q", path, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		if csp := resp.Header.Get("Content-Security-Policy"); (path == "/admin") != (csp == contentSecurityPolicy) {
			t.Errorf("%s: Content-Security-Policy %q", path, csp)
		}
	}
	if s := status(only + "/"); s != http.StatusNotFound {
		t.Errorf("the demo page without the demo: %d", s)
	}
	// The console's dev sign-in: a token with an admin group.
	body, _ := json.Marshal(map[string]any{"sub": "ops", "tenant": "contoso", "app": "support-assistant", "groups": []string{"jetway:admin"}})
	resp, err := http.Post(only+"/dev/token", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var tok struct {
		Token string `json:"token"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&tok)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || tok.Token == "" {
		t.Fatalf("dev token for the console: %d", resp.StatusCode)
	}
	if s := status(only + "/config.json"); s != http.StatusOK {
		t.Errorf("/config.json without the demo: %d", s)
	}

	both := serve(Options{Console: true})
	if status(both+"/") != http.StatusOK || status(both+"/admin") != http.StatusOK {
		t.Error("the demo page and the console are not both served")
	}
	demo := serve(Options{})
	if s := status(demo + "/admin"); s != http.StatusNotFound {
		t.Errorf("/admin without Console: %d", s)
	}
}

// TestConsoleFilesAreReferenced: every file of the console the page
// names is served, and every embedded file is named by the page or
// Mount (no stray files in the binary).
func TestConsoleFilesAreReferenced(t *testing.T) {
	page, err := fs.ReadFile(ConsoleFiles(), "index.html")
	if err != nil {
		t.Fatal(err)
	}
	served := map[string]bool{"index.html": true, "console.js": true, "console.css": true}
	for name := range consoleVendored {
		served[name] = true
	}
	err = fs.WalkDir(ConsoleFiles(), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if !served[path] {
			t.Errorf("admin/%s is embedded but not served", path)
		}
		if path != "index.html" && !strings.Contains(string(page), ConsolePath+"/"+path) {
			t.Errorf("admin/index.html does not load %s/%s", ConsolePath, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
