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
// Every flag can also be set in the environment (MOCKBEDROCK_LISTEN,
// MOCKBEDROCK_TTFT, MOCKBEDROCK_PER_TOKEN, MOCKBEDROCK_PER_INPUT_TOKEN, MOCKBEDROCK_TOKENS, MOCKBEDROCK_TLS,
// MOCKBEDROCK_TLS_CERT_OUT); flags win.
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
	"strconv"
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
	o := mockmodel.Options{TTFT: ttft, PerToken: perToken, Tokens: tokens, PerInputToken: perInputToken}
	if o.TTFT == 0 {
		o.TTFT = mockmodel.NoDelay
	}
	if o.PerToken == 0 {
		o.PerToken = mockmodel.NoDelay
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
