package main

import (
	"context"
	"flag"
	"fmt"
	"io"
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
	fs.SetOutput(stdout)
	sub := fs.String("sub", "", "the user's sub (required)")
	tenant := fs.String("tenant", "", "the user's tenant (required)")
	app := fs.String("app", "", "the app (required): its first client id signs the token")
	ttl := fs.Duration("ttl", time.Hour, "token lifetime")
	use := fs.String("token-use", "access", "access or id")
	keyFile := fs.String("dev-key-file", envOr(getenv, "JETWAY_DEV_KEY_FILE", defaultDevKeyFile(getenv)), "the dev issuer's key file (JETWAY_DEV_KEY_FILE)")
	cfgPath := fs.String("config", getenv("JETWAY_CONFIG"), "tenants file (JETWAY_CONFIG)")
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}
	if *sub == "" || *tenant == "" || *app == "" {
		return fmt.Errorf("token: --sub, --tenant and --app are required")
	}
	if getenv("JETWAY_AUTH_ISSUER") != "" {
		return fmt.Errorf("token: JETWAY_AUTH_ISSUER is set: tokens come from that issuer, not the dev issuer")
	}
	cfg, err := loadConfig(*cfgPath)
	if err != nil {
		return err
	}
	t, a, ok := cfg.App(*tenant, *app)
	if t == nil {
		return fmt.Errorf("token: no tenant %q in the tenants file", *tenant)
	}
	if !ok || len(a.ClientIDs) == 0 {
		return fmt.Errorf("token: no app %q in tenant %q", *app, *tenant)
	}
	dev, err := auth.LoadOrCreateDevIssuer(*keyFile, devIssuerName)
	if err != nil {
		return err
	}
	tok, err := dev.Mint(auth.MintOptions{Subject: *sub, Username: *sub, Tenant: *tenant, ClientID: a.ClientIDs[0],
		TokenUse: *use, TTL: *ttl})
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(stdout, tok)
	return err
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
	if len(args) == 0 || args[0] != "create" {
		return fmt.Errorf("usage: gateway tables create [--quota-table name] [--requests-table name] [--cache-table name] [--members-table name]")
	}
	fs := flag.NewFlagSet("gateway tables create", flag.ContinueOnError)
	fs.SetOutput(stdout)
	quotaTable := fs.String("quota-table", envOr(getenv, "JETWAY_QUOTA_TABLE", "jetway-quota"), "quota table (JETWAY_QUOTA_TABLE)")
	cacheTable := fs.String("cache-table", envOr(getenv, "JETWAY_CACHE_TABLE", "jetway-cache"), "cache table (JETWAY_CACHE_TABLE)")
	requestsTable := fs.String("requests-table", envOr(getenv, "JETWAY_REQUESTS_TABLE", "jetway-requests"), "requests table (JETWAY_REQUESTS_TABLE)")
	membersTable := fs.String("members-table", envOr(getenv, "JETWAY_MEMBERS_TABLE", "jetway-members"), "fleet members table (JETWAY_MEMBERS_TABLE)")
	region := fs.String("region", envOr(getenv, "AWS_REGION", "us-east-1"), "AWS region (AWS_REGION)")
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
	fs := flag.NewFlagSet("gateway usage", flag.ContinueOnError)
	fs.SetOutput(stdout)
	dir := fs.String("dir", envOr(getenv, "JETWAY_USAGE_DIR", "usage"), "usage records directory (JETWAY_USAGE_DIR)")
	since := fs.Duration("since", 24*time.Hour, "how far back")
	by := fs.String("by", "tenant,app,model", "group by any of tenant, app, model")
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}
	var groups []string
	for _, g := range strings.Split(*by, ",") {
		if g = strings.TrimSpace(g); g != "" {
			groups = append(groups, g)
		}
	}
	return telemetry.Report(stdout, telemetry.ReportOptions{Dir: *dir, Since: *since, By: groups})
}
