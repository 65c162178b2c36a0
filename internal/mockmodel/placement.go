package mockmodel

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
)

// DefaultRegion is Options.DefaultRegion when empty: the region of a call
// whose Authorization header carries no SigV4 signing scope.
const DefaultRegion = "us-east-1"

// Service tiers (values of types.ServiceTierType).
const (
	TierDefault  = "default"
	TierPriority = "priority"
	TierFlex     = "flex"
	TierReserved = "reserved"
)

// DefaultTiers are the tiers a model takes when Options.Tiers does not
// list it: default, priority and flex ("reserved" is refused).
func DefaultTiers() []string { return []string{TierDefault, TierPriority, TierFlex} }

// knownTiers are the tier types Bedrock defines; any other is refused.
var knownTiers = []string{TierDefault, TierPriority, TierFlex, TierReserved}

// invalidModelMessage is Bedrock's message for a model id it cannot use.
const invalidModelMessage = "The provided model identifier is invalid."

// maxControlBytes bounds the body of PUT /faults and PUT /profiles.
const maxControlBytes = 1 << 20

// Pace is the pace of the calls in one service tier (Options.TierPace),
// with the semantics of Options.TTFT and Options.PerToken: zero means the
// default (DefaultTTFT, DefaultPerToken), NoDelay none.
type Pace struct {
	TTFT     time.Duration
	PerToken time.Duration
}

// Fault is a runtime fault knob on a placement: the calls signed for
// Region (and, if Model is not "", naming Model) either all fail with
// ServiceUnavailableException (Unavailable; HTTP 503) or, by a fixed
// pattern, ThrottlePercent percent of them fail with ThrottlingException
// (HTTP 429), before the stream, as mock-throttle does. Call n of the knob
// (counted from 1 from when it was set) throttles when
// floor(n*P/100) > floor((n-1)*P/100): P=50 throttles calls 2, 4, 6...,
// P=100 every call, P=25 calls 4, 8, 12...
//
// Model matches the model id as the call names it (an inference profile
// ARN, a geo-prefixed id such as us.mock-a) or the base model id the call
// behaves as (the profile's model, the id without its geo prefix). A call
// meets at most one knob, the most specific: the one on its region and the
// id as named, else the one on its region and its base model, else the one
// on its region and every model (Model ""). Only that knob counts the call.
type Fault struct {
	Region          string `json:"region"`
	Model           string `json:"model"`
	ThrottlePercent int    `json:"throttle_percent"`
	Unavailable     bool   `json:"unavailable"`
}

// FaultState is a knob in force and the calls it has met since it was set
// (GET /faults, Server.Faults).
type FaultState struct {
	Fault
	Calls int64 `json:"calls"`
}

// Check reports what is wrong with f as a knob (nil if nothing).
func (f Fault) Check() error {
	switch {
	case f.Region == "":
		return errors.New("region: required")
	case f.ThrottlePercent < 0 || f.ThrottlePercent > 100:
		return fmt.Errorf("throttle_percent: must be between 0 and 100, got %d", f.ThrottlePercent)
	}
	return nil
}

// off reports whether f removes its knob rather than setting one.
func (f Fault) off() bool { return f.ThrottlePercent == 0 && !f.Unavailable }

type knobKey struct{ region, model string }

type knob struct {
	f     Fault
	calls int64
}

// SetFault sets the knob of f.Region and f.Model, replacing the one there
// (whose count restarts); ThrottlePercent 0 with Unavailable false removes
// it. It fails only when f.Check does.
func (s *Server) SetFault(f Fault) error {
	if err := f.Check(); err != nil {
		return err
	}
	k := knobKey{f.Region, f.Model}
	s.ctlMu.Lock()
	defer s.ctlMu.Unlock()
	if f.off() {
		delete(s.knobs, k)
		return nil
	}
	s.knobs[k] = &knob{f: f}
	return nil
}

// ClearFaults removes every knob.
func (s *Server) ClearFaults() {
	s.ctlMu.Lock()
	defer s.ctlMu.Unlock()
	clear(s.knobs)
}

// Faults returns the knobs in force, by region then model.
func (s *Server) Faults() []FaultState {
	s.ctlMu.Lock()
	out := make([]FaultState, 0, len(s.knobs))
	for _, k := range s.knobs {
		out = append(out, FaultState{Fault: k.f, Calls: k.calls})
	}
	s.ctlMu.Unlock()
	slices.SortFunc(out, func(a, b FaultState) int {
		if c := strings.Compare(a.Region, b.Region); c != 0 {
			return c
		}
		return strings.Compare(a.Model, b.Model)
	})
	return out
}

// placementFault counts the call against the knob it meets and returns
// the fault that knob gives it (faultNone for none).
func (s *Server) placementFault(region, named, base string) fault {
	s.ctlMu.Lock()
	defer s.ctlMu.Unlock()
	if len(s.knobs) == 0 {
		return faultNone
	}
	k := s.knobs[knobKey{region, named}]
	if k == nil && base != named {
		k = s.knobs[knobKey{region, base}]
	}
	if k == nil {
		k = s.knobs[knobKey{region, ""}]
	}
	if k == nil {
		return faultNone
	}
	k.calls++
	if k.f.Unavailable {
		return faultUnavailable
	}
	p, n := int64(k.f.ThrottlePercent), k.calls
	if n*p/100 > (n-1)*p/100 {
		return faultThrottle
	}
	return faultNone
}

// AddProfile registers an application inference profile: a call naming
// arn (arn:aws:bedrock:<region>:<account>:application-inference-profile/<id>)
// behaves as a call to model, if it is signed for the ARN's region. Any
// other string is registered too, as an alias of model in every region.
// An existing registration of arn is replaced.
func (s *Server) AddProfile(arn, model string) {
	s.ctlMu.Lock()
	defer s.ctlMu.Unlock()
	s.profiles[arn] = model
}

// Profiles returns the profile registry: ARN -> base model id.
func (s *Server) Profiles() map[string]string {
	s.ctlMu.Lock()
	defer s.ctlMu.Unlock()
	out := make(map[string]string, len(s.profiles))
	for k, v := range s.profiles {
		out[k] = v
	}
	return out
}

// target is what a call's model id resolves to.
type target struct {
	// text picks the answer's words and keys the prompt cache: the id as
	// named, or the model of a profile.
	text string
	// base picks the behaviour (faults, mock-markdown, mock-reasoning,
	// mock-tools, caching rule, tiers): text without an ARN's resource
	// type or a geo prefix.
	base string
	// profile: the id is a registered profile or has the form of an
	// application inference profile ARN.
	profile bool
}

// resolve maps the model id of a call signed for region to its target;
// err is the ValidationException message for an id Bedrock would refuse.
func (s *Server) resolve(region, named string) (target, string) {
	s.ctlMu.Lock()
	model, registered := s.profiles[named]
	s.ctlMu.Unlock()
	if registered {
		t := target{text: model, base: BaseModelID(model), profile: true}
		if r := arnRegion(named); r != "" && r != region {
			return t, invalidModelMessage
		}
		return t, ""
	}
	if isApplicationProfile(named) {
		return target{text: named, base: named, profile: true}, invalidModelMessage
	}
	return target{text: named, base: BaseModelID(named)}, ""
}

// geoPrefixes are the prefixes of system-defined cross-region inference
// profile ids.
var geoPrefixes = []string{"us.", "eu.", "apac.", "global.", "jp.", "au.", "ca.", "us-gov."}

// BaseModelID returns the model id whose behaviour a call naming id gets:
// id without a geo prefix of a cross-region inference profile (us.mock-throttle
// -> mock-throttle), and for the ARN of a foundation model or of a
// system-defined inference profile its resource id, likewise
// (arn:aws:bedrock:us-east-1::foundation-model/mock-a -> mock-a). Other ids
// are their own base. Application inference profiles are resolved through
// the registry (AddProfile), not by this function.
func BaseModelID(id string) string {
	if strings.HasPrefix(id, "arn:") {
		parts := strings.SplitN(id, ":", 6)
		if len(parts) == 6 {
			if rest, ok := strings.CutPrefix(parts[5], "foundation-model/"); ok {
				id = rest
			} else if rest, ok := strings.CutPrefix(parts[5], "inference-profile/"); ok {
				id = rest
			}
		}
	}
	for _, p := range geoPrefixes {
		if rest, ok := strings.CutPrefix(id, p); ok && rest != "" {
			return rest
		}
	}
	return id
}

// arnRegion returns the region field of an ARN ("" if s is not one).
func arnRegion(s string) string {
	parts := strings.SplitN(s, ":", 6)
	if len(parts) != 6 || parts[0] != "arn" {
		return ""
	}
	return parts[3]
}

// isApplicationProfile reports whether s has the form
// arn:<partition>:bedrock:<region>:<account>:application-inference-profile/<id>.
func isApplicationProfile(s string) bool {
	parts := strings.SplitN(s, ":", 6)
	if len(parts) != 6 || parts[0] != "arn" || parts[1] == "" || parts[2] != "bedrock" || parts[3] == "" || parts[4] == "" {
		return false
	}
	id, ok := strings.CutPrefix(parts[5], "application-inference-profile/")
	return ok && id != "" && !strings.Contains(id, "/")
}

// signingRegion returns the region of the SigV4 signing scope of an
// Authorization header ("AWS4-HMAC-SHA256 Credential=AKID/20261204/us-west-2/bedrock/aws4_request, ..."),
// "" if it has none.
func signingRegion(authorization string) string {
	_, cred, ok := strings.Cut(authorization, "Credential=")
	if !ok {
		return ""
	}
	cred, _, _ = strings.Cut(cred, ",")
	parts := strings.Split(strings.TrimSpace(cred), "/")
	if len(parts) != 5 || parts[2] == "" {
		return ""
	}
	return parts[2]
}

// checkTier validates the request's service tier for the model base ("" for
// none named); the error is the ValidationException message.
func (s *Server) checkTier(tier *serviceTier, named, base string) (string, error) {
	if tier == nil {
		return "", nil
	}
	if !slices.Contains(knownTiers, tier.Type) {
		return "", fmt.Errorf("serviceTier.type: must be one of %s, got %q", strings.Join(knownTiers, ", "), tier.Type)
	}
	takes, listed := s.tiers[base]
	if !listed {
		takes = DefaultTiers()
	}
	if !slices.Contains(takes, tier.Type) {
		return "", fmt.Errorf("serviceTier: model %s does not support the %s service tier", named, tier.Type)
	}
	return tier.Type, nil
}

// serviceTier is the request's serviceTier member.
type serviceTier struct {
	Type string `json:"type"`
}

// pace returns TTFT and per-token delays of a call in tier ("" when the
// request named none, which is paced as the default tier).
func (s *Server) pace(tier string) (ttft, perToken time.Duration) {
	if tier == "" {
		tier = TierDefault
	}
	if p, ok := s.tierPace[tier]; ok {
		return p.ttft, p.perToken
	}
	return s.ttft, s.perToken
}

type resolvedPace struct{ ttft, perToken time.Duration }

// The HTTP control endpoints.

func writeControlError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", contentTypeJSON)
	w.WriteHeader(status)
	_, _ = w.Write(mustJSON(map[string]string{"message": msg}))
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", contentTypeJSON)
	_, _ = w.Write(mustJSON(v))
}

// decodeControl reads a control request's JSON body into v, strictly.
func decodeControl(w http.ResponseWriter, r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxControlBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("malformed JSON: %v", err)
	}
	if dec.More() {
		return errors.New("malformed JSON: more than one value")
	}
	return nil
}

func (s *Server) putFault(w http.ResponseWriter, r *http.Request) {
	var f Fault
	if err := decodeControl(w, r, &f); err != nil {
		writeControlError(w, http.StatusBadRequest, err.Error())
		return
	}
	if err := s.SetFault(f); err != nil {
		writeControlError(w, http.StatusBadRequest, err.Error())
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) deleteFaults(w http.ResponseWriter, _ *http.Request) {
	s.ClearFaults()
	w.WriteHeader(http.StatusNoContent)
}

// FaultList is the JSON document of GET /faults.
type FaultList struct {
	Faults []FaultState `json:"faults"`
}

func (s *Server) getFaults(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, FaultList{Faults: s.Faults()})
}

// Profile is the JSON body of PUT /profiles.
type Profile struct {
	ARN   string `json:"arn"`
	Model string `json:"model"`
}

// Check reports what is wrong with p as a profile (nil if nothing): ARN
// must be arn:<partition>:bedrock:<region>:<account>:application-inference-profile/<id>
// and Model not empty.
func (p Profile) Check() error {
	switch {
	case !isApplicationProfile(p.ARN):
		return fmt.Errorf("arn: must be arn:aws:bedrock:<region>:<account>:application-inference-profile/<id>, got %q", p.ARN)
	case p.Model == "":
		return errors.New("model: required")
	}
	return nil
}

// ProfileList is the JSON document of GET /profiles.
type ProfileList struct {
	Profiles map[string]string `json:"profiles"` // ARN -> base model id
}

func (s *Server) putProfile(w http.ResponseWriter, r *http.Request) {
	var p Profile
	if err := decodeControl(w, r, &p); err != nil {
		writeControlError(w, http.StatusBadRequest, err.Error())
		return
	}
	if err := p.Check(); err != nil {
		writeControlError(w, http.StatusBadRequest, err.Error())
		return
	}
	s.AddProfile(p.ARN, p.Model)
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) getProfiles(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, ProfileList{Profiles: s.Profiles()})
}
