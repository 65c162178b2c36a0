package web

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestVendoredModules: the page's copies of marked and dompurify, and the
// console's Chart.js, are the files of the versions pinned (exactly) in the
// root package.json, as npm installed them; `make web-vendor` makes them so.
func TestVendoredModules(t *testing.T) {
	var pkg struct {
		DevDependencies map[string]string `json:"devDependencies"`
	}
	raw, err := os.ReadFile(filepath.Join("..", "package.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &pkg); err != nil {
		t.Fatalf("package.json: %v", err)
	}
	exact := regexp.MustCompile(`^\d+\.\d+\.\d+$`)
	copies := map[string]string{} // paths under web/ -> paths under node_modules/
	for static, src := range vendored {
		copies[filepath.Join("static", static)] = src
	}
	for static, src := range consoleVendored {
		copies[filepath.Join("admin", static)] = src
	}
	for static, src := range copies {
		name := strings.SplitN(src, "/", 2)[0]
		pin := pkg.DevDependencies[name]
		if !exact.MatchString(pin) {
			t.Errorf("package.json pins %s at %q: want an exact version (the committed copy is checked against it)", name, pin)
			continue
		}
		var installed struct {
			Version string `json:"version"`
		}
		raw, err := os.ReadFile(filepath.Join("..", "node_modules", name, "package.json"))
		if err != nil {
			t.Fatalf("npm package %s is missing: run `make test-deps` (npm ci) at the repository root: %v", name, err)
		}
		if err := json.Unmarshal(raw, &installed); err != nil || installed.Version != pin {
			t.Fatalf("node_modules/%s is version %q (%v), package.json pins %s: run `make test-deps` (npm ci)", name, installed.Version, err, pin)
		}
		want, err := os.ReadFile(filepath.Join("..", "node_modules", src))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(static)
		if err != nil {
			t.Fatalf("%v: run `make web-vendor` and commit web/static/vendor and web/admin/vendor", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("web/%s differs from node_modules/%s (%s %s): run `make web-vendor` and commit it", static, src, name, pin)
		}
		// The license travels with the code.
		if head := string(got[:min(len(got), 400)]); !strings.Contains(head, pin) || !strings.Contains(strings.ToLower(head), "license") {
			t.Errorf("web/%s does not start with its license header naming version %s", static, pin)
		}
	}
}
