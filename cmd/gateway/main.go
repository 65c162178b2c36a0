// Command gateway runs Jetway: the multi-tenant AI gateway.
//
//	gateway [serve] [flags]       run the server (settings: docs/configuration.md)
//	gateway chat [flags] [prompt] talk to a gateway from the terminal (--me: the user's limits)
//	gateway token --sub alice --tenant contoso --app support-assistant [--ttl 1h]
//	gateway tables create [--aws] create the DynamoDB tables at AWS_ENDPOINT_URL_DYNAMODB (--aws: real AWS)
//	gateway config import FILE | export   move a tenants file into the config table and back
//	gateway usage [--dir] [--since 24h|7d] [--by tenant,app,model,user,door]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		// After the first signal, restore the default so a second one ends the process at once.
		<-ctx.Done()
		stop()
	}()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return // the flags were printed, as asked
		}
		fmt.Fprintln(os.Stderr, "gateway:", err)
		os.Exit(1)
	}
}

// commandList is what `gateway -h` and `gateway help` print before the
// server's flags.
const commandList = `usage: gateway [command] [flags]   (gateway <command> -h lists a command's flags)

commands:
  serve             run the gateway (the default; settings: docs/configuration.md)
  chat [prompt]     talk to a gateway from the terminal: streams the answer, resumes after a
                    dropped connection; without a prompt, one prompt per line from stdin;
                    chat --me prints the user's limits (used, left, when each resets)
  token             mint a dev-mode token (--sub alice --tenant contoso --app support-assistant)
  tables create     create the DynamoDB tables, idempotently, at AWS_ENDPOINT_URL_DYNAMODB
                    (--aws: in real AWS, AWS_REGION)
  config import F   write a tenants file into the config table (JETWAY_CONFIG_TABLE), idempotently
  config export     print the config table's configuration as a tenants file
  usage             report of the local usage records (--since 24h or 7d, --by tenant,app,model,user,door)

`

// synopsis is what a command's -h prints before its flags.
func synopsis(name string) string {
	switch name {
	case "gateway serve":
		return commandList
	case "gateway chat":
		return "usage: gateway chat [flags] [prompt]   (without a prompt: one prompt per line from stdin)\n" +
			"       gateway chat --me [flags]          (the user's limits: used, left, when each resets)\n\n"
	}
	return ""
}

// serveFlagGroups sorts the server's flags for -h: what a first run on
// one machine touches, what a deployment sets, and the rest. A flag in
// neither list is tuning, so a new setting needs no edit here to be listed.
var serveFlagGroups = []struct {
	title string
	names []string
}{
	{"dev (one machine, no AWS account)", []string{"listen", "admin-listen", "config", "log-level", "serve-demo",
		"dev-key-file", "dev-allow-remote", "mock-bedrock", "mock-ttft", "mock-per-token", "mock-per-input-token", "usage-dir", "pprof"}},
	{"production (a deployment sets these)", []string{"auth-issuer", "auth-jwks-url", "allowed-origins", "aws-region", "server-id",
		"cognito-domain", "cognito-client-id", "cognito-redirect-uri", "cognito-scopes", "quota-table", "requests-table",
		"cache-table", "members-table", "firehose-stream", "emf", "drain-timeout", "health-check-interval",
		"health-check-user-agent", "self-drain-misses"}},
}

// printFlags prints a command's -h: its synopsis and its flags, the
// server's in groups (serveFlagGroups).
func printFlags(fs *flag.FlagSet, out io.Writer) {
	fmt.Fprint(out, synopsis(fs.Name()))
	fmt.Fprintf(out, "usage of %s:\n", fs.Name())
	if fs.Name() != "gateway serve" {
		fs.PrintDefaults()
		return
	}
	grouped := map[string]bool{}
	for _, g := range serveFlagGroups {
		for _, n := range g.names {
			grouped[n] = true
		}
	}
	print := func(title string, keep func(name string) bool) {
		sub := flag.NewFlagSet(fs.Name(), flag.ContinueOnError)
		sub.SetOutput(out)
		fs.VisitAll(func(f *flag.Flag) {
			if keep(f.Name) {
				sub.Var(f.Value, f.Name, f.Usage)
			}
		})
		fmt.Fprintf(out, "\n%s:\n", title)
		sub.PrintDefaults()
	}
	for _, g := range serveFlagGroups {
		print(g.title, func(name string) bool { return slices.Contains(g.names, name) })
	}
	print("tuning (bounds and timeouts; defaults and reasons in docs/configuration.md)", func(name string) bool { return !grouped[name] })
}

// parseFlags parses args into fs. -h and --help print the flags to out and
// return flag.ErrHelp; a bad flag returns its error and a hint, not the
// whole listing; a negative number or duration is refused, as the
// environment variables refuse it.
func parseFlags(fs *flag.FlagSet, args []string, out io.Writer) error {
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(out)
			printFlags(fs, out)
			return err
		}
		return fmt.Errorf("%w (see %s -h)", err, fs.Name())
	}
	var errs []error
	fs.Visit(func(f *flag.Flag) {
		g, ok := f.Value.(flag.Getter)
		if !ok {
			return
		}
		switch v := g.Get().(type) {
		case int:
			if v < 0 {
				errs = append(errs, fmt.Errorf("--%s=%d: want a whole number >= 0", f.Name, v))
			}
		case int64:
			if v < 0 {
				errs = append(errs, fmt.Errorf("--%s=%d: want a whole number >= 0", f.Name, v))
			}
		case time.Duration:
			if v < 0 {
				errs = append(errs, fmt.Errorf("--%s=%s: want a duration >= 0", f.Name, v))
			}
		}
	})
	return errors.Join(errs...)
}

// run dispatches the subcommands; every path returns instead of exiting.
func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	cmd := "serve"
	if len(args) > 0 && args[0] != "" && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "serve":
		return serve(ctx, args, getenv, stdout)
	case "token":
		return mintToken(args, getenv, stdout)
	case "tables":
		return tables(ctx, args, getenv, stdout)
	case "usage":
		return usage(args, getenv, stdout)
	case "config":
		return configCommand(ctx, args, getenv, stdout)
	case "chat":
		return chat(ctx, args, getenv, os.Stdin, stdout, os.Stderr)
	case "help":
		fmt.Fprint(stdout, commandList)
		return nil
	default:
		return fmt.Errorf("unknown command %q (want serve, chat, token, tables, config or usage; see gateway -h)", cmd)
	}
}
