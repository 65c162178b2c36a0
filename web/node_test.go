package web

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// TestClientNode runs the jetway.js unit tests (web/test/*.test.mjs, Node's
// built-in test runner) against live gateways: A and B (B never sees A's
// requests, as another task without shared state), and C, which the drain
// test stops with SIGTERM.
func TestClientNode(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node is required for the jetway.js tests (apt-get install nodejs npm; then make test-deps)")
	}
	if _, err := os.Stat(filepath.Join("..", "node_modules", "ws", "package.json")); err != nil {
		t.Fatal("the npm package ws is missing: run `make test-deps` (npm ci) at the repository root")
	}
	files, err := filepath.Glob(filepath.Join("test", "*.test.mjs"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no test files in web/test (%v)", err)
	}
	a := startGateway(t, gatewayOpts{Name: "node-a"})
	b := startGateway(t, gatewayOpts{Name: "node-b"})
	c := startGateway(t, gatewayOpts{Name: "node-c"})

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	args := append([]string{"--test", "--test-reporter=tap", "--test-concurrency=4"}, files...)
	cmd := exec.CommandContext(ctx, node, args...)
	cmd.Env = append(os.Environ(),
		"JETWAY_TEST_A_WS="+a.WS(), "JETWAY_TEST_A_HTTP="+a.HTTP(),
		"JETWAY_TEST_B_WS="+b.WS(), "JETWAY_TEST_B_HTTP="+b.HTTP(),
		"JETWAY_TEST_C_WS="+c.WS(), "JETWAY_TEST_C_HTTP="+c.HTTP(),
		"JETWAY_TEST_C_PID="+strconv.Itoa(c.PID()))
	out, err := cmd.CombinedOutput()
	pass, fail := tapCount(out, "pass"), tapCount(out, "fail")
	if err != nil || fail != 0 || pass == 0 {
		t.Fatalf("node --test: %v (pass %d, fail %d)\n%s", err, pass, fail, out)
	}
	t.Logf("node --test: %d passed\n%s", pass, out)
	// The drain test stopped C: it must have drained and exited cleanly.
	c.waitExit(t, 30*time.Second)
}

// tapCount reads "# pass N" / "# fail N" from TAP output (-1 if absent).
func tapCount(out []byte, what string) int {
	m := regexp.MustCompile(`(?m)^# ` + what + ` (\d+)$`).FindSubmatch(out)
	if m == nil {
		return -1
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}
