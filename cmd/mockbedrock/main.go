// Command mockbedrock serves a Bedrock-compatible ConverseStream endpoint with
// a steady, known pace and fault knobs (see internal/mockmodel), for running
// the gateway and load tests without AWS:
//
//	mockbedrock --listen 127.0.0.1:8090 --ttft 250ms --per-token 8ms --per-input-token 100us --tokens 300
//	AWS_ENDPOINT_URL_BEDROCK_RUNTIME=http://127.0.0.1:8090 go run ./cmd/gateway
//
// With --tls it serves HTTPS with a fresh self-signed certificate, written
// to --tls-cert-out for the gateway to trust, so that benchmarks pay for TLS
// as production does:
//
//	mockbedrock --tls --tls-cert-out /tmp/mockbedrock.pem
//	JETWAY_BEDROCK_CA_FILE=/tmp/mockbedrock.pem AWS_ENDPOINT_URL_BEDROCK_RUNTIME=https://127.0.0.1:8090 go run ./cmd/gateway
//
// One endpoint serves every region (the region of a call is its SigV4
// signing scope, --region without one). Application inference profiles are
// registered with --profile ARN=MODEL (repeatable), and a service tier gets
// its own pace with --tier-pace TIER=TTFT[/PER-TOKEN] (repeatable; 0 is
// none, PER-TOKEN defaults to --per-token):
//
//	mockbedrock --profile arn:aws:bedrock:us-west-2:123456789012:application-inference-profile/p1=mock-a \
//	    --tier-pace flex=2s/20ms --tier-pace priority=100ms
//
// Fault knobs per region and model, and more profiles, are set at run time
// over HTTP (PUT/GET/DELETE /faults, PUT/GET /profiles; see
// internal/mockmodel), and GET /stats reports the calls by region, tier and
// profile.
//
// Every flag can also be set in the environment (MOCKBEDROCK_LISTEN,
// MOCKBEDROCK_TTFT, MOCKBEDROCK_PER_TOKEN, MOCKBEDROCK_PER_INPUT_TOKEN, MOCKBEDROCK_TOKENS, MOCKBEDROCK_TLS,
// MOCKBEDROCK_TLS_CERT_OUT, MOCKBEDROCK_REGION; MOCKBEDROCK_PROFILES and
// MOCKBEDROCK_TIER_PACE hold comma-separated lists of what the repeatable
// flags take); flags win (a repeatable flag given once replaces its
// variable's whole list).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jetway-gateway/jetway/internal/mockmodel"
)

// Defaults and bounds of the command.
const (
	defaultListen = "127.0.0.1:8090"
	// shutdownGrace is how long in-flight answers may finish after a signal
	// before their connections are closed.
	shutdownGrace = 5 * time.Second
	// readHeaderTimeout bounds slow clients sending request headers.
	readHeaderTimeout = 10 * time.Second
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "mockbedrock:", err)
		os.Exit(1)
	}
}

// run serves until ctx ends, then shuts down gracefully.
func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	fs := flag.NewFlagSet("mockbedrock", flag.ContinueOnError)
	fs.SetOutput(stdout)
	listen := fs.String("listen", envOr(getenv, "MOCKBEDROCK_LISTEN", defaultListen), "address to listen on (port 0: any free port)")
	ttft, err := envDuration(getenv, "MOCKBEDROCK_TTFT", mockmodel.DefaultTTFT)
	if err != nil {
		return err
	}
	perToken, err := envDuration(getenv, "MOCKBEDROCK_PER_TOKEN", mockmodel.DefaultPerToken)
	if err != nil {
		return err
	}
	perInputToken, err := envDuration(getenv, "MOCKBEDROCK_PER_INPUT_TOKEN", mockmodel.RealisticPerInputToken)
	if err != nil {
		return err
	}
	tokens := mockmodel.DefaultTokens
	if v := getenv("MOCKBEDROCK_TOKENS"); v != "" {
		if tokens, err = strconv.Atoi(v); err != nil {
			return fmt.Errorf("MOCKBEDROCK_TOKENS: %w", err)
		}
	}
	fs.DurationVar(&ttft, "ttft", ttft, "time to first token (0: none)")
	fs.DurationVar(&perToken, "per-token", perToken, "time between tokens (0: none)")
	fs.DurationVar(&perInputToken, "per-input-token", perInputToken, "time to first token added per input token not read from the prompt cache (0: none)")
	fs.IntVar(&tokens, "tokens", tokens, "answer length in tokens, capped by the request's maxTokens")
	useTLS := fs.Bool("tls", getenv("MOCKBEDROCK_TLS") == "true", "serve HTTPS with a fresh self-signed certificate")
	certOut := fs.String("tls-cert-out", envOr(getenv, "MOCKBEDROCK_TLS_CERT_OUT", "mockbedrock-cert.pem"),
		"with --tls: file the certificate (PEM) is written to, for clients to trust")
	region := fs.String("region", envOr(getenv, "MOCKBEDROCK_REGION", mockmodel.DefaultRegion), "region of calls without a SigV4 signing scope")
	profiles := newListFlag(getenv("MOCKBEDROCK_PROFILES"))
	fs.Var(profiles, "profile", "application inference profile `ARN=MODEL` (repeatable)")
	tierPaces := newListFlag(getenv("MOCKBEDROCK_TIER_PACE"))
	fs.Var(tierPaces, "tier-pace", "pace of a service tier, `TIER=TTFT[/PER-TOKEN]` (repeatable; 0: none; PER-TOKEN defaults to --per-token)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if ttft < 0 || perToken < 0 || perInputToken < 0 || tokens < 1 {
		return fmt.Errorf("--ttft, --per-token and --per-input-token must not be negative and --tokens must be positive")
	}

	// On the command line 0 means none; in mockmodel.Options it means default.
	o := mockmodel.Options{TTFT: none(ttft), PerToken: none(perToken), Tokens: tokens, PerInputToken: perInputToken, DefaultRegion: *region}
	if o.Profiles, err = parseProfiles(profiles.items); err != nil {
		return err
	}
	if o.TierPace, err = parseTierPaces(tierPaces.items, perToken); err != nil {
		return err
	}

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("--listen %s: %w", *listen, err)
	}
	srv := &http.Server{Handler: mockmodel.New(o), ReadHeaderTimeout: readHeaderTimeout}
	scheme, certNote := "http", ""
	if *useTLS {
		host, _, _ := net.SplitHostPort(*listen)
		if srv.TLSConfig, err = selfSignedTLS(host, *certOut); err != nil {
			_ = ln.Close()
			return err
		}
		scheme, certNote = "https", ", certificate in "+*certOut
	}
	fmt.Fprintf(stdout, "mockbedrock listening on %s://%s (ttft %s, per token %s, %d tokens%s)\n", scheme, ln.Addr(), ttft, perToken, tokens, certNote)

	served := make(chan error, 1)
	go func() {
		if *useTLS {
			// ServeTLS offers HTTP/2 and HTTP/1.1 (ALPN), as AWS endpoints
			// do; the SDK's client prefers HTTP/2.
			served <- srv.ServeTLS(ln, "", "")
			return
		}
		served <- srv.Serve(ln)
	}()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		// Streams still running (a stall never ends by itself): cut them.
		_ = srv.Close()
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func envOr(getenv func(string) string, key, def string) string {
	if v := getenv(key); v != "" {
		return v
	}
	return def
}

func envDuration(getenv func(string) string, key string, def time.Duration) (time.Duration, error) {
	v := getenv(key)
	if v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", key, err)
	}
	return d, nil
}

// none maps the command line's 0 (no delay) to mockmodel.NoDelay.
func none(d time.Duration) time.Duration {
	if d == 0 {
		return mockmodel.NoDelay
	}
	return d
}

// listFlag is a repeatable flag whose default is a comma-separated list
// from the environment; the first use of the flag replaces that list.
type listFlag struct {
	items []string
	set   bool
}

func newListFlag(env string) *listFlag {
	l := &listFlag{}
	for item := range strings.SplitSeq(env, ",") {
		if item = strings.TrimSpace(item); item != "" {
			l.items = append(l.items, item)
		}
	}
	return l
}

func (l *listFlag) String() string {
	if l == nil {
		return ""
	}
	return strings.Join(l.items, ",")
}

func (l *listFlag) Set(v string) error {
	if !l.set {
		l.items, l.set = nil, true
	}
	l.items = append(l.items, v)
	return nil
}

// parseProfiles reads ARN=MODEL items.
func parseProfiles(items []string) (map[string]string, error) {
	if len(items) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(items))
	for _, item := range items {
		arn, model, _ := strings.Cut(item, "=")
		p := mockmodel.Profile{ARN: arn, Model: model}
		if err := p.Check(); err != nil {
			return nil, fmt.Errorf("--profile %q (ARN=MODEL): %v", item, err)
		}
		out[arn] = model
	}
	return out, nil
}

// parseTierPaces reads TIER=TTFT[/PER-TOKEN] items (0: none; PER-TOKEN
// defaults to perToken).
func parseTierPaces(items []string, perToken time.Duration) (map[string]mockmodel.Pace, error) {
	if len(items) == 0 {
		return nil, nil
	}
	tiers := []string{mockmodel.TierDefault, mockmodel.TierPriority, mockmodel.TierFlex, mockmodel.TierReserved}
	out := make(map[string]mockmodel.Pace, len(items))
	for _, item := range items {
		bad := func(why string) error {
			return fmt.Errorf("--tier-pace %q (TIER=TTFT[/PER-TOKEN]): %s", item, why)
		}
		tier, pace, ok := strings.Cut(item, "=")
		if !ok || !slices.Contains(tiers, tier) {
			return nil, bad("the tier must be one of " + strings.Join(tiers, ", "))
		}
		ttftText, perTokenText, hasPerToken := strings.Cut(pace, "/")
		ttft, err := time.ParseDuration(ttftText)
		if err != nil {
			return nil, bad(err.Error())
		}
		pt := perToken
		if hasPerToken {
			if pt, err = time.ParseDuration(perTokenText); err != nil {
				return nil, bad(err.Error())
			}
		}
		if ttft < 0 || pt < 0 {
			return nil, bad("durations must not be negative")
		}
		out[tier] = mockmodel.Pace{TTFT: none(ttft), PerToken: none(pt)}
	}
	return out, nil
}
