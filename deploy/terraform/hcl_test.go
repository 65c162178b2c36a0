package terraform

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/function"
	"github.com/zclconf/go-cty/cty/function/stdlib"
)

// tfDir is one Terraform module directory: a reusable module (modules/x) or
// an environment root (envs/x).
type tfDir struct {
	rel   string // slash-separated, relative to this package: "modules/ecs"
	files []*tfFile
}

// tfFile is one parsed .tf file.
type tfFile struct {
	path string
	src  []byte
	body *hclsyntax.Body
}

// stack is every Terraform directory below this package, parsed.
type stack struct {
	dirs map[string]*tfDir
}

// loadStack parses every .tf file below this package. Parse errors fail the
// test at once: nothing else can be checked on a file that does not parse.
func loadStack(t *testing.T) *stack {
	t.Helper()
	s := &stack{dirs: map[string]*tfDir{}}
	parser := hclparse.NewParser()
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".terraform" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || filepath.Ext(path) != ".tf" {
			return nil
		}
		f, diags := parser.ParseHCLFile(path)
		if diags.HasErrors() {
			t.Fatalf("%s does not parse: %s", path, diags.Error())
		}
		body, ok := f.Body.(*hclsyntax.Body)
		if !ok {
			t.Fatalf("%s: not native HCL syntax", path)
		}
		rel := filepath.ToSlash(filepath.Dir(path))
		dir := s.dirs[rel]
		if dir == nil {
			dir = &tfDir{rel: rel}
			s.dirs[rel] = dir
		}
		dir.files = append(dir.files, &tfFile{path: path, src: f.Bytes, body: body})
		return nil
	})
	if err != nil {
		t.Fatalf("walking the Terraform tree: %v", err)
	}
	for _, want := range []string{"modules/jetway", "envs/dev", "envs/prod"} {
		if s.dirs[want] == nil {
			t.Fatalf("no .tf files in %s", want)
		}
	}
	return s
}

// dir returns the directory rel, failing the test when it does not exist.
func (s *stack) dir(t *testing.T, rel string) *tfDir {
	t.Helper()
	d := s.dirs[rel]
	if d == nil {
		t.Fatalf("no Terraform directory %s", rel)
	}
	return d
}

// sortedDirs returns the directories in name order.
func (s *stack) sortedDirs() []*tfDir {
	names := make([]string, 0, len(s.dirs))
	for n := range s.dirs {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]*tfDir, 0, len(names))
	for _, n := range names {
		out = append(out, s.dirs[n])
	}
	return out
}

// modules returns the reusable module directories (modules/*).
func (s *stack) modules() []*tfDir {
	var out []*tfDir
	for _, d := range s.sortedDirs() {
		if strings.HasPrefix(d.rel, "modules/") {
			out = append(out, d)
		}
	}
	return out
}

// envs returns the environment roots (envs/*).
func (s *stack) envs() []*tfDir {
	var out []*tfDir
	for _, d := range s.sortedDirs() {
		if strings.HasPrefix(d.rel, "envs/") {
			out = append(out, d)
		}
	}
	return out
}

// blocks returns the top-level blocks of type typ in file order.
func (d *tfDir) blocks(typ string) []*hclsyntax.Block {
	var out []*hclsyntax.Block
	for _, f := range d.files {
		for _, b := range f.body.Blocks {
			if b.Type == typ {
				out = append(out, b)
			}
		}
	}
	return out
}

// block returns the top-level block with the given type and labels.
func (d *tfDir) block(t *testing.T, typ string, labels ...string) *hclsyntax.Block {
	t.Helper()
	for _, b := range d.blocks(typ) {
		if slices.Equal(b.Labels, labels) {
			return b
		}
	}
	t.Fatalf("%s: no %s %q", d.rel, typ, labels)
	return nil
}

// named returns the blocks of type typ by their first label.
func (d *tfDir) named(typ string) map[string]*hclsyntax.Block {
	out := map[string]*hclsyntax.Block{}
	for _, b := range d.blocks(typ) {
		if len(b.Labels) > 0 {
			out[b.Labels[0]] = b
		}
	}
	return out
}

// locals returns every attribute of every locals block.
func (d *tfDir) locals() map[string]*hclsyntax.Attribute {
	out := map[string]*hclsyntax.Attribute{}
	for _, b := range d.blocks("locals") {
		for name, a := range b.Body.Attributes {
			out[name] = a
		}
	}
	return out
}

// local returns the expression of local.name.
func (d *tfDir) local(t *testing.T, name string) hclsyntax.Expression {
	t.Helper()
	a, ok := d.locals()[name]
	if !ok {
		t.Fatalf("%s: no local %q", d.rel, name)
	}
	return a.Expr
}

// reference is one use of a named object, such as var.x or module.y.z.
type reference struct {
	name string // the second step: x of var.x
	attr string // the third step when it is an attribute name: z of module.y.z
	rng  hcl.Range
}

// refs returns every reference whose traversal starts with root (var,
// local, module), anywhere in the directory's files.
func (d *tfDir) refs(root string) []reference {
	var out []reference
	for _, f := range d.files {
		hclsyntax.VisitAll(f.body, func(n hclsyntax.Node) hcl.Diagnostics {
			st, ok := n.(*hclsyntax.ScopeTraversalExpr)
			if !ok || st.Traversal.RootName() != root || len(st.Traversal) < 2 {
				return nil
			}
			step, ok := st.Traversal[1].(hcl.TraverseAttr)
			if !ok {
				return nil
			}
			r := reference{name: step.Name, rng: st.SrcRange}
			if len(st.Traversal) > 2 {
				if a, ok := st.Traversal[2].(hcl.TraverseAttr); ok {
					r.attr = a.Name
				}
			}
			out = append(out, r)
			return nil
		})
	}
	return out
}

// source returns the source text of rng.
func (d *tfDir) source(rng hcl.Range) string {
	for _, f := range d.files {
		if f.path == rng.Filename {
			return string(rng.SliceBytes(f.src))
		}
	}
	return ""
}

// defaults returns the literal default of every variable of d; variables
// without one (or with a non-literal one) are unknown.
func (d *tfDir) defaults() map[string]cty.Value {
	out := map[string]cty.Value{}
	for name, b := range d.named("variable") {
		v := cty.DynamicVal
		if a, ok := b.Body.Attributes["default"]; ok {
			if val, diags := a.Expr.Value(nil); !diags.HasErrors() {
				v = val
			}
		}
		out[name] = v
	}
	return out
}

// evalContext evaluates expressions of d with every variable at its default
// and the few functions the checked expressions use.
func (d *tfDir) evalContext() *hcl.EvalContext {
	return &hcl.EvalContext{
		Variables: map[string]cty.Value{"var": cty.ObjectVal(d.defaults())},
		Functions: map[string]function.Function{
			"join":     stdlib.JoinFunc,
			"tostring": stdlib.MakeToFunc(cty.String),
			"tonumber": stdlib.MakeToFunc(cty.Number),
			"toset":    stdlib.MakeToFunc(cty.Set(cty.DynamicPseudoType)),
		},
	}
}

// eval evaluates expr in ctx and fails the test on errors or unknown values.
func eval(t *testing.T, what string, expr hcl.Expression, ctx *hcl.EvalContext) cty.Value {
	t.Helper()
	v, diags := expr.Value(ctx)
	if diags.HasErrors() {
		t.Fatalf("%s: cannot evaluate: %s", what, diags.Error())
	}
	if !v.IsWhollyKnown() || v.IsNull() {
		t.Fatalf("%s: value is unknown or null (%#v)", what, v)
	}
	return v
}

// attr returns the attribute name of body, failing the test when absent.
func attr(t *testing.T, what string, body *hclsyntax.Body, name string) *hclsyntax.Attribute {
	t.Helper()
	a, ok := body.Attributes[name]
	if !ok {
		t.Fatalf("%s: no attribute %q", what, name)
	}
	return a
}

// nested returns the nested blocks of body with type typ.
func nested(body *hclsyntax.Body, typ string) []*hclsyntax.Block {
	var out []*hclsyntax.Block
	for _, b := range body.Blocks {
		if b.Type == typ {
			out = append(out, b)
		}
	}
	return out
}

// objectItems returns, for every object constructor anywhere inside expr,
// the values of its items whose key is key (a bare or quoted literal).
func objectItems(expr hclsyntax.Node, key string) []hclsyntax.Expression {
	var out []hclsyntax.Expression
	hclsyntax.VisitAll(expr, func(n hclsyntax.Node) hcl.Diagnostics {
		obj, ok := n.(*hclsyntax.ObjectConsExpr)
		if !ok {
			return nil
		}
		for _, it := range obj.Items {
			if k, ok := literalKey(it.KeyExpr); ok && k == key {
				out = append(out, it.ValueExpr)
			}
		}
		return nil
	})
	return out
}

// literalKey returns an object key written as a bare name or a literal string.
func literalKey(expr hclsyntax.Expression) (string, bool) {
	v, diags := expr.Value(nil)
	if diags.HasErrors() || !v.IsKnown() || v.IsNull() || v.Type() != cty.String {
		return "", false
	}
	return v.AsString(), true
}

// stringsOf converts a known list, set or tuple of strings.
func stringsOf(t *testing.T, what string, v cty.Value) []string {
	t.Helper()
	if !v.CanIterateElements() {
		t.Fatalf("%s: %s is not a list", what, v.Type().FriendlyName())
	}
	var out []string
	for it := v.ElementIterator(); it.Next(); {
		_, e := it.Element()
		if e.Type() != cty.String || e.IsNull() || !e.IsKnown() {
			t.Fatalf("%s: element %#v is not a known string", what, e)
		}
		out = append(out, e.AsString())
	}
	return out
}

// readRepoFile reads a file relative to the repository root (two levels up).
func readRepoFile(t *testing.T, rel string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", filepath.FromSlash(rel)))
	if err != nil {
		t.Fatalf("reading %s from the repository root: %v", rel, err)
	}
	return b
}

// parseHCLFile parses a non-.tf HCL file (tfvars, backend config) into its attributes.
func parseHCLFile(t *testing.T, path string) hclsyntax.Attributes {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading %s: %v", path, err)
	}
	f, diags := hclsyntax.ParseConfig(src, path, hcl.InitialPos)
	if diags.HasErrors() {
		t.Fatalf("%s does not parse: %s", path, diags.Error())
	}
	body := f.Body.(*hclsyntax.Body)
	if len(body.Blocks) > 0 {
		t.Fatalf("%s: only attributes are allowed, found block %q", path, body.Blocks[0].Type)
	}
	return body.Attributes
}
