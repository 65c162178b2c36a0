package web

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/chromedp/chromedp"

	"github.com/jetway-gateway/jetway/client"
)

// chromiumPath is Debian's Chromium, which `make test-deps` installs.
const chromiumPath = "/usr/bin/chromium"

// screenshotDir keeps the screenshots the latest run took, for review (not
// committed: the reviewed set is in testdata/screenshots).
const screenshotDir = "testdata/screenshots/latest"

// One headless Chromium serves every browser test; each test gets its own
// tab in its own browser context (no shared storage).
var sharedBrowser struct {
	once   sync.Once
	ctx    context.Context
	cancel func()
	err    error
}

func closeBrowser() {
	if sharedBrowser.cancel != nil {
		sharedBrowser.cancel()
	}
}

func browser(t *testing.T) context.Context {
	t.Helper()
	sharedBrowser.once.Do(func() {
		if _, err := os.Stat(chromiumPath); err != nil {
			sharedBrowser.err = fmt.Errorf("%s is missing: run `make test-deps` (as root it runs apt-get install -y chromium): %w", chromiumPath, err)
			return
		}
		dir, err := os.MkdirTemp("", "jetway-chromium-")
		if err != nil {
			sharedBrowser.err = err
			return
		}
		opts := append(chromedp.DefaultExecAllocatorOptions[:],
			chromedp.ExecPath(chromiumPath),
			chromedp.Flag("headless", true),
			chromedp.Flag("no-sandbox", true),
			chromedp.Flag("disable-gpu", true),
			chromedp.Flag("disable-quic", true),
			chromedp.Flag("no-first-run", true),
			chromedp.Flag("disable-background-networking", true),
			chromedp.Flag("disable-component-update", true),
			chromedp.Flag("disable-sync", true),
			chromedp.UserDataDir(dir),
			chromedp.WindowSize(1024, 768),
		)
		alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
		ctx, cancelCtx := chromedp.NewContext(alloc)
		sharedBrowser.cancel = func() {
			cancelCtx()
			cancelAlloc()
			_ = os.RemoveAll(dir)
		}
		if err := chromedp.Do(ctx); err != nil {
			sharedBrowser.err = fmt.Errorf("start %s: %w", chromiumPath, err)
			return
		}
		sharedBrowser.ctx = ctx
	})
	if sharedBrowser.err != nil {
		t.Fatalf("chromium: %v", sharedBrowser.err)
	}
	return sharedBrowser.ctx
}

// page is the demo page in a tab.
type page struct {
	t   *testing.T
	ctx context.Context

	mu       sync.Mutex
	problems []string // uncaught exceptions and console errors
}

// openPage opens url in a new tab with a viewport of w x h CSS pixels.
func openPage(t *testing.T, u string, w, h int64) *page {
	t.Helper()
	tab, closeTab := chromedp.NewContext(browser(t), chromedp.WithNewBrowserContext())
	t.Cleanup(closeTab)
	if err := chromedp.Do(tab); err != nil {
		t.Fatalf("new tab: %v", err)
	}
	p := &page{t: t}
	messages := chromedp.Console(tab)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.IsException() || m.Type == chromedp.ConsoleError {
				p.mu.Lock()
				p.problems = append(p.problems, m.String())
				p.mu.Unlock()
			}
		}
	}()
	ctx, cancel := context.WithTimeout(tab, 90*time.Second)
	t.Cleanup(cancel)
	p.ctx = ctx
	p.do(chromedp.EmulateViewport(w, h), chromedp.Navigate(u))
	return p
}

func (p *page) do(steps ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	if err := chromedp.Do(p.ctx, steps...); err != nil {
		p.t.Fatalf("browser: %v", err)
	}
}

// eval evaluates a JavaScript expression on the page into T.
func eval[T any](p *page, expr string) T {
	p.t.Helper()
	v, err := chromedp.Run(p.ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		p.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// waitJS polls a JavaScript expression until it is truthy.
func (p *page) waitJS(expr, what string, within time.Duration) {
	p.t.Helper()
	_, err := chromedp.Run(p.ctx, chromedp.Poll[chromedp.Void](expr,
		chromedp.WithPollingTimeout(within), chromedp.WithPollingInterval(20*time.Millisecond)))
	if err != nil {
		p.t.Fatalf("waiting for %s: %v\nconnection: %s", what, err, p.connText())
	}
}

func (p *page) connText() string {
	v, _ := chromedp.Run(p.ctx, chromedp.Evaluate[string](`document.getElementById('conn').textContent.trim()`))
	return v
}

// noProblems fails the test if the page logged an exception or an error.
func (p *page) noProblems() {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.problems) > 0 {
		p.t.Errorf("the page logged problems:\n%s", strings.Join(p.problems, "\n"))
	}
}

// signIn uses the dev sign-in form (user "" keeps what is typed already).
func (p *page) signIn(tenantApp, user string) {
	p.t.Helper()
	p.do(
		chromedp.WaitVisible(chromedp.CSS("#signin-form")),
		chromedp.SetValue(chromedp.CSS("#app"), tenantApp),
	)
	if user != "" {
		p.do(chromedp.SendKeys(chromedp.CSS("#user"), user))
	}
	p.do(
		chromedp.Click(chromedp.CSS("#signin-button")),
		chromedp.WaitVisible(chromedp.CSS("#chat")),
	)
	p.waitJS(`document.getElementById('conn').dataset.state === 'connected'`, "connected", 15*time.Second)
}

// turn is an answer as the page shows it.
type turn struct {
	State string `json:"state"`
	Code  string `json:"code"`
	Text  string `json:"text"`
	Meta  string `json:"meta"`
	Error string `json:"error"`
	Who   string `json:"who"`
}

const lastTurnJS = `(() => {
  const l = [...document.querySelectorAll('.turn.assistant')].at(-1);
  return l ? {state: l.dataset.state, code: l.dataset.code || '', text: l.querySelector('.text').textContent.trim(),
    meta: l.querySelector('.meta').textContent, error: l.querySelector('.error')?.textContent || '',
    who: l.querySelector('.who').textContent} : null;
})()`

func (p *page) lastTurn() turn { return eval[turn](p, lastTurnJS) }

// send types a prompt and presses Send.
func (p *page) send(prompt string) {
	p.t.Helper()
	p.do(
		chromedp.SetValue(chromedp.CSS("#prompt"), prompt),
		chromedp.Click(chromedp.CSS("#send")),
	)
}

// ask sends a prompt and waits for its answer to finish.
func (p *page) ask(prompt string) turn {
	p.t.Helper()
	n := eval[int](p, `document.querySelectorAll('.turn.assistant').length`)
	p.send(prompt)
	p.waitFinished(n+1, 30*time.Second)
	return p.lastTurn()
}

// waitFinished waits until the n-th answer ended (done, error or stopped).
func (p *page) waitFinished(n int, within time.Duration) {
	p.t.Helper()
	p.waitJS(fmt.Sprintf(`(() => { const a = document.querySelectorAll('.turn.assistant');
		return a.length >= %d && ['done', 'error', 'stopped'].includes(a[%d].dataset.state); })()`, n, n-1), "the answer", within)
}

// screenshot saves a PNG of the viewport under screenshotDir.
func (p *page) screenshot(name string) {
	p.t.Helper()
	png, err := chromedp.Run(p.ctx, chromedp.CaptureScreenshot())
	if err != nil {
		p.t.Fatalf("screenshot: %v", err)
	}
	if err := os.MkdirAll(screenshotDir, 0o755); err != nil {
		p.t.Fatal(err)
	}
	path := filepath.Join(screenshotDir, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		p.t.Fatal(err)
	}
	p.t.Logf("screenshot %s (%d bytes)", path, len(png))
}

// browserPace is the mock model's pace for page tests: 300 tokens take
// about 2.5 s, long enough to act in the middle of an answer.
func browserGateway(t *testing.T, name string) *gatewayProc {
	return startGateway(t, gatewayOpts{Name: name, TTFT: 50 * time.Millisecond, PerToken: 8 * time.Millisecond})
}

// references computes the answers to a conversation of prompts in the
// background: each prompt sees the earlier prompts and answers.
func references(t *testing.T, g *gatewayProc, prompts ...string) func() []string {
	out := make([]string, len(prompts))
	done := make(chan struct{})
	var failed error
	go func() {
		defer close(done)
		var msgs []client.Message
		for i, p := range prompts {
			msgs = append(msgs, client.Message{Role: "user", Content: p})
			ans, err := askGateway(g, "reference-"+strings.ReplaceAll(t.Name(), "/", "-"), msgs)
			if err != nil {
				failed = err
				return
			}
			out[i] = ans
			msgs = append(msgs, client.Message{Role: "assistant", Content: ans})
		}
	}()
	return func() []string {
		t.Helper()
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			t.Fatal("reference answers took over 60s")
		}
		if failed != nil {
			t.Fatalf("reference answers: %v", failed)
		}
		return out
	}
}

// TestPageChat: the page loads on a phone-sized screen, signs in, streams an
// answer equal to the Go client's; then a connection cut in the middle of
// the next answer is healed and the page shows the complete, identical answer.
func TestPageChat(t *testing.T) {
	gw := browserGateway(t, "page-chat")
	relay := startRelay(t, gw.Addr)
	prompts := []string{"Where is gate B12?", "How long does it take to walk there?"}
	want := references(t, gw, prompts...)

	p := openPage(t, gw.HTTP()+"/?ws="+url.QueryEscape(relay.WS()), 390, 844)
	if title := eval[string](p, `document.title`); title != "Jetway chat" {
		t.Errorf("title %q", title)
	}
	// Accessible markup: every control is labelled; live regions announce status.
	unlabelled := eval[[]string](p, `[...document.querySelectorAll('input, select, textarea')]
		.filter(e => !e.labels || e.labels.length === 0).map(e => e.id)`)
	if len(unlabelled) > 0 {
		t.Errorf("controls without a label: %v", unlabelled)
	}
	if live := eval[string](p, `document.getElementById('conn').getAttribute('aria-live')`); live != "polite" {
		t.Errorf("connection indicator aria-live=%q", live)
	}
	p.do(chromedp.WaitVisible(chromedp.CSS("#signin-form")))
	if apps := eval[[]string](p, `[...document.querySelectorAll('#app option')].map(o => o.value)`); strings.Join(apps, ",") != "contoso/support-assistant,fabrikam/tiny-quota" {
		t.Errorf("apps offered: %v", apps)
	}

	p.do(chromedp.SendKeys(chromedp.CSS("#user"), "ana"))
	p.screenshot("signin-phone")
	p.signIn("contoso/support-assistant", "")
	if models := eval[[]string](p, `[...document.querySelectorAll('#model option')].map(o => o.value)`); strings.Join(models, ",") != ",mock-a,mock-b,mock-tools,mock-reasoning,mock-markdown" {
		t.Errorf("model picker %v, want app default + the allowlist mock-a, mock-b, mock-tools, mock-reasoning, mock-markdown", models)
	}
	if who := eval[string](p, `document.getElementById('who').textContent`); who != "ana · contoso / support-assistant" {
		t.Errorf("who %q", who)
	}

	first := p.ask(prompts[0])
	answers := want()
	if first.State != "done" || first.Text != answers[0] {
		t.Fatalf("first answer: state %s, text %q\nwant %q", first.State, first.Text, answers[0])
	}
	if !regexp.MustCompile(`^First token \d+ ms · [\d.]+ (ms|s) total · \d+ tokens$`).MatchString(first.Meta) {
		t.Errorf("timings %q", first.Meta)
	}
	if first.Who != "Assistant · mock-a" {
		t.Errorf("who %q", first.Who)
	}
	quota := eval[string](p, `document.getElementById('quota').textContent`)
	if !regexp.MustCompile(`^Quota: [\d,]+ of 2,000,000 tokens left this hour$`).MatchString(quota) {
		t.Errorf("quota %q", quota)
	}
	p.screenshot("chat-phone")

	// Cut every connection once about 40 chunks of the next answer went through.
	relay.cutAfter(3000)
	n := eval[int](p, `document.querySelectorAll('.turn.assistant').length`)
	p.send(prompts[1])
	p.waitFinished(n+1, 30*time.Second)
	second := p.lastTurn()
	if relay.cuts.Load() != 1 {
		t.Fatalf("relay cuts %d, want 1", relay.cuts.Load())
	}
	if second.State != "done" || second.Text != answers[1] {
		t.Fatalf("answer after the cut: state %s, text %q\nwant %q", second.State, second.Text, answers[1])
	}
	if !strings.Contains(second.Meta, "resumed after 1 reconnect") {
		t.Errorf("meta %q: want the resume shown", second.Meta)
	}
	if r := eval[string](p, `document.getElementById('conn').dataset.reconnects`); r != "1" {
		t.Errorf("reconnects %s, want 1", r)
	}
	states := eval[[]string](p, `window.jetwayDemo.states`)
	if !containsInOrder(states, "connected", "reconnecting", "connected") {
		t.Errorf("connection states %v", states)
	}
	if c := p.connText(); !strings.Contains(c, "reconnected 1 time") {
		t.Errorf("indicator %q", c)
	}
	p.screenshot("reconnected-phone")
	p.noProblems()
}

// TestPageQuota: a 429 is shown in plain words with the time until the
// hourly window resets.
func TestPageQuota(t *testing.T) {
	gw := browserGateway(t, "page-quota")
	p := openPage(t, gw.HTTP()+"/", 1024, 768)
	p.signIn("fabrikam/tiny-quota", "bo")
	if models := eval[[]string](p, `[...document.querySelectorAll('#model option')].map(o => o.value)`); strings.Join(models, ",") != ",mock-cheap" {
		t.Errorf("model picker %v", models)
	}
	got := p.ask("Summarise the flight manual, please")
	now := time.Now().UTC()
	if got.State != "error" || got.Code != "quota_exceeded" {
		t.Fatalf("state %s code %s, want error quota_exceeded", got.State, got.Code)
	}
	m := regexp.MustCompile(`^Token quota exceeded\. Try again in (?:(\d+) min )?(\d+) s, when the hourly window resets \(\d{1,2}:\d\d(?: [AP]M)?\)\.$`).FindStringSubmatch(got.Error)
	if m == nil {
		t.Fatalf("error text %q", got.Error)
	}
	minutes, _ := strconv.Atoi(m[1])
	secs, _ := strconv.Atoi(m[2])
	shown := time.Duration(minutes)*time.Minute + time.Duration(secs)*time.Second
	untilReset := now.Truncate(time.Hour).Add(time.Hour).Sub(now)
	if d := shown - untilReset; d < -5*time.Second || d > 5*time.Second {
		t.Errorf("shown retry time %v, the window resets in %v", shown, untilReset)
	}
	if role := eval[string](p, `document.querySelector('.turn.assistant .error').getAttribute('role')`); role != "alert" {
		t.Errorf("error role %q", role)
	}
	p.screenshot("quota-429")
	p.noProblems()
}

// TestPageDraining: SIGTERM to the first gateway while it streams. The page
// finishes that answer, moves to the second gateway (both URLs are given in
// ?ws=) and sends new work there.
func TestPageDraining(t *testing.T) {
	a := browserGateway(t, "page-drain-a")
	b := browserGateway(t, "page-drain-b")
	prompts := []string{"When does boarding start?", "Which gate?"}
	want := references(t, b, prompts...)

	p := openPage(t, b.HTTP()+"/?ws="+url.QueryEscape(a.WS()+","+b.WS()), 1024, 768)
	p.signIn("contoso/support-assistant", "cy")
	if u := eval[string](p, `document.getElementById('conn').dataset.url`); u != a.WS() {
		t.Fatalf("connected to %s, want the first URL %s", u, a.WS())
	}
	p.send(prompts[0])
	p.waitJS(`(() => { const l = [...document.querySelectorAll('.turn.assistant')].at(-1);
		return l && l.dataset.state === 'streaming' && l.querySelector('.text').textContent.length > 0; })()`,
		"the answer to start streaming", 15*time.Second)
	a.terminate()
	p.waitJS(fmt.Sprintf(`(() => { const c = document.getElementById('conn');
		return c.dataset.state === 'connected' && c.dataset.url === %q; })()`, b.WS()), "the move to the second gateway", 15*time.Second)
	p.waitFinished(1, 30*time.Second)
	answers := want()
	if got := p.lastTurn(); got.State != "done" || got.Text != answers[0] {
		t.Fatalf("answer across the drain: state %s, text %q\nwant %q", got.State, got.Text, answers[0])
	}
	a.waitExit(t, 30*time.Second)

	next := p.ask(prompts[1])
	if next.State != "done" || next.Text != answers[1] {
		t.Fatalf("answer from the second gateway: state %s, text %q\nwant %q", next.State, next.Text, answers[1])
	}
	states := eval[[]string](p, `window.jetwayDemo.states`)
	if !containsInOrder(states, "connected", "draining", "connected") {
		t.Errorf("connection states %v", states)
	}
	p.screenshot("draining-desktop")
	p.noProblems()
}

// TestPageProduction: without the dev endpoints the page offers the Cognito
// hosted UI, showing its settings (or that they are missing).
func TestPageProduction(t *testing.T) {
	serve := func(c Cognito) string {
		r := gin.New()
		Mount(r, Options{Cognito: c})
		srv := httptest.NewServer(r)
		t.Cleanup(srv.Close)
		return srv.URL
	}
	configured := serve(Cognito{Domain: "https://jetway-demo.auth.eu-west-1.amazoncognito.com", ClientID: "4jetwaydemoclient"})
	p := openPage(t, configured+"/", 390, 844)
	p.do(chromedp.WaitVisible(chromedp.CSS("#cognito")))
	settings := eval[map[string]string](p, `Object.fromEntries([...document.querySelectorAll('#cognito-settings dd')].map(d => [d.dataset.key, d.textContent]))`)
	wantSettings := map[string]string{"domain": "https://jetway-demo.auth.eu-west-1.amazoncognito.com",
		"client_id": "4jetwaydemoclient", "redirect_uri": configured + "/", "scopes": "openid"}
	if b, _ := json.Marshal(settings); string(b) != mustJSON(wantSettings) {
		t.Errorf("settings shown %s, want %s", b, mustJSON(wantSettings))
	}
	if eval[bool](p, `document.getElementById('cognito-signin').disabled`) {
		t.Error("sign-in button disabled although configured")
	}
	if eval[bool](p, `!document.getElementById('signin').hidden`) {
		t.Error("the dev sign-in is shown in production")
	}
	p.screenshot("production-signin")
	p.noProblems()

	empty := openPage(t, serve(Cognito{})+"/", 390, 844)
	empty.do(chromedp.WaitVisible(chromedp.CSS("#cognito-missing")))
	if !eval[bool](empty, `document.getElementById('cognito-signin').disabled`) {
		t.Error("sign-in button enabled without settings")
	}
	empty.noProblems()
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// containsInOrder reports whether want appears in got as a subsequence.
func containsInOrder(got []string, want ...string) bool {
	i := 0
	for _, g := range got {
		if i < len(want) && g == want[i] {
			i++
		}
	}
	return i == len(want)
}
