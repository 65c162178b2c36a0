package main

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jetway-gateway/jetway/client"
)

// TestDevModeEndToEnd is the README's first command: no AWS account, the
// in-process dev issuer and mock Bedrock; a token from `gateway token`
// opens a socket and a request streams its 300 tokens in order; the
// support app's default model (mock-markdown) answers in Markdown.
func TestDevModeEndToEnd(t *testing.T) {
	home := t.TempDir()
	env := map[string]string{"HOME": home, "JETWAY_LISTEN": "127.0.0.1:0", "JETWAY_ADMIN_LISTEN": "127.0.0.1:0",
		"JETWAY_MOCK_TTFT": "5ms", "JETWAY_MOCK_PER_TOKEN": "1ms", "JETWAY_USAGE_DIR": t.TempDir(), "JETWAY_DRAIN_TIMEOUT": "5s"}
	w := &world{t: t, env: env}
	g := w.start(nil)
	var out bytes.Buffer
	if err := run(context.Background(), []string{"token", "--sub", "alice", "--tenant", "contoso", "--app", "support-assistant"},
		func(k string) string { return env[k] }, &out); err != nil {
		t.Fatalf("gateway token: %v", err)
	}
	tok := strings.TrimSpace(out.String())
	c, err := client.Dial(context.Background(), client.Options{URLs: []string{g.URL()},
		Token: func(context.Context) (string, error) { return tok, nil }})
	if err != nil {
		t.Fatalf("dial with a dev token: %v", err)
	}
	defer c.Close()
	if r := c.Ready(); r.User != "alice" || r.Tenant != "contoso" || r.App != "support-assistant" {
		t.Fatalf("ready %+v", r)
	}
	var seqs []int
	req := ask("hello from dev mode")
	req.Model = "mock-a"
	req.OnChunk = func(seq int, _ string) { seqs = append(seqs, seq) }
	call, err := c.Send(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	done, err := waitCall(t, call, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if done.Chunks != 300 || len(seqs) != 300 || seqs[299] != 300 || done.Text != call.Text() ||
		done.Text != expected("mock-a", "hello from dev mode", 300) {
		t.Fatalf("dev mode answer: %d chunks", done.Chunks)
	}
	// The support app's default model answers in Markdown (the demo page shows it).
	md, err := c.Send(context.Background(), ask("Where is gate B12?"))
	if err != nil {
		t.Fatal(err)
	}
	if d, err := waitCall(t, md, 30*time.Second); err != nil || d.Model != "mock-markdown" ||
		d.Text != expected("mock-markdown", "Where is gate B12?", 1000) || !strings.HasPrefix(d.Text, "## ") {
		t.Fatalf("default model in dev mode: %+v, %v", d, err)
	}
	// The embedded defaults let the support app try tools and reasoning.
	tool := ask("What time is it?")
	tool.Model, tool.Tools = "mock-tools", []client.Tool{{Name: "clock", Description: "The time", InputSchema: []byte(`{"type":"object"}`)}}
	think := ask("Why is the sky blue?")
	think.Model, think.Reasoning = "mock-reasoning", &client.Reasoning{BudgetTokens: 1024}
	for _, r := range []client.Request{tool, think} {
		call, err := c.Send(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		d, err := waitCall(t, call, 30*time.Second)
		if err != nil || d.Model != r.Model || len(d.Blocks) < 2 {
			t.Fatalf("%s in dev mode: %+v, %v", r.Model, d, err)
		}
	}
	if !strings.Contains(g.logs.String(), `"dev_mode":true`) {
		t.Fatal("not in dev mode")
	}
	// The demo page is served in dev mode, at the address the log gives.
	page := g.logs.Await("demo_page", "", 1, 10*time.Second)
	if len(page) != 1 || page[0]["url"] != "http://"+g.Addr+"/" {
		t.Fatalf("demo_page log lines %v, want one with url http://%s/", page, g.Addr)
	}
	resp, err := http.Get(page[0]["url"].(string))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("the demo page: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
}

func TestDevModeRefusesRemoteListen(t *testing.T) {
	env := map[string]string{"HOME": t.TempDir(), "JETWAY_LISTEN": "0.0.0.0:0", "JETWAY_ADMIN_LISTEN": "127.0.0.1:0"}
	err := run(context.Background(), nil, func(k string) string { return env[k] }, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "non-loopback") {
		t.Fatalf("dev mode on 0.0.0.0: %v, want a refusal", err)
	}
	for _, bad := range []map[string]string{{"JETWAY_HEARTBEAT": "soon"}, {"JETWAY_MAX_INFLIGHT": "-3"}, {"JETWAY_EMF": "loud"}} {
		bad["HOME"] = t.TempDir()
		if err := run(context.Background(), nil, func(k string) string { return bad[k] }, &bytes.Buffer{}); err == nil {
			t.Errorf("settings %v accepted", bad)
		}
	}
	env = map[string]string{"HOME": t.TempDir(), "JETWAY_CONFIG": "testdata/missing.yaml"}
	if err := run(context.Background(), nil, func(k string) string { return env[k] }, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("a missing tenants file: %v", err)
	}
}
