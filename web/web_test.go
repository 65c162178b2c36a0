package web

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"

	"go.uber.org/zap/zaptest"

	"github.com/jetway-gateway/jetway/internal/auth"
	"github.com/jetway-gateway/jetway/internal/config"
)

// devServer mounts the page in dev mode over the test tenants.
func devServer(t *testing.T) (*httptest.Server, *auth.DevIssuer, *config.Config) {
	t.Helper()
	cfg, err := config.Load("testdata/jetway.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dev, err := auth.LoadOrCreateDevIssuer(filepath.Join(t.TempDir(), "key.pem"), "jetway-dev")
	if err != nil {
		t.Fatal(err)
	}
	r := gin.New()
	Mount(r, Options{DevIssuer: dev, Config: config.NewLive(cfg)})
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return srv, dev, cfg
}

func get(t *testing.T, url string) (*http.Response, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func TestFilesAreServedWithTheirTypes(t *testing.T) {
	srv, _, _ := devServer(t)
	for path, want := range map[string]string{
		"/":                     "text/html",
		"/jetway.js":            "text/javascript",
		"/app.js":               "text/javascript",
		"/markdown.js":          "text/javascript",
		"/style.css":            "text/css",
		"/vendor/marked.esm.js": "text/javascript",
		"/vendor/purify.es.mjs": "text/javascript",
	} {
		resp, body := get(t, srv.URL+path)
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), want) {
			t.Errorf("%s: %d %q, want 200 %s", path, resp.StatusCode, resp.Header.Get("Content-Type"), want)
		}
		if resp.Header.Get("X-Content-Type-Options") != "nosniff" || resp.Header.Get("Cache-Control") != "no-cache" {
			t.Errorf("%s: headers %v", path, resp.Header)
		}
		if len(body) == 0 {
			t.Errorf("%s: empty", path)
		}
	}
	resp, body := get(t, srv.URL+"/")
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "connect-src 'self' ws: wss:") {
		t.Errorf("CSP %q", csp)
	}
	if !strings.Contains(body, `<script type="module" src="/app.js">`) {
		t.Error("index.html does not load app.js as a module")
	}
	_, js := get(t, srv.URL+"/jetway.js")
	for _, export := range []string{"export function connect(", "export class Client", "export class Call", "export class JetwayError", "export const SUBPROTOCOL = 'jetway.v1'"} {
		if !strings.Contains(js, export) {
			t.Errorf("jetway.js lacks %q", export)
		}
	}
}

func TestDevApps(t *testing.T) {
	srv, _, _ := devServer(t)
	resp, body := get(t, srv.URL+"/dev/apps")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	var out struct {
		Apps []struct {
			Tenant, App string
			Models      []string
		}
	}
	if err := json.Unmarshal([]byte(body), &out); err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(out.Apps)
	want := `[{"Tenant":"contoso","App":"support-assistant","Models":["mock-a","mock-b","mock-tools","mock-reasoning","mock-markdown"]},{"Tenant":"fabrikam","App":"tiny-quota","Models":["mock-cheap"]}]`
	if string(got) != want {
		t.Errorf("apps %s\nwant %s", got, want)
	}
	_, cfg := get(t, srv.URL+"/config.json")
	if !strings.Contains(cfg, `"dev":true`) {
		t.Errorf("config.json %s", cfg)
	}
}

func TestDevToken(t *testing.T) {
	srv, dev, cfg := devServer(t)
	post := func(body string) (int, map[string]any) {
		resp, err := http.Post(srv.URL+"/dev/token", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&m)
		return resp.StatusCode, m
	}
	if code, _ := post(`{"tenant":"contoso","app":"support-assistant"}`); code != http.StatusBadRequest {
		t.Errorf("no sub: %d, want 400", code)
	}
	if code, _ := post(`not json`); code != http.StatusBadRequest {
		t.Errorf("bad JSON: %d, want 400", code)
	}
	if code, _ := post(`{"sub":"ana","tenant":"contoso","app":"nope"}`); code != http.StatusNotFound {
		t.Errorf("unknown app: %d, want 404", code)
	}
	code, out := post(`{"sub":"ana","tenant":"fabrikam","app":"tiny-quota","ttl_s":120}`)
	if code != http.StatusOK || out["expires_in"] != float64(120) {
		t.Fatalf("mint: %d %v", code, out)
	}
	// The token is what the gateway's verifier accepts for that user and app.
	v, err := auth.NewVerifier(context.Background(), auth.Config{Issuer: dev.Issuer(), KeySet: dev.KeySet()}, cfg, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	p, err := v.Verify(context.Background(), out["token"].(string))
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	if p.Subject != "ana" || p.Tenant != "fabrikam" || p.App != "tiny-quota" {
		t.Errorf("principal %+v", p)
	}
}

// POST /dev/token refuses other sites, big bodies and lifetimes that
// would overflow, and names what is missing.
func TestDevTokenBounds(t *testing.T) {
	srv, _, _ := devServer(t)
	post := func(body, origin string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/dev/token", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	good := `{"sub":"ana","tenant":"contoso","app":"support-assistant"}`
	port := srv.URL[strings.LastIndex(srv.URL, ":")+1:]
	cases := []struct {
		name, body, origin string
		status             int
		msg                string
	}{
		{"other site", good, "https://evil.example.com", 403, "origin not allowed"},
		{"same origin", good, srv.URL, 200, "token"},
		{"own port by name", good, "http://localhost:" + port, 200, "token"},
		{"own port over IPv6", good, "http://[::1]:" + port, 200, "token"},
		{"another loopback port", good, "http://localhost:3000", 403, "origin not allowed"},
		{"loopback origin, https scheme on another port", good, "https://127.0.0.1:1", 403, "origin not allowed"},
		{"big body", `{"sub":"` + strings.Repeat("a", 8<<10) + `"}`, "", 413, "body over 4096 bytes"},
		{"overflowing ttl", `{"sub":"ana","tenant":"contoso","app":"support-assistant","ttl_s":99999999999}`, "", 400, "ttl_s must be between 1 and 86400"},
		{"negative ttl", `{"sub":"ana","tenant":"contoso","app":"support-assistant","ttl_s":-5}`, "", 400, "ttl_s"},
		{"long sub", `{"sub":"` + strings.Repeat("a", 200) + `","tenant":"contoso","app":"support-assistant"}`, "", 400, "sub must be 1-128 bytes"},
		{"unknown tenant", `{"sub":"ana","tenant":"nope","app":"support-assistant"}`, "", 404, `no tenant \"nope\"`},
		{"unknown app", `{"sub":"ana","tenant":"contoso","app":"nope"}`, "", 404, `no app \"nope\" in tenant \"contoso\"`},
	}
	for _, c := range cases {
		status, body := post(c.body, c.origin)
		if status != c.status || !strings.Contains(body, c.msg) {
			t.Errorf("%s: %d %s, want %d with %q", c.name, status, body, c.status, c.msg)
		}
	}
}

func TestProductionHasNoDevEndpoints(t *testing.T) {
	r := gin.New()
	Mount(r, Options{Cognito: Cognito{Domain: "https://d.auth.eu-west-1.amazoncognito.com", ClientID: "c1"}})
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	if resp, _ := get(t, srv.URL+"/dev/apps"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("/dev/apps: %d, want 404", resp.StatusCode)
	}
	resp, err := http.Post(srv.URL+"/dev/token", "application/json", strings.NewReader(`{"sub":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("/dev/token: %d, want 404", resp.StatusCode)
	}
	_, body := get(t, srv.URL+"/config.json")
	want := `{"cognito":{"domain":"https://d.auth.eu-west-1.amazoncognito.com","client_id":"c1","redirect_uri":"","scopes":""},"dev":false}`
	if body != want {
		t.Errorf("config.json %s\nwant %s", body, want)
	}
}

// A DNS-rebinding page (evil.example resolved to 127.0.0.1) sends an Origin
// and a Host that agree but name no loopback host: refused (issue 23).
// The page itself, by any loopback name, still gets its token.
func TestDevTokenRefusesDNSRebinding(t *testing.T) {
	srv, _, _ := devServer(t)
	port := srv.URL[strings.LastIndex(srv.URL, ":")+1:]
	good := `{"sub":"ana","tenant":"contoso","app":"support-assistant"}`
	for _, c := range []struct {
		host, origin string
		status       int
	}{
		{"evil.example:" + port, "http://evil.example:" + port, 403},
		{"evil.example:" + port, "", 403},
		{"127.0.0.1.nip.io:" + port, "http://127.0.0.1.nip.io:" + port, 403},
		{"localhost:" + port, "http://localhost:" + port, 200},
		{"127.0.0.1:" + port, "http://127.0.0.1:" + port, 200},
		{"127.0.0.1:" + port, "", 200},
	} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/dev/token", strings.NewReader(good))
		req.Host = c.host
		req.Header.Set("Content-Type", "application/json")
		if c.origin != "" {
			req.Header.Set("Origin", c.origin)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status || c.status == 403 && !strings.Contains(string(b), "not allowed") {
			t.Errorf("Host %s, Origin %q: %d %s, want %d", c.host, c.origin, resp.StatusCode, b, c.status)
		}
	}
}
