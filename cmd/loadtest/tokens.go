package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// refreshMargin: a cached token this close to its expiry is minted again.
const refreshMargin = 2 * time.Minute

// tokenSource hands out bearer tokens per user: a fixed token, lines of a
// file, or the output of a command, cached until shortly before they expire.
type tokenSource struct {
	fixed  string
	lines  []string
	cmd    string
	tenant string
	app    string
	sem    chan struct{}

	mu    sync.Mutex
	cache map[string]*cachedToken
}

type cachedToken struct {
	once  chan struct{} // closed when tok/err are set
	tok   string
	exp   time.Time
	err   error
	index int
}

func newTokenSource(s *settings) (*tokenSource, error) {
	ts := &tokenSource{tenant: s.Tenant, app: s.App, cache: map[string]*cachedToken{},
		sem: make(chan struct{}, s.TokenConcurrency)}
	switch {
	case s.Token != "":
		ts.fixed = strings.TrimSpace(s.Token)
	case s.TokenFile != "":
		f, err := os.Open(s.TokenFile)
		if err != nil {
			return nil, fmt.Errorf("--token-file: %w", err)
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			if l := strings.TrimSpace(sc.Text()); l != "" && !strings.HasPrefix(l, "#") {
				ts.lines = append(ts.lines, l)
			}
		}
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("--token-file: %w", err)
		}
		if len(ts.lines) == 0 {
			return nil, fmt.Errorf("--token-file %s has no tokens", s.TokenFile)
		}
	case s.TokenCmd != "":
		ts.cmd = s.TokenCmd
	default:
		return nil, fmt.Errorf("give --token, --token-file or --token-cmd")
	}
	return ts, nil
}

// forUser returns a token function for the i-th user (the client calls it
// on every connect and refresh).
func (ts *tokenSource) forUser(user string, index int) func(context.Context) (string, error) {
	return func(ctx context.Context) (string, error) { return ts.get(ctx, user, index) }
}

func (ts *tokenSource) get(ctx context.Context, user string, index int) (string, error) {
	if ts.fixed != "" {
		return ts.fixed, nil
	}
	if ts.lines != nil {
		return ts.lines[index%len(ts.lines)], nil
	}
	ts.mu.Lock()
	c := ts.cache[user]
	if c != nil {
		select {
		case <-c.once:
			if c.err != nil || (!c.exp.IsZero() && time.Until(c.exp) < refreshMargin) {
				c = nil // mint again
			}
		default:
		}
	}
	if c == nil {
		c = &cachedToken{once: make(chan struct{}), index: index}
		ts.cache[user] = c
		go ts.mint(c, user)
	}
	ts.mu.Unlock()
	select {
	case <-c.once:
		return c.tok, c.err
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// mint runs the token command for user (bounded concurrency).
func (ts *tokenSource) mint(c *cachedToken, user string) {
	defer close(c.once)
	ts.sem <- struct{}{}
	defer func() { <-ts.sem }()
	line := strings.NewReplacer("{user}", shellQuote(user), "{tenant}", shellQuote(ts.tenant), "{app}", shellQuote(ts.app)).Replace(ts.cmd)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", line)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		c.err = fmt.Errorf("token command %q: %w: %s", line, err, strings.TrimSpace(stderr.String()))
		return
	}
	fields := strings.Fields(stdout.String())
	if len(fields) == 0 {
		c.err = fmt.Errorf("token command %q printed nothing", line)
		return
	}
	c.tok = fields[len(fields)-1]
	c.exp = jwtExpiry(c.tok)
}

// jwtExpiry reads exp from a JWT's payload without verifying it (zero if absent).
func jwtExpiry(tok string) time.Time {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return time.Time{}
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return time.Time{}
	}
	var claims struct {
		Exp float64 `json:"exp"`
	}
	if json.Unmarshal(b, &claims) != nil || claims.Exp == 0 {
		return time.Time{}
	}
	return time.Unix(int64(claims.Exp), 0)
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
