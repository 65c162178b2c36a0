package selfservice

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jetway-gateway/jetway/internal/auth"
	"github.com/jetway-gateway/jetway/internal/config"
	"github.com/jetway-gateway/jetway/internal/door"
	"github.com/jetway-gateway/jetway/internal/quota"
)

// verifier accepts the token "good" as alice of contoso/support.
type verifier struct{}

func (verifier) Verify(_ context.Context, token string) (auth.Principal, error) {
	if token != "good" {
		return auth.Principal{}, errors.New("bad token")
	}
	return auth.Principal{Subject: "alice", Tenant: "contoso", App: "support"}, nil
}

// usage is the fake store: each limit's item at its used amount, or err.
type usage struct {
	used  map[quota.Scope]quota.Amount
	err   error
	asked []quota.Limit
}

var now = time.Date(2026, 12, 2, 17, 30, 5, 0, time.UTC)

func (u *usage) Standings(_ context.Context, limits []quota.Limit) ([]quota.Standing, error) {
	u.asked = limits
	if u.err != nil {
		return nil, u.err
	}
	var out []quota.Standing
	for _, l := range limits {
		start, _ := l.Window.Bounds(now)
		out = append(out, quota.Standing{Limit: l, Item: quota.Item{Scope: l.Scope, Window: l.Window, Start: start}, Used: u.used[l.Scope]})
	}
	return out, nil
}

func testConfig() *config.Config {
	return &config.Config{Tenants: []config.Tenant{{
		ID:     "contoso",
		Limits: []config.Limit{{Window: "month", Tokens: 1000000, USD: 50}},
		Apps: []config.App{{ID: "support",
			Limits:     []config.Limit{{Window: "hour", Tokens: 20000, Requests: 100}},
			UserLimits: []config.Limit{{Window: "minute", Requests: 10}},
		}},
	}}}
}

func serve(t *testing.T, h *Handler, token string) (int, []byte) {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, Path, nil)
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if ct := w.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	return w.Code, w.Body.Bytes()
}

func TestStanding(t *testing.T) {
	u := &usage{used: map[quota.Scope]quota.Amount{
		quota.TenantScope("contoso"):                   {Tokens: 1500, Requests: 3, MicroUSD: 2_500_000},
		quota.AppScope("contoso", "support"):           {Tokens: 25000, Requests: 3},
		quota.UserScope("contoso", "support", "alice"): {Requests: 2},
	}}
	h := &Handler{SignIn: &door.SignIn{Verifier: verifier{}, Door: "me"}, Apps: testConfig(), Usage: u}
	code, body := serve(t, h, "good")
	if code != http.StatusOK {
		t.Fatalf("status %d: %s", code, body)
	}
	var me map[string]any
	if err := json.Unmarshal(body, &me); err != nil {
		t.Fatal(err)
	}
	if me["tenant"] != "contoso" || me["app"] != "support" || me["user"] != "alice" || me["disabled"] != false {
		t.Errorf("caller: %s", body)
	}
	// One entry per measure: tenant tokens and usd, app tokens and
	// requests, user requests; used over the cap leaves 0 remaining.
	want := []string{
		`{"resets_at":"2027-01-01T00:00:00Z","remaining":998500,"scope":"tenant","tokens":1000000,"used":1500,"window":"month"}`,
		`{"remaining":47.5,"resets_at":"2027-01-01T00:00:00Z","scope":"tenant","usd":50,"used":2.5,"window":"month"}`,
		`{"remaining":0,"resets_at":"2026-12-02T18:00:00Z","scope":"app","tokens":20000,"used":25000,"window":"hour"}`,
		`{"remaining":97,"requests":100,"resets_at":"2026-12-02T18:00:00Z","scope":"app","used":3,"window":"hour"}`,
		`{"remaining":8,"requests":10,"resets_at":"2026-12-02T17:31:00Z","scope":"user","used":2,"window":"minute"}`,
	}
	limits, _ := me["limits"].([]any)
	if len(limits) != len(want) {
		t.Fatalf("%d entries, want %d: %s", len(limits), len(want), body)
	}
	for i, l := range limits {
		var w map[string]any
		_ = json.Unmarshal([]byte(want[i]), &w)
		if fmt.Sprint(l) != fmt.Sprint(w) {
			t.Errorf("entry %d:\n got %v\nwant %v", i, l, w)
		}
	}
	// The limits asked for are admission's: quota.LimitsFor.
	tenant, app, _ := testConfig().App("contoso", "support")
	if fmt.Sprint(u.asked) != fmt.Sprint(quota.LimitsFor(tenant, app, "alice", nil)) {
		t.Errorf("asked %v", u.asked)
	}
}

func TestRefusals(t *testing.T) {
	errorOf := func(body []byte) string {
		var e struct {
			Error struct{ Code, Message string }
		}
		if err := json.Unmarshal(body, &e); err != nil || e.Error.Message == "" {
			t.Errorf("not an error body: %s", body)
		}
		return e.Error.Code
	}
	signIn := &door.SignIn{Verifier: verifier{}, Door: "me"}
	h := &Handler{SignIn: signIn, Apps: testConfig(), Usage: &usage{}}
	for _, token := range []string{"", "bad"} {
		if code, body := serve(t, h, token); code != http.StatusUnauthorized || errorOf(body) != "unauthorized" {
			t.Errorf("token %q: %d %s", token, code, body)
		}
	}
	gone := &Handler{SignIn: signIn, Apps: &config.Config{}, Usage: &usage{}}
	if code, body := serve(t, gone, "good"); code != http.StatusForbidden || errorOf(body) != "forbidden" {
		t.Errorf("app not configured: %d %s", code, body)
	}
	down := &Handler{SignIn: signIn, Apps: testConfig(), Usage: &usage{err: fmt.Errorf("standings: %w", quota.ErrUnavailable)}}
	if code, body := serve(t, down, "good"); code != http.StatusServiceUnavailable || errorOf(body) != "unavailable" {
		t.Errorf("store down: %d %s", code, body)
	}
}
