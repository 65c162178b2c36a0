package web

import (
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// A page that cannot connect says why instead of "Connecting (attempt
// N)..." alone (issue 30): a failing sign-in shows the sign-in's error; a
// gateway that refuses the page's connection (here one with another dev
// key, on another origin whose HTTP door the dev page's CSP keeps it from
// asking) is named with what to check.
func TestPageSaysWhyItCannotConnect(t *testing.T) {
	g := browserGateway(t, "page")
	why := func(p *page) (string, string) {
		p.waitJS(`!!document.getElementById('conn').dataset.why`, "the page to say why it cannot connect", 30*time.Second)
		return eval[string](p, `document.getElementById('conn').dataset.why`),
			eval[string](p, `document.getElementById('banner').hidden ? '' : document.getElementById('banner').textContent`)
	}
	signIn := func(p *page) {
		p.do(
			chromedp.WaitVisible(chromedp.CSS("#signin-form")),
			chromedp.SetValue(chromedp.CSS("#app"), "contoso/support-assistant"),
			chromedp.SendKeys(chromedp.CSS("#user"), "alice"),
			chromedp.Click(chromedp.CSS("#signin-button")),
			chromedp.WaitVisible(chromedp.CSS("#chat")),
		)
	}

	t.Run("sign-in fails", func(t *testing.T) {
		p := openPage(t, g.HTTP()+"/?ttl=99999999", 1280, 800)
		signIn(p)
		w, banner := why(p)
		if !strings.Contains(w, "sign-in failed: ttl_s must be between 1 and") || !strings.Contains(banner, w) {
			t.Errorf("the page says %q (banner %q), want the sign-in's error", w, banner)
		}
		p.screenshot("failed-sign-in")
	})

	t.Run("gateway refuses", func(t *testing.T) {
		other := startGateway(t, gatewayOpts{Name: "other-key",
			Env: map[string]string{"JETWAY_DEV_KEY_FILE": filepath.Join(t.TempDir(), "other-key.pem")}})
		p := openPage(t, g.HTTP()+"/?ws="+url.QueryEscape(other.WS()), 1280, 800)
		signIn(p)
		w, banner := why(p)
		if !strings.Contains(w, other.Addr+" refused the connection") || !strings.Contains(w, "JETWAY_ALLOWED_ORIGINS") || !strings.Contains(banner, w) {
			t.Errorf("the page says %q (banner %q), want the refusing gateway named and the origin to check", w, banner)
		}
		if state := eval[string](p, `document.getElementById('conn').dataset.state`); state == "connected" {
			t.Errorf("connected to a gateway that refuses the token")
		}
		p.screenshot("refused-connection")
	})
}
