package openai

import (
	"encoding/base64"
	"strings"
	"testing"
)

// benchParse measures parseChat (decoding, translation and the protocol's
// validation) on one body.
func benchParse(b *testing.B, body []byte) {
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, _, err := parseChat(body, "req_0123456789abcdef"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParseChatText is a text request (the baseline).
func BenchmarkParseChatText(b *testing.B) {
	benchParse(b, []byte(`{"model":"mock-a","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"`+
		strings.Repeat("hello ", 100)+`"}]}`))
}

// BenchmarkParseChatImage is a request with a 1 MiB image as a data URL.
func BenchmarkParseChatImage(b *testing.B) {
	img := base64.StdEncoding.EncodeToString(make([]byte, 1<<20))
	benchParse(b, []byte(`{"model":"mock-tools","messages":[{"role":"user","content":[{"type":"text","text":"what is this?"},`+
		`{"type":"image_url","image_url":{"url":"data:image/png;base64,`+img+`"}}]}]}`))
}

// BenchmarkParseChatToolLoop is the second turn of a two-call tool loop.
func BenchmarkParseChatToolLoop(b *testing.B) {
	benchParse(b, []byte(toolLoop))
}
