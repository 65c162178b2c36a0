package alert

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sns"
)

const topicARN = "arn:aws:sns:us-east-1:123456789012:jetway-quota-alerts"

// snsServer speaks enough of the SNS Query protocol for Publish: a signed
// form POST answered with PublishResponse XML, or with an ErrorResponse
// for a topic it does not know.
func snsServer(t *testing.T, got chan<- url.Values) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.Header.Get("Authorization"), "AWS4-HMAC-SHA256 ") {
			t.Errorf("unsigned request: %q", r.Header.Get("Authorization"))
		}
		if err := r.ParseForm(); err != nil {
			t.Error(err)
		}
		if r.Form.Get("Action") != "Publish" || r.Form.Get("Version") != "2010-03-31" {
			t.Errorf("form %v", r.Form)
		}
		w.Header().Set("Content-Type", "text/xml")
		if r.Form.Get("TopicArn") != topicARN {
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `<ErrorResponse xmlns="https://sns.amazonaws.com/doc/2010-03-31/"><Error><Type>Sender</Type>`+
				`<Code>NotFound</Code><Message>Topic does not exist</Message></Error><RequestId>r-2</RequestId></ErrorResponse>`)
			return
		}
		got <- r.Form
		fmt.Fprint(w, `<PublishResponse xmlns="https://sns.amazonaws.com/doc/2010-03-31/"><PublishResult>`+
			`<MessageId>5a1b2c3d-0000-4000-8000-000000000001</MessageId></PublishResult>`+
			`<ResponseMetadata><RequestId>r-1</RequestId></ResponseMetadata></PublishResponse>`)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func snsClient(endpoint string) *sns.Client {
	return sns.New(sns.Options{
		Region:           "us-east-1",
		BaseEndpoint:     aws.String(endpoint),
		Credentials:      credentials.NewStaticCredentialsProvider("AKIDEXAMPLE", "secret", ""),
		RetryMaxAttempts: 1,
	})
}

// The SNS sink publishes the event's JSON as the message, through the
// real client against a local SNS endpoint.
func TestSNSPublish(t *testing.T) {
	got := make(chan url.Values, 1)
	srv := snsServer(t, got)
	n := New(Options{}, nil, []Sink{NewSNS(snsClient(srv.URL), topicARN)}, nil, nil)
	o := hourly(100)
	o.Scope, o.User, o.Measure, o.Limit, o.Before, o.After = ScopeApp, "", MeasureUSD, 2_000_000, 1_999_000, 2_000_000
	o.Thresholds = []int{100}
	n.Observe(o)
	closeWithin(t, n)
	var form url.Values
	select {
	case form = <-got:
	default:
		t.Fatal("nothing was published")
	}
	var e map[string]any
	if err := json.Unmarshal([]byte(form.Get("Message")), &e); err != nil {
		t.Fatalf("message %q: %v", form.Get("Message"), err)
	}
	want := map[string]any{"type": EventType, "tenant": "contoso", "app": "support", "scope": "app", "window": "hour",
		"measure": "usd", "limit": 2.0, "used": 2.0, "threshold": 100.0, "window_resets_at": o.WindowResetsAt.Format(time.RFC3339)}
	for k, v := range want {
		if e[k] != v {
			t.Errorf("message %s = %v, want %v", k, e[k], v)
		}
	}
	if _, ok := e["user"]; ok {
		t.Error("an app event names a user")
	}
	if at, err := time.Parse(time.RFC3339Nano, fmt.Sprint(e["at"])); err != nil || at.IsZero() {
		t.Errorf("at %v: %v", e["at"], err)
	}
	if form.Get("MessageAttributes.entry.1.Name") != "type" || form.Get("MessageAttributes.entry.1.Value.StringValue") != EventType {
		t.Errorf("message attributes %v", form)
	}
	// An unknown topic is the sink's error.
	if err := NewSNS(snsClient(srv.URL), topicARN+"-gone").Send(context.Background(), []byte(`{}`)); err == nil ||
		!strings.Contains(err.Error(), "NotFound") {
		t.Errorf("unknown topic: %v", err)
	}
}
