package router_test

import (
	"bytes"
	"crypto/sha256"
	"io"
	"net/http"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"

	"github.com/jetway-gateway/jetway/internal/router"
)

// BenchmarkConverseImageRequest is the model call's own work for a request
// with one 1 MiB image, which the gateway's admission benchmark leaves out:
// the Bedrock adapter's input, the SDK's serialization of it (the image
// base64-encoded into the JSON body), the SigV4 signature (a SHA-256 of the
// body) and the body read by the HTTP client. The endpoint answers at once
// with messageStop; there is no network.
func BenchmarkConverseImageRequest(b *testing.B) {
	img := make([]byte, 1<<20)
	for i := range img {
		img[i] = byte(i * 7)
	}
	answer := eventStream(b, [][3]string{{"event", "messageStop", `{"stopReason":"end_turn"}`},
		{"event", "metadata", `{"usage":{"inputTokens":1600,"outputTokens":1}}`}})
	var body int64
	bedrock := router.NewBedrock(bedrockruntime.New(bedrockruntime.Options{Region: "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider("bench", "bench", ""),
		BaseEndpoint: aws.String("http://bedrock.invalid"), RetryMaxAttempts: 1,
		HTTPClient: doFunc(func(r *http.Request) (*http.Response, error) {
			n, err := io.Copy(io.Discard, r.Body)
			if err != nil {
				return nil, err
			}
			body = n
			return &http.Response{StatusCode: http.StatusOK, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
				Header: http.Header{"Content-Type": {"application/vnd.amazon.eventstream"}},
				Body:   io.NopCloser(bytes.NewReader(answer))}, nil
		})}))
	c := router.Call{ModelID: "seeing", MaxTokens: 1024, Messages: []router.Message{{Role: "user", Blocks: []router.Block{
		{Kind: router.BlockText, Text: "what is this?"},
		{Kind: router.BlockImage, Format: "png", Data: img, Digest: sha256.Sum256(img)}}}}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := bedrock.Stream(b.Context(), c, func(string) {}); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(body)
}

// eventStream encodes events ({message type, event type, JSON payload}) as
// a ConverseStream response body.
func eventStream(tb testing.TB, events [][3]string) []byte {
	var buf bytes.Buffer
	enc := eventstream.NewEncoder()
	for _, e := range events {
		var msg eventstream.Message
		msg.Headers.Set(":message-type", eventstream.StringValue(e[0]))
		msg.Headers.Set(":event-type", eventstream.StringValue(e[1]))
		msg.Headers.Set(":content-type", eventstream.StringValue("application/json"))
		msg.Payload = []byte(e[2])
		if err := enc.Encode(&buf, msg); err != nil {
			tb.Fatal(err)
		}
	}
	return buf.Bytes()
}

// BenchmarkStreamAnswer is the model call's own work for a usual
// non-streaming request: the adapter's input, the SDK's serialization,
// middleware and SigV4 signature, and the reading of a 16-token answer
// (messageStart, 16 text deltas, contentBlockStop, messageStop,
// metadata, as the mock sends them). The endpoint answers from memory;
// there is no network.
func BenchmarkStreamAnswer(b *testing.B) {
	events := [][3]string{{"event", "messageStart", `{"role":"assistant"}`}}
	for i := range 16 {
		text := " flight"
		if i == 0 {
			text = "Flight"
		}
		events = append(events, [3]string{"event", "contentBlockDelta", `{"contentBlockIndex":0,"delta":{"text":"` + text + `"}}`})
	}
	events = append(events, [3]string{"event", "contentBlockStop", `{"contentBlockIndex":0}`},
		[3]string{"event", "messageStop", `{"stopReason":"max_tokens"}`},
		[3]string{"event", "metadata", `{"usage":{"inputTokens":12,"outputTokens":16,"totalTokens":28},"metrics":{"latencyMs":1}}`})
	answer := eventStream(b, events)
	bedrock := router.NewBedrock(bedrockruntime.New(bedrockruntime.Options{Region: "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider("bench", "bench", ""),
		BaseEndpoint: aws.String("http://bedrock.invalid"), RetryMaxAttempts: 1,
		HTTPClient: doFunc(func(r *http.Request) (*http.Response, error) {
			if _, err := io.Copy(io.Discard, r.Body); err != nil {
				return nil, err
			}
			return &http.Response{StatusCode: http.StatusOK, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
				Header: http.Header{"Content-Type": {"application/vnd.amazon.eventstream"}},
				Body:   io.NopCloser(bytes.NewReader(answer))}, nil
		})}))
	c := router.Call{ModelID: "mock-a", MaxTokens: 16, Messages: []router.Message{{Role: "user", Content: "Tell me about flight 7"}}}
	b.ReportAllocs()
	for b.Loop() {
		var n int
		res, err := bedrock.Stream(b.Context(), c, func(string) { n++ })
		if err != nil || n != 16 || res.Usage.OutputTokens != 16 {
			b.Fatal(n, res, err)
		}
	}
}
