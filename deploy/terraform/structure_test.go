package terraform

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/hashicorp/hcl/v2/hclwrite"
	"github.com/zclconf/go-cty/cty"
)

var update = flag.Bool("update", false, "format the HCL files and rewrite the generated sections of the READMEs")

func checkLayout(t *testing.T, s *stack) {
	wantModules := []string{"alb", "analytics", "autoscaling", "cognito", "dynamodb", "ecr", "ecs", "iam", "jetway", "network", "observability", "waf"}
	var got []string
	for _, d := range s.modules() {
		got = append(got, path.Base(d.rel))
	}
	if strings.Join(got, ",") != strings.Join(wantModules, ",") {
		t.Errorf("modules = %v, want %v", got, wantModules)
	}
	for _, d := range s.modules() {
		for _, f := range []string{"main.tf", "variables.tf", "outputs.tf", "versions.tf", "README.md"} {
			if _, err := os.Stat(filepath.Join(filepath.FromSlash(d.rel), f)); err != nil {
				t.Errorf("%s: missing %s", d.rel, f)
			}
		}
	}
	for _, d := range s.envs() {
		for _, f := range []string{"main.tf", "variables.tf", "outputs.tf", "versions.tf", "backend.tf", "providers.tf",
			"README.md", "terraform.tfvars.example", "backend.hcl.example", "jetway.yaml.tftpl"} {
			if _, err := os.Stat(filepath.Join(filepath.FromSlash(d.rel), f)); err != nil {
				t.Errorf("%s: missing %s", d.rel, f)
			}
		}
	}
}

// TestFormatted is `terraform fmt -check` without terraform: hclwrite's
// canonical layout is the one terraform fmt writes.
func TestFormatted(t *testing.T) {
	t.Parallel()
	var files []string
	for _, pattern := range []string{"modules/*/*.tf", "envs/*/*.tf", "envs/*/*.example"} {
		m, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) < 40 {
		t.Fatalf("found only %d HCL files", len(files))
	}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if _, diags := hclsyntax.ParseConfig(src, f, hcl.InitialPos); diags.HasErrors() {
			t.Errorf("%s does not parse: %s", f, diags.Error())
			continue
		}
		formatted := hclwrite.Format(src)
		if bytes.Equal(formatted, src) {
			continue
		}
		if *update {
			if err := os.WriteFile(f, formatted, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		t.Errorf("%s is not formatted (go test ./deploy/terraform -update formats it)", f)
	}
}

func checkVariablesDeclaredAndUsed(t *testing.T, s *stack) {
	for _, d := range s.sortedDirs() {
		declared := d.named("variable")
		used := map[string]bool{}
		for _, r := range d.refs("var") {
			used[r.name] = true
			if declared[r.name] == nil {
				t.Errorf("%s: var.%s is not declared", r.rng, r.name)
			}
		}
		for name, b := range declared {
			if !used[name] {
				t.Errorf("%s: variable %q is declared but never used", d.rel, name)
			}
			what := fmt.Sprintf("%s: variable %q", d.rel, name)
			if _, ok := b.Body.Attributes["type"]; !ok {
				t.Errorf("%s has no type", what)
			}
			if description(b) == "" {
				t.Errorf("%s has no description", what)
			}
		}
	}
}

func checkLocalsDeclaredAndUsed(t *testing.T, s *stack) {
	for _, d := range s.sortedDirs() {
		declared := d.locals()
		used := map[string]bool{}
		for _, r := range d.refs("local") {
			used[r.name] = true
			if declared[r.name] == nil {
				t.Errorf("%s: local.%s is not declared", r.rng, r.name)
			}
		}
		for name := range declared {
			if !used[name] {
				t.Errorf("%s: local %q is never used", d.rel, name)
			}
		}
	}
}

func checkOutputsDescribed(t *testing.T, s *stack) {
	for _, d := range s.sortedDirs() {
		for name, b := range d.named("output") {
			if description(b) == "" {
				t.Errorf("%s: output %q has no description", d.rel, name)
			}
		}
	}
}

// checkModulesAreLocalAndCalled: every module call uses a module of this
// tree, and every module is called. (That a call passes only declared
// inputs, every required one, and reads only declared outputs is
// `terraform validate`'s job: TestTerraformValidatesAndPlans.)
func checkModulesAreLocalAndCalled(t *testing.T, s *stack) {
	called := map[string]bool{}
	for _, d := range s.sortedDirs() {
		for _, b := range d.blocks("module") {
			what := fmt.Sprintf("%s: module %q", d.rel, b.Labels[0])
			src := eval(t, what+" source", attr(t, what, b.Body, "source").Expr, nil).AsString()
			if !strings.HasPrefix(src, "../") {
				t.Errorf("%s: source %q is not a local module", what, src)
				continue
			}
			target := path.Clean(path.Join(d.rel, src))
			if s.dirs[target] == nil {
				t.Errorf("%s: source %q: no module at %s", what, src, target)
				continue
			}
			called[target] = true
		}
	}
	for _, m := range s.modules() {
		if !called[m.rel] {
			t.Errorf("%s is never called", m.rel)
		}
	}
}

// checkEnvironmentsShareOneModule keeps dev and prod structurally identical:
// both roots declare the same variables and outputs, and differ only in values.
func checkEnvironmentsShareOneModule(t *testing.T, s *stack) {
	envs := s.envs()
	if len(envs) < 2 {
		t.Fatalf("want at least dev and prod, got %d environments", len(envs))
	}
	keys := func(m map[string]*hclsyntax.Block) string {
		var ks []string
		for k := range m {
			ks = append(ks, k)
		}
		sort.Strings(ks)
		return strings.Join(ks, ",")
	}
	first := envs[0]
	for _, e := range envs[1:] {
		if keys(e.named("variable")) != keys(first.named("variable")) {
			t.Errorf("%s and %s declare different variables", first.rel, e.rel)
		}
		if keys(e.named("output")) != keys(first.named("output")) {
			t.Errorf("%s and %s declare different outputs", first.rel, e.rel)
		}
	}
	for _, e := range envs {
		mods := e.named("module")
		if len(mods) != 1 || mods["jetway"] == nil {
			t.Errorf("%s: want exactly one module call, \"jetway\"", e.rel)
		}
	}
}

// checkREADMEs keeps each README's inputs/outputs tables in step with the
// code; -update rewrites them.
func checkREADMEs(t *testing.T, s *stack) {
	for _, d := range s.sortedDirs() {
		file := filepath.Join(filepath.FromSlash(d.rel), "README.md")
		readme, err := os.ReadFile(file)
		if err != nil {
			t.Errorf("%s: %v", d.rel, err)
			continue
		}
		want := generatedDocs(d)
		got, ok := generatedSection(readme)
		if ok && got == want {
			continue
		}
		if *update {
			if err := os.WriteFile(file, replaceGenerated(readme, want), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		t.Errorf("%s: the inputs/outputs tables are out of date (go test ./deploy/terraform -update rewrites them)", file)
	}
}

const (
	beginDocs = "<!-- BEGIN GENERATED: inputs and outputs (go test ./deploy/terraform -update) -->"
	endDocs   = "<!-- END GENERATED -->"
)

func generatedSection(readme []byte) (string, bool) {
	s := string(readme)
	i := strings.Index(s, beginDocs)
	j := strings.Index(s, endDocs)
	if i < 0 || j < i {
		return "", false
	}
	return s[i : j+len(endDocs)], true
}

func replaceGenerated(readme []byte, section string) []byte {
	s := string(readme)
	i := strings.Index(s, beginDocs)
	j := strings.Index(s, endDocs)
	if i < 0 || j < i {
		return []byte(strings.TrimRight(s, "\n") + "\n\n" + section + "\n")
	}
	return []byte(s[:i] + section + s[j+len(endDocs):])
}

var spaces = regexp.MustCompile(`\s+`)

// cell makes text fit in one Markdown table cell.
func cell(s string) string {
	s = strings.TrimSpace(spaces.ReplaceAllString(s, " "))
	return strings.NewReplacer("|", `\|`, "<", "&lt;", ">", "&gt;").Replace(s)
}

func description(b *hclsyntax.Block) string {
	a, ok := b.Body.Attributes["description"]
	if !ok {
		return ""
	}
	v, diags := a.Expr.Value(nil)
	if diags.HasErrors() || v.Type() != cty.String || v.IsNull() {
		return ""
	}
	return strings.TrimSpace(v.AsString())
}

// generatedDocs renders the inputs and outputs of d in declaration order.
func generatedDocs(d *tfDir) string {
	var b strings.Builder
	b.WriteString(beginDocs + "\n## Inputs\n\n")
	vars := d.blocks("variable")
	if len(vars) == 0 {
		b.WriteString("None.\n")
	} else {
		b.WriteString("| name | type | default | description |\n|---|---|---|---|\n")
		for _, v := range vars {
			typ, def := "", "required"
			if a, ok := v.Body.Attributes["type"]; ok {
				typ = "`" + cell(d.source(a.Expr.Range())) + "`"
			}
			if a, ok := v.Body.Attributes["default"]; ok {
				def = "`" + cell(d.source(a.Expr.Range())) + "`"
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", v.Labels[0], typ, def, cell(description(v)))
		}
	}
	b.WriteString("\n## Outputs\n\n")
	outs := d.blocks("output")
	if len(outs) == 0 {
		b.WriteString("None.\n")
	} else {
		b.WriteString("| name | description |\n|---|---|\n")
		for _, o := range outs {
			fmt.Fprintf(&b, "| `%s` | %s |\n", o.Labels[0], cell(description(o)))
		}
	}
	b.WriteString(endDocs)
	return b.String()
}
