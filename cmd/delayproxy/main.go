// Command delayproxy forwards TCP connections to an upstream with a fixed
// added delay in each direction (internal/delayproxy), to measure the
// gateway against a DynamoDB endpoint as far away as a real one:
//
//	dynalite --port 4567 &
//	delayproxy --upstream 127.0.0.1:4567 --delay 2.5ms --listen 127.0.0.1:4568 &
//	AWS_ENDPOINT_URL_DYNAMODB=http://127.0.0.1:4568 ./gateway
//
// It serves until SIGINT or SIGTERM.
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
	"time"

	"github.com/jetway-gateway/jetway/internal/delayproxy"
)

// defaultDelay is half the in-region round trip to DynamoDB from a Fargate task.
const defaultDelay = 2500 * time.Microsecond

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "delayproxy:", err)
		os.Exit(1)
	}
}

// run proxies until ctx ends. The first line on stdout is the address
// the proxy listens on (scripts read it: `head -1`), the second says what
// it does.
func run(ctx context.Context, args []string, _ func(string) string, stdout io.Writer) error {
	fs := flag.NewFlagSet("delayproxy", flag.ContinueOnError)
	fs.SetOutput(stdout)
	upstream := fs.String("upstream", "", "host:port to forward to (required)")
	delay := fs.Duration("delay", defaultDelay, "added delay in each direction (a round trip pays it twice)")
	listen := fs.String("listen", "127.0.0.1:0", "host:port to listen on (port 0: a free one, printed)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if *upstream == "" || fs.NArg() > 0 {
		return fmt.Errorf("usage: delayproxy --upstream host:port [--delay 2.5ms] [--listen 127.0.0.1:0]")
	}
	p, err := delayproxy.Listen(*listen, *upstream, *delay)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, p.Addr())
	fmt.Fprintf(stdout, "delayproxy: forwarding %s to %s, adding %s each way (%s a round trip); for DynamoDB: AWS_ENDPOINT_URL_DYNAMODB=http://%s\n",
		p.Addr(), *upstream, *delay, 2**delay, p.Addr())
	<-ctx.Done()
	return p.Close()
}
