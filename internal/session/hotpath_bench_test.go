package session

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	"github.com/gorilla/websocket"
	"go.uber.org/zap"

	"github.com/jetway-gateway/jetway/internal/auth"
	"github.com/jetway-gateway/jetway/internal/call"
	"github.com/jetway-gateway/jetway/internal/gateway"
	"github.com/jetway-gateway/jetway/internal/protocol"
	"github.com/jetway-gateway/jetway/internal/router"
	"github.com/jetway-gateway/jetway/internal/socket"
	"github.com/jetway-gateway/jetway/internal/stream"
)

// BenchmarkHotPath is one streamed token through everything the gateway
// does per token: the Bedrock adapter decoding a contentBlockDelta event
// (the real SDK client and codec, over a ready-made event-stream body),
// the stream log's append, the follower's chunk frame, the send queue and
// the connection's writer, and the WebSocket write to a real client on
// loopback, which reads and discards. One op is one token; answers are
// 300 tokens, unpaced. allocs/op counts the whole process (the client's
// reads included).
func BenchmarkHotPath(b *testing.B) { hotPath(b, false) }

// BenchmarkHotPathPaced is BenchmarkHotPath with each token arriving
// only once the client has read the one before, as at 100 paced streams
// (one token each 8 ms, less the wait): every token is its own batch, its
// own follower wake-up and its own socket write.
func BenchmarkHotPathPaced(b *testing.B) { hotPath(b, true) }

func hotPath(b *testing.B, paced bool) {
	const answer = 300
	body := eventStreamBody(b, answer)
	events := eventStreamEvents(b, answer)
	var next chan struct{} // paced: a token for each delta after the first, from the client
	br := bedrockruntime.New(bedrockruntime.Options{
		Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("bench", "bench", ""),
		BaseEndpoint: aws.String("http://bedrock.invalid"), RetryMaxAttempts: 1,
		HTTPClient: httpClientFunc(func(*http.Request) (*http.Response, error) {
			var r io.Reader = bytes.NewReader(body)
			if paced {
				r = &pacedBody{events: events, next: next}
			}
			return &http.Response{StatusCode: http.StatusOK, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
				Header: http.Header{"Content-Type": {"application/vnd.amazon.eventstream"}},
				Body:   io.NopCloser(r)}, nil
		}),
	})
	model := router.NewBedrock(br)
	gw := &benchGateway{submit: func(req gateway.Request) *stream.Log {
		log := stream.NewLog("bench-user", req.RequestID, "", time.Now())
		log.Accept(stream.NewAccepted(call.Accepted{RequestID: req.RequestID, Model: "mock-a"}))
		go func() {
			_, err := model.Stream(context.Background(), router.Call{ModelID: "mock-a",
				Messages: []router.Message{{Role: "user", Content: "hi"}}}, func(text string) { log.Append(text) })
			if err != nil {
				panic(err)
			}
			log.Finish(stream.DoneTerminal(call.Done{RequestID: req.RequestID, Chunks: answer}), time.Now())
		}()
		return log
	}}
	hub := newHub(benchVerifier{}, gw, nil, zap.NewNop(), socket.Options{})
	srv := httptest.NewServer(hub)
	defer srv.Close()
	conn, _, err := (&websocket.Dialer{Subprotocols: []string{protocol.Subprotocol}}).Dial(
		"ws"+strings.TrimPrefix(srv.URL, "http")+"/v1/ws", http.Header{"Authorization": {"Bearer bench"}})
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	var buf bytes.Buffer
	read := func() []byte {
		_, r, err := conn.NextReader()
		if err != nil {
			b.Fatal(err)
		}
		buf.Reset()
		if _, err := buf.ReadFrom(r); err != nil {
			b.Fatal(err)
		}
		return buf.Bytes()
	}
	read() // ready

	b.ReportAllocs()
	b.ResetTimer()
	chunks := 0
	for r := 0; chunks < b.N; r++ {
		next = make(chan struct{}, 1)
		inAnswer := 0
		req := fmt.Sprintf(`{"type":"request","request_id":"bench_%08d","messages":[{"role":"user","content":"hi"}]}`, r)
		if err := conn.WriteMessage(websocket.TextMessage, []byte(req)); err != nil {
			b.Fatal(err)
		}
		for {
			f := read()
			if bytes.HasPrefix(f, []byte(`{"type":"chunk"`)) {
				chunks++
				if inAnswer++; paced && inAnswer < answer {
					next <- struct{}{}
				}
				continue
			}
			if bytes.HasPrefix(f, []byte(`{"type":"done"`)) {
				break
			}
			if !bytes.HasPrefix(f, []byte(`{"type":"accepted"`)) {
				b.Fatalf("unexpected frame %s", f)
			}
		}
	}
	b.StopTimer()
	// Ops are tokens; the last answer may run past b.N.
	b.ReportMetric(float64(chunks)/float64(b.N), "chunks/op")
}

// eventStreamBody is a ConverseStream answer of n one-word deltas, encoded
// as Bedrock sends it.
func eventStreamBody(tb testing.TB, n int) []byte {
	tb.Helper()
	enc := eventstream.NewEncoder()
	var out bytes.Buffer
	event := func(typ, payload string) {
		var m eventstream.Message
		m.Headers.Set(":message-type", eventstream.StringValue("event"))
		m.Headers.Set(":event-type", eventstream.StringValue(typ))
		m.Headers.Set(":content-type", eventstream.StringValue("application/json"))
		m.Payload = []byte(payload)
		if err := enc.Encode(&out, m); err != nil {
			tb.Fatal(err)
		}
	}
	event("messageStart", `{"role":"assistant"}`)
	for i := 0; i < n; i++ {
		event("contentBlockDelta", `{"contentBlockIndex":0,"delta":{"text":" ipsum"}}`)
	}
	event("contentBlockStop", `{"contentBlockIndex":0}`)
	event("messageStop", `{"stopReason":"end_turn"}`)
	event("metadata", fmt.Sprintf(`{"usage":{"inputTokens":3,"outputTokens":%d,"totalTokens":%d},"metrics":{"latencyMs":1}}`, n, n+3))
	return out.Bytes()
}

// eventStreamEvents is eventStreamBody's events, each encoded alone.
func eventStreamEvents(tb testing.TB, n int) [][]byte {
	tb.Helper()
	body := eventStreamBody(tb, n)
	var events [][]byte
	for len(body) > 0 {
		size := int(body[0])<<24 | int(body[1])<<16 | int(body[2])<<8 | int(body[3]) // the prelude's total length
		events = append(events, body[:size])
		body = body[size:]
	}
	return events
}

// pacedBody serves events one at a time: each contentBlockDelta after the
// first waits for a token on next.
type pacedBody struct {
	events [][]byte
	next   chan struct{}
	i      int // the event being served
	off    int
	deltas int
}

func (p *pacedBody) Read(b []byte) (int, error) {
	if p.i == len(p.events) {
		return 0, io.EOF
	}
	if p.off == 0 && bytes.Contains(p.events[p.i], []byte("contentBlockDelta")) {
		if p.deltas++; p.deltas > 1 {
			<-p.next
		}
	}
	n := copy(b, p.events[p.i][p.off:])
	if p.off += n; p.off == len(p.events[p.i]) {
		p.i, p.off = p.i+1, 0
	}
	return n, nil
}

type httpClientFunc func(*http.Request) (*http.Response, error)

func (f httpClientFunc) Do(r *http.Request) (*http.Response, error) { return f(r) }

type benchVerifier struct{}

func (benchVerifier) Verify(context.Context, string) (auth.Principal, error) {
	return auth.Principal{Subject: "bench-user", Tenant: "contoso", App: "support-assistant",
		ExpiresAt: time.Now().Add(time.Hour)}, nil
}

// benchGateway answers every request with the log submit returns.
type benchGateway struct {
	submit func(gateway.Request) *stream.Log
}

func (g *benchGateway) Submit(_ context.Context, _ gateway.Caller, req gateway.Request) (*stream.Log, int, error) {
	return g.submit(req), 0, nil
}

func (g *benchGateway) Resume(context.Context, gateway.Caller, string) (*stream.Log, error) {
	return nil, errors.New("bench: no resume")
}

func (g *benchGateway) Rejoin(context.Context, gateway.Caller, string) (*stream.Log, error) {
	return nil, errors.New("bench: no rejoin")
}

func (g *benchGateway) Cancel(context.Context, gateway.Caller, string) error {
	return errors.New("bench: no cancel")
}

func (g *benchGateway) Refuse(_ context.Context, _ gateway.Caller, _ gateway.Request, err error) error {
	return err
}
