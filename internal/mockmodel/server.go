// Package mockmodel is a fake Amazon Bedrock runtime that speaks the
// ConverseStream wire protocol (REST JSON request, AWS event stream response),
// and the non-streaming Converse (the same request, one JSON answer when the
// stream would have ended), so that the real aws-sdk-go-v2 bedrockruntime
// client talks to it unchanged.
// It answers at a steady, configurable pace with text that is a pure function
// of the model id and the prompt (see Tokens), and it fails on demand: the
// Bedrock model id picks the behaviour.
//
//	mock-throttle       ThrottlingException, HTTP 429, before the stream
//	mock-unavailable    ServiceUnavailableException, HTTP 503, before the stream
//	mock-fail-after-N   N tokens, then a modelStreamErrorException event
//	mock-stall          HTTP 200 and headers, then nothing until the client goes away
//	mock-guardrail      a few tokens, then stopReason "guardrail_intervened"
//	mock-reasoning      reasoning deltas (block 0, with a signature), then the text
//	mock-markdown       a fixed Markdown answer (a heading, a list, a table, a
//	                    code block, a link), whatever the prompt, in as many
//	                    tokens as it has words (Options.Tokens does not apply)
//	mock-tools          with a toolConfig: a few words of text, then a call of the
//	                    first tool (input {"query": the last message's first three
//	                    words}, see Tool), stopReason "tool_use"; any model does
//	                    the same for toolChoice any (first tool) or tool (that
//	                    tool). A conversation whose last message holds a
//	                    toolResult is answered in text.
//	anything else       a normal answer
//
// Images, documents, tool blocks and toolConfig are checked as Bedrock
// checks them (formats, Bedrock's sizes and counts), with a
// ValidationException otherwise.
//
// Prompt caching works as on Bedrock (promptcache.go): cachePoint blocks
// in system, messages and tools mark prefixes; for a model that caches
// (Options.Caching) a point whose prefix has at least MinTokens input
// tokens writes the prefix (keyed by the region, the model id and the exact bytes of
// every block before it, points left out) for CacheTTL, and the longest
// prefix cached at the point or up to 20 block boundaries before it is
// read; usage reports cacheReadInputTokens and cacheWriteInputTokens, and
// inputTokens the rest. More points than MaxPoints, or any point to a
// model that does not cache, is a ValidationException. The time to first
// token is TTFT + PerInputToken x the input tokens not read from the cache
// (those it writes are read like any other), so caching shows in TTFT.
//
// # Regions, placements and fault knobs
//
// One endpoint serves every region: the region of a call is the third
// element of the SigV4 signing scope of its Authorization header
// (Credential=AKID/20261204/us-west-2/bedrock/aws4_request), or
// Options.DefaultRegion (us-east-1) without one. A client per region, all
// with the same base URL, each signing with its region, reach one Server.
//
// A fault knob (Fault) on a region, optionally narrowed to one model id,
// fails the calls of that placement before the stream, deterministically:
// Unavailable answers every call with ServiceUnavailableException (HTTP
// 503); ThrottlePercent P answers call n of the knob (from 1) with
// ThrottlingException (HTTP 429) when floor(n*P/100) > floor((n-1)*P/100),
// so P=50 throttles calls 2, 4, 6... Knobs are set in Go (SetFault,
// ClearFaults, Faults) or over HTTP:
//
//	PUT    /faults   {"region":"us-east-1","model":"","throttle_percent":50,"unavailable":false}
//	                 model "" is every model of the region; throttle_percent 0
//	                 and unavailable false remove the knob; 204, or 400
//	                 {"message":...} for bad JSON, an empty region or a
//	                 percent outside 0..100
//	GET    /faults   {"faults":[{"region":...,"model":...,"throttle_percent":50,"unavailable":false,"calls":4}]}
//	DELETE /faults   remove every knob; 204
//
// # Inference profiles
//
// A model id may be an application inference profile ARN
// (arn:aws:bedrock:<region>:<account>:application-inference-profile/<id>),
// resolved to its base model id through a registry (Options.Profiles,
// AddProfile, or PUT /profiles {"arn":...,"model":"mock-a"}; GET /profiles
// lists it as {"profiles":{"<arn>":"mock-a"}}). The call then behaves as a
// call to the base model in every way (text, faults, caching, tools,
// tiers); the counts name the ARN. An unknown profile ARN, or one of
// another region than the call is signed for, is a ValidationException
// (HTTP 400, "The provided model identifier is invalid.").
//
// A system-defined cross-region profile id (a geo prefix us., eu., apac.,
// global., jp., au., ca. or us-gov.; us.mock-throttle), and the ARN of a
// foundation model or of a system-defined profile, behave as the model id
// without prefix or ARN (BaseModelID), but the answer's words stay a
// function of the id as named, as they always were (Tokens("us.mock-a", ...)).
//
// # Service tiers
//
// A request's serviceTier ({"type":"priority"|"default"|"flex"|"reserved"})
// must be one the model takes (Options.Tiers; by default default, priority
// and flex), else a ValidationException naming serviceTier. The metadata
// event echoes it ("serviceTier":{"type":"flex"}; nothing when the request
// named none), and Options.TierPace may give a tier its own pace.
//
// # Stats
//
// GET /stats (Stats) counts the requests by model id as named, by region
// and model id, the throttled and unavailable answers by region, the
// requests by service tier named and by profile; POST /stats/reset zeroes
// them.
//
// It is shared by the gateway's dev mode, tests and load tests.
package mockmodel

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
)

// Defaults for the zero values of Options.
const (
	DefaultTTFT     = 250 * time.Millisecond
	DefaultPerToken = 8 * time.Millisecond
	DefaultTokens   = 300
)

// NoDelay, given as Options.TTFT or Options.PerToken, means no wait at all
// (the zero value means the default).
const NoDelay time.Duration = -1

// Bounds of the mock.
const (
	// MaxRequestBytes is the largest request body accepted (attachments
	// are base64 in it).
	MaxRequestBytes = 32 << 20
	// guardrailTokens is how many tokens mock-guardrail sends before it intervenes.
	guardrailTokens = 5
)

// Options set the pace and length of answers. Zero values mean the defaults.
type Options struct {
	// TTFT is the delay from request arrival to the first token (default
	// 250ms; NoDelay or any negative value for none).
	TTFT time.Duration
	// PerToken is the delay between tokens (default 8ms; NoDelay or any
	// negative value for none). Token i is due at TTFT + i*PerToken after
	// arrival, so the pace does not drift with write time.
	PerToken time.Duration
	// Tokens is the answer length in tokens (default 300). A request's
	// inferenceConfig.maxTokens caps it, with stopReason "max_tokens".
	Tokens int
	// PerInputToken is added to TTFT for every input token the request
	// does not read from the prompt cache (tokens written to it included),
	// as a model's prefill grows with what it must read:
	// TTFT + PerInputToken x input tokens not read from the cache.
	// Default none (the pace is TTFT whatever the input, as before);
	// RealisticPerInputToken is what dev mode and cmd/mockbedrock use.
	PerInputToken time.Duration
	// Caching maps a Bedrock model id to how it caches prompts; a model
	// not in it refuses cache points with a ValidationException, as
	// Bedrock does. Nil means DefaultCaching().
	Caching map[string]CacheRule
	// DefaultRegion is the region of a call whose Authorization header
	// has no SigV4 signing scope (default DefaultRegion, us-east-1).
	DefaultRegion string
	// Profiles maps application inference profile ARNs to base model ids
	// (see AddProfile).
	Profiles map[string]string
	// Tiers maps a base model id to the service tiers it takes; a model
	// not in it takes DefaultTiers() (default, priority, flex). A request
	// naming another tier is a ValidationException.
	Tiers map[string][]string
	// TierPace maps a service tier to the pace of its calls, instead of
	// TTFT and PerToken (PerInputToken still applies); a request naming no
	// tier is paced as TierDefault. Default none: one pace for every tier.
	TierPace map[string]Pace
}

// RealisticPerInputToken is a prefill pace close to Claude's on Bedrock
// (about 0.1 ms per uncached input token: a 10,000-token prompt starts
// a second later than a cached one).
const RealisticPerInputToken = 100 * time.Microsecond

// Server is the mock Bedrock runtime endpoint, an http.Handler:
//
//	POST   /model/{modelId}/converse-stream   ConverseStream
//	POST   /model/{modelId}/converse          Converse (non-streaming; see converse)
//	GET    /stats                             counts (see Stats)
//	POST   /stats/reset                       zero the counts
//	PUT    /faults                            set or remove a fault knob (Fault)
//	GET    /faults                            the knobs in force (FaultList)
//	DELETE /faults                            remove every knob
//	PUT    /profiles                          register a profile (Profile)
//	GET    /profiles                          the registry (ProfileList)
type Server struct {
	ttft, perToken time.Duration
	perInputToken  time.Duration
	tokens         int
	caching        map[string]CacheRule
	defaultRegion  string
	tiers          map[string][]string
	tierPace       map[string]resolvedPace
	cache          *promptCache
	frames         *frames
	mux            *http.ServeMux

	seq       atomic.Uint64 // request ids
	active    atomic.Int64  // streams and Converse calls in progress
	abandoned atomic.Int64  // streams and Converse calls the client left before their end

	mu          sync.Mutex
	requests    map[string]int64            // by model id as named
	byRegion    map[string]map[string]int64 // by region, then model id as named
	throttled   map[string]int64            // ThrottlingExceptions by region
	unavailable map[string]int64            // ServiceUnavailableExceptions by region
	byTier      map[string]int64            // by the service tier named
	byProfile   map[string]int64            // by profile ARN

	ctlMu    sync.Mutex
	knobs    map[knobKey]*knob
	profiles map[string]string // ARN -> base model id
}

var _ http.Handler = (*Server)(nil)

// New returns a Server answering with the given options.
func New(o Options) *Server {
	s := &Server{
		ttft:     resolveDelay(o.TTFT, DefaultTTFT),
		perToken: resolveDelay(o.PerToken, DefaultPerToken),
		tokens:   o.Tokens,
		caching:  o.Caching,
		cache:    newPromptCache(),
		frames:   newFrames(),
		mux:      http.NewServeMux(),
		requests: make(map[string]int64),

		defaultRegion: o.DefaultRegion,
		tiers:         make(map[string][]string, len(o.Tiers)),
		tierPace:      make(map[string]resolvedPace, len(o.TierPace)),
		byRegion:      make(map[string]map[string]int64),
		throttled:     make(map[string]int64),
		unavailable:   make(map[string]int64),
		byTier:        make(map[string]int64),
		byProfile:     make(map[string]int64),
		knobs:         make(map[knobKey]*knob),
		profiles:      make(map[string]string, len(o.Profiles)),
	}
	if s.defaultRegion == "" {
		s.defaultRegion = DefaultRegion
	}
	for m, t := range o.Tiers {
		s.tiers[m] = slices.Clone(t)
	}
	for t, p := range o.TierPace {
		s.tierPace[t] = resolvedPace{resolveDelay(p.TTFT, DefaultTTFT), resolveDelay(p.PerToken, DefaultPerToken)}
	}
	for arn, m := range o.Profiles {
		s.profiles[arn] = m
	}
	if s.tokens <= 0 {
		s.tokens = DefaultTokens
	}
	if s.caching == nil {
		s.caching = DefaultCaching()
	}
	s.perInputToken = max(o.PerInputToken, 0)
	s.mux.HandleFunc("POST /model/{modelId}/converse-stream", s.converseStream)
	s.mux.HandleFunc("POST /model/{modelId}/converse", s.converse)
	s.mux.HandleFunc("GET /stats", s.stats)
	s.mux.HandleFunc("POST /stats/reset", s.resetStats)
	s.mux.HandleFunc("PUT /faults", s.putFault)
	s.mux.HandleFunc("GET /faults", s.getFaults)
	s.mux.HandleFunc("DELETE /faults", s.deleteFaults)
	s.mux.HandleFunc("PUT /profiles", s.putProfile)
	s.mux.HandleFunc("GET /profiles", s.getProfiles)
	return s
}

func resolveDelay(d, def time.Duration) time.Duration {
	switch {
	case d == 0:
		return def
	case d < 0:
		return 0
	}
	return d
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mux.ServeHTTP(w, r)
}

// Requests returns how many Converse and ConverseStream requests named
// modelID (the unescaped Bedrock model id) since start or the last reset,
// failed ones too.
func (s *Server) Requests(modelID string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests[modelID]
}

// RequestsIn returns how many Converse and ConverseStream requests signed
// for region named modelID (as Requests names it) since start or the last
// reset.
func (s *Server) RequestsIn(region, modelID string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byRegion[region][modelID]
}

// ThrottledIn returns how many requests signed for region were answered
// with a ThrottlingException (by a knob or by mock-throttle) since start or
// the last reset.
func (s *Server) ThrottledIn(region string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.throttled[region]
}

// UnavailableIn returns how many requests signed for region were answered
// with a ServiceUnavailableException (by a knob or by mock-unavailable)
// since start or the last reset.
func (s *Server) UnavailableIn(region string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.unavailable[region]
}

// RequestsInTier returns how many requests named service tier tier since
// start or the last reset, refused ones too (a request naming no tier is
// in no tier's count).
func (s *Server) RequestsInTier(tier string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byTier[tier]
}

// ProfileRequests returns how many requests named the profile arn (a
// registered one, or any application inference profile ARN, refused ones
// too) since start or the last reset.
func (s *Server) ProfileRequests(arn string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byProfile[arn]
}

// Active returns the number of Converse and ConverseStream requests being
// served now.
func (s *Server) Active() int64 { return s.active.Load() }

// Abandoned returns how many streams and Converse calls, since start or
// the last reset, ended because the client went away before the answer's
// last event (a Converse call: before its answer): model calls the gateway
// stopped early (a cancel, a timeout, a stall given up on).
func (s *Server) Abandoned() int64 { return s.abandoned.Load() }

// ResetStats zeroes every count of Stats but Active (the abandoned streams
// included). The fault knobs and their counts are left as they are.
func (s *Server) ResetStats() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.requests)
	clear(s.byRegion)
	clear(s.throttled)
	clear(s.unavailable)
	clear(s.byTier)
	clear(s.byProfile)
	s.abandoned.Store(0)
}

// Stats is the JSON document of GET /stats, counts since start or the last
// reset; a model id is as the request named it (unescaped):
//
//	{"requests":{"mock-a":3,"arn:aws:bedrock:us-west-2:123456789012:application-inference-profile/p1":1},
//	 "active":0,"abandoned":0,
//	 "by_region":{"us-east-1":{"mock-a":3},"us-west-2":{"arn:...:application-inference-profile/p1":1}},
//	 "throttled_by_region":{"us-east-1":1},"unavailable_by_region":{},
//	 "by_tier":{"flex":2},
//	 "by_profile":{"arn:...:application-inference-profile/p1":1}}
type Stats struct {
	// Requests counts the requests by model id, failed ones too.
	Requests  map[string]int64 `json:"requests"`
	Active    int64            `json:"active"`
	Abandoned int64            `json:"abandoned"`
	// ByRegion counts them by signing region, then model id.
	ByRegion map[string]map[string]int64 `json:"by_region"`
	// ThrottledByRegion and UnavailableByRegion count the
	// ThrottlingExceptions and ServiceUnavailableExceptions answered, by
	// region (knobs and fault models alike).
	ThrottledByRegion   map[string]int64 `json:"throttled_by_region"`
	UnavailableByRegion map[string]int64 `json:"unavailable_by_region"`
	// ByTier counts the requests that named a service tier, by tier
	// (refused ones too); a request naming none is not in it.
	ByTier map[string]int64 `json:"by_tier"`
	// ByProfile counts the requests naming a registered profile or any
	// application inference profile ARN, refused ones too.
	ByProfile map[string]int64 `json:"by_profile"`
}

// Stats returns a copy of the counts GET /stats reports.
func (s *Server) Stats() Stats {
	st := Stats{Active: s.active.Load(), Abandoned: s.abandoned.Load()}
	s.mu.Lock()
	defer s.mu.Unlock()
	st.Requests = maps.Clone(s.requests)
	st.ByRegion = make(map[string]map[string]int64, len(s.byRegion))
	for r, m := range s.byRegion {
		st.ByRegion[r] = maps.Clone(m)
	}
	st.ThrottledByRegion = maps.Clone(s.throttled)
	st.UnavailableByRegion = maps.Clone(s.unavailable)
	st.ByTier = maps.Clone(s.byTier)
	st.ByProfile = maps.Clone(s.byProfile)
	return st
}

func (s *Server) stats(w http.ResponseWriter, _ *http.Request) {
	st := s.Stats()
	w.Header().Set("Content-Type", contentTypeJSON)
	_ = json.NewEncoder(w).Encode(st)
}

func (s *Server) resetStats(w http.ResponseWriter, _ *http.Request) {
	s.ResetStats()
	w.WriteHeader(http.StatusNoContent)
}

// fault is the behaviour a model id asks for.
type fault int

const (
	faultNone fault = iota
	faultThrottle
	faultUnavailable
	faultFailAfter
	faultStall
	faultGuardrail
)

const failAfterPrefix = "mock-fail-after-"

// parseFault maps a model id to its fault; n is the N of mock-fail-after-N.
func parseFault(modelID string) (f fault, n int) {
	switch modelID {
	case "mock-throttle":
		return faultThrottle, 0
	case "mock-unavailable":
		return faultUnavailable, 0
	case "mock-stall":
		return faultStall, 0
	case "mock-guardrail":
		return faultGuardrail, 0
	}
	if rest, ok := strings.CutPrefix(modelID, failAfterPrefix); ok {
		if n, err := strconv.Atoi(rest); err == nil && n >= 0 {
			return faultFailAfter, n
		}
	}
	return faultNone, 0
}

// request is what the mock needs from a ConverseStream request body.
type request struct {
	system      string
	messages    []string
	maxTokens   int // 0: not given
	inputTokens int
	// tool is the tool the answer calls ("" for none); thinkingBudget is
	// additionalModelRequestFields.thinking.budget_tokens (0: not given).
	tool           string
	thinkingBudget int
	// cachePoints: the body holds cachePoint blocks (body keeps it for the cache).
	cachePoints bool
	body        []byte
}

// converseRequest is the subset of the ConverseStream JSON body the mock reads.
type converseRequest struct {
	System   []textBlock `json:"system"`
	Messages []struct {
		Role    string         `json:"role"`
		Content []contentBlock `json:"content"`
	} `json:"messages"`
	ToolConfig                   *toolConfig     `json:"toolConfig"`
	AdditionalModelRequestFields json.RawMessage `json:"additionalModelRequestFields"`
	InferenceConfig              *struct {
		MaxTokens   *int     `json:"maxTokens"`
		Temperature *float64 `json:"temperature"`
	} `json:"inferenceConfig"`
	// GuardrailConfig is accepted and checked; only mock-guardrail intervenes.
	GuardrailConfig *struct {
		GuardrailIdentifier  string `json:"guardrailIdentifier"`
		GuardrailVersion     string `json:"guardrailVersion"`
		StreamProcessingMode string `json:"streamProcessingMode"`
	} `json:"guardrailConfig"`
	ServiceTier *serviceTier `json:"serviceTier"`
}

type textBlock struct {
	Text       *string   `json:"text"`
	CachePoint *struct{} `json:"cachePoint"`
}

// joinText joins the text blocks of a system prompt or message with "\n",
// skipping blocks of other kinds.
func joinText[B textBlock | contentBlock](blocks []B) string {
	text := func(b B) *string {
		switch b := any(b).(type) {
		case textBlock:
			return b.Text
		case contentBlock:
			return b.Text
		}
		return nil
	}
	switch len(blocks) {
	case 0:
		return ""
	case 1:
		if t := text(blocks[0]); t != nil {
			return *t
		}
		return ""
	}
	var b strings.Builder
	n := 0
	for _, bl := range blocks {
		if t := text(bl); t != nil {
			if n > 0 {
				b.WriteByte('\n')
			}
			b.WriteString(*t)
			n++
		}
	}
	return b.String()
}

// readRequest reads and parses the body; its error (a ValidationException,
// as Bedrock's would be) is answered after the faults that come first.
func readRequest(w http.ResponseWriter, r *http.Request) (body converseRequest, data []byte, err error) {
	data, err = io.ReadAll(http.MaxBytesReader(w, r.Body, MaxRequestBytes))
	if err != nil {
		return body, nil, fmt.Errorf("malformed request body: %v", err)
	}
	if err := json.Unmarshal(data, &body); err != nil {
		return converseRequest{}, nil, fmt.Errorf("malformed request body: %v", err)
	}
	return body, data, nil
}

// decodeRequest validates the body read from data for model modelID (the
// base model id); its errors become a ValidationException, as Bedrock's would.
func decodeRequest(body converseRequest, data []byte, modelID string) (request, error) {
	var err error
	if len(body.Messages) == 0 {
		return request{}, fmt.Errorf("messages: at least one message is required")
	}
	req := request{system: joinText(body.System), messages: make([]string, len(body.Messages))}
	var counts blockCounts
	for _, b := range body.System {
		counts.cachePoints = counts.cachePoints || b.CachePoint != nil
	}
	for i, m := range body.Messages {
		if m.Role != "user" && m.Role != "assistant" {
			return request{}, fmt.Errorf("messages[%d].role: must be user or assistant, got %q", i, m.Role)
		}
		if len(m.Content) == 0 {
			return request{}, fmt.Errorf("messages[%d].content: at least one content block is required", i)
		}
		if err := checkBlocks(fmt.Sprintf("messages[%d].content", i), m.Content, &counts, false); err != nil {
			return request{}, err
		}
		req.messages[i] = joinText(m.Content)
	}
	if counts.images > maxImages || counts.documents > maxDocuments {
		return request{}, fmt.Errorf("messages: at most %d images and %d documents per request", maxImages, maxDocuments)
	}
	for _, b := range body.Messages[len(body.Messages)-1].Content {
		counts.lastHasToolResult = counts.lastHasToolResult || b.ToolResult != nil
	}
	if req.tool, err = checkTools(body.ToolConfig, modelID, &counts); err != nil {
		return request{}, err
	}
	if ic := body.InferenceConfig; ic != nil {
		if ic.MaxTokens != nil {
			if *ic.MaxTokens < 1 {
				return request{}, fmt.Errorf("inferenceConfig.maxTokens: must be at least 1, got %d", *ic.MaxTokens)
			}
			req.maxTokens = *ic.MaxTokens
		}
		if t := ic.Temperature; t != nil && (*t < 0 || *t > 1) {
			return request{}, fmt.Errorf("inferenceConfig.temperature: must be between 0 and 1, got %v", *t)
		}
	}
	if g := body.GuardrailConfig; g != nil && (g.GuardrailIdentifier == "" || g.GuardrailVersion == "") {
		return request{}, fmt.Errorf("guardrailConfig: guardrailIdentifier and guardrailVersion are required")
	}
	if req.thinkingBudget, err = checkThinking(body.AdditionalModelRequestFields, req.maxTokens); err != nil {
		return request{}, err
	}
	req.inputTokens = InputTokens(req.system, req.messages) + attachmentTokens(counts)
	if counts.cachePoints {
		req.cachePoints, req.body = true, data
	}
	return req, nil
}

// count counts a request signed for region naming modelID, in tier ("" for
// none named), a profile or not.
func (s *Server) count(region, modelID, tier string, profile bool) {
	s.mu.Lock()
	s.requests[modelID]++
	m := s.byRegion[region]
	if m == nil {
		m = make(map[string]int64)
		s.byRegion[region] = m
	}
	m[modelID]++
	if tier != "" {
		s.byTier[tier]++
	}
	if profile {
		s.byProfile[modelID]++
	}
	s.mu.Unlock()
}

// countFault counts a ThrottlingException or ServiceUnavailableException
// answered in region.
func (s *Server) countFault(region string, f fault) {
	s.mu.Lock()
	if f == faultThrottle {
		s.throttled[region]++
	} else {
		s.unavailable[region]++
	}
	s.mu.Unlock()
}

// call is a Converse or ConverseStream request validated and ready to be
// answered: what both answer from.
type call struct {
	start  time.Time
	named  string // the model id as the request named it
	tg     target
	f      fault
	fail   int // the N of mock-fail-after-N
	req    request
	tier   string // the service tier named ("" for none)
	usage  tokenUsage
	cached cacheUsage
	// limit is the answer's length in output tokens and stop its stop
	// reason; send is how many of them are sent (fewer for the faults).
	limit, send int
	stop        string
}

// prepare counts a Converse or ConverseStream request, reads and checks
// it, and answers the refusals and faults that come before any output
// (ok false: it answered).
func (s *Server) prepare(w http.ResponseWriter, r *http.Request) (c call, ok bool) {
	c.start = time.Now()
	c.named = r.PathValue("modelId")
	region := signingRegion(r.Header.Get("Authorization"))
	if region == "" {
		region = s.defaultRegion
	}
	body, data, bodyErr := readRequest(w, r)
	namedTier := ""
	if body.ServiceTier != nil {
		namedTier = body.ServiceTier.Type
	}
	tg, refusal := s.resolve(region, c.named)
	c.tg = tg
	s.count(region, c.named, namedTier, tg.profile)
	w.Header().Set("X-Amzn-Requestid", "mock-"+strconv.FormatUint(s.seq.Add(1), 10))
	if refusal != "" {
		writeError(w, http.StatusBadRequest, "ValidationException", refusal)
		return c, false
	}
	modelID := tg.base // picks the behaviour; tg.text the words

	c.f, c.fail = parseFault(modelID)
	if pf := s.placementFault(region, c.named, modelID); pf != faultNone {
		c.f = pf
	}
	switch c.f {
	case faultThrottle:
		s.countFault(region, c.f)
		writeError(w, http.StatusTooManyRequests, "ThrottlingException", "Too many requests, please wait before trying again.")
		return c, false
	case faultUnavailable:
		s.countFault(region, c.f)
		writeError(w, http.StatusServiceUnavailable, "ServiceUnavailableException", "The service is temporarily unable to handle the request.")
		return c, false
	}
	if bodyErr != nil {
		writeError(w, http.StatusBadRequest, "ValidationException", bodyErr.Error())
		return c, false
	}
	var err error
	if c.req, err = decodeRequest(body, data, modelID); err != nil {
		writeError(w, http.StatusBadRequest, "ValidationException", err.Error())
		return c, false
	}
	if c.tier, err = s.checkTier(body.ServiceTier, c.named, modelID); err != nil {
		writeError(w, http.StatusBadRequest, "ValidationException", err.Error())
		return c, false
	}
	if c.req.cachePoints {
		// A rule names the model as called (a geo-prefixed profile id
		// too), else its base model.
		rule, caches := s.caching[tg.text]
		if !caches {
			rule, caches = s.caching[modelID]
		}
		if c.cached, err = s.cache.use(region, tg.text, rule, caches, c.req.body, c.start); err != nil {
			writeError(w, http.StatusBadRequest, "ValidationException", err.Error())
			return c, false
		}
		c.req.body = nil
	}
	c.usage = tokenUsage{input: c.req.inputTokens - c.cached.cachedPrefix, cacheRead: c.cached.read, cacheWrite: c.cached.write, cache: c.cached.points}

	c.limit, c.stop = s.tokens, stopEndTurn
	if modelID == modelMarkdown {
		c.limit = len(s.frames.markdown)
	}
	if c.req.maxTokens > 0 && c.req.maxTokens < c.limit {
		c.limit, c.stop = c.req.maxTokens, stopMaxTokens
	}
	c.send = c.limit
	switch c.f {
	case faultFailAfter:
		c.send = min(c.fail, c.limit)
	case faultGuardrail:
		c.send, c.stop = min(guardrailTokens, c.limit), stopGuardrail
	}
	return c, true
}

// pacer returns the pacer of c's answer: the model reads every input
// token it does not find in its cache (tokens it writes to the cache
// included) before the first token.
func (s *Server) pacer(c *call, flush func() error) pacer {
	ttft, perToken := s.pace(c.tier)
	return pacer{start: c.start, ttft: ttft + time.Duration(c.req.inputTokens-c.cached.read)*s.perInputToken, perToken: perToken, flush: flush}
}

func (s *Server) converseStream(w http.ResponseWriter, r *http.Request) {
	s.active.Add(1)
	defer s.active.Add(-1)
	c, ok := s.prepare(w, r)
	if !ok {
		return
	}
	ctx := r.Context()
	start, named, tg, f, req, tier, usage := c.start, c.named, c.tg, c.f, c.req, c.tier, c.usage
	modelID := tg.base
	limit, send, stop := c.limit, c.send, c.stop

	w.Header().Set("Content-Type", contentTypeEventStream)
	w.WriteHeader(http.StatusOK)
	ended := false // the answer's last event was written
	defer func() {
		if !ended {
			s.abandoned.Add(1)
		}
	}()
	rc := http.NewResponseController(w)
	if f == faultStall {
		if rc.Flush() == nil {
			<-ctx.Done()
		}
		return
	}

	// Events are written as they fall due and flushed whenever the stream is
	// about to wait, and at the end: when paced, every event is flushed on
	// its own, exactly when due; unpaced, a burst of due events shares one
	// write instead of paying a syscall each.
	p := s.pacer(&c, rc.Flush)
	defer p.stop()
	if _, err := w.Write(s.frames.messageStart); err != nil {
		return
	}
	if f == faultNone && (modelID == modelReasoning || req.tool != "") {
		sent, stop, ok := s.streamBlocks(ctx, w, &p, tg.text, req, planBlocks(modelID, req, limit), stop)
		if !ok {
			return
		}
		if _, err := w.Write(s.frames.stop[stop]); err != nil {
			return
		}
		var buf [160]byte
		if writeEvent(eventstream.NewEncoder(), w, "metadata", metadataPayload(buf[:0], usage, sent, time.Since(start), tier)) == nil {
			ended = true
			_ = rc.Flush()
		}
		return
	}
	words := newWordSource(tg.text, req.system, req.messages)
	for i := range send {
		if p.wait(ctx, i) != nil {
			return
		}
		frame := s.frames.delta(i, words.next())
		if modelID == modelMarkdown {
			frame = s.frames.markdown[i]
		}
		if _, err := w.Write(frame); err != nil {
			return
		}
	}

	enc := eventstream.NewEncoder()
	if f == faultFailAfter {
		// The failure arrives when the next token would have.
		if p.wait(ctx, send) != nil {
			return
		}
		payload := mustJSON(map[string]any{
			"message":            fmt.Sprintf("mock model %s failed after %d tokens", named, send),
			"originalStatusCode": http.StatusInternalServerError,
			"originalMessage":    "mock failure",
		})
		if writeException(enc, w, "modelStreamErrorException", payload) == nil {
			ended = true
			_ = rc.Flush()
		}
		return
	}
	if _, err := w.Write(s.frames.blockStop); err != nil {
		return
	}
	if _, err := w.Write(s.frames.stop[stop]); err != nil {
		return
	}
	var buf [160]byte
	payload := metadataPayload(buf[:0], usage, send, time.Since(start), tier)
	if writeEvent(enc, w, "metadata", payload) == nil {
		ended = true
		_ = rc.Flush()
	}
}

// pacer schedules token i at start + ttft + i*perToken with one reusable
// timer, flushes what was written before it waits, and gives up as soon as
// ctx ends.
type pacer struct {
	start          time.Time
	ttft, perToken time.Duration
	flush          func() error
	timer          *time.Timer
}

func (p *pacer) wait(ctx context.Context, i int) error {
	if p.ttft > 0 || p.perToken > 0 {
		d := p.ttft + time.Duration(i)*p.perToken - time.Since(p.start)
		if d > 0 {
			if err := p.flush(); err != nil {
				return err
			}
			if p.timer == nil {
				p.timer = time.NewTimer(d)
			} else {
				p.timer.Reset(d)
			}
			select {
			case <-p.timer.C:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	return ctx.Err()
}

func (p *pacer) stop() {
	if p.timer != nil {
		p.timer.Stop()
	}
}
