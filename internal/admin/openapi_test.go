package admin_test

import (
	"fmt"
	"net/http"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/jetway-gateway/jetway/internal/admin"
)

// openAPIFile is the API's OpenAPI document (docs/admin.md links it).
const openAPIFile = "../../docs/admin-openapi.yaml"

// openAPIDoc is the part of an OpenAPI document this test reads: each
// path item's keys are HTTP methods (operations) or shared fields such as
// "parameters", kept as raw nodes until the key says which.
type openAPIDoc struct {
	OpenAPI string                          `yaml:"openapi"`
	Paths   map[string]map[string]yaml.Node `yaml:"paths"`
}

type openAPIOperation struct {
	Responses map[string]yaml.Node `yaml:"responses"`
}

// openAPIMethods are the path item keys that are operations.
var openAPIMethods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

// TestOpenAPIMatchesRoutes: docs/admin-openapi.yaml is OpenAPI 3.1 and
// describes exactly the routes the handler mounts (admin.Routes()) plus
// GET /v1/me, no more and no fewer. Every operation declares 401 and 403,
// and every write (PUT, DELETE) declares 412 and 428, the answers of its
// preconditions.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	raw, err := os.ReadFile(openAPIFile)
	if err != nil {
		t.Fatal(err)
	}
	var doc openAPIDoc
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("%s: %v", openAPIFile, err)
	}
	if !regexp.MustCompile(`^3\.1\.\d+$`).MatchString(doc.OpenAPI) {
		t.Fatalf("%s: openapi is %q, want 3.1.x", openAPIFile, doc.OpenAPI)
	}

	want := map[string]bool{key(http.MethodGet, "/v1/me"): true}
	for _, r := range admin.Routes() {
		k := key(r.Method, r.Path)
		if want[k] {
			t.Errorf("admin.Routes() lists %s twice", k)
		}
		want[k] = true
	}

	got := map[string]bool{}
	for path, item := range doc.Paths {
		for name, node := range item {
			if !slices.Contains(openAPIMethods, name) {
				continue // parameters, summary, ...
			}
			k := key(name, path)
			got[k] = true
			var op openAPIOperation
			if err := node.Decode(&op); err != nil {
				t.Errorf("%s: %s: %v", openAPIFile, k, err)
				continue
			}
			statuses := []string{"401", "403"}
			if name == "put" || name == "delete" {
				statuses = append(statuses, "412", "428")
			}
			for _, s := range statuses {
				if _, ok := op.Responses[s]; !ok {
					t.Errorf("%s: %s declares no %s response", openAPIFile, k, s)
				}
			}
		}
	}

	if missing := difference(want, got); len(missing) > 0 {
		t.Errorf("%s lacks routes the handler serves:\n\t%s", openAPIFile, strings.Join(missing, "\n\t"))
	}
	if extra := difference(got, want); len(extra) > 0 {
		t.Errorf("%s has routes the handler does not serve (admin.Routes() plus GET /v1/me):\n\t%s",
			openAPIFile, strings.Join(extra, "\n\t"))
	}
}

// key names a route as "GET /v1/admin/tenants/{tenant}".
func key(method, path string) string { return fmt.Sprintf("%s %s", strings.ToUpper(method), path) }

// difference lists the keys of a that b lacks, sorted.
func difference(a, b map[string]bool) []string {
	var out []string
	for k := range a {
		if !b[k] {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}
