package web

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/jetway-gateway/jetway/client"
	"github.com/jetway-gateway/jetway/internal/dynalitetest"
	"github.com/jetway-gateway/jetway/internal/gatewaytest"
)

// consoleWait bounds every wait of the console tests: generous, for a busy
// 2-core machine (the times that matter are logged, never asserted).
const consoleWait = 45 * time.Second

// consoleTabLife bounds one console tab (a whole test's worth of steps).
const consoleTabLife = 8 * time.Minute

// consoleGateway starts a dev-mode gateway whose configuration is a config
// table on its own dynalite, seeded from testdata/jetway.yaml at start.
func consoleGateway(t *testing.T, name string) *gatewayProc {
	t.Helper()
	endpoint := dynalitetest.Start(t)
	env := map[string]string{"AWS_ENDPOINT_URL_DYNAMODB": endpoint, "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
		"AWS_REGION": dynalitetest.Region, "JETWAY_CONFIG_TABLE": dynalitetest.TableName(t) + "-cfg"}
	gatewaytest.Run(t, env, "tables", "create")
	return startGateway(t, gatewayOpts{Name: name, Env: env})
}

// Screenshots of a run go to one temporary directory, kept for review.
var consoleShots struct {
	once sync.Once
	dir  string
	err  error
}

func consoleShotDir(t *testing.T) string {
	t.Helper()
	consoleShots.once.Do(func() { consoleShots.dir, consoleShots.err = os.MkdirTemp("", "jetway-admin-console-") })
	if consoleShots.err != nil {
		t.Fatal(consoleShots.err)
	}
	return consoleShots.dir
}

// consoleTab is the admin console in a tab of its own browser context.
type consoleTab struct {
	*page
	name string

	mu       sync.Mutex
	messages []consoleMessage // errors, exceptions and the browser's log of failed loads
}

type consoleMessage struct {
	source, text, url string
}

// openConsole opens u in a new tab (w x h CSS pixels) and collects its
// console's errors.
func openConsole(t *testing.T, name, u string, w, h int64) *consoleTab {
	t.Helper()
	tab, closeTab := chromedp.NewContext(browser(t), chromedp.WithNewBrowserContext())
	t.Cleanup(closeTab)
	if err := chromedp.Do(tab); err != nil {
		t.Fatalf("new tab: %v", err)
	}
	c := &consoleTab{page: &page{t: t}, name: name}
	messages := chromedp.Console(tab)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.IsException() || m.Type == chromedp.ConsoleError {
				c.mu.Lock()
				c.messages = append(c.messages, consoleMessage{source: m.Source, text: m.String(), url: m.URL})
				c.mu.Unlock()
			}
		}
	}()
	ctx, cancel := context.WithTimeout(tab, consoleTabLife)
	t.Cleanup(cancel)
	c.ctx = ctx
	c.do(chromedp.EmulateViewport(w, h), chromedp.Navigate(u))
	return c
}

// failedLoad is Chromium's log line for an HTTP error answer.
var failedLoad = regexp.MustCompile(`status of (\d{3})`)

// noProblems fails the test on any console error or exception. The only
// entries allowed are the browser's own log lines of admin API answers
// with the statuses the test provoked on purpose (a 400 validation error,
// a 412 conflict): Chromium logs every HTTP error answer of a fetch.
func (c *consoleTab) noProblems(provoked ...int) {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	var bad []string
	for _, m := range c.messages {
		if m.source == "network" && strings.Contains(m.url, "/v1/admin/") {
			if s := failedLoad.FindStringSubmatch(m.text); s != nil && provokedStatus(s[1], provoked) {
				c.t.Logf("%s: an answer the test provoked, as the browser logs it: %s (%s)", c.name, m.text, m.url)
				continue
			}
		}
		bad = append(bad, fmt.Sprintf("%s [%s] %s", m.text, m.source, m.url))
	}
	if len(bad) > 0 {
		c.t.Errorf("%s: the console logged problems:\n%s", c.name, strings.Join(bad, "\n"))
	}
}

func provokedStatus(status string, provoked []int) bool {
	for _, p := range provoked {
		if status == fmt.Sprint(p) {
			return true
		}
	}
	return false
}

// wait polls a JavaScript expression until it is truthy.
func (c *consoleTab) wait(expr, what string) {
	c.t.Helper()
	_, err := chromedp.Run(c.ctx, chromedp.Poll[chromedp.Void](fmt.Sprintf(`!!(%s)`, expr),
		chromedp.WithPollingTimeout(consoleWait), chromedp.WithPollingInterval(50*time.Millisecond)))
	if err != nil {
		c.t.Fatalf("%s: waiting for %s: %v\nthe console: %s", c.name, what, err, c.diagnose())
	}
}

// diagnose is what the console shows, for a failure's message.
func (c *consoleTab) diagnose() string {
	v, _ := chromedp.Run(c.ctx, chromedp.Evaluate[string](`JSON.stringify({hash: location.hash,
	  banner: document.getElementById('banner')?.textContent,
	  editors: [...document.querySelectorAll('.editor')].map((e) => ({kind: e.dataset.kind, state: e.dataset.state, version: e.dataset.version,
	    status: e.querySelector('.editor-status')?.textContent, errors: [...e.querySelectorAll('.field-error, .editor-error')].map((x) => x.textContent)})),
	  notes: ['users-note', 'usage-note', 'audit-note'].map((id) => document.getElementById(id)?.textContent),
	  writes: window.jetwayConsole?.writes})`))
	return v
}

// fill sets an input's or select's value as typing would (input and change events).
func (c *consoleTab) fill(selector, value string) {
	c.t.Helper()
	sel, _ := json.Marshal(selector)
	val, _ := json.Marshal(value)
	c.do(chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`(() => { const el = document.querySelector(%s);
		if (!el) throw new Error('no element ' + %s);
		el.value = %s; el.dispatchEvent(new Event('input', {bubbles: true})); el.dispatchEvent(new Event('change', {bubbles: true})); })()`,
		sel, sel, val)))
}

// click clicks the element selector names.
func (c *consoleTab) click(selector string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(c.ctx, consoleWait)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(selector))); err != nil {
		c.t.Fatalf("%s: click %s: %v\nthe console: %s", c.name, selector, err, c.diagnose())
	}
}

// text is an element's text ("" when there is none).
func (c *consoleTab) text(selector string) string {
	c.t.Helper()
	sel, _ := json.Marshal(selector)
	return eval[string](c.page, fmt.Sprintf(`document.querySelector(%s)?.textContent ?? ''`, sel))
}

// value is an input's value.
func (c *consoleTab) value(selector string) string {
	c.t.Helper()
	sel, _ := json.Marshal(selector)
	return eval[string](c.page, fmt.Sprintf(`document.querySelector(%s)?.value ?? ''`, sel))
}

// signIn uses the dev sign-in with role (jetway:admin, jetway:admin:<tenant>).
func (c *consoleTab) signIn(user, role string) {
	c.t.Helper()
	c.do(chromedp.WaitVisible(chromedp.CSS("#signin-form")))
	c.fill("#user", user)
	c.fill("#role", role)
	c.click("#signin-button")
	c.wait(`document.body.dataset.signedIn === 'true' && document.querySelectorAll('#tenant-list a').length > 0`, "the signed-in console")
}

// go shows a view of the console (a #/... route) and waits for ready.
func (c *consoleTab) goTo(hash, ready, what string) {
	c.t.Helper()
	h, _ := json.Marshal(hash)
	c.do(chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`location.hash = %s`, h)))
	c.wait(ready, what)
}

// shot saves a PNG of the viewport in the run's screenshot directory.
func (c *consoleTab) shot(name string) {
	c.t.Helper()
	png, err := chromedp.Run(c.ctx, chromedp.CaptureScreenshot())
	if err != nil {
		c.t.Fatalf("screenshot: %v", err)
	}
	path := filepath.Join(consoleShotDir(c.t), name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		c.t.Fatal(err)
	}
	c.t.Logf("screenshot %s (%d bytes)", path, len(png))
}

// fitsWidth fails when the page is wider than its viewport (a sideways scroll).
func (c *consoleTab) fitsWidth(width int64, where string) {
	c.t.Helper()
	if w := eval[float64](c.page, `document.documentElement.scrollWidth`); w > float64(width) {
		wide := eval[[]string](c.page, fmt.Sprintf(`[...document.querySelectorAll('body *')].filter((e) => e.getBoundingClientRect().right > %d + 1 && e.offsetParent !== null)
			.slice(0, 8).map((e) => e.tagName + '.' + e.className + '#' + e.id + ' ' + Math.round(e.getBoundingClientRect().right))`, width))
		c.t.Errorf("%s: %s is %v px wide at %d px: %v", c.name, where, w, width, wide)
	}
}

// adminAPI is a caller of a gateway's admin API with a dev token.
type adminAPI struct {
	t     *testing.T
	g     *gatewayProc
	token string
}

// adminAt mints a dev token with groups (as the console's dev sign-in does).
func adminAt(t *testing.T, g *gatewayProc, sub string, groups ...string) *adminAPI {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"sub": sub, "tenant": "contoso", "app": "support-assistant", "groups": groups})
	resp, err := http.Post(g.HTTP()+"/dev/token", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Token string `json:"token"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || out.Token == "" {
		t.Fatalf("admin dev token: %d %v", resp.StatusCode, err)
	}
	return &adminAPI{t: t, g: g, token: out.Token}
}

// get reads path (under /v1/admin) and decodes its JSON into v; it returns the status.
func (a *adminAPI) get(path string, v any) int {
	a.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, a.g.HTTP()+"/v1/admin"+path, nil)
	req.Header.Set("Authorization", "Bearer "+a.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusOK && v != nil {
		if err := json.Unmarshal(raw, v); err != nil {
			a.t.Fatalf("GET %s: %v: %s", path, err, raw)
		}
	}
	return resp.StatusCode
}

// askApp sends one question as a user of tenant/app (a dev token from
// the gateway) and returns the done frame or the error.
func askApp(g *gatewayProc, sub, tenant, app string) (*client.Done, error) {
	tok, err := devToken(g, sub, tenant, app, time.Hour)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, client.Options{URLs: []string{g.WS()},
		Token: func(context.Context) (string, error) { return tok, nil }})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	call, err := c.Send(ctx, client.Request{Messages: []client.Message{{Role: "user", Content: "Where is gate B12?"}}})
	if err != nil {
		return nil, err
	}
	return call.Wait(ctx)
}

// fakeJWT is a token with the given claims and no valid signature (for a
// stand-in admin API that compares it whole).
func fakeJWT(claims map[string]any) string {
	b64 := func(v any) string {
		raw, _ := json.Marshal(v)
		return base64.RawURLEncoding.EncodeToString(raw)
	}
	return b64(map[string]string{"alg": "RS256", "typ": "JWT"}) + "." + b64(claims) + ".c2lnbmF0dXJl"
}

// pkceChallenge is the S256 code challenge of a verifier (RFC 7636).
func pkceChallenge(verifier string) string {
	sum := sha256.Sum256([]byte(verifier))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// waitThroughNavigation polls expr like wait, across page loads (an
// evaluation during one fails; the next poll asks the new page).
func (c *consoleTab) waitThroughNavigation(expr, what string) {
	c.t.Helper()
	deadline := time.Now().Add(consoleWait)
	for {
		ok, err := chromedp.Run(c.ctx, chromedp.Evaluate[bool](fmt.Sprintf(`!!(%s)`, expr)))
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%s: waiting for %s: %v\nthe console: %s", c.name, what, err, c.diagnose())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
