package terraform

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/jetway-gateway/jetway/internal/config"
	"github.com/zclconf/go-cty/cty"
)

// checkExampleTfvars: each environment's example sets only variables the root
// declares, and every required one.
func checkExampleTfvars(t *testing.T, s *stack) {
	for _, e := range s.envs() {
		attrs := parseHCLFile(t, filepath.Join(filepath.FromSlash(e.rel), "terraform.tfvars.example"))
		vars := e.named("variable")
		for name := range attrs {
			if vars[name] == nil {
				t.Errorf("%s/terraform.tfvars.example sets %q, which the root does not declare", e.rel, name)
			}
		}
		for name, v := range vars {
			if _, ok := v.Body.Attributes["default"]; ok {
				continue
			}
			if _, ok := attrs[name]; !ok {
				t.Errorf("%s/terraform.tfvars.example misses required %q", e.rel, name)
			}
		}
	}
}

// checkBackend: every root has a partial S3 backend (no bucket, account or
// region in code) and an example backend config with the lock table.
func checkBackend(t *testing.T, s *stack) {
	for _, e := range s.envs() {
		var backends []*hclsyntax.Block
		for _, tf := range e.blocks("terraform") {
			backends = append(backends, nested(tf.Body, "backend")...)
		}
		if len(backends) != 1 || backends[0].Labels[0] != "s3" {
			t.Errorf("%s: want one backend \"s3\"", e.rel)
			continue
		}
		if len(backends[0].Body.Attributes) != 0 {
			t.Errorf("%s: the backend must be a partial configuration (settings come from backend.hcl)", e.rel)
		}
		attrs := parseHCLFile(t, filepath.Join(filepath.FromSlash(e.rel), "backend.hcl.example"))
		for _, k := range []string{"bucket", "key", "region", "dynamodb_table", "encrypt"} {
			if _, ok := attrs[k]; !ok {
				t.Errorf("%s/backend.hcl.example: no %s", e.rel, k)
			}
		}
		key := eval(t, "key", attrs["key"].Expr, nil).AsString()
		if !strings.Contains(key, filepath.Base(e.rel)) {
			t.Errorf("%s/backend.hcl.example: state key %q does not name the environment", e.rel, key)
		}
		readme, err := os.ReadFile(filepath.Join(filepath.FromSlash(e.rel), "README.md"))
		if err != nil {
			t.Fatal(err)
		}
		for _, word := range []string{"backend.hcl", "dynamodb_table", "terraform.tfvars"} {
			if !strings.Contains(string(readme), word) {
				t.Errorf("%s/README.md does not explain %s", e.rel, word)
			}
		}
	}
}

// checkTenantsFileTemplates renders each environment's tenants file the way
// Terraform will (templatefile with the Cognito client ids) and loads it with
// the gateway's own parser. Every app has its Cognito client, every client
// its app, and every Bedrock id is one the task role may stream from.
func checkTenantsFileTemplates(t *testing.T, s *stack) {
	for _, e := range s.envs() {
		tfvars, clientIDs, cfg := renderTenantsFile(t, e)
		if cfg == nil {
			continue
		}

		used := map[string]bool{}
		for _, tn := range cfg.Tenants {
			for _, app := range tn.Apps {
				key := tn.ID + "/" + app.ID
				want := clientIDs[key]
				if want.IsNull() {
					t.Errorf("%s: app %s has no Cognito client in apps", e.rel, key)
					continue
				}
				if !slices.Contains(app.ClientIDs, want.AsString()) {
					t.Errorf("%s: app %s does not list its own client id (client_ids[%q])", e.rel, key, key)
				}
				used[key] = true
			}
		}
		for key := range clientIDs {
			if !used[key] {
				t.Errorf("%s: apps[%q] has a Cognito client but no app in the tenants file (its tokens would be refused)", e.rel, key)
			}
		}

		allowed := map[string]bool{}
		for _, k := range []string{"bedrock_model_ids", "bedrock_inference_profile_ids"} {
			if a, ok := tfvars[k]; ok {
				for _, id := range stringsOf(t, k, eval(t, k, a.Expr, nil)) {
					allowed[id] = true
				}
			}
		}
		var models []string
		for _, m := range cfg.Models {
			models = append(models, m.BedrockID)
			if !allowed[m.BedrockID] {
				t.Errorf("%s: model %s uses bedrock_id %q, which terraform.tfvars.example does not allow", e.rel, m.ID, m.BedrockID)
			}
		}
		sort.Strings(models)
		var allowedList []string
		for id := range allowed {
			allowedList = append(allowedList, id)
		}
		sort.Strings(allowedList)
		if fmt.Sprint(slices.Compact(models)) != fmt.Sprint(allowedList) {
			t.Errorf("%s: the task role allows %v but the tenants file uses %v", e.rel, allowedList, models)
		}
	}
}

// renderTenantsFile renders an environment's tenants file the way Terraform
// will (templatefile with a made-up client id per key of the example's
// apps) and loads it with the gateway's own parser. It returns the
// example's variables, the client ids and the configuration (nil, with the
// test failed, when it does not load).
func renderTenantsFile(t *testing.T, e *tfDir) (hclsyntax.Attributes, map[string]cty.Value, *config.Config) {
	t.Helper()
	dir := filepath.FromSlash(e.rel)
	tfvars := parseHCLFile(t, filepath.Join(dir, "terraform.tfvars.example"))
	apps := eval(t, e.rel+" apps", tfvars["apps"].Expr, nil)
	clientIDs := map[string]cty.Value{}
	for it := apps.ElementIterator(); it.Next(); {
		k, _ := it.Element()
		clientIDs[k.AsString()] = cty.StringVal("client-" + strings.ReplaceAll(k.AsString(), "/", "-"))
	}
	if len(clientIDs) == 0 {
		t.Fatalf("%s: the example declares no apps", e.rel)
	}

	src, err := os.ReadFile(filepath.Join(dir, "jetway.yaml.tftpl"))
	if err != nil {
		t.Fatal(err)
	}
	tmpl, diags := hclsyntax.ParseTemplate(src, filepath.Join(dir, "jetway.yaml.tftpl"), hcl.InitialPos)
	if diags.HasErrors() {
		t.Fatalf("%s: template does not parse: %s", e.rel, diags.Error())
	}
	for _, tr := range tmpl.Variables() {
		if tr.RootName() != "client_ids" {
			t.Errorf("%s: the template uses %q; templatefile only passes client_ids", e.rel, tr.RootName())
		}
	}
	ctx := &hcl.EvalContext{Variables: map[string]cty.Value{"client_ids": cty.MapVal(clientIDs)}}
	rendered := eval(t, e.rel+" template", tmpl, ctx).AsString()

	cfg, err := config.Parse(e.rel+"/jetway.yaml", []byte(rendered))
	if err != nil {
		t.Errorf("%s: the rendered tenants file does not load: %v", e.rel, err)
		return tfvars, clientIDs, nil
	}
	return tfvars, clientIDs, cfg
}

// checkTenantInferenceProfiles: each example's tenant_inference_profiles
// name a tenant and a model of its tenants file, and copy from what that
// model's bedrock_id calls (the same foundation model or system inference
// profile, as an ARN), in the environment's region or one of its
// bedrock_regions: the profile only changes whose bill the call lands on.
func checkTenantInferenceProfiles(t *testing.T, s *stack) {
	for _, e := range s.envs() {
		tfvars, _, cfg := renderTenantsFile(t, e)
		if cfg == nil {
			continue
		}
		a, ok := tfvars["tenant_inference_profiles"]
		if !ok {
			continue
		}
		regions := []string{asString(t, "region", eval(t, e.rel+" region", tfvars["region"].Expr, nil))}
		if r, ok := tfvars["bedrock_regions"]; ok {
			regions = append(regions, stringsOf(t, "bedrock_regions", eval(t, e.rel+" bedrock_regions", r.Expr, nil))...)
		}
		tenants := map[string]bool{}
		for _, tn := range cfg.Tenants {
			tenants[tn.ID] = true
		}
		models := map[string]string{}
		for _, m := range cfg.Models {
			models[m.ID] = m.BedrockID
		}
		profiles := eval(t, e.rel+" tenant_inference_profiles", a.Expr, nil)
		for it := profiles.ElementIterator(); it.Next(); {
			k, p := it.Element()
			what := fmt.Sprintf("%s/terraform.tfvars.example: tenant_inference_profiles[%q]", e.rel, k.AsString())
			tenant := asString(t, what+".tenant", p.GetAttr("tenant"))
			model := asString(t, what+".model", p.GetAttr("model"))
			source := asString(t, what+".source_arn", p.GetAttr("source_arn"))
			if !tenants[tenant] {
				t.Errorf("%s: tenant %q is not a tenant of jetway.yaml.tftpl", what, tenant)
			}
			bedrockID, ok := models[model]
			if !ok {
				t.Errorf("%s: model %q is not a model of jetway.yaml.tftpl", what, model)
				continue
			}
			parts := strings.SplitN(source, ":", 6)
			if len(parts) != 6 {
				t.Errorf("%s: source_arn %q is not an ARN", what, source)
				continue
			}
			kind, id, _ := strings.Cut(parts[5], "/")
			if id != bedrockID || (kind != "foundation-model" && kind != "inference-profile") {
				t.Errorf("%s: source_arn %q does not copy model %s's bedrock_id %q", what, source, model, bedrockID)
			}
			if !slices.Contains(regions, parts[3]) {
				t.Errorf("%s: source_arn %q is in %s, not in the environment's regions %v", what, source, parts[3], regions)
			}
		}
	}
}
