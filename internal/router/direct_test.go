package router

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/types"
	"github.com/aws/smithy-go/eventstream"
	"github.com/aws/smithy-go/middleware"
)

type doFunc func(*http.Request) (*http.Response, error)

func (f doFunc) Do(r *http.Request) (*http.Response, error) { return f(r) }

// sent is what a request put on the wire, but for its signature's time.
type sent struct {
	method, url, contentType, body string
	signedHeaders, scope           string
}

// capture answers every request with answer (status, headers, body) and
// keeps what was sent.
func capture(got *[]sent, status int, header http.Header, answer []byte) doFunc {
	return func(r *http.Request) (*http.Response, error) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			return nil, err
		}
		auth := r.Header.Get("Authorization")
		s := sent{method: r.Method, url: r.URL.String(), contentType: r.Header.Get("Content-Type"), body: string(b)}
		for _, f := range strings.Split(strings.TrimPrefix(auth, "AWS4-HMAC-SHA256 "), ", ") {
			switch k, v, _ := strings.Cut(f, "="); k {
			case "Credential":
				s.scope = v[strings.Index(v, "/")+9:] // past the key id and the date
			case "SignedHeaders":
				s.signedHeaders = v
			}
		}
		*got = append(*got, s)
		h := header.Clone()
		if h == nil {
			h = http.Header{}
		}
		return &http.Response{StatusCode: status, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: h,
			Body: io.NopCloser(bytes.NewReader(answer))}, nil
	}
}

func answerStream(t *testing.T) []byte {
	var buf bytes.Buffer
	enc := eventstream.NewEncoder()
	for _, e := range [][2]string{{"contentBlockDelta", `{"contentBlockIndex":0,"delta":{"text":"Hi"}}`},
		{"messageStop", `{"stopReason":"end_turn"}`}, {"metadata", `{"usage":{"inputTokens":3,"outputTokens":1}}`}} {
		var m eventstream.Message
		m.Headers.Set(":message-type", eventstream.StringValue("event"))
		m.Headers.Set(":event-type", eventstream.StringValue(e[0]))
		m.Payload = []byte(e[1])
		if err := enc.Encode(&buf, m); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

// pair is one adapter calling direct and one the same client through the
// SDK's stack (a no-op API option keeps it there).
func pair(t *testing.T, endpoint *string, hc doFunc) (direct, sdk *Bedrock) {
	o := bedrockruntime.Options{Region: "eu-west-3", RetryMaxAttempts: 1, BaseEndpoint: endpoint,
		Credentials: credentials.NewStaticCredentialsProvider("AKID", "SECRET", "TOKEN"), HTTPClient: hc}
	direct = NewBedrock(bedrockruntime.New(o))
	if direct.clients[clientKey{}].direct == nil {
		t.Fatal("the usual client does not call direct")
	}
	o.APIOptions = []func(*middleware.Stack) error{func(*middleware.Stack) error { return nil }}
	sdk = NewBedrock(bedrockruntime.New(o))
	if sdk.clients[clientKey{}].direct != nil {
		t.Fatal("a client with API options calls direct")
	}
	return direct, sdk
}

// TestDirectCallIsTheSDKs: the prepared call sends what the SDK's stack
// sends (method, URL with the model id escaped, content type, body,
// signed headers and scope), for a plain call and one with every field,
// to AWS's endpoint and to a base endpoint.
func TestDirectCallIsTheSDKs(t *testing.T) {
	temp, topP := 0.5, 0.9
	calls := []Call{
		{ModelID: "mock-a", Messages: []Message{{Role: "user", Content: "Hello"}}},
		{ModelID: "arn:aws:bedrock:eu-west-3:123456789012:inference-profile/eu.anthropic.claude", System: "Be brief.",
			Messages:  []Message{{Role: "user", Content: "a"}, {Role: "assistant", Content: "b"}, {Role: "user", Content: "c ✈"}},
			MaxTokens: 64, Temperature: &temp, TopP: &topP, Stop: []string{"END"}, ServiceTier: "priority",
			Guardrail: &Guardrail{ID: "g1", Version: "2", StreamMode: "async"}, ReasoningBudget: 1024, PrefixCachePoint: true,
			Tools: []Tool{{Name: "clock", Description: "time", InputSchema: []byte(`{"type":"object"}`)}}},
	}
	for _, endpoint := range []*string{nil, aws.String("http://127.0.0.1:1/base")} {
		var got []sent
		direct, sdk := pair(t, endpoint, capture(&got, http.StatusOK, http.Header{"Content-Type": {"application/vnd.amazon.eventstream"}}, answerStream(t)))
		for _, c := range calls {
			for _, b := range []*Bedrock{direct, sdk} {
				var text string
				res, err := b.Stream(context.Background(), c, func(s string) { text += s })
				if err != nil || text != "Hi" || res.Usage.OutputTokens != 1 {
					t.Fatalf("%q, %+v, %v", text, res, err)
				}
			}
			if got[0] != got[1] {
				t.Errorf("direct sent\n%+v\nthe SDK\n%+v", got[0], got[1])
			}
			got = got[:0]
		}
	}
}

// TestDirectErrorsAreTheSDKs: an error answer is the SDK's error, to its
// text, its types and its classification.
func TestDirectErrorsAreTheSDKs(t *testing.T) {
	for _, a := range []struct {
		status int
		kind   string
		body   string
	}{
		{429, "ThrottlingException", `{"message":"Too many requests, please wait before trying again."}`},
		{400, "ValidationException", `{"message":"The provided model identifier is invalid."}`},
		{403, "AccessDeniedException", `{"message":"You don't have access to the model."}`},
		{503, "ServiceUnavailableException", `{"message":"Bedrock is unable to process your request."}`},
		{500, "", `not json`},
		{404, "", ``},
	} {
		h := http.Header{"X-Amzn-Requestid": {"req-1"}, "Content-Type": {"application/json"}}
		if a.kind != "" {
			h.Set("X-Amzn-Errortype", a.kind+":http://internal.amazon.com/coral/com.amazon.bedrock/")
		}
		var got []sent
		direct, sdk := pair(t, aws.String("http://bedrock.invalid"), capture(&got, a.status, h, []byte(a.body)))
		c := Call{ModelID: "mock-a", Messages: []Message{{Role: "user", Content: "Hello"}}}
		_, derr := direct.Stream(context.Background(), c, func(string) {})
		_, serr := sdk.Stream(context.Background(), c, func(string) {})
		if derr == nil || serr == nil || derr.Error() != serr.Error() {
			t.Errorf("HTTP %d: direct %v\nSDK %v", a.status, derr, serr)
			continue
		}
		var dm, sm *ModelError
		if !errors.As(derr, &dm) || !errors.As(serr, &sm) || dm.Kind != sm.Kind || dm.Reason() != sm.Reason() {
			t.Errorf("HTTP %d: direct %+v, SDK %+v", a.status, dm, sm)
		}
		var dt, st *types.ThrottlingException
		if errors.As(derr, &dt) != errors.As(serr, &st) {
			t.Errorf("HTTP %d: throttling types differ", a.status)
		}
	}
	// A connection that fails.
	fail := doFunc(func(*http.Request) (*http.Response, error) { return nil, errors.New("connection refused") })
	direct, sdk := pair(t, aws.String("http://bedrock.invalid"), fail)
	c := Call{ModelID: "mock-a", Messages: []Message{{Role: "user", Content: "Hello"}}}
	_, derr := direct.Stream(context.Background(), c, func(string) {})
	_, serr := sdk.Stream(context.Background(), c, func(string) {})
	if derr == nil || serr == nil || derr.Error() != serr.Error() {
		t.Errorf("connection refused: direct %v\nSDK %v", derr, serr)
	}
}

// TestDirectOnlyForOneAttempt: a client with the SDK's retries keeps them.
func TestDirectOnlyForOneAttempt(t *testing.T) {
	for _, o := range []bedrockruntime.Options{
		{Region: "us-east-1", RetryMaxAttempts: 3, Credentials: credentials.NewStaticCredentialsProvider("a", "b", "")},
		{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("a", "b", "")}, // the default: 3
		{Region: "us-east-1", RetryMaxAttempts: 1, RetryMode: aws.RetryModeAdaptive, Credentials: credentials.NewStaticCredentialsProvider("a", "b", "")},
		{Region: "us-east-1", RetryMaxAttempts: 1}, // anonymous
		{Region: "us-east-1", RetryMaxAttempts: 1, Credentials: credentials.NewStaticCredentialsProvider("a", "b", ""), ClientLogMode: aws.LogRequest},
	} {
		if newDirect(bedrockruntime.New(o).Options()) != nil {
			t.Errorf("%+v: calls direct", o)
		}
	}
}
