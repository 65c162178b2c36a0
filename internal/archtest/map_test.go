package archtest

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestPackageMapMatchesCode: docs/architecture.md's package map lists every
// package under internal/ (and client) that the product is built from,
// and nothing that is gone. Test-only helper packages (named *test) are
// left out of the map.
func TestPackageMapMatchesCode(t *testing.T) {
	root := filepath.Join("..", "..")
	doc, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `((?:internal/[a-z0-9/]+)|client)` \\|")
	var mapped []string
	for _, m := range row.FindAllStringSubmatch(string(doc), -1) {
		mapped = append(mapped, m[1])
	}
	var code []string
	for _, top := range []string{"internal", "client"} {
		err := filepath.WalkDir(filepath.Join(root, top), func(path string, d fs.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return err
			}
			rel, _ := filepath.Rel(root, path)
			rel = filepath.ToSlash(rel)
			if strings.HasSuffix(d.Name(), "test") || rel == "internal" {
				return nil
			}
			files, _ := filepath.Glob(filepath.Join(path, "*.go"))
			for _, f := range files {
				if !strings.HasSuffix(f, "_test.go") {
					code = append(code, rel)
					break
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range code {
		if !slices.Contains(mapped, p) {
			t.Errorf("%s is not in docs/architecture.md's package map", p)
		}
	}
	for _, p := range mapped {
		if !slices.Contains(code, p) {
			t.Errorf("docs/architecture.md's package map lists %s, which has no Go code", p)
		}
	}
}
