package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jetway-gateway/jetway/internal/mockmodel"
)

// responsesNodeKey is the fleet's reasoning key in the node tests (32
// bytes in base64): every server seals and opens reasoning alike, so a
// reasoning item passed back to another server is read.
const responsesNodeKey = "amV0d2F5LXJlc3BvbnNlcy1ub2RlLXRlc3Qta2V5ISE="

// TestResponsesNodeClient runs the official openai package (its HTTP
// client and its own Responses WebSocket client, ResponsesWS from
// openai/resources/responses/ws, which runs on `ws`) under node's test
// runner (testdata/responses/*.test.mjs) against three gateway processes
// on dynalite: servers 0 and 1 stay up, server 2 is SIGKILLed when a test
// asks. Node reaches the Go side through the AI SDK tests' control server
// (newAISDKControl): tokens, the /v1/ws answer to the same request,
// spending a quota on /v1/ws, the kill, the usage records.
func TestResponsesNodeClient(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node is required for the openai package tests (apt-get install nodejs npm; then make test-deps)")
	}
	for _, pkg := range []string{"openai", "ws"} {
		if _, err := os.Stat(filepath.Join("..", "..", "node_modules", pkg, "package.json")); err != nil {
			t.Fatalf("the npm package %s is missing: run `make test-deps` (npm ci) at the repository root", pkg)
		}
	}
	// JETWAY_RESPONSES_NODE_TESTS narrows the run to some files (a glob,
	// say "ws*") while working on them.
	pattern := "*.test.mjs"
	if p := os.Getenv("JETWAY_RESPONSES_NODE_TESTS"); p != "" {
		pattern = p
	}
	files, err := filepath.Glob(filepath.Join("testdata", "responses", pattern))
	if err != nil || len(files) == 0 {
		t.Fatalf("no test files in testdata/responses (%v)", err)
	}
	// 300 tokens at 10 ms: an answer streams for about 3 s, long enough to
	// cut, cancel or kill it mid-way on a busy machine.
	w := newWorld(t, mockmodel.Options{TTFT: time.Millisecond, PerToken: 10 * time.Millisecond})
	cl := w.cluster(3, map[string]string{"JETWAY_RESPONSES_REASONING_KEY": responsesNodeKey})
	ctl := newAISDKControl(t, w, cl)
	var urls []string
	for _, p := range cl.servers {
		urls = append(urls, "http://"+p.Addr+"/v1")
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
		"OPENAI_API_KEY=", "OPENAI_BASE_URL=", "OPENAI_ORG_ID=", "OPENAI_PROJECT_ID=",
		"JETWAY_TEST_RESPONSES_URLS="+strings.Join(urls, ","),
		"JETWAY_TEST_CONTROL="+ctl.srv.URL)
	out, err := cmd.CombinedOutput()
	pass, fail := tapCount(out, "pass"), tapCount(out, "fail")
	if err != nil || fail != 0 || pass == 0 {
		t.Fatalf("node --test: %v (pass %d, fail %d)\n%s", err, pass, fail, out)
	}
	if n := ctl.fetched.Load(); n != 0 {
		t.Fatalf("a gateway fetched a URL of a request %d times", n)
	}
	t.Logf("node --test: %d passed", pass)
}
