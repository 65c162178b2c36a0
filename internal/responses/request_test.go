package responses

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/jetway-gateway/jetway/internal/protocol"
)

// translate reads a body's items as prepare does, without a chain.
func translateBody(t *testing.T, keys *Keys, data string) (*translation, error) {
	t.Helper()
	b, err := decodeBody([]byte(data), false)
	if err != nil {
		return nil, err
	}
	list, err := items(b.Input)
	if err != nil {
		return nil, err
	}
	tr := &translation{keys: keys}
	return tr, tr.translate(list, func(i int) string { return "input[" + strconv.Itoa(i) + "]" })
}

// TestTranslation: items become the protocol's turns as Bedrock wants
// them: system and developer messages the system prompt, calls in the
// assistant turn and their outputs in the user turn after it, reasoning
// passed back a reasoning block again.
func TestTranslation(t *testing.T) {
	keys, _ := NewKeys(bytes.Repeat([]byte{1}, 32))
	sealedReasoning := keys.seal("thought", "sig")
	body := fmt.Sprintf(`{"model":"m","input":[
	  {"role":"developer","content":"be brief"},
	  {"type":"message","role":"user","content":[{"type":"input_text","text":"hi"},{"type":"input_image","image_url":"data:image/png;base64,iVBORw0KGgo="}]},
	  {"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":%q},
	  {"type":"reasoning","id":"rs_2","summary":[],"encrypted_content":"jw1.forged"},
	  {"type":"function_call","call_id":"c1","name":"f","arguments":"{\"a\":1}"},
	  {"type":"function_call","call_id":"c2","name":"f","arguments":""},
	  {"type":"function_call_output","call_id":"c1","output":"one"},
	  {"type":"function_call_output","call_id":"c2","output":[{"type":"input_text","text":"two"}]}
	]}`, sealedReasoning)
	tr, err := translateBody(t, keys, body)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(tr.system, "|") != "be brief" || len(tr.turns) != 3 || tr.dropped != 1 {
		t.Fatalf("system %q, turns %d, dropped %d", tr.system, len(tr.turns), tr.dropped)
	}
	user, asst, results := tr.turns[0], tr.turns[1], tr.turns[2]
	if user.Role != "user" || len(user.Blocks) != 2 || user.Blocks[1].Type != protocol.BlockImage || user.Blocks[1].Format != "png" {
		t.Errorf("user turn %+v", user)
	}
	if asst.Role != "assistant" || len(asst.Blocks) != 3 || asst.Blocks[0].Type != protocol.BlockReasoning ||
		asst.Blocks[0].Text != "thought" || asst.Blocks[0].Signature != "sig" || string(asst.Blocks[2].Input) != "{}" {
		t.Errorf("assistant turn %+v", asst)
	}
	if results.Role != "user" || len(results.Blocks) != 2 || results.Blocks[1].ToolUseID != "c2" || results.Blocks[1].Content[0].Text != "two" {
		t.Errorf("results turn %+v", results)
	}
	// A string input is one user message.
	tr, err = translateBody(t, keys, `{"input":"just text"}`)
	if err != nil || len(tr.turns) != 1 || tr.turns[0].Blocks[0].Text != "just text" {
		t.Errorf("string input: %v %+v", err, tr)
	}
}

// TestBadInput: every bad body is a 400 naming its parameter.
func TestBadInput(t *testing.T) {
	many := make([]string, MaxInputItems+1)
	for i := range many {
		many[i] = `{"role":"user","content":"x"}`
	}
	cases := []struct{ body, param, says string }{
		{`[]`, "", "not a JSON object"},
		{`{"input":"x","frobnicate":1}`, "frobnicate", "not a parameter"},
		{`{"input":"x","conversation":"c"}`, "conversation", "previous_response_id"},
		{`{"input":"x","max_output_tokens":0}`, "max_output_tokens", "at least 1"},
		{`{"input":"x","top_p":3}`, "top_p", "between 0 and 1"},
		{`{"input":"x","previous_response_id":"chatcmpl-1"}`, "previous_response_id", "not a response id"},
		{`{"input":"x","text":{"format":{"type":"json_schema"}}}`, "text.format", "structured outputs"},
		{`{"input":"x","include":["file_search_call.results"]}`, "include[0]", "not served"},
		{`{"input":"x","background":true,"store":false}`, "background", "must be stored"},
		{`{"input":7}`, "input", "string or an array"},
		{`{"input":[` + strings.Join(many, ",") + `]}`, "input", "at most 4096"},
		{`{"input":[{"type":"computer_call"}]}`, "input[0].type", "computer_call"},
		{`{"input":[{"content":"x"}]}`, "input[0].type", "required"},
		{`{"input":[{"role":"robot","content":"x"}]}`, "input[0].role", "must be"},
		{`{"input":[{"role":"user","content":[{"type":"input_image","image_url":"https://example.com/a.png"}]}]}`, "input[0].content[0].image_url", "does not fetch"},
		{`{"input":[{"role":"user","content":[{"type":"input_image","image_url":"data:image/bmp;base64,AAAA"}]}]}`, "input[0].content[0].image_url", "image/png"},
		{`{"input":[{"role":"user","content":[{"type":"input_file","file_id":"file-1"}]}]}`, "input[0].content[0].file_id", "data URL"},
		{`{"input":[{"type":"function_call_output","call_id":"nope","output":"x"}]}`, "input[0].call_id", "answers no function_call"},
		{`{"input":[{"type":"function_call","call_id":"c","name":"f","arguments":"[1]"}]}`, "input[0].arguments", "JSON object"},
		{`{"input":[{"type":"item_reference","id":"x"}]}`, "input[0].type", "item_reference"},
	}
	for _, c := range cases {
		_, err := translateBody(t, nil, c.body)
		var re *requestError
		if !errors.As(err, &re) {
			t.Errorf("%.60s: err %v", c.body, err)
			continue
		}
		if re.param != c.param || !strings.Contains(re.msg, c.says) {
			t.Errorf("%.60s: param %q msg %q; want %q ~ %q", c.body, re.param, re.msg, c.param, c.says)
		}
	}
}

// TestToolsPolicy: tools the gateway cannot run are left out (and named),
// or refused under the refuse policy; tool_choice maps to the core's.
func TestToolsPolicy(t *testing.T) {
	list := []json.RawMessage{json.RawMessage(`{"type":"function","name":"f","parameters":{"type":"object"}}`),
		json.RawMessage(`{"type":"web_search"}`), json.RawMessage(`{"type":"namespace","name":"mcp"}`)}
	var in protocol.Inbound
	dropped, err := tools(&in, list, json.RawMessage(`"required"`), false, &names{})
	if err != nil || len(in.Tools) != 1 || strings.Join(dropped, ",") != "web_search,namespace:mcp" || in.ToolChoice.Mode != protocol.ToolChoiceAny {
		t.Errorf("drop: %v %v %+v", err, dropped, in)
	}
	if _, err := tools(&protocol.Inbound{}, list, nil, true, &names{}); err == nil || !strings.Contains(err.Error(), "web_search") {
		t.Errorf("refuse: %v", err)
	}
	in = protocol.Inbound{}
	if _, err := tools(&in, list[:1], json.RawMessage(`{"type":"function","name":"f"}`), false, &names{}); err != nil ||
		in.ToolChoice.Mode != protocol.ToolChoiceTool || in.ToolChoice.Name != "f" {
		t.Errorf("named choice: %v %+v", err, in.ToolChoice)
	}
}
