package main

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The multi-server tests run the real binary, as ECS runs tasks.
var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// gatewayBinary builds ./cmd/gateway once per test run.
func gatewayBinary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "jetway-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "gateway")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = &buildError{out: string(out), err: err}
		}
	})
	if buildErr != nil {
		t.Fatalf("build gateway: %v", buildErr)
	}
	return binPath
}

type buildError struct {
	out string
	err error
}

func (e *buildError) Error() string { return e.err.Error() + ": " + e.out }

// proc is a gateway process.
type proc struct {
	*gw
	cmd    *exec.Cmd
	exited chan struct{}
	err    error
}

// startProcess runs the gateway binary with the world's settings plus overrides.
func (w *world) startProcess(overrides map[string]string) *proc {
	w.t.Helper()
	bin := gatewayBinary(w.t)
	env := []string{"PATH=" + os.Getenv("PATH")}
	merged := map[string]string{}
	for k, v := range w.env {
		merged[k] = v
	}
	for k, v := range overrides {
		merged[k] = v
	}
	for k, v := range merged {
		env = append(env, k+"="+v)
	}
	cmd := exec.Command(bin)
	cmd.Env = env
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		w.t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		w.t.Fatal(err)
	}
	p := &proc{gw: &gw{logs: &logBuffer{}}, cmd: cmd, exited: make(chan struct{})}
	listening := make(chan [2]string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			p.logs.add(line)
			if strings.Contains(line, `"msg":"listening"`) {
				var raw map[string]any
				_ = json.Unmarshal([]byte(line), &raw)
				a, _ := raw["addr"].(string)
				b, _ := raw["admin_addr"].(string)
				listening <- [2]string{a, b}
			}
		}
		p.err = cmd.Wait()
		close(p.exited)
	}()
	select {
	case a := <-listening:
		p.Addr, p.Admin = a[0], a[1]
	case <-p.exited:
		w.t.Fatalf("gateway process exited before listening: %v\n%s", p.err, p.logs.text())
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		w.t.Fatalf("gateway process did not listen within 30s\n%s", p.logs.text())
	}
	w.t.Cleanup(func() {
		p.signal(syscall.SIGKILL)
		<-p.exited
		if w.t.Failed() && os.Getenv("JETWAY_TEST_LOGS") != "" {
			w.t.Logf("gateway %s logs:\n%s", p.Addr, p.logs.text())
		}
	})
	return p
}

func (p *proc) signal(s syscall.Signal) {
	select {
	case <-p.exited:
	default:
		_ = p.cmd.Process.Signal(s)
	}
}

// wait waits for the process to exit and returns its exit code.
func (p *proc) wait(t testing.TB, within time.Duration) int {
	t.Helper()
	select {
	case <-p.exited:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(within):
		t.Fatalf("gateway %s did not exit within %s", p.Addr, within)
		return -1
	}
}

// runCommand runs a gateway subcommand with the world's environment.
func (w *world) runCommand(overrides map[string]string, args ...string) string {
	w.t.Helper()
	cmd := exec.Command(gatewayBinary(w.t), args...)
	env := []string{"PATH=" + os.Getenv("PATH")}
	for k, v := range w.env {
		if _, ok := overrides[k]; !ok {
			env = append(env, k+"="+v)
		}
	}
	for k, v := range overrides {
		env = append(env, k+"="+v)
	}
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		w.t.Fatalf("gateway %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}
