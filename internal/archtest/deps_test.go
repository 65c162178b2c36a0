// Package archtest turns the import rules of docs/architecture.md into a
// test, in the spirit of Tailscale's deptest: dependencies point one way.
package archtest

import (
	"go/build"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/jetway-gateway/jetway/"

// forbidden lists, per package, import path prefixes it must not use.
var forbidden = map[string][]string{
	"internal/auth":      {"github.com/gin-gonic/", "github.com/gorilla/", module + "internal/session", module + "internal/gateway"},
	"internal/config":    {"github.com/aws/", module + "internal/"},
	"internal/protocol":  {module + "internal/", "github.com/gorilla/", "github.com/gin-gonic/"},
	"internal/stream":    {"github.com/gorilla/", "github.com/gin-gonic/", module + "internal/quota", module + "internal/session", module + "internal/gateway", module + "internal/router"},
	"internal/quota":     {module + "internal/router", module + "internal/session", module + "internal/gateway", module + "internal/stream"},
	"internal/router":    {module + "internal/session", module + "internal/gateway", module + "internal/quota", module + "internal/stream", "github.com/gorilla/", "github.com/gin-gonic/"},
	"internal/gateway":   {"github.com/gin-gonic/", "github.com/gorilla/", module + "internal/session"},
	"internal/session":   {module + "internal/quota", module + "internal/router", "github.com/aws/"},
	"internal/openai":    {module + "internal/quota", module + "internal/router", module + "internal/session", "github.com/gorilla/", "github.com/gin-gonic/", "github.com/aws/"},
	"internal/telemetry": {module + "internal/auth", module + "internal/config", module + "internal/gateway", module + "internal/quota", module + "internal/router", module + "internal/session", module + "internal/stream"},
	"internal/mockmodel": {module + "internal/gateway", module + "internal/session", module + "internal/router"},
	"internal/selfdrain": {module, "github.com/"},
	"client":             {module + "internal/"},
}

// allowed lists, per package, imports its forbidden prefixes still permit.
// The public client speaks the wire protocol through its frame types (as
// aliases), and internal/protocol itself imports nothing of the module.
var allowed = map[string][]string{
	"client": {module + "internal/protocol"},
}

func TestImportDirection(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	for dir, bad := range forbidden {
		pkg, err := build.ImportDir(filepath.Join(root, dir), 0)
		if err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		for _, imp := range pkg.Imports {
			if slices.Contains(allowed[dir], imp) {
				continue
			}
			for _, b := range bad {
				if strings.HasPrefix(imp, b) {
					t.Errorf("%s imports %s: against the dependency direction (docs/architecture.md)", dir, imp)
				}
			}
		}
	}
}
