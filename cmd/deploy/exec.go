package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"

	"github.com/hashicorp/terraform-exec/tfexec"
)

// errNoTerraform means no terraform binary could be found.
var errNoTerraform = errors.New("no terraform binary found")

// terraform is what deploy needs from the CLI; *tfexec.Terraform implements it.
type terraform interface {
	Init(ctx context.Context, opts ...tfexec.InitOption) error
	Plan(ctx context.Context, opts ...tfexec.PlanOption) (bool, error)
	Apply(ctx context.Context, opts ...tfexec.ApplyOption) error
	Output(ctx context.Context, opts ...tfexec.OutputOption) (map[string]tfexec.OutputMeta, error)
	Destroy(ctx context.Context, opts ...tfexec.DestroyOption) error
}

// newTerraform opens the terraform CLI at bin for the working directory dir.
type newTerraform func(dir, bin string, stdout, stderr io.Writer) (terraform, error)

// newTfexec is the real newTerraform.
func newTfexec(dir, bin string, stdout, stderr io.Writer) (terraform, error) {
	tf, err := tfexec.NewTerraform(dir, bin)
	if err != nil {
		return nil, err
	}
	tf.SetStdout(stdout)
	tf.SetStderr(stderr)
	return tf, nil
}

// run is main without the process: it parses args, decides the steps and runs them.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	return runWith(ctx, args, getenv, stdout, stderr, newTfexec)
}

func runWith(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer, open newTerraform) error {
	o, err := parseArgs(args, stderr)
	if err != nil {
		return err
	}
	bin, err := findTerraform(o.terraform, getenv)
	if err != nil {
		return err
	}
	steps, err := planSteps(o)
	if err != nil {
		return err
	}
	tf, err := open(steps[0].Dir, bin, stdout, stderr)
	if err != nil {
		return fmt.Errorf("terraform: %w", err)
	}
	return execute(ctx, tf, steps, o, stdout, stderr)
}

// findTerraform returns the binary to run: explicit, from $TERRAFORM_BINARY,
// or the first terraform on PATH. It never downloads one.
func findTerraform(explicit string, getenv func(string) string) (string, error) {
	if explicit == "" {
		explicit = getenv(binaryEnv)
	}
	name := "terraform"
	if explicit != "" {
		name = explicit
	}
	path, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%w (looked for %q: %v): install Terraform >= 1.9 "+
			"(https://developer.hashicorp.com/terraform/install) and put it on PATH, "+
			"or pass --terraform /path/to/terraform or set %s", errNoTerraform, name, err, binaryEnv)
	}
	return path, nil
}

// execute runs the steps in order and stops at the first failure.
func execute(ctx context.Context, tf terraform, steps []step, o options, stdout, stderr io.Writer) error {
	changed := true
	for _, s := range steps {
		fmt.Fprintf(stderr, "==> terraform %s (%s)\n", s.Kind, s.Dir)
		switch s.Kind {
		case stepInit:
			if err := tf.Init(ctx, initOptions(s)...); err != nil {
				return fmt.Errorf("terraform init: %w", err)
			}
		case stepPlan:
			c, err := tf.Plan(ctx, planOptions(s)...)
			if err != nil {
				return fmt.Errorf("terraform plan: %w", err)
			}
			changed = c
			if !c {
				fmt.Fprintln(stderr, "==> no changes")
			} else if s.PlanFile != "" && !o.approve {
				fmt.Fprintf(stderr, "==> plan saved to %s; nothing applied. To apply, run again with --approve.\n", s.PlanFile)
			}
		case stepApply:
			if s.ApplyIfChanged && !changed {
				continue
			}
			if err := tf.Apply(ctx, applyOptions(s)...); err != nil {
				return fmt.Errorf("terraform apply: %w", err)
			}
			if err := os.Remove(s.PlanFile); err != nil && !errors.Is(err, os.ErrNotExist) {
				fmt.Fprintf(stderr, "==> applied; could not remove %s: %v\n", s.PlanFile, err)
			}
		case stepOutput:
			out, err := tf.Output(ctx)
			if err != nil {
				return fmt.Errorf("terraform output: %w", err)
			}
			if err := printOutputs(stdout, out, o.json); err != nil {
				return err
			}
		case stepDestroy:
			if err := tf.Destroy(ctx, destroyOptions(s)...); err != nil {
				return fmt.Errorf("terraform destroy: %w", err)
			}
		default:
			return fmt.Errorf("unknown step %q", s.Kind)
		}
	}
	return nil
}

// The tfexec options of each step. tfexec always adds -input=false and
// -no-color; init keeps the backend on (-backend=true) and never upgrades
// providers behind the lock file's back.

func initOptions(s step) []tfexec.InitOption {
	return []tfexec.InitOption{tfexec.BackendConfig(s.BackendConfig), tfexec.Upgrade(false)}
}

func planOptions(s step) []tfexec.PlanOption {
	var opts []tfexec.PlanOption
	for _, f := range s.VarFiles {
		opts = append(opts, tfexec.VarFile(f))
	}
	for _, t := range s.Targets {
		opts = append(opts, tfexec.Target(t))
	}
	if s.PlanFile != "" {
		opts = append(opts, tfexec.Out(s.PlanFile))
	}
	return opts
}

// applyOptions applies the saved plan: exactly what was shown, nothing re-planned.
func applyOptions(s step) []tfexec.ApplyOption {
	return []tfexec.ApplyOption{tfexec.DirOrPlan(s.PlanFile)}
}

func destroyOptions(s step) []tfexec.DestroyOption {
	var opts []tfexec.DestroyOption
	for _, f := range s.VarFiles {
		opts = append(opts, tfexec.VarFile(f))
	}
	for _, t := range s.Targets {
		opts = append(opts, tfexec.Target(t))
	}
	return opts
}

// printOutputs writes the outputs sorted by name, sensitive values masked.
func printOutputs(w io.Writer, out map[string]tfexec.OutputMeta, asJSON bool) error {
	names := make([]string, 0, len(out))
	for n := range out {
		names = append(names, n)
	}
	sort.Strings(names)
	if asJSON {
		m := make(map[string]json.RawMessage, len(out))
		for _, n := range names {
			m[n] = value(out[n])
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(m)
	}
	for _, n := range names {
		if _, err := fmt.Fprintf(w, "%s = %s\n", n, value(out[n])); err != nil {
			return err
		}
	}
	return nil
}

func value(m tfexec.OutputMeta) json.RawMessage {
	if m.Sensitive {
		return json.RawMessage(`"(sensitive)"`)
	}
	if len(m.Value) == 0 {
		return json.RawMessage("null")
	}
	return m.Value
}
