package web

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// meEntry is one entry of GET /v1/me's limits.
type meEntry struct {
	Scope     string   `json:"scope"`
	Window    string   `json:"window"`
	Tokens    *int64   `json:"tokens,omitempty"`
	Requests  *int64   `json:"requests,omitempty"`
	USD       *float64 `json:"usd,omitempty"`
	Used      float64  `json:"used"`
	Remaining float64  `json:"remaining"`
	ResetsAt  string   `json:"resets_at"`
}

// meAnswer is GET /v1/me's answer.
type meAnswer struct {
	Tenant   string    `json:"tenant"`
	App      string    `json:"app"`
	User     string    `json:"user"`
	Limits   []meEntry `json:"limits"`
	Disabled bool      `json:"disabled"`
}

// getMe is GET /v1/me at a gateway with a bearer token.
func getMe(t *testing.T, base, tok string) meAnswer {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+"/v1/me", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var me meAnswer
	if err := json.Unmarshal(body, &me); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/me: %d %v %s", resp.StatusCode, err, body)
	}
	return me
}

// shownLimit is one limit as the page's standing panel shows it.
type shownLimit struct {
	Scope     string `json:"scope"`
	Window    string `json:"window"`
	Measure   string `json:"measure"`
	Name      string `json:"name"`
	Used      string `json:"used"`
	Cap       string `json:"cap"`
	Remaining string `json:"remaining"`
	ResetsAt  string `json:"resets_at"`
	Text      string `json:"text"`
}

const standingJS = `[...document.querySelectorAll('#standing-list .limit')].map((l) => ({
  scope: l.dataset.scope, window: l.dataset.window, measure: l.dataset.measure,
  name: l.querySelector('.limit-name').textContent, used: l.querySelector('.used').textContent,
  cap: l.querySelector('.cap').textContent, remaining: l.querySelector('.remaining').textContent,
  resets_at: l.querySelector('time').dateTime, text: l.textContent}))`

// shownStanding is what the panel shows, after its reads counted at least reads.
func (p *page) shownStanding(reads int) []shownLimit {
	p.t.Helper()
	p.waitJS(fmt.Sprintf(`window.jetwayDemo.standingReads >= %d`, reads), "a read of the standing", 30*time.Second)
	if state := eval[string](p, `document.getElementById('standing').dataset.state`); state != "ok" {
		p.t.Fatalf("the standing panel is %s: %s", state, eval[string](p, `document.getElementById('standing-note').textContent`))
	}
	return eval[[]shownLimit](p, standingJS)
}

// sameStanding reports how the page's limits differ from GET /v1/me's ("" when they agree).
func sameStanding(shown []shownLimit, me meAnswer) string {
	if len(shown) != len(me.Limits) {
		return fmt.Sprintf("%d limits shown, /v1/me has %d", len(shown), len(me.Limits))
	}
	number := func(s string) float64 {
		n, err := strconv.ParseFloat(strings.Map(func(r rune) rune {
			if r >= '0' && r <= '9' || r == '.' {
				return r
			}
			return -1
		}, s), 64)
		if err != nil {
			return -1
		}
		return n
	}
	for i, e := range me.Limits {
		s := shown[i]
		if e.Tokens == nil {
			return fmt.Sprintf("entry %d of /v1/me is not in tokens: %+v", i, e)
		}
		if s.Scope != e.Scope || s.Window != e.Window || s.Measure != "tokens" || number(s.Used) != e.Used ||
			number(s.Cap) != float64(*e.Tokens) || number(s.Remaining) != e.Remaining || s.ResetsAt != e.ResetsAt {
			return fmt.Sprintf("shown %+v, /v1/me says %+v (limit %d)", s, e, *e.Tokens)
		}
	}
	return ""
}

// TestPageStanding: the page shows the user's standing (GET /v1/me, asked
// through jetway.js's client.me() with the socket's token) on load and after
// every answer: each limit's scope, window, used of the limit, what is
// left and when it resets, as /v1/me says, the used amount risen by the
// answer; on a phone, light and dark. A user the gateway says is disabled
// (from a stand-in for /v1/me in front of the gateway: no gateway has
// per-user overrides yet) is told so at once.
func TestPageStanding(t *testing.T) {
	gw := browserGateway(t, "page-standing")
	p := openPage(t, gw.HTTP()+"/", 375, 800)
	p.signIn("contoso/support-assistant", "sam")
	tok, err := devToken(gw, "sam", "contoso", "support-assistant", time.Hour)
	if err != nil {
		t.Fatal(err)
	}

	before := p.shownStanding(1)
	me := getMe(t, gw.HTTP(), tok)
	if diff := sameStanding(before, me); diff != "" {
		t.Fatalf("on load: %s", diff)
	}
	// web/testdata/jetway.yaml: the tenant's month and the app's hour, in tokens; nothing used yet.
	if len(before) != 2 || before[0].Name != "Tenant · monthly tokens" || before[1].Name != "App · hourly tokens" || before[1].Used != "0" ||
		before[1].Cap != "2,000,000" || !strings.Contains(before[1].Text, "2,000,000 left") || !strings.Contains(before[1].Text, "resets ") {
		t.Fatalf("on load the panel shows %+v", before)
	}
	// The summary names the limit closest to its end, of equals the narrowest.
	if summary := eval[string](p, `document.getElementById('standing-summary').textContent`); summary != "app hour: 0 / 2,000,000 tokens" {
		t.Errorf("summary %q", summary)
	}
	if eval[bool](p, `!document.getElementById('standing-flag').hidden || !document.getElementById('standing-disabled').hidden`) {
		t.Error("an enabled user is shown as disabled")
	}
	p.do(chromedp.Click(chromedp.CSS("#standing summary")))
	if !eval[bool](p, `document.getElementById('standing').open && document.getElementById('standing-list').getBoundingClientRect().height > 0`) {
		t.Fatal("a click on the summary does not show the limits")
	}
	if w := eval[float64](p, `document.documentElement.scrollWidth`); w > 375 {
		t.Errorf("the page is %v px wide at 375 px with the limits open", w)
	}
	p.screenshot("standing-phone")
	p.colorScheme("dark")
	p.screenshot("standing-phone-dark")
	p.colorScheme("light")

	// After an answer the page reads the standing again without being
	// asked: the used amount rises.
	reads := eval[int](p, `window.jetwayDemo.standingReads`)
	if got := p.ask("How much have I used?"); got.State != "done" {
		t.Fatalf("answer: %+v", got)
	}
	p.waitJS(`(() => { const u = document.querySelector('#standing-list .limit[data-scope="app"] .used');
		return u && u.textContent !== '0'; })()`, "the app's used amount to rise", 30*time.Second)
	// It reads again once the answer's charge has settled; then it shows
	// what /v1/me says. A read between settlement and ours can differ:
	// have the page read again then (bounded), as it would after the next answer.
	p.shownStanding(reads + 2)
	var after []shownLimit
	for i := 0; ; i++ {
		after = p.shownStanding(reads + 2 + i)
		me = getMe(t, gw.HTTP(), tok)
		diff := sameStanding(after, me)
		if diff == "" {
			break
		}
		if i == 20 {
			t.Fatalf("after the answer: %s", diff)
		}
		t.Logf("after the answer (read %d): %s; reading again", i, diff)
		p.do(chromedp.Evaluate[chromedp.Void](`window.jetwayDemo.refreshStanding()`))
	}
	if me.Limits[1].Used <= 0 || after[1].Used == before[1].Used {
		t.Fatalf("after the answer the app's used is %v (shown %q, before %q): want it risen", me.Limits[1].Used, after[1].Used, before[1].Used)
	}
	t.Logf("the app's hour: %s used of %s before, %s after", before[1].Used, before[1].Cap, after[1].Used)
	p.screenshot("standing-after-answer-phone")
	p.noProblems()

	// A disabled user: /v1/me answered as a gateway with the user's
	// override disabled would, everything else the gateway's own.
	target, _ := url.Parse(gw.HTTP())
	proxy := httputil.NewSingleHostReverseProxy(target)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/me" {
			if r.Header.Get("Origin") != "" {
				r.Header.Set("Origin", gw.HTTP()) // /dev/token serves only the gateway's own page
			}
			proxy.ServeHTTP(w, r)
			return
		}
		req, _ := http.NewRequestWithContext(r.Context(), http.MethodGet, gw.HTTP()+"/v1/me", nil)
		req.Header.Set("Authorization", r.Header.Get("Authorization"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		var me map[string]any
		if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&me) != nil {
			http.Error(w, "no standing", http.StatusBadGateway)
			return
		}
		me["disabled"] = true
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(me)
	}))
	t.Cleanup(front.Close)
	d := openPage(t, front.URL+"/", 375, 800)
	d.signIn("contoso/support-assistant", "dora")
	d.shownStanding(1)
	if !eval[bool](d, `!document.getElementById('standing-flag').hidden && !document.getElementById('standing-disabled').hidden &&
		document.getElementById('standing').open && document.getElementById('standing-disabled').getBoundingClientRect().height > 0`) {
		t.Fatal("a disabled user is not shown as disabled")
	}
	if text := eval[string](d, `document.getElementById('standing-disabled').textContent`); !strings.HasPrefix(text, "Disabled") {
		t.Errorf("the disabled notice says %q", text)
	}
	if role := eval[string](d, `document.getElementById('standing-disabled').getAttribute('role')`); role != "alert" {
		t.Errorf("the disabled notice's role is %q, want alert", role)
	}
	d.screenshot("standing-disabled-phone")
	d.colorScheme("dark")
	d.screenshot("standing-disabled-phone-dark")
	d.noProblems()
}
