package protocol

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/jetway-gateway/jetway/internal/call"
)

func TestAppendChunkMatchesEncodingJSON(t *testing.T) {
	texts := []string{"", "hello", " lorem", "quote\" back\\slash", "<tag>&amp;", "tab\tnl\ncr\r", "\x00\x01\x1f",
		"héllo wörld", "emoji 🚀", "bad \xff utf8", "line\u2028sep\u2029", strings.Repeat("x", 1000)}
	for _, text := range texts {
		got := AppendChunk(nil, "req_12345678", 42, call.Decode(call.TextPiece(text)))
		want, err := json.Marshal(Chunk{Type: TypeChunk, RequestID: "req_12345678", Seq: 42, Text: text})
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("AppendChunk(%q)\n got %s\nwant %s", text, got, want)
		}
	}
}

func TestDecode(t *testing.T) {
	cases := []struct {
		name, frame, wantErr string
	}{
		{"request", `{"type":"request","request_id":"abcdefgh","messages":[{"role":"user","content":"hi"}]}`, ""},
		{"resume", `{"type":"resume","request_id":"abcdefgh","after_seq":3}`, ""},
		{"cancel", `{"type":"cancel","request_id":"abcdefgh"}`, ""},
		{"ping", `{"type":"ping","t":123}`, ""},
		{"auth", `{"type":"auth","token":"x.y.z"}`, ""},
		{"not json", `hello`, "not a valid JSON object"},
		{"array", `[1,2]`, "not a valid JSON object"},
		{"trailing", `{"type":"ping"} {}`, "data after"},
		{"no type", `{"request_id":"abcdefgh"}`, "no type"},
		{"unknown type", `{"type":"subscribe"}`, "unknown frame type"},
		{"short id", `{"type":"request","request_id":"abc","messages":[{"role":"user","content":"hi"}]}`, "request_id must be"},
		{"bad id chars", `{"type":"resume","request_id":"abc/defgh"}`, "request_id must be"},
		{"no messages", `{"type":"request","request_id":"abcdefgh","messages":[]}`, "messages must not be empty"},
		{"bad role", `{"type":"request","request_id":"abcdefgh","messages":[{"role":"system","content":"hi"}]}`, "role"},
		{"empty content", `{"type":"request","request_id":"abcdefgh","messages":[{"role":"user","content":""}]}`, "content"},
		{"last not user", `{"type":"request","request_id":"abcdefgh","messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"}]}`, "last message"},
		{"neg max", `{"type":"request","request_id":"abcdefgh","max_tokens":-1,"messages":[{"role":"user","content":"a"}]}`, "max_tokens"},
		{"temp", `{"type":"request","request_id":"abcdefgh","temperature":3,"messages":[{"role":"user","content":"a"}]}`, "temperature"},
		{"wrong type field", `{"type":"request","request_id":"abcdefgh","messages":"hi"}`, "wrong type"},
		{"neg after", `{"type":"resume","request_id":"abcdefgh","after_seq":-1}`, "after_seq"},
		{"content of the wrong type", `{"type":"request","request_id":"abcdefgh","messages":[{"role":"user","content":5}]}`, `field "messages.0.content" has the wrong type`},
		{"block field of the wrong type", `{"type":"request","request_id":"abcdefgh","messages":[{"role":"user","content":[{"type":"text","text":7}]}]}`, `field "messages.0.content.0.text" has the wrong type`},
		{"truncated", `{"type":"ping",`, "syntax error at byte 15"},
		// As encoding/json: keys in any case; the last of a repeated key wins.
		{"keys in any case", `{"Type":"request","REQUEST_ID":"abcdefgh","Messages":[{"Role":"user","CONTENT":"x"}]}`, ""},
		{"repeated keys", `{"type":"ping","type":"request","request_id":"abcdefgh","messages":[{"role":"user","content":"","content":"b"}]}`, ""},
		{"auth no token", `{"type":"auth"}`, "token"},
		{"service tier", `{"type":"request","request_id":"abcdefgh","service_tier":"priority","messages":[{"role":"user","content":"a"}]}`, ""},
		{"service tier flex", `{"type":"request","request_id":"abcdefgh","service_tier":"flex","messages":[{"role":"user","content":"a"}]}`, ""},
		{"service tier unknown", `{"type":"request","request_id":"abcdefgh","service_tier":"scale","messages":[{"role":"user","content":"a"}]}`, `service_tier must be "default", "priority" or "flex" (absent: the app's tier), got "scale"`},
		{"service tier auto is no jetway.v1 value", `{"type":"request","request_id":"abcdefgh","service_tier":"auto","messages":[{"role":"user","content":"a"}]}`, "service_tier must be"},
		{"service tier of the wrong type", `{"type":"request","request_id":"abcdefgh","service_tier":1,"messages":[{"role":"user","content":"a"}]}`, `field "service_tier" has the wrong type`},
		{"zero max is the default", `{"type":"request","request_id":"abcdefgh","max_tokens":0,"messages":[{"role":"user","content":"a"}]}`, ""},
		{"ping string t", `{"type":"ping","t":"abc"}`, ""},
		{"ping null t", `{"type":"ping","t":null}`, ""},
		{"ping huge t", `{"type":"ping","t":1e400}`, "t must be a finite number"},
		{"ping object t", `{"type":"ping","t":{"a":1}}`, "t must be a finite number"},
		{"ping long t", `{"type":"ping","t":"` + strings.Repeat("x", MaxEchoBytes+1) + `"}`, "t must be a finite number"},
		{"long unknown type", `{"type":"` + strings.Repeat("x", 10000) + `"}`, "unknown frame type"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Decode([]byte(c.frame))
			if c.wantErr == "" {
				if err != nil {
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			if !errors.Is(err, call.ErrInvalid) || !strings.Contains(err.Error(), c.wantErr) {
				t.Fatalf("error %v, want one containing %q", err, c.wantErr)
			}
		})
	}
}

// TestServiceTier: a request's service_tier is the core's
// Options.ServiceTier (absent: "", the app's); another value is an
// invalid_request naming the field, in the WebSocket's terms.
func TestServiceTier(t *testing.T) {
	const frame = `{"type":"request","request_id":"abcdefgh","messages":[{"role":"user","content":"a"}]`
	for _, tier := range append([]string{""}, call.Tiers...) {
		body := frame + "}"
		if tier != "" {
			body = frame + `,"service_tier":"` + tier + `"}`
		}
		in, err := Decode([]byte(body))
		if err != nil {
			t.Fatalf("%q: %v", tier, err)
		}
		if got := in.Call().ServiceTier; got != tier {
			t.Errorf("%q: Options.ServiceTier = %q", tier, got)
		}
	}
	in, err := Decode([]byte(frame + `,"service_tier":"Priority"}`))
	var ce *call.ClientError
	if !errors.As(err, &ce) || ce.Path.String() != "service_tier" || in.RequestID != "abcdefgh" {
		t.Fatalf("a tier in another case: %+v, %v", in, err)
	}
	// The other doors validate what they build by the same rule.
	if err := ValidateRequest(&Inbound{Type: TypeRequest, RequestID: "abcdefgh", ServiceTier: "standard",
		Messages: []Message{{Role: "user", Content: "a"}}}); !errors.As(err, &ce) || ce.Path.String() != "service_tier" {
		t.Fatalf("ValidateRequest: %v", err)
	}
}

func TestDecodeKeepsRequestIDOnError(t *testing.T) {
	in, err := Decode([]byte(`{"type":"request","request_id":"abcdefgh","messages":"oops"}`))
	if err == nil || in.RequestID != "abcdefgh" {
		t.Fatalf("got %+v, %v", in, err)
	}
}

func FuzzDecode(f *testing.F) {
	for _, s := range []string{`{"type":"request","request_id":"abcdefgh","messages":[{"role":"user","content":"hi"}]}`,
		`{"type":"resume","request_id":"abcdefgh","after_seq":3}`, `{"type":"ping","t":1}`, `{}`, `[]`, `"x"`, ``} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		in, err := Decode(data)
		if err != nil {
			if !errors.Is(err, call.ErrInvalid) {
				t.Fatalf("error %v does not wrap call.ErrInvalid", err)
			}
			return
		}
		switch in.Type {
		case TypeRequest, TypeResume, TypeCancel:
			if !ValidID(in.RequestID) {
				t.Fatalf("accepted invalid id %q", in.RequestID)
			}
		case TypeAuth, TypePing:
		default:
			t.Fatalf("accepted unknown type %q", in.Type)
		}
	})
}

func TestClip(t *testing.T) {
	if got := Clip("short"); got != "short" {
		t.Fatalf("Clip(short) = %q", got)
	}
	long := strings.Repeat("€", 1000) // 3 bytes a rune: a cut can land inside one
	got := Clip(long)
	if len(got) > MaxEchoBytes || !strings.HasSuffix(got, "...") || !utf8.ValidString(got) {
		t.Fatalf("Clip(long) = %q (%d bytes)", got, len(got))
	}
	_, err := Decode([]byte(`{"type":"` + strings.Repeat("y", 1<<16) + `"}`))
	if err == nil || len(err.Error()) > MaxEchoBytes+100 {
		t.Fatalf("error echoes %d bytes", len(err.Error()))
	}
}

func TestDecodeDropsInvalidRequestIDOnError(t *testing.T) {
	in, err := Decode([]byte(`{"type":"cancel","request_id":"` + strings.Repeat("x", 10000) + `"}`))
	if err == nil || in.RequestID != "" {
		t.Fatalf("got id of %d bytes, %v", len(in.RequestID), err)
	}
}

func TestPeekRequestID(t *testing.T) {
	for prefix, want := range map[string]string{
		`{"type":"request","request_id":"req_12345678","messages":[{"role":"user","content":[{"type":"image","data":"AAAA`: "req_12345678",
		`{"type":"request","messages":[{"role":"user","content":"hi"}],"request_id":"req_12345678"}`:                       "req_12345678",
		`{"type":"request","messages":[{"role":"user","content":[{"type":"image","data":"AAAA`:                             "",
		`{"type":"request","request_id":"short"`:                                                                           "",
		`{"type":"request","request_id":7}`:                                                                                "",
		`["request_id","req_12345678"]`:                                                                                    "",
		``:                                                                                                                 "",
	} {
		if got := PeekRequestID([]byte(prefix)); got != want {
			t.Errorf("PeekRequestID(%.60q) = %q, want %q", prefix, got, want)
		}
	}
}

// TestTraceparentIsNeverRefused: a request's traceparent of any JSON type
// or length decodes; only a string within the bound is handed on.
func TestTraceparentIsNeverRefused(t *testing.T) {
	const valid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for raw, want := range map[string]string{
		`"` + valid + `"`:                    valid,
		`"not a traceparent"`:                "not a traceparent",
		`5`:                                  "",
		`null`:                               "",
		`{"a":1}`:                            "",
		`"` + strings.Repeat("x", 300) + `"`: "",
	} {
		in, err := Decode([]byte(`{"type":"request","request_id":"req-trace-1","messages":[{"role":"user","content":"hi"}],"traceparent":` + raw + `}`))
		if err != nil {
			t.Fatalf("traceparent %.40s: %v", raw, err)
		}
		if got := in.TraceParent(); got != want {
			t.Errorf("traceparent %.40s: TraceParent() = %q, want %q", raw, got, want)
		}
	}
}

// TestPathRoundTrips: a field named in the WebSocket's terms reads as a
// Path whose String is the same text, a path or not.
func TestPathRoundTrips(t *testing.T) {
	for s, want := range map[string]int{"messages[2].content[1].data": 5, "reasoning.budget_tokens": 2, "Idempotency-Key": 1,
		"tools": 1, "messages[].content: image blocks": 1, "a..b": 1, "x[1": 1, "": 0} {
		p := call.ParsePath(s)
		if p.String() != s || len(p) != want {
			t.Errorf("%q: %q (%d elements), want %d", s, p, len(p), want)
		}
	}
	if n, ok := call.ParsePath("messages[2]").Index(1); !ok || n != 2 {
		t.Errorf("Index: %d %v", n, ok)
	}
}
