package anthropic

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/jetway-gateway/jetway/internal/auth"
	"github.com/jetway-gateway/jetway/internal/call"
	"github.com/jetway-gateway/jetway/internal/config"
	"github.com/jetway-gateway/jetway/internal/door"
	"github.com/jetway-gateway/jetway/internal/gateway"
	"github.com/jetway-gateway/jetway/internal/protocol"
	"github.com/jetway-gateway/jetway/internal/stream"
)

// fakeVerifier accepts the token "good" and refuses everything else.
type fakeVerifier struct{}

func (fakeVerifier) Verify(_ context.Context, tok string) (auth.Principal, error) {
	if tok != "good" {
		return auth.Principal{}, auth.ErrBadSignature
	}
	return auth.Principal{Subject: "alice", Tenant: "contoso", App: "support"}, nil
}

// fakeGateway runs submit for every request; refusals are counted.
type fakeGateway struct {
	submit  func(c gateway.Caller, req gateway.Request) (*stream.Log, int, error)
	refused chan gateway.Request
}

func (g fakeGateway) Submit(_ context.Context, c gateway.Caller, req gateway.Request) (*stream.Log, int, error) {
	return g.submit(c, req)
}

func (g fakeGateway) Refuse(_ context.Context, c gateway.Caller, req gateway.Request, err error) error {
	if g.refused != nil {
		g.refused <- req
	}
	return err
}

type fakeApps struct{}

func (fakeApps) App(tenant, app string) (*config.Tenant, *config.App, bool) {
	a := &config.App{ID: app}
	a.Models.Default, a.Models.Allow = "mock-a", []string{"mock-a", "mock-b"}
	return &config.Tenant{ID: tenant}, a, tenant == "contoso"
}

func newDoor(t *testing.T, submit func(gateway.Caller, gateway.Request) (*stream.Log, int, error)) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(New(fakeVerifier{}, fakeGateway{submit: submit}, fakeApps{}, nil, zap.NewNop(), door.Options{}))
	t.Cleanup(srv.Close)
	return srv
}

func do(t *testing.T, method, url, body string, hdr map[string]string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("x-api-key", "good")
	req.Header.Set(VersionHeader, "2023-06-01")
	for k, v := range hdr {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func post(t *testing.T, url, body string, hdr map[string]string) *http.Response {
	t.Helper()
	return do(t, http.MethodPost, url+PathMessages, body, hdr)
}

func decodeError(t *testing.T, r io.Reader) errorBody {
	t.Helper()
	var b errorBody
	if err := json.NewDecoder(r).Decode(&b); err != nil {
		t.Fatal(err)
	}
	return b
}

// finished returns a log that was accepted, streamed pieces and ended with done.
func finished(req gateway.Request, stop string, pieces ...string) *stream.Log {
	log := stream.NewLog("alice", req.RequestID, "h", time.Now())
	log.Accept(stream.NewAccepted(call.Accepted{RequestID: req.RequestID, Model: "mock-a"}))
	for _, p := range pieces {
		log.Append(p)
	}
	a := call.Assemble(pieces)
	d := call.Done{RequestID: req.RequestID, Chunks: len(pieces), Text: a.Text,
		Model: "mock-a", Usage: protocol.Usage{InputTokens: 7, OutputTokens: int64(len(pieces))}, StopReason: stop}
	if !a.Plain {
		d.Blocks = a.Blocks
	}
	log.Finish(stream.DoneTerminal(d), time.Now())
	return log
}

const hello = `{"model":"mock-a","max_tokens":100,"messages":[{"role":"user","content":"hi"}]`

func TestRequestTranslation(t *testing.T) {
	got := make(chan gateway.Request, 1)
	srv := newDoor(t, func(c gateway.Caller, req gateway.Request) (*stream.Log, int, error) {
		got <- req
		return finished(req, "end_turn", "ok"), 0, nil
	})
	body := `{"model":"mock-a","max_tokens":50,"temperature":0.5,"top_p":0.9,"stop_sequences":["END"],
	  "system":[{"type":"text","text":"a"},{"type":"text","text":"b","cache_control":{"type":"ephemeral"}}],
	  "metadata":{"user_id":"` + strings.Repeat("u", 100) + `"},"service_tier":"auto",
	  "thinking":{"type":"adaptive","display":"omitted"},"context_management":{"edits":[{"type":"clear_thinking_20251015","keep":"all"}]},
	  "output_config":{"effort":"high"},"cache_control":{"type":"ephemeral"},
	  "messages":[{"role":"user","content":"q1"},{"role":"user","content":[{"type":"text","text":"q2","cache_control":{"type":"ephemeral","ttl":"5m"}}]},
	    {"role":"system","content":[{"type":"text","text":"c"}]}]}`
	resp := post(t, srv.URL, body, map[string]string{"Idempotency-Key": "key-00000001"})
	if resp.StatusCode != 200 || resp.Header.Get("request-id") != "key-00000001" {
		t.Fatalf("status %d, request-id %q: %+v", resp.StatusCode, resp.Header.Get("request-id"), decodeError(t, resp.Body))
	}
	req := <-got
	msgs := translated(call.Request{Messages: req.Messages})
	wantMsgs := translated(call.Request{Messages: frame(t, `{"messages":[{"role":"user","content":[{"type":"text","text":"q1"},{"type":"text","text":"q2"},{"type":"cache_point"}]}]}`).Messages})
	if req.RequestID != "key-00000001" || req.Model != "mock-a" || req.System != "a\n\nb\n\nc" || req.Reasoning != nil || req.MaxTokens != 50 ||
		*req.Temperature != 0.5 || *req.TopP != 0.9 || len(req.Stop) != 1 || req.Stop[0] != "END" || req.Door != gateway.DoorAnthropic ||
		msgs != wantMsgs ||
		!req.PrefixCachePoint {
		t.Fatalf("request %+v\nmessages %s", req, msgs)
	}
	var m struct {
		ID, Type, Role, Model string
		StopReason            string `json:"stop_reason"`
		StopSequence          *string
		Content               []struct{ Type, Text string }
		Usage                 struct {
			InputTokens  int `json:"input_tokens"`
			OutputTokens int `json:"output_tokens"`
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatal(err)
	}
	if m.ID != "msg_key-00000001" || m.Type != "message" || m.Role != "assistant" || m.Model != "mock-a" || m.StopReason != "end_turn" ||
		len(m.Content) != 1 || m.Content[0].Text != "ok" || m.Usage.InputTokens != 7 || m.Usage.OutputTokens != 1 {
		t.Fatalf("message %+v", m)
	}
}

// TestToolsThinkingImages: tools, tool choice, a tool loop's history with
// thinking blocks and their signatures, images and documents become the
// protocol's tools and blocks.
func TestToolsThinkingImages(t *testing.T) {
	got := make(chan gateway.Request, 1)
	srv := newDoor(t, func(c gateway.Caller, req gateway.Request) (*stream.Log, int, error) {
		got <- req
		return finished(req, "end_turn", "ok"), 0, nil
	})
	body := `{"model":"mock-a","max_tokens":4000,"thinking":{"type":"enabled","budget_tokens":2000},
	 "tools":[{"name":"lookup","description":"looks up","input_schema":{"type":"object"}},
	   {"name":"later","input_schema":{"type":"object"},"defer_loading":true}],"tool_choice":{"type":"any"},
	 "messages":[{"role":"user","content":[{"type":"text","text":"see"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + png1 + `"}},
	   {"type":"document","title":"report.pdf v2","source":{"type":"text","media_type":"text/plain","data":"plain"}}]},
	  {"role":"assistant","content":[{"type":"thinking","thinking":"hmm","signature":"sig"},{"type":"tool_use","id":"toolu_1","name":"lookup","input":{"q":"x"}}]},
	  {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"found","cache_control":{"type":"ephemeral"}}],"is_error":true}]}]}`
	if resp := post(t, srv.URL, body, nil); resp.StatusCode != 200 {
		t.Fatalf("status %d: %+v", resp.StatusCode, decodeError(t, resp.Body))
	}
	req := <-got
	want := `{"messages":[{"role":"user","content":[{"type":"text","text":"see"},{"type":"image","format":"png","data":"` + png1 + `"},` +
		`{"type":"document","format":"txt","name":"report pdf v2","data":"cGxhaW4="}]},` +
		`{"role":"assistant","content":[{"type":"reasoning","text":"hmm","signature":"sig"},{"type":"tool_use","name":"lookup","id":"toolu_1","input":{"q":"x"}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"found"}],"status":"error"},{"type":"cache_point"}]}],` +
		`"tools":[{"name":"lookup","description":"looks up","input_schema":{"type":"object"}}],"tool_choice":"any","reasoning":{"budget_tokens":2000}}`
	if got, want := translated(req.Request), translated(frame(t, want)); got != want {
		t.Fatalf("translated\n%s\nwant\n%s", got, want)
	}
}

// png1 is a 1x1 PNG, base64.
const png1 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="

// TestBadBodiesNameTheField: every malformed body is a 400
// invalid_request_error in Anthropic's shape naming the field, refused
// through the gateway's refusal path and never submitted.
func TestBadBodiesNameTheField(t *testing.T) {
	refused := make(chan gateway.Request, 1)
	srv := httptest.NewServer(New(fakeVerifier{}, fakeGateway{refused: refused, submit: func(gateway.Caller, gateway.Request) (*stream.Log, int, error) {
		t.Error("a bad body reached the gateway")
		return nil, 0, errors.New("unreachable")
	}}, fakeApps{}, nil, zap.NewNop(), door.Options{}))
	defer srv.Close()
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	mt := `"max_tokens":100,`
	user := func(blocks string) string {
		return `{` + mt + `"messages":[{"role":"user","content":[` + blocks + `]}]}`
	}
	image := func(src string) string { return user(`{"type":"image","source":` + src + `}`) }
	tools := `"tools":[{"name":"f","input_schema":{"type":"object"}}]`
	for _, tc := range []struct{ body, field string }{
		{`[1]`, "the body is not a JSON object"},
		{`{"max_tokens":1,` + msgs + `,"top_k":5}`, "top_k: not supported"},
		{`{"max_tokens":1,` + msgs + `,"frequency":5}`, "frequency: not supported"},
		{`{"max_tokens":1,` + msgs + `,"service_tier":"batch"}`, `service_tier: must be "auto" or "standard_only" (or Jetway's "priority" or "flex"), got "batch"`},
		{`{"max_tokens":1,` + msgs + `,"service_tier":7}`, "service_tier: expected a string, got a number"},
		{`{"max_tokens":1,` + msgs + `,"mcp_servers":[{}]}`, "mcp_servers: not supported"},
		{`{` + msgs + `}`, "max_tokens: field required"},
		{`{"max_tokens":0,` + msgs + `}`, "max_tokens: must be at least 1"},
		{`{"max_tokens":"many",` + msgs + `}`, "max_tokens: expected an integer, got a string"},
		{`{` + mt + msgs + `,"temperature":"hot"}`, "temperature: expected a number, got a string"},
		{`{` + mt + `"messages":"hi"}`, "messages: expected an array, got a string"},
		{`{` + mt + `"messages":[{"role":"user","content":7}]}`, "messages"},
		{`{` + mt + msgs + `,"temperature":1.5}`, "temperature must be between 0 and 1"},
		{`{` + mt + msgs + `,"top_p":2}`, "top_p: must be between 0 and 1"},
		{`{` + mt + msgs + `,"stop_sequences":["a","b","c","d","e"]}`, "stop_sequences: at most 4"},
		{`{` + mt + msgs + `,"stop_sequences":[""]}`, "stop_sequences[0]: must not be empty"},
		{`{` + mt + msgs + `,"stop_sequences":["` + strings.Repeat("s", 200_000) + `"]}`, "stop_sequences[0]: at most 1024 bytes"},
		{`{` + mt + msgs + `,"metadata":{"user_id":1}}`, "metadata.user_id: must be a string"},
		{`{` + mt + msgs + `,"metadata":{"team":"x"}}`, "metadata.team: unknown field"},
		{`{` + mt + msgs + `,"system":[{"type":"image"}]}`, "system[0].type"},
		{`{` + mt + msgs + `,"system":5}`, "system: must be a string or an array"},
		{`{` + mt + `"messages":[]}`, "messages: must not be empty"},
		{`{` + mt + `"messages":[{"role":"tool","content":"x"}]}`, "messages[0].role"},
		{`{` + mt + `"messages":[{"role":"system","content":"x"}]}`, "messages: must hold a user message"},
		{`{` + mt + `"messages":[{"role":"user","content":"q"},{"role":"system","content":[{"type":"image"}]}]}`, "messages[1].content[0].type"},
		{`{` + mt + msgs + `,"context_management":{"edits":[{"type":"clear_tool_uses_20250919"}]}}`, "context_management.edits[0]"},
		{`{` + mt + msgs + `,"output_config":{"effort":"low"}}`, "output_config.effort"},
		{`{` + mt + msgs + `,"output_config":{"format":{"type":"json_schema"}}}`, "output_config.format"},
		{`{` + mt + msgs + `,"cache_control":{"type":"forever"}}`, "body.cache_control"},
		{`{` + mt + `"messages":[{"role":"user"}]}`, "messages[0].content: field required"},
		{`{` + mt + `"messages":[{"role":"user","content":""}]}`, "messages[0].content must not be empty"},
		{`{` + mt + `"messages":[{"role":"user","content":[]}]}`, "messages[0].content: must not be empty"},
		{`{` + mt + `"messages":[{"role":"user","content":"q"},{"role":"assistant","content":"pre"}]}`, "messages[1].role: the last message must be a user message"},
		{`{` + mt + `"messages":[{"role":"assistant","content":"a"},{"role":"user","content":"q"},{"role":"user","content":[{"type":"text","text":""}]}]}`,
			"messages[2].content[0].text must not be empty"},
		{user(`{"type":"text","text":"x","cache_control":{"type":"forever"}}`), "messages[0].content[0].cache_control"},
		{user(`{"type":"audio"}`), `messages[0].content[0].type: "audio" is not supported`},
		{user(`{"text":"x"}`), "messages[0].content[0].type: field required"},
		{image(`{"type":"url","url":"https://example.com/cat.png"}`), "messages[0].content[0].source.type: url sources are not supported: this gateway does not fetch URLs"},
		{image(`{"type":"file","file_id":"f"}`), "messages[0].content[0].source.type: file sources"},
		{image(`{"type":"base64","media_type":"image/svg+xml","data":"` + png1 + `"}`), "messages[0].content[0].source.media_type"},
		{image(`{"type":"base64","media_type":"image/png","data":"not*base64"}`), "messages[0].content[0].source.data is not valid base64"},
		{image(`{"type":"base64","media_type":"image/png"}`), "messages[0].content[0].source.data: must be a base64 string"},
		{user(`{"type":"document","source":{"type":"base64","media_type":"application/msword","data":"AAAA"}}`), "messages[0].content[0].source.media_type"},
		{user(`{"type":"document","source":{"type":"text","media_type":"text/plain","data":"x"},"citations":{"enabled":true}}`), "messages[0].content[0].citations"},
		{user(`{"type":"document","source":{"type":"text","media_type":"text/plain","data":"x"},"context":"c"}`), "messages[0].content[0].context"},
		{user(`{"type":"redacted_thinking","data":"x"}`), "messages[0].content[0].type: redacted_thinking blocks are not supported"},
		{user(`{"type":"thinking","thinking":"x","signature":"s"}`), "messages[0].content[0]: reasoning blocks belong in assistant messages"},
		{user(`{"type":"tool_result","tool_use_id":"t1"}`), "messages[0].content[0].content: a tool result must have content"},
		{`{` + mt + `"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"tool_use","id":"t 1","name":"f","input":{}}]},` +
			`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t 1","content":"r"}]}],` + tools + `}`, "messages[1].content[0].id must be"},
		{`{` + mt + `"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{}}]},` +
			`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t2","content":"r"}]}],` + tools + `}`, "messages[2].content[0].tool_use_id \"t2\" matches no tool_use"},
		{`{` + mt + `"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{}}]},` +
			`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"r"}]}]}`, "tools are required"},
		{`{` + mt + msgs + `,"tools":[{"type":"web_search_20250305","name":"web_search"}]}`, "tools[0].type"},
		{`{` + mt + msgs + `,"tools":[{"name":"no spaces","input_schema":{"type":"object"}}]}`, "tools[0].name must be"},
		{`{` + mt + msgs + `,"tools":[{"name":"f","input_schema":[]}]}`, "tools[0].input_schema must be a JSON object"},
		{`{` + mt + msgs + `,` + tools + `,"tool_choice":{"type":"tool"}}`, "tool_choice.name: field required"},
		{`{` + mt + msgs + `,` + tools + `,"tool_choice":{"type":"tool","name":"g"}}`, "tool_choice.name must name one of the tools"},
		{`{` + mt + msgs + `,` + tools + `,"tool_choice":{"type":"sometimes"}}`, "tool_choice.type"},
		{`{` + mt + msgs + `,` + tools + `,"tool_choice":{"type":"auto","disable_parallel_tool_use":true}}`, "tool_choice.disable_parallel_tool_use"},
		{`{` + mt + msgs + `,"thinking":{"type":"auto"}}`, "thinking.type"},
		{`{` + mt + msgs + `,"thinking":{"type":"enabled"}}`, "thinking.budget_tokens: field required"},
		{`{` + mt + msgs + `,"thinking":{"type":"enabled","budget_tokens":100}}`, "thinking.budget_tokens must be at least 1024"},
		{`{"max_tokens":2000,` + msgs + `,"thinking":{"type":"enabled","budget_tokens":4000}}`, "thinking.budget_tokens must be less than max_tokens"},
	} {
		resp := post(t, srv.URL, tc.body, nil)
		e := decodeError(t, resp.Body)
		if resp.StatusCode != 400 || e.Type != "error" || e.Error.Type != "invalid_request_error" || !strings.HasPrefix(e.Error.Message, tc.field) ||
			strings.Contains(e.Error.Message, "anthropic.") || strings.Contains(e.Error.Message, "[]") {
			t.Errorf("%s:\n  status %d, %+v", tc.body, resp.StatusCode, e)
		}
		select {
		case <-refused:
		default:
			t.Errorf("%s: not refused through the gateway", tc.body)
		}
	}
	resp := post(t, srv.URL, hello+"}", map[string]string{"Idempotency-Key": "bad key"})
	if e := decodeError(t, resp.Body); resp.StatusCode != 400 || !strings.HasPrefix(e.Error.Message, "Idempotency-Key") {
		t.Errorf("bad Idempotency-Key: %d %+v", resp.StatusCode, e)
	}
	big := `{"max_tokens":1,"messages":[{"role":"user","content":"` + strings.Repeat("x", 300<<10) + `"}]}`
	resp = post(t, srv.URL, big, nil)
	if e := decodeError(t, resp.Body); resp.StatusCode != http.StatusRequestEntityTooLarge || e.Error.Type != "invalid_request_error" {
		t.Errorf("oversized body: %d %+v", resp.StatusCode, e)
	}
}

// TestErrorMapping: every protocol code has one Anthropic status and type.
func TestErrorMapping(t *testing.T) {
	for code, want := range map[string]struct {
		status int
		typ    string
	}{
		protocol.CodeInvalidRequest: {400, "invalid_request_error"}, protocol.CodeUnauthorized: {401, "authentication_error"},
		protocol.CodeForbidden: {403, "permission_error"}, protocol.CodeModelNotAllowed: {404, "not_found_error"},
		protocol.CodeNotFound: {404, "not_found_error"}, protocol.CodeConflict: {409, "invalid_request_error"},
		protocol.CodeQuotaExceeded: {429, "rate_limit_error"}, protocol.CodeRateLimited: {429, "rate_limit_error"},
		protocol.CodeCancelled: {499, "invalid_request_error"}, protocol.CodeInternal: {500, "api_error"},
		protocol.CodeModelError: {502, "api_error"}, protocol.CodeModelUnavailable: {529, "overloaded_error"},
		protocol.CodeBusy: {529, "overloaded_error"}, protocol.CodeDraining: {529, "overloaded_error"},
		protocol.CodeTimeout: {504, "api_error"}, protocol.CodeInterrupted: {503, "api_error"},
	} {
		if e := fromProtocol(call.Failure{Code: code, Message: "m"}); e.status != want.status || e.typ != want.typ {
			t.Errorf("%s: %d %s, want %d %s", code, e.status, e.typ, want.status, want.typ)
		}
	}
}

func TestAuthModelsAndCountTokens(t *testing.T) {
	srv := newDoor(t, nil)
	for _, tc := range []struct {
		name string
		hdr  map[string]string
		url  string
	}{
		{"forged", map[string]string{"x-api-key": "forged"}, ""},
		{"missing", map[string]string{"x-api-key": ""}, ""},
		{"disagree", map[string]string{"Authorization": "Bearer other"}, ""},
		{"malformed", map[string]string{"x-api-key": "", "Authorization": "Basic abc"}, ""},
		{"query", nil, "?key=good"},
	} {
		resp := do(t, http.MethodPost, srv.URL+PathMessages+tc.url, hello+"}", tc.hdr)
		if e := decodeError(t, resp.Body); resp.StatusCode != 401 || e.Error.Type != "authentication_error" {
			t.Errorf("%s: %d %+v", tc.name, resp.StatusCode, e)
		}
	}
	resp := do(t, http.MethodGet, srv.URL+PathModels, "", map[string]string{"x-api-key": "", "Authorization": "Bearer good"})
	var list struct {
		Data    []struct{ Type, ID string }
		HasMore bool   `json:"has_more"`
		First   string `json:"first_id"`
		Last    string `json:"last_id"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&list)
	if resp.StatusCode != 200 || len(list.Data) != 2 || list.Data[0].ID != "mock-a" || list.Data[0].Type != "model" ||
		list.HasMore || list.First != "mock-a" || list.Last != "mock-b" {
		t.Errorf("models: %d %+v", resp.StatusCode, list)
	}
	if resp := do(t, http.MethodGet, srv.URL+PathModels+"/mock-b", "", nil); resp.StatusCode != 200 {
		t.Errorf("one model: %d", resp.StatusCode)
	}
	if resp := do(t, http.MethodGet, srv.URL+PathModels+"/mock-z", "", nil); resp.StatusCode != 404 {
		t.Errorf("unknown model: %d", resp.StatusCode)
	}

	count := func(body string) (int, int64, errorBody) {
		resp := do(t, http.MethodPost, srv.URL+PathCountTokens, body, nil)
		raw, _ := io.ReadAll(resp.Body)
		var n struct {
			InputTokens int64 `json:"input_tokens"`
		}
		var e errorBody
		_ = json.Unmarshal(raw, &n)
		_ = json.Unmarshal(raw, &e)
		return resp.StatusCode, n.InputTokens, e
	}
	// "hi": ceil(2/3) + 8 per message.
	if status, n, _ := count(`{"model":"mock-a","messages":[{"role":"user","content":"hi"}]}`); status != 200 || n != 9 {
		t.Errorf("count_tokens: %d %d", status, n)
	}
	if status, _, e := count(`{"model":"mock-z","messages":[{"role":"user","content":"hi"}]}`); status != 404 || e.Error.Type != "not_found_error" {
		t.Errorf("count_tokens, unknown model: %d %+v", status, e)
	}
	if status, _, e := count(`{"messages":[]}`); status != 400 || !strings.HasPrefix(e.Error.Message, "messages") {
		t.Errorf("count_tokens, bad body: %d %+v", status, e)
	}
}

// event is one SSE event.
type event struct{ id, name, data string }

func readEvents(t *testing.T, r io.Reader) []event {
	t.Helper()
	var out []event
	var cur event
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			out = append(out, cur)
			cur = event{}
		case strings.HasPrefix(line, "id: "):
			cur.id = line[4:]
		case strings.HasPrefix(line, "event: "):
			cur.name = line[7:]
		case strings.HasPrefix(line, "data: "):
			cur.data = line[6:]
		}
	}
	return out
}

// blockAnswer is an answer's pieces: thinking and its signature, text, a
// tool call whose input streams in fragments, a second call.
var blockAnswer = []string{
	call.Encode(call.Piece{Kind: protocol.KindReasoning, Reasoning: "thinking"}),
	call.Encode(call.Piece{Kind: protocol.KindReasoning, Signature: "sig"}),
	call.Encode(call.Piece{Block: 1, Text: "Let me "}),
	call.Encode(call.Piece{Block: 1, Text: "look."}),
	call.Encode(call.Piece{Block: 2, Kind: protocol.KindToolUse, ID: "tooluse_1", Name: "lookup"}),
	call.Encode(call.Piece{Block: 2, Kind: protocol.KindToolUse, Input: `{"query":`}),
	call.Encode(call.Piece{Block: 2, Kind: protocol.KindToolUse, Input: `"Paris"}`}),
	call.Encode(call.Piece{Block: 3, Kind: protocol.KindToolUse, ID: "tooluse_2", Name: "clock"}),
}

// TestStreamEventsAndResume: the events in Anthropic's order, one id per
// chunk on the last event of its group; a resume after any seq is the
// original's bytes after that group; the whole answer in one body.
func TestStreamEventsAndResume(t *testing.T) {
	logs := map[string]*stream.Log{}
	srv := newDoor(t, func(c gateway.Caller, req gateway.Request) (*stream.Log, int, error) {
		if l, ok := logs[req.RequestID]; ok {
			return l, req.AfterSeq, nil
		}
		logs[req.RequestID] = finished(req, protocol.StopToolUse, blockAnswer...)
		return logs[req.RequestID], 0, nil
	})
	body := hello + `,"stream":true}`
	hdr := map[string]string{"Idempotency-Key": "stream-0001"}
	resp := post(t, srv.URL, body, hdr)
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "text/event-stream" || resp.Header.Get("request-id") != "stream-0001" {
		t.Fatalf("status %d, content type %q", resp.StatusCode, ct)
	}
	full, _ := io.ReadAll(resp.Body)
	evs := readEvents(t, strings.NewReader(string(full)))
	want := []struct{ id, name, data string }{
		{"", "message_start", `{"type":"message_start","message":{"id":"msg_stream-0001","type":"message","role":"assistant","model":"mock-a","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":0,"output_tokens":0}}}`},
		{"", "ping", `{"type":"ping"}`},
		{"", "content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}`},
		{"1", "content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"thinking"}}`},
		{"2", "content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"sig"}}`},
		{"", "content_block_stop", `{"type":"content_block_stop","index":0}`},
		{"", "content_block_start", `{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}`},
		{"3", "content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Let me "}}`},
		{"4", "content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"look."}}`},
		{"", "content_block_stop", `{"type":"content_block_stop","index":1}`},
		{"5", "content_block_start", `{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"tooluse_1","name":"lookup","input":{}}}`},
		{"6", "content_block_delta", `{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"query\":"}}`},
		{"7", "content_block_delta", `{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"\"Paris\"}"}}`},
		{"", "content_block_stop", `{"type":"content_block_stop","index":2}`},
		{"8", "content_block_start", `{"type":"content_block_start","index":3,"content_block":{"type":"tool_use","id":"tooluse_2","name":"clock","input":{}}}`},
		{"", "content_block_stop", `{"type":"content_block_stop","index":3}`},
		{"", "message_delta", `{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"input_tokens":7,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":8}}`},
		{"", "message_stop", `{"type":"message_stop"}`},
	}
	if len(evs) != len(want) {
		t.Fatalf("%d events:\n%s", len(evs), full)
	}
	for i, w := range want {
		if evs[i] != (event{w.id, w.name, w.data}) {
			t.Errorf("event %d: %+v\nwant     %+v", i, evs[i], w)
		}
	}
	// A resume after each seq is exactly the rest of the original bytes.
	for after := 1; after <= len(blockAnswer); after++ {
		hdr["Last-Event-ID"] = string(rune('0' + after))
		rest, _ := io.ReadAll(post(t, srv.URL, body, hdr).Body)
		mark := "id: " + hdr["Last-Event-ID"] + "\n"
		i := strings.Index(string(full), mark)
		tail := full[i:]
		tail = tail[strings.Index(string(tail), "\n\n")+2:]
		if string(rest) != string(tail) {
			t.Errorf("resumed after %d:\n%s\nwant\n%s", after, rest, tail)
		}
	}
	// The whole answer, in one body.
	delete(hdr, "Last-Event-ID")
	resp = post(t, srv.URL, hello+"}", hdr)
	whole, _ := io.ReadAll(resp.Body)
	wantWhole := `{"id":"msg_stream-0001","type":"message","role":"assistant","model":"mock-a","content":[` +
		`{"type":"thinking","thinking":"thinking","signature":"sig"},{"type":"text","text":"Let me look."},` +
		`{"type":"tool_use","id":"tooluse_1","name":"lookup","input":{"query":"Paris"}},{"type":"tool_use","id":"tooluse_2","name":"clock","input":{}}],` +
		`"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":7,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":8}}` + "\n"
	if string(whole) != wantWhole {
		t.Errorf("whole\n%s\nwant\n%s", whole, wantWhole)
	}
}

func TestErrorsBeforeAndAfterTheStreamStarted(t *testing.T) {
	srv := newDoor(t, func(c gateway.Caller, req gateway.Request) (*stream.Log, int, error) {
		log := stream.NewLog("alice", req.RequestID, "h", time.Now())
		switch req.Messages[0].Text() {
		case "quota":
			log.Reject(stream.ErrorTerminal(call.Failure{Code: protocol.CodeQuotaExceeded, Status: 429,
				Message: "Token quota exceeded", Retryable: true, RetryAfterMs: 61500, Scope: "user", Window: "hour"}), time.Now())
		case "model":
			log.Reject(stream.ErrorTerminal(call.Failure{Code: protocol.CodeModelNotAllowed, Status: 403,
				Message: `model "x" is not allowed`}), time.Now())
		case "tools":
			return nil, 0, call.FieldErrorf(call.ErrInvalid, "tools", `: model mock-a is not configured with the "tools" capability`)
		case "points":
			return nil, 0, call.FieldErrorf(call.ErrInvalid, "messages[0].content[1]", `: 5 cache_point blocks, model mock-a allows at most 4`)
		case "reasoning":
			return nil, 0, call.FieldErrorf(call.ErrInvalid, "reasoning", `: model mock-a is not configured with the "reasoning" capability`)
		case "busy":
			return nil, 0, gateway.ErrBusy
		case "draining":
			return nil, 0, gateway.ErrDraining
		case "conflict":
			return nil, 0, gateway.ErrConflict
		default:
			log.Accept(stream.NewAccepted(call.Accepted{Model: "mock-a"}))
			log.Append("part")
			log.Append("ial")
			n, text := 2, "partial"
			log.Finish(stream.ErrorTerminal(call.Failure{Code: protocol.CodeModelError, Status: 502,
				Message: "the model failed while answering", Retryable: true, Chunks: &n, Text: &text}), time.Now())
		}
		return log, 0, nil
	})
	ask := func(content string, stream bool) *http.Response {
		b, _ := json.Marshal(map[string]any{"max_tokens": 10, "messages": []map[string]string{{"role": "user", "content": content}}, "stream": stream})
		return post(t, srv.URL, string(b), nil)
	}
	resp := ask("quota", true)
	e := decodeError(t, resp.Body)
	if resp.StatusCode != 429 || resp.Header.Get("retry-after") != "62" || resp.Header.Get("retry-after-ms") != "61500" ||
		resp.Header.Get("x-should-retry") != "false" || e.Error.Type != "rate_limit_error" || e.Error.Code != "quota_exceeded" ||
		!strings.Contains(e.Error.Message, "user's hour window") || e.RequestID == "" || e.RequestID != resp.Header.Get("request-id") {
		t.Errorf("quota: %d %v %+v", resp.StatusCode, resp.Header, e)
	}
	for content, want := range map[string]struct {
		status int
		typ    string
	}{"model": {404, "not_found_error"}, "tools": {400, "invalid_request_error"}, "busy": {529, "overloaded_error"},
		"draining": {529, "overloaded_error"}, "conflict": {409, "invalid_request_error"}, "reasoning": {400, "invalid_request_error"}} {
		resp := ask(content, false)
		if e := decodeError(t, resp.Body); resp.StatusCode != want.status || e.Error.Type != want.typ ||
			content == "reasoning" && !strings.HasPrefix(e.Error.Message, "thinking: model mock-a") {
			t.Errorf("%s: %d %+v", content, resp.StatusCode, e)
		}
	}
	resp = ask("busy", false)
	if resp.Header.Get("retry-after") != "1" || resp.Header.Get("x-should-retry") != "true" {
		t.Errorf("busy: %v", resp.Header)
	}
	// A cache point too many is named as the cache_control that made it.
	resp = post(t, srv.URL, `{"max_tokens":10,"messages":[{"role":"user","content":[{"type":"text","text":"points","cache_control":{"type":"ephemeral"}}]}]}`, nil)
	if e := decodeError(t, resp.Body); resp.StatusCode != 400 || !strings.HasPrefix(e.Error.Message, "messages[0].content[0].cache_control: 5 cache_point blocks") {
		t.Errorf("cache points: %d %+v", resp.StatusCode, e)
	}
	// After the stream started: the chunks, then one error event; no message_stop.
	resp = ask("mid", true)
	evs := readEvents(t, resp.Body)
	if resp.StatusCode != 200 || len(evs) != 6 || evs[5].name != "error" {
		t.Fatalf("mid-stream error: %d %+v", resp.StatusCode, evs)
	}
	var eb errorBody
	if err := json.Unmarshal([]byte(evs[5].data), &eb); err != nil || eb.Type != "error" || eb.Error.Type != "api_error" || eb.Error.Code != "model_error" {
		t.Errorf("error event %+v (%v)", evs[5], err)
	}
	// Without streaming: the error's status.
	resp = ask("mid", false)
	if e := decodeError(t, resp.Body); resp.StatusCode != 502 || e.Error.Type != "api_error" {
		t.Errorf("non-stream mid error: %d %+v", resp.StatusCode, e)
	}
}

// frame is the core's request for a jetway.v1 request body (its fields
// after "type" and "request_id"), as the WebSocket door translates it:
// what this door's translation must produce.
func frame(t *testing.T, body string) call.Request {
	t.Helper()
	in, err := protocol.Decode([]byte(`{"type":"request","request_id":"req-expected",` + body[1:]))
	if err != nil {
		t.Fatalf("%s: %v", body, err)
	}
	return in.Call()
}

// translated shows a request's messages, tools, tool choice and
// reasoning, to compare two.
func translated(r call.Request) string {
	b, _ := json.Marshal([]any{r.Messages, r.Tools, r.ToolChoice, r.Reasoning})
	return string(b)
}
