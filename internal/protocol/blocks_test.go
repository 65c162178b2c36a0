package protocol

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jetway-gateway/jetway/internal/call"
)

func b64(n int) string { return base64.StdEncoding.EncodeToString(make([]byte, n)) }

func request(extra, content string) string {
	return `{"type":"request","request_id":"abcdefgh",` + extra + `"messages":[{"role":"user","content":` + content + `}]}`
}

const toolsJSON = `"tools":[{"name":"clock","description":"the time","input_schema":{"type":"object"}}],`

func TestDecodeBlocks(t *testing.T) {
	img := `{"type":"image","format":"png","data":"` + b64(10) + `"}`
	doc := `{"type":"document","format":"pdf","name":"Q3 report (final)","data":"` + b64(10) + `"}`
	toolLoop := `{"type":"request","request_id":"abcdefgh",` + toolsJSON + `"messages":[` +
		`{"role":"user","content":"what time is it?"},` +
		`{"role":"assistant","content":[{"type":"reasoning","text":"use the clock","signature":"sig"},{"type":"tool_use","id":"tu_1","name":"clock","input":{}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"tu_1","content":[{"type":"text","text":"12:00"}]}]}]}`
	cases := []struct {
		name, frame, wantErr string
	}{
		{"text block", request("", `[{"type":"text","text":"hi"}]`), ""},
		{"image and document", request("", `[{"type":"text","text":"see"},`+img+`,`+doc+`]`), ""},
		{"tool loop", toolLoop, ""},
		{"tool choice auto", request(toolsJSON+`"tool_choice":"auto",`, `"hi"`), ""},
		{"tool choice any", request(toolsJSON+`"tool_choice":"any",`, `"hi"`), ""},
		{"tool choice named", request(toolsJSON+`"tool_choice":{"name":"clock"},`, `"hi"`), ""},
		{"reasoning", request(`"reasoning":{"budget_tokens":2048},`, `"hi"`), ""},
		{"cache point", request("", `[{"type":"text","text":"a long prefix"},{"type":"cache_point"},{"type":"text","text":"hi"}]`), ""},
		{"cache point first", request("", `[{"type":"cache_point"},{"type":"text","text":"hi"}]`), "messages[0].content[0]: a cache_point follows the content it marks"},
		{"cache point in a tool result", request(toolsJSON, `[{"type":"tool_result","tool_use_id":"tu_1","content":[{"type":"text","text":"x"},{"type":"cache_point"}]}]`),
			"content[0].content[1].type must be text, image or document"},
		{"image at the limit", request("", `[{"type":"image","format":"jpeg","data":"`+b64(MaxImageBytes)+`"}]`), ""},

		{"unknown block type", request("", `[{"type":"video","data":"AAAA"}]`), `messages[0].content[0].type "video" is unknown`},
		{"no block type", request("", `[{"text":"hi"}]`), "messages[0].content[0].type is required"},
		{"empty block list", request("", `[]`), "messages[0].content must not be empty"},
		{"content number", request("", `42`), "wrong type"},
		{"empty text block", request("", `[{"type":"text","text":""}]`), "messages[0].content[0].text must not be empty"},
		{"bad base64", request("", `[{"type":"image","format":"png","data":"not base64!"}]`), "messages[0].content[0].data is not valid base64"},
		{"base64 unpadded", request("", `[{"type":"image","format":"png","data":"AAA"}]`), "not valid base64"},
		{"base64 url alphabet", request("", `[{"type":"image","format":"png","data":"ab-_"}]`), "not valid base64"},
		{"bad image format", request("", `[{"type":"image","format":"bmp","data":"AAAA"}]`), "messages[0].content[0].format must be one of png"},
		{"oversized image", request("", `[{"type":"image","format":"png","data":"`+b64(MaxImageBytes+1)+`"}]`), "over the 3932160 bytes an image may have"},
		{"oversized document", request("", `[{"type":"document","format":"txt","name":"a","data":"`+b64(MaxDocumentBytes+1)+`"}]`), "over the 4718592 bytes a document may have"},
		{"bad document format", request("", `[{"type":"document","format":"exe","name":"a","data":"AAAA"}]`), "format must be one of pdf"},
		{"bad document name", request("", `[{"type":"document","format":"txt","name":"a/b.txt","data":"AAAA"}]`), "content[0].name must be"},
		{"document double space", request("", `[{"type":"document","format":"txt","name":"a  b","data":"AAAA"}]`), "content[0].name must be"},
		{"too many images", request("", `[`+strings.TrimSuffix(strings.Repeat(img+",", MaxImagesPerRequest+1), ",")+`]`), "at most 20 images"},
		{"too many documents", request("", `[`+strings.TrimSuffix(strings.Repeat(doc+",", MaxDocsPerRequest+1), ",")+`]`), "at most 5 documents"},
		{"tool_use from user", request(toolsJSON, `[{"type":"tool_use","id":"tu_1","name":"clock","input":{}}]`), "tool_use blocks belong in assistant messages"},
		{"tool_result without tools", request("", `[{"type":"tool_result","tool_use_id":"tu_1","content":[{"type":"text","text":"x"}]}]`), "tools are required"},
		{"tool_result empty", request(toolsJSON, `[{"type":"tool_result","tool_use_id":"tu_1","content":[]}]`), "content[0].content must not be empty"},
		{"tool_result nested tool_use", request(toolsJSON, `[{"type":"tool_result","tool_use_id":"tu_1","content":[{"type":"tool_use","id":"x","name":"clock","input":{}}]}]`), "content[0].content[0].type must be text, image or document"},
		{"tool_result bad image", request(toolsJSON, `[{"type":"tool_result","tool_use_id":"tu_1","content":[{"type":"image","format":"png","data":"@@@@"}]}]`), "content[0].content[0].data is not valid base64"},
		// Issue 23: a result for no call was accepted and charged on the WebSocket.
		{"tool_result for no call", strings.Replace(toolLoop, `"tool_use_id":"tu_1"`, `"tool_use_id":"tu_9"`, 1),
			`messages[2].content[0].tool_use_id "tu_9" matches no tool_use block of the assistant message before it`},
		{"tool_result with no assistant turn", request(toolsJSON, `[{"type":"tool_result","tool_use_id":"tu_1","content":[{"type":"text","text":"x"}]}]`),
			`messages[0].content[0].tool_use_id "tu_1" matches no tool_use block`},
		{"tool_result twice", strings.Replace(toolLoop, `{"type":"tool_result"`, `{"type":"tool_result","tool_use_id":"tu_1","content":[{"type":"text","text":"1"}]},{"type":"tool_result"`, 1),
			`messages[2].content[1].tool_use_id "tu_1" answers a tool_use already answered`},
		{"tool_result status", request(toolsJSON, `[{"type":"tool_result","tool_use_id":"tu_1","status":"ok","content":[{"type":"text","text":"x"}]}]`), "status must be"},
		{"tool choice without tools", request(`"tool_choice":"auto",`, `"hi"`), "tool_choice needs tools"},
		{"tool choice unknown tool", request(toolsJSON+`"tool_choice":{"name":"weather"},`, `"hi"`), "tool_choice.name must name one of the tools"},
		{"tool choice bad mode", request(toolsJSON+`"tool_choice":"sometimes",`, `"hi"`), "tool_choice must be"},
		{"tool bad name", request(`"tools":[{"name":"get time","input_schema":{}}],`, `"hi"`), "tools[0].name must be"},
		{"tool schema not object", request(`"tools":[{"name":"clock","input_schema":"x"}],`, `"hi"`), "tools[0].input_schema must be a JSON object"},
		{"tool duplicate", request(`"tools":[{"name":"a","input_schema":{}},{"name":"a","input_schema":{}}],`, `"hi"`), "tools[1].name \"a\" is not unique"},
		{"reasoning budget small", request(`"reasoning":{"budget_tokens":10},`, `"hi"`), "reasoning.budget_tokens must be at least 1024"},
		{"reasoning over max", request(`"max_tokens":2000,"reasoning":{"budget_tokens":2000},`, `"hi"`), "less than max_tokens"},
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
			var ce *call.ClientError
			if !errors.Is(err, call.ErrInvalid) || !errors.As(err, &ce) || !strings.Contains(ce.Message(), c.wantErr) {
				t.Fatalf("error %v, want one containing %q", err, c.wantErr)
			}
		})
	}
}

func TestCachePointsCounted(t *testing.T) {
	in, err := Decode([]byte(request("", `[{"type":"text","text":"a"},{"type":"cache_point"},{"type":"text","text":"b"},{"type":"cache_point"}]`)))
	if err != nil {
		t.Fatal(err)
	}
	if f := features(in); f.CachePoints != 2 || f.UsesBlocks() {
		t.Errorf("features %+v: want 2 cache points and nothing a model capability covers", f)
	}
	// Usage without the cache is the v1 object; with it, the fields are added.
	if b := string(Encode(Usage{InputTokens: 1, OutputTokens: 2})); b != `{"input_tokens":1,"output_tokens":2}` {
		t.Errorf("usage without the cache encodes as %s", b)
	}
	u := Usage{InputTokens: 1, OutputTokens: 2, CacheReadInputTokens: 30, CacheWriteInputTokens: 4}
	if b := string(Encode(u)); b != `{"input_tokens":1,"output_tokens":2,"cache_read_input_tokens":30,"cache_write_input_tokens":4}` || u.AllInput() != 35 || u.Total() != 37 {
		t.Errorf("usage with the cache encodes as %s (all input %d, total %d)", b, u.AllInput(), u.Total())
	}
}

func TestBlockRequestRoundTrips(t *testing.T) {
	frame := request(toolsJSON+`"tool_choice":{"name":"clock"},"reasoning":{"budget_tokens":1024},`,
		`[{"type":"text","text":"hi"},{"type":"image","format":"png","data":"`+b64(7)+`"}]`)
	in, err := Decode([]byte(frame))
	if err != nil {
		t.Fatal(err)
	}
	again, err := Decode(Encode(in))
	if err != nil {
		t.Fatal(err)
	}
	if a, b := string(Encode(in)), string(Encode(again)); a != b {
		t.Fatalf("round trip differs:\n%s\n%s", a, b)
	}
	if in.ToolChoice.Mode != ToolChoiceTool || in.ToolChoice.Name != "clock" || in.Reasoning.BudgetTokens != 1024 {
		t.Fatalf("decoded %+v %+v", in.ToolChoice, in.Reasoning)
	}
	f := features(in)
	if want := (call.Features{Tools: true, Reasoning: true, Images: 1, AttachmentBytes: 7}); f != want || !f.UsesBlocks() {
		t.Fatalf("features %+v, want %+v", f, want)
	}
}

// Text-only frames keep the encodings they had before blocks existed.
func TestTextOnlyEncodingsUnchanged(t *testing.T) {
	m, _ := json.Marshal(Message{Role: "user", Content: "hi <b>"})
	if string(m) != `{"role":"user","content":"hi \u003cb\u003e"}` {
		t.Fatalf("message %s", m)
	}
	in, err := Decode([]byte(request("", `"hi"`)))
	if err != nil || features(in).UsesBlocks() || in.Messages[0].Blocks != nil {
		t.Fatalf("%+v %v", in, err)
	}
	d := Encode(Done{Type: TypeDone, RequestID: "abcdefgh", Chunks: 1, Text: "x", Model: "m", StopReason: "end_turn"})
	want := `{"type":"done","request_id":"abcdefgh","chunks":1,"text":"x","model":"m","cached":false,"usage":{"input_tokens":0,"output_tokens":0},"stop_reason":"end_turn","ttft_ms":0,"latency_ms":0}`
	if string(d) != want {
		t.Fatalf("done\n got %s\nwant %s", d, want)
	}
	c, _ := json.Marshal(Chunk{Type: TypeChunk, RequestID: "abcdefgh", Seq: 1, Text: "x"})
	if string(c) != `{"type":"chunk","request_id":"abcdefgh","seq":1,"text":"x"}` {
		t.Fatalf("chunk %s", c)
	}
}

// An attachment's data decodes as strict base64 does, whether it comes in
// a frame (decoded straight from the frame's bytes, unquoted first when
// the JSON text has escapes) or in a block built in code (ParseData).
func TestDecodeAttachmentAgreesWithStrictDecoding(t *testing.T) {
	for _, s := range []string{"", "A", "AA==", "AB==", "AAA=", "AAE=", "AAAA", "AA=A", "A===", "====", "AAAA====",
		"ab+/", "ab-_", "AAAA\n", "AA\r\nAA", " AAA", b64(1), b64(2), b64(3), b64(100)} {
		dec, derr := base64.StdEncoding.Strict().DecodeString(s)
		// Go's decoder skips line breaks; the wire takes base64 without them.
		wantOK := derr == nil && s != "" && !strings.ContainsAny(s, "\r\n")

		b := Block{Type: BlockImage, Data: ParseData(s)}
		err := decodeAttachment(&b, "data", "an image", MaxImageBytes)
		if (err == nil) != wantOK || err == nil && (!bytes.Equal(b.Data.Bytes(), dec) || b.Data.Digest() != sha256.Sum256(dec)) {
			t.Errorf("decodeAttachment(%q) = %x, %v; strict decoding: %x, %v", s, b.Data.Bytes(), err, dec, derr)
		}

		quoted, _ := json.Marshal(s) // escapes \n, \r
		in, err := Decode([]byte(request("", `[{"type":"image","format":"png","data":`+string(quoted)+`}]`)))
		if err == nil {
			b = in.Messages[0].Blocks[0]
		}
		if (err == nil) != wantOK || err == nil && (!bytes.Equal(b.Data.Bytes(), dec) || b.Data.Digest() != sha256.Sum256(dec)) {
			t.Errorf("Decode of data %s = %x, %v; strict decoding: %x, %v", quoted, b.Data.Bytes(), err, dec, derr)
		}
	}
}

// Blocks decode as encoding/json would decode them: keys in any case,
// escapes in the data (a "\/" some encoders write), null data is no data;
// a decoded block encodes its data again.
func TestBlocksDecodeLikeEncodingJSON(t *testing.T) {
	in, err := Decode([]byte(request("", `[{"TYPE":"image","Format":"png","DATA":"AA\/A"},{"type":"text","text":"hi","unknown":[1]}]`)))
	if err != nil {
		t.Fatal(err)
	}
	if b := in.Messages[0].Blocks[0]; b.Type != BlockImage || b.Format != "png" || !bytes.Equal(b.Data.Bytes(), []byte{0, 15, 192}) {
		t.Fatalf("block %+v", b)
	}
	if got := string(Encode(in.Messages[0])); got != `{"role":"user","content":[{"type":"image","format":"png","data":"AA/A"},{"type":"text","text":"hi"}]}` {
		t.Fatalf("encoded again: %s", got)
	}
	// encoding/json decodes a message through the same decoder.
	var m Message
	if err := json.Unmarshal(Encode(in.Messages[0]), &m); err != nil || len(m.Blocks) != 2 || !bytes.Equal(m.Blocks[0].Data.Bytes(), []byte{0, 15, 192}) {
		t.Fatalf("json.Unmarshal: %+v, %v", m, err)
	}
	for frame, want := range map[string]string{
		request("", `[{"type":"image","format":"png","data":null}]`):                          "messages[0].content[0].data is not valid base64",
		request("", `[{"type":"image","format":"png","data":7}]`):                             `field "messages.0.content.0.data" has the wrong type`,
		request("", `[{"type":"image","format":"png","data":"`+b64(MaxDocumentBytes+3)+`"}]`): fmt.Sprintf("is %d bytes, over the %d bytes an image may have", MaxDocumentBytes+3, MaxImageBytes),
	} {
		var ce *call.ClientError
		if _, err := Decode([]byte(frame)); !errors.As(err, &ce) || !strings.Contains(ce.Message(), want) {
			t.Errorf("%.80s...: %v, want %q", frame, err, want)
		}
	}
}

// Data built in code encodes as the wire takes it: bytes as their base64,
// text that is not base64 as given (the server names the problem), a
// digest as "sha256:<hex>"; absent data leaves the field out.
func TestDataEncodings(t *testing.T) {
	raw := []byte("\x89PNG data")
	sum := sha256.Sum256(raw)
	cases := []struct {
		d    Data
		want string
	}{
		{DataOf(raw), `{"type":"image","data":"` + base64.StdEncoding.EncodeToString(raw) + `"}`},
		{ParseData(base64.StdEncoding.EncodeToString(raw)), `{"type":"image","data":"` + base64.StdEncoding.EncodeToString(raw) + `"}`},
		{ParseData("not base64"), `{"type":"image","data":"not base64"}`},
		{ParseData(b64(MaxDocumentBytes + 3)), `{"type":"image","data":"` + b64(MaxDocumentBytes+3) + `"}`},
		{Data{}, `{"type":"image"}`},
	}
	for _, c := range cases {
		if got := string(Encode(Block{Type: BlockImage, Data: c.d})); got != c.want {
			t.Errorf("encoded %s, want %s", got, c.want)
		}
	}
	b := Block{Type: BlockImage, Data: DataOf(raw)}
	if err := decodeAttachment(&b, "data", "an image", MaxImageBytes); err != nil || b.Data.Digest() != sum {
		t.Fatalf("validation: %v, digest %x", err, b.Data.Digest())
	}
	if got := string(Encode(Block{Type: BlockImage, Data: b.Data.Digested()})); got != fmt.Sprintf(`{"type":"image","data":"sha256:%x"}`, sum) {
		t.Fatalf("digested: %s", got)
	}
	for _, d := range []Data{DataOf(nil), ParseData(""), b.Data.Digested()} {
		b := Block{Type: BlockImage, Format: "png", Data: d}
		if err := decodeAttachment(&b, "data", "an image", MaxImageBytes); err == nil {
			t.Errorf("%+v validated", d)
		}
	}
}

// features is what the frame's translation uses beyond text.
func features(in Inbound) call.Features {
	r := in.Call()
	return r.Features()
}
