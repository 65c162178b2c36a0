package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/jetway-gateway/jetway/internal/auth"
	"github.com/jetway-gateway/jetway/internal/configstore"
	"github.com/jetway-gateway/jetway/internal/fleet"
	"github.com/jetway-gateway/jetway/internal/quota"
	"github.com/jetway-gateway/jetway/internal/router"
	"github.com/jetway-gateway/jetway/internal/stream"
	"github.com/jetway-gateway/jetway/internal/telemetry"
)

// mintToken prints a dev-issuer token: `gateway token --sub alice --tenant contoso --app support-assistant`.
func mintToken(args []string, getenv func(string) string, stdout io.Writer) error {
	fs := flag.NewFlagSet("gateway token", flag.ContinueOnError)
	var u devUser
	u.flags(fs, getenv, true)
	fs.BoolVar(&u.CreateKey, "create-key", false, "create the dev issuer's key file when it is missing (a gateway already running with another key refuses the token)")
	fs.DurationVar(&u.KeyWait, "wait", 15*time.Second, "how long to wait for a missing key file to appear (a dev-mode gateway just started creates it)")
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}
	if u.Sub == "" || u.Tenant == "" || u.App == "" {
		return fmt.Errorf("token: --sub, --tenant and --app are required")
	}
	tok, err := u.mint(getenv)
	if err != nil {
		return fmt.Errorf("token: %w", err)
	}
	_, err = fmt.Fprintln(stdout, tok)
	return err
}

// devUser is whom a dev-issuer token is for, and where the issuer's key and
// the tenants file are: the flags `gateway token` and `gateway chat` share.
type devUser struct {
	Sub, Tenant, App, TokenUse string
	TTL                        time.Duration
	KeyFile, ConfigPath        string
	// CreateKey lets mint create a missing key file; without it a missing
	// key is an error, since a new key signs tokens no running gateway
	// accepts (another HOME, a container, a gateway not started yet).
	CreateKey bool
	// KeyWait is how long mint waits for a missing key file to appear
	// (a gateway started a moment ago, as the README's recipes do,
	// creates it at start); 0: not at all.
	KeyWait time.Duration
}

// flags declares the dev user's flags on fs; required leaves sub, tenant
// and app empty (`gateway token`), otherwise they default to the README's
// alice of contoso's support-assistant (`gateway chat`).
func (u *devUser) flags(fs *flag.FlagSet, getenv func(string) string, required bool) {
	sub, tenant, app, req := "alice", "contoso", "support-assistant", ""
	if required {
		sub, tenant, app, req = "", "", "", " (required)"
	}
	fs.StringVar(&u.Sub, "sub", sub, "the user's sub"+req)
	fs.StringVar(&u.Tenant, "tenant", tenant, "the user's tenant"+req)
	fs.StringVar(&u.App, "app", app, "the app: its first client id signs the token"+req)
	fs.DurationVar(&u.TTL, "ttl", time.Hour, "token lifetime")
	fs.StringVar(&u.TokenUse, "token-use", "access", "access or id")
	fs.StringVar(&u.KeyFile, "dev-key-file", envOr(getenv, "JETWAY_DEV_KEY_FILE", defaultDevKeyFile(getenv)), "the dev issuer's key file (JETWAY_DEV_KEY_FILE)")
	fs.StringVar(&u.ConfigPath, "config", getenv("JETWAY_CONFIG"), "tenants file (JETWAY_CONFIG)")
}

// mint signs a token with the dev issuer's key, the one a dev-mode gateway
// sharing the key file verifies with.
func (u *devUser) mint(getenv func(string) string) (string, error) {
	if getenv("JETWAY_AUTH_ISSUER") != "" {
		return "", fmt.Errorf("JETWAY_AUTH_ISSUER is set: tokens come from that issuer, not the dev issuer")
	}
	cfg, err := loadConfig(u.ConfigPath)
	if err != nil {
		return "", err
	}
	t, a, ok := cfg.App(u.Tenant, u.App)
	if t == nil {
		return "", fmt.Errorf("no tenant %q in the tenants file", u.Tenant)
	}
	if !ok || len(a.ClientIDs) == 0 {
		return "", fmt.Errorf("no app %q in tenant %q", u.App, u.Tenant)
	}
	if !u.CreateKey && !waitForFile(u.KeyFile, u.KeyWait) {
		return "", fmt.Errorf("no dev issuer key at %s: a dev-mode gateway creates it when it starts and verifies "+
			"with it; start the gateway first with the same HOME (or JETWAY_DEV_KEY_FILE), point --dev-key-file at its key, "+
			"or pass --create-key to make a new one", absPath(u.KeyFile))
	}
	dev, err := auth.LoadOrCreateDevIssuer(u.KeyFile, devIssuerName)
	if err != nil {
		return "", err
	}
	return dev.Mint(auth.MintOptions{Subject: u.Sub, Username: u.Sub, Tenant: u.Tenant, ClientID: a.ClientIDs[0],
		TokenUse: u.TokenUse, TTL: u.TTL})
}

// keyPoll is how often waitForFile looks.
const keyPoll = 100 * time.Millisecond

// waitForFile reports whether path exists, looking for up to wait.
func waitForFile(path string, wait time.Duration) bool {
	deadline := time.Now().Add(wait)
	for {
		_, err := os.Stat(path)
		if !errors.Is(err, os.ErrNotExist) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(keyPoll) // the gateway writes the file when it starts: nothing to wait on but the file system
	}
}

// absPath is path made absolute for a message, or path as it is.
func absPath(path string) string {
	if abs, err := filepath.Abs(path); err == nil {
		return abs
	}
	return path
}

func envOr(getenv func(string) string, key, def string) string {
	if v := getenv(key); v != "" {
		return v
	}
	return def
}

// tables creates every DynamoDB table Jetway uses, idempotently, at
// AWS_ENDPOINT_URL_DYNAMODB, or in real AWS with --aws only.
func tables(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	fs := flag.NewFlagSet("gateway tables create", flag.ContinueOnError)
	quotaTable := fs.String("quota-table", envOr(getenv, "JETWAY_QUOTA_TABLE", "jetway-quota"), "quota table (JETWAY_QUOTA_TABLE)")
	cacheTable := fs.String("cache-table", envOr(getenv, "JETWAY_CACHE_TABLE", "jetway-cache"), "cache table (JETWAY_CACHE_TABLE)")
	requestsTable := fs.String("requests-table", envOr(getenv, "JETWAY_REQUESTS_TABLE", "jetway-requests"), "requests table (JETWAY_REQUESTS_TABLE)")
	membersTable := fs.String("members-table", envOr(getenv, "JETWAY_MEMBERS_TABLE", "jetway-members"), "fleet members table (JETWAY_MEMBERS_TABLE)")
	configTable := fs.String("config-table", envOr(getenv, "JETWAY_CONFIG_TABLE", "jetway-config"), "config table (JETWAY_CONFIG_TABLE)")
	region := fs.String("region", envOr(getenv, "AWS_REGION", "us-east-1"), "AWS region (AWS_REGION)")
	realAWS := fs.Bool("aws", false, "create the tables in real AWS (the account of the SDK's credentials) when no AWS_ENDPOINT_URL_DYNAMODB is set")
	if len(args) == 0 || args[0] != "create" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
			return parseFlags(fs, args, stdout) // prints the flags, flag.ErrHelp
		}
		return fmt.Errorf("usage: gateway tables create [--quota-table name] [--requests-table name] [--cache-table name] [--members-table name] [--config-table name] (see gateway tables -h)")
	}
	if err := parseFlags(fs, args[1:], stdout); err != nil {
		return err
	}
	// The target is said before anything is created, and real AWS is only
	// ever the target when asked for.
	endpoint := envOr(getenv, "AWS_ENDPOINT_URL_DYNAMODB", getenv("AWS_ENDPOINT_URL"))
	switch {
	case endpoint != "":
		fmt.Fprintf(stdout, "creating tables at %s (AWS_ENDPOINT_URL_DYNAMODB), region %s\n", endpoint, *region)
	case *realAWS:
		fmt.Fprintf(stdout, "creating tables in real AWS DynamoDB, region %s, in the account of the SDK's credentials\n", *region)
	default:
		return fmt.Errorf("tables create: AWS_ENDPOINT_URL_DYNAMODB is not set, so the tables would be created in real AWS "+
			"(region %s); point AWS_ENDPOINT_URL_DYNAMODB at a local DynamoDB (for example http://127.0.0.1:8000), "+
			"or pass --aws to create them in AWS", *region)
	}
	cfg, err := awsconfig.LoadDefaultConfig(ctx, awsconfig.WithRegion(*region))
	if err != nil {
		return fmt.Errorf("aws config: %w", err)
	}
	client := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
		if endpoint != "" {
			o.BaseEndpoint = &endpoint
		}
	})
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for _, t := range []struct {
		name   string
		create func(context.Context, *dynamodb.Client, string) error
	}{{*quotaTable, quota.CreateTable}, {*requestsTable, stream.CreateTable}, {*cacheTable, router.CreateCacheTable},
		{*membersTable, fleet.CreateTable}, {*configTable, configstore.CreateTable}} {
		if err := t.create(ctx, client, t.name); err != nil {
			return err // it names the table and the step
		}
		fmt.Fprintf(stdout, "table %s ready\n", t.name)
	}
	return nil
}

// usage prints the local usage report.
func usage(args []string, getenv func(string) string, stdout io.Writer) error {
	flags := flag.NewFlagSet("gateway usage", flag.ContinueOnError)
	dir := flags.String("dir", envOr(getenv, "JETWAY_USAGE_DIR", "usage"), "usage records directory (JETWAY_USAGE_DIR)")
	since := daysDuration(24 * time.Hour)
	flags.Var(&since, "since", "how far back: a Go duration (90m, 24h) or whole days (7d)")
	by := flags.String("by", "tenant,app,model", "group by any of tenant, app, model, user, door, placement, profile (application inference profile), tier")
	if err := parseFlags(flags, args, stdout); err != nil {
		return err
	}
	if _, err := os.Stat(*dir); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("usage: no usage records at %s: the gateway writes them to JETWAY_USAGE_DIR (default ./usage, "+
			"under the directory it was started in); run this there, or point --dir or JETWAY_USAGE_DIR at them", absPath(*dir))
	}
	var groups []string
	for _, g := range strings.Split(*by, ",") {
		if g = strings.TrimSpace(g); g != "" {
			groups = append(groups, g)
		}
	}
	return telemetry.Report(stdout, telemetry.ReportOptions{Dir: *dir, Since: time.Duration(since), By: groups})
}

// daysDuration is a flag's duration that also takes whole days ("7d"),
// which time.ParseDuration does not.
type daysDuration time.Duration

func (d *daysDuration) Set(v string) error {
	if n, ok := strings.CutSuffix(v, "d"); ok {
		days, err := strconv.Atoi(n)
		if err != nil {
			return fmt.Errorf("%q: want a duration such as 24h or whole days such as 7d", v)
		}
		*d = daysDuration(time.Duration(days) * 24 * time.Hour)
		return nil
	}
	p, err := time.ParseDuration(v)
	if err != nil {
		return fmt.Errorf("%q: want a duration such as 24h or whole days such as 7d", v)
	}
	*d = daysDuration(p)
	return nil
}

func (d *daysDuration) String() string { return time.Duration(*d).String() }

// Get makes parseFlags refuse a negative value, as for every duration.
func (d *daysDuration) Get() any { return time.Duration(*d) }
