package anthropic

import (
	"flag"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/jetway-gateway/jetway/internal/call"
	"github.com/jetway-gateway/jetway/internal/door"
	"github.com/jetway-gateway/jetway/internal/door/doortest"
	"github.com/jetway-gateway/jetway/internal/gateway"
	"github.com/jetway-gateway/jetway/internal/stream"
)

var update = flag.Bool("update", false, "rewrite testdata/refusals.golden from the door's answers")

// TestRefusalWireBodies pins the bytes of the door's refusals: validation
// errors named in Anthropic's fields (renamed from the protocol's paths),
// the lifecycle's refusals and the gateway's errors. The golden file was
// written before the HTTP doors shared one lifecycle; it must not change.
func TestRefusalWireBodies(t *testing.T) {
	gw := fakeGateway{submit: func(c gateway.Caller, req gateway.Request) (*stream.Log, int, error) {
		log := stream.NewLog("alice", req.RequestID, "h", time.Unix(1700000000, 0))
		text := req.Messages[len(req.Messages)-1].Text()
		if l, err, ok := doortest.GatewayRefusal(text, log); ok {
			return l, 0, err
		}
		switch text {
		case "tools":
			return nil, 0, call.FieldErrorf(call.ErrInvalid, "tools", `: model mock-a is not configured with the "tools" capability`)
		case "points":
			return nil, 0, call.FieldErrorf(call.ErrInvalid, "messages[0].content[1]", `: 5 cache_point blocks, model mock-a allows at most 4`)
		case "reasoning":
			return nil, 0, call.FieldErrorf(call.ErrInvalid, "reasoning.budget_tokens", " 4000 must be less than this app's max_tokens limit of 2000")
		case "limit":
			return nil, 0, call.FieldErrorf(call.ErrInvalid, "max_tokens", " 9000 is over this app's limit of 4096")
		case "tier":
			return nil, 0, call.FieldErrorf(call.ErrInvalid, "service_tier", ` "priority" is not allowed for this app (allowed: "default", "flex")`)
		case "unnamed":
			return nil, 0, call.FieldErrorf(call.ErrInvalid, "messages[0].content[0].bogus", " is wrong")
		case "late":
			log.Reject(stream.ErrorTerminal(gateway.Failure(call.FieldErrorf(call.ErrInvalid, "messages[0].content[1]", `: 5 cache_point blocks, model mock-a allows at most 4`))), time.Now())
		default:
			return finished(req, "end_turn", "ok"), 0, nil
		}
		return log, 0, nil
	}}
	srv := httptest.NewServer(New(fakeVerifier{}, gw, fakeApps{}, nil, zap.NewNop(),
		door.Options{MaxBodyBytes: 8 << 10, OriginAllowed: func(o string) bool { return o == "https://chat.example" }}))
	t.Cleanup(srv.Close)

	mt := `"max_tokens":100,`
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	ask := func(text string) string { return `{` + mt + `"messages":[{"role":"user","content":"` + text + `"}]}` }
	askStream := func(text string) string {
		return `{` + mt + `"stream":true,"messages":[{"role":"user","content":"` + text + `"}]}`
	}
	tools := `"tools":[{"name":"f","input_schema":{"type":"object"}}]`
	call := `{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{}}]}`
	var cases []doortest.Case
	post := func(name, body string) {
		cases = append(cases, doortest.Case{Name: name, Method: "POST", Path: PathMessages, Body: body})
	}
	for _, c := range []struct{ name, body string }{
		{"not an object", `[1]`},
		{"syntax", `{"max_tokens":`},
		{"unknown parameter", `{"max_tokens":1,` + msgs + `,"top_k":5}`},
		{"service_tier value", `{"max_tokens":1,` + msgs + `,"service_tier":"batch"}`},
		{"type error", `{"max_tokens":"many",` + msgs + `}`},
		{"type error nested", `{` + mt + `"messages":[{"role":"user","content":"q","x":1}],"metadata":{"user_id":1}}`},
		{"max_tokens required", `{` + msgs + `}`},
		{"temperature (protocol)", `{` + mt + msgs + `,"temperature":1.5}`},
		{"top_p", `{` + mt + msgs + `,"top_p":2}`},
		{"stop_sequences", `{` + mt + msgs + `,"stop_sequences":[""]}`},
		{"empty string content (protocol)", `{` + mt + `"messages":[{"role":"user","content":""}]}`},
		{"system message shifts the turns", `{` + mt + `"messages":[{"role":"system","content":"s"},{"role":"user","content":""}]}`},
		{"merged turn", `{` + mt + `"messages":[{"role":"assistant","content":"a"},{"role":"user","content":"q"},{"role":"user","content":[{"type":"text","text":""}]}]}`},
		{"merged turn after a string", `{` + mt + `"messages":[{"role":"user","content":""},{"role":"user","content":"q"}]}`},
		{"image base64", `{` + mt + `"messages":[{"role":"user","content":[{"type":"text","text":"see"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"not*base64"}}]}]}`},
		{"document name", `{` + mt + `"messages":[{"role":"user","content":[{"type":"document","source":{"type":"text","media_type":"text/plain","data":"x"},"title":"` + strings.Repeat("a", 300) + `"}]}]}`},
		{"tool_use id", `{` + mt + `"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"tool_use","id":"t 1","name":"f","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t 1","content":"r"}]}],` + tools + `}`},
		{"tool_result id", `{` + mt + `"messages":[` + call + `,{"role":"user","content":[{"type":"tool_result","tool_use_id":"t2","content":"r"}]}],` + tools + `}`},
		{"tool_result inner text", `{` + mt + `"messages":[` + call + `,{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":""}]}]}],` + tools + `}`},
		{"tools required (protocol)", `{` + mt + `"messages":[` + call + `,{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"r"}]}]}`},
		{"tool name", `{` + mt + msgs + `,"tools":[{"name":"no spaces","input_schema":{"type":"object"}}]}`},
		{"tool_choice name", `{` + mt + msgs + `,` + tools + `,"tool_choice":{"type":"tool","name":"g"}}`},
		{"thinking budget (protocol)", `{` + mt + msgs + `,"thinking":{"type":"enabled","budget_tokens":100}}`},
		{"thinking in a user turn", `{` + mt + `"messages":[{"role":"user","content":[{"type":"thinking","thinking":"x","signature":"s"}]}]}`},
		{"cache_control", `{` + mt + msgs + `,"cache_control":{"type":"forever"}}`},
		{"capability (gateway)", ask("tools")},
		{"cache points (gateway)", `{` + mt + `"messages":[{"role":"user","content":[{"type":"text","text":"points","cache_control":{"type":"ephemeral"}}]}]}`},
		{"reasoning budget (gateway)", ask("reasoning")},
		{"max_tokens limit (gateway)", ask("limit")},
		{"unknown field (gateway)", ask("unnamed")},
		{"service_tier (gateway)", ask("tier")},
		{"conflict", ask("conflict")},
		{"busy", ask("busy")},
		{"draining", ask("draining")},
		{"quota", ask("quota")},
		{"model not allowed", ask("model")},
		{"quota streamed", askStream("quota")},
		{"late field error streamed", askStream("late")},
		{"late field error whole", ask("late")},
		{"too large", `{"max_tokens":1,"messages":[{"role":"user","content":"` + strings.Repeat("x", 9<<10) + `"}]}`},
	} {
		post(c.name, c.body)
	}
	cases = append(cases,
		doortest.Case{Name: "bad Idempotency-Key", Method: "POST", Path: PathMessages, Body: ask("hi"), Header: map[string]string{"Idempotency-Key": "bad key"}},
		doortest.Case{Name: "bad Last-Event-ID", Method: "POST", Path: PathMessages, Body: ask("hi"), Header: map[string]string{"Last-Event-ID": "-1"}},
		doortest.Case{Name: "no credentials", Method: "POST", Path: PathMessages, Body: ask("hi"), Header: map[string]string{"x-api-key": ""}},
		doortest.Case{Name: "bad token", Method: "POST", Path: PathMessages, Body: ask("hi"), Header: map[string]string{"x-api-key": "forged"}},
		doortest.Case{Name: "token in the query", Method: "POST", Path: PathMessages + "?api_key=x", Body: ask("hi")},
		doortest.Case{Name: "origin refused", Method: "POST", Path: PathMessages, Body: ask("hi"), Header: map[string]string{"Origin": "https://evil.example"}},
		doortest.Case{Name: "method", Method: "GET", Path: PathMessages},
		doortest.Case{Name: "no such path", Method: "POST", Path: "/v1/messages/x"},
		doortest.Case{Name: "count_tokens bad body", Method: "POST", Path: PathCountTokens, Body: `{"messages":[]}`},
		doortest.Case{Name: "count_tokens model", Method: "POST", Path: PathCountTokens, Body: `{"model":"gpt","messages":[{"role":"user","content":"q"}]}`},
		doortest.Case{Name: "models one unknown", Method: "GET", Path: PathModels + "/gpt"},
	)
	doortest.Check(t, srv.URL, map[string]string{"x-api-key": "good", VersionHeader: "2023-06-01", "Idempotency-Key": "wire-0000001"}, cases, "testdata/refusals.golden", *update)
}
