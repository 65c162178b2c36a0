package anthropic

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/jetway-gateway/jetway/internal/call"
)

// benchParse measures parseRequest (decoding, translation and the
// protocol's validation) on one body.
func benchParse(b *testing.B, body []byte) {
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, err := parseRequest(body, "req_0123456789abcdef", false); err != nil {
			b.Fatal(err.msg)
		}
	}
}

// BenchmarkParseText is a text request (the baseline).
func BenchmarkParseText(b *testing.B) {
	benchParse(b, []byte(`{"model":"mock-a","max_tokens":100,"system":"be brief","messages":[{"role":"user","content":"`+
		strings.Repeat("hello ", 100)+`"}]}`))
}

// BenchmarkParseImage is a request with a 1 MiB image.
func BenchmarkParseImage(b *testing.B) {
	img := base64.StdEncoding.EncodeToString(make([]byte, 1<<20))
	benchParse(b, []byte(`{"model":"mock-tools","max_tokens":100,"messages":[{"role":"user","content":[{"type":"text","text":"what is this?"},`+
		`{"type":"image","source":{"type":"base64","media_type":"image/png","data":"`+img+`"}}]}]}`))
}

// BenchmarkEncodeTextChunk is the streaming encoder's cost per text chunk
// (one content_block_delta event).
func BenchmarkEncodeTextChunk(b *testing.B) {
	enc := newEncoder("req_0123456789abcdef")
	piece := call.Piece{Text: " lorem"}
	dst := enc.AppendChunk(nil, 1, piece)
	b.ReportAllocs()
	seq := 2
	for b.Loop() {
		dst = enc.AppendChunk(dst[:0], seq, piece)
		seq++
	}
}

// BenchmarkEncodeReasoningChunk is the streaming encoder's cost per
// reasoning chunk from the piece the log keeps (one thinking_delta event).
func BenchmarkEncodeReasoningChunk(b *testing.B) {
	enc := newEncoder("req_0123456789abcdef")
	piece := call.Encode(call.Piece{Kind: call.KindReasoning, Reasoning: " lorem"})
	dst := enc.AppendChunk(nil, 1, call.Decode(piece))
	b.ReportAllocs()
	seq := 2
	for b.Loop() {
		dst = enc.AppendChunk(dst[:0], seq, call.Decode(piece))
		seq++
	}
}
