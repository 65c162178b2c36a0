// Package archtest turns the import rules of docs/architecture.md into a
// test, in the spirit of Tailscale's deptest: dependencies point one way.
package archtest

import (
	"go/build"
	"os/exec"
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
	"internal/call":      {module, "github.com/"},
	"internal/stream":    {"github.com/gorilla/", "github.com/gin-gonic/", module + "internal/quota", module + "internal/session", module + "internal/gateway", module + "internal/router", smithy, dynamoFeatures},
	"internal/quota":     {module + "internal/router", module + "internal/session", module + "internal/gateway", module + "internal/stream", smithy, dynamoFeatures},
	"internal/fleet":     {smithy, dynamoFeatures},
	"internal/router":    {module + "internal/session", module + "internal/gateway", module + "internal/quota", module + "internal/stream", "github.com/gorilla/", "github.com/gin-gonic/"},
	"internal/gateway":   {"github.com/gin-gonic/", "github.com/gorilla/", module + "internal/session"},
	"internal/session":   {module + "internal/quota", module + "internal/router", "github.com/aws/"},
	"internal/openai":    {module + "internal/quota", module + "internal/router", module + "internal/session", "github.com/gorilla/", "github.com/gin-gonic/", "github.com/aws/"},
	"internal/anthropic": {module + "internal/quota", module + "internal/router", "github.com/gorilla/", "github.com/gin-gonic/", "github.com/aws/"},
	// The AI SDK door keeps its chat index in the requests table through
	// the DynamoDB technology package, never the SDK's codecs.
	"internal/aisdk":     {module + "internal/quota", module + "internal/router", module + "internal/stream/", "github.com/gorilla/", "github.com/gin-gonic/", smithy, dynamoFeatures},
	"internal/telemetry": {module + "internal/auth", module + "internal/config", module + "internal/gateway", module + "internal/quota", module + "internal/router", module + "internal/session", module + "internal/stream"},
	"internal/mockmodel": {module + "internal/gateway", module + "internal/session", module + "internal/router"},
	"internal/selfdrain": {module, "github.com/"},
	"internal/door":      {module + "internal/session", module + "internal/openai", module + "internal/anthropic", module + "internal/aisdk", module + "internal/socket", module + "internal/quota", module + "internal/router", "github.com/gorilla/", "github.com/gin-gonic/"},
	// The WebSocket lifecycle every WebSocket door shares: no door's wire,
	// no model, no store.
	"internal/socket": {module + "internal/session", module + "internal/aisdk", module + "internal/openai", module + "internal/anthropic", module + "internal/protocol",
		module + "internal/quota", module + "internal/router", "github.com/gin-gonic/", "github.com/aws/"},
	// The caller's standing (GET /v1/me) reads the configuration and the
	// quota: no pipeline, no door's wire, no store of its own.
	"internal/selfservice": {module + "internal/gateway", module + "internal/session", module + "internal/router", module + "internal/stream",
		module + "internal/openai", module + "internal/anthropic", module + "internal/aisdk", module + "internal/socket", module + "internal/protocol",
		"github.com/gorilla/", "github.com/gin-gonic/", "github.com/aws/"},
	// Quota threshold alerts: the gateway hands them its observations; they
	// know no pipeline, quota, door or wire, and reach DynamoDB only
	// through its technology package.
	"internal/alert": {module + "internal/gateway", module + "internal/quota", module + "internal/config", module + "internal/session",
		module + "internal/router", module + "internal/stream", module + "internal/door", module + "internal/socket", module + "internal/protocol",
		"github.com/gorilla/", "github.com/gin-gonic/", smithy, dynamoFeatures},
	// The config table reaches DynamoDB only through its technology
	// package; it knows no pipeline, quota or wire.
	"internal/configstore": {module + "internal/gateway", module + "internal/quota", module + "internal/session", module + "internal/router",
		module + "internal/stream", module + "internal/door", module + "internal/socket", module + "internal/protocol", module + "internal/admin",
		"github.com/gorilla/", "github.com/gin-gonic/", smithy, dynamoFeatures},
	// The admin API: documents through configstore, sign-in through door;
	// no pipeline, quota, model or WebSocket.
	"internal/admin": {module + "internal/gateway", module + "internal/quota", module + "internal/session", module + "internal/router",
		module + "internal/stream", module + "internal/socket", module + "internal/protocol", module + "internal/dynamotable",
		"github.com/gorilla/", "github.com/aws/"},
	"client": {module + "internal/"},
	// The technology packages know nothing of the module.
	"internal/dynamotable": {module},
	"internal/backoff":     {module, "github.com/"},
	// The survivor (fleet takeover) sits below the pipeline: it asks it
	// only for a request's ending (takeover.Core), and knows no model, no
	// wire and no DynamoDB.
	"internal/takeover": {module + "internal/gateway", module + "internal/session", module + "internal/router", module + "internal/fleet",
		"github.com/gorilla/", "github.com/gin-gonic/", "github.com/aws/"},
}

// The DynamoDB technology lives in internal/dynamotable: the stores neither
// read the SDK's errors (smithy) nor use its codecs (feature/dynamodb).
const (
	smithy         = "github.com/aws/smithy-go"
	dynamoFeatures = "github.com/aws/aws-sdk-go-v2/feature/dynamodb/"
)

// allowed lists, per package, imports its forbidden prefixes still permit.
// The public client speaks the wire protocol through its frame types (as
// aliases), and internal/protocol itself imports nothing of the module;
// it waits between reconnects with the tree's one backoff.
var allowed = map[string][]string{
	"client": {module + "internal/protocol", module + "internal/backoff"},
	// The jetway.v1 wire is the WebSocket door's codec of the core's
	// vocabulary.
	"internal/protocol": {module + "internal/call"},
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

// doors turn a wire format into the core's requests and the core's
// events back (docs/architecture.md, "Doors over one core"): each is a
// codec and its routes. Doors never import each other, and the core
// imports no door, nor what doors share (internal/door, and the
// WebSocket doors' lifecycle, internal/socket).
var (
	doors  = []string{"internal/session", "internal/aisdk", "internal/openai", "internal/anthropic"}
	shared = []string{"internal/door", "internal/socket"}
	core   = []string{"internal/gateway", "internal/takeover", "internal/stream", "internal/quota", "internal/router", "internal/telemetry"}
)

// wires are the packages of a door's wire format (the jetway.v1 frames
// are the WebSocket door's). The core imports none: it speaks the
// vocabulary of internal/call, and its logs and records keep that
// vocabulary's codec, never a door's bytes.
var wires = []string{"internal/protocol"}

// speaksWire lists the packages that still import a wire they do not own,
// until they speak the core's vocabulary (issue 31). The gateway speaks
// only call (its request, its failures, client errors and their paths).
// The HTTP doors and the AI SDK door build their requests as jetway.v1
// frames to validate them (ValidateRequest). Remove an entry once its package is clean; add none.
var speaksWire = map[string]bool{
	"internal/aisdk":     true,
	"internal/openai":    true,
	"internal/anthropic": true,
}

func TestCoreSpeaksNoWire(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	for _, dir := range append(slices.Clone(core), "internal/call", "internal/socket", "internal/aisdk", "internal/openai", "internal/anthropic") {
		pkg, err := build.ImportDir(filepath.Join(root, dir), 0)
		if err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		uses := false
		for _, imp := range pkg.Imports {
			for _, w := range wires {
				if imp == module+w {
					uses = true
					if !speaksWire[dir] {
						t.Errorf("%s imports %s: the core speaks internal/call, and a door only its own wire (docs/architecture.md)", dir, w)
					}
				}
			}
		}
		if speaksWire[dir] && !uses {
			t.Errorf("%s imports no wire any more: remove it from speaksWire", dir)
		}
	}
}

func TestDoorsAreApart(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	for _, dir := range append(slices.Clone(doors), core...) {
		pkg, err := build.ImportDir(filepath.Join(root, dir), 0)
		if err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		for _, imp := range pkg.Imports {
			for _, d := range append(slices.Clone(shared), doors...) {
				if d == dir || slices.Contains(shared, d) && slices.Contains(doors, dir) {
					continue
				}
				if imp == module+d {
					t.Errorf("%s imports %s: doors are apart, and the core knows none (docs/architecture.md)", dir, d)
				}
			}
		}
	}
}

// notLinked lists import path prefixes the gateway binary must not link:
// test and dev tooling, and libraries whose trees cost build time and size
// for nothing the server runs (issue 23: a cold `go build` took minutes).
// gin, the project's HTTP framework, stays: it brings about 100 packages
// (docs/benchmarks.md, "The gateway binary").
var notLinked = []string{
	"testing", "net/http/httptest", "go.uber.org/goleak",
	module + "internal/gatewaytest", module + "internal/dynalitetest", module + "internal/auth/authtest", module + "internal/door/doortest",
	module + "internal/delayproxy", module + "internal/archtest", module + "internal/jaegertest",
	"github.com/hashicorp/terraform-", "github.com/hashicorp/hcl", // cmd/deploy and the Terraform tests
	"github.com/chromedp/", "github.com/openai/", "github.com/anthropics/", // the page tests and the doors' tests
}

func TestGatewayBinaryLinks(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", module+"cmd/gateway").Output()
	if err != nil {
		t.Fatalf("go list -deps ./cmd/gateway: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		for _, bad := range notLinked {
			if under(pkg, bad) {
				t.Errorf("cmd/gateway links %s: not needed at run time (see notLinked)", pkg)
			}
		}
	}
}

// under reports whether pkg is prefix or inside it; a prefix ending in / or
// - matches every path that starts with it.
func under(pkg, prefix string) bool {
	if strings.HasSuffix(prefix, "/") || strings.HasSuffix(prefix, "-") {
		return strings.HasPrefix(pkg, prefix)
	}
	return pkg == prefix || strings.HasPrefix(pkg, prefix+"/")
}
