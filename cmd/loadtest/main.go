// Command loadtest puts passengers through Jetway and counts their bags: the
// article's Test 1 (delivery) and Test 2 (quota), the gateway's overhead over
// calling the model directly, its capacity (memory per idle session, chunk
// frames per second) and a soak with reconnects. It speaks only the public
// wire protocol, through the client package, so it can be pointed at any
// deployment:
//
//	go build -o gateway ./cmd/gateway && ./gateway &          # dev mode
//	go run ./cmd/loadtest delivery --users 10 --requests 10
//	go run ./cmd/loadtest quota --users 20 --duration 1m --limit 20000
//	go run ./cmd/loadtest overhead --streams 1000 --bedrock-url http://127.0.0.1:8090
//	go run ./cmd/loadtest rate --rate 2000 --path /v1/chat/completions --pid $(pgrep -n gateway)
//	go run ./cmd/loadtest frontier --rates 500,1000,2000 --pid $(pgrep -n gateway)
//	go run ./cmd/loadtest capacity --sessions 10000 --pid $(pgrep -n gateway)
//	go run ./cmd/loadtest soak --duration 10m
//	go run ./cmd/loadtest promptcache --turns 20 --system-tokens 3000
//	go run ./cmd/loadtest responses --streams 10 --turns 20 --url http://127.0.0.1:8080 --pid $(pgrep -n gateway)
//
// Every run ends with a markdown report in the article's table shape (or
// JSON with --json) and exits non-zero when anything was lost, never
// finished, arrived twice or out of order, or slipped past a quota.
// docs/benchmarks.md records the runs on the reference machine.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout)
	stop()
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "loadtest:", err)
		}
		os.Exit(1)
	}
}

// run parses the scenario and its flags, runs it and writes the report.
// Progress (when enabled) goes to stderr; the report to stdout.
func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	return runWith(ctx, args, getenv, stdout, os.Stderr)
}

// ErrFailed is returned when the run's accounting found a problem (lost,
// never finished, duplicated or out-of-order chunks, wrong answers,
// requests past the quota, unexpected errors): the exit status is non-zero.
var ErrFailed = errors.New("load test found problems")

func runWith(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	s, err := parseSettings(args, getenv, stdout)
	if err != nil {
		return err
	}
	raiseFileLimit()
	rep, err := s.runScenario(ctx, stderr)
	if err != nil {
		return err
	}
	rep.TimeoutS = s.Timeout.Seconds()
	if s.JSON {
		if err := rep.writeJSON(stdout); err != nil {
			return err
		}
	} else if err := rep.writeMarkdown(stdout); err != nil {
		return err
	}
	if len(rep.Problems) > 0 {
		return fmt.Errorf("%w: %s", ErrFailed, joinProblems(rep.Problems))
	}
	return nil
}

func (s *settings) runScenario(ctx context.Context, stderr io.Writer) (*Report, error) {
	tokens, err := newTokenSource(s)
	if err != nil {
		return nil, err
	}
	e := &env{s: s, tokens: tokens, progress: newProgressFactory(s.Progress, stderr)}
	switch s.Scenario {
	case "delivery":
		return e.delivery(ctx)
	case "quota":
		return e.quota(ctx)
	case "overhead":
		return e.overhead(ctx)
	case "rate":
		return e.rate(ctx)
	case "frontier":
		return e.frontier(ctx)
	case "capacity":
		return e.capacity(ctx)
	case "soak":
		return e.soak(ctx)
	case "promptcache":
		return e.promptCache(ctx)
	case "responses":
		return e.responses(ctx)
	}
	return nil, fmt.Errorf("unknown scenario %q", s.Scenario)
}

// raiseFileLimit lifts the soft open-files limit to the hard one: a
// capacity run holds one socket per session.
func raiseFileLimit() {
	var l syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) == nil && l.Cur < l.Max {
		l.Cur = l.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
	}
}
