package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// errUsage marks errors in the command line itself (exit status 2).
var errUsage = errors.New("usage")

// Command names.
const (
	cmdPlan    = "plan"
	cmdDeploy  = "deploy"
	cmdOutputs = "outputs"
	cmdDestroy = "destroy"
)

// defaultRoot is the Terraform tree, relative to the repository root.
const defaultRoot = "deploy/terraform"

// binaryEnv names the variable that may point at the terraform binary.
const binaryEnv = "TERRAFORM_BINARY"

const usageText = `usage: deploy [command] --env NAME [flags]

commands:
  plan      init, then plan: show what would change
  deploy    init and plan (saved to envs/NAME/NAME.tfplan); with --approve, apply that plan
            (the default command)
  outputs   init, then print the environment's outputs
  destroy   init, then destroy every resource of the environment (needs --confirm NAME)

flags:
`

// options is the parsed command line.
type options struct {
	command       string
	env           string
	root          string   // the Terraform tree (holds envs/)
	varFiles      []string // extra -var-file values, after the default
	backendConfig string
	targets       []string
	approve       bool
	confirm       string
	json          bool
	terraform     string // explicit binary
}

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string { return strings.Join(*s, ",") }

func (s *stringList) Set(v string) error {
	*s = append(*s, v)
	return nil
}

var envName = regexp.MustCompile(`^[a-z][a-z0-9-]*$`)

// parseArgs reads the command line. Errors wrap errUsage.
func parseArgs(args []string, stderr io.Writer) (options, error) {
	o := options{command: cmdDeploy}
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		o.command, args = args[0], args[1:]
	}
	fs := flag.NewFlagSet("deploy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usageText)
		fs.PrintDefaults()
	}
	var varFiles, targets stringList
	fs.StringVar(&o.env, "env", "", "environment: a directory under ROOT/envs (dev, prod)")
	fs.StringVar(&o.root, "root", defaultRoot, "the Terraform tree holding envs/ and modules/")
	fs.Var(&varFiles, "var-file", "extra variable file, after envs/NAME/terraform.tfvars (repeatable)")
	fs.StringVar(&o.backendConfig, "backend-config", "", "backend settings (default envs/NAME/backend.hcl)")
	fs.Var(&targets, "target", "plan and apply only this resource or module (repeatable), e.g. module.jetway.module.ecr before the first image push")
	fs.BoolVar(&o.approve, "approve", false, "deploy: apply the plan just made")
	fs.StringVar(&o.confirm, "confirm", "", "destroy: the environment's name, typed again")
	fs.BoolVar(&o.json, "json", false, "outputs: print JSON")
	fs.StringVar(&o.terraform, "terraform", "", "terraform binary (default $"+binaryEnv+", else terraform on PATH)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return o, fmt.Errorf("%w: help requested", errUsage)
		}
		return o, fmt.Errorf("%w: %v", errUsage, err)
	}
	o.varFiles, o.targets = varFiles, targets
	if fs.NArg() > 0 {
		return o, fmt.Errorf("%w: unexpected argument %q (flags go after the command)", errUsage, fs.Arg(0))
	}
	switch o.command {
	case cmdPlan, cmdDeploy, cmdOutputs, cmdDestroy:
	default:
		return o, fmt.Errorf("%w: unknown command %q (plan, deploy, outputs, destroy)", errUsage, o.command)
	}
	if o.env == "" {
		return o, fmt.Errorf("%w: --env is required", errUsage)
	}
	if !envName.MatchString(o.env) {
		return o, fmt.Errorf("%w: --env %q is not an environment name", errUsage, o.env)
	}
	if o.approve && o.command != cmdDeploy {
		return o, fmt.Errorf("%w: --approve only applies to deploy", errUsage)
	}
	if o.confirm != "" && o.command != cmdDestroy {
		return o, fmt.Errorf("%w: --confirm only applies to destroy", errUsage)
	}
	if o.command == cmdDestroy && o.confirm != o.env {
		return o, fmt.Errorf("%w: destroy removes every resource of %q; repeat its name with --confirm %s", errUsage, o.env, o.env)
	}
	if o.json && o.command != cmdOutputs {
		return o, fmt.Errorf("%w: --json only applies to outputs", errUsage)
	}
	if len(o.targets) > 0 && o.command == cmdOutputs {
		return o, fmt.Errorf("%w: --target does not apply to outputs", errUsage)
	}
	return o, nil
}

// stepKind is one terraform subcommand.
type stepKind string

const (
	stepInit    stepKind = "init"
	stepPlan    stepKind = "plan"
	stepApply   stepKind = "apply"
	stepOutput  stepKind = "output"
	stepDestroy stepKind = "destroy"
)

// step is one terraform invocation, fully decided: every path is absolute,
// because terraform runs with the environment's directory as its working
// directory.
type step struct {
	Kind          stepKind
	Dir           string   // working directory: the environment root
	BackendConfig string   // init
	VarFiles      []string // plan, destroy
	Targets       []string // plan, destroy
	PlanFile      string   // plan writes it, apply applies it
	// ApplyIfChanged makes apply run only when the plan before it found changes.
	ApplyIfChanged bool
}

// planSteps decides what to run for o, checking the files it needs on the way.
func planSteps(o options) ([]step, error) {
	root, err := filepath.Abs(o.root)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(root, "envs", o.env)
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("no environment %q: %s is not a directory (run deploy from the repository root, or pass --root)", o.env, dir)
	}
	backend := o.backendConfig
	if backend == "" {
		backend = filepath.Join(dir, "backend.hcl")
	}
	if backend, err = existing(backend, "copy backend.hcl.example to backend.hcl and fill in the state bucket and lock table (see its README.md)"); err != nil {
		return nil, err
	}
	steps := []step{{Kind: stepInit, Dir: dir, BackendConfig: backend}}
	if o.command == cmdOutputs {
		return append(steps, step{Kind: stepOutput, Dir: dir}), nil
	}

	tfvars, err := existing(filepath.Join(dir, "terraform.tfvars"), "copy terraform.tfvars.example to terraform.tfvars and fill it in")
	if err != nil {
		return nil, err
	}
	varFiles := []string{tfvars}
	for _, f := range o.varFiles {
		abs, err := existing(f, "")
		if err != nil {
			return nil, err
		}
		varFiles = append(varFiles, abs)
	}

	switch o.command {
	case cmdPlan:
		steps = append(steps, step{Kind: stepPlan, Dir: dir, VarFiles: varFiles, Targets: o.targets})
	case cmdDeploy:
		planFile := filepath.Join(dir, o.env+".tfplan")
		steps = append(steps, step{Kind: stepPlan, Dir: dir, VarFiles: varFiles, Targets: o.targets, PlanFile: planFile})
		if o.approve {
			steps = append(steps, step{Kind: stepApply, Dir: dir, PlanFile: planFile, ApplyIfChanged: true})
		}
	case cmdDestroy:
		steps = append(steps, step{Kind: stepDestroy, Dir: dir, VarFiles: varFiles, Targets: o.targets})
	}
	return steps, nil
}

// existing returns the absolute path of a file that must exist.
func existing(path, hint string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	if fi, err := os.Stat(abs); err != nil || fi.IsDir() {
		if hint != "" {
			return "", fmt.Errorf("%s not found: %s", abs, hint)
		}
		return "", fmt.Errorf("%s not found", abs)
	}
	return abs, nil
}
