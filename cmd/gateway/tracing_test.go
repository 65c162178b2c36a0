package main

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jetway-gateway/jetway/client"
	"github.com/jetway-gateway/jetway/internal/jaegertest"
	"github.com/jetway-gateway/jetway/internal/mockmodel"
	"github.com/jetway-gateway/jetway/internal/telemetry"
)

// The tracing tests run the gateway with tracing on (every request
// sampled, exported every 50 ms) against a real Jaeger, and read back the
// span tree of one request through Jaeger's query API.

// traceWithin bounds how long a trace takes to be queryable: the export
// interval, Jaeger's batch and a busy machine.
const traceWithin = 30 * time.Second

func tracingEnv(j *jaegertest.Jaeger) map[string]string {
	return map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": j.OTLP, "OTEL_TRACES_SAMPLER": "parentbased_always_on",
		"OTEL_BSP_SCHEDULE_DELAY": "50"}
}

// postChat posts one non-streaming chat completion to the OpenAI door.
func postChat(t *testing.T, g *gw, token, requestID, traceparent, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+g.Addr+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", requestID)
	if traceparent != "" {
		req.Header.Set("traceparent", traceparent)
	}
	rsp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	rsp.Body.Close()
	return rsp
}

// childOf fails unless span's parent is parent.
func childOf(t *testing.T, tr jaegertest.Trace, span, parent jaegertest.Span) {
	t.Helper()
	if span.Parent() != parent.SpanID {
		t.Fatalf("%s's parent is %s, want %s (%s): %s", span.OperationName, span.Parent(), parent.SpanID,
			parent.OperationName, jaegertest.Describe([]jaegertest.Trace{tr}))
	}
}

func wantTags(t *testing.T, s jaegertest.Span, tags map[string]string) {
	t.Helper()
	for k, v := range tags {
		if got := s.Tag(k); got != v {
			t.Errorf("%s: %s = %q, want %q", s.OperationName, k, got, v)
		}
	}
}

// TestTracePlainAnswer: an answer through the OpenAI door with the
// client's traceparent is one trace under the client's span: the root,
// admission with its quota reservation, the model call with its first
// token, delivery, the usage record and the settlement, with the GenAI
// attributes; the trace id is in the log lines and the usage record. A
// request with an invalid traceparent starts a trace of its own.
func TestTracePlainAnswer(t *testing.T) {
	j := jaegertest.Start(t)
	w := newWorld(t, fastPace())
	usage := t.TempDir()
	env := tracingEnv(j)
	env["JETWAY_USAGE_DIR"] = usage
	g := w.start(env)
	tok := w.token("trace-user", "contoso", "contoso-support", time.Hour)
	const clientTrace, clientSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	body := `{"model":"mock-a","messages":[{"role":"user","content":"trace me"}],"max_tokens":64}`
	if rsp := postChat(t, g, tok, "trace-plain-1", "00-"+clientTrace+"-"+clientSpan+"-01", body); rsp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", rsp.StatusCode)
	}
	tr := j.AwaitTrace(t, clientTrace, traceWithin, "jetway.request", "jetway.admission", "jetway.quota.reserve",
		"chat mock-a", "jetway.deliver", "jetway.usage.record", "jetway.quota.settle")
	root := tr.One(t, "jetway.request")
	if root.Parent() != clientSpan {
		t.Fatalf("root's parent %q, want the client's span %s", root.Parent(), clientSpan)
	}
	wantTags(t, root, map[string]string{"jetway.request_id": "trace-plain-1", "jetway.door": "openai",
		"jetway.tenant": "contoso", "jetway.app": "support-assistant", "jetway.outcome": "done",
		"gen_ai.operation.name": "chat", "gen_ai.provider.name": "aws.bedrock", "gen_ai.system": "aws.bedrock",
		"gen_ai.request.model": "mock-a", "gen_ai.response.model": "mock-a", "gen_ai.request.max_tokens": "64"})
	if root.Tag("gen_ai.usage.output_tokens") == "" || root.Tag("gen_ai.usage.output_tokens") == "0" || !root.HasEvent("first_token") {
		t.Errorf("root lacks output tokens or the first_token event: %+v", root)
	}
	adm := tr.One(t, "jetway.admission")
	childOf(t, tr, adm, root)
	wantTags(t, adm, map[string]string{"jetway.auth.result": "verified"})
	res := tr.One(t, "jetway.quota.reserve")
	childOf(t, tr, res, adm)
	wantTags(t, res, map[string]string{"jetway.quota.outcome": "reserved", "jetway.quota.lease": "false"})
	call := tr.One(t, "chat mock-a")
	childOf(t, tr, call, root)
	wantTags(t, call, map[string]string{"gen_ai.request.model": "mock-a", "jetway.attempt": "0", "gen_ai.operation.name": "chat"})
	if !call.HasEvent("first_token") {
		t.Errorf("the model call lacks its first_token event")
	}
	for _, name := range []string{"jetway.deliver", "jetway.usage.record", "jetway.quota.settle"} {
		childOf(t, tr, tr.One(t, name), root)
	}
	for _, s := range tr.Spans {
		for _, tag := range s.Tags {
			if strings.Contains(tag.Key, "prompt") || strings.Contains(tag.Key, "message") || strings.Contains(tag.Key, "content") {
				t.Errorf("span %s carries %s: no prompt or answer text in spans", s.OperationName, tag.Key)
			}
		}
	}
	if l := g.logs.Await("completed", "trace-plain-1", 1, 10*time.Second); len(l) != 1 || l[0]["trace_id"] != clientTrace {
		t.Fatalf("completed line %v lacks trace_id %s", l, clientTrace)
	}

	// An invalid traceparent is ignored: a new trace, found by request id.
	if rsp := postChat(t, g, tok, "trace-plain-2", "00-zzzz-bad", body); rsp.StatusCode != http.StatusOK {
		t.Fatalf("status %d with an invalid traceparent", rsp.StatusCode)
	}
	other := j.Await(t, "jetway", "jetway.request_id", "trace-plain-2", traceWithin, "jetway.request", "jetway.quota.settle")
	if other.TraceID == clientTrace || other.One(t, "jetway.request").Parent() != "" {
		t.Fatalf("a request with an invalid traceparent joined trace %s", other.TraceID)
	}

	g.stop(t) // flushes the usage records
	recs, _, err := telemetry.ReadUsageDir(usage)
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]string{}
	for _, r := range recs {
		found[r.RequestID] = r.TraceID
	}
	if found["trace-plain-1"] != clientTrace || found["trace-plain-2"] != other.TraceID {
		t.Fatalf("usage records' trace ids %v, want %s and %s", found, clientTrace, other.TraceID)
	}
}

// TestTraceFallback: a model that throttles hands the call to the
// fallback: two model-call spans under the root, the second saying
// from what and why.
func TestTraceFallback(t *testing.T) {
	j := jaegertest.Start(t)
	w := newWorld(t, fastPace())
	g := w.start(tracingEnv(j))
	c := w.dial(g, "trace-fallback", nil)
	req := ask("fallback traced")
	req.Model = "mock-throttle"
	const clientTrace = "5bf92f3577b34da6a3ce929d0e0e4737"
	req.Traceparent = "00-" + clientTrace + "-00f067aa0ba902b8-01" // the WebSocket frame's field
	call, err := c.Send(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if done, err := waitCall(t, call, 20*time.Second); err != nil || done.Model != "mock-b" {
		t.Fatalf("%+v %v, want mock-b's answer", done, err)
	}
	tr := j.Await(t, "jetway", "jetway.request_id", call.ID, traceWithin, "jetway.request", "chat mock-throttle", "chat mock-b",
		"jetway.quota.settle")
	root := tr.One(t, "jetway.request")
	if tr.TraceID != clientTrace || root.Parent() != "00f067aa0ba902b8" {
		t.Fatalf("trace %s under %s, want the frame's traceparent", tr.TraceID, root.Parent())
	}
	wantTags(t, root, map[string]string{"jetway.door": "ws", "jetway.outcome": "done", "gen_ai.response.model": "mock-b",
		"jetway.fallback.from": "mock-throttle"})
	failed, answered := tr.One(t, "chat mock-throttle"), tr.One(t, "chat mock-b")
	childOf(t, tr, failed, root)
	childOf(t, tr, answered, root)
	wantTags(t, failed, map[string]string{"error.type": "throttled", "otel.status_code": "ERROR"})
	wantTags(t, answered, map[string]string{"jetway.fallback.from": "mock-throttle", "jetway.fallback.reason": "throttled"})
	if !answered.HasEvent("first_token") || failed.HasEvent("first_token") {
		t.Fatalf("first_token events: throttled %v, fallback %v", failed.HasEvent("first_token"), answered.HasEvent("first_token"))
	}
}

// TestTraceQuotaRefusal: a request over its quota is a trace whose
// reservation span says exceeded, with no model call.
func TestTraceQuotaRefusal(t *testing.T) {
	j := jaegertest.Start(t)
	w := newWorld(t, fastPace())
	g := w.start(tracingEnv(j))
	tok := w.token("trace-tiny", "fabrikam", "fabrikam-tiny", time.Hour)
	c := w.dial(g, "trace-tiny", func(o *client.Options) { o.Token = func(context.Context) (string, error) { return tok, nil } })
	call, err := c.Send(context.Background(), ask("too much for a tiny quota"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := waitCall(t, call, 20*time.Second); err == nil || !strings.Contains(err.Error(), "quota") {
		t.Fatalf("err %v, want quota_exceeded", err)
	}
	tr := j.Await(t, "jetway", "jetway.request_id", call.ID, traceWithin, "jetway.request", "jetway.admission", "jetway.quota.reserve")
	root, adm, res := tr.One(t, "jetway.request"), tr.One(t, "jetway.admission"), tr.One(t, "jetway.quota.reserve")
	wantTags(t, root, map[string]string{"jetway.outcome": "quota_exceeded", "otel.status_code": "ERROR", "jetway.app": "tiny"})
	wantTags(t, res, map[string]string{"jetway.quota.outcome": "exceeded", "jetway.quota.window": "minute"})
	childOf(t, tr, adm, root)
	childOf(t, tr, res, adm)
	for _, s := range tr.Spans {
		if strings.HasPrefix(s.OperationName, "chat ") || s.OperationName == "jetway.deliver" {
			t.Fatalf("a refused request has span %s", s.OperationName)
		}
	}
}

// TestTraceRefusedBeforeAdmission: a request the door refuses (invalid)
// is a trace of its root span alone, with the error, under the client's
// traceparent.
func TestTraceRefusedBeforeAdmission(t *testing.T) {
	j := jaegertest.Start(t)
	w := newWorld(t, fastPace())
	g := w.start(tracingEnv(j))
	tok := w.token("trace-invalid", "contoso", "contoso-support", time.Hour)
	const clientTrace = "0af7651916cd43dd8448eb211c80319c"
	rsp := postChat(t, g, tok, "trace-invalid-1", "00-"+clientTrace+"-b7ad6b7169203331-01",
		`{"model":"mock-a","messages":[{"role":"user","content":"x"}],"max_tokens":-5}`)
	if rsp.StatusCode != http.StatusBadRequest {
		t.Fatalf("status %d, want 400", rsp.StatusCode)
	}
	tr := j.AwaitTrace(t, clientTrace, traceWithin, "jetway.request", "jetway.usage.record")
	root := tr.One(t, "jetway.request")
	wantTags(t, root, map[string]string{"jetway.outcome": "invalid_request", "otel.status_code": "ERROR",
		"jetway.request_id": "trace-invalid-1", "jetway.door": "openai"})
	for _, s := range tr.Spans {
		if s.OperationName == "jetway.admission" || strings.HasPrefix(s.OperationName, "chat ") {
			t.Fatalf("a request refused before admission has span %s", s.OperationName)
		}
	}
}

// TestTraceResumeOnSecondServer: a client cut off from the server that
// runs its request resumes on another; that server's follow joins the
// request's trace (the record carries its traceparent): one trace, two
// servers.
func TestTraceResumeOnSecondServer(t *testing.T) {
	j := jaegertest.Start(t)
	w := newWorld(t, mockmodel.Options{TTFT: time.Millisecond, PerToken: 3 * time.Millisecond})
	cl := w.cluster(2, tracingEnv(j))
	cut := make(chan struct{})
	c := w.dial(cl.servers[0].gw, "trace-resume", func(o *client.Options) {
		o.URLs = cl.urls(0)
		o.Reconnect = true
	})
	req := ask("resume traced")
	req.OnChunk = func(seq int, _ string) {
		if seq == 50 {
			close(cut)
		}
	}
	call, err := c.Send(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	<-cut
	c.Drop() // the reconnect goes to the other server
	if _, err := waitCall(t, call, 30*time.Second); err != nil {
		t.Fatalf("resume on another server: %v", err)
	}
	tr := j.Await(t, "jetway", "jetway.request_id", call.ID, traceWithin, "jetway.request", "jetway.record.create",
		"jetway.follow", "jetway.record.finish", "jetway.quota.settle")
	root, follow := tr.One(t, "jetway.request"), tr.One(t, "jetway.follow")
	childOf(t, tr, follow, root)
	childOf(t, tr, tr.One(t, "jetway.record.create"), root)
	if a, b := tr.Instance(root), tr.Instance(follow); a == "" || a == b {
		t.Fatalf("root on %q and follow on %q: want two servers", a, b)
	}
	wantTags(t, follow, map[string]string{"jetway.request_id": call.ID})
	if l := cl.servers[1].logs.Await("adopted", call.ID, 1, 10*time.Second); len(l) != 1 {
		t.Fatalf("server 1 did not follow the record")
	}
}
