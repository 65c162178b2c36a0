// Package config loads Jetway's tenants, apps, models and limits from a YAML
// file, fills in defaults and validates it before the gateway starts.
//
// Unknown fields are errors (a misspelt "limts" must not silently drop a
// quota), and every error names the file, the YAML path and the problem:
//
//	jetway.yaml: tenants[1].apps[0].models.default: unknown model "x"
//
// With no file, Default returns the built-in configuration (default.yaml,
// the example of the Core issue): Contoso with support-assistant,
// developer-assistant and knowledge-bot, and Fabrikam with
// document-summarizer limited to 20,000 tokens per hour.
//
// The package knows nothing about AWS or about how limits are enforced;
// internal/quota does that.
package config

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"go.yaml.in/yaml/v3"
)

// Defaults applied by Validate (and so by Load, Parse and Default).
const (
	// DefaultTenantClaim is the JWT claim naming the tenant.
	DefaultTenantClaim = "custom:tenant"
	// DefaultTenantGroupPrefix marks a cognito:groups entry naming the tenant.
	DefaultTenantGroupPrefix = "tenant:"
	// DefaultMaxTokens is an app's max_tokens when the client gives none.
	DefaultMaxTokens = 1024
	// DefaultMaxTokensLimit is the largest max_tokens a client may ask for.
	DefaultMaxTokensLimit = 8192
	// DefaultCacheTTL is how long a cached answer lives when cache.ttl is unset.
	DefaultCacheTTL = time.Hour
	// DefaultCacheMinTokens is a model's prompt_cache.min_tokens when unset:
	// the smallest prefix Bedrock caches for most Claude models.
	DefaultCacheMinTokens = 1024
	// DefaultCacheMaxPoints is a model's prompt_cache.max_points when unset:
	// Bedrock's limit of cache points per request.
	DefaultCacheMaxPoints = 4
)

// Prompt cache placements of an app (App.PromptCache).
const (
	// PromptCacheAuto places cache points where a conversation's prefix is
	// stable (the default; see docs/configuration.md).
	PromptCacheAuto = "auto"
	// PromptCacheOff places none; a client's own points are still kept.
	PromptCacheOff = "off"
)

// Limit windows (calendar windows in UTC).
const (
	WindowMinute = "minute"
	WindowHour   = "hour"
	WindowDay    = "day"
	WindowMonth  = "month"
)

// Windows lists the valid limit windows, narrowest first.
func Windows() []string {
	return []string{WindowMinute, WindowHour, WindowDay, WindowMonth}
}

// Cache charge policies: what a cache hit costs against the quota.
const (
	// CacheChargeInput charges the input estimate only (the default).
	CacheChargeInput = "input"
	// CacheChargeNone charges nothing.
	CacheChargeNone = "none"
)

// Guardrail stream processing modes (Bedrock's GuardrailStreamConfiguration).
const (
	GuardrailStreamSync  = "sync"
	GuardrailStreamAsync = "async"
)

// Config is the whole file: models, authentication claim names and tenants.
type Config struct {
	Models  []Model  `yaml:"models" json:"models,omitempty"`
	Auth    Auth     `yaml:"auth" json:"auth,omitempty"`
	Tenants []Tenant `yaml:"tenants" json:"tenants,omitempty"`

	// idx finds tenants, apps, client ids, models and user overrides in
	// constant time; built by Validate or Index, read-only after.
	idx *index
}

// Auth names the JWT claims that carry the tenant.
type Auth struct {
	// TenantClaim is the claim holding the tenant id; default "custom:tenant".
	TenantClaim string `yaml:"tenant_claim" json:"tenant_claim,omitempty"`
	// TenantGroupPrefix marks the cognito:groups entry "<prefix><tenant>"
	// used when TenantClaim is absent; default "tenant:".
	TenantGroupPrefix string `yaml:"tenant_group_prefix" json:"tenant_group_prefix,omitempty"`
}

// Model is a model clients may name, mapped to a Bedrock model id.
type Model struct {
	// ID is the name clients and the configuration use.
	ID string `yaml:"id" json:"id,omitempty"`
	// BedrockID is the Bedrock model (or inference profile) id; required.
	BedrockID string `yaml:"bedrock_id" json:"bedrock_id,omitempty"`
	// Price is the cost in USD per 1,000 tokens.
	Price Price `yaml:"price" json:"price,omitempty"`
	// FirstTokenTimeout bounds the wait for the first token before a
	// fallback is tried; 0 means the router's default.
	FirstTokenTimeout Duration `yaml:"first_token_timeout" json:"first_token_timeout,omitempty"`
	// PromptCache says the model caches prompts (Bedrock cache points) and
	// how; nil: it does not, and no request to it carries a cache point.
	PromptCache *ModelCache `yaml:"prompt_cache" json:"prompt_cache,omitempty"`
	// Capabilities are what the model takes beyond text (CapabilityTools,
	// CapabilityImages, CapabilityDocuments, CapabilityReasoning); none by
	// default. A request using one the model lacks is refused before any
	// model call.
	Capabilities []string `yaml:"capabilities" json:"capabilities,omitempty"`
	// Placements are the places the model is served (regions, accounts,
	// inference profiles), tried in turn before a fallback; none: its
	// bedrock_id in the gateway's own region and account.
	Placements []Placement `yaml:"placements" json:"placements,omitempty"`
	// ServiceTiers are the Bedrock service tiers the model takes (default,
	// priority, flex); none: it is called without one (Bedrock's default).
	// Every tier but default needs its price in price.tiers.
	ServiceTiers []string `yaml:"service_tiers" json:"service_tiers,omitempty"`
	// Version is the stored document's version (the admin API's ETag);
	// empty for a configuration read from a file.
	Version string `yaml:"-" json:"version,omitempty"`
}

// Model capabilities (Model.Capabilities).
const (
	CapabilityTools     = "tools"
	CapabilityImages    = "images"
	CapabilityDocuments = "documents"
	CapabilityReasoning = "reasoning"
)

// Capabilities lists every capability a model may have, in the order
// errors name them.
var Capabilities = []string{CapabilityTools, CapabilityImages, CapabilityDocuments, CapabilityReasoning}

// Supports reports whether the model is configured with capability c.
func (m Model) Supports(c string) bool { return slices.Contains(m.Capabilities, c) }

// ModelCache is how a model caches prompts.
type ModelCache struct {
	// MinTokens is the smallest prefix a cache point caches; a point
	// before fewer input tokens is ignored by the model. Default 1024.
	MinTokens int `yaml:"min_tokens" json:"min_tokens,omitempty"`
	// MaxPoints is the most cache points a request may carry (the model
	// refuses more). Default 4.
	MaxPoints int `yaml:"max_points" json:"max_points,omitempty"`
}

// Price is a model's price in USD per 1,000 tokens. CacheReadPer1K and
// CacheWritePer1K price input tokens read from and written to the prompt
// cache; unset, they are InputPer1K (Validate fills them in).
type Price struct {
	InputPer1K      float64  `yaml:"input_per_1k" json:"input_per_1k,omitempty"`
	OutputPer1K     float64  `yaml:"output_per_1k" json:"output_per_1k,omitempty"`
	CacheReadPer1K  *float64 `yaml:"cache_read_per_1k" json:"cache_read_per_1k,omitempty"`
	CacheWritePer1K *float64 `yaml:"cache_write_per_1k" json:"cache_write_per_1k,omitempty"`
	// Tiers are the prices of the service tiers other than default, by
	// tier (priority, flex): one for every tier the model takes.
	Tiers map[string]Price `yaml:"tiers" json:"tiers,omitempty"`
}

// CacheRead is the price of 1,000 input tokens read from the prompt
// cache: CacheReadPer1K, else the input price.
func (p Price) CacheRead() float64 {
	if p.CacheReadPer1K != nil {
		return *p.CacheReadPer1K
	}
	return p.InputPer1K
}

// CacheWrite is the price of 1,000 input tokens written to the prompt
// cache: CacheWritePer1K, else the input price.
func (p Price) CacheWrite() float64 {
	if p.CacheWritePer1K != nil {
		return *p.CacheWritePer1K
	}
	return p.InputPer1K
}

// Tenant is a customer: tenant-wide limits and its apps.
type Tenant struct {
	ID     string  `yaml:"id" json:"id"`
	Limits []Limit `yaml:"limits" json:"limits,omitempty"`
	Apps   []App   `yaml:"apps" json:"apps"`
	// BedrockProfiles names, by configured model id, the application
	// inference profile ARN the tenant's requests to that model call, so
	// AWS billing shows the tenant's cost by the profile's tags.
	BedrockProfiles map[string]string `yaml:"bedrock_profiles" json:"bedrock_profiles,omitempty"`
	// Version is the stored document's version; see Model.Version.
	Version string `yaml:"-" json:"version,omitempty"`
}

// App is one application of a tenant, reached through its Cognito app
// client ids.
type App struct {
	ID string `yaml:"id" json:"id,omitempty"`
	// ClientIDs are the Cognito app client ids that belong to this app; a
	// client id belongs to exactly one app in the whole file.
	ClientIDs []string  `yaml:"client_ids" json:"client_ids,omitempty"`
	Models    AppModels `yaml:"models" json:"models,omitempty"`
	// Limits apply to the app as a whole.
	Limits []Limit `yaml:"limits" json:"limits,omitempty"`
	// UserLimits apply to each user (JWT sub) of the app separately.
	UserLimits []Limit `yaml:"user_limits" json:"user_limits,omitempty"`
	// MaxTokens is max_tokens when the client gives none; default 1024
	// (or MaxTokensLimit when that is smaller).
	MaxTokens int `yaml:"max_tokens" json:"max_tokens,omitempty"`
	// MaxTokensLimit is the largest max_tokens a client may ask; default 8192.
	MaxTokensLimit int `yaml:"max_tokens_limit" json:"max_tokens_limit,omitempty"`
	// Cache enables the response cache for this app; nil means off.
	Cache *Cache `yaml:"cache" json:"cache,omitempty"`
	// Guardrail names a Bedrock Guardrail applied to every call; nil means none.
	Guardrail *Guardrail `yaml:"guardrail" json:"guardrail,omitempty"`
	// PromptCache is "auto" (default: the gateway places cache points for
	// models that cache prompts) or "off" (only a client's own points).
	PromptCache string `yaml:"prompt_cache" json:"prompt_cache,omitempty"`
	// Responses is the Responses door's policy for the app; nil: its defaults.
	Responses *Responses `yaml:"responses" json:"responses,omitempty"`
	// ServiceTier is the Bedrock service tier of the app's requests:
	// default (when unset), priority or flex.
	ServiceTier string `yaml:"service_tier" json:"service_tier,omitempty"`
	// ServiceTiers are the other tiers a request may ask for (its
	// service_tier); none: only the app's own.
	ServiceTiers []string `yaml:"service_tiers" json:"service_tiers,omitempty"`
	// BedrockProfiles are the app's own application inference profiles
	// by model id; they take precedence over the tenant's.
	BedrockProfiles map[string]string `yaml:"bedrock_profiles" json:"bedrock_profiles,omitempty"`
	// Users are the app's per-user overrides. In the tenants file they
	// are written under the app; in the admin API each is its own
	// document (so an app's document leaves them out).
	Users []UserOverride `yaml:"users" json:"-"`
	// Version is the stored document's version; see Model.Version.
	Version string `yaml:"-" json:"version,omitempty"`
	// UID names this incarnation of the app in the config table: a user
	// override belongs to the app it was written for, so an app deleted
	// and made again does not inherit the old one's overrides.
	UID string `yaml:"-" json:"-"`
}

// UserOverride is one user's rules in an app: Limits replace the app's
// user_limits for that user (absent or empty: the app's apply),
// and a Disabled user's new requests are refused (403 forbidden).
type UserOverride struct {
	// Sub is the user's JWT sub: 1-128 characters without '/'.
	Sub      string  `yaml:"sub" json:"sub"`
	Limits   []Limit `yaml:"limits" json:"limits,omitempty"`
	Disabled bool    `yaml:"disabled" json:"disabled"`
	// Version is the stored document's version; see Model.Version.
	Version string `yaml:"-" json:"version,omitempty"`
}

// Responses is an app's policy on the Responses door (docs/responses.md).
type Responses struct {
	// UnsupportedTools is what a request's tools the gateway cannot run
	// (hosted tools such as web_search, custom and namespace tools) get:
	// ResponsesToolsDrop (default: left out of the model call, named in
	// the x-jetway-dropped-tools header and the log) or ResponsesToolsRefuse (400).
	UnsupportedTools string `yaml:"unsupported_tools" json:"unsupported_tools,omitempty"`
	// Retention is how long a response with store:true is kept; default
	// DefaultResponsesRetention, at most MaxResponsesRetention.
	Retention Duration `yaml:"retention" json:"retention,omitempty"`
}

// The Responses door's policies and bounds.
const (
	ResponsesToolsDrop        = "drop"
	ResponsesToolsRefuse      = "refuse"
	DefaultResponsesRetention = 30 * 24 * time.Hour
	MaxResponsesRetention     = 90 * 24 * time.Hour
)

// Defaults is the policy with its defaults filled in (r may be nil).
func (r *Responses) Defaults() Responses {
	var out Responses
	if r != nil {
		out = *r
	}
	if out.UnsupportedTools == "" {
		out.UnsupportedTools = ResponsesToolsDrop
	}
	if out.Retention <= 0 {
		out.Retention = Duration(DefaultResponsesRetention)
	}
	return out
}

// AppModels is an app's model policy.
type AppModels struct {
	// Default answers when the client names no model; required.
	Default string `yaml:"default" json:"default,omitempty"`
	// Fallbacks are tried in order when the chosen model fails before its
	// first token.
	Fallbacks []string `yaml:"fallbacks" json:"fallbacks,omitempty"`
	// Allow lists the models clients may name; default Default+Fallbacks.
	Allow []string `yaml:"allow" json:"allow,omitempty"`
}

// Limit is one quota: at most Tokens tokens (input+output), Requests
// requests and USD dollars per calendar Window (UTC). A zero amount means
// that measure is not limited; at least one must be set.
type Limit struct {
	// Window is minute, hour, day or month.
	Window   string  `yaml:"window" json:"window,omitempty"`
	Tokens   int64   `yaml:"tokens" json:"tokens,omitempty"`
	Requests int64   `yaml:"requests" json:"requests,omitempty"`
	USD      float64 `yaml:"usd" json:"usd,omitempty"`
	// Alerts are the percentages of the limit at which a quota alert is
	// sent (docs/admin.md, "Alerts"); unset: 80, 90 and 100 once a sink
	// is configured.
	Alerts []int `yaml:"alerts" json:"alerts,omitempty"`
}

// Cache is an app's response cache policy.
type Cache struct {
	// TTL is how long an answer stays cached; default 1h.
	TTL Duration `yaml:"ttl" json:"ttl,omitempty"`
	// Charge is what a hit costs: "input" (the input estimate; default)
	// or "none".
	Charge string `yaml:"charge" json:"charge,omitempty"`
	// Nondeterministic allows caching requests with a temperature above 0.
	Nondeterministic bool `yaml:"nondeterministic" json:"nondeterministic,omitempty"`
}

// Guardrail names a Bedrock Guardrail.
type Guardrail struct {
	// ID is the guardrail identifier (id or ARN); required.
	ID string `yaml:"id" json:"id,omitempty"`
	// Version is the guardrail version ("1", "DRAFT"); required.
	Version string `yaml:"version" json:"version,omitempty"`
	// StreamMode is "sync" (default) or "async".
	StreamMode string `yaml:"stream_mode" json:"stream_mode,omitempty"`
}

// Duration is a time.Duration written in YAML as "250ms", "30s" or "1h".
type Duration time.Duration

// UnmarshalYAML parses a Go duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("expected a duration like \"250ms\" or \"1h\"")
	}
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("invalid duration %q (use a form like \"250ms\" or \"1h\")", n.Value)
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes the duration as a Go duration string.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// UnmarshalJSON reads a Go duration string (as the config store keeps it).
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("expected a duration like \"250ms\" or \"1h\"")
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("invalid duration %q (use a form like \"250ms\" or \"1h\")", s)
	}
	*d = Duration(v)
	return nil
}

// MarshalJSON writes the duration as a Go duration string, as in YAML.
func (d Duration) MarshalJSON() ([]byte, error) {
	return []byte(`"` + time.Duration(d).String() + `"`), nil
}

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// String formats the duration like time.Duration.
func (d Duration) String() string { return time.Duration(d).String() }

// AppForClient finds the app an app client id belongs to. It satisfies
// auth.Directory.
func (c *Config) AppForClient(clientID string) (tenant, app string, ok bool) {
	if clientID == "" {
		return "", "", false
	}
	if c.idx != nil {
		at, found := c.idx.clients[clientID]
		if !found {
			return "", "", false
		}
		return c.Tenants[at.tenant].ID, c.Tenants[at.tenant].Apps[at.app].ID, true
	}
	for ti := range c.Tenants {
		t := &c.Tenants[ti]
		for ai := range t.Apps {
			if slices.Contains(t.Apps[ai].ClientIDs, clientID) {
				return t.ID, t.Apps[ai].ID, true
			}
		}
	}
	return "", "", false
}

// App returns a tenant and one of its apps.
func (c *Config) App(tenant, app string) (*Tenant, *App, bool) {
	if c.idx != nil {
		ti, found := c.idx.tenants[tenant]
		if !found {
			return nil, nil, false
		}
		t := &c.Tenants[ti]
		ai, found := c.idx.apps[appKey{tenant, app}]
		if !found {
			return t, nil, false
		}
		return t, &t.Apps[ai], true
	}
	for ti := range c.Tenants {
		t := &c.Tenants[ti]
		if t.ID != tenant {
			continue
		}
		for ai := range t.Apps {
			if t.Apps[ai].ID == app {
				return t, &t.Apps[ai], true
			}
		}
		return t, nil, false
	}
	return nil, nil, false
}

// Model returns the model with the given configuration id.
func (c *Config) Model(id string) (*Model, bool) {
	if c.idx != nil {
		i, found := c.idx.models[id]
		if !found {
			return nil, false
		}
		return &c.Models[i], true
	}
	for i := range c.Models {
		if c.Models[i].ID == id {
			return &c.Models[i], true
		}
	}
	return nil, false
}

// Allows reports whether clients of the app may name model id.
func (a *App) Allows(id string) bool { return slices.Contains(a.Models.Allow, id) }

//go:embed default.yaml
var defaultYAML []byte

// DefaultYAML returns the text of the built-in configuration.
func DefaultYAML() []byte { return slices.Clone(defaultYAML) }

// Default returns the built-in configuration (the Core issue's example),
// a fresh copy on every call.
func Default() *Config {
	c, err := Parse("default.yaml", defaultYAML)
	if err != nil {
		// The embedded file is tested; this cannot happen in a built binary.
		panic("config: embedded default.yaml is invalid: " + err.Error())
	}
	return c
}
