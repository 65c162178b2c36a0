package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetway-gateway/jetway/client"
	"github.com/jetway-gateway/jetway/internal/auth/authtest"
	"github.com/jetway-gateway/jetway/internal/dynalitetest"
)

// adminAPI calls the admin API of a gateway as one admin.
type adminAPI struct {
	t     *testing.T
	token string
}

// admin is a caller with the given cognito:groups (jetway:admin, ...).
func (w *world) admin(sub string, groups ...string) *adminAPI {
	now := time.Now()
	return &adminAPI{t: w.t, token: w.issuer.Token(w.t, authtest.Claims{Subject: sub, ClientID: "contoso-support",
		Groups: groups, IssuedAt: now, ExpiresAt: now.Add(time.Hour)})}
}

type adminAnswer struct {
	Status int
	ETag   string
	Body   map[string]any
	Raw    string
}

func (r adminAnswer) code() string {
	if e, ok := r.Body["error"].(map[string]any); ok {
		return fmt.Sprint(e["code"])
	}
	return ""
}

func (r adminAnswer) field() string {
	if e, ok := r.Body["error"].(map[string]any); ok && e["field"] != nil {
		return fmt.Sprint(e["field"])
	}
	return ""
}

// do calls method path on g with body (nil: none) and headers.
func (a *adminAPI) do(g *gw, method, path string, body any, headers ...string) adminAnswer {
	a.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, _ := json.Marshal(b)
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, "http://"+g.Addr+path, rd)
	if err != nil {
		a.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	out := adminAnswer{Status: res.StatusCode, ETag: strings.Trim(res.Header.Get("ETag"), `"`), Raw: string(raw)}
	_ = json.Unmarshal(raw, &out.Body)
	return out
}

func (a *adminAPI) must(r adminAnswer, status int) adminAnswer {
	a.t.Helper()
	if r.Status != status {
		a.t.Fatalf("status %d, want %d: %s", r.Status, status, r.Raw)
	}
	return r
}

// dialApp connects sub as a user of an app client of tenant.
func (w *world) dialApp(g *gw, sub, tenant, clientID string) *client.Client {
	w.t.Helper()
	c, err := w.tryDialApp(g, sub, tenant, clientID)
	if err != nil {
		w.t.Fatalf("dial: %v", err)
	}
	return c
}

func (w *world) tryDialApp(g *gw, sub, tenant, clientID string) (*client.Client, error) {
	tok := w.token(sub, tenant, clientID, time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, client.Options{URLs: []string{g.URL()}, Token: func(context.Context) (string, error) { return tok, nil }})
	if err != nil {
		return nil, err
	}
	w.t.Cleanup(func() { _ = c.Close() })
	return c, nil
}

// until retries f until it returns "" or the wait ends, and reports how long it took.
func until(t *testing.T, wait time.Duration, what string, f func() string) time.Duration {
	t.Helper()
	start := time.Now()
	var last string
	for time.Since(start) < wait {
		if last = f(); last == "" {
			return time.Since(start)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s: not within %s: %s", what, wait, last)
	return 0
}

// applyWait is how long a test waits for a change to reach a server:
// the contract's 5 s with room for a busy machine; the times measured
// are logged (docs/benchmarks.md).
const applyWait = 15 * time.Second

func acmeTenant(tokensPerHour int) map[string]any {
	return map[string]any{"apps": []any{map[string]any{"id": "chat", "client_ids": []string{"acme-chat"},
		"models": map[string]any{"default": "mock-a"}, "limits": []any{map[string]any{"window": "hour", "tokens": tokensPerHour}}}}}
}

// TestAdminAPIAcrossFleet: three gateway processes on dynalite share a
// config table. A tenant created through the admin API on one server
// serves a new user on every server without a restart; a lowered and a
// raised limit, and a disabled user, take effect everywhere; two admins
// racing on one document: one wins, the other gets 412.
func TestAdminAPIAcrossFleet(t *testing.T) {
	w := newWorld(t, fastPace())
	cl := w.cluster(3, map[string]string{"JETWAY_CONFIG_TABLE": dynalitetest.TableName(t) + "-cfg"})
	ops := w.admin("ops", "jetway:admin")
	s0 := cl.servers[0].gw

	created := ops.must(ops.do(s0, "PUT", "/v1/admin/tenants/acme", acmeTenant(100000), "If-None-Match", "*"), 201)
	for i, s := range cl.servers {
		took := until(t, applyWait, fmt.Sprintf("server %d serves the new tenant", i), func() string {
			c, err := w.tryDialApp(s.gw, fmt.Sprintf("new-user-%d", i), "acme", "acme-chat")
			if err != nil {
				return err.Error()
			}
			_, err = waitCall(t, mustSend(t, c, ask("hello acme")), 20*time.Second)
			if err != nil {
				return err.Error()
			}
			return ""
		})
		t.Logf("server %d served the new tenant %s after its creation", i, took)
	}

	// Lowered below one request's reservation: refused on every server.
	low := acmeTenant(100)
	lowered := ops.must(ops.do(s0, "PUT", "/v1/admin/tenants/acme", low, "If-Match", created.ETag), 200)
	for i, s := range cl.servers {
		c := w.dialApp(s.gw, fmt.Sprintf("low-user-%d", i), "acme", "acme-chat")
		took := until(t, applyWait, fmt.Sprintf("server %d refuses under the lowered limit", i), func() string {
			_, err := waitCall(t, mustSend(t, c, ask("over the lowered limit")), 20*time.Second)
			if e, ok := err.(*client.Error); ok && e.Code == "quota_exceeded" {
				return ""
			}
			return fmt.Sprint("answered ", err)
		})
		t.Logf("server %d refused under the lowered limit %s after the change", i, took)
	}
	raised := ops.must(ops.do(s0, "PUT", "/v1/admin/tenants/acme", acmeTenant(10000000), "If-Match", lowered.ETag), 200)
	for i, s := range cl.servers {
		c := w.dialApp(s.gw, fmt.Sprintf("raised-user-%d", i), "acme", "acme-chat")
		until(t, applyWait, fmt.Sprintf("server %d admits under the raised limit", i), func() string {
			if _, err := waitCall(t, mustSend(t, c, ask("under the raised limit")), 20*time.Second); err != nil {
				return err.Error()
			}
			return ""
		})
	}

	// Two admins race on one document with the same version: one wins.
	var wg sync.WaitGroup
	statuses := make([]int, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := w.admin(fmt.Sprintf("racer-%d", i), "jetway:admin")
			statuses[i] = a.do(cl.servers[i].gw, "PUT", "/v1/admin/tenants/acme", acmeTenant(2000000+i), "If-Match", raised.ETag).Status
		}()
	}
	wg.Wait()
	if !(statuses[0] == 200 && statuses[1] == 412) && !(statuses[0] == 412 && statuses[1] == 200) {
		t.Fatalf("racing writes answered %v, want one 200 and one 412", statuses)
	}

	// A user disabled mid-session: the request in flight finishes, the
	// next one is refused 403, on the server the session is on.
	c := w.dialApp(cl.servers[2].gw, "dora", "acme", "acme-chat")
	slow := ask("a long answer in flight")
	slow.MaxTokens = 2000
	inflight := mustSend(t, c, slow)
	ops.must(ops.do(s0, "PUT", "/v1/admin/tenants/acme/apps/chat/users/dora", map[string]any{"disabled": true}, "If-None-Match", "*"), 201)
	if _, err := waitCall(t, inflight, 30*time.Second); err != nil {
		t.Fatalf("the request in flight when its user was disabled: %v", err)
	}
	until(t, applyWait, "the disabled user is refused", func() string {
		_, err := waitCall(t, mustSend(t, c, ask("after being disabled")), 20*time.Second)
		if e, ok := err.(*client.Error); ok && e.Code == "forbidden" && e.Status == 403 {
			return ""
		}
		return fmt.Sprint("answered ", err)
	})
	me := ops.do(cl.servers[1].gw, "GET", "/v1/admin/tenants/acme/apps/chat/users/dora", nil)
	if me.Status != 200 || me.Body["disabled"] != true {
		t.Fatalf("the override read on another server: %s", me.Raw)
	}

	// The audit trail has the writes, newest first, with who made them.
	audit := ops.must(ops.do(s0, "GET", "/v1/admin/audit?tenant=acme", nil), 200)
	entries, _ := audit.Body["entries"].([]any)
	if len(entries) < 4 {
		t.Fatalf("audit entries %d, want at least 4: %s", len(entries), audit.Raw)
	}
	first, _ := entries[0].(map[string]any)
	if first["actor"] != "ops" || first["action"] != "create" || !strings.HasSuffix(fmt.Sprint(first["path"]), "/users/dora") {
		t.Fatalf("newest audit entry: %v", first)
	}

	// Deleting the tenant ends its new admissions on every server, in
	// sessions already open.
	open := make([]*client.Client, len(cl.servers))
	for i, s := range cl.servers {
		open[i] = w.dialApp(s.gw, fmt.Sprintf("leaving-%d", i), "acme", "acme-chat")
	}
	cur := ops.must(ops.do(s0, "GET", "/v1/admin/tenants/acme", nil), 200)
	ops.must(ops.do(s0, "DELETE", "/v1/admin/tenants/acme", nil, "If-Match", cur.ETag), 204)
	for i, c := range open {
		until(t, applyWait, fmt.Sprintf("server %d refuses the deleted tenant", i), func() string {
			_, err := waitCall(t, mustSend(t, c, ask("after the delete")), 20*time.Second)
			if e, ok := err.(*client.Error); ok && e.Code == "forbidden" && e.Status == 403 {
				return ""
			}
			return fmt.Sprint("answered ", err)
		})
	}
	if r := ops.do(s0, "GET", "/v1/admin/tenants/acme", nil); r.Status != 404 {
		t.Fatalf("the deleted tenant read back: %d %s", r.Status, r.Raw)
	}
}

// TestAdminAPIRolesAndBadInput: a tenant admin cannot touch another
// tenant or the model catalogue (each verb); every bad document is 400
// naming its field, and nothing is stored.
func TestAdminAPIRolesAndBadInput(t *testing.T) {
	w := newWorld(t, fastPace())
	endpoint := dynalitetest.Start(t)
	table := dynalitetest.TableName(t)
	w.runCommand(map[string]string{"AWS_ENDPOINT_URL_DYNAMODB": endpoint, "JETWAY_CONFIG_TABLE": table}, "tables", "create")
	g := w.start(map[string]string{"AWS_ENDPOINT_URL_DYNAMODB": endpoint, "JETWAY_CONFIG_TABLE": table})
	ops := w.admin("ops", "jetway:admin")
	ops.must(ops.do(g, "PUT", "/v1/admin/tenants/acme", acmeTenant(1000), "If-None-Match", "*"), 201)

	tenantAdmin := w.admin("ta", "jetway:admin:acme")
	tenantAdmin.must(tenantAdmin.do(g, "GET", "/v1/admin/tenants/acme", nil), 200)
	list := tenantAdmin.must(tenantAdmin.do(g, "GET", "/v1/admin/tenants", nil), 200)
	if ts, _ := list.Body["tenants"].([]any); len(ts) != 1 {
		t.Fatalf("a tenant admin lists %s, want only acme", list.Raw)
	}
	contoso := ops.must(ops.do(g, "GET", "/v1/admin/tenants/contoso", nil), 200)
	for _, c := range []struct{ method, path string }{
		{"GET", "/v1/admin/tenants/contoso"}, {"PUT", "/v1/admin/tenants/contoso"}, {"DELETE", "/v1/admin/tenants/contoso"},
		{"GET", "/v1/admin/tenants/contoso/apps/support-assistant"}, {"PUT", "/v1/admin/tenants/contoso/apps/support-assistant"},
		{"DELETE", "/v1/admin/tenants/contoso/apps/support-assistant"}, {"GET", "/v1/admin/tenants/contoso/apps/support-assistant/users"},
		{"GET", "/v1/admin/tenants/contoso/apps/support-assistant/users/u1"}, {"PUT", "/v1/admin/tenants/contoso/apps/support-assistant/users/u1"},
		{"DELETE", "/v1/admin/tenants/contoso/apps/support-assistant/users/u1"}, {"GET", "/v1/admin/tenants/contoso/usage"},
		{"GET", "/v1/admin/audit?tenant=contoso"}, {"GET", "/v1/admin/models"}, {"GET", "/v1/admin/models/mock-a"},
		{"PUT", "/v1/admin/models/mock-a"}, {"DELETE", "/v1/admin/models/mock-a"},
	} {
		r := tenantAdmin.do(g, c.method, c.path, contoso.Raw, "If-Match", contoso.ETag)
		if r.Status != 403 || r.code() != "forbidden" {
			t.Errorf("tenant admin of acme: %s %s answered %d %s, want 403 forbidden", c.method, c.path, r.Status, r.Raw)
		}
	}
	nobody := w.admin("user", "tenant:contoso")
	if r := nobody.do(g, "GET", "/v1/admin/tenants", nil); r.Status != 403 {
		t.Errorf("a user without an admin role: %d %s", r.Status, r.Raw)
	}
	anon := &adminAPI{t: t}
	if r := anon.do(g, "GET", "/v1/admin/tenants", nil); r.Status != 401 || r.code() != "unauthorized" {
		t.Errorf("no token: %d %s", r.Status, r.Raw)
	}

	before := ops.must(ops.do(g, "GET", "/v1/admin/tenants/acme", nil), 200)
	app := func(mod func(a map[string]any)) map[string]any {
		a := map[string]any{"id": "chat", "client_ids": []string{"acme-chat"}, "models": map[string]any{"default": "mock-a"},
			"limits": []any{map[string]any{"window": "hour", "tokens": 1000}}}
		mod(a)
		return map[string]any{"apps": []any{a}}
	}
	many := make([]string, 10000)
	for i := range many {
		many[i] = fmt.Sprintf("client-%d", i)
	}
	for _, c := range []struct {
		name  string
		body  any
		field string
	}{
		{"negative limit", app(func(a map[string]any) { a["limits"] = []any{map[string]any{"window": "hour", "tokens": -1}} }), "apps[0].limits[0].tokens"},
		{"fortnight", app(func(a map[string]any) { a["limits"] = []any{map[string]any{"window": "fortnight", "tokens": 5}} }), "apps[0].limits[0].window"},
		{"unknown key", app(func(a map[string]any) { a["limts"] = 5 }), "apps[0].limts"},
		{"absent model", app(func(a map[string]any) { a["models"] = map[string]any{"default": "no-such-model"} }), "apps[0].models.default"},
		{"10000 client ids", app(func(a map[string]any) { a["client_ids"] = many }), "apps[0].client_ids"},
		{"another tenant's client id", app(func(a map[string]any) { a["client_ids"] = []string{"contoso-support"} }), "apps[0].client_ids[0]"},
		{"no apps", map[string]any{"apps": []any{}}, "apps"},
		{"duplicate window", app(func(a map[string]any) {
			a["limits"] = []any{map[string]any{"window": "hour", "tokens": 5}, map[string]any{"window": "hour", "tokens": 6}}
		}), "apps[0].limits[1].window"},
		{"bad alert", app(func(a map[string]any) {
			a["limits"] = []any{map[string]any{"window": "hour", "tokens": 5, "alerts": []int{150}}}
		}), "apps[0].limits[0].alerts[0]"},
		{"bad prompt_cache", app(func(a map[string]any) { a["prompt_cache"] = "sometimes" }), "apps[0].prompt_cache"},
		{"max_tokens over its limit", app(func(a map[string]any) { a["max_tokens"] = 9000 }), "apps[0].max_tokens"},
		{"another id in the body", map[string]any{"id": "other", "apps": []any{}}, "id"},
		{"a profile ARN that is not one", map[string]any{"bedrock_profiles": map[string]any{"mock-a": "arn:aws:bedrock:us-east-1:111122223333:inference-profile/us.x"},
			"apps": app(func(map[string]any) {})["apps"]}, "bedrock_profiles.mock-a"},
		{"an app's tier its model lacks", app(func(a map[string]any) { a["service_tier"] = "flex" }), "apps[0].service_tier"},
	} {
		r := ops.do(g, "PUT", "/v1/admin/tenants/acme", c.body, "If-Match", before.ETag)
		if r.Status != 400 || r.code() != "invalid_request" || r.field() != c.field {
			t.Errorf("%s: %d field %q %s, want 400 invalid_request naming %s", c.name, r.Status, r.field(), r.Raw, c.field)
		}
	}
	// The model catalogue's placements and tiers, by the file's rules.
	model := func(mod func(m map[string]any)) map[string]any {
		m := map[string]any{"bedrock_id": "mock-z", "price": map[string]any{"input_per_1k": 0.001, "output_per_1k": 0.002}}
		mod(m)
		return m
	}
	for _, c := range []struct {
		name  string
		body  any
		field string
	}{
		{"a placement with an unknown region", model(func(m map[string]any) {
			m["placements"] = []any{map[string]any{"region": "us-east-1"}, map[string]any{"region": "moon-1"}}
		}), "placements[1].region"},
		{"a duplicate placement", model(func(m map[string]any) {
			m["placements"] = []any{map[string]any{"region": "us-east-1"}, map[string]any{"region": "us-east-1", "bedrock_id": "us.mock-z"}}
		}), "placements[1]"},
		{"a tier price missing for a tier in use", model(func(m map[string]any) { m["service_tiers"] = []string{"default", "priority"} }), "price.tiers"},
		{"a role that is not one", model(func(m map[string]any) {
			m["placements"] = []any{map[string]any{"region": "eu-west-1", "role_arn": "arn:aws:iam::111122223333:user/x"}}
		}), "placements[0].role_arn"},
	} {
		r := ops.do(g, "PUT", "/v1/admin/models/mock-z", c.body, "If-None-Match", "*")
		if r.Status != 400 || r.code() != "invalid_request" || r.field() != c.field {
			t.Errorf("model: %s: %d field %q %s, want 400 invalid_request naming %s", c.name, r.Status, r.field(), r.Raw, c.field)
		}
	}
	for _, c := range []struct {
		name, method, path string
		body               any
		status             int
		code               string
	}{
		{"1 MB document", "PUT", "/v1/admin/tenants/acme", `{"apps":[],"x":"` + strings.Repeat("a", 1<<20) + `"}`, 413, "payload_too_large"},
		{"not JSON", "PUT", "/v1/admin/tenants/acme", "apps: []", 400, "invalid_request"},
		{"tenant id with ..", "GET", "/v1/admin/tenants/..", nil, 0, ""},
		{"tenant id with upper case", "PUT", "/v1/admin/tenants/Acme", acmeTenant(5), 400, "invalid_request"},
		{"sub with a slash", "PUT", "/v1/admin/tenants/acme/apps/chat/users/a%2Fb", map[string]any{"disabled": true}, 0, ""},
		{"no precondition", "PUT", "/v1/admin/tenants/acme", acmeTenant(5), 428, "precondition_required"},
		{"stale version", "PUT", "/v1/admin/tenants/acme", acmeTenant(5), 412, "precondition_failed"},
		{"create over an existing one", "PUT", "/v1/admin/tenants/acme", acmeTenant(5), 412, "precondition_failed"},
		{"delete a model in use", "DELETE", "/v1/admin/models/mock-a", nil, 409, "conflict"},
	} {
		var hdr []string
		switch c.name {
		case "stale version":
			hdr = []string{"If-Match", "1"}
		case "create over an existing one":
			hdr = []string{"If-None-Match", "*"}
		case "no precondition":
		case "delete a model in use":
			m := ops.must(ops.do(g, "GET", "/v1/admin/models/mock-a", nil), 200)
			hdr = []string{"If-Match", m.ETag}
		default:
			hdr = []string{"If-Match", before.ETag}
		}
		r := ops.do(g, c.method, c.path, c.body, hdr...)
		if c.status == 0 {
			if r.Status < 400 || r.Status >= 500 {
				t.Errorf("%s: %d %s, want a 4xx refusal", c.name, r.Status, r.Raw)
			}
			continue
		}
		if r.Status != c.status || r.code() != c.code {
			t.Errorf("%s: %d %s, want %d %s", c.name, r.Status, r.Raw, c.status, c.code)
		}
	}
	after := ops.must(ops.do(g, "GET", "/v1/admin/tenants/acme", nil), 200)
	if after.ETag != before.ETag || after.Raw != before.Raw {
		t.Fatalf("a refused write changed the tenant: %s -> %s", before.Raw, after.Raw)
	}
}

// TestAdminAPIReadOnlyWithoutConfigTable: without JETWAY_CONFIG_TABLE the
// tenants file is the configuration: reads answer it, writes get 409
// naming JETWAY_CONFIG_TABLE.
func TestAdminAPIReadOnlyWithoutConfigTable(t *testing.T) {
	w := newWorld(t, fastPace())
	g := w.start(nil)
	ops := w.admin("ops", "jetway:admin")
	ops.must(ops.do(g, "GET", "/v1/admin/tenants/contoso", nil), 200)
	r := ops.do(g, "PUT", "/v1/admin/tenants/acme", acmeTenant(5), "If-None-Match", "*")
	if r.Status != 409 || r.code() != "conflict" || !strings.Contains(r.Raw, "JETWAY_CONFIG_TABLE") {
		t.Fatalf("a write without a config table: %d %s", r.Status, r.Raw)
	}
}

// TestConfigTableOutage: with the config table unreachable a server keeps
// serving its last good configuration (and says so in /readyz), admin
// reads answer that copy, and writes get 503 with nothing stored.
func TestConfigTableOutage(t *testing.T) {
	w := newWorld(t, fastPace())
	endpoint := dynalitetest.Start(t)
	proxy := newSwitchProxy(t, endpoint[len("http://"):])
	table := dynalitetest.TableName(t)
	w.runCommand(map[string]string{"AWS_ENDPOINT_URL_DYNAMODB": endpoint, "JETWAY_CONFIG_TABLE": table}, "tables", "create")
	g := w.start(map[string]string{"AWS_ENDPOINT_URL_DYNAMODB": proxy.URL(), "JETWAY_CONFIG_TABLE": table})
	ops := w.admin("ops", "jetway:admin")
	ops.must(ops.do(g, "PUT", "/v1/admin/tenants/acme", acmeTenant(100000), "If-None-Match", "*"), 201)
	proxy.down.Store(true)
	proxy.cut()
	until(t, applyWait, "/readyz reports the stale configuration", func() string {
		res, err := http.Get("http://" + g.Admin + "/readyz")
		if err != nil {
			return err.Error()
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		if res.StatusCode == 200 && strings.Contains(string(b), `"stale":true`) {
			return ""
		}
		return fmt.Sprintf("%d %s", res.StatusCode, b)
	})
	c := w.dialApp(g, "outage-user", "acme", "acme-chat")
	if _, err := waitCall(t, mustSend(t, c, ask("during the config outage")), 20*time.Second); err != nil {
		t.Fatalf("a request during the config table's outage: %v", err)
	}
	cur := ops.must(ops.do(g, "GET", "/v1/admin/tenants/acme", nil), 200)
	r := ops.do(g, "PUT", "/v1/admin/tenants/acme", acmeTenant(5), "If-Match", cur.ETag)
	if r.Status != 503 || r.code() != "unavailable" {
		t.Fatalf("a write during the outage: %d %s, want 503 unavailable", r.Status, r.Raw)
	}
	proxy.down.Store(false)
	after := ops.must(ops.do(g, "GET", "/v1/admin/tenants/acme", nil), 200)
	if after.ETag != cur.ETag {
		t.Fatalf("a write refused 503 was stored: version %s -> %s", cur.ETag, after.ETag)
	}
}

// TestConfigImportExport: `gateway config import` writes a tenants file
// (user overrides included) into the config table, a second import
// writes nothing, and `gateway config export` prints a file that imports
// again unchanged.
func TestConfigImportExport(t *testing.T) {
	w := newWorld(t, fastPace())
	endpoint := dynalitetest.Start(t)
	table := dynalitetest.TableName(t)
	env := map[string]string{"AWS_ENDPOINT_URL_DYNAMODB": endpoint, "JETWAY_CONFIG_TABLE": table}
	w.runCommand(env, "tables", "create")
	dir := t.TempDir()
	seed := dir + "/seed.yaml"
	b, err := os.ReadFile("testdata/jetway.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// One user override, under its app.
	withUser := strings.Replace(string(b), "client_ids: [contoso-support]", "client_ids: [contoso-support]\n        users: [{sub: blocked-user, disabled: true}]", 1)
	if withUser == string(b) {
		t.Fatal("testdata/jetway.yaml changed: no contoso-support app to put the override under")
	}
	if err := os.WriteFile(seed, []byte(withUser), 0o644); err != nil {
		t.Fatal(err)
	}
	first := w.runCommand(env, "config", "import", seed)
	if !strings.Contains(first, "0 replaced, 0 unchanged") || strings.Contains(first, " 0 created") {
		t.Fatalf("first import: %s", first)
	}
	if again := w.runCommand(env, "config", "import", seed); !strings.Contains(again, " 0 created, 0 replaced") {
		t.Fatalf("second import wrote something: %s", again)
	}
	out := dir + "/export.yaml"
	w.runCommand(env, "config", "export", "--out", out)
	exported, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(exported), "blocked-user") {
		t.Fatalf("the export lost the user override:\n%s", exported)
	}
	if re := w.runCommand(env, "config", "import", out); !strings.Contains(re, " 0 created, 0 replaced") {
		t.Fatalf("importing the export wrote something: %s", re)
	}
	// A server on the table refuses the disabled user and serves others.
	g := w.start(env)
	c := w.dial(g, "blocked-user", nil)
	_, err = waitCall(t, mustSend(t, c, ask("am I blocked?")), 20*time.Second)
	if e, ok := err.(*client.Error); !ok || e.Code != "forbidden" {
		t.Fatalf("the imported disabled user: %v, want forbidden", err)
	}
	if _, err := waitCall(t, mustSend(t, w.dial(g, "someone-else", nil), ask("hello")), 20*time.Second); err != nil {
		t.Fatalf("another user: %v", err)
	}
}
