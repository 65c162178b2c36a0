package main

import (
	"context"
	"fmt"
	"io"
	"net/http/httptest"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetway-gateway/jetway/client"
	"github.com/jetway-gateway/jetway/internal/auth/authtest"
	"github.com/jetway-gateway/jetway/internal/gatewaytest"
	"github.com/jetway-gateway/jetway/internal/mockmodel"
)

// world is one test's real parts: a mock Bedrock endpoint, a local Cognito
// issuer, and gateways started through run() as `go run ./cmd/gateway` would.
type world struct {
	t      *testing.T
	mock   *mockmodel.Server
	mockTS *httptest.Server
	issuer *authtest.Issuer
	env    map[string]string
}

// newWorld starts the mock model at the given pace and the issuer.
func newWorld(t *testing.T, pace mockmodel.Options) *world {
	t.Helper()
	w := &world{t: t, issuer: authtest.NewIssuer(t)}
	w.mock = mockmodel.New(pace)
	w.mockTS = httptest.NewServer(w.mock)
	t.Cleanup(w.mockTS.Close)
	cfg, err := filepath.Abs("testdata/jetway.yaml")
	if err != nil {
		t.Fatal(err)
	}
	w.env = map[string]string{
		"JETWAY_LISTEN":                    "127.0.0.1:0",
		"JETWAY_ADMIN_LISTEN":              "127.0.0.1:0",
		"JETWAY_CONFIG":                    cfg,
		"JETWAY_AUTH_ISSUER":               w.issuer.URL,
		"JETWAY_LOG_LEVEL":                 "info",
		"JETWAY_DRAIN_TIMEOUT":             "10s",
		"JETWAY_USAGE_DIR":                 t.TempDir(),
		"AWS_REGION":                       "us-east-1",
		"AWS_ACCESS_KEY_ID":                "test",
		"AWS_SECRET_ACCESS_KEY":            "test",
		"AWS_ENDPOINT_URL_BEDROCK_RUNTIME": w.mockTS.URL,
		"AWS_EC2_METADATA_DISABLED":        "true",
		"HOME":                             t.TempDir(),
	}
	return w
}

// gw is a running gateway.
type gw struct {
	Addr, Admin string
	cancel      context.CancelFunc
	done        chan error
	logs        *gatewaytest.Log
	stopOnce    sync.Once
}

// start runs a gateway with the world's settings plus overrides.
func (w *world) start(overrides map[string]string) *gw {
	w.t.Helper()
	env := w.merged(overrides)
	getenv := func(k string) string { return env[k] }
	// The AWS SDK reads its own variables from the process environment.
	for k, v := range env {
		if strings.HasPrefix(k, "AWS_") {
			w.t.Setenv(k, v)
		}
	}
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	g := &gw{cancel: cancel, done: make(chan error, 1), logs: &gatewaytest.Log{}}
	go func() {
		err := run(ctx, nil, getenv, pw)
		_ = pw.CloseWithError(err) // the log's last line says how run ended
		g.done <- err
	}()
	listening, _ := g.logs.Watch(pr)
	w.t.Cleanup(func() {
		g.stop(w.t)
		if w.t.Failed() {
			w.t.Logf("gateway logs:\n%s", g.logs.Excerpt())
		}
	})
	a := gatewaytest.AwaitListening(w.t, "in-process", listening, g.logs)
	g.Addr, g.Admin = a.Addr, a.Admin
	return g
}

// merged is the world's settings with overrides.
func (w *world) merged(overrides map[string]string) map[string]string {
	env := map[string]string{}
	for k, v := range w.env {
		env[k] = v
	}
	for k, v := range overrides {
		env[k] = v
	}
	// Servers sharing request records are a fleet: they need its members
	// table, one per requests table (so per test).
	if t := env["JETWAY_REQUESTS_TABLE"]; t != "" && env["JETWAY_MEMBERS_TABLE"] == "" {
		env["JETWAY_MEMBERS_TABLE"] = t + "-members"
	}
	return env
}

// stop drains the gateway (as SIGTERM does) and waits for it to exit.
func (g *gw) stop(t testing.TB) {
	g.stopOnce.Do(func() {
		g.cancel()
		select {
		case err := <-g.done:
			if err != nil {
				t.Errorf("gateway exited with %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("gateway did not stop within 30s")
		}
	})
}

// URL is the WebSocket endpoint.
func (g *gw) URL() string { return "ws://" + g.Addr + "/v1/ws" }

// token mints a Cognito-shaped access token for the user of an app client.
func (w *world) token(sub, tenant, clientID string, ttl time.Duration) string {
	now := time.Now()
	return w.issuer.Token(w.t, authtest.Claims{Subject: sub, Tenant: tenant, ClientID: clientID,
		IssuedAt: now, ExpiresAt: now.Add(ttl)})
}

// dial connects a client for sub on Contoso's support assistant.
func (w *world) dial(g *gw, sub string, mod func(*client.Options)) *client.Client {
	w.t.Helper()
	tok := w.token(sub, "contoso", "contoso-support", time.Hour)
	o := client.Options{URLs: []string{g.URL()}, Token: func(context.Context) (string, error) { return tok, nil }}
	if mod != nil {
		mod(&o)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, o)
	if err != nil {
		w.t.Fatalf("dial: %v", err)
	}
	w.t.Cleanup(func() { _ = c.Close() })
	return c
}

// expected is the mock's answer for a one-message prompt.
func expected(model, prompt string, n int) string {
	return strings.Join(mockmodel.Tokens(model, "", []string{prompt}, n), "")
}

func ask(prompt string) client.Request {
	return client.Request{Messages: []client.Message{{Role: "user", Content: prompt}}}
}

func waitCall(t testing.TB, call *client.Call, d time.Duration) (*client.Done, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	done, err := call.Wait(ctx)
	if ctx.Err() != nil {
		t.Fatalf("request %s never finished within %s", call.ID, d)
	}
	return done, err
}

func fastPace() mockmodel.Options {
	return mockmodel.Options{TTFT: time.Millisecond, PerToken: 200 * time.Microsecond}
}

var _ = fmt.Sprint

type mockmodelOptions = mockmodel.Options

// pct is the p-th percentile of ds (nearest rank).
func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := (len(s)*p + 99) / 100
	if i < 1 {
		i = 1
	}
	return s[i-1]
}

// resumeLatency measures a resume: from the drop to the new connection's
// ready, and from there to the first chunk it delivers.
type resumeLatency struct {
	mu                     sync.Mutex
	drop, connected, first time.Time
}

func (l *resumeLatency) dropped() { l.mu.Lock(); l.drop = time.Now(); l.mu.Unlock() }

func (l *resumeLatency) state(s string, _ error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s == "connected" && !l.drop.IsZero() && l.connected.IsZero() {
		l.connected = time.Now()
	}
}

func (l *resumeLatency) chunk() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.connected.IsZero() && l.first.IsZero() {
		l.first = time.Now()
	}
}

func (l *resumeLatency) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return fmt.Sprintf("reconnected %s after the drop; first resumed chunk %s after that",
		l.connected.Sub(l.drop), l.first.Sub(l.connected))
}
