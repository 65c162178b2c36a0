package protocol

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestAppendChunkMatchesEncodingJSON(t *testing.T) {
	texts := []string{"", "hello", " lorem", "quote\" back\\slash", "<tag>&amp;", "tab\tnl\ncr\r", "\x00\x01\x1f",
		"héllo wörld", "emoji 🚀", "bad \xff utf8", "line\u2028sep\u2029", strings.Repeat("x", 1000)}
	for _, text := range texts {
		got := AppendChunk(nil, "req_12345678", 42, text)
		want, err := json.Marshal(Chunk{TypeChunk, "req_12345678", 42, text})
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
		{"auth no token", `{"type":"auth"}`, "token"},
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
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.wantErr) {
				t.Fatalf("error %v, want one containing %q", err, c.wantErr)
			}
		})
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
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
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
