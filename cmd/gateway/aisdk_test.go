package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jetway-gateway/jetway/client"
	"github.com/jetway-gateway/jetway/internal/mockmodel"
	"github.com/jetway-gateway/jetway/internal/telemetry"
)

// TestAISDKNodeClient runs the official `ai` package's WebSocketChatTransport
// (with `ws` as its WebSocket) and raw `ws` sockets under node's test runner
// (testdata/aisdk/*.test.mjs) against three gateway processes on dynalite:
// servers 0 and 1 stay up, server 2 is SIGKILLed when a test asks. Node
// reaches the Go side through a control server on 127.0.0.1 (aisdkControl):
// tokens, the /v1/ws answer to the same request, spending a quota on
// /v1/ws, the kill, the usage records, and a URL that must never be fetched.
func TestAISDKNodeClient(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node is required for the ai package tests (apt-get install nodejs npm; then make test-deps)")
	}
	for _, pkg := range []string{"ai", "ws"} {
		if _, err := os.Stat(filepath.Join("..", "..", "node_modules", pkg, "package.json")); err != nil {
			t.Fatalf("the npm package %s is missing: run `make test-deps` (npm ci) at the repository root", pkg)
		}
	}
	// JETWAY_AISDK_NODE_TESTS narrows the run to some files (a glob, say
	// "resume*") while working on them.
	pattern := "*.test.mjs"
	if p := os.Getenv("JETWAY_AISDK_NODE_TESTS"); p != "" {
		pattern = p
	}
	files, err := filepath.Glob(filepath.Join("testdata", "aisdk", pattern))
	if err != nil || len(files) == 0 {
		t.Fatalf("no test files in testdata/aisdk (%v)", err)
	}
	// 300 tokens at 10 ms: an answer streams for about 3 s, long enough to
	// cut, abort or kill it mid-way on a busy machine.
	w := newWorld(t, mockmodel.Options{TTFT: time.Millisecond, PerToken: 10 * time.Millisecond})
	cl := w.cluster(3, nil)
	ctl := newAISDKControl(t, w, cl)
	var urls []string
	for _, p := range cl.servers {
		urls = append(urls, "ws://"+p.Addr+"/v1/ai-sdk")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// --test-force-exit: a failed test can leave a socket open, which
	// would keep its file's process, and so the run, from ending.
	args := append([]string{"--test", "--test-force-exit", "--test-reporter=tap", "--test-concurrency=3"}, files...)
	cmd := exec.CommandContext(ctx, node, args...)
	// Nothing but the gateway and the control server: any proxied request
	// fails at once on a closed loopback port (REAL-CLIENTS.md).
	closed := "http://127.0.0.1:9"
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir(),
		"HTTP_PROXY="+closed, "HTTPS_PROXY="+closed, "ALL_PROXY="+closed,
		"http_proxy="+closed, "https_proxy="+closed, "all_proxy="+closed, "NO_PROXY=127.0.0.1,localhost", "no_proxy=127.0.0.1,localhost",
		"JETWAY_TEST_AISDK_URLS="+strings.Join(urls, ","),
		"JETWAY_TEST_CONTROL="+ctl.srv.URL)
	out, err := cmd.CombinedOutput()
	pass, fail := tapCount(out, "pass"), tapCount(out, "fail")
	if err != nil || fail != 0 || pass == 0 {
		t.Fatalf("node --test: %v (pass %d, fail %d)\n%s", err, pass, fail, out)
	}
	if n := ctl.fetched.Load(); n != 0 {
		t.Fatalf("a gateway fetched a file part's URL %d times", n)
	}
	t.Logf("node --test: %d passed", pass)
}

// aisdkControl is the Go side of the node tests.
type aisdkControl struct {
	srv     *httptest.Server
	fetched atomic.Int64 // requests to /never-fetch/
}

// aisdkApps are the apps the node tests sign in to, by short name.
var aisdkApps = map[string][2]string{
	"support": {"contoso", "contoso-support"}, // mock-a, no cache
	"dev":     {"contoso", "contoso-dev"},     // another app of the same tenant
	"agent":   {"contoso", "contoso-agent"},   // mock-tools, mock-reasoning
	"docs":    {"fabrikam", "fabrikam-docs"},  // 20,000 tokens an hour
}

func newAISDKControl(t *testing.T, w *world, cl *cluster) *aisdkControl {
	c := &aisdkControl{}
	mux := http.NewServeMux()
	app := func(r *http.Request) ([2]string, error) {
		a, ok := aisdkApps[r.URL.Query().Get("app")]
		if !ok {
			return a, fmt.Errorf("unknown app %q", r.URL.Query().Get("app"))
		}
		return a, nil
	}
	server := func(r *http.Request) (*proc, error) {
		i, err := strconv.Atoi(r.URL.Query().Get("server"))
		if err != nil || i < 0 || i >= len(cl.servers) {
			return nil, fmt.Errorf("server %q: not one of the %d", r.URL.Query().Get("server"), len(cl.servers))
		}
		return cl.servers[i], nil
	}
	// dial is a /v1/ws client of sub on app, on server.
	dial := func(ctx context.Context, r *http.Request) (*client.Client, error) {
		a, err := app(r)
		if err != nil {
			return nil, err
		}
		p, err := server(r)
		if err != nil {
			return nil, err
		}
		tok := w.token(r.URL.Query().Get("sub"), a[0], a[1], time.Hour)
		return client.Dial(ctx, client.Options{URLs: []string{p.URL()}, Token: func(context.Context) (string, error) { return tok, nil }})
	}
	handle := func(path string, f func(ctx context.Context, r *http.Request) (any, error)) {
		mux.HandleFunc(path, func(rw http.ResponseWriter, r *http.Request) {
			ctx, cancel := context.WithTimeout(r.Context(), 90*time.Second)
			defer cancel()
			v, err := f(ctx, r)
			if err != nil {
				http.Error(rw, err.Error(), http.StatusInternalServerError)
				return
			}
			rw.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(rw).Encode(v)
		})
	}

	// GET /token?sub&app&ttl_ms: a JWT of sub for the app.
	handle("/token", func(_ context.Context, r *http.Request) (any, error) {
		a, err := app(r)
		if err != nil {
			return nil, err
		}
		ttl := time.Hour
		if ms := r.URL.Query().Get("ttl_ms"); ms != "" {
			n, err := strconv.Atoi(ms)
			if err != nil {
				return nil, fmt.Errorf("ttl_ms: %w", err)
			}
			ttl = time.Duration(n) * time.Millisecond
		}
		return w.token(r.URL.Query().Get("sub"), a[0], a[1], ttl), nil
	})

	// POST /ws-answer?sub&app&server with {"prompt","model","tools","reasoning"}:
	// the /v1/ws done frame for the same request (the lookup tool when
	// tools), plus its reasoning text.
	handle("/ws-answer", func(ctx context.Context, r *http.Request) (any, error) {
		var body struct {
			Prompt    string `json:"prompt"`
			Model     string `json:"model"`
			Tools     bool   `json:"tools"`
			Reasoning int    `json:"reasoning"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			return nil, fmt.Errorf("body: %w", err)
		}
		c, err := dial(ctx, r)
		if err != nil {
			return nil, err
		}
		defer c.Close()
		req := ask(body.Prompt)
		req.Model = body.Model
		if body.Tools {
			req.Tools = []client.Tool{lookupTool}
		}
		if body.Reasoning > 0 {
			req.Reasoning = &client.Reasoning{BudgetTokens: body.Reasoning}
		}
		call, err := c.Send(ctx, req)
		if err != nil {
			return nil, err
		}
		done, err := call.Wait(ctx)
		if err != nil {
			return nil, fmt.Errorf("/v1/ws answer: %w", err)
		}
		return map[string]any{"done": done, "reasoning_text": done.ReasoningText()}, nil
	})

	// POST /spend?sub&app&server: uses the app's quota up on /v1/ws with
	// long prompts (about 4,800 tokens each) until it refuses one; answers
	// the refused prompt.
	handle("/spend", func(ctx context.Context, r *http.Request) (any, error) {
		c, err := dial(ctx, r)
		if err != nil {
			return nil, err
		}
		defer c.Close()
		long := strings.Repeat("spend the quota ", 1200)
		for i := range 20 {
			req := ask(long + strconv.Itoa(i))
			req.MaxTokens = 10
			call, err := c.Send(ctx, req)
			if err != nil {
				return nil, err
			}
			_, err = call.Wait(ctx)
			var pe *client.Error
			if errors.As(err, &pe) && pe.Code == "quota_exceeded" {
				return map[string]any{"answered": i, "refused_prompt": req.Messages[0].Content}, nil
			} else if err != nil {
				return nil, fmt.Errorf("spending on /v1/ws: %w", err)
			}
		}
		return nil, errors.New("/v1/ws never refused: the quota was not used up")
	})

	// POST /kill?server: SIGKILLs the server and waits for it to exit.
	handle("/kill", func(_ context.Context, r *http.Request) (any, error) {
		p, err := server(r)
		if err != nil {
			return nil, err
		}
		p.signal(syscall.SIGKILL)
		select {
		case <-p.p.Exited():
			return "killed", nil
		case <-time.After(20 * time.Second):
			return nil, errors.New("the server did not exit within 20s of SIGKILL")
		}
	})

	// GET /usage?user: every usage record of the user so far (the
	// servers write theirs every second).
	handle("/usage", func(_ context.Context, r *http.Request) (any, error) {
		recs, _, err := telemetry.ReadUsageDir(w.env["JETWAY_USAGE_DIR"])
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		out := []telemetry.UsageRecord{}
		for _, rec := range recs {
			if rec.User == r.URL.Query().Get("user") {
				out = append(out, rec)
			}
		}
		return out, nil
	})

	// /never-fetch/...: a file part's URL; a gateway must never ask for it.
	mux.HandleFunc("/never-fetch/", func(rw http.ResponseWriter, _ *http.Request) {
		c.fetched.Add(1)
		http.Error(rw, "a gateway must not fetch file URLs", http.StatusTeapot)
	})
	handle("/fetched", func(context.Context, *http.Request) (any, error) { return c.fetched.Load(), nil })

	c.srv = httptest.NewServer(mux)
	t.Cleanup(c.srv.Close)
	return c
}
