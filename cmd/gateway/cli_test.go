package main

import (
	"context"
	"errors"
	"flag"
	"strings"
	"testing"
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
