package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"go.uber.org/zap"

	"github.com/jetway-gateway/jetway/internal/config"
	"github.com/jetway-gateway/jetway/internal/configstore"
)

// configCommandTimeout bounds an import or an export.
const configCommandTimeout = 30 * time.Minute

// configCommand moves a tenants file into the config table and back:
//
//	gateway config import FILE   write its models, tenants, apps and user overrides (idempotent)
//	gateway config export        print the table's configuration as a tenants file
func configCommand(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	const usageLine = "usage: gateway config import FILE | gateway config export [--out FILE] (see gateway config -h)"
	fs := flag.NewFlagSet("gateway config", flag.ContinueOnError)
	table := fs.String("config-table", envOr(getenv, "JETWAY_CONFIG_TABLE", ""), "config table (JETWAY_CONFIG_TABLE)")
	region := fs.String("region", envOr(getenv, "AWS_REGION", "us-east-1"), "AWS region (AWS_REGION)")
	out := fs.String("out", "", "export: write the file here (default: stdout)")
	if len(args) == 0 || (args[0] != "import" && args[0] != "export") {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
			return parseFlags(fs, args, stdout)
		}
		return errors.New(usageLine)
	}
	verb := args[0]
	if err := parseFlags(fs, args[1:], stdout); err != nil {
		return err
	}
	if *table == "" {
		return errors.New("gateway config: no config table: set JETWAY_CONFIG_TABLE or --config-table")
	}
	ctx, cancel := context.WithTimeout(ctx, configCommandTimeout)
	defer cancel()
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx, awsconfig.WithRegion(*region))
	if err != nil {
		return fmt.Errorf("aws config: %w", err)
	}
	store := configstore.NewStore(dynamodb.NewFromConfig(awsCfg), *table)
	var file *config.Config
	if verb == "import" {
		if fs.NArg() != 1 {
			return errors.New(usageLine)
		}
		if file, err = config.Load(fs.Arg(0)); err != nil {
			return err // names the file, the path and the problem
		}
	}
	auth := config.Auth{}
	if file != nil {
		auth = file.Auth
	}
	a := configstore.NewApplier(store, auth, zap.NewNop(), configstore.ApplierOptions{})
	if err := a.Load(ctx); err != nil {
		return fmt.Errorf("config table %s: %w", *table, err)
	}
	if verb == "import" {
		r, err := configstore.NewService(a).Import(ctx, file)
		if err != nil {
			return fmt.Errorf("config table %s: %w", *table, err)
		}
		fmt.Fprintf(stdout, "imported %s into %s: %d created, %d replaced, %d unchanged\n", fs.Arg(0), *table, r.Created, r.Replaced, r.Unchanged)
		return nil
	}
	b, err := configstore.Export(a.Live().Load())
	if err != nil {
		return err
	}
	if *out == "" {
		_, err = stdout.Write(b)
		return err
	}
	return os.WriteFile(*out, b, 0o644)
}
