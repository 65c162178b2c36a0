package web

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/gin-gonic/gin"

	"github.com/jetway-gateway/jetway/client"
	"github.com/jetway-gateway/jetway/internal/protocol"
)

// appEditor is the open app editor's selector.
const appEditor = `.editor[data-kind="app"]`

// TestAdminConsole drives the admin console at /admin of a gateway process
// whose configuration is a config table on dynalite, as an operator
// (jetway:admin) signed in with a dev token: it lists the tenants, creates
// an app (PUT with If-None-Match: *) a user then chats with, shows a
// validation error beside its input (form and JSON), lowers the app's
// limit and sees the next request refused 429 quota_exceeded, adds,
// finds, edits and deletes user overrides, charts the app's usage, shows
// the audit trail, and two admins in two browser contexts saving the same
// tenant: the second sees the 412 conflict and reloads. Then every view
// at 375 px, light and dark, without a sideways scroll.
func TestAdminConsole(t *testing.T) {
	gw := consoleGateway(t, "admin-console")
	ops := adminAt(t, gw, "api-reader", "jetway:admin")
	c := openConsole(t, "ops", gw.HTTP()+"/admin", 1280, 900)
	if title := eval[string](c.page, `document.title`); title != "Jetway admin" {
		t.Errorf("title %q", title)
	}
	c.do(chromedp.WaitVisible(chromedp.CSS("#signin-form")))
	if roles := eval[[]string](c.page, `[...document.querySelectorAll('#role option')].map((o) => o.value)`); strings.Join(roles, ",") != "jetway:admin,jetway:admin:contoso,jetway:admin:fabrikam" {
		t.Errorf("roles offered: %v", roles)
	}
	c.shot("signin-desktop")
	c.signIn("ops", "jetway:admin")
	if who := c.text("#who"); who != "ops · jetway:admin" {
		t.Errorf("who %q", who)
	}
	if tenants := eval[[]string](c.page, `[...document.querySelectorAll('#tenant-list a')].map((a) => a.dataset.tenant)`); strings.Join(tenants, ",") != "contoso,fabrikam" {
		t.Fatalf("tenants listed: %v", tenants)
	}
	unlabelled := func() []string {
		return eval[[]string](c.page, `[...document.querySelectorAll('input, select, textarea')].filter((e) => e.offsetParent !== null && (!e.labels || e.labels.length === 0)).map((e) => e.outerHTML.slice(0, 80))`)
	}

	// Open a tenant: its limits in a form, its apps.
	c.click(`#tenant-list a[data-tenant="contoso"]`)
	c.wait(`document.querySelector('.editor[data-kind="tenant"]') && document.querySelector('#app-list li[data-app="support-assistant"]')`, "the tenant contoso")
	if v := c.value(`.editor [data-field="limits[0].tokens"] input`); v != "100000000" {
		t.Errorf("the tenant's month limit shows %q", v)
	}
	if u := unlabelled(); len(u) > 0 {
		t.Errorf("controls without a label: %v", u)
	}
	c.shot("tenant-desktop")

	// Create an app: PUT with If-None-Match: *, then its editor.
	c.click("#new-app")
	c.wait(`document.querySelector('.editor[data-kind="app"] [data-field="app"] input')`, "the new app form")
	c.fill(appEditor+` [data-field="app"] input`, "console-app")
	c.fill(appEditor+` [data-field="client_ids"] input`, "console-app")
	c.fill(appEditor+` [data-field="models.default"] input`, "mock-a")
	c.fill(appEditor+` [data-field="limits[0].tokens"] input`, "1000000")
	c.shot("new-app-desktop")
	c.click(appEditor + " .save")
	c.wait(`location.hash === '#/tenants/contoso/apps/console-app' && document.querySelector('.editor[data-kind="app"][data-name="console-app"]')`, "the created app's editor")
	var app struct {
		ClientIDs []string `json:"client_ids"`
		Models    struct {
			Default string `json:"default"`
		} `json:"models"`
		Limits []struct {
			Window string `json:"window"`
			Tokens int64  `json:"tokens"`
		} `json:"limits"`
		PromptCache string `json:"prompt_cache"`
	}
	if s := ops.get("/tenants/contoso/apps/console-app", &app); s != http.StatusOK || strings.Join(app.ClientIDs, ",") != "console-app" ||
		app.Models.Default != "mock-a" || len(app.Limits) != 1 || app.Limits[0].Tokens != 1000000 {
		t.Fatalf("the created app: %d %+v", s, app)
	}
	// A user of the new app chats (the app reaches the dev token endpoint once applied).
	var first *client.Done
	waitFor(t, consoleWait, "a chat in the new app", func() bool {
		d, err := askApp(gw, "carol", "contoso", "console-app")
		first = d
		return err == nil
	})
	if first.Text == "" {
		t.Fatal("the new app's first answer is empty")
	}

	// A refused document: the API's message and field beside the input.
	c.fill(appEditor+` [data-field="models.default"] input`, "no-such-model")
	c.click(appEditor + " .save")
	c.wait(`document.querySelector('.editor[data-kind="app"]').dataset.state === 'invalid'`, "the refused save")
	msg := c.text(appEditor + ` [data-field="models.default"] .field-error`)
	if !strings.Contains(msg, `unknown model "no-such-model"`) || !strings.Contains(msg, "models.default") {
		t.Errorf("the error beside the default model: %q", msg)
	}
	if inv := eval[string](c.page, `document.querySelector('.editor[data-kind="app"] [data-field="models.default"] input').getAttribute('aria-invalid')`); inv != "true" {
		t.Errorf("the default model input is not marked invalid: %q", inv)
	}
	c.shot("validation-desktop")
	c.click(appEditor + " .discard")
	if v := c.value(appEditor + ` [data-field="models.default"] input`); v != "mock-a" {
		t.Errorf("after Discard the default model is %q", v)
	}
	// The JSON document: a refused value names its field under the text; a good one saves.
	c.click(appEditor + ` .mode .tab:nth-child(2)`)
	c.wait(`!document.querySelector('.editor[data-kind="app"] .editor-json').hidden`, "the JSON view")
	setJSON := func(key, value string) {
		c.do(chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`(() => { const t = document.querySelector('.editor[data-kind="app"] textarea.json');
			const d = JSON.parse(t.value); d[%q] = %q; t.value = JSON.stringify(d, null, 2); t.dispatchEvent(new Event('input', {bubbles: true})); })()`, key, value)))
	}
	setJSON("prompt_cache", "sometimes")
	c.click(appEditor + " .save")
	c.wait(`document.querySelector('.editor[data-kind="app"]').dataset.state === 'invalid'`, "the refused JSON")
	if msg := c.text(appEditor + " .editor-json .field-error"); !strings.Contains(msg, `unknown prompt_cache "sometimes"`) || !strings.Contains(msg, "field prompt_cache") {
		t.Errorf("the JSON's error: %q", msg)
	}
	c.shot("validation-json-desktop")
	setJSON("prompt_cache", "off")
	c.click(appEditor + " .save")
	c.wait(`document.querySelector('.editor[data-kind="app"]').dataset.state === 'saved'`, "the JSON saved")
	if ops.get("/tenants/contoso/apps/console-app", &app); app.PromptCache != "off" {
		t.Errorf("after the JSON save prompt_cache is %q", app.PromptCache)
	}
	c.click(appEditor + ` .mode .tab:nth-child(1)`)
	if v := c.value(appEditor + ` [data-field="prompt_cache"] select`); v != "off" {
		t.Errorf("the form after the JSON save shows prompt_cache %q", v)
	}

	// Lower the app's limit below any request's reservation: the next
	// request is refused.
	c.fill(appEditor+` [data-field="limits[0].tokens"] input`, "100")
	c.click(appEditor + " .save")
	c.wait(`document.querySelector('.editor[data-kind="app"]').dataset.state === 'saved'`, "the lowered limit saved")
	saved := time.Now()
	var refused *protocol.Error
	waitFor(t, consoleWait, "a request refused under the lowered limit", func() bool {
		_, err := askApp(gw, "carol", "contoso", "console-app")
		return errors.As(err, &refused) && refused.Code == protocol.CodeQuotaExceeded
	})
	t.Logf("the lowered limit refused a chat %v after the save (the contract: within 5 s)", time.Since(saved).Round(time.Millisecond))
	if refused.Status != http.StatusTooManyRequests {
		t.Errorf("the refusal: %+v", refused)
	}

	// User overrides: add two, find one by its sub's prefix, edit it, delete the other.
	c.click(`.detail-head a[href="#/users/contoso/console-app"]`)
	c.wait(`document.getElementById('users-app').value === 'console-app' && document.getElementById('users-table').dataset.count === '0'`, "the app's overrides (none)")
	addUser := func(sub string, tokens string, disabled bool) {
		t.Helper()
		c.click("#users-add")
		c.wait(`document.querySelector('#users-editor .editor[data-kind="user"] [data-field="sub"] input')`, "the new override form")
		ed := `#users-editor .editor[data-kind="user"]`
		c.fill(ed+` [data-field="sub"] input`, sub)
		c.fill(ed+` [data-field="limits[0].tokens"] input`, tokens)
		if disabled {
			c.click(ed + ` [data-field="disabled"] input`)
		}
		c.click(ed + " .save")
		c.wait(fmt.Sprintf(`document.querySelector('#users-list tr[data-sub=%q]')`, sub), "the override "+sub+" listed")
	}
	addUser("vip-ana", "500000", false)
	addUser("zed", "1000", true)
	if badge := c.text(`#users-list tr[data-sub="zed"] .badge`); badge != "Disabled" {
		t.Errorf("zed's status: %q", badge)
	}
	c.do(chromedp.SendKeys(chromedp.CSS("#users-search"), "vi"))
	c.wait(`document.querySelectorAll('#users-list tr[data-sub]').length === 1 && document.querySelector('#users-list tr[data-sub="vip-ana"]')`, "the search by prefix")
	c.shot("users-desktop")
	c.click(`#users-list tr[data-sub="vip-ana"] .edit`)
	c.wait(`document.querySelector('#users-editor .editor[data-kind="user"][data-name="vip-ana"]')`, "vip-ana's editor")
	c.fill(`#users-editor .editor [data-field="limits[0].tokens"] input`, "600000")
	c.click("#users-editor .editor .save")
	c.wait(`(document.querySelector('#users-list tr[data-sub="vip-ana"] .limits-text')?.textContent ?? '').includes('600,000')`, "vip-ana's new limit listed")
	c.fill("#users-search", "")
	c.click(`#users-list tr[data-sub="zed"] .delete`)
	c.click(`#users-list tr[data-sub="zed"] .delete`) // the confirmation
	c.wait(`!document.querySelector('#users-list tr[data-sub="zed"]') && document.querySelector('#users-list tr[data-sub="vip-ana"]')`, "zed deleted")
	var overrides struct {
		Users []struct {
			Sub    string `json:"sub"`
			Limits []struct {
				Tokens int64 `json:"tokens"`
			} `json:"limits"`
			Disabled bool `json:"disabled"`
		} `json:"users"`
	}
	if ops.get("/tenants/contoso/apps/console-app/users", &overrides); len(overrides.Users) != 1 || overrides.Users[0].Sub != "vip-ana" ||
		len(overrides.Users[0].Limits) != 1 || overrides.Users[0].Limits[0].Tokens != 600000 || overrides.Users[0].Disabled {
		t.Errorf("the overrides stored: %+v", overrides)
	}

	// Usage: the app's tokens and cost in this hour, as the usage endpoint says.
	c.click(`#nav a[data-view="usage"]`)
	c.wait(`window.jetwayConsole.usageReads >= 1`, "the first usage read")
	appTokens := `(() => { const c = window.jetwayConsole.charts.tokens; const d = c && c.data.datasets.find((d) => d.label === 'console-app');
		return d ? d.data.reduce((a, b) => a + b, 0) : 0; })()`
	var rows struct {
		Rows []struct {
			App          string  `json:"app"`
			InputTokens  int64   `json:"input_tokens"`
			OutputTokens int64   `json:"output_tokens"`
			CacheRead    int64   `json:"cache_read_input_tokens"`
			CostUSD      float64 `json:"cost_usd"`
		} `json:"rows"`
	}
	// The gateway writes usage records within a second: read again until
	// the chart has the first answer's tokens and agrees with the endpoint.
	since := url.QueryEscape(time.Now().Add(-12 * time.Hour).Truncate(time.Hour).UTC().Format(time.RFC3339))
	var charted float64
	var apiTokens int64
	var apiCost float64
	for deadline := time.Now().Add(consoleWait); ; {
		charted = eval[float64](c.page, appTokens)
		ops.get("/tenants/contoso/usage?by=app&since="+since, &rows)
		for _, r := range rows.Rows {
			if r.App == "console-app" {
				apiTokens, apiCost = r.InputTokens+r.OutputTokens+r.CacheRead, r.CostUSD
			}
		}
		if charted >= float64(first.Usage.InputTokens+first.Usage.OutputTokens) && charted == float64(apiTokens) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the usage chart shows %v tokens of console-app, the usage endpoint %d: %s", charted, apiTokens, c.diagnose())
		}
		reads := eval[int](c.page, `window.jetwayConsole.usageReads`)
		c.click("#usage-refresh")
		c.wait(fmt.Sprintf(`window.jetwayConsole.usageReads > %d`, reads), "a usage read")
	}
	if apiCost <= 0 {
		t.Errorf("console-app's cost %v", apiCost)
	}
	chartedCost := eval[float64](c.page, `(() => { const d = window.jetwayConsole.charts.cost.data.datasets.find((d) => d.label === 'console-app');
		return d ? d.data.reduce((a, b) => a + b, 0) : 0; })()`)
	if diff := chartedCost - apiCost; diff > 1e-9 || diff < -1e-9 {
		t.Errorf("the cost chart shows %v for console-app, the usage endpoint %v", chartedCost, apiCost)
	}
	// The canvas has a drawing, and the top users chart names the chatting user.
	if painted := eval[int](c.page, `(() => { const cv = document.getElementById('chart-tokens'); const d = cv.getContext('2d').getImageData(0, 0, cv.width, cv.height).data;
		let n = 0; for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++; return n; })()`); painted == 0 {
		t.Error("the tokens chart's canvas is blank")
	}
	if users := eval[[]string](c.page, `window.jetwayConsole.charts.users.data.labels`); !containsString(users, "carol") {
		t.Errorf("top users %v, want carol among them", users)
	}
	c.shot("usage-desktop")
	c.colorScheme("dark")
	c.shot("usage-desktop-dark")
	c.colorScheme("light")
	c.fill("#usage-by", "model")
	c.wait(`window.jetwayConsole.usage?.by === 'model' && window.jetwayConsole.charts.tokens.data.datasets.some((d) => d.label === 'mock-a')`, "usage by model")

	// The audit trail: the console's writes, newest first, by who made them.
	c.click(`#nav a[data-view="audit"]`)
	c.wait(`document.querySelectorAll('#audit-list .entry').length >= 5`, "the audit trail")
	entries := eval[[]map[string]string](c.page, `[...document.querySelectorAll('#audit-list .entry')].map((e) => ({...e.dataset}))`)
	want := map[string]bool{"/v1/admin/tenants/contoso/apps/console-app": false, "/v1/admin/tenants/contoso/apps/console-app/users/vip-ana": false,
		"/v1/admin/tenants/contoso/apps/console-app/users/zed": false}
	for _, e := range entries {
		if _, ok := want[e["path"]]; ok && e["actor"] == "ops" {
			want[e["path"]] = true
		}
	}
	for p, seen := range want {
		if !seen {
			t.Errorf("the audit trail lacks an entry of ops at %s: %v", p, entries)
		}
	}
	if entries[0]["action"] != "delete" || !strings.HasSuffix(entries[0]["path"], "/users/zed") {
		t.Errorf("the newest entry is %v, want the delete of zed", entries[0])
	}
	c.shot("audit-desktop")

	// Two admins edit one tenant: the first save wins, the second gets 412 and reloads.
	c.goTo("#/tenants/contoso", `document.querySelector('.editor[data-kind="tenant"]')`, "the tenant in the first tab")
	b := openConsole(t, "bea", gw.HTTP()+"/admin#/tenants/contoso", 1280, 900)
	b.signIn("bea", "jetway:admin:contoso")
	b.wait(`document.querySelector('.editor[data-kind="tenant"]')`, "the tenant in the second tab")
	va := eval[string](c.page, `document.querySelector('.editor[data-kind="tenant"]').dataset.version`)
	if vb := eval[string](b.page, `document.querySelector('.editor[data-kind="tenant"]').dataset.version`); va == "" || va != vb {
		t.Fatalf("the tabs opened versions %q and %q", va, vb)
	}
	tenantLimit := `.editor[data-kind="tenant"] [data-field="limits[0].tokens"] input`
	c.fill(tenantLimit, "90000000")
	b.fill(tenantLimit, "80000000")
	c.click(`.editor[data-kind="tenant"] .save`)
	c.wait(`document.querySelector('.editor[data-kind="tenant"]').dataset.state === 'saved'`, "the first save")
	b.click(`.editor[data-kind="tenant"] .save`)
	b.wait(`document.querySelector('.editor[data-kind="tenant"]').dataset.state === 'conflict'`, "the second save's conflict")
	conflict := b.text(`.editor[data-kind="tenant"] .conflict`)
	if !strings.Contains(conflict, "Someone else changed this tenant") || !strings.Contains(conflict, "412 precondition_failed") ||
		!eval[bool](b.page, `(() => { const r = document.querySelector('.editor[data-kind="tenant"] .conflict .reload'); return r.offsetParent !== null && document.activeElement === r; })()`) {
		t.Errorf("the conflict shows %q (the Reload button visible and focused: want both)", conflict)
	}
	b.shot("conflict-desktop")
	b.click(`.editor[data-kind="tenant"] .conflict .reload`)
	b.wait(`document.querySelector('.editor[data-kind="tenant"]').dataset.state === 'reloaded'`, "the reload")
	if v := b.value(tenantLimit); v != "90000000" {
		t.Errorf("after Reload the second tab shows %q, want the first tab's 90000000", v)
	}
	b.fill(tenantLimit, "80000000")
	b.click(`.editor[data-kind="tenant"] .save`)
	b.wait(`document.querySelector('.editor[data-kind="tenant"]').dataset.state === 'saved'`, "the second save after the reload")
	var tenant struct {
		Limits []struct {
			Tokens int64 `json:"tokens"`
		} `json:"limits"`
	}
	if ops.get("/tenants/contoso", &tenant); len(tenant.Limits) != 1 || tenant.Limits[0].Tokens != 80000000 {
		t.Errorf("the tenant stored: %+v", tenant)
	}
	c.noProblems(http.StatusBadRequest)
	b.noProblems(http.StatusPreconditionFailed)

	// Every view on a phone, light and dark.
	p := openConsole(t, "phone", gw.HTTP()+"/admin", 375, 800)
	p.signIn("ops", "jetway:admin")
	for _, v := range []struct{ name, hash, ready string }{
		{"tenant", "#/tenants/contoso", `document.querySelector('.editor[data-kind="tenant"]')`},
		{"app", "#/tenants/contoso/apps/console-app", `document.querySelector('.editor[data-kind="app"] [data-field="limits[0].tokens"]')`},
		{"users", "#/users/contoso/console-app", `document.querySelector('#users-list tr[data-sub="vip-ana"]')`},
		{"usage", "#/usage/contoso", `window.jetwayConsole.usage && window.jetwayConsole.charts.tokens`},
		{"audit", "#/audit", `document.querySelectorAll('#audit-list .entry').length > 0`},
	} {
		p.goTo(v.hash, v.ready, v.name+" on a phone")
		p.fitsWidth(375, v.name)
		p.shot(v.name + "-phone")
		p.colorScheme("dark")
		p.fitsWidth(375, v.name+" (dark)")
		p.shot(v.name + "-phone-dark")
		p.colorScheme("light")
	}
	p.goTo("#/users/contoso/console-app", `document.querySelector('#users-list tr[data-sub="vip-ana"]')`, "the overrides on a phone")
	p.click(`#users-list tr[data-sub="vip-ana"] .edit`)
	p.wait(`document.querySelector('#users-editor .editor[data-kind="user"]')`, "an override's editor on a phone")
	p.fitsWidth(375, "the override editor")
	p.shot("user-editor-phone")
	p.noProblems()
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestAdminConsoleProduction: without the dev endpoints the console offers
// the Cognito hosted UI (the settings shown, or that they are missing),
// and signs in with it: the authorization code flow with PKCE against a
// stand-in for the hosted UI and its token endpoint (on the console's own
// origin, which the console's CSP allows), then calls the admin API with
// the access token and shows the caller's tenant-admin role.
func TestAdminConsoleProduction(t *testing.T) {
	const clientID, code = "console-client", "the-code"
	srv := httptest.NewUnstartedServer(nil)
	base := "http://" + srv.Listener.Addr().String()
	access := fakeJWT(map[string]any{"sub": "ana-sub", "username": "ana", "cognito:groups": []string{"jetway:admin:contoso", "tenant:contoso"}})
	challenge := make(chan string, 1)
	r := gin.New()
	Mount(r, Options{Console: true, NoDemo: true, Cognito: Cognito{Domain: base, ClientID: clientID}})
	r.GET("/oauth2/authorize", func(g *gin.Context) {
		q := g.Request.URL.Query()
		if q.Get("response_type") != "code" || q.Get("client_id") != clientID || q.Get("redirect_uri") != base+"/admin" ||
			q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "" || q.Get("state") == "" || q.Get("scope") != "openid" {
			t.Errorf("the authorize request: %s", g.Request.URL.RawQuery)
		}
		challenge <- q.Get("code_challenge")
		g.Redirect(http.StatusFound, q.Get("redirect_uri")+"?code="+code+"&state="+url.QueryEscape(q.Get("state")))
	})
	r.POST("/oauth2/token", func(g *gin.Context) {
		want := <-challenge
		if g.PostForm("grant_type") != "authorization_code" || g.PostForm("code") != code || g.PostForm("client_id") != clientID ||
			g.PostForm("redirect_uri") != base+"/admin" || pkceChallenge(g.PostForm("code_verifier")) != want {
			t.Errorf("the token request: %v", g.Request.PostForm)
			g.JSON(http.StatusBadRequest, gin.H{"error": "invalid_grant"})
			return
		}
		g.JSON(http.StatusOK, gin.H{"access_token": access, "expires_in": 3600, "refresh_token": "refresh", "token_type": "Bearer"})
	})
	r.GET("/v1/admin/tenants", func(g *gin.Context) {
		if g.GetHeader("Authorization") != "Bearer "+access {
			g.JSON(http.StatusUnauthorized, gin.H{"error": gin.H{"code": "unauthorized", "message": "no token"}})
			return
		}
		g.JSON(http.StatusOK, gin.H{"tenants": []gin.H{{"id": "contoso", "version": "3"}}})
	})
	srv.Config.Handler = r
	srv.Start()
	t.Cleanup(srv.Close)

	c := openConsole(t, "production", base+"/admin", 390, 844)
	c.do(chromedp.WaitVisible(chromedp.CSS("#cognito")))
	settings := eval[map[string]string](c.page, `Object.fromEntries([...document.querySelectorAll('#cognito-settings dd')].map((d) => [d.dataset.key, d.textContent]))`)
	if settings["domain"] != base || settings["client_id"] != clientID || settings["redirect_uri"] != base+"/admin" || settings["scopes"] != "openid" {
		t.Errorf("settings shown %v", settings)
	}
	if eval[bool](c.page, `!document.getElementById('signin').hidden`) {
		t.Error("the dev sign-in is shown in production")
	}
	c.shot("production-signin-phone")
	c.click("#cognito-signin")
	c.waitThroughNavigation(`document.body.dataset.signedIn === 'true' && document.querySelector('#tenant-list a[data-tenant="contoso"]')`, "the Cognito sign-in")
	if who := c.text("#who"); who != "ana · jetway:admin:contoso" {
		t.Errorf("who %q", who)
	}
	if search := eval[string](c.page, `location.search`); search != "" {
		t.Errorf("the code stays in the address: %q", search)
	}
	c.noProblems()

	empty := httptest.NewServer(func() http.Handler { r := gin.New(); Mount(r, Options{Console: true, NoDemo: true}); return r }())
	t.Cleanup(empty.Close)
	e := openConsole(t, "unconfigured", empty.URL+"/admin", 390, 844)
	e.do(chromedp.WaitVisible(chromedp.CSS("#cognito-missing")))
	if !eval[bool](e.page, `document.getElementById('cognito-signin').disabled`) {
		t.Error("the sign-in button is enabled without settings")
	}
	e.noProblems()
}
