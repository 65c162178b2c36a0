package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/jetway-gateway/jetway/client"
)

// The command line: help is not an error, bad flags say what is wrong in
// one line, negative numbers are refused like the environment refuses them.
func TestCommandLine(t *testing.T) {
	home := t.TempDir()
	env := map[string]string{"HOME": home, "JETWAY_CONFIG": "testdata/jetway.yaml"}
	getenv := func(k string) string { return env[k] }
	runArgs := func(args ...string) (string, error) {
		var out strings.Builder
		err := run(context.Background(), args, getenv, &out)
		return out.String(), err
	}

	for _, args := range [][]string{{"--help"}, {"-h"}, {"serve", "--help"}, {"token", "-h"}, {"usage", "--help"}} {
		out, err := runArgs(args...)
		if !errors.Is(err, flag.ErrHelp) {
			t.Errorf("%v: %v, want flag.ErrHelp (main exits 0 on it)", args, err)
		}
		if !strings.Contains(out, "usage of gateway") || !strings.Contains(out, "-") {
			t.Errorf("%v printed %q, want the flags", args, out)
		}
	}

	out, err := runArgs("--no-such-flag")
	if err == nil || !strings.Contains(err.Error(), "flag provided but not defined: -no-such-flag") ||
		!strings.Contains(err.Error(), "see gateway serve -h") {
		t.Errorf("bad flag: %v", err)
	}
	if out != "" {
		t.Errorf("bad flag printed %d bytes (%q...), want only the error", len(out), out[:min(len(out), 80)])
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--max-inflight=-5"}, "--max-inflight=-5: want a whole number >= 0"},
		{[]string{"--resume-window=-1s"}, "--resume-window=-1s: want a duration >= 0"},
		{[]string{"token", "--sub", "a", "--tenant", "contoso", "--app", "support-assistant", "--ttl=-1h"}, "--ttl=-1h0m0s: want a duration >= 0"},
		{[]string{"usage", "--since=-24h"}, "--since=-24h0m0s: want a duration >= 0"},
		{[]string{"token", "--sub", "a", "--tenant", "nope", "--app", "support-assistant"}, `no tenant "nope"`},
		{[]string{"token", "--sub", "a", "--tenant", "contoso", "--app", "nope"}, `no app "nope" in tenant "contoso"`},
	} {
		if _, err := runArgs(c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error containing %q", c.args, err, c.want)
		}
	}
}

// The rough edges a newcomer hit (issue 23): help lists the commands,
// `tables -h` is help, addresses are checked as addresses first, a missing
// usage directory says where it looked, a YAML syntax error has its line.
func TestCommandLineEdges(t *testing.T) {
	dir := t.TempDir()
	env := map[string]string{"HOME": t.TempDir(), "JETWAY_USAGE_DIR": filepath.Join(dir, "absent")}
	getenv := func(k string) string { return env[k] }
	runArgs := func(args ...string) (string, error) {
		var out strings.Builder
		err := run(context.Background(), args, getenv, &out)
		return out.String(), err
	}

	out, err := runArgs("-h")
	if !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v", err)
	}
	for _, want := range []string{"commands:", "serve ", "chat [prompt]", "token ", "tables create", "usage ", "usage of gateway serve:", "-listen"} {
		if !strings.Contains(out, want) {
			t.Errorf("gateway -h does not mention %q:\n%s", want, out)
		}
	}
	if help, err := runArgs("help"); err != nil || !strings.Contains(help, "chat [prompt]") {
		t.Errorf("gateway help: %v\n%s", err, help)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"tables", "-h"}, "-quota-table"}, {[]string{"tables", "--help"}, "-quota-table"},
		{[]string{"tables", "create", "-h"}, "-quota-table"}, {[]string{"chat", "-h"}, "usage: gateway chat [flags] [prompt]"}, {[]string{"chat", "Hello", "-h"}, "-model"},
	} {
		args := c.args
		out, err := runArgs(args...)
		if !errors.Is(err, flag.ErrHelp) || !strings.Contains(out, "usage of gateway "+args[0]) || !strings.Contains(out, c.want) {
			t.Errorf("%v: %v, printed %q; want the flags and flag.ErrHelp (exit 0)", args, err, out)
		}
	}
	if _, err := runArgs("tables"); err == nil || !strings.Contains(err.Error(), "see gateway tables -h") {
		t.Errorf("tables without create: %v", err)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--listen", "nonsense"}, `JETWAY_LISTEN (--listen) "nonsense": not a host:port, such as 127.0.0.1:8080: missing port in address`},
		{[]string{"--listen", "127.0.0.1:99999"}, `"127.0.0.1:99999": not a host:port, such as 127.0.0.1:8080: port "99999"`},
		{[]string{"--admin-listen", "localhost"}, `JETWAY_ADMIN_LISTEN (--admin-listen) "localhost": not a host:port`},
		{[]string{"usage", "--dir", filepath.Join(dir, "nowhere")}, "no usage records at " + filepath.Join(dir, "nowhere") + ": the gateway writes them to JETWAY_USAGE_DIR"},
		{[]string{"usage"}, "no usage records at " + filepath.Join(dir, "absent") + ": the gateway writes them to JETWAY_USAGE_DIR (default ./usage, under the directory it was started in); run this there, or point --dir or JETWAY_USAGE_DIR at them"},
		{[]string{"chat", "--tools", "nope", "Hi"}, `no demo tool "nope" and no such file (demo tools: clock)`},
		{[]string{"chat", "--wait", "0s", "--url", "ws://127.0.0.1:1/v1/ws", "Hi"}, "connect ws://127.0.0.1:1/v1/ws: jetway: dial"},
	} {
		if _, err := runArgs(c.args...); err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "non-loopback") {
			t.Errorf("%v: %v, want an error containing %q", c.args, err, c.want)
		}
	}

	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("models:\n  - id: mock-a\n  bedrock_id: mock-a\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env["JETWAY_CONFIG"] = bad
	_, err = runArgs("token", "--sub", "a", "--tenant", "contoso", "--app", "support-assistant")
	if want := bad + ": line 3: did not find expected '-' indicator"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("a YAML syntax error on line 3: %v, want %q", err, want)
	}
}

// What a new user tripped over (issue 30, section 5): a token minted with a
// key no gateway has, tables created in real AWS by default, usage that
// could not group by user or door nor go back 7d, a chat error guessing
// "is the gateway running?" where the gateway had answered.
func TestCommandLineNewcomer(t *testing.T) {
	home := t.TempDir()
	env := map[string]string{"HOME": home}
	getenv := func(k string) string { return env[k] }
	runArgs := func(args ...string) (string, error) {
		var out strings.Builder
		err := run(context.Background(), args, getenv, &out)
		return out.String(), err
	}

	key := filepath.Join(home, ".cache", "jetway", "dev-signing-key.pem")
	_, err := runArgs("token", "--wait", "0s", "--sub", "a", "--tenant", "contoso", "--app", "support-assistant")
	if err == nil || !strings.Contains(err.Error(), "no dev issuer key at "+key) || !strings.Contains(err.Error(), "--create-key") {
		t.Errorf("token without a key file: %v, want a refusal naming %s", err, key)
	}
	if _, err := os.Stat(key); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("token created the key file anyway: %v", err)
	}
	// A key file that appears while token waits (a gateway just started,
	// as the README's recipes do) is the one it signs with.
	waited := make(chan error, 1)
	go func() {
		tok, err := runArgs("token", "--wait", "60s", "--sub", "a", "--tenant", "contoso", "--app", "support-assistant")
		if err == nil && strings.Count(tok, ".") != 2 {
			err = fmt.Errorf("printed %q", tok)
		}
		waited <- err
	}()
	if tok, err := runArgs("token", "--create-key", "--sub", "a", "--tenant", "contoso", "--app", "support-assistant"); err != nil || strings.Count(tok, ".") != 2 {
		t.Errorf("token --create-key: %v, printed %q", err, tok)
	}
	if err := <-waited; err != nil {
		t.Errorf("token waiting for the key file: %v", err)
	}
	if tok, err := runArgs("token", "--sub", "a", "--tenant", "contoso", "--app", "support-assistant"); err != nil || strings.Count(tok, ".") != 2 {
		t.Errorf("token with the key file there: %v, printed %q", err, tok)
	}

	out, err := runArgs("tables", "create")
	if err == nil || !strings.Contains(err.Error(), "AWS_ENDPOINT_URL_DYNAMODB is not set") || !strings.Contains(err.Error(), "--aws") || out != "" {
		t.Errorf("tables create without an endpoint: %v, printed %q; want a refusal before anything is done", err, out)
	}

	usageDir := filepath.Join(home, "usage")
	if err := os.MkdirAll(usageDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := runArgs("usage", "--dir", usageDir, "--since", "7d", "--by", "user,door"); err != nil || !strings.Contains(out, "(168h0m0s)") {
		t.Errorf("usage --since 7d --by user,door: %v\n%s", err, out)
	}
	if _, err := runArgs("usage", "--dir", usageDir, "--since", "1w"); err == nil || !strings.Contains(err.Error(), "whole days such as 7d") {
		t.Errorf("usage --since 1w: %v", err)
	}

	_, err = runArgs("chat", "--wait", "0s", "--url", "http://127.0.0.1:1/v1/ws", "Hi")
	if err == nil || !strings.Contains(err.Error(), "--url takes the WebSocket endpoint, such as ws://") || strings.Contains(err.Error(), "is the gateway running") {
		t.Errorf("chat --url http://...: %v", err)
	}
	for _, c := range []struct {
		url  string
		err  error
		hint string
	}{
		{"ws://127.0.0.1:8080/v1/ws", &client.HTTPError{Status: 401, Code: "unauthorized", Message: "token expired"}, ""},
		{"ws://127.0.0.1:8080/v1/ws", fmt.Errorf("dial: %w", syscall.ECONNREFUSED), " (is the gateway running?)"},
	} {
		if got := connectHint(c.url, c.err); got != c.hint {
			t.Errorf("connectHint(%v) = %q, want %q", c.err, got, c.hint)
		}
	}
}

// gateway -h groups the server's flags (dev, production, tuning): every
// flag once, and every name the groups list is a flag.
func TestHelpGroupsServeFlags(t *testing.T) {
	env := map[string]string{"HOME": t.TempDir()}
	var out strings.Builder
	if err := run(context.Background(), []string{"-h"}, func(k string) string { return env[k] }, &out); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v", err)
	}
	text := out.String()
	s := &settings{}
	fs, _ := s.flags("gateway serve", func(k string) string { return env[k] })
	fs.VisitAll(func(f *flag.Flag) {
		if n := strings.Count(text, "\n  -"+f.Name+" ") + strings.Count(text, "\n  -"+f.Name+"\n"); n != 1 {
			t.Errorf("-%s is listed %d times", f.Name, n)
		}
	})
	for _, g := range serveFlagGroups {
		for _, n := range g.names {
			if fs.Lookup(n) == nil {
				t.Errorf("group %q names -%s, which is no flag", g.title, n)
			}
		}
	}
	dev, prod, tuning := strings.Index(text, "\ndev ("), strings.Index(text, "\nproduction ("), strings.Index(text, "\ntuning (")
	if dev < 0 || prod < dev || tuning < prod {
		t.Errorf("-h has no dev, production and tuning groups in that order:\n%s", text)
	}
	if i := strings.Index(text, "\n  -listen "); i < dev || i > prod {
		t.Errorf("-listen is not in the dev group")
	}
	if i := strings.Index(text, "\n  -auth-issuer "); i < prod || i > tuning {
		t.Errorf("-auth-issuer is not in the production group")
	}
}
