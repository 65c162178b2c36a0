package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-exec/tfexec"
)

// tree makes a Terraform tree with envs/<env> holding the given files and
// returns its root.
func tree(t *testing.T, env string, files ...string) string {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, "envs", env)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("# test\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func noEnv(string) string { return "" }

func TestParseArgs(t *testing.T) {
	tests := []struct {
		args    []string
		want    options
		wantErr string
	}{
		{args: []string{"--env", "dev"}, want: options{command: "deploy", env: "dev", root: defaultRoot}},
		{args: []string{"deploy", "--env", "dev", "--approve"}, want: options{command: "deploy", env: "dev", root: defaultRoot, approve: true}},
		{args: []string{"plan", "--env=prod", "--var-file", "a.tfvars", "--var-file", "b.tfvars", "--target", "module.jetway.module.ecr"},
			want: options{command: "plan", env: "prod", root: defaultRoot, varFiles: []string{"a.tfvars", "b.tfvars"}, targets: []string{"module.jetway.module.ecr"}}},
		{args: []string{"outputs", "--env", "dev", "--json", "--root", "x"}, want: options{command: "outputs", env: "dev", root: "x", json: true}},
		{args: []string{"destroy", "--env", "dev", "--confirm", "dev"}, want: options{command: "destroy", env: "dev", root: defaultRoot, confirm: "dev"}},
		{args: []string{"plan", "--env", "dev", "--terraform", "/opt/tf", "--backend-config", "b.hcl"},
			want: options{command: "plan", env: "dev", root: defaultRoot, terraform: "/opt/tf", backendConfig: "b.hcl"}},

		{args: []string{"deploy"}, wantErr: "--env is required"},
		{args: []string{"ship", "--env", "dev"}, wantErr: `unknown command "ship"`},
		{args: []string{"plan", "--env", "../prod"}, wantErr: "not an environment name"},
		{args: []string{"plan", "--env", "dev", "--approve"}, wantErr: "--approve only applies to deploy"},
		{args: []string{"destroy", "--env", "dev"}, wantErr: "--confirm dev"},
		{args: []string{"destroy", "--env", "prod", "--confirm", "dev"}, wantErr: "--confirm prod"},
		{args: []string{"deploy", "--env", "dev", "--confirm", "dev"}, wantErr: "--confirm only applies to destroy"},
		{args: []string{"plan", "--env", "dev", "--json"}, wantErr: "--json only applies to outputs"},
		{args: []string{"outputs", "--env", "dev", "--target", "x"}, wantErr: "--target does not apply"},
		{args: []string{"plan", "--env", "dev", "extra"}, wantErr: `unexpected argument "extra"`},
		{args: []string{"plan", "--bogus"}, wantErr: "flag provided but not defined"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			got, err := parseArgs(tt.args, io.Discard)
			if tt.wantErr != "" {
				if err == nil || !errors.Is(err, errUsage) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want a usage error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestPlanSteps(t *testing.T) {
	root := tree(t, "dev", "backend.hcl", "terraform.tfvars")
	extra := filepath.Join(t.TempDir(), "extra.tfvars")
	if err := os.WriteFile(extra, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "envs", "dev")
	backend := filepath.Join(dir, "backend.hcl")
	tfvars := filepath.Join(dir, "terraform.tfvars")
	planFile := filepath.Join(dir, "dev.tfplan")
	initStep := step{Kind: stepInit, Dir: dir, BackendConfig: backend}

	tests := []struct {
		name string
		o    options
		want []step
	}{
		{"deploy plans and stops", options{command: cmdDeploy, env: "dev", root: root},
			[]step{initStep, {Kind: stepPlan, Dir: dir, VarFiles: []string{tfvars}, PlanFile: planFile}}},
		{"deploy --approve applies the saved plan", options{command: cmdDeploy, env: "dev", root: root, approve: true, varFiles: []string{extra}, targets: []string{"module.jetway.module.ecr"}},
			[]step{initStep,
				{Kind: stepPlan, Dir: dir, VarFiles: []string{tfvars, extra}, Targets: []string{"module.jetway.module.ecr"}, PlanFile: planFile},
				{Kind: stepApply, Dir: dir, PlanFile: planFile, ApplyIfChanged: true}}},
		{"plan saves nothing", options{command: cmdPlan, env: "dev", root: root},
			[]step{initStep, {Kind: stepPlan, Dir: dir, VarFiles: []string{tfvars}}}},
		{"outputs", options{command: cmdOutputs, env: "dev", root: root},
			[]step{initStep, {Kind: stepOutput, Dir: dir}}},
		{"destroy", options{command: cmdDestroy, env: "dev", root: root, confirm: "dev"},
			[]step{initStep, {Kind: stepDestroy, Dir: dir, VarFiles: []string{tfvars}}}},
		{"explicit backend config", options{command: cmdOutputs, env: "dev", root: root, backendConfig: extra},
			[]step{{Kind: stepInit, Dir: dir, BackendConfig: extra}, {Kind: stepOutput, Dir: dir}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := planSteps(tt.o)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("steps:\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestPlanStepsNeedTheirFiles(t *testing.T) {
	tests := []struct {
		name    string
		root    string
		o       options
		wantErr string
	}{
		{"no environment", tree(t, "dev", "backend.hcl", "terraform.tfvars"), options{command: cmdPlan, env: "prod"}, `no environment "prod"`},
		{"no backend.hcl", tree(t, "dev", "terraform.tfvars"), options{command: cmdPlan, env: "dev"}, "copy backend.hcl.example to backend.hcl"},
		{"no terraform.tfvars", tree(t, "dev", "backend.hcl"), options{command: cmdDeploy, env: "dev"}, "copy terraform.tfvars.example to terraform.tfvars"},
		{"no extra var file", tree(t, "dev", "backend.hcl", "terraform.tfvars"), options{command: cmdPlan, env: "dev", varFiles: []string{"/nonexistent.tfvars"}}, "/nonexistent.tfvars not found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.o.root = tt.root
			_, err := planSteps(tt.o)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want %q", err, tt.wantErr)
			}
		})
	}
	// outputs only reads state: it needs no tfvars.
	if _, err := planSteps(options{command: cmdOutputs, env: "dev", root: tree(t, "dev", "backend.hcl")}); err != nil {
		t.Errorf("outputs without terraform.tfvars: %v", err)
	}
}

func TestTfexecOptions(t *testing.T) {
	s := step{BackendConfig: "/e/backend.hcl", VarFiles: []string{"/e/terraform.tfvars", "/x.tfvars"}, Targets: []string{"module.a"}, PlanFile: "/e/dev.tfplan"}
	if got, want := initOptions(s), []tfexec.InitOption{tfexec.BackendConfig("/e/backend.hcl"), tfexec.Upgrade(false)}; !reflect.DeepEqual(got, want) {
		t.Errorf("init options %#v, want %#v", got, want)
	}
	wantPlan := []tfexec.PlanOption{tfexec.VarFile("/e/terraform.tfvars"), tfexec.VarFile("/x.tfvars"), tfexec.Target("module.a"), tfexec.Out("/e/dev.tfplan")}
	if got := planOptions(s); !reflect.DeepEqual(got, wantPlan) {
		t.Errorf("plan options %#v, want %#v", got, wantPlan)
	}
	if got := planOptions(step{VarFiles: []string{"/v"}}); !reflect.DeepEqual(got, []tfexec.PlanOption{tfexec.VarFile("/v")}) {
		t.Errorf("plan without a plan file: %#v", got)
	}
	if got, want := applyOptions(s), []tfexec.ApplyOption{tfexec.DirOrPlan("/e/dev.tfplan")}; !reflect.DeepEqual(got, want) {
		t.Errorf("apply options %#v, want %#v (a saved plan takes no var files)", got, want)
	}
	wantDestroy := []tfexec.DestroyOption{tfexec.VarFile("/e/terraform.tfvars"), tfexec.VarFile("/x.tfvars"), tfexec.Target("module.a")}
	if got := destroyOptions(s); !reflect.DeepEqual(got, wantDestroy) {
		t.Errorf("destroy options %#v, want %#v", got, wantDestroy)
	}
}

// recorder is a terraform that records the calls and their options.
type recorder struct {
	calls   []string
	opts    map[string]any
	changed bool
	outputs map[string]tfexec.OutputMeta
	failOn  string
}

func (r *recorder) record(name string, opts any) error {
	r.calls = append(r.calls, name)
	if r.opts == nil {
		r.opts = map[string]any{}
	}
	r.opts[name] = opts
	if r.failOn == name {
		return errors.New(name + " failed")
	}
	return nil
}

func (r *recorder) Init(_ context.Context, opts ...tfexec.InitOption) error {
	return r.record("init", opts)
}

func (r *recorder) Plan(_ context.Context, opts ...tfexec.PlanOption) (bool, error) {
	return r.changed, r.record("plan", opts)
}

func (r *recorder) Apply(_ context.Context, opts ...tfexec.ApplyOption) error {
	return r.record("apply", opts)
}

func (r *recorder) Output(_ context.Context, opts ...tfexec.OutputOption) (map[string]tfexec.OutputMeta, error) {
	return r.outputs, r.record("output", opts)
}

func (r *recorder) Destroy(_ context.Context, opts ...tfexec.DestroyOption) error {
	return r.record("destroy", opts)
}

// runRecorded runs the command against a recorder instead of terraform, with
// a fake binary on an explicit path so the lookup succeeds.
func runRecorded(t *testing.T, rec *recorder, root string, args ...string) (stdout, stderr string, dir string, err error) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "terraform")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	var out, errw bytes.Buffer
	args = append(args, "--root", root, "--terraform", bin)
	err = runWith(context.Background(), args, noEnv, &out, &errw, func(d, b string, _, _ io.Writer) (terraform, error) {
		if b != bin {
			t.Errorf("binary %q, want %q", b, bin)
		}
		dir = d
		return rec, nil
	})
	return out.String(), errw.String(), dir, err
}

func TestDeployWithoutApproveNeverApplies(t *testing.T) {
	root := tree(t, "dev", "backend.hcl", "terraform.tfvars")
	rec := &recorder{changed: true}
	_, stderr, dir, err := runRecorded(t, rec, root, "deploy", "--env", "dev")
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(root, "envs", "dev"); dir != want {
		t.Errorf("terraform runs in %s, want %s", dir, want)
	}
	if got := strings.Join(rec.calls, ","); got != "init,plan" {
		t.Errorf("calls %s, want init,plan", got)
	}
	if !strings.Contains(stderr, "nothing applied") || !strings.Contains(stderr, "--approve") {
		t.Errorf("stderr does not say how to apply:\n%s", stderr)
	}
}

func TestDeployApproveAppliesThePlanItMade(t *testing.T) {
	root := tree(t, "dev", "backend.hcl", "terraform.tfvars")
	rec := &recorder{changed: true}
	if _, _, _, err := runRecorded(t, rec, root, "deploy", "--env", "dev", "--approve"); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(rec.calls, ","); got != "init,plan,apply" {
		t.Fatalf("calls %s, want init,plan,apply", got)
	}
	planFile := filepath.Join(root, "envs", "dev", "dev.tfplan")
	if !reflect.DeepEqual(rec.opts["apply"], []tfexec.ApplyOption{tfexec.DirOrPlan(planFile)}) {
		t.Errorf("apply options %#v, want the saved plan %s", rec.opts["apply"], planFile)
	}
	planOpts := rec.opts["plan"].([]tfexec.PlanOption)
	if !reflect.DeepEqual(planOpts[len(planOpts)-1], tfexec.Out(planFile)) {
		t.Errorf("plan does not save to %s: %#v", planFile, planOpts)
	}

	// No changes: nothing to apply.
	rec = &recorder{changed: false}
	_, stderr, _, err := runRecorded(t, rec, root, "deploy", "--env", "dev", "--approve")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(rec.calls, ","); got != "init,plan" {
		t.Errorf("calls %s, want init,plan when there are no changes", got)
	}
	if !strings.Contains(stderr, "no changes") {
		t.Errorf("stderr does not say there were no changes:\n%s", stderr)
	}
}

func TestFailedStepStops(t *testing.T) {
	root := tree(t, "dev", "backend.hcl", "terraform.tfvars")
	rec := &recorder{changed: true, failOn: "plan"}
	_, _, _, err := runRecorded(t, rec, root, "deploy", "--env", "dev", "--approve")
	if err == nil || !strings.Contains(err.Error(), "terraform plan: plan failed") {
		t.Fatalf("err = %v", err)
	}
	if got := strings.Join(rec.calls, ","); got != "init,plan" {
		t.Errorf("calls %s: apply must not run after a failed plan", got)
	}
}

func TestDestroy(t *testing.T) {
	root := tree(t, "prod", "backend.hcl", "terraform.tfvars")
	rec := &recorder{}
	if _, _, _, err := runRecorded(t, rec, root, "destroy", "--env", "prod", "--confirm", "prod"); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(rec.calls, ","); got != "init,destroy" {
		t.Errorf("calls %s, want init,destroy", got)
	}
	want := []tfexec.DestroyOption{tfexec.VarFile(filepath.Join(root, "envs", "prod", "terraform.tfvars"))}
	if !reflect.DeepEqual(rec.opts["destroy"], want) {
		t.Errorf("destroy options %#v, want %#v", rec.opts["destroy"], want)
	}

	rec = &recorder{}
	if _, _, _, err := runRecorded(t, rec, root, "destroy", "--env", "prod"); !errors.Is(err, errUsage) {
		t.Errorf("destroy without --confirm: err = %v", err)
	}
	if len(rec.calls) != 0 {
		t.Errorf("destroy without --confirm ran %v", rec.calls)
	}
}

func TestOutputs(t *testing.T) {
	root := tree(t, "dev", "backend.hcl")
	outputs := map[string]tfexec.OutputMeta{
		"websocket_url":  {Value: json.RawMessage(`"wss://jetway.dev.example.com/v1/ws"`)},
		"app_client_ids": {Value: json.RawMessage(`{"contoso/support-assistant":"abc"}`)},
		"secret":         {Sensitive: true, Value: json.RawMessage(`"hunter2"`)},
	}
	stdout, _, _, err := runRecorded(t, &recorder{outputs: outputs}, root, "outputs", "--env", "dev")
	if err != nil {
		t.Fatal(err)
	}
	want := "app_client_ids = {\"contoso/support-assistant\":\"abc\"}\nsecret = \"(sensitive)\"\nwebsocket_url = \"wss://jetway.dev.example.com/v1/ws\"\n"
	if stdout != want {
		t.Errorf("outputs:\n%s\nwant:\n%s", stdout, want)
	}

	stdout, _, _, err = runRecorded(t, &recorder{outputs: outputs}, root, "outputs", "--env", "dev", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatalf("--json output is not JSON: %v\n%s", err, stdout)
	}
	if got["secret"] != "(sensitive)" || got["websocket_url"] != "wss://jetway.dev.example.com/v1/ws" {
		t.Errorf("--json output: %v", got)
	}
}

func TestNoTerraformInstalled(t *testing.T) {
	t.Setenv("PATH", t.TempDir()) // nothing on PATH
	root := tree(t, "dev", "backend.hcl", "terraform.tfvars")
	var stderr bytes.Buffer
	err := run(context.Background(), []string{"plan", "--env", "dev", "--root", root}, noEnv, io.Discard, &stderr)
	if !errors.Is(err, errNoTerraform) {
		t.Fatalf("err = %v, want errNoTerraform", err)
	}
	for _, want := range []string{"install Terraform", "--terraform", binaryEnv} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}

	// An explicit path that does not exist fails the same way.
	getenv := func(k string) string {
		if k == binaryEnv {
			return "/nonexistent/terraform"
		}
		return ""
	}
	err = run(context.Background(), []string{"plan", "--env", "dev", "--root", root}, getenv, io.Discard, io.Discard)
	if !errors.Is(err, errNoTerraform) || !strings.Contains(err.Error(), "/nonexistent/terraform") {
		t.Errorf("err = %v, want errNoTerraform naming the path", err)
	}
}

// TestCommandLines runs the real tfexec adapter against a stand-in binary
// that records its arguments, so the exact terraform command lines are checked.
func TestCommandLines(t *testing.T) {
	root := tree(t, "dev", "backend.hcl", "terraform.tfvars")
	dir := filepath.Join(root, "envs", "dev")
	log := filepath.Join(t.TempDir(), "calls.log")
	bin := filepath.Join(t.TempDir(), "terraform")
	script := `#!/bin/sh
echo "$PWD|$*" >> "` + log + `"
case "$1" in
version) echo '{"terraform_version":"1.9.8","platform":"linux_amd64","provider_selections":{},"terraform_outdated":false}' ;;
plan) exit 2 ;;  # -detailed-exitcode: there are changes
output) echo '{"websocket_url":{"sensitive":false,"type":"string","value":"wss://x/v1/ws"}}' ;;
esac
exit 0
`
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}

	var stdout bytes.Buffer
	err := run(context.Background(), []string{"deploy", "--env", "dev", "--approve", "--root", root, "--target", "module.jetway.module.ecr"},
		func(k string) string {
			if k == binaryEnv {
				return bin
			}
			return ""
		}, &stdout, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if err := run(context.Background(), []string{"outputs", "--env", "dev", "--root", root, "--terraform", bin}, noEnv, &stdout, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stdout.String(), `websocket_url = "wss://x/v1/ws"`) {
		t.Errorf("outputs not printed:\n%s", stdout.String())
	}

	raw, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		wd, args, _ := strings.Cut(l, "|")
		if wd != dir {
			t.Errorf("terraform ran in %s, want %s", wd, dir)
		}
		if !strings.HasPrefix(args, "version") {
			lines = append(lines, args)
		}
	}
	planFile := filepath.Join(dir, "dev.tfplan")
	want := []string{
		"init -no-color -input=false -backend=true -get=true -upgrade=false -backend-config=" + filepath.Join(dir, "backend.hcl"),
		"plan -no-color -input=false -detailed-exitcode -lock-timeout=0s -out=" + planFile + " -var-file=" + filepath.Join(dir, "terraform.tfvars") +
			" -lock=true -parallelism=10 -refresh=true -target=module.jetway.module.ecr",
		"apply -no-color -auto-approve -input=false -lock=true -parallelism=10 -refresh=true " + planFile,
		"init -no-color -input=false -backend=true -get=true -upgrade=false -backend-config=" + filepath.Join(dir, "backend.hcl"),
		"output -no-color -json",
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("command lines:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
}
