package telemetry

import (
	"math"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// scrape fetches /metrics over HTTP and parses the text format.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	return fams
}

// find returns the metric of family name whose labels include want.
func find(t *testing.T, fams map[string]*dto.MetricFamily, name string, want map[string]string) *dto.Metric {
	t.Helper()
	f := fams[name]
	if f == nil {
		t.Fatalf("no metric family %s", name)
	}
next:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		return m
	}
	t.Fatalf("%s has no series with labels %v", name, want)
	return nil
}

func TestMetricsScrapedOverHTTP(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(srv.Close)

	m.SessionOpened()
	m.SessionOpened()
	m.SessionOpened()
	m.SessionClosed()
	m.RequestStarted()
	m.RequestStarted()
	m.RequestFinished()
	m.ObserveRequest(UsageRecord{Tenant: "contoso", App: "support", Model: "haiku", Outcome: "done", Status: 200,
		InputTokens: 100, OutputTokens: 250, TTFTMs: 300, LatencyMs: 2000, Chunks: 10})
	m.ObserveRequest(UsageRecord{Tenant: "contoso", App: "support", Model: "haiku", Outcome: "done", Status: 200,
		InputTokens: 50, OutputTokens: 50, TTFTMs: 100, LatencyMs: 900, Chunks: 5})
	m.ObserveRequest(UsageRecord{Tenant: "contoso", App: "support", Outcome: "quota_exceeded", Status: 429})
	m.QuotaRejected("contoso", "support", "user", "hour")
	m.SlowConsumerClosed()
	m.ConnectionRejected("unauthorized")
	m.ConnectionRejected("unauthorized")
	m.ObserveDynamoDB("requests", "checkpoint", "ok", 8*time.Millisecond)
	m.ObserveDynamoDB("requests", "checkpoint", "throttled", 30*time.Millisecond)
	m.ObserveBedrock("haiku", 2*time.Second, "")
	m.ObserveBedrock("haiku", time.Second, "throttled")
	m.SetBreakerState("haiku", "", BreakerOpen)
	m.UsageRecordsSent(SinkFirehose, 7)
	m.UsageRecordsFailed(SinkFirehose, 2)
	m.UsageRecordsDropped(SinkFile, DropBufferFull, 3)
	m.AttachmentBytesInFlight(5 << 20)
	m.AttachmentFrameRefused()
	m.SessionMoved(MoveBalance)
	m.SessionMoved(MoveBalance)
	m.SessionMoved(MoveBusy)
	m.SessionMoved("from a client") // not in the set: "other"
	m.UnauthenticatedRefusal("openai")
	m.UnauthenticatedRefusal("openai")
	m.AuthCacheLookup(true)
	m.AuthCacheLookup(true)
	m.AuthCacheLookup(false)

	fams := scrape(t, srv.URL)
	gauge := func(name string, labels map[string]string) float64 {
		return find(t, fams, name, labels).GetGauge().GetValue()
	}
	counter := func(name string, labels map[string]string) float64 {
		return find(t, fams, name, labels).GetCounter().GetValue()
	}
	hist := func(name string, labels map[string]string) *dto.Histogram {
		return find(t, fams, name, labels).GetHistogram()
	}
	checks := []struct {
		what      string
		got, want float64
	}{
		{"active_sessions", gauge("jetway_active_sessions", nil), 2},
		{"in flight", gauge("jetway_requests_in_flight", nil), 1},
		{"requests done", counter("jetway_requests_total", map[string]string{"tenant": "contoso", "app": "support", "model": "haiku", "outcome": "done"}), 2},
		{"requests 429 (no model: none)", counter("jetway_requests_total", map[string]string{"model": "none", "outcome": "quota_exceeded"}), 1},
		{"input tokens", counter("jetway_tokens_total", map[string]string{"model": "haiku", "direction": "input"}), 150},
		{"output tokens", counter("jetway_tokens_total", map[string]string{"model": "haiku", "direction": "output"}), 300},
		{"chunks", counter("jetway_chunks_sent_total", nil), 15},
		{"slow consumer", counter("jetway_slow_consumer_closes_total", nil), 1},
		{"quota rejections", counter("jetway_quota_rejections_total", map[string]string{"tenant": "contoso", "app": "support", "scope": "user", "window": "hour"}), 1},
		{"dynamodb throttled", counter("jetway_dynamodb_calls_total", map[string]string{"table": "requests", "op": "checkpoint", "outcome": "throttled"}), 1},
		{"dynamodb ok", counter("jetway_dynamodb_calls_total", map[string]string{"table": "requests", "op": "checkpoint", "outcome": "ok"}), 1},
		{"bedrock errors", counter("jetway_bedrock_errors_total", map[string]string{"model": "haiku", "kind": "throttled"}), 1},
		{"breaker", gauge("jetway_breaker_state", map[string]string{"model": "haiku"}), 2},
		{"usage sent", counter("jetway_usage_records_sent_total", map[string]string{"sink": "firehose"}), 7},
		{"usage failed", counter("jetway_usage_records_failed_total", map[string]string{"sink": "firehose"}), 2},
		{"moved balance", counter("jetway_sessions_moved_total", map[string]string{"reason": "balance"}), 2},
		{"moved busy", counter("jetway_sessions_moved_total", map[string]string{"reason": "busy"}), 1},
		{"moved other", counter("jetway_sessions_moved_total", map[string]string{"reason": "other"}), 1},
		{"usage dropped", counter("jetway_usage_records_dropped_total", map[string]string{"sink": "file", "reason": "buffer_full"}), 3},
		{"attachment bytes in flight", gauge("jetway_attachment_bytes_in_flight", nil), 5 << 20},
		{"attachment frames refused", counter("jetway_attachment_frames_refused_total", nil), 1},
		{"unauthenticated refusals", counter("jetway_unauthenticated_refusals_total", map[string]string{"door": "openai"}), 2},
		{"auth cache hits", counter("jetway_auth_cache_lookups_total", map[string]string{"result": "hit"}), 2},
		{"auth cache misses", counter("jetway_auth_cache_lookups_total", map[string]string{"result": "miss"}), 1},
		{"connections rejected", counter("jetway_connections_rejected_total", map[string]string{"reason": "unauthorized"}), 2},
		{"ttft count", float64(hist("jetway_ttft_seconds", map[string]string{"model": "haiku"}).GetSampleCount()), 2},
		{"ttft sum", hist("jetway_ttft_seconds", map[string]string{"model": "haiku"}).GetSampleSum(), 0.4},
		{"latency count (done only)", float64(hist("jetway_request_duration_seconds", map[string]string{"model": "haiku"}).GetSampleCount()), 2},
		{"dynamodb latency count", float64(hist("jetway_dynamodb_call_duration_seconds", map[string]string{"table": "requests", "op": "checkpoint"}).GetSampleCount()), 2},
		{"bedrock latency sum", hist("jetway_bedrock_call_duration_seconds", map[string]string{"model": "haiku"}).GetSampleSum(), 3},
	}
	for _, c := range checks {
		if math.Abs(c.got-c.want) > 1e-9 {
			t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
		}
	}
	// The 429 request sent no chunk: no TTFT series for model "none".
	for _, s := range fams["jetway_ttft_seconds"].GetMetric() {
		for _, l := range s.GetLabel() {
			if l.GetName() == "model" && l.GetValue() == "none" {
				t.Errorf("TTFT observed for a request with no chunk")
			}
		}
	}
	// Buckets span 1 ms to 60 s.
	var bounds []float64
	for _, b := range hist("jetway_ttft_seconds", map[string]string{"model": "haiku"}).GetBucket() {
		if !math.IsInf(b.GetUpperBound(), 1) {
			bounds = append(bounds, b.GetUpperBound())
		}
	}
	if bounds[0] != 0.001 || bounds[len(bounds)-1] != 60 {
		t.Errorf("buckets %v, want 0.001..60", bounds)
	}
	// No label anywhere carries a user or request id.
	for name, f := range fams {
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				switch l.GetName() {
				case "user", "request_id", "session_id", "sub":
					t.Errorf("%s has label %s", name, l.GetName())
				}
			}
		}
	}
}

func TestNilMetricsIsNoOp(t *testing.T) {
	var m *Metrics
	m.SessionOpened()
	m.SessionClosed()
	m.RequestStarted()
	m.RequestFinished()
	m.ObserveRequest(UsageRecord{Outcome: "done"})
	m.SlowConsumerClosed()
	m.ConnectionRejected("x")
	m.QuotaRejected("t", "a", "user", "hour")
	m.ObserveDynamoDB("cache", "get", "ok", time.Millisecond)
	m.ObserveBedrock("m", time.Millisecond, "")
	m.SetBreakerState("m", "", BreakerClosed)
	m.UsageRecordsSent("file", 1)
	m.UsageRecordsFailed("file", 1)
	m.UsageRecordsDropped("file", DropBufferFull, 1)
	m.SetEMF(nil)
}

// A model id outside the configuration is one "other" series, however many
// distinct strings clients send.
func TestLimitModelsFoldsUnknownIDs(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	m.LimitModels([]string{"claude"})
	for i := 0; i < 100; i++ {
		m.ObserveRequest(UsageRecord{Tenant: "contoso", App: "chat", Model: "junk-" + string(rune('a'+i%26)) + time.Duration(i).String(), Outcome: "model_not_allowed"})
	}
	m.ObserveRequest(UsageRecord{Tenant: "contoso", App: "chat", Model: "claude", Outcome: OutcomeDone})
	m.ObserveBedrock("unknown", time.Millisecond, "throttled")
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	fams := scrape(t, srv.URL)
	if n := len(fams["jetway_requests_total"].GetMetric()); n != 2 {
		t.Fatalf("requests_total has %d series, want 2 (claude, other)", n)
	}
	if v := find(t, fams, "jetway_requests_total", map[string]string{"model": OtherModel}).GetCounter().GetValue(); v != 100 {
		t.Fatalf("other = %v, want 100", v)
	}
	find(t, fams, "jetway_requests_total", map[string]string{"model": "claude"})
	find(t, fams, "jetway_bedrock_errors_total", map[string]string{"model": OtherModel})
}
