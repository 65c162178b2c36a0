package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// The Core issue's example, verbatim: it must load as is.
// issueExample is the Core issue's example configuration, extended by issue
// 17: the mock's tool and reasoning models, model capabilities, and the
// support app's allow list naming them (so the dev page can show them); and
// by issue 23: mock-markdown, the support app's default (the dev page shows
// Markdown from its first answer).
const issueExample = `models:
  - id: mock-a
    bedrock_id: mock-a
    price: {input_per_1k: 0.003, output_per_1k: 0.015, cache_read_per_1k: 0.0003, cache_write_per_1k: 0.00375}
    prompt_cache: {min_tokens: 1024, max_points: 4}
    capabilities: [tools, images, documents]
  - id: mock-b
    bedrock_id: mock-b
    price: {input_per_1k: 0.003, output_per_1k: 0.015, cache_read_per_1k: 0.0003, cache_write_per_1k: 0.00375}
    prompt_cache: {min_tokens: 1024, max_points: 4}
    capabilities: [tools, images, documents]
  - id: mock-tools
    bedrock_id: mock-tools
    price: {input_per_1k: 0.003, output_per_1k: 0.015, cache_read_per_1k: 0.0003, cache_write_per_1k: 0.00375}
    prompt_cache: {min_tokens: 1024, max_points: 4}
    capabilities: [tools, images, documents]
  - id: mock-reasoning
    bedrock_id: mock-reasoning
    price: {input_per_1k: 0.003, output_per_1k: 0.015, cache_read_per_1k: 0.0003, cache_write_per_1k: 0.00375}
    prompt_cache: {min_tokens: 1024, max_points: 4}
    capabilities: [tools, images, documents, reasoning]
  - id: mock-markdown
    bedrock_id: mock-markdown
    price: {input_per_1k: 0.003, output_per_1k: 0.015, cache_read_per_1k: 0.0003, cache_write_per_1k: 0.00375}
    prompt_cache: {min_tokens: 1024, max_points: 4}
    capabilities: [tools, images, documents]
  - id: mock-cheap
    bedrock_id: mock-cheap
    price: {input_per_1k: 0.00025, output_per_1k: 0.00125}
auth:
  tenant_claim: custom:tenant
  tenant_group_prefix: "tenant:"
tenants:
  - id: contoso
    limits: [{window: month, tokens: 100000000}]
    apps:
      - id: support-assistant
        client_ids: [contoso-support]
        models: {default: mock-markdown, fallbacks: [mock-b], allow: [mock-markdown, mock-a, mock-b, mock-tools, mock-reasoning]}
        limits: [{window: hour, tokens: 2000000}]
      - id: developer-assistant
        client_ids: [contoso-dev]
        models: {default: mock-a, fallbacks: [mock-b]}
        limits: [{window: hour, tokens: 2000000}]
      - id: knowledge-bot
        client_ids: [contoso-kb]
        models: {default: mock-cheap, allow: [mock-cheap]}
  - id: fabrikam
    apps:
      - id: document-summarizer
        client_ids: [fabrikam-docs]
        models: {default: mock-a}
        limits: [{window: hour, tokens: 20000}]
`

func TestIssueExampleLoads(t *testing.T) {
	path := filepath.Join(t.TempDir(), "jetway.yaml")
	if err := os.WriteFile(path, []byte(issueExample), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(path)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if got := len(c.Models); got != 6 {
		t.Errorf("models = %d, want 6", got)
	}
	m, ok := c.Model("mock-cheap")
	if !ok || m.BedrockID != "mock-cheap" || m.Price.InputPer1K != 0.00025 || m.Price.OutputPer1K != 0.00125 {
		t.Errorf("Model(mock-cheap) = %+v, %v", m, ok)
	}
	if c.Auth.TenantClaim != "custom:tenant" || c.Auth.TenantGroupPrefix != "tenant:" {
		t.Errorf("auth = %+v", c.Auth)
	}
	tenant, app, ok := c.AppForClient("fabrikam-docs")
	if !ok || tenant != "fabrikam" || app != "document-summarizer" {
		t.Errorf("AppForClient(fabrikam-docs) = %q, %q, %v", tenant, app, ok)
	}
	if _, _, ok := c.AppForClient("nobody"); ok {
		t.Error("AppForClient(nobody) found an app")
	}
	ten, a, ok := c.App("fabrikam", "document-summarizer")
	if !ok {
		t.Fatal("App(fabrikam, document-summarizer) not found")
	}
	if len(ten.Limits) != 0 || !reflect.DeepEqual(a.Limits, []Limit{{Window: "hour", Tokens: 20000}}) {
		t.Errorf("fabrikam limits = %+v / %+v", ten.Limits, a.Limits)
	}
	ten, _, _ = c.App("contoso", "support-assistant")
	if !reflect.DeepEqual(ten.Limits, []Limit{{Window: "month", Tokens: 100000000}}) {
		t.Errorf("contoso limits = %+v", ten.Limits)
	}
	if _, _, ok := c.App("contoso", "nope"); ok {
		t.Error("App(contoso, nope) found an app")
	}
	if _, _, ok := c.App("nope", "support-assistant"); ok {
		t.Error("App(nope, support-assistant) found an app")
	}
}

func TestPromptCacheDefaults(t *testing.T) {
	c, err := Parse("jetway.yaml", []byte(strings.Replace(base, "  - id: mock-b\n", "  - id: mock-b\n    prompt_cache: {}\n", 1)))
	if err != nil {
		t.Fatal(err)
	}
	a, _ := c.Model("mock-a")
	if a.PromptCache != nil || a.Price.CacheRead() != 0.003 || a.Price.CacheWrite() != 0.003 {
		t.Errorf("mock-a: prompt cache %+v, cache prices %v/%v; want none and the input price", a.PromptCache, a.Price.CacheRead(), a.Price.CacheWrite())
	}
	b, _ := c.Model("mock-b")
	if b.PromptCache == nil || *b.PromptCache != (ModelCache{MinTokens: DefaultCacheMinTokens, MaxPoints: DefaultCacheMaxPoints}) {
		t.Errorf("mock-b prompt cache = %+v, want the defaults", b.PromptCache)
	}
	if _, app, _ := c.App("contoso", "support"); app.PromptCache != PromptCacheAuto {
		t.Errorf("app prompt_cache = %q, want %q", app.PromptCache, PromptCacheAuto)
	}
}

func TestDefaultIsTheIssueExample(t *testing.T) {
	want, err := Parse("example", []byte(issueExample))
	if err != nil {
		t.Fatal(err)
	}
	if got := Default(); !reflect.DeepEqual(got, want) {
		t.Errorf("Default() = %+v\nwant %+v", got, want)
	}
	if string(DefaultYAML()) != issueExample {
		t.Error("DefaultYAML differs from the issue's example")
	}
	// Each call is a fresh copy: changing one does not change the next.
	d := Default()
	d.Tenants[0].ID = "changed"
	if Default().Tenants[0].ID != "contoso" {
		t.Error("Default shares state between calls")
	}
}

func TestDefaults(t *testing.T) {
	c := Default()
	_, sa, _ := c.App("contoso", "support-assistant")
	if want := []string{"mock-markdown", "mock-a", "mock-b", "mock-tools", "mock-reasoning"}; !reflect.DeepEqual(sa.Models.Allow, want) {
		t.Errorf("support-assistant allow = %v, want %v", sa.Models.Allow, want)
	}
	_, da, _ := c.App("contoso", "developer-assistant")
	if want := []string{"mock-a", "mock-b"}; !reflect.DeepEqual(da.Models.Allow, want) {
		t.Errorf("developer-assistant allow = %v, want %v (default + fallbacks)", da.Models.Allow, want)
	}
	if sa.MaxTokens != 1024 || sa.MaxTokensLimit != 8192 {
		t.Errorf("max tokens = %d/%d, want 1024/8192", sa.MaxTokens, sa.MaxTokensLimit)
	}
	if sa.Cache != nil || sa.Guardrail != nil {
		t.Errorf("cache/guardrail = %v/%v, want nil (off)", sa.Cache, sa.Guardrail)
	}
	if !sa.Allows("mock-b") || sa.Allows("mock-cheap") {
		t.Errorf("support-assistant Allows is wrong: %v", sa.Models.Allow)
	}
	_, kb, _ := c.App("contoso", "knowledge-bot")
	if !reflect.DeepEqual(kb.Models.Allow, []string{"mock-cheap"}) {
		t.Errorf("knowledge-bot allow = %v", kb.Models.Allow)
	}
	_, ds, _ := c.App("fabrikam", "document-summarizer")
	if !reflect.DeepEqual(ds.Models.Allow, []string{"mock-a"}) {
		t.Errorf("document-summarizer allow = %v", ds.Models.Allow)
	}

	c, err := Parse("x.yaml", []byte(`
models: [{id: m, bedrock_id: b, first_token_timeout: 2500ms}]
tenants:
  - id: t
    apps:
      - id: small
        client_ids: [c1]
        models: {default: m}
        max_tokens_limit: 512
        cache: {}
        guardrail: {id: g, version: "1"}
      - id: explicit
        client_ids: [c2]
        models: {default: m}
        max_tokens: 300
        cache: {ttl: 10m, charge: none, nondeterministic: true}
        guardrail: {id: g, version: DRAFT, stream_mode: async}
`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Auth.TenantClaim != DefaultTenantClaim || c.Auth.TenantGroupPrefix != DefaultTenantGroupPrefix {
		t.Errorf("auth defaults = %+v", c.Auth)
	}
	if m, _ := c.Model("m"); m.FirstTokenTimeout.D() != 2500*time.Millisecond {
		t.Errorf("first_token_timeout = %v", m.FirstTokenTimeout)
	}
	_, small, _ := c.App("t", "small")
	if small.MaxTokens != 512 || small.MaxTokensLimit != 512 {
		t.Errorf("small max tokens = %d/%d, want 512/512 (default clamped to the limit)", small.MaxTokens, small.MaxTokensLimit)
	}
	if *small.Cache != (Cache{TTL: Duration(time.Hour), Charge: "input"}) {
		t.Errorf("small cache = %+v", *small.Cache)
	}
	if small.Guardrail.StreamMode != "sync" {
		t.Errorf("small guardrail = %+v", *small.Guardrail)
	}
	_, ex, _ := c.App("t", "explicit")
	if ex.MaxTokens != 300 || ex.MaxTokensLimit != 8192 {
		t.Errorf("explicit max tokens = %d/%d", ex.MaxTokens, ex.MaxTokensLimit)
	}
	if *ex.Cache != (Cache{TTL: Duration(10 * time.Minute), Charge: "none", Nondeterministic: true}) {
		t.Errorf("explicit cache = %+v", *ex.Cache)
	}
	if *ex.Guardrail != (Guardrail{ID: "g", Version: "DRAFT", StreamMode: "async"}) {
		t.Errorf("explicit guardrail = %+v", *ex.Guardrail)
	}
	// Validate is idempotent: running it again changes nothing.
	before := *ex
	if err := c.Validate("again"); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(before, *ex) {
		t.Error("second Validate changed the app")
	}
}

// base is a small valid file; each error case edits one line of it.
const base = `models:
  - id: mock-a
    bedrock_id: mock-a
    price: {input_per_1k: 0.003, output_per_1k: 0.015}
  - id: mock-b
    bedrock_id: mock-b
tenants:
  - id: contoso
    limits: [{window: month, tokens: 1000}]
    apps:
      - id: support
        client_ids: [c-support]
        models: {default: mock-a, fallbacks: [mock-b]}
        limits: [{window: hour, tokens: 100}]
  - id: fabrikam
    apps:
      - id: docs
        client_ids: [c-docs]
        models: {default: mock-a}
`

func TestValidationErrors(t *testing.T) {
	if _, err := Parse("jetway.yaml", []byte(base)); err != nil {
		t.Fatalf("base config does not load: %v", err)
	}
	tests := []struct {
		name      string
		old, new_ string // replace old with new_ in base
		want      string // the exact error message
	}{
		{"unknown default model", "models: {default: mock-a}", "models: {default: x}",
			`jetway.yaml: tenants[1].apps[0].models.default: unknown model "x"`},
		{"unknown fallback", "fallbacks: [mock-b]", "fallbacks: [mock-z]",
			`jetway.yaml: tenants[0].apps[0].models.fallbacks[0]: unknown model "mock-z"`},
		{"unknown allowed model", "models: {default: mock-a}", "models: {default: mock-a, allow: [mock-a, nope]}",
			`jetway.yaml: tenants[1].apps[0].models.allow[1]: unknown model "nope"`},
		{"default not allowed", "models: {default: mock-a}", "models: {default: mock-a, allow: [mock-b]}",
			`jetway.yaml: tenants[1].apps[0].models.default: "mock-a" is not in models.allow`},
		{"fallback not allowed", "fallbacks: [mock-b]}", "fallbacks: [mock-b], allow: [mock-a]}",
			`jetway.yaml: tenants[0].apps[0].models.fallbacks[0]: "mock-b" is not in models.allow`},
		{"default missing", "models: {default: mock-a}", "models: {allow: [mock-a]}",
			`jetway.yaml: tenants[1].apps[0].models.default: required`},
		{"default as fallback", "fallbacks: [mock-b]", "fallbacks: [mock-a]",
			`jetway.yaml: tenants[0].apps[0].models.fallbacks[0]: "mock-a" is already the default model`},
		{"unknown capability", "  - id: mock-b\n", "  - id: mock-b\n    capabilities: [tools, video]\n",
			`jetway.yaml: models[1].capabilities[1]: unknown capability "video" (one of tools, images, documents, reasoning)`},
		{"duplicate capability", "  - id: mock-b\n", "  - id: mock-b\n    capabilities: [images, images]\n",
			`jetway.yaml: models[1].capabilities[1]: duplicate capability "images"`},
		{"duplicate model id", "  - id: mock-b\n", "  - id: mock-a\n",
			`jetway.yaml: models[1].id: duplicate model id "mock-a" (also models[0])`},
		{"duplicate tenant id", "  - id: fabrikam", "  - id: contoso",
			`jetway.yaml: tenants[1].id: duplicate tenant id "contoso" (also tenants[0].id)`},
		{"duplicate client id across apps", "client_ids: [c-docs]", "client_ids: [c-docs, c-support]",
			`jetway.yaml: tenants[1].apps[0].client_ids[1]: client id "c-support" already belongs to tenants[0].apps[0]`},
		{"bad window", "{window: hour, tokens: 100}", "{window: week, tokens: 100}",
			`jetway.yaml: tenants[0].apps[0].limits[0].window: unknown window "week" (one of minute, hour, day, month)`},
		{"missing window", "{window: hour, tokens: 100}", "{tokens: 100}",
			`jetway.yaml: tenants[0].apps[0].limits[0].window: required (one of minute, hour, day, month)`},
		{"duplicate window", "[{window: hour, tokens: 100}]", "[{window: hour, tokens: 100}, {window: hour, requests: 5}]",
			`jetway.yaml: tenants[0].apps[0].limits[1].window: duplicate hour limit (also tenants[0].apps[0].limits[0])`},
		{"negative tokens", "{window: month, tokens: 1000}", "{window: month, tokens: -1}",
			`jetway.yaml: tenants[0].limits[0].tokens: must not be negative`},
		{"negative requests", "{window: month, tokens: 1000}", "{window: month, tokens: 1, requests: -5}",
			`jetway.yaml: tenants[0].limits[0].requests: must not be negative`},
		{"negative usd", "{window: month, tokens: 1000}", "{window: month, tokens: 1, usd: -0.5}",
			`jetway.yaml: tenants[0].limits[0].usd: must not be negative`},
		{"empty limit", "{window: month, tokens: 1000}", "{window: month}",
			`jetway.yaml: tenants[0].limits[0]: limit sets none of tokens, requests, usd`},
		{"negative user limit", "limits: [{window: hour, tokens: 100}]", "user_limits: [{window: day, tokens: -3}]",
			`jetway.yaml: tenants[0].apps[0].user_limits[0].tokens: must not be negative`},
		{"negative price", "price: {input_per_1k: 0.003,", "price: {input_per_1k: -0.003,",
			`jetway.yaml: models[0].price.input_per_1k: must not be negative`},
		{"negative cache price", "output_per_1k: 0.015}", "output_per_1k: 0.015, cache_read_per_1k: -1}",
			`jetway.yaml: models[0].price.cache_read_per_1k: must not be negative`},
		{"negative cache points", "  - id: mock-b\n", "  - id: mock-b\n    prompt_cache: {max_points: -1}\n",
			`jetway.yaml: models[1].prompt_cache.max_points: must not be negative`},
		{"unknown prompt_cache", "client_ids: [c-docs]", "client_ids: [c-docs]\n        prompt_cache: always",
			`jetway.yaml: tenants[1].apps[0].prompt_cache: unknown prompt_cache "always" (auto or off)`},
		{"placement with an unknown region", "  - id: mock-b\n", "  - id: mock-b\n    placements: [{region: us-east-1}, {region: mars-north-1}]\n",
			`jetway.yaml: models[1].placements[1].region: unknown region "mars-north-1"`},
		{"placement without a region", "  - id: mock-b\n", "  - id: mock-b\n    placements: [{bedrock_id: us.mock-b}]\n",
			`jetway.yaml: models[1].placements[0].region: required`},
		{"duplicate placement", "  - id: mock-b\n", "  - id: mock-b\n    placements: [{region: us-east-1}, {region: us-west-2}, {region: us-east-1, bedrock_id: us.mock-b}]\n",
			`jetway.yaml: models[1].placements[2]: duplicate placement us-east-1 (also placements[0])`},
		{"same region in two accounts is two placements, one twice is a duplicate", "  - id: mock-b\n",
			"  - id: mock-b\n    placements: [{region: us-east-1}, {region: us-east-1, role_arn: \"arn:aws:iam::111122223333:role/jetway\"}, {region: us-east-1, role_arn: \"arn:aws:iam::111122223333:role/other\"}]\n",
			`jetway.yaml: models[1].placements[2]: duplicate placement us-east-1/111122223333 (also placements[1])`},
		{"role that is not one", "  - id: mock-b\n", "  - id: mock-b\n    placements: [{region: us-east-1, role_arn: \"arn:aws:iam::1234:user/x\"}]\n",
			`jetway.yaml: models[1].placements[0].role_arn: "arn:aws:iam::1234:user/x" is not an IAM role ARN (arn:aws:iam::<account>:role/<name>)`},
		{"profile of another region in a placement", "  - id: mock-b\n",
			"  - id: mock-b\n    placements: [{region: us-west-2, bedrock_id: \"arn:aws:bedrock:us-east-1:111122223333:application-inference-profile/abc123\"}]\n",
			`jetway.yaml: models[1].placements[0].bedrock_id: application inference profile of region us-east-1 in a placement of region us-west-2`},
		{"profile ARN that is not one", "    limits: [{window: month, tokens: 1000}]\n",
			"    limits: [{window: month, tokens: 1000}]\n    bedrock_profiles: {mock-a: \"arn:aws:bedrock:us-east-1:111122223333:inference-profile/us.mock-a\"}\n",
			`jetway.yaml: tenants[0].bedrock_profiles.mock-a: "arn:aws:bedrock:us-east-1:111122223333:inference-profile/us.mock-a" is not an application inference profile ARN (arn:aws:bedrock:<region>:<account>:application-inference-profile/<id>)`},
		{"profile for an unknown model", "client_ids: [c-docs]",
			"client_ids: [c-docs]\n        bedrock_profiles: {mock-z: \"arn:aws:bedrock:us-east-1:111122223333:application-inference-profile/abc123\"}",
			`jetway.yaml: tenants[1].apps[0].bedrock_profiles.mock-z: unknown model "mock-z"`},
		{"tier price missing for a tier in use", "  - id: mock-b\n", "  - id: mock-b\n    service_tiers: [default, flex]\n",
			`jetway.yaml: models[1].price.tiers: no price for service tier "flex", which the model takes`},
		{"tier price missing in a placement's price", "  - id: mock-b\n",
			"  - id: mock-b\n    service_tiers: [flex]\n    price: {tiers: {flex: {input_per_1k: 1}}}\n    placements: [{region: us-east-1, price: {input_per_1k: 2}}]\n",
			`jetway.yaml: models[1].placements[0].price.tiers: no price for service tier "flex", which the model takes`},
		{"price for a tier the model does not take", "output_per_1k: 0.015}", "output_per_1k: 0.015, tiers: {priority: {input_per_1k: 0.005}}}",
			`jetway.yaml: models[0].price.tiers.priority: a price for service tier "priority", which the model does not take (service_tiers)`},
		{"unknown tier", "  - id: mock-b\n", "  - id: mock-b\n    service_tiers: [turbo]\n",
			`jetway.yaml: models[1].service_tiers[0]: unknown service tier "turbo" (one of default, priority, flex)`},
		{"app tier its model does not take", "client_ids: [c-docs]", "client_ids: [c-docs]\n        service_tier: flex",
			`jetway.yaml: tenants[1].apps[0].service_tier: service tier "flex", which the app's default model mock-a does not take (its service_tiers)`},
		{"unknown app tier allowed", "client_ids: [c-docs]", "client_ids: [c-docs]\n        service_tiers: [default, scale]",
			`jetway.yaml: tenants[1].apps[0].service_tiers[1]: unknown service tier "scale" (one of default, priority, flex)`},
		{"no models", "models:\n  - id: mock-a\n    bedrock_id: mock-a\n    price: {input_per_1k: 0.003, output_per_1k: 0.015}\n  - id: mock-b\n    bedrock_id: mock-b\n", "models: []\n",
			"jetway.yaml: models: no models defined"},
		{"no tenants", "tenants:\n", "tenants: []\nx:\n",
			`jetway.yaml: x: unknown field "x" (line 8; known fields: auth, models, tenants)`},
		{"unknown field", "        client_ids: [c-support]\n", "        client_ids: [c-support]\n        limts: []\n",
			`jetway.yaml: tenants[0].apps[0].limts: unknown field "limts" (line 13; known fields: bedrock_profiles, cache, client_ids, guardrail, id, limits, max_tokens, max_tokens_limit, models, prompt_cache, responses, service_tier, service_tiers, user_limits, users)`},
		{"wrong type", "tokens: 100}", "tokens: lots}",
			"jetway.yaml: tenants[0].apps[0].limits[0].tokens: cannot unmarshal !!str `lots` into int64"},
		{"bad duration", "    bedrock_id: mock-b\n", "    bedrock_id: mock-b\n    first_token_timeout: soon\n",
			`jetway.yaml: models[1].first_token_timeout: invalid duration "soon" (use a form like "250ms" or "1h")`},
		{"list expected", "client_ids: [c-docs]", "client_ids: c-docs",
			`jetway.yaml: tenants[1].apps[0].client_ids: expected a list, got "c-docs"`},
		{"app without client ids", "client_ids: [c-docs]", "client_ids: []",
			`jetway.yaml: tenants[1].apps[0].client_ids: app "docs" has no client ids`},
		{"tenant without apps", "  - id: fabrikam\n    apps:\n", "  - id: fabrikam\n    apps: []\n    x_apps:\n",
			`jetway.yaml: tenants[1].x_apps: unknown field "x_apps" (line 17; known fields: apps, bedrock_profiles, id, limits)`},
		{"bad tenant id", "  - id: fabrikam", "  - id: fab#rikam",
			`jetway.yaml: tenants[1].id: invalid tenant id "fab#rikam" (letters, digits, '.', '_', '-'; at most 64)`},
		{"max_tokens above limit", "        models: {default: mock-a}\n", "        models: {default: mock-a}\n        max_tokens: 9000\n",
			`jetway.yaml: tenants[1].apps[0].max_tokens: 9000 is above max_tokens_limit 8192`},
		{"bad cache charge", "        models: {default: mock-a}\n", "        models: {default: mock-a}\n        cache: {charge: all}\n",
			`jetway.yaml: tenants[1].apps[0].cache.charge: unknown charge "all" (input or none)`},
		{"guardrail without version", "        models: {default: mock-a}\n", "        models: {default: mock-a}\n        guardrail: {id: g1}\n",
			`jetway.yaml: tenants[1].apps[0].guardrail.version: required (for example "1" or "DRAFT")`},
		{"missing bedrock id", "    bedrock_id: mock-b\n", "",
			`jetway.yaml: models[1].bedrock_id: required`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !strings.Contains(base, tt.old) {
				t.Fatalf("test case: %q not in base", tt.old)
			}
			_, err := Parse("jetway.yaml", []byte(strings.Replace(base, tt.old, tt.new_, 1)))
			if err == nil {
				t.Fatalf("Parse succeeded, want %s", tt.want)
			}
			// The first line is the problem the case is about; later lines
			// may follow from it (an unknown model id, for example).
			if first, _, _ := strings.Cut(err.Error(), "\n"); first != tt.want {
				t.Errorf("error:\n got %s\nwant %s", err, tt.want)
			}
			var ce *Error
			if !errors.As(err, &ce) || ce.File != "jetway.yaml" {
				t.Errorf("error %v is not a *config.Error naming the file", err)
			}
		})
	}
}

func TestNoTenantsAndEmptyApps(t *testing.T) {
	_, err := Parse("j.yaml", []byte("models: [{id: m, bedrock_id: m}]\n"))
	if err == nil || err.Error() != "j.yaml: tenants: no tenants defined" {
		t.Errorf("no tenants: %v", err)
	}
	_, err = Parse("j.yaml", []byte("models: [{id: m, bedrock_id: m}]\ntenants: [{id: t}]\n"))
	if err == nil || err.Error() != `j.yaml: tenants[0].apps: tenant "t" has no apps` {
		t.Errorf("no apps: %v", err)
	}
}

func TestSeveralErrorsAreAllReported(t *testing.T) {
	bad := strings.NewReplacer(
		"models: {default: mock-a}", "models: {default: x}",
		"{window: hour, tokens: 100}", "{window: week, tokens: 100}",
	).Replace(base)
	_, err := Parse("jetway.yaml", []byte(bad))
	if err == nil {
		t.Fatal("Parse succeeded")
	}
	lines := strings.Split(err.Error(), "\n")
	want := []string{
		`jetway.yaml: tenants[0].apps[0].limits[0].window: unknown window "week" (one of minute, hour, day, month)`,
		`jetway.yaml: tenants[1].apps[0].models.default: unknown model "x"`,
	}
	if !reflect.DeepEqual(lines, want) {
		t.Errorf("errors:\n%s\nwant:\n%s", err, strings.Join(want, "\n"))
	}
}

func TestFileLevelErrors(t *testing.T) {
	tests := []struct{ name, data, want string }{
		{"empty", "", "j.yaml: file is empty"},
		{"syntax", "models: [\n", "j.yaml: line 1: did not find expected node content"},
		{"two documents", base + "---\nmodels: []\n", "j.yaml: more than one YAML document"},
		{"not a mapping", "- a\n- b\n", "j.yaml: expected a mapping, got a list"},
		{"duplicate key", base + "models: []\n", `j.yaml: line 20: mapping key "models" already defined at line 1`},
		// yaml.v3 names the line its enclosing block starts on, or none: the problem's own line is reported.
		{"bad indent", "models:\n  - id: x\n  bedrock_id: y\n", "j.yaml: line 3: did not find expected '-' indicator"},
		{"unclosed flow", "models:\n  - id: x\n    bedrock_id: [y\ntenants: []\n", "j.yaml: line 3: did not find expected ',' or ']'"},
		{"on the first line", "models: a: b\n", "j.yaml: line 1: mapping values are not allowed in this context"},
		{"tab", "models:\n\t- id: x\n", "j.yaml: line 2: found character that cannot start any token"},
		{"unknown anchor", "models: &a []\ntenants: *b\n", "j.yaml: line 2: unknown anchor 'b' referenced"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("j.yaml", []byte(tt.data))
			if err == nil || err.Error() != tt.want {
				t.Errorf("error = %v, want %s", err, tt.want)
			}
		})
	}
	_, err := Load(filepath.Join(t.TempDir(), "missing.yaml"))
	if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("Load(missing) = %v, want a not-exist error naming the file", err)
	}
}

func TestModelCapabilities(t *testing.T) {
	cfg, err := Parse("jetway.yaml", []byte(strings.Replace(base, "  - id: mock-b\n", "  - id: mock-b\n    capabilities: [tools, reasoning]\n", 1)))
	if err != nil {
		t.Fatal(err)
	}
	a, _ := cfg.Model("mock-a")
	b, _ := cfg.Model("mock-b")
	if a.Supports(CapabilityTools) || !b.Supports(CapabilityTools) || !b.Supports(CapabilityReasoning) || b.Supports(CapabilityImages) {
		t.Fatalf("capabilities: mock-a %v, mock-b %v", a.Capabilities, b.Capabilities)
	}
}

func TestPlacementsProfilesAndTiers(t *testing.T) {
	c, err := Parse("jetway.yaml", []byte(`models:
  - id: claude
    bedrock_id: us.anthropic.claude
    service_tiers: [default, priority, flex]
    price:
      input_per_1k: 0.003
      output_per_1k: 0.015
      tiers:
        priority: {input_per_1k: 0.00525, output_per_1k: 0.02625}
        flex: {input_per_1k: 0.0015, output_per_1k: 0.0075}
    placements:
      - region: us-east-1
      - region: us-west-2
        bedrock_id: us.anthropic.claude-west
      - region: eu-west-1
        role_arn: arn:aws:iam::111122223333:role/jetway-bedrock
        price:
          input_per_1k: 0.004
          output_per_1k: 0.02
          tiers:
            priority: {input_per_1k: 0.007, output_per_1k: 0.035}
            flex: {input_per_1k: 0.002, output_per_1k: 0.01}
tenants:
  - id: contoso
    bedrock_profiles: {claude: "arn:aws:bedrock:us-east-1:111122223333:application-inference-profile/abc123"}
    apps:
      - id: chat
        client_ids: [c-chat]
        models: {default: claude}
        service_tier: priority
        service_tiers: [default, flex]
      - id: batch
        client_ids: [c-batch]
        models: {default: claude}
        bedrock_profiles: {claude: "arn:aws:bedrock:us-west-2:111122223333:application-inference-profile/def456"}
`))
	if err != nil {
		t.Fatal(err)
	}
	m, _ := c.Model("claude")
	names := []string{}
	for _, p := range m.Placements {
		names = append(names, p.Name())
	}
	if got, want := strings.Join(names, " "), "us-east-1 us-west-2 eu-west-1/111122223333"; got != want {
		t.Errorf("placement names = %q, want %q", got, want)
	}
	for _, c := range []struct {
		placement, tier string
		in              float64
	}{{"", "", 0.003}, {"us-east-1", "default", 0.003}, {"us-west-2", "flex", 0.0015}, {"", "priority", 0.00525},
		{"eu-west-1/111122223333", "", 0.004}, {"eu-west-1/111122223333", "flex", 0.002}} {
		p := m.PriceFor(c.placement, c.tier)
		if p.InputPer1K != c.in || p.Tiers != nil || p.CacheRead() != c.in {
			t.Errorf("PriceFor(%q, %q) = %+v, want input %v and cache prices filled", c.placement, c.tier, p, c.in)
		}
	}
	if !m.Takes("flex") || !m.Takes("") || !m.Takes("default") {
		t.Error("Takes: the model takes its tiers")
	}
	tn, chat, _ := c.App("contoso", "chat")
	_, batch, _ := c.App("contoso", "batch")
	if chat.ServiceTier != "priority" || batch.ServiceTier != "default" {
		t.Errorf("service tiers %q %q, want priority and the default", chat.ServiceTier, batch.ServiceTier)
	}
	if got := ProfileFor(tn, chat, "claude"); !strings.HasSuffix(got, "/abc123") {
		t.Errorf("chat's profile %q, want the tenant's", got)
	}
	if got := ProfileFor(tn, batch, "claude"); !strings.HasSuffix(got, "/def456") {
		t.Errorf("batch's profile %q, want its own", got)
	}
	if p, ok := ParseProfile(ProfileFor(tn, batch, "claude")); !ok || p.Region != "us-west-2" || p.Account != "111122223333" {
		t.Errorf("ParseProfile = %+v %v", p, ok)
	}
}
