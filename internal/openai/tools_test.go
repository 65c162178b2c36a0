package openai

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jetway-gateway/jetway/internal/call"
	"github.com/jetway-gateway/jetway/internal/door"
	"github.com/jetway-gateway/jetway/internal/gateway"
	"github.com/jetway-gateway/jetway/internal/protocol"
	"github.com/jetway-gateway/jetway/internal/stream"
)

// png1 is a 1x1 PNG, base64.
const png1 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="

// toolLoop is a second turn of a tool loop: the model called two tools,
// both answered, and the user added a line.
const toolLoop = `{"model":"mock-tools","messages":[
 {"role":"system","content":"be brief"},
 {"role":"user","content":"weather and time in Paris"},
 {"role":"assistant","content":"Let me check.","tool_calls":[
   {"id":"call_1","type":"function","function":{"name":"weather","arguments":"{\"city\":\"Paris\"}"}},
   {"id":"call_2","type":"function","function":{"name":"clock","arguments":""}}]},
 {"role":"tool","tool_call_id":"call_2","content":"14:02"},
 {"role":"tool","tool_call_id":"call_1","content":[{"type":"text","text":"sunny"}]},
 {"role":"user","content":"and tomorrow?"}],
 "tools":[{"type":"function","function":{"name":"weather","description":"the weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}},
   {"type":"function","function":{"name":"clock"}}],
 "tool_choice":{"type":"function","function":{"name":"weather"}},"parallel_tool_calls":true}`

// TestToolRequestTranslation: tools, tool choice, assistant tool calls and
// tool results become the protocol's tools and blocks; consecutive tool
// messages and the user message after them make one user turn.
func TestToolRequestTranslation(t *testing.T) {
	got := make(chan gateway.Request, 1)
	srv, _ := newDoor(t, func(c gateway.Caller, req gateway.Request) (*stream.Log, int, error) {
		got <- req
		return finished(req, "ok"), 0, nil
	}, door.Options{})
	if resp := post(t, srv.URL, toolLoop, nil); resp.StatusCode != 200 {
		t.Fatalf("status %d: %+v", resp.StatusCode, decodeError(t, resp.Body))
	}
	req := <-got
	want := `{"messages":[{"role":"user","content":"weather and time in Paris"},` +
		`{"role":"assistant","content":[{"type":"text","text":"Let me check."},` +
		`{"type":"tool_use","name":"weather","id":"call_1","input":{"city":"Paris"}},{"type":"tool_use","name":"clock","id":"call_2","input":{}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"call_2","content":[{"type":"text","text":"14:02"}]},` +
		`{"type":"tool_result","tool_use_id":"call_1","content":[{"type":"text","text":"sunny"}]},{"type":"text","text":"and tomorrow?"}]}],` +
		`"tools":[{"name":"weather","description":"the weather","input_schema":{"type":"object","properties":{"city":{"type":"string"}}}},` +
		`{"name":"clock","input_schema":{"type":"object","properties":{}}}],"tool_choice":{"name":"weather"}}`
	if got, want := translated(req.Request), translated(frame(t, want)); got != want || req.System != "be brief" {
		t.Fatalf("translated\n%s\nwant\n%s", got, want)
	}

	for choice, want := range map[string]*call.ToolChoice{`"auto"`: {Mode: call.ToolChoiceAuto}, `"required"`: {Mode: call.ToolChoiceAny}, `"none"`: nil} {
		body := `{"messages":[{"role":"user","content":"q"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":` + choice + `}`
		if resp := post(t, srv.URL, body, nil); resp.StatusCode != 200 {
			t.Fatalf("tool_choice %s: %d %+v", choice, resp.StatusCode, decodeError(t, resp.Body))
		}
		req := <-got
		if !reflect.DeepEqual(req.ToolChoice, want) || (choice == `"none"`) != (len(req.Tools) == 0) {
			t.Errorf("tool_choice %s: %+v, %d tools", choice, req.ToolChoice, len(req.Tools))
		}
	}

	// An image data URL is an image block; text-only parts stay one string.
	body := `{"messages":[{"role":"user","content":[{"type":"text","text":"what is this?"},` +
		`{"type":"image_url","image_url":{"url":"data:image/png;base64,` + png1 + `","detail":"auto"}}]}]}`
	if resp := post(t, srv.URL, body, nil); resp.StatusCode != 200 {
		t.Fatalf("image: %d %+v", resp.StatusCode, decodeError(t, resp.Body))
	}
	req = <-got
	if m := req.Messages[0]; len(m.Blocks) != 2 || m.Blocks[0].Text != "what is this?" || m.Blocks[1].Type != call.BlockImage ||
		m.Blocks[1].Format != "png" || base64.StdEncoding.EncodeToString(m.Blocks[1].Data.Bytes) != png1 {
		t.Fatalf("image message %+v", req.Messages)
	}
}

// TestToolAndImageRefusalsNameTheParameter: what the door or the
// protocol refuses names the OpenAI parameter, never reaching the gateway.
func TestToolAndImageRefusalsNameTheParameter(t *testing.T) {
	srv, _ := newDoor(t, func(gateway.Caller, gateway.Request) (*stream.Log, int, error) {
		t.Error("a bad request reached the gateway")
		return nil, 0, errors.New("unreachable")
	}, door.Options{})
	tools := `"tools":[{"type":"function","function":{"name":"f"}}]`
	call := `{"role":"user","content":"q"},{"role":"assistant","tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{}"}}]}`
	image := func(url string) string {
		return `{"messages":[{"role":"user","content":[{"type":"text","text":"see"},{"type":"image_url","image_url":{"url":"` + url + `"}}]}]}`
	}
	for _, tc := range []struct{ body, code, param, msg string }{
		{image("https://example.com/cat.png"), "unsupported_parameter", "messages[0].content[1].image_url.url", "does not fetch URLs"},
		{image("data:image/svg+xml;base64,AAAA"), "invalid_request", "messages[0].content[1].image_url.url", "image/png"},
		{image("data:image/png;base64,not*base64"), "invalid_request", "messages[0].content[1].image_url.url", "not valid base64"},
		{image("ftp://x"), "invalid_request", "messages[0].content[1].image_url.url", "data URL"},
		{`{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,` + png1 + `","detail":"low"}}]}]}`,
			"unsupported_parameter", "messages[0].content[0].image_url.detail", "low"},
		{`{"messages":[` + call + `,{"role":"tool","tool_call_id":"call_9","content":"r"}],` + tools + `}`,
			"invalid_request", "messages[2].tool_call_id", "matches no unanswered tool call"},
		{`{"messages":[{"role":"system","content":"s"},` + call + `,{"role":"user","content":"r"}],` + tools + `}`,
			"invalid_request", "messages[2].tool_calls[0]", "no tool message answering it"},
		{`{"messages":[` + call + `,{"role":"tool","tool_call_id":"call_1","content":"r"},{"role":"tool","tool_call_id":"call_1","content":"again"}],` + tools + `}`,
			"invalid_request", "messages[3].tool_call_id", "unanswered"},
		{`{"messages":[{"role":"user","content":"q"},{"role":"assistant","tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"[1]"}}]},` +
			`{"role":"tool","tool_call_id":"call_1","content":"r"}],` + tools + `}`, "invalid_request", "messages[1].tool_calls[0].function.arguments", "JSON object"},
		{`{"messages":[{"role":"user","content":"q"},{"role":"assistant","tool_calls":[{"id":"call 1","type":"function","function":{"name":"f","arguments":"{}"}}]},` +
			`{"role":"tool","tool_call_id":"call 1","content":"r"}],` + tools + `}`, "invalid_request", "messages[1].tool_calls[0].id", "[A-Za-z0-9_-]"},
		{`{"messages":[` + call + `,{"role":"tool","tool_call_id":"call_1","content":"r"}]}`, "invalid_request", "tools", "tools must be given"},
		{`{"messages":[` + call + `,{"role":"tool","tool_call_id":"call_1","content":"r"}],` + tools + `,"tool_choice":"none"}`,
			"unsupported_parameter", "tool_choice", `"none"`},
		{`{"messages":[{"role":"user","content":"q"}],` + tools + `,"tool_choice":{"type":"function","function":{"name":"g"}}}`,
			"invalid_request", "tool_choice.function.name", "one of the tools"},
		{`{"messages":[{"role":"user","content":"q"}],"tool_choice":"auto"}`, "invalid_request", "tool_choice", "needs tools"},
		{`{"messages":[{"role":"user","content":"q"}],` + tools + `,"tool_choice":"sometimes"}`, "invalid_request", "tool_choice", "required"},
		{`{"messages":[{"role":"user","content":"q"}],"tools":[{"type":"function","function":{"name":"no spaces"}}]}`,
			"invalid_request", "tools[0].function.name", "[A-Za-z0-9_-]"},
		{`{"messages":[{"role":"user","content":"q"}],"tools":[{"type":"function","function":{"name":"f","parameters":[]}}]}`,
			"invalid_request", "tools[0].function.parameters", "JSON object"},
		{`{"messages":[{"role":"user","content":"q"}],"tools":[{"type":"function","function":{"name":"f","strict":true}}]}`,
			"unsupported_parameter", "tools[0].function.strict", "strict"},
		{`{"messages":[{"role":"user","content":"q"}],"tools":[{"type":"custom","custom":{"name":"f"}}]}`,
			"unsupported_parameter", "tools[0].type", "custom"},
	} {
		resp := post(t, srv.URL, tc.body, nil)
		e := decodeError(t, resp.Body)
		if resp.StatusCode != 400 || e.Code != tc.code || e.Param == nil || *e.Param != tc.param || !strings.Contains(e.Message, tc.msg) {
			p := "<nil>"
			if e.Param != nil {
				p = *e.Param
			}
			t.Errorf("%s:\n  status %d, code %s, param %s, message %q", tc.body, resp.StatusCode, e.Code, p, e.Message)
		}
	}
}

// toolAnswer is the log of an answer in block mode: a reasoning piece and
// its signature, text, then a tool call whose input streams in fragments.
func toolAnswer(req gateway.Request) *stream.Log {
	pieces := []string{
		call.Encode(call.Piece{Kind: protocol.KindReasoning, Reasoning: "thinking"}),
		call.Encode(call.Piece{Kind: protocol.KindReasoning, Signature: "sig"}),
		call.Encode(call.Piece{Block: 1, Text: "Let me "}),
		call.Encode(call.Piece{Block: 1, Text: "look."}),
		call.Encode(call.Piece{Block: 2, Kind: protocol.KindToolUse, ID: "tooluse_1", Name: "lookup"}),
		call.Encode(call.Piece{Block: 2, Kind: protocol.KindToolUse, Input: `{"query":`}),
		call.Encode(call.Piece{Block: 2, Kind: protocol.KindToolUse, Input: `"Paris"}`}),
		call.Encode(call.Piece{Block: 3, Kind: protocol.KindToolUse, ID: "tooluse_2", Name: "clock"}),
	}
	log := stream.NewLog("alice", req.RequestID, "h", time.Now())
	log.Accept(stream.NewAccepted(call.Accepted{RequestID: req.RequestID, Model: "mock-tools"}))
	for _, p := range pieces {
		log.Append(p)
	}
	a := call.Assemble(pieces)
	log.Finish(stream.DoneTerminal(call.Done{RequestID: req.RequestID, Chunks: len(pieces), Text: a.Text,
		Model: "mock-tools", Usage: protocol.Usage{InputTokens: 9, OutputTokens: 8}, StopReason: protocol.StopToolUse, Blocks: a.Blocks}), time.Now())
	return log
}

// TestToolCallsStreamAndResume: tool calls stream as delta.tool_calls
// (the start with id, type and name, then arguments fragments), reasoning
// as empty deltas, one event per seq; finish_reason is tool_calls; a
// stream resumed inside a tool call keeps its index; without streaming,
// message.tool_calls holds each call with its arguments string.
func TestToolCallsStreamAndResume(t *testing.T) {
	logs := map[string]*stream.Log{}
	srv, _ := newDoor(t, func(c gateway.Caller, req gateway.Request) (*stream.Log, int, error) {
		if l, ok := logs[req.RequestID]; ok {
			return l, req.AfterSeq, nil
		}
		logs[req.RequestID] = toolAnswer(req)
		return logs[req.RequestID], 0, nil
	}, door.Options{})
	body := `{"model":"mock-tools","messages":[{"role":"user","content":"Paris"}],"tools":[{"type":"function","function":{"name":"lookup"}},` +
		`{"type":"function","function":{"name":"clock"}}],"stream":true}`
	hdr := map[string]string{"Idempotency-Key": "tools-0001"}
	evs := readEvents(t, post(t, srv.URL, body, hdr).Body)
	deltas := []string{
		`{"role":"assistant"}`,
		`{}`,
		`{"content":"Let me "}`,
		`{"content":"look."}`,
		`{"tool_calls":[{"index":0,"id":"tooluse_1","type":"function","function":{"name":"lookup","arguments":""}}]}`,
		`{"tool_calls":[{"index":0,"function":{"arguments":"{\"query\":"}}]}`,
		`{"tool_calls":[{"index":0,"function":{"arguments":"\"Paris\"}"}}]}`,
		`{"tool_calls":[{"index":1,"id":"tooluse_2","type":"function","function":{"name":"clock","arguments":""}}]}`,
	}
	if len(evs) != len(deltas)+2 {
		t.Fatalf("%d events: %+v", len(evs), evs)
	}
	delta := func(e event) string {
		var c struct {
			Choices []struct {
				Delta        json.RawMessage
				FinishReason *string `json:"finish_reason"`
			}
		}
		if err := json.Unmarshal([]byte(e.data), &c); err != nil || len(c.Choices) != 1 {
			t.Fatalf("event %+v: %v", e, err)
		}
		return string(c.Choices[0].Delta)
	}
	for i, want := range deltas {
		if got := delta(evs[i]); got != want || evs[i].id != string(rune('1'+i)) {
			t.Errorf("event %d: id %s delta %s, want %s", i, evs[i].id, got, want)
		}
	}
	if !strings.Contains(evs[8].data, `"delta":{},"finish_reason":"tool_calls"`) || evs[9].data != "[DONE]" {
		t.Errorf("finish %+v", evs[8:])
	}

	// Resumed after seq 6 (inside the first call's arguments): the rest, same indices.
	hdr["Last-Event-ID"] = "6"
	evs = readEvents(t, post(t, srv.URL, body, hdr).Body)
	if len(evs) != 4 || evs[0].id != "7" || delta(evs[0]) != deltas[6] || delta(evs[1]) != deltas[7] {
		t.Errorf("resumed %+v", evs)
	}

	// The whole answer in one body.
	delete(hdr, "Last-Event-ID")
	resp := post(t, srv.URL, strings.Replace(body, `,"stream":true`, "", 1), hdr)
	var whole struct {
		Choices []struct {
			Message      json.RawMessage
			FinishReason string `json:"finish_reason"`
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&whole); err != nil {
		t.Fatal(err)
	}
	want := `{"role":"assistant","content":"Let me look.","refusal":null,"tool_calls":[` +
		`{"id":"tooluse_1","type":"function","function":{"name":"lookup","arguments":"{\"query\":\"Paris\"}"}},` +
		`{"id":"tooluse_2","type":"function","function":{"name":"clock","arguments":"{}"}}]}`
	if string(whole.Choices[0].Message) != want || whole.Choices[0].FinishReason != "tool_calls" {
		t.Errorf("message %s (%s)\nwant    %s", whole.Choices[0].Message, whole.Choices[0].FinishReason, want)
	}
}

// TestCapabilityRefusalNamesTools: the gateway's refusal of tools for a
// model without the capability names the parameter.
func TestCapabilityRefusalNamesTools(t *testing.T) {
	srv, _ := newDoor(t, func(gateway.Caller, gateway.Request) (*stream.Log, int, error) {
		return nil, 0, call.FieldErrorf(call.ErrInvalid, "tools", `: model mock-a is not configured with the "tools" capability`)
	}, door.Options{})
	resp := post(t, srv.URL, `{"messages":[{"role":"user","content":"q"}],"tools":[{"type":"function","function":{"name":"f"}}]}`, nil)
	if e := decodeError(t, resp.Body); resp.StatusCode != 400 || e.Code != "invalid_request" || e.Param == nil || *e.Param != "tools" {
		t.Errorf("capability refusal: %d %+v", resp.StatusCode, e)
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
