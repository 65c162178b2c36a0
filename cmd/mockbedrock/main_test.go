package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	"go.uber.org/goleak"

	"github.com/jetway-gateway/jetway/internal/mockmodel"
	"github.com/jetway-gateway/jetway/internal/mockmodel/mockmodeltest"
	"github.com/jetway-gateway/jetway/internal/router"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// chanWriter hands every write to the test.
type chanWriter chan string

func (w chanWriter) Write(p []byte) (int, error) {
	w <- string(p)
	return len(p), nil
}

func env(kv map[string]string) func(string) string {
	return func(k string) string { return kv[k] }
}

var addrRE = regexp.MustCompile(`listening on (https?://\S+)`)

// startRun runs the command and returns its URL and a channel with run's result.
func startRun(t *testing.T, ctx context.Context, args []string, getenv func(string) string) (string, <-chan error) {
	t.Helper()
	out := make(chanWriter, 16)
	done := make(chan error, 1)
	go func() { done <- run(ctx, args, getenv, out) }()
	select {
	case line := <-out:
		m := addrRE.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("unexpected first line %q", line)
		}
		return m[1], done
	case err := <-done:
		t.Fatalf("run ended before listening: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("run did not print its address")
	}
	return "", nil
}

func TestRunServesAndShutsDown(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	url, done := startRun(t, ctx, []string{"--listen", "127.0.0.1:0", "--ttft", "0", "--per-token", "0"},
		env(map[string]string{"MOCKBEDROCK_TOKENS": "12", "MOCKBEDROCK_LISTEN": "256.0.0.1:1"}))

	b := router.NewBedrock(mockmodeltest.Client(t, url))
	c := router.Call{ModelID: "mock-a", Messages: []router.Message{{Role: "user", Content: "hi"}}}
	var deltas []string
	res, err := b.Stream(t.Context(), c, func(s string) { deltas = append(deltas, s) })
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(deltas, mockmodel.Tokens("mock-a", "", []string{"hi"}, 12)) || res.StopReason != "end_turn" {
		t.Errorf("answer %q (%+v), want the 12 tokens of the environment setting", strings.Join(deltas, ""), res)
	}

	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get(url + "/stats")
	if err != nil {
		t.Fatal(err)
	}
	var st mockmodel.Stats
	err = json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if err != nil || st.Requests["mock-a"] != 1 {
		t.Errorf("stats %+v (err %v), want mock-a 1", st, err)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return after the context ended")
	}
}

// A stalled stream ends when its client goes away, so it does not hold up
// shutdown afterwards.
func TestRunShutdownWithClientGone(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	url, done := startRun(t, ctx, []string{"--listen", "127.0.0.1:0"}, env(nil))

	callCtx, cancelCall := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancelCall()
	b := router.NewBedrock(mockmodeltest.Client(t, url))
	_, err := b.Stream(callCtx, router.Call{ModelID: "mock-stall", Messages: []router.Message{{Role: "user", Content: "hi"}}}, func(string) {})
	if err == nil {
		t.Fatal("a stall must not succeed")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(shutdownGrace / 2):
		t.Fatal("shutdown waited for a stream whose client had gone")
	}
}

func TestRunRejectsBadSettings(t *testing.T) {
	cases := []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--tokens", "0"}, nil, "--tokens"},
		{[]string{"--ttft", "-1s"}, nil, "--ttft"},
		{[]string{"--per-token", "soon"}, nil, "per-token"},
		{[]string{"extra"}, nil, "unexpected arguments"},
		{nil, map[string]string{"MOCKBEDROCK_TTFT": "later"}, "MOCKBEDROCK_TTFT"},
		{nil, map[string]string{"MOCKBEDROCK_TOKENS": "many"}, "MOCKBEDROCK_TOKENS"},
		{[]string{"--listen", "127.0.0.1:-5"}, nil, "127.0.0.1:-5"},
		{[]string{"--profile", "mock-a=mock-b"}, nil, "--profile"},
		{[]string{"--profile", "arn:aws:bedrock:us-west-2:123456789012:application-inference-profile/p"}, nil, "--profile"},
		{nil, map[string]string{"MOCKBEDROCK_PROFILES": "nonsense"}, "--profile"},
		{[]string{"--tier-pace", "turbo=1s"}, nil, "--tier-pace"},
		{[]string{"--tier-pace", "flex=soon"}, nil, "--tier-pace"},
		{[]string{"--tier-pace", "flex=1s/-1s"}, nil, "--tier-pace"},
		{nil, map[string]string{"MOCKBEDROCK_TIER_PACE": "flex"}, "--tier-pace"},
	}
	for _, c := range cases {
		err := run(t.Context(), c.args, env(c.env), chanWriter(make(chan string, 16)))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("run(%q, %v) = %v, want an error about %s", c.args, c.env, err, c.want)
		}
	}
	if err := run(t.Context(), []string{"--help"}, env(nil), chanWriter(make(chan string, 16))); err != nil {
		t.Errorf("--help: %v", err)
	}
}

// With --tls the mock serves HTTPS (HTTP/2 offered) with a certificate it
// writes to --tls-cert-out; a Bedrock client trusting that file streams a
// whole answer, and the negotiated protocol is HTTP/2, as with AWS.
func TestRunServesTLS(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	certFile := filepath.Join(t.TempDir(), "mock.pem")
	url, done := startRun(t, ctx, []string{"--listen", "127.0.0.1:0", "--tls", "--tls-cert-out", certFile,
		"--ttft", "0", "--per-token", "0", "--tokens", "7"}, env(nil))
	if !strings.HasPrefix(url, "https://") {
		t.Fatalf("--tls listens on %s", url)
	}
	pemBytes, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemBytes) {
		t.Fatalf("--tls-cert-out holds no certificate: %q", pemBytes)
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	var proto string
	hc := doFunc(func(r *http.Request) (*http.Response, error) {
		resp, err := tr.RoundTrip(r)
		if err == nil {
			proto = resp.Proto
		}
		return resp, err
	})
	b := router.NewBedrock(bedrockruntime.New(bedrockruntime.Options{Region: "us-east-1",
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""), BaseEndpoint: aws.String(url),
		HTTPClient: hc, RetryMaxAttempts: 1}))
	var deltas []string
	_, err = b.Stream(t.Context(), router.Call{ModelID: "mock-a", Messages: []router.Message{{Role: "user", Content: "hi"}}},
		func(s string) { deltas = append(deltas, s) })
	if err != nil || !slices.Equal(deltas, mockmodel.Tokens("mock-a", "", []string{"hi"}, 7)) {
		t.Fatalf("answer over TLS %q, err %v", deltas, err)
	}
	if proto != "HTTP/2.0" {
		t.Errorf("negotiated %q, want HTTP/2.0", proto)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return after the context ended")
	}
}

type doFunc func(*http.Request) (*http.Response, error)

func (f doFunc) Do(r *http.Request) (*http.Response, error) { return f(r) }

// Profiles and tier paces from flags and the environment, and the control
// endpoints, through the command.
func TestRunProfilesTierPacesAndFaults(t *testing.T) {
	const (
		fromFlag = "arn:aws:bedrock:us-west-2:123456789012:application-inference-profile/flag"
		fromEnv  = "arn:aws:bedrock:us-west-2:123456789012:application-inference-profile/env"
		slow     = 300 * time.Millisecond
	)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	url, done := startRun(t, ctx, []string{"--listen", "127.0.0.1:0", "--ttft", "0", "--per-token", "0", "--tokens", "4",
		"--profile", fromFlag + "=mock-throttle", "--tier-pace", "flex=300ms"},
		env(map[string]string{"MOCKBEDROCK_PROFILES": fromEnv + "=mock-a", "MOCKBEDROCK_TIER_PACE": "priority=1h/1h", "MOCKBEDROCK_REGION": "eu-west-1"}))

	west := router.NewBedrock(mockmodeltest.ClientIn(t, url, "us-west-2"))
	hi := []router.Message{{Role: "user", Content: "hi"}}
	if _, err := west.Stream(t.Context(), router.Call{ModelID: fromFlag, Messages: hi}, func(string) {}); err == nil {
		t.Error("the --profile of mock-throttle answered")
	}
	// The flag replaced the environment's list.
	if _, err := west.Stream(t.Context(), router.Call{ModelID: fromEnv, Messages: hi}, func(string) {}); err == nil {
		t.Error("MOCKBEDROCK_PROFILES applied despite --profile")
	}
	start := time.Now()
	var first time.Duration
	res, err := west.Stream(t.Context(), router.Call{ModelID: "mock-a", Messages: hi, ServiceTier: "flex"}, func(string) {
		if first == 0 {
			first = time.Since(start)
		}
	})
	if err != nil || res.ServiceTier != "flex" || first < slow {
		t.Errorf("flex: %+v, %v, first token after %v (want at least %v)", res, err, first, slow)
	}
	// --tier-pace replaced MOCKBEDROCK_TIER_PACE: priority is not an hour away.
	callCtx, cancelCall := context.WithTimeout(t.Context(), time.Minute)
	defer cancelCall()
	if _, err := west.Stream(callCtx, router.Call{ModelID: "mock-a", Messages: hi, ServiceTier: "priority"}, func(string) {}); err != nil {
		t.Errorf("priority: %v", err)
	}

	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPut, url+"/faults", strings.NewReader(`{"region":"us-west-2","model":"mock-a","unavailable":true}`))
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("PUT /faults: %d", resp.StatusCode)
	}
	if _, err := west.Stream(t.Context(), router.Call{ModelID: "mock-a", Messages: hi}, func(string) {}); err == nil {
		t.Error("mock-a in us-west-2 answered despite an unavailable knob")
	}
	if _, err := router.NewBedrock(mockmodeltest.ClientIn(t, url, "us-east-1")).Stream(t.Context(), router.Call{ModelID: "mock-a", Messages: hi}, func(string) {}); err != nil {
		t.Errorf("mock-a in us-east-1: %v", err)
	}
	// An unsigned call is in --region (here from MOCKBEDROCK_REGION).
	req, _ = http.NewRequestWithContext(t.Context(), http.MethodPost, url+"/model/mock-b/converse-stream",
		strings.NewReader(`{"messages":[{"role":"user","content":[{"text":"hi"}]}]}`))
	if resp, err = hc.Do(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()

	resp, err = hc.Get(url + "/stats")
	if err != nil {
		t.Fatal(err)
	}
	var st mockmodel.Stats
	err = json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if err != nil || st.ByRegion["us-west-2"]["mock-a"] != 3 || st.ByRegion["us-east-1"]["mock-a"] != 1 ||
		st.ByRegion["eu-west-1"]["mock-b"] != 1 || st.ByTier["flex"] != 1 || st.ByProfile[fromFlag] != 1 || st.UnavailableByRegion["us-west-2"] != 1 {
		t.Errorf("stats %+v (err %v)", st, err)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return after the context ended")
	}
}
