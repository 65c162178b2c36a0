package aisdk

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/jetway-gateway/jetway/internal/call"
)

func ui(t *testing.T, s string) []uiMessage {
	t.Helper()
	var m []uiMessage
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// A client tool's round trip: the assistant message's call and output
// become a tool_use turn, then a user turn of its result; the reasoning
// goes back with its signature; text-only turns are plain.
func TestTranslateToolRoundTrip(t *testing.T) {
	msgs := ui(t, `[
	 {"id":"u1","role":"user","parts":[{"type":"text","text":"What time is it?"}]},
	 {"id":"a1","role":"assistant","parts":[{"type":"step-start"},
	   {"type":"reasoning","text":"use the tool","providerMetadata":{"jetway":{"signature":"c2ln"}}},
	   {"type":"tool-get_time","toolCallId":"toolu_1","state":"output-available","input":{"tz":"UTC"},"output":"12:00"}]}
	]`)
	r, err := translate("req12345678", msgs, json.RawMessage(`{"system":"be brief","max_tokens":100,"unknown":1,
	  "tools":[{"name":"get_time","description":"the time","input_schema":{"type":"object"}}]}`), false)
	if err != nil {
		t.Fatal(err)
	}
	if r.System != "be brief" || r.MaxTokens != 100 || len(r.Tools) != 1 {
		t.Fatalf("options: %+v", r.Options)
	}
	if len(r.Messages) != 3 {
		t.Fatalf("%d turns: %+v", len(r.Messages), r.Messages)
	}
	if m := r.Messages[0]; m.Role != "user" || m.Content != "What time is it?" {
		t.Fatalf("turn 0: %+v", m)
	}
	a := r.Messages[1]
	if a.Role != "assistant" || len(a.Blocks) != 2 || a.Blocks[0].Type != call.BlockReasoning || a.Blocks[0].Signature != "c2ln" ||
		a.Blocks[1].Type != call.BlockToolUse || a.Blocks[1].ID != "toolu_1" || string(a.Blocks[1].Input) != `{"tz":"UTC"}` {
		t.Fatalf("turn 1: %+v", a)
	}
	u := r.Messages[2]
	if u.Role != "user" || len(u.Blocks) != 1 || u.Blocks[0].Type != call.BlockToolResult || u.Blocks[0].ToolUseID != "toolu_1" ||
		u.Blocks[0].Content[0].Text != "12:00" {
		t.Fatalf("turn 2: %+v", u)
	}
}

// Regenerate drops the assistant message being replaced.
func TestTranslateRegenerate(t *testing.T) {
	msgs := ui(t, `[{"id":"u1","role":"user","parts":[{"type":"text","text":"hi"}]},
	 {"id":"a1","role":"assistant","parts":[{"type":"text","text":"old answer"}]}]`)
	r, err := translate("req12345678", msgs, nil, true)
	if err != nil || len(r.Messages) != 1 || r.Messages[0].Content != "hi" {
		t.Fatalf("%v %+v", err, r.Messages)
	}
}

// Files: a data: URL image is decoded and bounded as on every door; any
// other URL is refused, never fetched; a part count past the bound is
// refused.
func TestTranslateFiles(t *testing.T) {
	png := "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
	msgs := ui(t, `[{"id":"u1","role":"user","parts":[{"type":"text","text":"see"},{"type":"file","mediaType":"image/png","url":"data:image/png;base64,`+png+`"}]}]`)
	r, err := translate("req12345678", msgs, nil, false)
	raw, _ := base64.StdEncoding.DecodeString(png)
	if err != nil || len(r.Messages[0].Blocks) != 2 || r.Messages[0].Blocks[1].Type != call.BlockImage ||
		string(r.Messages[0].Blocks[1].Data.Bytes) != string(raw) {
		t.Fatalf("%v %+v", err, r.Messages)
	}
	for name, parts := range map[string]string{
		"http url":    `[{"type":"file","mediaType":"image/png","url":"http://example.com/a.png"}]`,
		"not base64":  `[{"type":"file","mediaType":"image/png","url":"data:image/png,abc"}]`,
		"media type":  `[{"type":"file","mediaType":"application/zip","url":"data:application/zip;base64,AAAA"}]`,
		"10000 parts": "[" + strings.TrimSuffix(strings.Repeat(`{"type":"text","text":"x"},`, 10000), ",") + "]",
	} {
		_, err := translate("req12345678", ui(t, `[{"id":"u1","role":"user","parts":`+parts+`}]`), nil, false)
		if !errors.Is(err, call.ErrInvalid) {
			t.Errorf("%s: %v, want invalid", name, err)
		}
	}
}

// Frames are checked as the transport's own schema does.
func TestParseSchema(t *testing.T) {
	good := `{"type":"send","requestId":"r1","id":"chat-0001","trigger":"submit-message","messages":[{"id":"u","role":"user","parts":[{"type":"text","text":"hi"}]}],"headers":{},"body":{}}`
	if _, err := parse([]byte(good)); err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]string{
		"not json":        `{"type":`,
		"unknown type":    `{"type":"ping","requestId":"r1"}`,
		"requestId":       `{"type":"abort","requestId":7}`,
		"headers":         strings.Replace(good, `"headers":{}`, `"headers":{"a":1}`, 1),
		"body":            strings.Replace(good, `"body":{}`, `"body":[]`, 1),
		"trigger":         strings.Replace(good, `submit-message`, `submit`, 1),
		"messages":        strings.Replace(good, `"messages":[`, `"messages":[7,`, 1),
		"role":            strings.Replace(good, `"role":"user"`, `"role":"tool"`, 1),
		"no parts":        strings.Replace(good, `"parts":[{"type":"text","text":"hi"}]`, `"parts":[]`, 1),
		"resume sequence": `{"type":"resume","requestId":"r1","id":"chat-0001","headers":{},"body":{},"lastSequence":-1}`,
	} {
		if _, err := parse([]byte(f)); !errors.Is(err, errSchema) {
			t.Errorf("%s: %v, want errSchema", name, err)
		}
	}
}
