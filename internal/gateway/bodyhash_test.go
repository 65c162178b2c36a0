package gateway

import (
	"testing"

	"github.com/jetway-gateway/jetway/internal/protocol"
)

// TestBodyHashIsPinned: a request's body hash is stored in its record
// (body_hash) and compared when the same id is sent again, on this release
// or the one beside it in a rolling deploy (cmd/gateway
// TestRollingDeployAcrossReleases). Its bytes must not drift: these are
// the values the releases before the typed request computed.
func TestBodyHashIsPinned(t *testing.T) {
	topP, stop := 0.5, []string{"END"}
	for _, tc := range []struct {
		name, frame string
		door        func(*Request) // what an HTTP door sets beside the frame's fields
		want        string
	}{
		{name: "text", want: "4ebb1dc26ff3fb06aea0e67a5e1abebc",
			frame: `{"type":"request","request_id":"req-0001","model":"m","max_tokens":64,"system":"be brief","messages":[{"role":"user","content":"hi"}]}`},
		{name: "text with temperature", want: "187ad9945babdf72f5f26b7d634a1167",
			frame: `{"type":"request","request_id":"req-0001","temperature":0.2,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"},{"role":"user","content":"more"}]}`},
		{name: "image and document", want: "8f8cf1393110b8d46c55df99093f4a68",
			frame: `{"type":"request","request_id":"req-0001","messages":[{"role":"user","content":[{"type":"text","text":"what is it?"},` +
				`{"type":"image","format":"png","data":"` + pngBase64 + `"},{"type":"document","format":"txt","name":"notes","data":"aGVsbG8gd29ybGQ="},{"type":"cache_point"}]}]}`},
		{name: "tools", want: "8ec45ced5ca9fa05d28eb40b8045ae7d",
			frame: `{"type":"request","request_id":"req-0001","model":"m","tools":[{"name":"get_weather","description":"weather now","input_schema":{"type":"object","properties":{"city":{"type":"string"}}}}],"tool_choice":{"name":"get_weather"},` +
				`"messages":[{"role":"user","content":"weather in Oslo?"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"get_weather","input":{"city":"Oslo"}}]},` +
				`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","status":"success","content":[{"type":"text","text":"-3C"}]}]}]}`},
		{name: "reasoning", want: "7806e2a8d61f008f797b9c41ff8ed7af",
			frame: `{"type":"request","request_id":"req-0001","max_tokens":2048,"reasoning":{"budget_tokens":1024},"messages":[{"role":"user","content":"think"},` +
				`{"role":"assistant","content":[{"type":"reasoning","text":"hmm","signature":"sig"},{"type":"text","text":"ok"}]},{"role":"user","content":"again"}]}`},
		{name: "an HTTP door's top_p, stop and prefix cache point", want: "16af6343c470fc1bb7c26255db3e1342",
			frame: `{"type":"request","request_id":"req-0001","model":"m","system":"s","tool_choice":"any","tools":[{"name":"f","input_schema":{"type":"object"}}],"messages":[{"role":"user","content":"hi"}]}`,
			door:  func(r *Request) { r.TopP, r.Stop, r.PrefixCachePoint = &topP, stop, true }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in, err := protocol.Decode([]byte(tc.frame))
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			req := Request{Request: in.Call(), RequestID: in.RequestID, IsRequest: true}
			if tc.door != nil {
				tc.door(&req)
			}
			if got := bodyHash(req); got != tc.want {
				t.Errorf("body hash %s, want %s (a record's body_hash: it must not change across releases)", got, tc.want)
			}
		})
	}
}

// pngBase64 is a 1x1 PNG.
const pngBase64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="

// BenchmarkBodyHash is a usual request's hash: three turns of text.
func BenchmarkBodyHash(b *testing.B) {
	in, err := protocol.Decode([]byte(`{"type":"request","request_id":"req-0001","model":"mock-a","max_tokens":16,"system":"You are a helpful assistant for Contoso's flights.",` +
		`"messages":[{"role":"user","content":"Tell me about flight 7 and whether it leaves on time today."},{"role":"assistant","content":"Flight 7 leaves at 9:40 from gate B12; it is on time."},{"role":"user","content":"And the <return> flight & its gate?"}]}`))
	if err != nil {
		b.Fatal(err)
	}
	req := Request{Request: in.Call(), RequestID: in.RequestID, IsRequest: true}
	b.ReportAllocs()
	for b.Loop() {
		_ = bodyHash(req)
	}
}
