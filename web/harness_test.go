package web

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jetway-gateway/jetway/client"
	"github.com/jetway-gateway/jetway/internal/auth"
	"github.com/jetway-gateway/jetway/internal/dynalitetest"
	"github.com/jetway-gateway/jetway/internal/gatewaytest"
)

// Every gateway of a test run shares one dev signing key (so a token from
// one gateway's /dev/token works on the others, as Cognito's would across
// tasks); it is made once, before the first gateway starts.
var devKey struct {
	once sync.Once
	dir  string
	err  error
}

// TestMain cleans up what the tests shared.
func TestMain(m *testing.M) {
	code := m.Run()
	closeBrowser()
	gatewaytest.RemoveBinary()
	if devKey.dir != "" {
		_ = os.RemoveAll(devKey.dir)
	}
	os.Exit(code)
}

// devKeyFile is the shared dev signing key's file.
func devKeyFile(t testing.TB) string {
	t.Helper()
	devKey.once.Do(func() {
		if devKey.dir, devKey.err = os.MkdirTemp("", "jetway-web-test-key-"); devKey.err != nil {
			return
		}
		// Create the key before any gateway starts, so parallel starts never race to create it.
		_, devKey.err = auth.LoadOrCreateDevIssuer(filepath.Join(devKey.dir, "dev-signing-key.pem"), "jetway-dev")
	})
	if devKey.err != nil {
		t.Fatalf("dev signing key: %v", devKey.err)
	}
	return filepath.Join(devKey.dir, "dev-signing-key.pem")
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
type gatewayProc struct{ *gatewaytest.Process }

// startGateway starts a gateway and waits for its "listening" line. It is
// drained (SIGTERM) and reaped when the test ends.
func startGateway(t *testing.T, o gatewayOpts) *gatewayProc {
	t.Helper()
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
		"HOME":                      t.TempDir(),
		"JETWAY_LISTEN":             "127.0.0.1:0",
		"JETWAY_ADMIN_LISTEN":       "127.0.0.1:0",
		"JETWAY_CONFIG":             cfg,
		"JETWAY_DEV_KEY_FILE":       devKeyFile(t),
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
	return &gatewayProc{gatewaytest.Start(t, gatewaytest.Options{Name: o.Name, Env: env})}
}

// WS is the WebSocket endpoint.
func (g *gatewayProc) WS() string { return g.URL() }

// HTTP is the page's base URL.
func (g *gatewayProc) HTTP() string { return "http://" + g.Addr }

// terminate sends SIGTERM (the gateway drains, then exits).
func (g *gatewayProc) terminate() { g.Signal(syscall.SIGTERM) }

// waitExit waits for the process to end cleanly.
func (g *gatewayProc) waitExit(t testing.TB, within time.Duration) {
	t.Helper()
	if code := g.Wait(t, within); code != 0 {
		t.Errorf("gateway %s exited with %v", g.Name, g.Err())
	}
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
	done, err := askGatewayDone(g, sub, client.Request{Messages: messages})
	if err != nil {
		return "", err
	}
	return done.Text, nil
}

// askGatewayDone sends req with the Go client as Contoso's support
// assistant and returns its done frame.
func askGatewayDone(g *gatewayProc, sub string, req client.Request) (*client.Done, error) {
	tok, err := devToken(g, sub, "contoso", "support-assistant", time.Hour)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, client.Options{URLs: []string{g.WS()},
		Token: func(context.Context) (string, error) { return tok, nil }})
	if err != nil {
		return nil, fmt.Errorf("reference client: %w", err)
	}
	defer c.Close()
	call, err := c.Send(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("reference send: %w", err)
	}
	done, err := call.Wait(ctx)
	if err != nil {
		return nil, fmt.Errorf("reference answer: %w", err)
	}
	return done, nil
}

// relay is a TCP relay in front of a gateway that the test can cut, as a
// network fault or a load balancer losing a connection would.
type relay struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	conns map[net.Conn]struct{}

	armed     atomic.Int64                  // cut once this many more bytes went server -> client (0: off)
	holdChunk atomic.Bool                   // hold once bytes holding a chunk frame went server -> client
	held      atomic.Pointer[chan struct{}] // non-nil: server -> client bytes wait until it is closed
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
	t.Cleanup(r.close)
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
			if held := r.held.Load(); held != nil {
				<-*held
			}
			if _, werr := c.Write(buf[:n]); werr != nil {
				return
			}
			if r.holdChunk.Load() && bytes.Contains(buf[:n], []byte(`{"type":"chunk"`)) && r.holdChunk.CompareAndSwap(true, false) {
				r.hold()
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

// hold stops forwarding server -> client bytes (the server goes on
// writing into the socket buffers) until the relay is closed.
func (r *relay) hold() {
	held := make(chan struct{})
	r.held.Store(&held)
}

// holdAfterChunk holds (see hold) right after the first bytes holding a
// chunk frame reached the client: the client has part of an answer, at
// any pace of the machine.
func (r *relay) holdAfterChunk() { r.holdChunk.Store(true) }

// close stops the relay as a dead server: nothing listens at its address any
// more and every connection is reset.
func (r *relay) close() {
	_ = r.ln.Close()
	// Cut first, then free a held copy: freed first, it could still hand
	// the client what the server wrote meanwhile (on a slow machine, the
	// whole answer) before the cut.
	r.cut()
	if held := r.held.Swap(nil); held != nil {
		close(*held)
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

// sharedTables makes the tables of a fleet on one dynalite and returns
// the options of a gateway named name on them (checkpoints and resume
// polls quick, the mock at 50 ms + 8 ms per token), dynalite's endpoint
// and the tables' prefix (the requests table is table+"-req").
func sharedTables(t *testing.T) (pace func(name string) gatewayOpts, endpoint, table string) {
	t.Helper()
	endpoint = dynalitetest.Start(t)
	table = dynalitetest.TableName(t)
	env := map[string]string{"AWS_ENDPOINT_URL_DYNAMODB": endpoint, "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
		"AWS_REGION": dynalitetest.Region, "JETWAY_QUOTA_TABLE": table, "JETWAY_REQUESTS_TABLE": table + "-req", "JETWAY_MEMBERS_TABLE": table + "-members",
		"JETWAY_CHECKPOINT_INTERVAL": "300ms", "JETWAY_RESUME_POLL_INTERVAL": "100ms"}
	gatewaytest.Run(t, env, "tables", "create")
	return func(name string) gatewayOpts {
		return gatewayOpts{Name: name, TTFT: 50 * time.Millisecond, PerToken: 8 * time.Millisecond, Env: env}
	}, endpoint, table
}
