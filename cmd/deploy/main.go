// Command deploy plans, applies, shows and destroys one Jetway environment
// (deploy/terraform/envs/<env>) by driving the terraform CLI through
// github.com/hashicorp/terraform-exec.
//
//	deploy plan    --env dev              init, then plan
//	deploy deploy  --env dev              init, plan (saved); nothing is applied
//	deploy deploy  --env dev --approve    init, plan, then apply exactly that plan
//	deploy outputs --env dev [--json]     init, then print the outputs
//	deploy destroy --env dev --confirm dev
//
// The command may be left out: `deploy --env dev` is `deploy deploy --env dev`.
// deploy never installs terraform: it uses --terraform, $TERRAFORM_BINARY or
// the first terraform on PATH, and says so clearly when there is none.
//
// What to run is decided first, as a list of steps (plan.go); running them is
// a separate, small loop over an interface that *tfexec.Terraform satisfies
// (exec.go), so the steps are tested without terraform.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	switch {
	case err == nil:
	case errors.Is(err, errUsage):
		fmt.Fprintln(os.Stderr, "deploy:", err)
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "deploy:", err)
		os.Exit(1)
	}
}
