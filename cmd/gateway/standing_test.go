package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// readMe is GET /v1/me at a gateway's main listener with a bearer token.
func readMe(t *testing.T, addr, tok string) meAnswer {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/v1/me", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var me meAnswer
	if err := json.NewDecoder(resp.Body).Decode(&me); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/me: %d %v %+v", resp.StatusCode, err, me.Error)
	}
	return me
}

// standingLine is one entry as `gateway chat --me` prints it.
var standingLine = regexp.MustCompile(`^(tenant|app|user) (minute|hour|day|month) (tokens|requests): ([\d,]+) used of ([\d,]+), ([\d,]+) left, resets (\d{4}-\d\d-\d\d \d\d:\d\d|\d\d:\d\d) UTC$`)

// checkStandingLines compares what chat --me printed with a /v1/me answer:
// who, then each entry's scope, window, used, limit, left and reset.
func checkStandingLines(t *testing.T, out string, me meAnswer, now time.Time) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if want := fmt.Sprintf("%s of %s/%s", me.User, me.Tenant, me.App); lines[0] != want {
		t.Fatalf("chat --me's first line %q, want %q", lines[0], want)
	}
	if len(lines)-1 != len(me.Limits) {
		t.Fatalf("chat --me printed\n%s\nwant one line per entry of %+v", out, me.Limits)
	}
	number := func(s string) float64 {
		n, err := strconv.ParseInt(strings.ReplaceAll(s, ",", ""), 10, 64)
		if err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		return float64(n)
	}
	for i, e := range me.Limits {
		m := standingLine.FindStringSubmatch(lines[i+1])
		if m == nil {
			t.Fatalf("line %q is not `scope window measure: N used of N, N left, resets [date] HH:MM UTC`", lines[i+1])
		}
		if e.Tokens == nil || m[1] != e.Scope || m[2] != e.Window || m[3] != "tokens" ||
			number(m[4]) != e.Used || number(m[5]) != float64(*e.Tokens) || number(m[6]) != e.Remaining {
			t.Errorf("line %q, want the entry %+v (limit %v)", lines[i+1], e, e.Tokens)
		}
		at, err := time.Parse(time.RFC3339, e.ResetsAt)
		if err != nil {
			t.Fatalf("resets_at %q: %v", e.ResetsAt, err)
		}
		want := at.UTC().Format("2006-01-02 15:04")
		if y, mo, d := at.UTC().Date(); y == now.UTC().Year() && mo == now.UTC().Month() && d == now.UTC().Day() {
			want = at.UTC().Format("15:04")
		}
		if m[7] != want {
			t.Errorf("line %q resets at %q, want %q (resets_at %s)", lines[i+1], m[7], want, e.ResetsAt)
		}
	}
}

// TestChatMe is `gateway chat --me` against a gateway process in dev mode,
// signed in as `gateway chat` is (a dev token for alice of Contoso's
// support assistant, minted from the dev key file): one line per entry of
// GET /v1/me, before any request (nothing used) and after `gateway chat`
// asked something (the used amount risen, as /v1/me says). A refused
// token is the gateway's error, a prompt is refused, -h lists --me.
func TestChatMe(t *testing.T) {
	home := t.TempDir()
	g := devGateway(t, home, "127.0.0.1:0", time.Millisecond)
	env := map[string]string{"HOME": home}
	getenv := func(k string) string { return env[k] }
	// The test reads one hour's window: it never starts in an hour's last minute.
	if left := time.Until(time.Now().UTC().Truncate(time.Hour).Add(time.Hour)); left < time.Minute {
		time.Sleep(left + time.Second)
	}
	var tokOut strings.Builder
	if err := run(context.Background(), []string{"token", "--sub", "alice", "--tenant", "contoso", "--app", "support-assistant"}, getenv, &tokOut); err != nil {
		t.Fatal(err)
	}
	tok := strings.TrimSpace(tokOut.String())
	chatArgs := func(args ...string) (string, string, error) {
		out, errOut := newTerminal(1<<30), newTerminal(1<<30)
		ctx, cancel := context.WithTimeout(context.Background(), chatAnswerWithin)
		defer cancel()
		err := chat(ctx, args, getenv, strings.NewReader(""), out, errOut)
		return out.String(), errOut.String(), err
	}
	// What chat --me prints with /v1/me the same just before and after it
	// (a settlement or a new window between the reads: read again).
	standing := func() (string, meAnswer, time.Time) {
		t.Helper()
		for range 20 {
			before := readMe(t, g.Addr, tok)
			now := time.Now()
			out, errOut, err := chatArgs("--url", g.URL(), "--me")
			if err != nil {
				t.Fatalf("chat --me: %v\nstderr: %s", err, errOut)
			}
			if after := readMe(t, g.Addr, tok); mustJSON(t, after) == mustJSON(t, before) {
				return out, before, now
			}
		}
		t.Fatal("GET /v1/me changed around every one of 20 runs of chat --me")
		return "", meAnswer{}, time.Time{}
	}

	out, me, now := standing()
	checkStandingLines(t, out, me, now)
	app := func(me meAnswer) meEntry {
		for _, e := range me.Limits {
			if e.Scope == "app" && e.Window == "hour" {
				return e
			}
		}
		t.Fatalf("no app hour limit in %+v", me.Limits)
		return meEntry{}
	}
	if l := app(me); l.Used != 0 || *l.Tokens != 2000000 || !strings.Contains(out, "\napp hour tokens: 0 used of 2,000,000, 2,000,000 left, resets ") {
		t.Fatalf("before any request chat --me printed\n%s\nwant the app's hour at 0 used of 2,000,000 (%+v)", out, l)
	}
	t.Logf("chat --me before any request:\n%s", out)

	if _, errOut, err := chatArgs("--url", g.URL(), "--model", "mock-a", "Hello"); err != nil {
		t.Fatalf("chat Hello: %v\nstderr: %s", err, errOut)
	}
	out, me, now = standing()
	checkStandingLines(t, out, me, now)
	if l := app(me); l.Used <= 0 {
		t.Fatalf("after chat asked something chat --me printed\n%s\nwant the app's hour used risen (%+v)", out, l)
	}
	t.Logf("chat --me after one request:\n%s", out)

	if _, _, err := chatArgs("--url", g.URL(), "--token", "not-a-jwt", "--me"); err == nil ||
		!strings.Contains(err.Error(), "GET http://"+g.Addr+"/v1/me: 401 unauthorized: ") || strings.Contains(err.Error(), "is the gateway running") {
		t.Errorf("chat --me with a bad token: %v, want the gateway's 401 and its message", err)
	}
	if _, _, err := chatArgs("--url", g.URL(), "--me", "Hello"); err == nil || !strings.Contains(err.Error(), "chat --me takes no prompt") {
		t.Errorf("chat --me Hello: %v", err)
	}
	if _, _, err := chatArgs("--url", "http://"+g.Addr+"/v1/ws", "--me"); err == nil || !strings.Contains(err.Error(), "--url takes the WebSocket endpoint") {
		t.Errorf("chat --me --url http://...: %v", err)
	}
	help, _, err := chatArgs("-h")
	if !errors.Is(err, flag.ErrHelp) || !strings.Contains(help, "\n  -me\n") || !strings.Contains(help, "gateway chat --me") {
		t.Errorf("chat -h: %v, printed\n%s\nwant -me listed", err, help)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
