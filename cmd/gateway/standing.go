package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jetway-gateway/jetway/internal/selfservice"
)

// chatMeTimeout bounds one GET /v1/me of `gateway chat --me` (the gateway
// bounds its own reads at selfservice.ReadTimeout).
const chatMeTimeout = 15 * time.Second

// standingURL is the gateway's GET /v1/me for its WebSocket endpoint:
// ws: as http:, wss: as https:, the path's /v1/ws (after any prefix) as
// /v1/me, as jetway.js's client.me() derives it.
func standingURL(wsURL string) (string, error) {
	u, err := url.Parse(wsURL)
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("--url %q: not a ws:// or wss:// URL", wsURL)
	}
	switch u.Scheme {
	case "ws":
		u.Scheme = "http"
	case "wss":
		u.Scheme = "https"
	default:
		return "", fmt.Errorf("--url %q: not a ws:// or wss:// URL (--url takes the WebSocket endpoint, such as %s)", wsURL, defaultChatURL)
	}
	prefix := ""
	if p := strings.TrimSuffix(u.Path, "/"); strings.HasSuffix(p, "/v1/ws") {
		prefix = strings.TrimSuffix(p, "/v1/ws")
	}
	u.Path, u.RawPath, u.RawQuery, u.Fragment = prefix+selfservice.Path, "", "", ""
	return u.String(), nil
}

// meError is an answer of GET /v1/me other than 200, in the admin API's
// error shape.
type meError struct {
	Status        int
	Code, Message string
}

func (e *meError) Error() string {
	return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message)
}

// chatMe is `gateway chat --me`: the signed-in user's standing, one line
// per limit entry. It waits up to wait for a gateway that refuses
// connections (just started), as chat does.
func chatMe(ctx context.Context, wsURL string, token func(context.Context) (string, error), wait time.Duration, stdout, stderr io.Writer) error {
	meURL, err := standingURL(wsURL)
	if err != nil {
		return err
	}
	tok, err := token(ctx)
	if err != nil {
		return fmt.Errorf("chat --me: %w", err)
	}
	deadline := time.Now().Add(wait)
	said := false
	for {
		me, err := getStanding(ctx, meURL, tok)
		if err == nil {
			printStanding(stdout, me, time.Now())
			return nil
		}
		var refused *meError
		if errors.As(err, &refused) || !errors.Is(err, syscall.ECONNREFUSED) || time.Now().After(deadline) {
			hint := ""
			if refused == nil {
				hint = " (is the gateway running?)"
			}
			return fmt.Errorf("chat --me: GET %s: %w%s", meURL, err, hint)
		}
		if !said {
			fmt.Fprintf(stderr, "[waiting up to %s for the gateway at %s]\n", wait, meURL)
			said = true
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(chatConnectRetry):
		}
	}
}

// getStanding GETs the standing at meURL with a bearer token.
func getStanding(ctx context.Context, meURL, token string) (selfservice.Me, error) {
	ctx, cancel := context.WithTimeout(ctx, chatMeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, meURL, nil)
	if err != nil {
		return selfservice.Me{}, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return selfservice.Me{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return selfservice.Me{}, err
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error struct{ Code, Message string }
		}
		if json.Unmarshal(body, &e) != nil || e.Error.Code == "" {
			e.Error.Code, e.Error.Message = "http_"+strconv.Itoa(resp.StatusCode), strings.TrimSpace(string(body[:min(len(body), 200)]))
		}
		return selfservice.Me{}, &meError{Status: resp.StatusCode, Code: e.Error.Code, Message: e.Error.Message}
	}
	var me selfservice.Me
	if err := json.Unmarshal(body, &me); err != nil {
		return selfservice.Me{}, fmt.Errorf("the answer is not a standing: %w", err)
	}
	return me, nil
}

// printStanding writes who the standing is of, then one line per entry:
//
//	app hour tokens: 205 used of 20,000, 19,795 left, resets 18:00 UTC
//
// A reset on another day than now (UTC) has its date too.
func printStanding(w io.Writer, me selfservice.Me, now time.Time) {
	fmt.Fprintf(w, "%s of %s/%s\n", me.User, me.Tenant, me.App)
	if me.Disabled {
		fmt.Fprintln(w, "disabled: the gateway refuses this user's new requests")
	}
	if len(me.Limits) == 0 {
		fmt.Fprintln(w, "no limits")
	}
	for _, e := range me.Limits {
		measure, limit, amount := "tokens", 0.0, wholeAmount
		switch {
		case e.Tokens != nil:
			limit = float64(*e.Tokens)
		case e.Requests != nil:
			measure, limit = "requests", float64(*e.Requests)
		case e.USD != nil:
			measure, limit, amount = "usd", *e.USD, dollarAmount
		}
		fmt.Fprintf(w, "%s %s %s: %s used of %s, %s left, resets %s\n", e.Scope, e.Window, measure,
			amount(e.Used), amount(limit), amount(e.Remaining), resetsAt(e.ResetsAt, now))
	}
}

// resetsAt is an RFC 3339 time in UTC: the time alone on now's day, else
// the date and time.
func resetsAt(rfc3339 string, now time.Time) string {
	at, err := time.Parse(time.RFC3339, rfc3339)
	if err != nil {
		return rfc3339
	}
	at, now = at.UTC(), now.UTC()
	if y, m, d := at.Date(); y == now.Year() && m == now.Month() && d == now.Day() {
		return at.Format("15:04 UTC")
	}
	return at.Format("2006-01-02 15:04 UTC")
}

// wholeAmount is a count of tokens or requests with thousands separators.
func wholeAmount(v float64) string {
	return grouped(strconv.FormatFloat(math.Round(math.Abs(v)), 'f', 0, 64), v < 0)
}

// dollarAmount is an amount in dollars: cents, or four places below a dollar.
func dollarAmount(v float64) string {
	places := 2
	if v != 0 && math.Abs(v) < 1 {
		places = 4
	}
	whole, frac, _ := strings.Cut(strconv.FormatFloat(math.Abs(v), 'f', places, 64), ".")
	return "$" + grouped(whole, v < 0) + "." + frac
}

// grouped puts thousands separators into a string of digits.
func grouped(digits string, negative bool) string {
	var b strings.Builder
	if negative {
		b.WriteByte('-')
	}
	for i, c := range digits {
		if i > 0 && (len(digits)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
