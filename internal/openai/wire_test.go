package openai

import (
	"errors"
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
// errors naming the OpenAI parameter (renamed from the protocol's paths),
// the lifecycle's refusals and the gateway's errors. The golden file was
// written before the HTTP doors shared one lifecycle; it must not change.
func TestRefusalWireBodies(t *testing.T) {
	gw := fakeGateway{submit: func(c gateway.Caller, req gateway.Request) (*stream.Log, int, error) {
		log := stream.NewLog("alice", req.RequestID, "h", time.Unix(1700000000, 0))
		last := req.Messages[len(req.Messages)-1]
		text := last.Text()
		if l, err, ok := doortest.GatewayRefusal(text, log); ok {
			return l, 0, err
		}
		switch text {
		case "tools":
			return nil, 0, call.FieldErrorf(call.ErrInvalid, "tools", `: model mock-a is not configured with the "tools" capability`)
		case "points":
			return nil, 0, call.FieldErrorf(call.ErrInvalid, "messages[0].content[1]", `: 5 cache_point blocks, model mock-a allows at most 4`)
		case "reasoning":
			return nil, 0, call.FieldErrorf(call.ErrInvalid, "reasoning", `: model mock-a is not configured with the "reasoning" capability`)
		case "limit":
			return nil, 0, call.FieldErrorf(call.ErrInvalid, "max_tokens", " 9000 is over this app's limit of 4096")
		case "tier":
			return nil, 0, call.FieldErrorf(call.ErrInvalid, "service_tier", ` "priority" is not allowed for this app (allowed: "default", "flex")`)
		case "tool limit":
			return nil, 0, call.FieldErrorf(call.ErrInvalid, "tools[0].input_schema", " is too deep")
		case "late":
			log.Reject(stream.ErrorTerminal(gateway.Failure(call.FieldErrorf(call.ErrInvalid, "messages[0].content", ` holds 5 cache_point blocks`))), time.Now())
		default:
			if len(last.Blocks) > 0 {
				return nil, 0, call.FieldErrorf(call.ErrInvalid, "messages[1].content[1].data", " is too big for this model")
			}
			return finished(req, "ok"), 0, nil
		}
		return log, 0, nil
	}, refuse: func(c gateway.Caller, req gateway.Request, err error) error {
		if req.Temperature != nil && *req.Temperature == 7 {
			return errors.Join(errors.New("spent"), gateway.ErrRateLimited)
		}
		return err
	}}
	srv := httptest.NewServer(New(fakeVerifier{}, gw, fakeApps{}, nil, zap.NewNop(),
		door.Options{MaxBodyBytes: 8 << 10, OriginAllowed: func(o string) bool { return o == "https://chat.example" }}))
	t.Cleanup(srv.Close)

	msgs := `"messages":[{"role":"user","content":"hi"}]`
	ask := func(text string) string { return `{"messages":[{"role":"user","content":"` + text + `"}]}` }
	askStream := func(text string) string {
		return `{"stream":true,"messages":[{"role":"user","content":"` + text + `"}]}`
	}
	tools := `"tools":[{"type":"function","function":{"name":"f"}}]`
	call := `{"role":"user","content":"q"},{"role":"assistant","tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{}"}}]}`
	calls2 := `{"role":"user","content":"q"},{"role":"assistant","content":"let me see","tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{}"}},{"id":"call_2","type":"function","function":{"name":"f","arguments":"{}"}}]}`
	image := func(url string) string {
		return `{"type":"image_url","image_url":{"url":"` + url + `"}}`
	}
	var cases []doortest.Case
	for _, c := range []struct{ name, body string }{
		{"not an object", `[1]`},
		{"syntax", `{"messages":`},
		{"unsupported parameter", `{` + msgs + `,"n":2}`},
		{"unsupported unknown parameter", `{` + msgs + `,"seed":3}`},
		{"type error", `{` + msgs + `,"temperature":"hot"}`},
		{"type error nested", `{"messages":[{"role":7,"content":"q"}]}`},
		{"stop", `{` + msgs + `,"stop":7}`},
		{"stop entries", `{` + msgs + `,"stop":["a","b","c","d","e"]}`},
		{"max tokens disagree", `{` + msgs + `,"max_tokens":5,"max_completion_tokens":6}`},
		{"stream_options", `{` + msgs + `,"stream_options":{"include_usage":true}}`},
		{"temperature (protocol)", `{` + msgs + `,"temperature":1.5}`},
		{"empty messages (protocol)", `{"messages":[]}`},
		{"role", `{"messages":[{"role":"robot","content":"q"}]}`},
		{"system message shifts the turns", `{"messages":[{"role":"system","content":"s"},{"role":"user","content":""}]}`},
		{"tool_call_id", `{"messages":[` + call + `,{"role":"tool","tool_call_id":"call_9","content":"r"}],` + tools + `}`},
		{"unanswered", `{"messages":[{"role":"system","content":"s"},` + call + `,{"role":"user","content":"r"}],` + tools + `}`},
		{"arguments", `{"messages":[{"role":"user","content":"q"},{"role":"assistant","tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"[1]"}}]},{"role":"tool","tool_call_id":"call_1","content":"r"}],` + tools + `}`},
		{"tool call id (protocol)", `{"messages":[{"role":"user","content":"q"},{"role":"assistant","tool_calls":[{"id":"call 1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"call 1","content":"r"}],` + tools + `}`},
		{"tool call name (protocol)", `{"messages":[{"role":"user","content":"q"},{"role":"assistant","content":"x","tool_calls":[{"id":"call_1","type":"function","function":{"name":"f g","arguments":"{}"}}]},{"role":"tool","tool_call_id":"call_1","content":"r"}],` + tools + `}`},
		{"merged results turn (protocol)", `{"messages":[` + calls2 + `,{"role":"tool","tool_call_id":"call_1","content":"r"},{"role":"tool","tool_call_id":"call_2","content":"s"},{"role":"user","content":[{"type":"text","text":"and"},` + image("data:image/png;base64,not*base64") + `]}],` + tools + `}`},
		{"tools must be given", `{"messages":[` + call + `,{"role":"tool","tool_call_id":"call_1","content":"r"}]}`},
		{"tool_choice none", `{"messages":[` + call + `,{"role":"tool","tool_call_id":"call_1","content":"r"}],` + tools + `,"tool_choice":"none"}`},
		{"tool_choice name (protocol)", `{` + msgs + `,` + tools + `,"tool_choice":{"type":"function","function":{"name":"g"}}}`},
		{"tool_choice needs tools (protocol)", `{` + msgs + `,"tool_choice":"auto"}`},
		{"tool_choice shape", `{` + msgs + `,` + tools + `,"tool_choice":"sometimes"}`},
		{"tool name (protocol)", `{` + msgs + `,"tools":[{"type":"function","function":{"name":"no spaces"}}]}`},
		{"tool parameters (protocol)", `{` + msgs + `,"tools":[{"type":"function","function":{"name":"f","parameters":[]}}]}`},
		{"tool names unique (protocol)", `{` + msgs + `,"tools":[{"type":"function","function":{"name":"f"}},{"type":"function","function":{"name":"f"}}]}`},
		{"strict", `{` + msgs + `,"tools":[{"type":"function","function":{"name":"f","strict":true}}]}`},
		{"image remote", `{"messages":[{"role":"user","content":[{"type":"text","text":"see"},` + image("https://example.com/cat.png") + `]}]}`},
		{"image media type", `{"messages":[{"role":"user","content":[{"type":"text","text":"see"},` + image("data:image/svg+xml;base64,AAAA") + `]}]}`},
		{"image base64 (protocol)", `{"messages":[{"role":"user","content":[{"type":"text","text":"see"},` + image("data:image/png;base64,not*base64") + `]}]}`},
		{"image detail", `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA","detail":"low"}}]}]}`},
		{"content part type", `{"messages":[{"role":"user","content":[{"type":"input_audio","input_audio":{}}]}]}`},
		{"capability (gateway)", ask("tools")},
		{"cache points (gateway)", ask("points")},
		{"reasoning (gateway)", ask("reasoning")},
		{"max_tokens limit (gateway)", ask("limit")},
		{"tool schema (gateway)", `{"messages":[{"role":"user","content":"tool limit"}],` + tools + `}`},
		{"service_tier scale", `{` + msgs + `,"service_tier":"scale"}`},
		{"service_tier value", `{` + msgs + `,"service_tier":"standard_only"}`},
		{"service_tier (gateway)", ask("tier")},
		{"image data (gateway)", `{"messages":[{"role":"system","content":"s"},{"role":"assistant","content":"a"},{"role":"user","content":[{"type":"text","text":"see"},` + image("data:image/png;base64,AAAA") + `]}]}`},
		{"conflict", ask("conflict")},
		{"busy", ask("busy")},
		{"draining", ask("draining")},
		{"quota", ask("quota")},
		{"model not allowed", ask("model")},
		{"quota streamed", askStream("quota")},
		{"late field error streamed", askStream("late")},
		{"late field error whole", ask("late")},
		{"refusal replaced by the gateway", `{` + msgs + `,"temperature":7}`},
		{"too large", `{"messages":[{"role":"user","content":"` + strings.Repeat("x", 9<<10) + `"}]}`},
	} {
		cases = append(cases, doortest.Case{Name: c.name, Method: "POST", Path: PathChat, Body: c.body})
	}
	cases = append(cases,
		doortest.Case{Name: "bad Idempotency-Key", Method: "POST", Path: PathChat, Body: ask("hi"), Header: map[string]string{"Idempotency-Key": "bad key"}},
		doortest.Case{Name: "bad Last-Event-ID", Method: "POST", Path: PathChat, Body: ask("hi"), Header: map[string]string{"Last-Event-ID": "x"}},
		doortest.Case{Name: "no credentials", Method: "POST", Path: PathChat, Body: ask("hi"), Header: map[string]string{"Authorization": ""}},
		doortest.Case{Name: "bad token", Method: "POST", Path: PathChat, Body: ask("hi"), Header: map[string]string{"Authorization": "Bearer forged"}},
		doortest.Case{Name: "bad scheme", Method: "POST", Path: PathChat, Body: ask("hi"), Header: map[string]string{"Authorization": "Basic x"}},
		doortest.Case{Name: "token in the query", Method: "POST", Path: PathChat + "?token=x", Body: ask("hi")},
		doortest.Case{Name: "origin refused", Method: "POST", Path: PathChat, Body: ask("hi"), Header: map[string]string{"Origin": "https://evil.example"}},
		doortest.Case{Name: "method", Method: "GET", Path: PathChat},
		doortest.Case{Name: "no such path", Method: "POST", Path: "/v1/chat"},
	)
	doortest.Check(t, srv.URL, map[string]string{"Authorization": "Bearer good", "Idempotency-Key": "wire-0000001"}, cases, "testdata/refusals.golden", *update)
}
