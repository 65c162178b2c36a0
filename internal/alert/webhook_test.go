package alert

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fast keeps the retry waits short; the attempt bound is the default.
var fast = WebhookOptions{Base: time.Millisecond, Max: 2 * time.Millisecond}

// A receiver checks the signature the way the docs tell it to: HMAC-SHA256
// of the raw body under the shared secret, hex, after "sha256=", compared
// in constant time.
func TestWebhookSignature(t *testing.T) {
	const secret = "s3cret-shared-with-the-receiver"
	got := make(chan Event, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, err := io.ReadAll(r.Body)
		if err != nil {
			t.Error(err)
		}
		mac := hmac.New(sha256.New, []byte(secret))
		mac.Write(raw)
		want := "sha256=" + hex.EncodeToString(mac.Sum(nil))
		if sig := r.Header.Get("X-Jetway-Signature"); !hmac.Equal([]byte(sig), []byte(want)) {
			t.Errorf("signature %q, want %q", sig, want)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s with Content-Type %q", r.Method, r.Header.Get("Content-Type"))
		}
		var e Event
		if err := json.Unmarshal(raw, &e); err != nil {
			t.Error(err)
		}
		got <- e
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	hook, err := NewWebhook(srv.URL+"/hooks/jetway", secret, srv.Client(), fast)
	if err != nil {
		t.Fatal(err)
	}
	n := New(Options{}, NewMemoryClaimer(), []Sink{hook}, nil, nil)
	n.Observe(Observation{Tenant: "contoso", App: "support", User: "alice", Scope: ScopeUser, Window: "day",
		WindowStart: time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC), WindowResetsAt: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC),
		Measure: MeasureRequests, Limit: 10, Before: 7, After: 8, Thresholds: []int{80}})
	closeWithin(t, n)
	select {
	case e := <-got:
		if e.Type != EventType || e.Tenant != "contoso" || e.User != "alice" || e.Threshold != 80 || e.Used.String() != "8" || e.Limit.String() != "10" {
			t.Errorf("event %+v", e)
		}
	default:
		t.Fatal("the receiver got no event")
	}
	// A body signed under another secret does not verify.
	if Sign([]byte("other"), []byte(`{}`)) == Sign([]byte(secret), []byte(`{}`)) {
		t.Error("the signature does not depend on the secret")
	}
}

// Retries are bounded: 500, 408 and 429 are retried up to the attempt
// bound; any other 4xx and a redirect are final at once.
func TestWebhookRetriesBounded(t *testing.T) {
	for _, tt := range []struct {
		status, attempts int
	}{
		{http.StatusInternalServerError, DefaultWebhookAttempts},
		{http.StatusServiceUnavailable, DefaultWebhookAttempts},
		{http.StatusTooManyRequests, DefaultWebhookAttempts},
		{http.StatusRequestTimeout, DefaultWebhookAttempts},
		{http.StatusBadRequest, 1},
		{http.StatusUnauthorized, 1},
		{http.StatusNotFound, 1},
		{http.StatusFound, 1},
	} {
		var hits, redirected atomic.Int32
		target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { redirected.Add(1) }))
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hits.Add(1)
			if tt.status == http.StatusFound {
				http.Redirect(w, r, target.URL, http.StatusFound)
				return
			}
			w.WriteHeader(tt.status)
		}))
		hook, err := NewWebhook(srv.URL, "k", nil, fast)
		if err != nil {
			t.Fatal(err)
		}
		err = hook.Send(context.Background(), []byte(`{}`))
		var status *StatusError
		if !errors.As(err, &status) || status.Code != tt.status {
			t.Errorf("%d: err %v, want a StatusError %d", tt.status, err, tt.status)
		}
		if got := int(hits.Load()); got != tt.attempts {
			t.Errorf("%d: %d attempts, want %d", tt.status, got, tt.attempts)
		}
		if redirected.Load() != 0 {
			t.Errorf("%d: the redirect was followed", tt.status)
		}
		srv.Close()
		target.Close()
	}
}

// A receiver that never answers costs at most the attempt bound, each
// attempt ended by its timeout, the whole within Within.
func TestWebhookHangingReceiver(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		_, _ = io.ReadAll(r.Body) // the server notices the client's close only once the body is read
		<-r.Context().Done()
	}))
	defer srv.Close()
	o := fast
	o.AttemptTimeout, o.Within = 20*time.Millisecond, 5*time.Second
	hook, err := NewWebhook(srv.URL, "k", nil, o)
	if err != nil {
		t.Fatal(err)
	}
	if err := hook.Send(context.Background(), []byte(`{}`)); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err %v, want a deadline", err)
	}
	if got := hits.Load(); got < 1 || got > DefaultWebhookAttempts {
		t.Errorf("%d attempts, want 1..%d", got, DefaultWebhookAttempts)
	}
}

// The URL is https, or http only on loopback; the secret is required.
func TestWebhookURLValidation(t *testing.T) {
	for _, tt := range []struct {
		url string
		ok  bool
	}{
		{"https://hooks.example.com/jetway", true},
		{"https://203.0.113.7:8443/x?token=abc", true},
		{"http://127.0.0.1:9000/hook", true},
		{"http://127.8.9.10/hook", true},
		{"http://localhost:9000/hook", true},
		{"http://LOCALHOST/hook", true},
		{"http://[::1]:9000/hook", true},
		{"http://hooks.example.com/jetway", false},
		{"http://10.0.0.5/hook", false},
		{"http://0.0.0.0/hook", false},
		{"http://[::]/hook", false},
		{"http://localhost.example.com/hook", false},
		{"http://127.0.0.1.nip.io/hook", false},
		{"ftp://127.0.0.1/hook", false},
		{"hooks.example.com/jetway", false},
		{"https:///nohost", false},
		{"", false},
		{"://bad", false},
	} {
		err := ValidateWebhookURL(tt.url)
		if (err == nil) != tt.ok {
			t.Errorf("%q: %v, want ok=%v", tt.url, err, tt.ok)
		}
		if err != nil && !errors.Is(err, ErrWebhookURL) {
			t.Errorf("%q: %v is not ErrWebhookURL", tt.url, err)
		}
		if _, err := NewWebhook(tt.url, "k", nil, WebhookOptions{}); (err == nil) != tt.ok {
			t.Errorf("NewWebhook(%q): %v, want ok=%v", tt.url, err, tt.ok)
		}
	}
	if _, err := NewWebhook("https://hooks.example.com/", "", nil, WebhookOptions{}); !errors.Is(err, ErrWebhookSecret) {
		t.Errorf("no secret: %v", err)
	}
	if err := ValidateWebhookURL("http://hooks.example.com/"); err == nil || !strings.Contains(err.Error(), "hooks.example.com") {
		t.Errorf("the refusal does not name the host: %v", err)
	}
}
