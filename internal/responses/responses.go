// Package responses is Jetway's door for OpenAI's Responses API: POST
// /v1/responses (typed Server-Sent Events or one response object), the
// stored responses (GET and DELETE /v1/responses/{id}, its input_items,
// cancel), background responses resumed from a sequence_number on any
// server, and the WebSocket mode (GET /v1/responses upgraded), so the
// official openai SDKs and Codex CLI use Jetway unchanged. Like every
// door it signs the caller in, turns the body into the core's request and
// hands it to the one pipeline (admission, quotas, routing, fallback,
// cache, records, usage, drain); previous_response_id is resolved here,
// from the Store (docs/responses.md).
package responses

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/jetway-gateway/jetway/internal/call"
	"github.com/jetway-gateway/jetway/internal/config"
	"github.com/jetway-gateway/jetway/internal/door"
	"github.com/jetway-gateway/jetway/internal/gateway"
	"github.com/jetway-gateway/jetway/internal/protocol"
	"github.com/jetway-gateway/jetway/internal/stream"
	"github.com/jetway-gateway/jetway/internal/telemetry"
)

// Path is the door's endpoint (POST, and GET upgraded to WebSocket mode).
const Path = "/v1/responses"

// headerRequestID names the request (OpenAI's x-request-id).
const headerRequestID = "x-request-id"

// HeaderDroppedTools lists the tools a request sent that the model call
// left out (docs/responses.md, "Tools the gateway cannot run").
const HeaderDroppedTools = "x-jetway-dropped-tools"

// Gateway runs the door's requests.
type Gateway interface {
	door.Gateway
	Resume(ctx context.Context, c gateway.Caller, requestID string) (*stream.Log, error)
	Rejoin(ctx context.Context, c gateway.Caller, requestID string) (*stream.Log, error)
	Cancel(ctx context.Context, c gateway.Caller, requestID string) error
}

// Config is the apps and models the door reads its policy from.
type Config interface {
	App(tenant, app string) (*config.Tenant, *config.App, bool)
	Model(id string) (*config.Model, bool)
}

// Options bound the door.
type Options struct {
	// ResumeWindow is how long a response with store:false can be
	// continued (previous_response_id) and resumed after it began: the
	// request's timeout plus the gateway's resume window.
	ResumeWindow time.Duration
	// Keys seal reasoning (NewKeys); nil: a key of this process.
	Keys *Keys
	// StoreTimeout bounds one store call (default 2 s).
	StoreTimeout time.Duration
	// MaxConnectionAge closes a WebSocket mode connection with
	// websocket_connection_limit_reached (OpenAI's 60 minutes).
	MaxConnectionAge time.Duration
	Now              func() time.Time
}

// Defaults of Options.
const (
	DefaultResumeWindow     = 30 * time.Minute
	DefaultStoreTimeout     = 2 * time.Second
	DefaultMaxConnectionAge = 60 * time.Minute
)

// Door serves the Responses API over HTTP (ServeHTTP) and WebSocket mode
// (a socket.Dialect: mount it with socket.Hub.Handler).
type Door struct {
	http.Handler
	l     *door.Lifecycle[*parsed]
	gw    Gateway
	cfg   Config
	store Store
	opts  Options
	log   *zap.Logger

	sse, lines, whole codec
}

// New returns the door. metrics may be nil.
func New(v door.Verifier, gw Gateway, cfg Config, store Store, metrics *telemetry.Metrics, logger *zap.Logger, do door.Options, o Options) *Door {
	if o.ResumeWindow <= 0 {
		o.ResumeWindow = DefaultResumeWindow
	}
	if o.StoreTimeout <= 0 {
		o.StoreTimeout = DefaultStoreTimeout
	}
	if o.MaxConnectionAge <= 0 {
		o.MaxConnectionAge = DefaultMaxConnectionAge
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Keys == nil {
		o.Keys, _ = NewKeys(nil)
	}
	d := &Door{gw: gw, cfg: cfg, store: store, opts: o, log: logger.With(zap.String("door", gateway.DoorResponses)),
		sse: codec{framingSSE, o.Keys}, lines: codec{framingLines, o.Keys}, whole: codec{framingWhole, o.Keys}}
	d.l = door.NewLifecycle(door.Dialect[*parsed]{
		Door:            gateway.DoorResponses,
		RequestIDHeader: headerRequestID,
		Parse: func(b []byte, requestID string) (*parsed, error) {
			return d.parse(b, requestID, false)
		},
		Invalid:   invalid,
		Refusal:   refusal,
		Prepare:   d.prepare,
		Submitted: d.submitted,
	}, v, gw, metrics, logger, do)
	d.Handler = d.l.Routes(
		door.Route{Method: http.MethodPost, Path: Path, Serve: d.l.Serve},
		door.Route{Method: http.MethodPost, Path: Path, Prefix: true, Serve: d.cancel},
		door.Route{Method: http.MethodGet, Path: Path, Prefix: true, Serve: d.retrieve},
		door.Route{Method: http.MethodDelete, Path: Path, Prefix: true, Serve: d.remove})
	return d
}

// parsed is a create body, then (prepare) the core's request.
type parsed struct {
	b         body
	requestID string
	ws        bool
	own       []json.RawMessage // the body's input items
	// Set by prepare:
	in           protocol.Inbound
	names        *names
	conversation []json.RawMessage // every item the model sees: the chain's, then own
	dropped      []string          // tools left out of the model call
	ignored      []string          // parameters the model cannot use ("reasoning")
	retention    time.Duration     // how long a stored response is kept
}

func (d *Door) parse(data []byte, requestID string, ws bool) (*parsed, error) {
	p := &parsed{requestID: requestID, ws: ws, in: protocol.Inbound{Type: protocol.TypeRequest, RequestID: requestID}}
	b, err := decodeBody(data, ws)
	if err != nil {
		return p, err
	}
	p.b = b
	if p.own, err = items(b.Input); err != nil {
		return p, err
	}
	if len(p.own) == 0 && b.PreviousResponseID == "" && (b.Generate == nil || *b.Generate) {
		return p, badParam("input", "input is required")
	}
	return p, nil
}

// stored reports whether the response is stored (OpenAI's default).
func (p *parsed) stored() bool { return p.b.Store == nil || *p.b.Store }

// Request is the core's request.
func (p *parsed) Request() gateway.Request {
	r := p.in.Call()
	r.TopP = p.b.TopP
	return gateway.Request{Request: r, RequestID: p.requestID, IsRequest: true}
}

// Codec is the typed events, or one response object.
func (p *parsed) Codec() (stream.Codec, bool) { return nil, false }

// Log logs what the operator should know: tools left out, parameters
// ignored, the end user the client names.
func (p *parsed) Log(logger *zap.Logger) {
	if len(p.dropped) > 0 || len(p.ignored) > 0 {
		logger.Info("responses_left_out", zap.Strings("tools", p.dropped), zap.Strings("parameters", p.ignored))
	}
}

// Names names the core request's fields as the Responses parameters.
func (p *parsed) Names() door.Namer {
	if p.names == nil {
		return nil
	}
	return p.names
}

// prepare resolves previous_response_id, applies the app's policy and
// builds the core's request.
func (d *Door) prepare(ctx context.Context, c gateway.Caller, p *parsed) error {
	return d.prepareWith(ctx, c, p, nil)
}

// chainOf is a socket's own memory of a response's conversation (nil: none).
type chainOf func(responseID string) []json.RawMessage

func (d *Door) prepareWith(ctx context.Context, c gateway.Caller, p *parsed, memory chainOf) error {
	_, app, ok := d.cfg.App(c.Principal.Tenant, c.Principal.App)
	if !ok {
		return call.Errorf(call.ErrInvalid, "forbidden")
	}
	policy := app.Responses.Defaults()
	p.retention = policy.Retention.D()
	var chain []json.RawMessage
	if id := p.b.PreviousResponseID; id != "" {
		if memory != nil {
			chain = memory(id)
		}
		if chain == nil {
			var err error
			if chain, err = d.chain(ctx, c, id); err != nil {
				return err
			}
		}
	}
	if n := len(chain) + len(p.own); n > MaxInputItems {
		return badParam("input", "the conversation has %d items with the responses it continues: at most %d", n, MaxInputItems)
	}
	p.conversation = append(chain[:len(chain):len(chain)], p.own...)
	if chain != nil {
		size := 0
		for _, it := range p.conversation {
			size += len(it)
		}
		if size > MaxStoredBytes {
			return badParam("previous_response_id", "the conversation with the responses it continues is %d bytes: over the %d a stored response holds; send the full input without previous_response_id", size, MaxStoredBytes)
		}
	}
	t := translation{keys: d.opts.Keys, origin: names{}}
	if err := t.translate(p.conversation, func(i int) string {
		if i < len(chain) {
			return "previous_response_id"
		}
		return "input[" + strconv.Itoa(i-len(chain)) + "]"
	}); err != nil {
		return err
	}
	in := &p.in
	if p.b.Instructions != nil && *p.b.Instructions != "" {
		t.system = append([]string{*p.b.Instructions}, t.system...)
	}
	in.System, in.Messages = strings.Join(t.system, "\n\n"), t.turns
	p.names = &t.origin
	if p.b.Model != "" && p.b.Model != "default" {
		in.Model = p.b.Model
	}
	if p.b.MaxOutputTokens != nil {
		in.MaxTokens = *p.b.MaxOutputTokens
	}
	in.Temperature = p.b.Temperature
	in.ServiceTier = p.b.tier // a continuation asks for its own: the tier is not the chain's
	var err error
	if p.dropped, err = tools(in, p.b.Tools, p.b.ToolChoice, policy.UnsupportedTools == config.ResponsesToolsRefuse, p.names); err != nil {
		return err
	}
	d.reasoning(p, app)
	if p.b.Generate != nil && !*p.b.Generate {
		return nil // a warm-up calls no model: its conversation may be instructions alone
	}
	return protocol.ValidateRequest(in)
}

// reasoning maps reasoning.effort to a reasoning budget for a model that
// reasons (docs/responses.md, "Reasoning"); for one that does not, it is
// ignored (Codex sends it to every model) and noted.
func (d *Door) reasoning(p *parsed, app *config.App) {
	r := p.b.Reasoning
	if r == nil || r.Effort == nil {
		return
	}
	budget, ok := effortBudgets[*r.Effort]
	if !ok {
		return // none, minimal: no reasoning
	}
	id := p.in.Model
	if id == "" {
		id = app.Models.Default
	}
	m, found := d.cfg.Model(id)
	if !found || !contains(m.Capabilities, config.CapabilityReasoning) {
		p.ignored = append(p.ignored, "reasoning.effort")
		return
	}
	limit := app.MaxTokensLimit
	if limit <= 0 {
		limit = config.DefaultMaxTokensLimit
	}
	if p.in.MaxTokens == 0 {
		def := app.MaxTokens
		if def <= 0 {
			def = 1024
		}
		p.in.MaxTokens = min(limit, budget+def)
	}
	budget = min(budget, p.in.MaxTokens-1)
	if budget < protocol.MinReasoningBudget {
		p.ignored = append(p.ignored, "reasoning.effort")
		return
	}
	p.in.Reasoning = &protocol.Reasoning{BudgetTokens: budget}
}

// chain is the conversation a previous response ended with: its items and
// its output, from the store (or, while its output is not stored yet, its
// log on any server).
func (d *Door) chain(ctx context.Context, c gateway.Caller, responseID string) ([]json.RawMessage, error) {
	notFound := &requestError{code: "previous_response_not_found", param: "previous_response_id",
		msg: fmt.Sprintf("Previous response with id %q not found.", protocol.Clip(responseID))}
	reqID, _ := requestIDOf(responseID)
	sctx, cancel := context.WithTimeout(ctx, d.opts.StoreTimeout)
	defer cancel()
	st, err := d.store.Get(sctx, c.Principal.Owner(), reqID)
	if err != nil {
		return nil, errors.Join(gateway.ErrBusy, err)
	}
	if st == nil {
		return nil, notFound
	}
	obj := st.Response
	if obj == nil {
		log, err := d.gw.Rejoin(ctx, c, reqID)
		if err != nil {
			return nil, notFound
		}
		wctx, cancel := context.WithTimeout(ctx, endedWait)
		obj = d.object(wctx, log)
		cancel()
		switch {
		case obj == nil && log.Ended().IsZero():
			return nil, badParam("previous_response_id", "response %q is still in progress: continue from it once it has ended", protocol.Clip(responseID))
		case obj == nil:
			return nil, notFound
		}
	}
	var r struct {
		Output []json.RawMessage `json:"output"`
	}
	if err := json.Unmarshal(obj, &r); err != nil {
		return nil, notFound
	}
	out := make([]json.RawMessage, 0, len(st.Items)+len(r.Output))
	return append(append(out, st.Items...), r.Output...), nil
}

// object is an ended log's response object (nil for a request refused
// before it was accepted).
func (d *Door) object(ctx context.Context, log *stream.Log) json.RawMessage {
	for b := range log.Follow(ctx, d.whole, 0) {
		if b.Terminal != nil {
			if b.TerminalBytes == nil {
				return nil
			}
			return json.RawMessage(b.TerminalBytes)
		}
	}
	return nil
}

// submitted keeps the response (Put, before its first byte) and answers a
// background request at once.
func (d *Door) submitted(w http.ResponseWriter, r *http.Request, c gateway.Caller, p *parsed, log *stream.Log) bool {
	if len(p.dropped) > 0 {
		w.Header().Set(HeaderDroppedTools, strings.Join(p.dropped, ","))
	}
	st := d.keep(r.Context(), c, p, log, nil)
	if p.b.Background && !p.b.Stream {
		writeJSON(w, http.StatusOK, decorate(d.pending(log, p.in.Model), st))
		return true
	}
	if p.b.Stream {
		rsp := sseResponder{d: d, w: w, rc: http.NewResponseController(w), requestID: p.requestID, names: p.names,
			logger: d.log.With(zap.String("request_id", p.requestID))}
		rsp.follow(r.Context(), log, -1, true)
		return true
	}
	rc := http.NewResponseController(w)
	for b := range log.Follow(r.Context(), d.whole, 0) {
		if b.Terminal == nil {
			continue
		}
		_ = rc.SetWriteDeadline(time.Now().Add(d.l.WriteTimeout()))
		if e := b.Terminal.Error; e != nil && b.TerminalBytes == nil {
			d.l.Refuse(w, p.requestID, refusal(*e, 0, p.names))
			return true
		}
		writeRaw(w, decorate(b.TerminalBytes, st))
		return true
	}
	d.log.Info("client_gone", zap.String("request_id", p.requestID),
		zap.String("hint", "the response continues: GET /v1/responses/{id}, or send it again with the same Idempotency-Key"))
	return true
}

// keep puts the stored response and, for store:true, adds its response
// object when it ends.
func (d *Door) keep(ctx context.Context, c gateway.Caller, p *parsed, log *stream.Log, ended json.RawMessage) *Stored {
	now := d.opts.Now()
	keepFor := d.opts.ResumeWindow
	if p.stored() {
		keepFor = p.retention
	}
	st := &Stored{ID: p.requestID, CreatedAt: log.Created.Unix(), Model: p.in.Model, Instructions: p.b.Instructions,
		Items: p.conversation, Own: len(p.own), Previous: p.b.PreviousResponseID, Store: p.stored(),
		Background: p.b.Background, Metadata: p.b.Metadata, Response: ended, Expires: now.Add(keepFor).Unix()}
	owner := c.Principal.Owner()
	logger := d.log.With(zap.String("request_id", p.requestID))
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.opts.StoreTimeout)
	err := d.store.Put(sctx, owner, st)
	cancel()
	if err != nil {
		logger.Warn("response_store_failed", zap.Error(err))
		return st
	}
	if p.stored() && ended == nil {
		go func() {
			// A request ends within its timeout, which the resume window exceeds.
			wctx, stop := context.WithTimeout(context.Background(), d.opts.ResumeWindow)
			defer stop()
			obj := d.object(wctx, log)
			if obj == nil {
				return
			}
			fctx, cancel := context.WithTimeout(context.Background(), d.opts.StoreTimeout)
			defer cancel()
			if err := d.store.Finish(fctx, owner, p.requestID, obj); err != nil {
				logger.Warn("response_store_failed", zap.Error(err))
			}
		}()
	}
	return st
}

// pending is the response object of a request that has not ended.
func (d *Door) pending(log *stream.Log, model string) json.RawMessage {
	e := d.whole.NewEncoder(log).(*encoder)
	e.model = model
	b, _ := json.Marshal(e.object("in_progress", nil, nil, nil))
	return b
}

// decorate fills in what a response object echoes of its request (the
// log knows only its answer).
func decorate(obj json.RawMessage, st *Stored) json.RawMessage {
	if st == nil {
		return obj
	}
	var m map[string]any
	if json.Unmarshal(obj, &m) != nil {
		return obj
	}
	m["store"], m["background"] = st.Store, st.Background
	m["instructions"], m["previous_response_id"] = st.Instructions, nil
	if st.Previous != "" {
		m["previous_response_id"] = st.Previous
	}
	m["metadata"] = st.Metadata
	if st.Metadata == nil {
		m["metadata"] = map[string]string{}
	}
	if m["model"] == "" && st.Model != "" {
		m["model"] = st.Model
	}
	b, err := json.Marshal(m)
	if err != nil {
		return obj
	}
	return b
}

// responseOf finds the caller's response {id} of a path
// /v1/responses/{id}[/rest].
func responseOf(path string) (reqID, rest string, ok bool) {
	tail, _ := strings.CutPrefix(path, Path+"/")
	id, rest, _ := strings.Cut(tail, "/")
	reqID, ok = requestIDOf(id)
	return reqID, rest, ok
}

// route signs the caller in for a stored response's route
// /v1/responses/{id}[/rest], rest one of rests; ok is false when it
// answered (a refusal, or 404).
func (d *Door) route(w http.ResponseWriter, r *http.Request, rests ...string) (c gateway.Caller, reqID, rest string, ok bool) {
	reqID, rest, found := responseOf(r.URL.Path)
	c, ok = d.signed(w, r)
	if !ok {
		return c, "", "", false
	}
	if !found || !contains(rests, rest) {
		d.notFound(w, strings.TrimPrefix(r.URL.Path, Path+"/"))
		return c, "", "", false
	}
	return c, reqID, rest, true
}

// signed signs the caller in for a stored response's route.
func (d *Door) signed(w http.ResponseWriter, r *http.Request) (gateway.Caller, bool) {
	p, a := d.l.Authenticate(r)
	if a != nil {
		d.l.Refuse(w, "", a)
		return gateway.Caller{}, false
	}
	return gateway.Caller{Principal: p, SessionID: door.NewID()}, true
}

func (d *Door) notFound(w http.ResponseWriter, id string) {
	d.l.Fail(w, call.Failure{Code: call.CodeNotFound, Message: "Response with id " + strconv.Quote(protocol.Clip(id)) + " not found."}, 0)
}

// get reads a stored response visible to GET (store:true), nil when none.
func (d *Door) get(w http.ResponseWriter, ctx context.Context, c gateway.Caller, reqID string) (*Stored, bool) {
	sctx, cancel := context.WithTimeout(ctx, d.opts.StoreTimeout)
	defer cancel()
	st, err := d.store.Get(sctx, c.Principal.Owner(), reqID)
	if err != nil {
		d.l.Fail(w, gateway.Failure(errors.Join(gateway.ErrBusy, err)), 0)
		return nil, false
	}
	return st, true
}

// retrieve is GET /v1/responses/{id} (?stream=true&starting_after=N) and
// GET /v1/responses/{id}/input_items.
func (d *Door) retrieve(w http.ResponseWriter, r *http.Request) {
	c, reqID, rest, ok := d.route(w, r, "", "input_items")
	if !ok {
		return
	}
	q := r.URL.Query()
	if rest == "" && (q.Get("stream") == "true" || streamBody(r)) {
		d.resume(w, r, c, reqID, q.Get("starting_after"))
		return
	}
	st, ok := d.get(w, r.Context(), c, reqID)
	if !ok {
		return
	}
	if st == nil || !st.Store {
		d.notFound(w, ResponseID(reqID))
		return
	}
	if rest == "input_items" {
		d.inputItems(w, r, st)
		return
	}
	obj := st.Response
	if obj == nil {
		if log, err := d.gw.Rejoin(r.Context(), c, reqID); err == nil {
			// A log another server's record ended ends here at once (its
			// first read): a short wait tells it from a running one.
			wctx, cancel := context.WithTimeout(r.Context(), endedWait)
			obj = d.object(wctx, log)
			cancel()
			if obj == nil {
				obj = d.pending(log, st.Model)
			}
		}
	}
	if obj == nil {
		d.notFound(w, ResponseID(reqID))
		return
	}
	writeRaw(w, decorate(obj, st))
}

// endedWait bounds how long GET waits for a log it rejoined to show its
// ending before it answers in_progress.
const endedWait = 250 * time.Millisecond

// streamBody reports whether a GET's body asks to stream: openai-go's
// GetStreaming sends {"stream":true} as a body, the JS SDK a query.
func streamBody(r *http.Request) bool {
	if r.Body == nil || r.ContentLength == 0 {
		return false
	}
	var b struct {
		Stream bool `json:"stream"`
	}
	return json.NewDecoder(io.LimitReader(r.Body, 4<<10)).Decode(&b) == nil && b.Stream
}

// inputItems lists a stored response's own input items (order desc by
// default, as OpenAI's; limit 1-100, default 20; after an item id).
func (d *Door) inputItems(w http.ResponseWriter, r *http.Request, st *Stored) {
	q := r.URL.Query()
	limit := 20
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			d.l.Fail(w, call.Failure{Code: call.CodeInvalidRequest, Message: "limit must be an integer from 1 to 100"}, 0)
			return
		}
		limit = n
	}
	order := q.Get("order")
	if order != "" && order != "asc" && order != "desc" {
		d.l.Fail(w, call.Failure{Code: call.CodeInvalidRequest, Message: `order must be "asc" or "desc"`}, 0)
		return
	}
	own := st.Items[max(0, len(st.Items)-st.Own):]
	list := make([]json.RawMessage, 0, len(own))
	for i, it := range own {
		list = append(list, withID(it, "item_"+st.ID+"_"+strconv.Itoa(i)))
	}
	if order != "asc" {
		for i, j := 0, len(list)-1; i < j; i, j = i+1, j-1 {
			list[i], list[j] = list[j], list[i]
		}
	}
	if after := q.Get("after"); after != "" {
		for i, it := range list {
			if idOf(it) == after {
				list = list[i+1:]
				break
			}
		}
	}
	more := len(list) > limit
	list = list[:min(limit, len(list))]
	out := struct {
		Object  string            `json:"object"`
		Data    []json.RawMessage `json:"data"`
		FirstID *string           `json:"first_id"`
		LastID  *string           `json:"last_id"`
		HasMore bool              `json:"has_more"`
	}{Object: "list", Data: list, HasMore: more}
	if len(list) > 0 {
		f, l := idOf(list[0]), idOf(list[len(list)-1])
		out.FirstID, out.LastID = &f, &l
	}
	writeJSON(w, http.StatusOK, out)
}

// withID is an item as input_items lists it: with an id (its own, else
// id) and a message's content as parts.
func withID(it json.RawMessage, id string) json.RawMessage {
	var m map[string]any
	if json.Unmarshal(it, &m) != nil {
		return it
	}
	if m["type"] == nil {
		m["type"] = "message"
	}
	if text, ok := m["content"].(string); ok && m["type"] == "message" {
		m["content"] = []any{map[string]any{"type": "input_text", "text": text}} // OpenAI lists a message's content as parts
	}
	if s, _ := m["id"].(string); s == "" {
		m["id"] = id
	}
	b, _ := json.Marshal(m)
	return b
}

func idOf(it json.RawMessage) string {
	var v struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(it, &v)
	return v.ID
}

// remove is DELETE /v1/responses/{id}.
func (d *Door) remove(w http.ResponseWriter, r *http.Request) {
	c, reqID, _, ok := d.route(w, r, "")
	if !ok {
		return
	}
	st, ok := d.get(w, r.Context(), c, reqID)
	if !ok {
		return
	}
	if st == nil || !st.Store {
		d.notFound(w, ResponseID(reqID))
		return
	}
	sctx, cancel := context.WithTimeout(r.Context(), d.opts.StoreTimeout)
	defer cancel()
	if _, err := d.store.Delete(sctx, c.Principal.Owner(), reqID); err != nil {
		d.l.Fail(w, gateway.Failure(errors.Join(gateway.ErrBusy, err)), 0)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": ResponseID(reqID), "object": "response", "deleted": true})
}

// cancelWait bounds how long a cancel waits for the response to end.
const cancelWait = 10 * time.Second

// cancel is POST /v1/responses/{id}/cancel: a background response stops,
// on whichever server runs it; the answer is its object once it ended.
func (d *Door) cancel(w http.ResponseWriter, r *http.Request) {
	c, reqID, _, ok := d.route(w, r, "cancel")
	if !ok {
		return
	}
	st, ok := d.get(w, r.Context(), c, reqID)
	if !ok {
		return
	}
	if st == nil {
		d.notFound(w, ResponseID(reqID))
		return
	}
	if !st.Background {
		d.l.Fail(w, call.Failure{Code: call.CodeInvalidRequest, Message: "Only background responses can be cancelled."}, 0)
		return
	}
	if err := d.gw.Cancel(r.Context(), c, reqID); err != nil {
		d.l.Fail(w, gateway.Failure(err), 0)
		return
	}
	log, err := d.gw.Rejoin(r.Context(), c, reqID)
	if err != nil {
		d.l.Fail(w, gateway.Failure(err), 0)
		return
	}
	ctx, stop := context.WithTimeout(r.Context(), cancelWait)
	defer stop()
	obj := d.object(ctx, log)
	if obj == nil {
		obj = d.pending(log, st.Model)
	}
	writeRaw(w, decorate(obj, st))
}

func writeRaw(w http.ResponseWriter, b json.RawMessage) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(append(b, '\n'))
}

// resume is GET /v1/responses/{id}?stream=true&starting_after=N: the
// response's events after sequence_number N, byte-identical to the first
// delivery, then live; on any server, for any response within the resume
// window (stored or not).
func (d *Door) resume(w http.ResponseWriter, r *http.Request, c gateway.Caller, reqID, startingAfter string) {
	after := -1
	if startingAfter != "" {
		n, err := strconv.Atoi(startingAfter)
		if err != nil || n < 0 {
			d.l.Refuse(w, reqID, badParam("starting_after", "starting_after must be a sequence_number (an integer >= 0)").api())
			return
		}
		after = n
	}
	log, err := d.gw.Resume(r.Context(), c, reqID)
	if err != nil {
		if gateway.Failure(err).Code == call.CodeNotFound {
			d.notFound(w, ResponseID(reqID))
			return
		}
		d.l.Fail(w, gateway.Failure(err), 0)
		return
	}
	w.Header().Set(headerRequestID, reqID)
	rsp := sseResponder{d: d, w: w, rc: http.NewResponseController(w), requestID: reqID,
		logger: d.log.With(zap.String("request_id", reqID))}
	rsp.follow(r.Context(), log, after, false)
}

// sseResponder writes a log's events as Server-Sent Events.
type sseResponder struct {
	d         *Door
	w         http.ResponseWriter
	rc        *http.ResponseController
	requestID string
	names     *names
	logger    *zap.Logger
}

// follow writes the events after sequence_number `after` (-1: all). A new
// request refused before it was accepted gets a plain HTTP error; a
// resume whose starting_after is past the end of an ended stream is 400.
func (s *sseResponder) follow(ctx context.Context, log *stream.Log, after int, fresh bool) {
	sse := door.SSE{W: s.w, RC: s.rc, Timeout: s.d.l.WriteTimeout(), Logger: s.logger, Metrics: s.d.l.Metrics()}
	skip := after + 1
	for b := range log.Follow(ctx, s.d.sse, 0) {
		if !sse.Started {
			if fresh && b.Accepted == nil && b.Terminal != nil && b.Terminal.Error != nil {
				s.d.l.Refuse(s.w, s.requestID, refusal(*b.Terminal.Error, 0, s.names))
				return
			}
			if b.Terminal != nil && skip > 0 {
				if n := countEvents(&b); skip > n {
					s.d.l.Refuse(s.w, s.requestID, badParam("starting_after",
						"starting_after is %d: the stream's last sequence_number is %d", after, n-1).api())
					return
				}
			}
			sse.Start()
		}
		head := eventsOf(&b, &skip)
		if !sse.Write(head, &stream.Batch{}) {
			return
		}
	}
}

// countEvents counts a batch's SSE events.
func countEvents(b *stream.Batch) int {
	n := strings.Count(string(b.AcceptedBytes), "\n\n")
	for i := range b.Chunks.Len() {
		n += strings.Count(string(b.Chunks.At(i)), "\n\n")
	}
	return n + strings.Count(string(b.TerminalBytes), "\n\n")
}

// eventsOf is a batch's SSE bytes less the first *skip events (which it
// counts down).
func eventsOf(b *stream.Batch, skip *int) []byte {
	var out []byte
	add := func(p []byte) {
		for *skip > 0 && len(p) > 0 {
			i := strings.Index(string(p), "\n\n")
			if i < 0 {
				return
			}
			p = p[i+2:]
			*skip--
		}
		out = append(out, p...)
	}
	add(b.AcceptedBytes)
	for i := range b.Chunks.Len() {
		add(b.Chunks.At(i))
	}
	add(b.TerminalBytes)
	if b.Terminal != nil && *skip > 0 {
		// The client saw more than the log holds (a survivor's log has
		// what its owner saved): it still gets the ending, with what was saved.
		out = append(out, lastEvent(b.TerminalBytes, "\n\n")...)
	}
	return out
}

// lastEvent is the last event of an encoding whose events end with sep.
func lastEvent(enc []byte, sep string) []byte {
	body := strings.TrimSuffix(string(enc), sep)
	return []byte(body[strings.LastIndex(body, sep)+len(sep):] + sep)
}
