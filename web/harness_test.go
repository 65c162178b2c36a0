package web

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jetway-gateway/jetway/client"
	"github.com/jetway-gateway/jetway/internal/auth"
)

// The gateway binary is built once per test run, the first time a test
// needs it, and shared with the dev signing key every gateway uses (so a
// token from one gateway's /dev/token works on the others, as Cognito's
// would across tasks).
var harness struct {
	once   sync.Once
	dir    string
	bin    string
	keyDir string
	err    error
}

// TestMain cleans up what the tests shared; since Go 1.15 returning exits
// with m.Run's code.
func TestMain(m *testing.M) {
	m.Run()
	closeBrowser()
	if harness.dir != "" {
		_ = os.RemoveAll(harness.dir)
	}
}

// gatewayBinary builds ./cmd/gateway (once).
func gatewayBinary(t testing.TB) string {
	t.Helper()
	harness.once.Do(func() {
		harness.dir, harness.err = os.MkdirTemp("", "jetway-web-test-")
		if harness.err != nil {
			return
		}
		harness.bin = filepath.Join(harness.dir, "gateway")
		if prebuilt := os.Getenv("JETWAY_WEB_TEST_GATEWAY"); prebuilt != "" {
			harness.bin = prebuilt // a gateway binary built elsewhere (see web/README.md)
		} else {
			// The flags of `make build`: under `make test` the build cache already holds every package.
			cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", harness.bin, "github.com/jetway-gateway/jetway/cmd/gateway")
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
			if out, err := cmd.CombinedOutput(); err != nil {
				harness.err = fmt.Errorf("go build ./cmd/gateway: %v\n%s", err, out)
				return
			}
		}
		harness.keyDir = filepath.Join(harness.dir, "key")
		// Create the key before any gateway starts, so parallel starts never race to create it.
		_, harness.err = auth.LoadOrCreateDevIssuer(filepath.Join(harness.keyDir, "dev-signing-key.pem"), "jetway-dev")
	})
	if harness.err != nil {
		t.Fatalf("gateway binary: %v", harness.err)
	}
	return harness.bin
}

// gatewayOpts configure one gateway process.
type gatewayOpts struct {
	Name     string            // JETWAY_SERVER_ID
	TTFT     time.Duration     // mock time to first token (default 30ms)
	PerToken time.Duration     // mock time per token (default 3ms)
	Env      map[string]string // more settings
}

// gatewayProc is a gateway running as its own process, in dev mode with the
// in-process mock model.
type gatewayProc struct {
	Name  string
	Addr  string // main listener host:port
	Admin string
	cmd   *exec.Cmd
	done  chan struct{}
	err   error // after done
	logMu sync.Mutex
	log   bytes.Buffer
}

// startGateway starts a gateway and waits for its "listening" line. It is
// drained (SIGTERM) and reaped when the test ends.
func startGateway(t *testing.T, o gatewayOpts) *gatewayProc {
	t.Helper()
	bin := gatewayBinary(t)
	if o.TTFT == 0 {
		o.TTFT = 30 * time.Millisecond
	}
	if o.PerToken == 0 {
		o.PerToken = 3 * time.Millisecond
	}
	cfg, err := filepath.Abs("testdata/jetway.yaml")
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"PATH":                      os.Getenv("PATH"),
		"HOME":                      t.TempDir(),
		"JETWAY_LISTEN":             "127.0.0.1:0",
		"JETWAY_ADMIN_LISTEN":       "127.0.0.1:0",
		"JETWAY_CONFIG":             cfg,
		"JETWAY_DEV_KEY_FILE":       filepath.Join(harness.keyDir, "dev-signing-key.pem"),
		"JETWAY_MOCK_TTFT":          o.TTFT.String(),
		"JETWAY_MOCK_PER_TOKEN":     o.PerToken.String(),
		"JETWAY_USAGE_DIR":          t.TempDir(),
		"JETWAY_SERVER_ID":          o.Name,
		"JETWAY_DRAIN_TIMEOUT":      "20s",
		"JETWAY_LOG_LEVEL":          "info",
		"AWS_REGION":                "us-east-1",
		"AWS_EC2_METADATA_DISABLED": "true",
	}
	for k, v := range o.Env {
		env[k] = v
	}
	g := &gatewayProc{Name: o.Name, done: make(chan struct{})}
	g.cmd = exec.Command(bin)
	for k, v := range env {
		g.cmd.Env = append(g.cmd.Env, k+"="+v)
	}
	stdout, err := g.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	g.cmd.Stderr = &lockedWriter{mu: &g.logMu, w: &g.log}
	if err := g.cmd.Start(); err != nil {
		t.Fatalf("start gateway %s: %v", o.Name, err)
	}
	listening := make(chan [2]string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			g.logMu.Lock()
			g.log.WriteString(line + "\n")
			g.logMu.Unlock()
			if strings.Contains(line, `"msg":"listening"`) {
				var m struct {
					Addr      string `json:"addr"`
					AdminAddr string `json:"admin_addr"`
				}
				_ = json.Unmarshal([]byte(line), &m)
				listening <- [2]string{m.Addr, m.AdminAddr}
			}
		}
		g.err = g.cmd.Wait()
		close(g.done)
	}()
	t.Cleanup(func() {
		g.stop(t)
		if t.Failed() {
			t.Logf("gateway %s log:\n%s", g.Name, excerpt(g.logs()))
		}
	})
	select {
	case a := <-listening:
		g.Addr, g.Admin = a[0], a[1]
	case <-g.done:
		t.Fatalf("gateway %s exited before listening: %v\n%s", o.Name, g.err, g.logs())
	case <-time.After(20 * time.Second):
		t.Fatalf("gateway %s did not listen within 20s\n%s", o.Name, g.logs())
	}
	return g
}

// WS is the WebSocket endpoint.
func (g *gatewayProc) WS() string { return "ws://" + g.Addr + "/v1/ws" }

// HTTP is the page's base URL.
func (g *gatewayProc) HTTP() string { return "http://" + g.Addr }

// PID is the process id.
func (g *gatewayProc) PID() int { return g.cmd.Process.Pid }

func (g *gatewayProc) logs() string {
	g.logMu.Lock()
	defer g.logMu.Unlock()
	return g.log.String()
}

// terminate sends SIGTERM (the gateway drains, then exits).
func (g *gatewayProc) terminate(t testing.TB) {
	t.Helper()
	if err := g.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Fatalf("SIGTERM gateway %s: %v", g.Name, err)
	}
}

// waitExit waits for the process to end.
func (g *gatewayProc) waitExit(t testing.TB, within time.Duration) {
	t.Helper()
	select {
	case <-g.done:
		if g.err != nil {
			t.Errorf("gateway %s exited with %v", g.Name, g.err)
		}
	case <-time.After(within):
		t.Fatalf("gateway %s still running after %v", g.Name, within)
	}
}

func (g *gatewayProc) stop(t testing.TB) {
	select {
	case <-g.done:
		return
	default:
	}
	_ = g.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-g.done:
	case <-time.After(25 * time.Second):
		_ = g.cmd.Process.Kill()
		<-g.done
		t.Errorf("gateway %s did not stop within 25s of SIGTERM", g.Name)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// excerpt is what to show of a gateway log: from a panic on, or the end.
func excerpt(s string) string {
	if i := strings.Index(s, "panic:"); i >= 0 {
		s = s[i:]
		if len(s) > 4000 {
			s = s[:4000] + "..."
		}
		return s
	}
	if len(s) > 6000 {
		return "..." + s[len(s)-6000:]
	}
	return s
}

// devToken mints a token at the gateway's POST /dev/token, as the page does.
func devToken(g *gatewayProc, sub, tenant, app string, ttl time.Duration) (string, error) {
	body, _ := json.Marshal(map[string]any{"sub": sub, "tenant": tenant, "app": app, "ttl_s": int(ttl / time.Second)})
	resp, err := http.Post(g.HTTP()+"/dev/token", "application/json", bytes.NewReader(body))
	if err != nil {
		return "", fmt.Errorf("dev token: %w", err)
	}
	defer resp.Body.Close()
	var out struct {
		Token string `json:"token"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK || out.Token == "" {
		return "", fmt.Errorf("dev token: status %d, decode error %v", resp.StatusCode, err)
	}
	return out.Token, nil
}

// askGateway asks the gateway directly with the Go client (Contoso's
// support assistant): the answer the page must show for the same
// conversation, the mock model being deterministic.
func askGateway(g *gatewayProc, sub string, messages []client.Message) (string, error) {
	tok, err := devToken(g, sub, "contoso", "support-assistant", time.Hour)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, client.Options{URLs: []string{g.WS()},
		Token: func(context.Context) (string, error) { return tok, nil }})
	if err != nil {
		return "", fmt.Errorf("reference client: %w", err)
	}
	defer c.Close()
	call, err := c.Send(ctx, client.Request{Messages: messages})
	if err != nil {
		return "", fmt.Errorf("reference send: %w", err)
	}
	done, err := call.Wait(ctx)
	if err != nil {
		return "", fmt.Errorf("reference answer: %w", err)
	}
	return done.Text, nil
}

// relay is a TCP relay in front of a gateway that the test can cut, as a
// network fault or a load balancer losing a connection would.
type relay struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	conns map[net.Conn]struct{}

	armed     atomic.Int64 // cut once this many more bytes went server -> client (0: off)
	forwarded atomic.Int64
	cuts      atomic.Int64
	accepted  atomic.Int64
}

func startRelay(t *testing.T, target string) *relay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &relay{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	go r.serve()
	t.Cleanup(func() {
		_ = ln.Close()
		r.cut()
	})
	return r
}

// WS is the relay's WebSocket endpoint.
func (r *relay) WS() string { return "ws://" + r.ln.Addr().String() + "/v1/ws" }

func (r *relay) serve() {
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		r.accepted.Add(1)
		up, err := net.Dial("tcp", r.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		r.mu.Lock()
		r.conns[c], r.conns[up] = struct{}{}, struct{}{}
		r.mu.Unlock()
		go func() { _, _ = io.Copy(up, c); r.drop(c, up) }()
		go func() { r.down(c, up); r.drop(c, up) }()
	}
}

// down copies server -> client, cutting everything once the armed byte count is reached.
func (r *relay) down(c, up net.Conn) {
	buf := make([]byte, 4096)
	for {
		n, err := up.Read(buf)
		if n > 0 {
			if _, werr := c.Write(buf[:n]); werr != nil {
				return
			}
			total := r.forwarded.Add(int64(n))
			if limit := r.armed.Load(); limit > 0 && total >= limit && r.armed.CompareAndSwap(limit, 0) {
				r.cuts.Add(1)
				r.cut()
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// cutAfter arms a cut of every connection once n more bytes went to clients.
func (r *relay) cutAfter(n int64) { r.armed.Store(r.forwarded.Load() + n) }

// cut closes every relayed connection at once, without a WebSocket close.
func (r *relay) cut() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for c := range r.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // RST, like a dead middlebox
		}
		_ = c.Close()
		delete(r.conns, c)
	}
}

func (r *relay) drop(cs ...net.Conn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range cs {
		_ = c.Close()
		delete(r.conns, c)
	}
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
