package config

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
)

// Placement is one place a model is served: a Bedrock region, optionally
// in another AWS account (reached by assuming RoleARN), with the Bedrock
// model id or inference profile to call there. A model's placements are
// tried in turn on throttling or unavailability before the first token,
// before the fallback chain moves to another model (docs/configuration.md,
// "Placements").
type Placement struct {
	// Region is the Bedrock region (us-east-1, eu-west-1, ...); required.
	Region string `yaml:"region" json:"region,omitempty"`
	// BedrockID is what Bedrock is called with there: a model id, a
	// system inference profile (us.…, global.…) or an application
	// inference profile ARN; default the model's bedrock_id.
	BedrockID string `yaml:"bedrock_id" json:"bedrock_id,omitempty"`
	// RoleARN is an IAM role in the account that serves this placement,
	// assumed with sts:AssumeRole from the task role; "": the task's own
	// credentials and account.
	RoleARN string `yaml:"role_arn" json:"role_arn,omitempty"`
	// Price replaces the model's price for calls served here; nil: the
	// model's.
	Price *Price `yaml:"price" json:"price,omitempty"`
}

// Account is the AWS account of the placement's role ("" for the task's own).
func (p Placement) Account() string {
	if m := roleARNPattern.FindStringSubmatch(p.RoleARN); m != nil {
		return m[1]
	}
	return ""
}

// Name is the placement's name in breakers, usage records and traces:
// its region, or region/account when it is reached through a role.
func (p Placement) Name() string {
	if a := p.Account(); a != "" {
		return p.Region + "/" + a
	}
	return p.Region
}

// Profile is an application inference profile ARN parsed.
type Profile struct {
	ARN, Region, Account string
}

// ParseProfile parses an application inference profile ARN
// (arn:aws:bedrock:<region>:<account>:application-inference-profile/<id>).
func ParseProfile(arn string) (Profile, bool) {
	m := profileARNPattern.FindStringSubmatch(arn)
	if m == nil {
		return Profile{}, false
	}
	return Profile{ARN: arn, Region: m[1], Account: m[2]}, true
}

// ProfileFor is the application inference profile a tenant's app calls
// model through: the app's bedrock_profiles entry, else the tenant's; ""
// for none.
func ProfileFor(t *Tenant, a *App, model string) string {
	if a != nil {
		if arn, ok := a.BedrockProfiles[model]; ok {
			return arn
		}
	}
	if t != nil {
		return t.BedrockProfiles[model]
	}
	return ""
}

var (
	roleARNPattern    = regexp.MustCompile(`^arn:aws(?:-[a-z]+)*:iam::(\d{12}):role/[\w+=,.@/-]{1,512}$`)
	profileARNPattern = regexp.MustCompile(`^arn:aws(?:-[a-z]+)*:bedrock:([a-z0-9-]+):(\d{12}):application-inference-profile/[a-z0-9]{1,64}$`)
)

// Regions are the AWS regions a placement may name: those that serve
// Amazon Bedrock runtime (2026-12).
var Regions = []string{
	"us-east-1", "us-east-2", "us-west-1", "us-west-2", "us-gov-east-1", "us-gov-west-1",
	"ca-central-1", "ca-west-1", "mx-central-1", "sa-east-1",
	"eu-central-1", "eu-central-2", "eu-north-1", "eu-south-1", "eu-south-2", "eu-west-1", "eu-west-2", "eu-west-3",
	"il-central-1", "me-central-1", "me-south-1", "af-south-1",
	"ap-east-2", "ap-northeast-1", "ap-northeast-2", "ap-northeast-3", "ap-south-1", "ap-south-2",
	"ap-southeast-1", "ap-southeast-2", "ap-southeast-3", "ap-southeast-4", "ap-southeast-5", "ap-southeast-7",
}

// MaxPlacements bounds a model's placements.
const MaxPlacements = 16

// MaxProfiles bounds a tenant's or app's bedrock_profiles.
const MaxProfiles = 64

// Takes reports whether the model is called with service tier tier:
// every model takes the default tier (without naming it, when it lists
// no service_tiers); others only when listed.
func (m Model) Takes(tier string) bool {
	return tier == "" || tier == TierDefault || slices.Contains(m.ServiceTiers, tier)
}

// PriceFor is the price of a call to the model served at placement
// (a Placement.Name; "" for the model's own bedrock_id) in tier ("" or
// default: the base price).
func (m Model) PriceFor(placement, tier string) Price {
	p := m.Price
	for i := range m.Placements {
		if pl := &m.Placements[i]; pl.Price != nil && pl.Name() == placement {
			p = *pl.Price
			break
		}
	}
	if t, ok := p.Tiers[tier]; ok && tier != TierDefault {
		t.Tiers = nil
		return t
	}
	p.Tiers = nil
	return p
}

// Service tiers (Model.ServiceTiers, App.ServiceTier, App.ServiceTiers);
// the same words as Bedrock's serviceTier and call.Tiers.
const (
	TierDefault  = "default"
	TierPriority = "priority"
	TierFlex     = "flex"
)

// ServiceTiers lists the service tiers, in the order errors name them.
var ServiceTiers = []string{TierDefault, TierPriority, TierFlex}

// placements checks a model's placements, service tiers and tier prices.
func (v *validator) placements(p string, m *Model) {
	v.tiers(at(p, "service_tiers"), m.ServiceTiers)
	v.tierPrices(at(p, "price"), &m.Price, m.ServiceTiers)
	if len(m.Placements) > MaxPlacements {
		v.add(at(p, "placements"), "%d placements: at most %d", len(m.Placements), MaxPlacements)
		return
	}
	seen := map[string]int{}
	for i := range m.Placements {
		pl := &m.Placements[i]
		pp := fmt.Sprintf("%s[%d]", at(p, "placements"), i)
		switch {
		case pl.Region == "":
			v.add(pp+".region", "required")
		case !slices.Contains(Regions, pl.Region):
			v.add(pp+".region", "unknown region %q", pl.Region)
		}
		if pl.RoleARN != "" && !roleARNPattern.MatchString(pl.RoleARN) {
			v.add(pp+".role_arn", "%q is not an IAM role ARN (arn:aws:iam::<account>:role/<name>)", pl.RoleARN)
		}
		if prof, ok := ParseProfile(pl.BedrockID); ok && prof.Region != pl.Region {
			v.add(pp+".bedrock_id", "application inference profile of region %s in a placement of region %s", prof.Region, pl.Region)
		}
		if j, dup := seen[pl.Name()]; dup && pl.Region != "" {
			v.add(pp, "duplicate placement %s (also placements[%d])", pl.Name(), j)
		}
		seen[pl.Name()] = i
		if pl.Price != nil {
			v.nonNegative(pp+".price.input_per_1k", pl.Price.InputPer1K)
			v.nonNegative(pp+".price.output_per_1k", pl.Price.OutputPer1K)
			v.cachePrices(pp+".price", pl.Price)
			v.tierPrices(pp+".price", pl.Price, m.ServiceTiers)
		}
	}
}

// tiers checks a list of service tiers.
func (v *validator) tiers(p string, tiers []string) {
	for j, t := range tiers {
		tp := fmt.Sprintf("%s[%d]", p, j)
		switch {
		case !slices.Contains(ServiceTiers, t):
			v.add(tp, "unknown service tier %q (one of %s)", t, strings.Join(ServiceTiers, ", "))
		case slices.Index(tiers, t) < j:
			v.add(tp, "duplicate service tier %q", t)
		}
	}
}

// tierPrices checks that every tier a model takes but default has its
// price, and that no price names a tier the model does not take.
func (v *validator) tierPrices(p string, pr *Price, tiers []string) {
	for _, t := range tiers {
		if t == TierDefault {
			continue
		}
		if _, ok := pr.Tiers[t]; !ok {
			v.add(p+".tiers", "no price for service tier %q, which the model takes", t)
		}
	}
	for _, t := range slices.Sorted(maps.Keys(pr.Tiers)) {
		tp := p + ".tiers." + t
		tpr := pr.Tiers[t]
		switch {
		case t == TierDefault:
			v.add(tp, "the default tier's price is the model's price")
			continue
		case !slices.Contains(tiers, t):
			v.add(tp, "a price for service tier %q, which the model does not take (service_tiers)", t)
			continue
		case len(tpr.Tiers) > 0:
			v.add(tp+".tiers", "a tier's price has no tiers")
		}
		v.nonNegative(tp+".input_per_1k", tpr.InputPer1K)
		v.nonNegative(tp+".output_per_1k", tpr.OutputPer1K)
		v.cachePrices(tp, &tpr)
		pr.Tiers[t] = tpr
	}
}

// appTier checks an app's service tier and the tiers its requests may ask.
func (v *validator) appTier(ap string, a *App, model func(id string) (*Model, bool)) {
	if a.ServiceTier == "" {
		a.ServiceTier = TierDefault
	}
	v.tiers(ap+".service_tiers", a.ServiceTiers)
	switch {
	case !slices.Contains(ServiceTiers, a.ServiceTier):
		v.add(ap+".service_tier", "unknown service tier %q (one of %s)", a.ServiceTier, strings.Join(ServiceTiers, ", "))
	case model != nil:
		if m, ok := model(a.Models.Default); ok && !m.Takes(a.ServiceTier) {
			v.add(ap+".service_tier", "service tier %q, which the app's default model %s does not take (its service_tiers)",
				a.ServiceTier, m.ID)
		}
	}
}

// profiles checks a bedrock_profiles map: configured models, profile ARNs.
func (v *validator) profiles(p string, profiles map[string]string, models map[string]string) {
	if len(profiles) > MaxProfiles {
		v.add(p, "%d profiles: at most %d", len(profiles), MaxProfiles)
		return
	}
	for _, id := range slices.Sorted(maps.Keys(profiles)) {
		arn := profiles[id]
		if models != nil && models[id] == "" {
			v.add(p+"."+id, "unknown model %q", id)
		}
		prof, ok := ParseProfile(arn)
		switch {
		case !ok:
			v.add(p+"."+id, "%q is not an application inference profile ARN (arn:aws:bedrock:<region>:<account>:application-inference-profile/<id>)", arn)
		case !slices.Contains(Regions, prof.Region):
			v.add(p+"."+id, "unknown region %q in %s", prof.Region, arn)
		}
	}
}
