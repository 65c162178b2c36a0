package main

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetway-gateway/jetway/internal/delayproxy"
	"github.com/jetway-gateway/jetway/internal/gatewaytest"
	"github.com/jetway-gateway/jetway/internal/mockmodel"
)

// chatAnswerWithin bounds one `gateway chat` run in these tests: a 300-token
// answer at 20 ms a token is 6 s; the rest is room for a busy machine.
const chatAnswerWithin = 90 * time.Second

// terminal is what chat writes: safe for the client's reader goroutine,
// and it tells when the output has grown past a mark.
type terminal struct {
	mu   sync.Mutex
	b    strings.Builder
	mark int
	past chan struct{}
}

func newTerminal(mark int) *terminal { return &terminal{mark: mark, past: make(chan struct{})} }

func (t *terminal) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	before := t.b.Len()
	t.b.Write(p)
	if before < t.mark && t.b.Len() >= t.mark {
		close(t.past)
	}
	return len(p), nil
}

func (t *terminal) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.b.String()
}

// devGateway runs the gateway binary in dev mode (dev issuer, in-process
// mock Bedrock at perToken) on listen with its key file under home.
func devGateway(t *testing.T, home, listen string, perToken time.Duration) *gatewaytest.Process {
	t.Helper()
	return gatewaytest.Start(t, gatewaytest.Options{KillAtEnd: true, Env: map[string]string{"HOME": home,
		"JETWAY_LISTEN": listen, "JETWAY_ADMIN_LISTEN": "127.0.0.1:0", "JETWAY_USAGE_DIR": t.TempDir(),
		"JETWAY_MOCK_TTFT": "5ms", "JETWAY_MOCK_PER_TOKEN": perToken.String()}})
}

// runChat runs `gateway chat args...` with stdin and returns its error.
func runChat(t *testing.T, home string, args []string, stdin string, out, errOut *terminal) <-chan error {
	t.Helper()
	env := map[string]string{"HOME": home}
	ended := make(chan error, 1)
	go func() {
		ended <- chat(context.Background(), args, func(k string) string { return env[k] }, strings.NewReader(stdin), out, errOut)
	}()
	return ended
}

func awaitChat(t *testing.T, ended <-chan error, errOut *terminal) {
	t.Helper()
	select {
	case err := <-ended:
		if err != nil {
			t.Fatalf("gateway chat: %v\nstderr: %s", err, errOut)
		}
	case <-time.After(chatAnswerWithin):
		t.Fatalf("gateway chat did not end within %s\nstderr: %s", chatAnswerWithin, errOut)
	}
}

// TestChat is `gateway chat` against a gateway process in dev mode: a token
// minted from the dev key file, the answer streamed, a connection dropped
// mid-answer resumed to the identical text, and the interactive mode
// keeping the conversation (the mock's answer depends on every turn).
func TestChat(t *testing.T) {
	home := t.TempDir()
	g := devGateway(t, home, "127.0.0.1:0", 20*time.Millisecond)
	proxy, err := delayproxy.Start(g.Addr, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	want := expected("mock-a", "Hello", 300)

	t.Run("dropped connection resumes", func(t *testing.T) {
		out, errOut := newTerminal(40), newTerminal(1<<30)
		ended := runChat(t, home, []string{"--url", "ws://" + proxy.Addr() + "/v1/ws", "--model", "mock-a", "Hello"}, "", out, errOut)
		select {
		case <-out.past:
		case err := <-ended:
			t.Fatalf("chat ended before 40 bytes of answer: %v, stderr %s", err, errOut)
		case <-time.After(chatAnswerWithin):
			t.Fatalf("no 40 bytes of answer within %s: %q, stderr %s", chatAnswerWithin, out, errOut)
		}
		proxy.Drop()
		atDrop := len(out.String())
		awaitChat(t, ended, errOut)
		if atDrop >= len(want) {
			t.Fatalf("the whole answer had arrived when the connection was dropped: nothing was resumed")
		}
		if got := out.String(); got != want+"\n" {
			t.Fatalf("chat printed %d bytes:\n%q\nwant the answer once, %d bytes:\n%q", len(got), got, len(want)+1, want+"\n")
		}
		if e := errOut.String(); !strings.Contains(e, "connection lost") || !strings.Contains(e, "connected again: resuming") {
			t.Errorf("stderr %q, want the drop and the resume said", e)
		}
	})

	t.Run("interactive keeps the conversation", func(t *testing.T) {
		out, errOut := newTerminal(1<<30), newTerminal(1<<30)
		ended := runChat(t, home, []string{"--url", g.URL(), "--model", "mock-a"}, "Hello\n\nAnd then?\n", out, errOut)
		awaitChat(t, ended, errOut)
		second := strings.Join(mockmodel.Tokens("mock-a", "", []string{"Hello", want, "And then?"}, 300), "")
		if got := out.String(); got != "> Hello\n"+want+"\n\n> And then?\n"+second+"\n" {
			t.Fatalf("two prompts printed\n%q\nwant each prompt, then its answer (the second to the whole conversation), a blank line between", got)
		}
	})

	t.Run("demo tool", func(t *testing.T) {
		out, errOut := newTerminal(1<<30), newTerminal(1<<30)
		ended := runChat(t, home, []string{"--url", g.URL(), "--model", "mock-tools", "--tools", "clock", "What time is it?"}, "", out, errOut)
		awaitChat(t, ended, errOut)
		lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
		if len(lines) != 4 || !strings.HasPrefix(lines[1], "(calls clock) {") || !strings.HasPrefix(lines[2], "[clock -> ") || lines[3] == "" {
			t.Fatalf("a tool round printed\n%s\nwant the preamble, the call, the demo tool's result, the answer", out)
		}
		if _, err := time.Parse(time.RFC1123, strings.TrimSuffix(strings.TrimPrefix(lines[2], "[clock -> "), "]")); err != nil {
			t.Errorf("the clock's result: %v", err)
		}
	})
	// The README starts the gateway in the background and chats at once:
	// chat waits for a gateway that is not listening yet.
	t.Run("waits for the gateway to listen", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		out, errOut := newTerminal(1<<30), newTerminal(1)
		ended := runChat(t, home, []string{"--url", "ws://" + addr + "/v1/ws", "--wait", "2m", "--model", "mock-a", "Hello"}, "", out, errOut)
		select {
		case <-errOut.past: // it says it waits
		case err := <-ended:
			t.Fatalf("chat ended with no gateway listening: %v", err)
		case <-time.After(chatAnswerWithin):
			t.Fatalf("chat said nothing within %s", chatAnswerWithin)
		}
		devGateway(t, home, addr, time.Millisecond)
		awaitChat(t, ended, errOut)
		if got := out.String(); got != want+"\n" {
			t.Fatalf("after waiting chat printed %q, want the answer", got)
		}
		if !strings.Contains(errOut.String(), "waiting up to 2m0s for the gateway at ws://"+addr+"/v1/ws") {
			t.Errorf("stderr %q", errOut)
		}
	})
}
