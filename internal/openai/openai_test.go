package openai

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

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

// fakeGateway runs submit for every request, and refuse (nil: the
// refusal as it is) for every refused body.
type fakeGateway struct {
	submit func(c gateway.Caller, req gateway.Request) (*stream.Log, int, error)
	refuse func(c gateway.Caller, req gateway.Request, err error) error
}

func (g fakeGateway) Submit(_ context.Context, c gateway.Caller, req gateway.Request) (*stream.Log, int, error) {
	return g.submit(c, req)
}

func (g fakeGateway) Refuse(_ context.Context, c gateway.Caller, req gateway.Request, err error) error {
	if g.refuse == nil {
		return err
	}
	return g.refuse(c, req, err)
}

type fakeApps struct{}

func (fakeApps) App(tenant, app string) (*config.Tenant, *config.App, bool) {
	a := &config.App{ID: app}
	a.Models.Default, a.Models.Allow = "mock-a", []string{"mock-a", "mock-b"}
	return &config.Tenant{ID: tenant}, a, tenant == "contoso"
}

func newDoor(t *testing.T, submit func(gateway.Caller, gateway.Request) (*stream.Log, int, error), o door.Options) (*httptest.Server, *observer.ObservedLogs) {
	t.Helper()
	core, logs := observer.New(zap.InfoLevel)
	srv := httptest.NewServer(New(fakeVerifier{}, fakeGateway{submit: submit}, fakeApps{}, nil, zap.New(core), o))
	t.Cleanup(srv.Close)
	return srv, logs
}

func post(t *testing.T, url, body string, hdr map[string]string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+PathChat, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer good")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func decodeError(t *testing.T, r io.Reader) errorDetail {
	t.Helper()
	var b errorBody
	if err := json.NewDecoder(r).Decode(&b); err != nil {
		t.Fatal(err)
	}
	return b.Error
}

// finished returns a log that was accepted, streamed chunks and ended with done.
func finished(req gateway.Request, chunks ...string) *stream.Log {
	log := stream.NewLog("alice", req.RequestID, "h", time.Now())
	log.Accept(stream.NewAccepted(call.Accepted{RequestID: req.RequestID, Model: "mock-a"}))
	for _, c := range chunks {
		log.Append(c)
	}
	text, n := log.Text()
	log.Finish(stream.DoneTerminal(call.Done{RequestID: req.RequestID, Chunks: n, Text: text,
		Model: "mock-a", Usage: protocol.Usage{InputTokens: 7, OutputTokens: int64(n)}, StopReason: "end_turn"}), time.Now())
	return log
}

const hello = `{"model":"mock-a","messages":[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":"hi"}]}]`

func TestRequestTranslation(t *testing.T) {
	got := make(chan gateway.Request, 1)
	srv, _ := newDoor(t, func(c gateway.Caller, req gateway.Request) (*stream.Log, int, error) {
		got <- req
		return finished(req, "ok"), 0, nil
	}, door.Options{})
	resp := post(t, srv.URL, `{"model":"default","messages":[{"role":"developer","content":"a"},{"role":"system","content":"b"},`+
		`{"role":"user","content":"q"}],"max_completion_tokens":50,"temperature":0.5,"top_p":0.9,"stop":"END","user":"u1","n":1,"store":false}`,
		map[string]string{"Idempotency-Key": "key-00000001"})
	if resp.StatusCode != 200 || resp.Header.Get("x-request-id") != "key-00000001" {
		t.Fatalf("status %d, x-request-id %q", resp.StatusCode, resp.Header.Get("x-request-id"))
	}
	req := <-got
	if req.RequestID != "key-00000001" || req.Model != "" || req.System != "a\n\nb" || req.MaxTokens != 50 ||
		*req.Temperature != 0.5 || *req.TopP != 0.9 || len(req.Stop) != 1 || req.Stop[0] != "END" ||
		req.Door != gateway.DoorOpenAI || len(req.Messages) != 1 || req.Messages[0].Content != "q" {
		t.Fatalf("request %+v", req)
	}
	var body struct {
		ID      string
		Object  string
		Choices []struct {
			Message      struct{ Role, Content string }
			FinishReason string `json:"finish_reason"`
		}
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
			TotalTokens  int `json:"total_tokens"`
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	if body.ID != "chatcmpl-key-00000001" || body.Object != "chat.completion" || len(body.Choices) != 1 ||
		body.Choices[0].Message.Content != "ok" || body.Choices[0].FinishReason != "stop" || body.Usage.TotalTokens != 8 {
		t.Fatalf("body %+v", body)
	}
}

func TestBadRequestsNameTheParameter(t *testing.T) {
	srv, _ := newDoor(t, func(gateway.Caller, gateway.Request) (*stream.Log, int, error) {
		t.Error("a bad request reached the gateway")
		return nil, 0, errors.New("unreachable")
	}, door.Options{})
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	for _, tc := range []struct{ body, code, param string }{
		{`{` + msgs + `,"n":2}`, "unsupported_parameter", "n"},
		{`{` + msgs + `,"functions":[{"name":"f"}]}`, "unsupported_parameter", "functions"},
		{`{` + msgs + `,"parallel_tool_calls":false}`, "unsupported_parameter", "parallel_tool_calls"},
		{`{` + msgs + `,"logprobs":true}`, "unsupported_parameter", "logprobs"},
		{`{` + msgs + `,"response_format":{"type":"json_object"}}`, "unsupported_parameter", "response_format"},
		{`{` + msgs + `,"audio":{"voice":"alloy"}}`, "unsupported_parameter", "audio"},
		{`{` + msgs + `,"seed":3}`, "unsupported_parameter", "seed"},
		{`{"messages":[{"role":"user","content":[{"type":"input_audio","input_audio":{}}]}]}`, "unsupported_parameter", "messages[0].content[0].type"},
		{`{"messages":[{"role":"function","content":"x"}]}`, "unsupported_parameter", "messages[0].role"},
		{`{` + msgs + `,"top_p":2}`, "invalid_request", "top_p"},
		{`{` + msgs + `,"stop":["a","b","c","d","e"]}`, "invalid_request", "stop"},
		{`{` + msgs + `,"stop":["ok","` + strings.Repeat("s", 200_000) + `"]}`, "invalid_request", "stop"},
		{`{` + msgs + `,"max_tokens":0}`, "invalid_request", "max_tokens"},
		{`{"messages":"hi"}`, "invalid_request", "messages"},
		{`{` + msgs + `,"temperature":"hot"}`, "invalid_request", "temperature"},
		{`{` + msgs + `,"stream_options":{"include_usage":true}}`, "invalid_request", "stream_options"},
		{`{"messages":[]}`, "invalid_request", ""},
		{`[1]`, "invalid_request", ""},
	} {
		resp := post(t, srv.URL, tc.body, nil)
		e := decodeError(t, resp.Body)
		if resp.StatusCode != 400 || e.Code != tc.code || e.Type != "invalid_request_error" || (tc.param != "" && (e.Param == nil || *e.Param != tc.param)) {
			t.Errorf("%s: status %d, error %+v", tc.body, resp.StatusCode, e)
		}
	}
	resp := post(t, srv.URL, `{`+msgs+`}`, map[string]string{"Idempotency-Key": "bad key"})
	if e := decodeError(t, resp.Body); resp.StatusCode != 400 || e.Param == nil || *e.Param != "Idempotency-Key" {
		t.Errorf("bad Idempotency-Key: %d %+v", resp.StatusCode, e)
	}
	big := `{"messages":[{"role":"user","content":"` + strings.Repeat("x", 300<<10) + `"}]}`
	if resp := post(t, srv.URL, big, nil); resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("oversized body: %d", resp.StatusCode)
	}
}

func TestAuthAndModels(t *testing.T) {
	srv, _ := newDoor(t, nil, door.Options{OriginAllowed: func(o string) bool { return o == "https://chat.example" }})
	req, _ := http.NewRequest(http.MethodPost, srv.URL+PathChat, strings.NewReader(hello+"}"))
	req.Header.Set("Authorization", "Bearer forged")
	resp, _ := http.DefaultClient.Do(req)
	if e := decodeError(t, resp.Body); resp.StatusCode != 401 || e.Type != "authentication_error" {
		t.Errorf("forged token: %d %+v", resp.StatusCode, e)
	}
	req, _ = http.NewRequest(http.MethodGet, srv.URL+PathModels, nil)
	req.Header.Set("Authorization", "Bearer good")
	resp, _ = http.DefaultClient.Do(req)
	var list struct {
		Data []struct{ ID string }
	}
	_ = json.NewDecoder(resp.Body).Decode(&list)
	if resp.StatusCode != 200 || len(list.Data) != 2 || list.Data[0].ID != "mock-a" || list.Data[1].ID != "mock-b" {
		t.Errorf("models: %d %+v", resp.StatusCode, list)
	}
	// Preflight from an allowed origin; any request from another origin is refused.
	req, _ = http.NewRequest(http.MethodOptions, srv.URL+PathChat, nil)
	req.Header.Set("Origin", "https://chat.example")
	req.Header.Set("Access-Control-Request-Method", "POST")
	req.Header.Set("Access-Control-Request-Headers", "authorization, content-type, idempotency-key")
	resp, _ = http.DefaultClient.Do(req)
	if resp.StatusCode != 204 || resp.Header.Get("Access-Control-Allow-Origin") != "https://chat.example" ||
		!strings.Contains(resp.Header.Get("Access-Control-Allow-Headers"), "idempotency-key") {
		t.Errorf("preflight: %d %v", resp.StatusCode, resp.Header)
	}
	req.Header.Set("Origin", "https://evil.example")
	resp, _ = http.DefaultClient.Do(req)
	if resp.StatusCode != 403 {
		t.Errorf("preflight from a foreign origin: %d", resp.StatusCode)
	}
}

// event is one SSE event.
type event struct{ id, data string }

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
		case strings.HasPrefix(line, "data: "):
			cur.data = line[6:]
		}
	}
	return out
}

func TestStreamEventsAndResume(t *testing.T) {
	logs := map[string]*stream.Log{}
	srv, _ := newDoor(t, func(c gateway.Caller, req gateway.Request) (*stream.Log, int, error) {
		if l, ok := logs[req.RequestID]; ok {
			return l, req.AfterSeq, nil
		}
		logs[req.RequestID] = finished(req, "Hel", "lo", " <world>")
		return logs[req.RequestID], 0, nil
	}, door.Options{})
	body := hello + `,"stream":true,"stream_options":{"include_usage":true}}`
	resp := post(t, srv.URL, body, map[string]string{"Idempotency-Key": "stream-0001"})
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "text/event-stream" {
		t.Fatalf("status %d, content type %q", resp.StatusCode, ct)
	}
	evs := readEvents(t, resp.Body)
	if len(evs) != 6 {
		t.Fatalf("%d events: %+v", len(evs), evs)
	}
	var text strings.Builder
	for i, e := range evs[:3] {
		var c struct {
			ID      string
			Object  string
			Choices []struct {
				Delta        struct{ Role, Content string }
				FinishReason *string `json:"finish_reason"`
			}
		}
		if err := json.Unmarshal([]byte(e.data), &c); err != nil {
			t.Fatalf("event %d: %v: %s", i, err, e.data)
		}
		if e.id != string(rune('1'+i)) || c.ID != "chatcmpl-stream-0001" || c.Object != "chat.completion.chunk" ||
			c.Choices[0].FinishReason != nil || (i == 0) != (c.Choices[0].Delta.Role == "assistant") {
			t.Errorf("event %d: %+v", i, e)
		}
		text.WriteString(c.Choices[0].Delta.Content)
	}
	if text.String() != "Hello <world>" {
		t.Errorf("text %q", text.String())
	}
	if !strings.Contains(evs[3].data, `"delta":{},"finish_reason":"stop"`) || evs[3].id != "3" {
		t.Errorf("finish event %+v", evs[3])
	}
	if !strings.Contains(evs[4].data, `"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}`) {
		t.Errorf("usage event %+v", evs[4])
	}
	if evs[5].data != "[DONE]" {
		t.Errorf("last event %+v", evs[5])
	}
	// Resume after seq 2: the rest of the same answer.
	resp = post(t, srv.URL, body, map[string]string{"Idempotency-Key": "stream-0001", "Last-Event-ID": "2"})
	evs = readEvents(t, resp.Body)
	if len(evs) != 4 || evs[0].id != "3" || !strings.Contains(evs[0].data, `"content":" \u003cworld\u003e"`) {
		t.Errorf("resumed events %+v", evs)
	}
}

func TestErrorsBeforeAndAfterTheStreamStarted(t *testing.T) {
	srv, _ := newDoor(t, func(c gateway.Caller, req gateway.Request) (*stream.Log, int, error) {
		log := stream.NewLog("alice", req.RequestID, "h", time.Now())
		switch req.Messages[0].Content {
		case "quota":
			log.Reject(stream.ErrorTerminal(call.Failure{Code: protocol.CodeQuotaExceeded, Status: 429,
				Message: "Token quota exceeded", Retryable: true, RetryAfterMs: 61500, Scope: "user", Window: "hour"}), time.Now())
		case "model":
			log.Reject(stream.ErrorTerminal(call.Failure{Code: protocol.CodeModelNotAllowed, Status: 403,
				Message: `model "x" is not allowed`}), time.Now())
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
	}, door.Options{})
	ask := func(content string, stream bool) *http.Response {
		b, _ := json.Marshal(map[string]any{"messages": []map[string]string{{"role": "user", "content": content}}, "stream": stream})
		return post(t, srv.URL, string(b), nil)
	}
	resp := ask("quota", true)
	e := decodeError(t, resp.Body)
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "62" || resp.Header.Get("retry-after-ms") != "61500" ||
		e.Code != "quota_exceeded" || e.Type != "rate_limit_error" || !strings.Contains(e.Message, "user's hour window") {
		t.Errorf("quota: %d %v %+v", resp.StatusCode, resp.Header, e)
	}
	resp = ask("model", false)
	if e := decodeError(t, resp.Body); resp.StatusCode != 404 || e.Code != "model_not_allowed" || *e.Param != "model" {
		t.Errorf("model not allowed: %d %+v", resp.StatusCode, e)
	}
	resp = ask("conflict", false)
	if e := decodeError(t, resp.Body); resp.StatusCode != 409 || e.Code != "conflict" {
		t.Errorf("conflict: %d %+v", resp.StatusCode, e)
	}
	// After the stream started: the chunks, one error event with the partial length, [DONE]; no finish_reason.
	resp = ask("mid", true)
	evs := readEvents(t, resp.Body)
	if resp.StatusCode != 200 || len(evs) != 4 || evs[3].data != "[DONE]" {
		t.Fatalf("mid-stream error: %d %+v", resp.StatusCode, evs)
	}
	var eb errorBody
	if err := json.Unmarshal([]byte(evs[2].data), &eb); err != nil || eb.Error.Code != "model_error" ||
		*eb.Error.PartialTextLength != 7 || *eb.Error.PartialChunks != 2 || evs[2].id != "2" {
		t.Errorf("error event %+v (%v)", evs[2], err)
	}
	for _, e := range evs {
		if strings.Contains(e.data, "finish_reason\":\"") {
			t.Errorf("a failed stream carries a finish_reason: %s", e.data)
		}
	}
	// Without streaming: the error's status, with the partial length.
	resp = ask("mid", false)
	if e := decodeError(t, resp.Body); resp.StatusCode != 502 || *e.PartialTextLength != 7 {
		t.Errorf("non-stream mid error: %d %+v", resp.StatusCode, e)
	}
}

// TestSlowClientIsCut: a client that stops reading is cut once a write
// waits longer than the write timeout, and the handler ends.
func TestSlowClientIsCut(t *testing.T) {
	log := stream.NewLog("alice", "slow-00001", "h", time.Now())
	log.Accept(stream.NewAccepted(call.Accepted{Model: "mock-a"}))
	srv, logs := newDoor(t, func(gateway.Caller, gateway.Request) (*stream.Log, int, error) { return log, 0, nil },
		door.Options{WriteTimeout: 50 * time.Millisecond})
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(4096)
	}
	body := hello + `,"stream":true}`
	_, _ = io.WriteString(conn, "POST "+PathChat+" HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer good\r\nContent-Type: application/json\r\n"+
		"Content-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body)
	// 16 MiB of answer, far more than the socket buffers hold: the producer
	// never waits on the client; the door's writer must give up.
	chunk := strings.Repeat("x", 64<<10)
	for range 256 {
		log.Append(chunk)
	}
	deadline := time.Now().Add(20 * time.Second)
	for logs.FilterMessage("slow_consumer").Len() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("a client that never reads was not cut")
		}
		time.Sleep(10 * time.Millisecond) // polling with a deadline
	}
}

// TestStreamOutlivesTheReadTimeout: the server's read timeout bounds reading
// the request, not the answer that follows.
func TestStreamOutlivesTheReadTimeout(t *testing.T) {
	srv := httptest.NewUnstartedServer(New(fakeVerifier{}, fakeGateway{submit: func(c gateway.Caller, req gateway.Request) (*stream.Log, int, error) {
		log := stream.NewLog("alice", req.RequestID, "h", time.Now())
		log.Accept(stream.NewAccepted(call.Accepted{Model: "mock-a"}))
		log.Append("first")
		time.AfterFunc(600*time.Millisecond, func() { // the model keeps answering past the read timeout
			log.Append(" last")
			text, n := log.Text()
			log.Finish(stream.DoneTerminal(call.Done{Chunks: n, Text: text, Model: "mock-a"}), time.Now())
		})
		return log, 0, nil
	}}, fakeApps{}, nil, zap.NewNop(), door.Options{}))
	srv.Config.ReadTimeout = 200 * time.Millisecond
	srv.Start()
	defer srv.Close()
	evs := readEvents(t, post(t, srv.URL, hello+`,"stream":true}`, nil).Body)
	if len(evs) != 4 || evs[3].data != "[DONE]" {
		t.Fatalf("events %+v", evs)
	}
}

// TestDrainingIs503WithRetryAfter: a server that drains refuses new work
// with 503 draining and a retry hint, never a queue.
func TestDrainingIs503WithRetryAfter(t *testing.T) {
	srv, _ := newDoor(t, func(gateway.Caller, gateway.Request) (*stream.Log, int, error) {
		return nil, 0, gateway.ErrDraining
	}, door.Options{})
	resp := post(t, srv.URL, hello+"}", nil)
	e := decodeError(t, resp.Body)
	if resp.StatusCode != 503 || e.Code != "draining" || e.Type != "server_error" || resp.Header.Get("Retry-After") != "1" ||
		resp.Header.Get("x-should-retry") != "true" || resp.Header.Get("x-request-id") == "" {
		t.Errorf("draining: %d %v %+v", resp.StatusCode, resp.Header, e)
	}
}
