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
	"strings"
	"time"

	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/jetway-gateway/jetway/internal/auth"
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
	dev, err := auth.LoadOrCreateDevIssuer(u.KeyFile, devIssuerName)
	if err != nil {
		return "", err
	}
	return dev.Mint(auth.MintOptions{Subject: u.Sub, Username: u.Sub, Tenant: u.Tenant, ClientID: a.ClientIDs[0],
		TokenUse: u.TokenUse, TTL: u.TTL})
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

// tables creates every DynamoDB table Jetway uses, idempotently, against
// whatever endpoint the SDK is configured for (AWS_ENDPOINT_URL_DYNAMODB).
func tables(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	fs := flag.NewFlagSet("gateway tables create", flag.ContinueOnError)
	quotaTable := fs.String("quota-table", envOr(getenv, "JETWAY_QUOTA_TABLE", "jetway-quota"), "quota table (JETWAY_QUOTA_TABLE)")
	cacheTable := fs.String("cache-table", envOr(getenv, "JETWAY_CACHE_TABLE", "jetway-cache"), "cache table (JETWAY_CACHE_TABLE)")
	requestsTable := fs.String("requests-table", envOr(getenv, "JETWAY_REQUESTS_TABLE", "jetway-requests"), "requests table (JETWAY_REQUESTS_TABLE)")
	membersTable := fs.String("members-table", envOr(getenv, "JETWAY_MEMBERS_TABLE", "jetway-members"), "fleet members table (JETWAY_MEMBERS_TABLE)")
	region := fs.String("region", envOr(getenv, "AWS_REGION", "us-east-1"), "AWS region (AWS_REGION)")
	if len(args) == 0 || args[0] != "create" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
			return parseFlags(fs, args, stdout) // prints the flags, flag.ErrHelp
		}
		return fmt.Errorf("usage: gateway tables create [--quota-table name] [--requests-table name] [--cache-table name] [--members-table name] (see gateway tables -h)")
	}
	if err := parseFlags(fs, args[1:], stdout); err != nil {
		return err
	}
	cfg, err := awsconfig.LoadDefaultConfig(ctx, awsconfig.WithRegion(*region))
	if err != nil {
		return fmt.Errorf("aws config: %w", err)
	}
	client := dynamodb.NewFromConfig(cfg)
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for _, t := range []struct {
		name   string
		create func(context.Context, *dynamodb.Client, string) error
	}{{*quotaTable, quota.CreateTable}, {*requestsTable, stream.CreateTable}, {*cacheTable, router.CreateCacheTable},
		{*membersTable, fleet.CreateTable}} {
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
	since := flags.Duration("since", 24*time.Hour, "how far back")
	by := flags.String("by", "tenant,app,model", "group by any of tenant, app, model")
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
	return telemetry.Report(stdout, telemetry.ReportOptions{Dir: *dir, Since: *since, By: groups})
}
