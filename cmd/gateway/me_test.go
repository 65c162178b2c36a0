package main

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/jetway-gateway/jetway/client"
	"github.com/jetway-gateway/jetway/internal/mockmodel"
)

// meEntry is one entry of GET /v1/me's limits.
type meEntry struct {
	Scope, Window string
	Tokens        *int64
	Used          float64
	Remaining     float64
	ResetsAt      string `json:"resets_at"`
}

type meAnswer struct {
	Tenant, App, User string
	Limits            []meEntry
	Disabled          bool
	Error             *struct{ Code, Message string }
}

func getMe(t *testing.T, g *gw, tok string) (int, meAnswer) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+g.Addr+"/v1/me", nil)
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var me meAnswer
	if err := json.NewDecoder(resp.Body).Decode(&me); err != nil {
		t.Fatalf("GET /v1/me: %d, not JSON: %v", resp.StatusCode, err)
	}
	return resp.StatusCode, me
}

// TestMe: GET /v1/me on gateways over dynalite (quota leases on) shows
// the caller's limits, used 0 before any request and grown by exactly
// what a request on /v1/ws was charged once it settled, on the server
// that served it; another server counts that server's lease in full
// (docs/admin.md: remaining may be low by what other servers hold
// leased). Without a token it is 401.
func TestMe(t *testing.T) {
	w := newWorld(t, mockmodel.Options{TTFT: time.Millisecond, PerToken: time.Millisecond})
	cl := w.cluster(2, nil)
	tok := w.token("me-user", "fabrikam", "fabrikam-docs", time.Hour)
	// The test reads one hour's window: it never starts in an hour's last minute.
	if left := time.Until(time.Now().UTC().Truncate(time.Hour).Add(time.Hour)); left < time.Minute {
		time.Sleep(left + time.Second)
	}

	code, me := getMe(t, cl.servers[0].gw, tok)
	if code != http.StatusOK {
		t.Fatalf("GET /v1/me: %d %+v", code, me.Error)
	}
	if me.Tenant != "fabrikam" || me.App != "document-summarizer" || me.User != "me-user" || me.Disabled || len(me.Limits) != 1 {
		t.Fatalf("standing: %+v", me)
	}
	l := me.Limits[0]
	hourEnd := time.Now().UTC().Truncate(time.Hour).Add(time.Hour)
	if l.Scope != "app" || l.Window != "hour" || l.Tokens == nil || *l.Tokens != 20000 || l.Used != 0 || l.Remaining != 20000 {
		t.Fatalf("before any request: %+v", l)
	}
	if at, err := time.Parse(time.RFC3339, l.ResetsAt); err != nil || !at.Equal(hourEnd) && !at.Equal(hourEnd.Add(time.Hour)) {
		t.Fatalf("resets_at %q, want the hour's end %s", l.ResetsAt, hourEnd.Format(time.RFC3339))
	}

	c := w.dial(cl.servers[0].gw, "me-user", func(o *client.Options) {
		o.Token = func(context.Context) (string, error) { return tok, nil }
	})
	req := ask("how much have I used")
	req.MaxTokens = 200
	call, err := c.Send(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	done, err := waitCall(t, call, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	charged := float64(done.Usage.InputTokens + done.Usage.OutputTokens)
	if charged <= 0 {
		t.Fatalf("usage %+v", done.Usage)
	}
	// Settlement follows the terminal frame: until then the reservation
	// (input estimate + max_tokens) is what is used.
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, me = getMe(t, cl.servers[0].gw, tok)
		if l = me.Limits[0]; l.Used == charged && l.Remaining == 20000-charged {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after a request charged %v tokens: %+v", charged, l)
		}
		time.Sleep(50 * time.Millisecond)
	}
	_, other := getMe(t, cl.servers[1].gw, tok)
	if o := other.Limits[0]; o.Used < charged || o.Used+o.Remaining != 20000 {
		t.Fatalf("another server: %+v, want used at least %v (the serving server's lease counted in full)", o, charged)
	} else {
		t.Logf("used %v on the serving server, %v on another (its lease held: %v)", charged, o.Used, o.Used-charged)
	}

	for _, bad := range []string{"", "not-a-jwt"} {
		if code, me := getMe(t, cl.servers[0].gw, bad); code != http.StatusUnauthorized || me.Error == nil || me.Error.Code != "unauthorized" {
			t.Fatalf("token %q: %d %+v", bad, code, me.Error)
		}
	}
}
