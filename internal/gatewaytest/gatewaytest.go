// Package gatewaytest builds the gateway binary and runs gateway processes
// for tests, as ECS runs tasks: the one place that starts a gateway, waits
// for its "listening" line and stops it when the test ends. Like
// dynalitetest it is imported by tests only.
package gatewaytest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// BinaryEnv names a gateway binary built elsewhere, used instead of building one.
const BinaryEnv = "JETWAY_TEST_GATEWAY"

// LogsEnv, when set, makes a failed test print each gateway's whole log
// instead of an excerpt.
const LogsEnv = "JETWAY_TEST_LOGS"

// ListenTimeout bounds how long a gateway may take to print "listening".
const ListenTimeout = 30 * time.Second

// StopTimeout bounds how long a gateway may drain after SIGTERM when its
// test ends; then it is killed and the test fails.
const StopTimeout = 25 * time.Second

// The binary is built once per test binary, the first time a test needs it.
var build struct {
	once sync.Once
	dir  string
	bin  string
	err  error
}

// Binary returns the gateway binary: $JETWAY_TEST_GATEWAY, else
// ./cmd/gateway built once with the flags of `make build` (so under `make
// test` the build cache already holds every package).
func Binary(tb testing.TB) string {
	tb.Helper()
	build.once.Do(func() {
		if prebuilt := os.Getenv(BinaryEnv); prebuilt != "" {
			build.bin = prebuilt
			return
		}
		build.dir, build.err = os.MkdirTemp("", "jetway-gateway-bin-")
		if build.err != nil {
			return
		}
		build.bin = filepath.Join(build.dir, "gateway")
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", build.bin,
			"github.com/jetway-gateway/jetway/cmd/gateway")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			build.err = fmt.Errorf("go build ./cmd/gateway: %v\n%s", err, out)
		}
	})
	if build.err != nil {
		tb.Fatalf("gateway binary: %v", build.err)
	}
	return build.bin
}

// RemoveBinary deletes the binaries Binary and BinaryAt built; call it
// from TestMain after m.Run.
func RemoveBinary() {
	if build.dir != "" {
		_ = os.RemoveAll(build.dir)
	}
	releases.Lock()
	defer releases.Unlock()
	for _, r := range releases.built {
		_ = os.RemoveAll(r.dir)
	}
}

// releases are gateway binaries built from other commits, once each.
var releases struct {
	sync.Mutex
	built map[string]*release
}

type release struct {
	once sync.Once
	dir  string
	bin  string
	err  error
}

// BinaryAt returns the gateway binary of another commit of this
// repository (a rolling deploy's previous release): its tree, taken with
// git archive, built with the flags of `make build`. A commit the clone
// does not hold fails the test, saying so: the mixed-release tests need
// the repository's history, never a silent skip.
func BinaryAt(tb testing.TB, rev string) string {
	tb.Helper()
	releases.Lock()
	if releases.built == nil {
		releases.built = map[string]*release{}
	}
	r := releases.built[rev]
	if r == nil {
		r = &release{}
		releases.built[rev] = r
	}
	releases.Unlock()
	r.once.Do(func() { r.dir, r.bin, r.err = buildAt(rev) })
	if r.err != nil {
		tb.Fatalf("gateway binary of %s: %v", rev, r.err)
	}
	return r.bin
}

func buildAt(rev string) (dir, bin string, err error) {
	root, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return "", "", fmt.Errorf("git rev-parse --show-toplevel: %v (the test needs a git checkout)", err)
	}
	repo := strings.TrimSpace(string(root))
	if out, err := exec.Command("git", "-C", repo, "cat-file", "-e", rev+"^{commit}").CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("commit %s is not in %s (a shallow clone? fetch its history): %v %s", rev, repo, err, out)
	}
	dir, err = os.MkdirTemp("", "jetway-release-")
	if err != nil {
		return "", "", err
	}
	src := filepath.Join(dir, "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		return dir, "", err
	}
	tar := filepath.Join(dir, "src.tar")
	if out, err := exec.Command("git", "-C", repo, "archive", "--format=tar", "-o", tar, rev).CombinedOutput(); err != nil {
		return dir, "", fmt.Errorf("git archive %s: %v %s", rev, err, out)
	}
	if out, err := exec.Command("tar", "-xf", tar, "-C", src).CombinedOutput(); err != nil {
		return dir, "", fmt.Errorf("untar %s: %v %s", rev, err, out)
	}
	bin = filepath.Join(dir, "gateway")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, "./cmd/gateway")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return dir, "", fmt.Errorf("go build ./cmd/gateway at %s: %v\n%s", rev, err, out)
	}
	return dir, bin, nil
}

// Addrs are a gateway's listeners, from its "listening" line.
type Addrs struct {
	Addr  string // main listener host:port
	Admin string // admin listener host:port
}

// URL is the WebSocket endpoint.
func (a Addrs) URL() string { return "ws://" + a.Addr + "/v1/ws" }

// Log is a gateway's output, kept for assertions and failure messages.
type Log struct {
	mu    sync.Mutex
	raw   strings.Builder
	lines []map[string]any
}

func (l *Log) add(line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.raw.WriteString(line + "\n")
	var m map[string]any
	if json.Unmarshal([]byte(line), &m) == nil {
		l.lines = append(l.lines, m)
	}
}

// String is every line so far.
func (l *Log) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.raw.String()
}

// Find returns the JSON log lines with msg and, if requestID is not empty,
// that request_id.
func (l *Log) Find(msg, requestID string) []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, m := range l.lines {
		if m["msg"] == msg && (requestID == "" || m["request_id"] == requestID) {
			out = append(out, m)
		}
	}
	return out
}

// Await is Find once at least n lines match, or whatever matched when
// within has passed: the log is read from the process's output as it
// comes, so a line written just before a frame the test saw may not be
// read yet.
func (l *Log) Await(msg, requestID string, n int, within time.Duration) []map[string]any {
	deadline := time.Now().Add(within)
	for {
		found := l.Find(msg, requestID)
		if len(found) >= n || time.Now().After(deadline) {
			return found
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Excerpt is what to show of the log when a test fails: all of it with
// $JETWAY_TEST_LOGS set, else from a panic on, or the end.
func (l *Log) Excerpt() string {
	s := l.String()
	if os.Getenv(LogsEnv) != "" {
		return s
	}
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

// Watch reads a gateway's output into l, line by line, until r ends (a read
// error is kept as a last line). listening yields the addresses of the
// "listening" line and is closed when r ends; so is ended.
func (l *Log) Watch(r io.Reader) (listening <-chan Addrs, ended <-chan struct{}) {
	addrs := make(chan Addrs, 1)
	end := make(chan struct{})
	go func() {
		defer close(end)
		defer close(addrs)
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		sent := false
		for sc.Scan() {
			line := sc.Text()
			l.add(line)
			if !sent && strings.Contains(line, `"msg":"listening"`) {
				var m struct {
					Addr      string `json:"addr"`
					AdminAddr string `json:"admin_addr"`
				}
				_ = json.Unmarshal([]byte(line), &m)
				addrs <- Addrs{Addr: m.Addr, Admin: m.AdminAddr}
				sent = true
			}
		}
		if err := sc.Err(); err != nil {
			l.add("output ended: " + err.Error())
		}
	}()
	return addrs, end
}

// AwaitListening waits for the "listening" line that Watch reads. It fails
// tb if the output ends first or ListenTimeout passes.
func AwaitListening(tb testing.TB, name string, listening <-chan Addrs, l *Log) Addrs {
	tb.Helper()
	select {
	case a, ok := <-listening:
		if !ok {
			tb.Fatalf("gateway %s exited before listening\n%s", name, l.Excerpt())
		}
		return a
	case <-time.After(ListenTimeout):
		tb.Fatalf("gateway %s did not listen within %s\n%s", name, ListenTimeout, l.Excerpt())
	}
	return Addrs{}
}

// Options configure a gateway process.
type Options struct {
	Name   string            // in failure messages (default: the main address)
	Binary string            // the gateway binary to run (default: Binary's)
	Env    map[string]string // the process's whole environment; PATH is added when absent
	Args   []string
	// KillAtEnd ends the process with SIGKILL when the test ends, instead of
	// draining it (SIGTERM, up to StopTimeout).
	KillAtEnd bool
}

// Process is a gateway running as its own process.
type Process struct {
	Addrs
	Name   string
	Log    *Log
	cmd    *exec.Cmd
	exited chan struct{}
	err    error // after exited
}

// Start runs the gateway binary and waits for its "listening" line. It is
// stopped when the test ends (see Options.KillAtEnd).
func Start(tb testing.TB, o Options) *Process {
	tb.Helper()
	bin := o.Binary
	if bin == "" {
		bin = Binary(tb)
	}
	cmd := exec.Command(bin, o.Args...)
	cmd.Env = environ(o.Env)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start gateway %s: %v", o.Name, err)
	}
	p := &Process{Name: o.Name, Log: &Log{}, cmd: cmd, exited: make(chan struct{})}
	listening, ended := p.Log.Watch(stdout)
	go func() {
		<-ended // Wait closes stdout: only once all of it is read
		p.err = cmd.Wait()
		close(p.exited)
	}()
	tb.Cleanup(func() {
		if o.KillAtEnd {
			p.Signal(syscall.SIGKILL)
			<-p.exited
		} else {
			p.Stop(tb, StopTimeout)
		}
		if tb.Failed() {
			tb.Logf("gateway %s log:\n%s", p.Name, p.Log.Excerpt())
		}
	})
	p.Addrs = AwaitListening(tb, o.Name, listening, p.Log)
	if p.Name == "" {
		p.Name = p.Addr
	}
	return p
}

// environ is env as KEY=value pairs, with this process's PATH unless env sets one.
func environ(env map[string]string) []string {
	out := make([]string, 0, len(env)+1)
	if _, ok := env["PATH"]; !ok {
		out = append(out, "PATH="+os.Getenv("PATH"))
	}
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	return out
}

// PID is the process id.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Exited is closed when the process has ended.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Err is how the process ended (nil for exit code 0); valid after Exited.
func (p *Process) Err() error {
	<-p.exited
	return p.err
}

// Signal sends sig unless the process has ended.
func (p *Process) Signal(sig syscall.Signal) {
	select {
	case <-p.exited:
	default:
		_ = p.cmd.Process.Signal(sig) // it may have ended since: nothing to do then
	}
}

// Wait waits for the process to end and returns its exit code; it fails tb
// if that takes longer than within.
func (p *Process) Wait(tb testing.TB, within time.Duration) int {
	tb.Helper()
	select {
	case <-p.exited:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(within):
		tb.Fatalf("gateway %s did not exit within %s", p.Name, within)
		return -1
	}
}

// Stop sends SIGTERM (the gateway drains, then exits) and waits; after
// within it kills the process and fails tb. Stopping an ended process does
// nothing.
func (p *Process) Stop(tb testing.TB, within time.Duration) {
	tb.Helper()
	p.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(within):
		_ = p.cmd.Process.Kill()
		<-p.exited
		tb.Errorf("gateway %s did not stop within %s of SIGTERM", p.Name, within)
	}
}

// Run runs a gateway subcommand (for example `tables create`) with env and
// returns its output; it fails tb if the command fails.
func Run(tb testing.TB, env map[string]string, args ...string) string {
	tb.Helper()
	cmd := exec.Command(Binary(tb), args...)
	cmd.Env = environ(env)
	out, err := cmd.CombinedOutput()
	if err != nil {
		tb.Fatalf("gateway %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}
