package protocol

import (
	"encoding/base64"
	"encoding/json"
	"testing"

	"github.com/jetway-gateway/jetway/internal/call"
)

// chunkFrame is the chunk frame as a struct, for the encoding/json baseline.
type chunkFrame struct {
	Type      string `json:"type"`
	RequestID string `json:"request_id"`
	Seq       int    `json:"seq"`
	Text      string `json:"text"`
}

// benchText is one mock-model token, the common chunk.
const benchText = " ipsum"

// BenchmarkAppendChunk is the hot path: one chunk frame per model delta,
// into a reused buffer (as a writer that batches frames would).
func BenchmarkAppendChunk(b *testing.B) {
	b.ReportAllocs()
	buf := make([]byte, 0, 256)
	for i := 0; b.Loop(); i++ {
		buf = AppendChunk(buf[:0], "req_0123456789abcdef", i, call.Piece{Text: benchText})
	}
	b.SetBytes(int64(len(buf)))
}

// BenchmarkAppendChunkFresh allocates a frame per chunk, as the session
// writer does today (a frame outlives the call in the send queue).
func BenchmarkAppendChunkFresh(b *testing.B) {
	b.ReportAllocs()
	var buf []byte
	for i := 0; b.Loop(); i++ {
		buf = AppendChunk(make([]byte, 0, 64+len(benchText)), "req_0123456789abcdef", i, call.Piece{Text: benchText})
	}
	b.SetBytes(int64(len(buf)))
}

// BenchmarkAppendChunkSized allocates a frame per chunk sized for the
// whole frame (fixed 65 bytes + id + text + seq digits): one allocation.
func BenchmarkAppendChunkSized(b *testing.B) {
	b.ReportAllocs()
	const id = "req_0123456789abcdef"
	var buf []byte
	for i := 0; b.Loop(); i++ {
		buf = AppendChunk(make([]byte, 0, 65+20+len(id)+len(benchText)), id, i, call.Piece{Text: benchText})
	}
	b.SetBytes(int64(len(buf)))
}

// BenchmarkChunkJSONMarshal is the same frame through encoding/json.
func BenchmarkChunkJSONMarshal(b *testing.B) {
	b.ReportAllocs()
	var buf []byte
	for i := 0; b.Loop(); i++ {
		var err error
		buf, err = json.Marshal(chunkFrame{Type: TypeChunk, RequestID: "req_0123456789abcdef", Seq: i, Text: benchText})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(len(buf)))
}

// BenchmarkAppendChunkEscaped has text that needs escaping (quotes, newline, HTML, non-ASCII).
func BenchmarkAppendChunkEscaped(b *testing.B) {
	b.ReportAllocs()
	const text = "\"quoted\"\n<b>bold</b> & héllo"
	buf := make([]byte, 0, 256)
	for i := 0; b.Loop(); i++ {
		buf = AppendChunk(buf[:0], "req_0123456789abcdef", i, call.Piece{Text: text})
	}
	b.SetBytes(int64(len(buf)))
}

// BenchmarkChunkJSONMarshalEscaped is the same escaped frame through encoding/json.
func BenchmarkChunkJSONMarshalEscaped(b *testing.B) {
	b.ReportAllocs()
	const text = "\"quoted\"\n<b>bold</b> & héllo"
	var buf []byte
	for i := 0; b.Loop(); i++ {
		buf, _ = json.Marshal(chunkFrame{Type: TypeChunk, RequestID: "req_0123456789abcdef", Seq: i, Text: text})
	}
	b.SetBytes(int64(len(buf)))
}

// BenchmarkDecodeImageRequest is the admission-path cost of a request with
// a 1 MiB image: JSON decoding, the base64 decoded once from the frame and
// its bytes hashed once (validation).
func BenchmarkDecodeImageRequest(b *testing.B) {
	frame := []byte(`{"type":"request","request_id":"req_0123456789abcdef","messages":[{"role":"user","content":[` +
		`{"type":"text","text":"what is this?"},{"type":"image","format":"png","data":"` +
		base64.StdEncoding.EncodeToString(make([]byte, 1<<20)) + `"}]}]}`)
	b.ReportAllocs()
	b.SetBytes(int64(len(frame)))
	for b.Loop() {
		if _, err := Decode(frame); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeToolLoopRequest is a block-heavy frame without
// attachments: the second turn of a tool loop (reasoning, tool_use,
// tool_result blocks and a tool).
func BenchmarkDecodeToolLoopRequest(b *testing.B) {
	frame := []byte(`{"type":"request","request_id":"req_0123456789abcdef",` + toolsJSON + `"messages":[` +
		`{"role":"user","content":"what time is it?"},` +
		`{"role":"assistant","content":[{"type":"reasoning","text":"use the clock","signature":"sig"},{"type":"tool_use","id":"tu_1","name":"clock","input":{"zone":"UTC"}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"tu_1","content":[{"type":"text","text":"12:00"}]}]}]}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode(frame); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeTextRequest is the same frame with the text alone.
func BenchmarkDecodeTextRequest(b *testing.B) {
	frame := []byte(`{"type":"request","request_id":"req_0123456789abcdef","messages":[{"role":"user","content":"what is this?"}]}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode(frame); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBlockPieceChunk is a block-mode token: the piece kept for a
// reasoning delta, then its chunk frame (what a text token costs in
// BenchmarkAppendChunk).
func BenchmarkBlockPieceChunk(b *testing.B) {
	buf := make([]byte, 0, 256)
	b.ReportAllocs()
	for b.Loop() {
		p := call.Encode(call.Piece{Kind: KindReasoning, Reasoning: " lorem"})
		buf = AppendChunk(buf[:0], "req_0123456789abcdef", 42, call.Decode(p))
	}
}
