// Package dynalitetest runs dynalite, a DynamoDB implementation from npm, for
// tests that talk to DynamoDB through the real AWS SDK.
//
// Each Start launches its own dynalite process on a free loopback port and
// kills it when the test ends, so tests never share tables by accident.
// dynalite is installed by `npm ci` at the repository root; when it is
// missing the test fails (it is never skipped), because a contract test that
// silently does not run proves nothing.
package dynalitetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/jetway-gateway/jetway/internal/delayproxy"
)

// Region is the AWS region every test client uses.
const Region = "us-east-1"

const (
	// startTimeout bounds how long one dynalite process may take to answer
	// (node start-up on a loaded 2-core machine takes a second or two).
	startTimeout = 30 * time.Second
	// startAttempts covers the small race between picking a free port and
	// dynalite binding it.
	startAttempts = 3
	// pollInterval is how often Start asks dynalite whether it is up.
	pollInterval = 20 * time.Millisecond
)

// Start launches dynalite on a free 127.0.0.1 port, waits until it answers
// a ListTables call, registers a cleanup that kills it, and returns its
// endpoint URL (for dynamodb.Options.BaseEndpoint). Tables are created
// ACTIVE at once (--createTableMs 0) to keep tests fast.
func Start(t testing.TB) string {
	t.Helper()
	root, err := repoRoot()
	if err != nil {
		t.Fatalf("dynalitetest: %v", err)
	}
	bin := filepath.Join(root, "node_modules", ".bin", "dynalite")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("dynalite not installed: run npm ci in %s (%v)", root, err)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("dynalitetest: node is required: %v", err)
	}
	hook := filepath.Join(root, "internal", "dynalitetest", "hangups.cjs")
	var errs []error
	for range startAttempts {
		endpoint, stop, err := launch(node, hook, bin)
		if err == nil {
			t.Cleanup(func() {
				if out, died := stop(); died {
					t.Errorf("dynalitetest: dynalite on %s exited before the test ended: %s", endpoint, out)
				}
			})
			return endpoint
		}
		errs = append(errs, err)
	}
	t.Fatalf("dynalitetest: dynalite did not start: %v", errors.Join(errs...))
	return ""
}

// RoundTripDelay is the added round trip StartDelayed callers use for
// measurements: 2.5 ms each way, the ordinary in-region cost of a
// DynamoDB call from a Fargate task (before its tail latency).
const RoundTripDelay = 5 * time.Millisecond

// StartDelayed launches dynalite (as Start) behind a delayproxy that adds
// delay to each direction of every connection, and returns the proxy's
// endpoint URL. Both stop when the test ends. For benchmarks: tests that
// assert behaviour use Start.
func StartDelayed(t testing.TB, delay time.Duration) string {
	t.Helper()
	endpoint := Start(t)
	p, err := delayproxy.Start(strings.TrimPrefix(endpoint, "http://"), delay)
	if err != nil {
		t.Fatalf("dynalitetest: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return "http://" + p.Addr()
}

// Client returns a DynamoDB client for endpoint with region us-east-1 and
// static test credentials. optFns adjust the options (for example a small
// retry budget).
func Client(t testing.TB, endpoint string, optFns ...func(*dynamodb.Options)) *dynamodb.Client {
	t.Helper()
	return dynamodb.New(dynamodb.Options{
		Region:       Region,
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
		BaseEndpoint: aws.String(endpoint),
	}, optFns...)
}

// TableName returns a table name unique to this call, derived from the
// test's name so a failing test's tables are easy to recognise.
func TableName(t testing.TB) string {
	t.Helper()
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatalf("dynalitetest: random table suffix: %v", err)
	}
	name := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			return r
		}
		return '-'
	}, t.Name())
	const maxBase = 200 // DynamoDB allows 255 characters
	if len(name) > maxBase {
		name = name[:maxBase]
	}
	return "jetway-" + name + "-" + hex.EncodeToString(b[:])
}

// launch starts one dynalite process (node -r hook bin) and waits for it to
// answer. stop kills it and says whether it had already exited, with its
// output.
func launch(node, hook, bin string) (endpoint string, stop func() (output string, died bool), err error) {
	port, err := freePort()
	if err != nil {
		return "", nil, err
	}
	var out syncBuffer
	cmd := exec.Command(node, "-r", hook, bin,
		"--host", "127.0.0.1", "--port", strconv.Itoa(port),
		"--createTableMs", "0", "--deleteTableMs", "0", "--updateTableMs", "0")
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("start %s: %w", bin, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	stop = func() (string, bool) {
		select {
		case <-exited:
			return strings.TrimSpace(out.String()), true
		default:
		}
		_ = cmd.Process.Kill()
		<-exited
		return "", false
	}

	endpoint = "http://127.0.0.1:" + strconv.Itoa(port)
	client := dynamodb.New(dynamodb.Options{
		Region:           Region,
		Credentials:      credentials.NewStaticCredentialsProvider("test", "test", ""),
		BaseEndpoint:     aws.String(endpoint),
		RetryMaxAttempts: 1,
	})
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	ticker := time.NewTicker(pollInterval)
	defer ticker.Stop()
	for {
		callCtx, callCancel := context.WithTimeout(ctx, time.Second)
		_, err := client.ListTables(callCtx, &dynamodb.ListTablesInput{})
		callCancel()
		if err == nil {
			return endpoint, stop, nil
		}
		select {
		case <-exited:
			return "", nil, fmt.Errorf("dynalite on port %d exited: %s", port, strings.TrimSpace(out.String()))
		case <-ctx.Done():
			stop()
			return "", nil, fmt.Errorf("dynalite on port %d did not answer within %v: %w (output: %s)",
				port, startTimeout, err, strings.TrimSpace(out.String()))
		case <-ticker.C:
		}
	}
}

// freePort asks the kernel for a free loopback port.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// repoRoot walks up from the working directory (a test's package
// directory) to the directory holding go.mod.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

// syncBuffer collects dynalite's output for error messages; the process
// writes to it from exec's copying goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	const maxOutput = 64 << 10
	if b.buf.Len() < maxOutput {
		b.buf.Write(p)
	}
	return len(p), nil
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// SmallRetryBudget is a client option with the bounded retries the gateway
// configures on its admission path: a few attempts, short backoff.
func SmallRetryBudget(o *dynamodb.Options) {
	o.Retryer = retry.NewStandard(func(so *retry.StandardOptions) {
		so.MaxAttempts = 3
		so.MaxBackoff = 10 * time.Millisecond
	})
}

// UnreachableEndpoint returns the URL of a loopback port nothing listens on:
// every connection is refused, as with an unreachable DynamoDB.
func UnreachableEndpoint(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	endpoint := "http://" + l.Addr().String()
	l.Close()
	return endpoint
}

// Canned returns a client whose every call is answered with body (HTTP
// 200, JSON) at once, without a network or a server: what a benchmark of
// a call's client-side cost (building, signing, encoding, decoding) uses.
func Canned(t testing.TB, body string) *dynamodb.Client {
	t.Helper()
	return dynamodb.New(dynamodb.Options{
		Region:           Region,
		Credentials:      credentials.NewStaticCredentialsProvider("test", "test", ""),
		BaseEndpoint:     aws.String("http://dynamodb.invalid"),
		RetryMaxAttempts: 1,
		HTTPClient:       canned(body),
	})
}

// canned answers every request with its body.
type canned string

func (c canned) Do(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		_, _ = io.Copy(io.Discard, r.Body)
		_ = r.Body.Close()
	}
	return &http.Response{
		StatusCode: http.StatusOK, Status: "200 OK", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        http.Header{"Content-Type": {"application/x-amz-json-1.0"}},
		Body:          io.NopCloser(strings.NewReader(string(c))),
		ContentLength: int64(len(c)),
		Request:       r,
	}, nil
}
