package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jetway-gateway/jetway/internal/gatewaytest"
)

// recipeDocs are the files whose marked blocks TestRecipes runs.
var recipeDocs = []string{"../../README.md", "../../docs/anthropic.md", "../../docs/responses.md"}

// recipeClientTimeout bounds one recipe's client block. Claude Code on a
// busy 2-core machine starts in seconds; a refused token makes it retry for
// minutes, which this cuts short with the output so far.
const recipeClientTimeout = 3 * time.Minute

// recipeBlock is one fenced block marked `recipe=NAME` in its info string:
// `file=PATH` (written, `~/` under the recipe's HOME; `mode=0755` makes it
// executable), `role=gateway` (one shell line that starts the gateway) or
// `role=client` (a shell script run once the gateway listens).
type recipeBlock struct {
	Doc, Recipe, File, Role string
	Mode                    fs.FileMode
	Line                    int
	Text                    string
}

var fenceOpen = regexp.MustCompile("^( *)```(\\S*)(.*)$")

// extractRecipes returns the marked blocks of a Markdown file, by recipe
// name, in the order they appear.
func extractRecipes(t *testing.T, doc string) map[string][]recipeBlock {
	t.Helper()
	data, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]recipeBlock{}
	lines := strings.Split(string(data), "\n")
	for i := 0; i < len(lines); i++ {
		m := fenceOpen.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		indent := m[1]
		attrs := map[string]string{}
		for _, f := range strings.Fields(m[3]) {
			if k, v, ok := strings.Cut(f, "="); ok {
				attrs[k] = v
			}
		}
		var body []string
		start := i + 1
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			body = append(body, strings.TrimPrefix(lines[i], indent))
		}
		name := attrs["recipe"]
		if name == "" {
			continue
		}
		b := recipeBlock{Doc: filepath.Base(doc), Recipe: name, File: attrs["file"], Role: attrs["role"], Mode: 0o644,
			Line: start, Text: strings.Join(body, "\n") + "\n"}
		if mode := attrs["mode"]; mode != "" {
			n, err := strconv.ParseUint(mode, 8, 32)
			if err != nil {
				t.Fatalf("%s:%d: mode=%s: %v", doc, start, mode, err)
			}
			b.Mode = fs.FileMode(n)
		}
		if (b.File == "") == (b.Role == "") {
			t.Fatalf("%s:%d: a recipe block needs file= or role=, not both", doc, start)
		}
		out[name] = append(out[name], b)
	}
	return out
}

// TestRecipes runs every recipe marked in README.md and docs/ as written:
// its files under a temporary HOME, its gateway line as a real gateway
// process (listening on a free port: the test's only change is the address
// 127.0.0.1:8080 in the client block and files, made the gateway's), and its client
// block with every proxy variable at a recording proxy, so that a client
// reaching for any address but the gateway's fails the test.
func TestRecipes(t *testing.T) {
	recipes := map[string][]recipeBlock{}
	for _, doc := range recipeDocs {
		for name, blocks := range extractRecipes(t, doc) {
			recipes[name] = append(recipes[name], blocks...)
		}
	}
	if len(recipes["claude-code"]) == 0 {
		t.Fatal("docs/anthropic.md has no claude-code recipe")
	}
	names := make([]string, 0, len(recipes))
	for name := range recipes {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		t.Run(name, func(t *testing.T) { runRecipe(t, recipes[name]) })
	}
}

func runRecipe(t *testing.T, blocks []recipeBlock) {
	bin := gatewaytest.Binary(t)
	modules, err := filepath.Abs("../../node_modules/.bin")
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	if err := os.MkdirAll(filepath.Join(home, "tmp"), 0o755); err != nil {
		t.Fatal(err)
	}
	proxy := newRecordingProxy(t)
	env := map[string]string{
		"HOME":   home,
		"TMPDIR": filepath.Join(home, "tmp"),
		"PATH":   filepath.Dir(bin) + string(os.PathListSeparator) + modules + string(os.PathListSeparator) + os.Getenv("PATH"),
		"LANG":   "C.UTF-8",
		// The AWS SDK must not look for credentials on the network.
		"AWS_EC2_METADATA_DISABLED": "true",
		"NO_PROXY":                  "127.0.0.1,localhost",
		"no_proxy":                  "127.0.0.1,localhost",
	}
	for _, k := range []string{"HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "https_proxy", "http_proxy", "all_proxy"} {
		env[k] = proxy.URL
	}

	var gatewayLine, client *recipeBlock
	for i := range blocks {
		b := &blocks[i]
		switch {
		case b.File != "":
			path := filepath.Join(home, strings.TrimPrefix(b.File, "~/"))
			if !strings.HasPrefix(b.File, "~/") {
				t.Fatalf("%s:%d: file=%s: recipe files are under ~/", b.Doc, b.Line, b.File)
			}
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(b.Text), b.Mode); err != nil {
				t.Fatal(err)
			}
		case b.Role == "gateway":
			gatewayLine = b
		case b.Role == "client":
			client = b
		default:
			t.Fatalf("%s:%d: unknown role=%s", b.Doc, b.Line, b.Role)
		}
	}
	if gatewayLine == nil || client == nil {
		t.Fatalf("recipe %s needs a role=gateway and a role=client block", blocks[0].Recipe)
	}

	gwEnv := map[string]string{"JETWAY_LISTEN": "127.0.0.1:0", "JETWAY_ADMIN_LISTEN": "127.0.0.1:0"}
	for k, v := range env {
		gwEnv[k] = v
	}
	log, addrs := startRecipeGateway(t, gatewayLine, gwEnv)

	addr := strings.NewReplacer("127.0.0.1:8080", addrs.Addr, "127.0.0.1:9090", addrs.Admin)
	// A client's file naming the gateway (Codex's config.toml) gets its address too.
	for _, b := range blocks {
		if b.File != "" && addr.Replace(b.Text) != b.Text {
			if err := os.WriteFile(filepath.Join(home, strings.TrimPrefix(b.File, "~/")), []byte(addr.Replace(b.Text)), b.Mode); err != nil {
				t.Fatal(err)
			}
		}
	}
	script := addr.Replace(client.Text)
	ctx, cancel := context.WithTimeout(context.Background(), recipeClientTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-e", "-c", script)
	cmd.Dir = home
	cmd.Env = environ(env)
	cmd.Stdin = strings.NewReader("")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	if err != nil {
		t.Fatalf("%s:%d: the client block failed: %v\nstdout:\n%s\nstderr:\n%s", client.Doc, client.Line, err, stdout.String(), stderr.String())
	}
	if strings.TrimSpace(stdout.String()) == "" {
		t.Fatalf("%s:%d: the client block printed no answer\nstderr:\n%s", client.Doc, client.Line, stderr.String())
	}
	t.Logf("the client printed: %s", strings.TrimSpace(stdout.String()))
	if seen := proxy.Seen(); len(seen) > 0 {
		t.Fatalf("the client reached for other addresses than the gateway's: %v", seen)
	}

	// The gateway answered the recipe's user for the recipe's app, priced.
	done := log.Await("completed", "", 1, 30*time.Second)
	if len(done) == 0 {
		t.Fatalf("no request completed on the gateway\n%s", log.Excerpt())
	}
	for _, l := range done {
		if l["user"] == "" || l["app"] == "" {
			t.Errorf("completed without user or app: %v", l)
		}
	}
	usageDir := filepath.Join(home, "jetway", "usage")
	if blocks[0].Recipe == "claude-code" {
		if done[0]["app"] != "developer-assistant" || done[0]["user"] != "alice" {
			t.Errorf("completed for %v of %v, want alice of developer-assistant", done[0]["user"], done[0]["app"])
		}
		if cost := awaitUsageCost(t, usageDir, 30*time.Second); cost <= 0 {
			t.Errorf("the usage records under %s cost %v: want the recipe's prices to apply", usageDir, cost)
		}
	}
}

// startRecipeGateway runs the recipe's gateway line with sh in its own
// process group (ended with SIGTERM, the drain, when the test ends) and
// waits for its listening line.
func startRecipeGateway(t *testing.T, b *recipeBlock, env map[string]string) (*gatewaytest.Log, gatewaytest.Addrs) {
	t.Helper()
	cmd := exec.Command("sh", "-e", "-c", b.Text)
	cmd.Dir = env["HOME"]
	cmd.Env = environ(env)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s:%d: %v", b.Doc, b.Line, err)
	}
	log := &gatewaytest.Log{}
	listening, ended := log.Watch(out)
	exited := make(chan struct{})
	go func() {
		<-ended
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(gatewaytest.StopTimeout):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
			t.Errorf("the recipe's gateway did not stop within %s of SIGTERM", gatewaytest.StopTimeout)
		}
		if t.Failed() {
			t.Logf("gateway log:\n%s", log.Excerpt())
		}
	})
	return log, gatewaytest.AwaitListening(t, b.Doc, listening, log)
}

// awaitUsageCost sums cost_usd over the usage records under dir once there
// are any, or returns 0 when within has passed.
func awaitUsageCost(t *testing.T, dir string, within time.Duration) float64 {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		var cost float64
		var records int
		_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return nil
			}
			f, err := os.Open(path)
			if err != nil {
				return nil
			}
			defer f.Close()
			sc := bufio.NewScanner(f)
			sc.Buffer(make([]byte, 1<<20), 1<<20)
			for sc.Scan() {
				var r struct {
					CostUSD float64 `json:"cost_usd"`
				}
				if json.Unmarshal(sc.Bytes(), &r) == nil {
					cost += r.CostUSD
					records++
				}
			}
			return nil
		})
		if records > 0 || time.Now().After(deadline) {
			return cost
		}
		time.Sleep(50 * time.Millisecond) // polling a directory: nothing to wait on
	}
}

// recordingProxy is where every proxy variable of a recipe points: it
// refuses every request and keeps the address asked for.
type recordingProxy struct {
	URL  string
	mu   sync.Mutex
	seen []string
}

func newRecordingProxy(t *testing.T) *recordingProxy {
	p := &recordingProxy{}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		p.seen = append(p.seen, fmt.Sprintf("%s %s", r.Method, r.Host))
		p.mu.Unlock()
		http.Error(w, "a recipe test reaches nothing but the gateway", http.StatusForbidden)
	}))
	t.Cleanup(ts.Close)
	p.URL = ts.URL
	return p
}

// Seen is every address asked for so far.
func (p *recordingProxy) Seen() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.seen...)
}

// environ is env as KEY=value pairs.
func environ(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	return out
}
