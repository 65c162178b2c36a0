package config

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
	"time"
)

var (
	// Tenant and app ids become parts of quota keys and metric labels, so
	// they are kept to a small, separator-free alphabet.
	idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
	// Model ids may also carry ':' (Bedrock-style names such as "claude:v2").
	modelIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`)
)

// Validate fills in defaults (auth claim names, Allow = Default+Fallbacks,
// MaxTokens, MaxTokensLimit, cache and guardrail settings), checks the
// configuration and indexes it. It is what Parse runs after decoding;
// call it on a Config built in Go. name is used as the file name in
// errors. The admin API's documents are checked by the same rules
// (CheckTenant, CheckModel, CheckUser).
func (c *Config) Validate(name string) error {
	v := &validator{file: name, lookup: c.Model}
	if c.Auth.TenantClaim == "" {
		c.Auth.TenantClaim = DefaultTenantClaim
	}
	if c.Auth.TenantGroupPrefix == "" {
		c.Auth.TenantGroupPrefix = DefaultTenantGroupPrefix
	}

	models := map[string]string{} // id -> path of its definition
	if len(c.Models) == 0 {
		v.add("models", "no models defined")
	}
	for i := range c.Models {
		p := fmt.Sprintf("models[%d]", i)
		m := &c.Models[i]
		v.model(p, m)
		switch {
		case m.ID == "" || !modelIDPattern.MatchString(m.ID):
		case models[m.ID] != "":
			v.add(p+".id", "duplicate model id %q (also %s)", m.ID, models[m.ID])
		default:
			models[m.ID] = p
		}
	}

	if len(c.Tenants) == 0 {
		v.add("tenants", "no tenants defined")
	}
	tenants := map[string]string{}
	clients := map[string]string{} // client id -> path of the app that has it
	for ti := range c.Tenants {
		tp := fmt.Sprintf("tenants[%d]", ti)
		v.id(tp+".id", "tenant", c.Tenants[ti].ID, tenants)
		v.tenant(tp, &c.Tenants[ti], models, func(id string) (string, bool) { p, ok := clients[id]; return p, ok },
			func(id, path string) { clients[id] = path })
	}
	if len(v.errs) > 0 {
		return v.err()
	}
	c.Index()
	return nil
}

// CheckTenant fills in t's defaults and checks it as the tenants file's
// entry it would be in c (its models, and client ids no other tenant's
// app holds). Errors are Errors with paths within the document
// (apps[0].limits[1].window) and no file.
func (c *Config) CheckTenant(t *Tenant) error {
	v := &validator{lookup: c.Model}
	models := map[string]string{}
	for i := range c.Models {
		models[c.Models[i].ID] = "models." + c.Models[i].ID
	}
	v.id("id", "tenant", t.ID, map[string]string{})
	own := map[string]string{}
	v.tenant("", t, models, func(id string) (string, bool) {
		if p, ok := own[id]; ok {
			return p, true
		}
		tn, app, ok := c.AppForClient(id)
		if ok && tn != t.ID {
			return "tenant " + tn + " app " + app, true
		}
		return "", false
	}, func(id, path string) { own[id] = path })
	return v.err()
}

// CheckModel fills in m's defaults and checks it as a models entry.
func CheckModel(m *Model) error {
	v := &validator{}
	v.model("", m)
	return v.err()
}

// CheckUser checks a user override as an app's users entry.
func CheckUser(u *UserOverride) error {
	v := &validator{}
	v.user("", u)
	return v.err()
}

// at joins a document path and a key ("" is the document itself).
func at(p, key string) string {
	if p == "" {
		return key
	}
	return p + "." + key
}

// model checks one models entry at path p.
func (v *validator) model(p string, m *Model) {
	switch {
	case m.ID == "":
		v.add(at(p, "id"), "required")
	case !modelIDPattern.MatchString(m.ID):
		v.add(at(p, "id"), "invalid model id %q (letters, digits, '.', '_', '-', ':'; at most 128)", m.ID)
	}
	if m.BedrockID == "" {
		v.add(at(p, "bedrock_id"), "required")
	}
	v.nonNegative(at(p, "price.input_per_1k"), m.Price.InputPer1K)
	v.nonNegative(at(p, "price.output_per_1k"), m.Price.OutputPer1K)
	v.cachePrices(at(p, "price"), &m.Price)
	v.modelCache(at(p, "prompt_cache"), m.PromptCache)
	if m.FirstTokenTimeout < 0 {
		v.add(at(p, "first_token_timeout"), "must not be negative")
	}
	v.placements(p, m)
	for j, c := range m.Capabilities {
		cp := fmt.Sprintf("%s[%d]", at(p, "capabilities"), j)
		switch {
		case !slices.Contains(Capabilities, c):
			v.add(cp, "unknown capability %q (one of %s)", c, strings.Join(Capabilities, ", "))
		case slices.Index(m.Capabilities, c) < j:
			v.add(cp, "duplicate capability %q", c)
		}
	}
}

// tenant checks one tenants entry at path tp (its id is checked by the
// caller): owner names what else holds a client id, claim records one.
func (v *validator) tenant(tp string, t *Tenant, models map[string]string,
	owner func(id string) (string, bool), claim func(id, path string)) {
	v.limits(at(tp, "limits"), t.Limits)
	v.profiles(at(tp, "bedrock_profiles"), t.BedrockProfiles, models)
	if len(t.Apps) == 0 {
		v.add(at(tp, "apps"), "tenant %q has no apps", t.ID)
	}
	apps := map[string]string{}
	for ai := range t.Apps {
		a := &t.Apps[ai]
		ap := fmt.Sprintf("%s[%d]", at(tp, "apps"), ai)
		v.id(ap+".id", "app", a.ID, apps)
		if len(a.ClientIDs) == 0 {
			v.add(ap+".client_ids", "app %q has no client ids", a.ID)
		}
		if len(a.ClientIDs) > MaxClientIDs {
			v.add(ap+".client_ids", "%d client ids: at most %d", len(a.ClientIDs), MaxClientIDs)
		}
		for ci, id := range a.ClientIDs {
			if ci >= MaxClientIDs {
				break
			}
			cp := fmt.Sprintf("%s.client_ids[%d]", ap, ci)
			if id == "" {
				v.add(cp, "empty client id")
			} else if other, taken := owner(id); taken {
				v.add(cp, "client id %q already belongs to %s", id, other)
			} else {
				claim(id, ap)
			}
		}
		v.appModels(ap+".models", &a.Models, models)
		v.limits(ap+".limits", a.Limits)
		v.limits(ap+".user_limits", a.UserLimits)
		v.maxTokens(ap, a)
		v.cache(ap+".cache", a.Cache)
		v.guardrail(ap+".guardrail", a.Guardrail)
		v.appTier(ap, a, v.lookup)
		v.profiles(ap+".bedrock_profiles", a.BedrockProfiles, models)
		switch a.PromptCache {
		case "":
			a.PromptCache = PromptCacheAuto
		case PromptCacheAuto, PromptCacheOff:
		default:
			v.add(ap+".prompt_cache", "unknown prompt_cache %q (auto or off)", a.PromptCache)
		}
		if r := a.Responses; r != nil {
			if r.UnsupportedTools != "" && r.UnsupportedTools != ResponsesToolsDrop && r.UnsupportedTools != ResponsesToolsRefuse {
				v.add(ap+".responses.unsupported_tools", "unknown unsupported_tools %q (drop or refuse)", r.UnsupportedTools)
			}
			if r.Retention < 0 || r.Retention.D() > MaxResponsesRetention {
				v.add(ap+".responses.retention", "retention %s is over the %s bound", r.Retention, time.Duration(MaxResponsesRetention))
			}
		}
		subs := map[string]int{}
		for ui := range a.Users {
			up := fmt.Sprintf("%s.users[%d]", ap, ui)
			v.user(up, &a.Users[ui])
			if j, dup := subs[a.Users[ui].Sub]; dup {
				v.add(up+".sub", "duplicate user %q (also users[%d])", a.Users[ui].Sub, j)
			}
			subs[a.Users[ui].Sub] = ui
		}
	}
}

// user checks one user override at path p.
func (v *validator) user(p string, u *UserOverride) {
	if msg := SubProblem(u.Sub); msg != "" {
		v.add(at(p, "sub"), "%s", msg)
	}
	v.limits(at(p, "limits"), u.Limits)
}

// MaxClientIDs bounds an app's client ids.
const MaxClientIDs = 100

// MaxSubLength bounds a user override's sub.
const MaxSubLength = 128

// SubProblem is what is wrong with sub as a user override's id, or "".
func SubProblem(sub string) string {
	switch {
	case sub == "":
		return "required"
	case len(sub) > MaxSubLength:
		return fmt.Sprintf("%d characters: at most %d", len(sub), MaxSubLength)
	case strings.Contains(sub, "/"):
		return fmt.Sprintf("sub %q holds '/'", sub)
	}
	return ""
}

type validator struct {
	file string
	errs []error
	// lookup finds a configured model, for the checks of an app against
	// its models; nil: they are skipped.
	lookup func(id string) (*Model, bool)
}

func (v *validator) add(path, format string, args ...any) {
	if strings.HasPrefix(path, ".") {
		path = path[1:]
	}
	v.errs = append(v.errs, &Error{File: v.file, Path: path, Problem: fmt.Sprintf(format, args...)})
}

func (v *validator) err() error {
	if len(v.errs) == 1 {
		return v.errs[0]
	}
	return errors.Join(v.errs...)
}

func (v *validator) nonNegative(path string, f float64) {
	switch {
	case math.IsNaN(f) || math.IsInf(f, 0):
		v.add(path, "must be a finite number")
	case f < 0:
		v.add(path, "must not be negative")
	}
}

// id checks a tenant or app id and records it in seen (id -> path).
func (v *validator) id(path, kind, id string, seen map[string]string) {
	switch {
	case id == "":
		v.add(path, "required")
	case !idPattern.MatchString(id):
		v.add(path, "invalid %s id %q (letters, digits, '.', '_', '-'; at most 64)", kind, id)
	case seen[id] != "":
		v.add(path, "duplicate %s id %q (also %s)", kind, id, seen[id])
	default:
		seen[id] = path
	}
}

func (v *validator) appModels(p string, m *AppModels, models map[string]string) {
	known := func(path, id string) bool {
		if models[id] == "" {
			v.add(path, "unknown model %q", id)
			return false
		}
		return true
	}
	if m.Default == "" {
		v.add(p+".default", "required")
	} else {
		known(p+".default", m.Default)
	}
	for i, id := range m.Fallbacks {
		fp := fmt.Sprintf("%s.fallbacks[%d]", p, i)
		switch {
		case !known(fp, id):
		case id == m.Default:
			v.add(fp, "%q is already the default model", id)
		case slices.Index(m.Fallbacks, id) < i:
			v.add(fp, "duplicate fallback %q", id)
		}
	}
	if len(m.Allow) == 0 {
		if m.Default != "" {
			m.Allow = append(m.Allow, m.Default)
		}
		for _, id := range m.Fallbacks {
			if !slices.Contains(m.Allow, id) {
				m.Allow = append(m.Allow, id)
			}
		}
		return
	}
	for i, id := range m.Allow {
		ap := fmt.Sprintf("%s.allow[%d]", p, i)
		if known(ap, id) && slices.Index(m.Allow, id) < i {
			v.add(ap, "duplicate model %q", id)
		}
	}
	if m.Default != "" && models[m.Default] != "" && !slices.Contains(m.Allow, m.Default) {
		v.add(p+".default", "%q is not in models.allow", m.Default)
	}
	for i, id := range m.Fallbacks {
		if models[id] != "" && !slices.Contains(m.Allow, id) {
			v.add(fmt.Sprintf("%s.fallbacks[%d]", p, i), "%q is not in models.allow", id)
		}
	}
}

func (v *validator) limits(p string, limits []Limit) {
	seen := map[string]int{}
	for i, l := range limits {
		lp := fmt.Sprintf("%s[%d]", p, i)
		if !slices.Contains(Windows(), l.Window) {
			if l.Window == "" {
				v.add(lp+".window", "required (one of minute, hour, day, month)")
			} else {
				v.add(lp+".window", "unknown window %q (one of minute, hour, day, month)", l.Window)
			}
		} else if j, dup := seen[l.Window]; dup {
			v.add(lp+".window", "duplicate %s limit (also %s[%d])", l.Window, p, j)
		} else {
			seen[l.Window] = i
		}
		if l.Tokens < 0 {
			v.add(lp+".tokens", "must not be negative")
		}
		if l.Requests < 0 {
			v.add(lp+".requests", "must not be negative")
		}
		v.nonNegative(lp+".usd", l.USD)
		if l.Tokens == 0 && l.Requests == 0 && l.USD == 0 {
			v.add(lp, "limit sets none of tokens, requests, usd")
		}
		for j, a := range l.Alerts {
			ap := fmt.Sprintf("%s.alerts[%d]", lp, j)
			switch {
			case a < 1 || a > 100:
				v.add(ap, "%d is not a percentage from 1 to 100", a)
			case slices.Index(l.Alerts, a) < j:
				v.add(ap, "duplicate threshold %d", a)
			}
		}
	}
}

func (v *validator) maxTokens(ap string, a *App) {
	switch {
	case a.MaxTokensLimit < 0:
		v.add(ap+".max_tokens_limit", "must not be negative")
	case a.MaxTokensLimit == 0:
		a.MaxTokensLimit = DefaultMaxTokensLimit
	}
	switch {
	case a.MaxTokens < 0:
		v.add(ap+".max_tokens", "must not be negative")
	case a.MaxTokens == 0:
		a.MaxTokens = min(DefaultMaxTokens, max(a.MaxTokensLimit, 0))
	case a.MaxTokensLimit > 0 && a.MaxTokens > a.MaxTokensLimit:
		v.add(ap+".max_tokens", "%d is above max_tokens_limit %d", a.MaxTokens, a.MaxTokensLimit)
	}
}

func (v *validator) cache(p string, c *Cache) {
	if c == nil {
		return
	}
	switch {
	case c.TTL < 0:
		v.add(p+".ttl", "must not be negative")
	case c.TTL == 0:
		c.TTL = Duration(DefaultCacheTTL)
	}
	switch c.Charge {
	case "":
		c.Charge = CacheChargeInput
	case CacheChargeInput, CacheChargeNone:
	default:
		v.add(p+".charge", "unknown charge %q (input or none)", c.Charge)
	}
}

func (v *validator) guardrail(p string, g *Guardrail) {
	if g == nil {
		return
	}
	if g.ID == "" {
		v.add(p+".id", "required")
	}
	if g.Version == "" {
		v.add(p+".version", "required (for example \"1\" or \"DRAFT\")")
	}
	switch g.StreamMode {
	case "":
		g.StreamMode = GuardrailStreamSync
	case GuardrailStreamSync, GuardrailStreamAsync:
	default:
		v.add(p+".stream_mode", "unknown stream mode %q (sync or async)", g.StreamMode)
	}
}

// cachePrices checks the cache prices and fills an unset one with the
// input price (the documented fallback).
func (v *validator) cachePrices(p string, pr *Price) {
	for _, c := range []struct {
		name string
		f    **float64
	}{{"cache_read_per_1k", &pr.CacheReadPer1K}, {"cache_write_per_1k", &pr.CacheWritePer1K}} {
		if *c.f == nil {
			in := pr.InputPer1K
			*c.f = &in
			continue
		}
		v.nonNegative(p+"."+c.name, **c.f)
	}
}

func (v *validator) modelCache(p string, c *ModelCache) {
	if c == nil {
		return
	}
	switch {
	case c.MinTokens < 0:
		v.add(p+".min_tokens", "must not be negative")
	case c.MinTokens == 0:
		c.MinTokens = DefaultCacheMinTokens
	}
	switch {
	case c.MaxPoints < 0:
		v.add(p+".max_points", "must not be negative")
	case c.MaxPoints == 0:
		c.MaxPoints = DefaultCacheMaxPoints
	}
}
