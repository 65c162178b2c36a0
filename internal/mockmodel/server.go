// Package mockmodel is a fake Amazon Bedrock runtime that speaks the
// ConverseStream wire protocol (REST JSON request, AWS event stream response)
// so that the real aws-sdk-go-v2 bedrockruntime client talks to it unchanged.
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
// tokens writes the prefix (keyed by the model id and the exact bytes of
// every block before it, points left out) for CacheTTL, and the longest
// prefix cached at the point or up to 20 block boundaries before it is
// read; usage reports cacheReadInputTokens and cacheWriteInputTokens, and
// inputTokens the rest. More points than MaxPoints, or any point to a
// model that does not cache, is a ValidationException. The time to first
// token is TTFT + PerInputToken x the input tokens not read from the cache
// (those it writes are read like any other), so caching shows in TTFT.
//
// It is shared by the gateway's dev mode, tests and load tests.
package mockmodel

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
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
}

// RealisticPerInputToken is a prefill pace close to Claude's on Bedrock
// (about 0.1 ms per uncached input token: a 10,000-token prompt starts
// a second later than a cached one).
const RealisticPerInputToken = 100 * time.Microsecond

// Server is the mock Bedrock runtime endpoint, an http.Handler:
//
//	POST /model/{modelId}/converse-stream   ConverseStream
//	GET  /stats                             {"requests":{"mock-a":3},"active":0,"abandoned":0}
//	POST /stats/reset                       zero the request counts
type Server struct {
	ttft, perToken time.Duration
	perInputToken  time.Duration
	tokens         int
	caching        map[string]CacheRule
	cache          *promptCache
	frames         *frames
	mux            *http.ServeMux

	seq       atomic.Uint64 // request ids
	active    atomic.Int64  // streams in progress
	abandoned atomic.Int64  // streams the client left before their end

	mu       sync.Mutex
	requests map[string]int64 // by model id
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
	}
	if s.tokens <= 0 {
		s.tokens = DefaultTokens
	}
	if s.caching == nil {
		s.caching = DefaultCaching()
	}
	s.perInputToken = max(o.PerInputToken, 0)
	s.mux.HandleFunc("POST /model/{modelId}/converse-stream", s.converseStream)
	s.mux.HandleFunc("GET /stats", s.stats)
	s.mux.HandleFunc("POST /stats/reset", s.resetStats)
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

// Requests returns how many ConverseStream requests named modelID (the
// unescaped Bedrock model id) since start or the last reset, failed ones too.
func (s *Server) Requests(modelID string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests[modelID]
}

// Active returns the number of ConverseStream requests being served now.
func (s *Server) Active() int64 { return s.active.Load() }

// Abandoned returns how many streams, since start or the last reset,
// ended because the client went away before the answer's last event: model
// calls the gateway stopped early (a cancel, a timeout, a stall given up on).
func (s *Server) Abandoned() int64 { return s.abandoned.Load() }

// ResetStats zeroes the request counts and the abandoned streams.
func (s *Server) ResetStats() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.requests)
	s.abandoned.Store(0)
}

// Stats is the JSON document of GET /stats.
type Stats struct {
	Requests  map[string]int64 `json:"requests"`
	Active    int64            `json:"active"`
	Abandoned int64            `json:"abandoned"`
}

func (s *Server) stats(w http.ResponseWriter, _ *http.Request) {
	st := Stats{Requests: make(map[string]int64), Active: s.active.Load(), Abandoned: s.abandoned.Load()}
	s.mu.Lock()
	for k, v := range s.requests {
		st.Requests[k] = v
	}
	s.mu.Unlock()
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

// decodeRequest reads and validates the body; its errors become a
// ValidationException, as Bedrock's would.
func decodeRequest(w http.ResponseWriter, r *http.Request, modelID string) (request, error) {
	var body converseRequest
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxRequestBytes))
	if err != nil {
		return request{}, fmt.Errorf("malformed request body: %v", err)
	}
	if err := json.Unmarshal(data, &body); err != nil {
		return request{}, fmt.Errorf("malformed request body: %v", err)
	}
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

func (s *Server) count(modelID string) {
	s.mu.Lock()
	s.requests[modelID]++
	s.mu.Unlock()
}

func (s *Server) converseStream(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	ctx := r.Context()
	modelID := r.PathValue("modelId")
	s.count(modelID)
	s.active.Add(1)
	defer s.active.Add(-1)
	w.Header().Set("X-Amzn-Requestid", "mock-"+strconv.FormatUint(s.seq.Add(1), 10))

	f, failAfter := parseFault(modelID)
	switch f {
	case faultThrottle:
		writeError(w, http.StatusTooManyRequests, "ThrottlingException", "Too many requests, please wait before trying again.")
		return
	case faultUnavailable:
		writeError(w, http.StatusServiceUnavailable, "ServiceUnavailableException", "The service is temporarily unable to handle the request.")
		return
	}
	req, err := decodeRequest(w, r, modelID)
	if err != nil {
		writeError(w, http.StatusBadRequest, "ValidationException", err.Error())
		return
	}
	var cached cacheUsage
	if req.cachePoints {
		rule, caches := s.caching[modelID]
		if cached, err = s.cache.use(modelID, rule, caches, req.body, start); err != nil {
			writeError(w, http.StatusBadRequest, "ValidationException", err.Error())
			return
		}
		req.body = nil
	}
	usage := tokenUsage{input: req.inputTokens - cached.cachedPrefix, cacheRead: cached.read, cacheWrite: cached.write, cache: cached.points}

	limit, stop := s.tokens, stopEndTurn
	if modelID == modelMarkdown {
		limit = len(s.frames.markdown)
	}
	if req.maxTokens > 0 && req.maxTokens < limit {
		limit, stop = req.maxTokens, stopMaxTokens
	}
	send := limit
	switch f {
	case faultFailAfter:
		send = min(failAfter, limit)
	case faultGuardrail:
		send, stop = min(guardrailTokens, limit), stopGuardrail
	}

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
	// The model reads every input token it does not find in its cache
	// (tokens it writes to the cache included) before the first token.
	p := pacer{start: start, ttft: s.ttft + time.Duration(req.inputTokens-cached.read)*s.perInputToken, perToken: s.perToken, flush: rc.Flush}
	defer p.stop()
	if _, err := w.Write(s.frames.messageStart); err != nil {
		return
	}
	if f == faultNone && (modelID == modelReasoning || req.tool != "") {
		sent, stop, ok := s.streamBlocks(ctx, w, &p, modelID, req, planBlocks(modelID, req, limit), stop)
		if !ok {
			return
		}
		if _, err := w.Write(s.frames.stop[stop]); err != nil {
			return
		}
		var buf [160]byte
		if writeEvent(eventstream.NewEncoder(), w, "metadata", metadataPayload(buf[:0], usage, sent, time.Since(start))) == nil {
			ended = true
			_ = rc.Flush()
		}
		return
	}
	words := newWordSource(modelID, req.system, req.messages)
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
			"message":            fmt.Sprintf("mock model %s failed after %d tokens", modelID, send),
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
	payload := metadataPayload(buf[:0], usage, send, time.Since(start))
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
