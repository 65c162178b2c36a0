package terraform

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/terraform-exec/tfexec"
)

// The real tools check what the HCL tests cannot: `terraform init`,
// `validate` and `plan -refresh=false` of every environment against the AWS
// provider's own resource schemas, and the assertions of the `terraform test`
// files (modules/jetway/tests). No registry is reachable from the test
// machines, so the AWS provider is the stand-in of check/standin (its
// schemas, no API calls), installed through a filesystem mirror.
const (
	awsProviderVersion = "6.25.0"
	openTofuModule     = "github.com/opentofu/opentofu@v1.12.6"
	// terraformTimeout bounds each terraform command.
	terraformTimeout = 5 * time.Minute
)

// offlineTerraform is a terraform (or tofu) binary, the stand-in provider in
// a mirror, and a copy of this tree to run them in.
type offlineTerraform struct {
	bin  string
	env  map[string]string
	tree string // copy of deploy/terraform (envs, modules)
}

var (
	offlineOnce sync.Once
	offline     *offlineTerraform
	offlineErr  error
)

// setUpOfflineTerraform builds the stand-in provider once per test binary.
func setUpOfflineTerraform(t *testing.T) *offlineTerraform {
	t.Helper()
	offlineOnce.Do(func() { offline, offlineErr = newOfflineTerraform() })
	if offlineErr != nil {
		t.Fatalf("set up terraform: %v", offlineErr)
	}
	return offline
}

func newOfflineTerraform() (*offlineTerraform, error) {
	bin, err := terraformBinary()
	if err != nil {
		return nil, err
	}
	// One directory for the whole test binary (t.TempDir would vanish with
	// the first test); removed by TestMain.
	w, err := os.MkdirTemp("", "jetway-terraform-")
	if err != nil {
		return nil, err
	}
	offlineDirs = append(offlineDirs, w)
	schema, err := filepath.Abs(filepath.Join("check", "schema-aws-"+awsProviderVersion+".json"))
	if err != nil {
		return nil, err
	}
	provider := filepath.Join(w, "terraform-provider-aws")
	if out, err := exec.Command("go", "build", "-o", provider, "./check/standin").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build the stand-in provider: %v\n%s", err, out)
	}
	raw, err := os.ReadFile(provider)
	if err != nil {
		return nil, err
	}
	for _, host := range []string{"registry.terraform.io", "registry.opentofu.org"} {
		dir := filepath.Join(w, "mirror", host, "hashicorp", "aws", awsProviderVersion, "linux_amd64")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(dir, "terraform-provider-aws_v"+awsProviderVersion), raw, 0o755); err != nil {
			return nil, err
		}
	}
	rc := fmt.Sprintf(`provider_installation {
  filesystem_mirror {
    path    = %q
    include = ["registry.terraform.io/hashicorp/aws", "registry.opentofu.org/hashicorp/aws"]
  }
  direct {
    exclude = ["registry.terraform.io/hashicorp/aws", "registry.opentofu.org/hashicorp/aws"]
  }
}
`, filepath.Join(w, "mirror"))
	rcPath := filepath.Join(w, "terraformrc.hcl")
	if err := os.WriteFile(rcPath, []byte(rc), 0o644); err != nil {
		return nil, err
	}
	tree := filepath.Join(w, "tree")
	for _, sub := range []string{"envs", "modules"} {
		if err := copyTree(sub, filepath.Join(tree, sub)); err != nil {
			return nil, err
		}
	}
	env := map[string]string{
		"TF_CLI_CONFIG_FILE": rcPath,
		"TF_STANDIN_SCHEMA":  schema,
		"CHECKPOINT_DISABLE": "1",
		"HOME":               w,
		"PATH":               os.Getenv("PATH"),
	}
	return &offlineTerraform{bin: bin, env: env, tree: tree}, nil
}

var offlineDirs []string

func TestMain(m *testing.M) {
	code := m.Run()
	for _, d := range offlineDirs {
		_ = os.RemoveAll(d)
	}
	os.Exit(code)
}

// copyTree copies the HCL sources (no .terraform state or lock files).
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			if d.Name() == ".terraform" {
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		if d.Name() == ".terraform.lock.hcl" || strings.HasSuffix(d.Name(), ".tfstate") {
			return nil
		}
		raw, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), raw, 0o644)
	})
}

// terraformBinary is terraform or tofu from PATH, or else OpenTofu built
// from its Go module (about 3 minutes on 2 cores the first time; the binary
// is kept in the user cache directory).
func terraformBinary() (string, error) {
	for _, name := range []string{"terraform", "tofu"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no terraform or tofu on PATH, and no cache directory to build OpenTofu in: %w", err)
	}
	bin := filepath.Join(cache, "jetway", strings.ReplaceAll(filepath.Base(openTofuModule), "@", "-"), "tofu")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	dl := exec.Command("go", "mod", "download", "-json", openTofuModule)
	dl.Dir = os.TempDir() // outside this module: go.mod stays as it is
	out, err := dl.Output()
	if err != nil {
		return "", fmt.Errorf("no terraform or tofu on PATH; go mod download %s: %v\n%s", openTofuModule, err, out)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		return "", fmt.Errorf("go mod download %s: no module directory in %s", openTofuModule, out)
	}
	src, err := os.MkdirTemp("", "opentofu-src-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(src)
	// The module cache is read-only; the build wants a writable copy.
	if err := os.CopyFS(src, os.DirFS(mod.Dir)); err != nil {
		return "", fmt.Errorf("copy %s: %w", mod.Dir, err)
	}
	if err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Chmod(p, 0o755)
	}); err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return "", err
	}
	build := exec.Command("go", "build", "-o", bin, "./cmd/tofu")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("no terraform or tofu on PATH; building OpenTofu from %s: %v\n%s", openTofuModule, err, out)
	}
	return bin, nil
}

// in returns tfexec for a directory of the copied tree.
func (o *offlineTerraform) in(t *testing.T, rel string) *tfexec.Terraform {
	t.Helper()
	tf, err := tfexec.NewTerraform(filepath.Join(o.tree, rel), o.bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := tf.SetEnv(o.env); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	tf.SetStderr(&stderr)
	t.Cleanup(func() {
		if t.Failed() && stderr.Len() > 0 {
			t.Logf("%s stderr:\n%s", rel, stderr.String())
		}
	})
	return tf
}

// TestTerraformValidatesAndPlans: every environment initialises without a
// backend, validates, and plans with its example variables.
func TestTerraformValidatesAndPlans(t *testing.T) {
	t.Parallel()
	o := setUpOfflineTerraform(t)
	envs, err := filepath.Glob(filepath.Join(o.tree, "envs", "*", "main.tf"))
	if err != nil || len(envs) == 0 {
		t.Fatalf("no environments under envs/ (%v)", err)
	}
	for _, mainTF := range envs {
		env := filepath.Base(filepath.Dir(mainTF))
		t.Run(env, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Dir(mainTF)
			tf := o.in(t, filepath.Join("envs", env))
			ctx, cancel := context.WithTimeout(context.Background(), terraformTimeout)
			defer cancel()
			if err := tf.Init(ctx, tfexec.Backend(false)); err != nil {
				t.Fatalf("init -backend=false: %v", err)
			}
			v, err := tf.Validate(ctx)
			if err != nil {
				t.Fatalf("validate: %v", err)
			}
			if !v.Valid {
				for _, d := range v.Diagnostics {
					t.Errorf("validate: %s: %s (%s)", d.Severity, d.Summary, d.Detail)
				}
				t.FailNow()
			}
			// The real backend (S3) needs AWS: plan against a local one.
			if err := os.WriteFile(filepath.Join(dir, "backend_override.tf"), []byte("terraform {\n  backend \"local\" {}\n}\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := tf.Init(ctx); err != nil {
				t.Fatalf("init with a local backend: %v", err)
			}
			var out bytes.Buffer
			_, err = tf.PlanJSON(ctx, &out, tfexec.Refresh(false), tfexec.Lock(false),
				tfexec.VarFile(filepath.Join(dir, "terraform.tfvars.example")))
			if err != nil {
				t.Fatalf("plan: %v\n%s", err, diagnostics(out.Bytes()))
			}
			var sum struct {
				Changes struct{ Add, Change, Remove int } `json:"changes"`
			}
			if !findMessage(out.Bytes(), "change_summary", &sum) {
				t.Fatalf("plan: no change summary in\n%s", out.String())
			}
			if sum.Changes.Add == 0 || sum.Changes.Change != 0 || sum.Changes.Remove != 0 {
				t.Fatalf("plan of an empty state: %+v, want only additions", sum.Changes)
			}
			t.Logf("%s: init, validate ok; plan: %d to add", env, sum.Changes.Add)
		})
	}
}

// TestTerraformTestFiles runs `terraform test` (modules/jetway/tests): the
// assertions about the planned stack.
func TestTerraformTestFiles(t *testing.T) {
	t.Parallel()
	o := setUpOfflineTerraform(t)
	tf := o.in(t, "modules/jetway")
	ctx, cancel := context.WithTimeout(context.Background(), terraformTimeout)
	defer cancel()
	if err := tf.Init(ctx, tfexec.Backend(false)); err != nil {
		t.Fatalf("init: %v", err)
	}
	var out bytes.Buffer
	err := tf.Test(ctx, &out)
	var sum struct {
		Summary struct {
			Status                           string
			Passed, Failed, Errored, Skipped int
		} `json:"test_summary"`
	}
	found := findMessage(out.Bytes(), "test_summary", &sum)
	if err != nil || !found || sum.Summary.Status != "pass" || sum.Summary.Failed+sum.Summary.Errored+sum.Summary.Skipped > 0 {
		t.Fatalf("terraform test: %v; summary %+v\n%s", err, sum.Summary, diagnostics(out.Bytes()))
	}
	if sum.Summary.Passed == 0 {
		t.Fatal("terraform test ran no run blocks")
	}
	t.Logf("terraform test: %d runs passed", sum.Summary.Passed)
}

// findMessage decodes the first machine-readable UI message of type typ.
func findMessage(jsonLines []byte, typ string, into any) bool {
	sc := bufio.NewScanner(bytes.NewReader(jsonLines))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var m struct{ Type string }
		if json.Unmarshal(sc.Bytes(), &m) == nil && m.Type == typ {
			return json.Unmarshal(sc.Bytes(), into) == nil
		}
	}
	return false
}

// diagnostics keeps the human-readable messages of a JSON UI stream.
func diagnostics(jsonLines []byte) string {
	var b strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(jsonLines))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var m struct {
			Level, Message string
			Diagnostic     *struct{ Summary, Detail string }
		}
		if json.Unmarshal(sc.Bytes(), &m) != nil {
			continue
		}
		if m.Diagnostic != nil {
			fmt.Fprintf(&b, "%s: %s\n%s\n", m.Level, m.Diagnostic.Summary, m.Diagnostic.Detail)
		} else if m.Level == "error" || strings.Contains(m.Message, "fail") {
			fmt.Fprintln(&b, m.Message)
		}
	}
	return b.String()
}
