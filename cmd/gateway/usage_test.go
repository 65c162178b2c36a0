package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jetway-gateway/jetway/client"
	"github.com/jetway-gateway/jetway/internal/mockmodel"
	"github.com/jetway-gateway/jetway/internal/telemetry"
)

// TestUsageRecordsForEveryOutcome: one usage record per request whatever its
// outcome, in the S3-like partition layout; metrics over HTTP; the report.
func TestUsageRecordsForEveryOutcome(t *testing.T) {
	w := newWorld(t, mockmodel.Options{TTFT: time.Millisecond, PerToken: 2 * time.Millisecond})
	dir := t.TempDir()
	g := w.start(map[string]string{"JETWAY_USAGE_DIR": dir, "JETWAY_SERVER_ID": "usage-task"})
	zero := 0.0
	dialApp := func(sub, tenant, clientID string) *client.Client {
		tok := w.token(sub, tenant, clientID, time.Hour)
		return w.dial(g, sub, func(o *client.Options) { o.Token = func(context.Context) (string, error) { return tok, nil } })
	}
	want := map[string]string{} // request id -> outcome
	send := func(c *client.Client, id string, mod func(*client.Request), outcome string) *client.Call {
		req := ask("usage " + id)
		req.RequestID = id
		if mod != nil {
			mod(&req)
		}
		call, err := c.Send(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		want[id] = outcome
		return call
	}
	support := dialApp("usage-user", "contoso", "contoso-support")
	faq := dialApp("usage-faq", "contoso", "contoso-faq")
	tiny := dialApp("usage-tiny", "fabrikam", "fabrikam-tiny")
	nofb := dialApp("usage-nofb", "contoso", "contoso-nofallback")

	calls := []*client.Call{
		send(support, "usage-done-1", nil, "done"),
		send(support, "usage-notallowed-1", func(r *client.Request) { r.Model = "mock-cheap" }, "model_not_allowed"),
		send(tiny, "usage-quota-1", nil, "quota_exceeded"),
		send(nofb, "usage-modelerr-1", func(r *client.Request) { r.Model = "mock-fail-after-5" }, "model_error"),
	}
	first := send(faq, "usage-cache-miss", func(r *client.Request) { r.Temperature = &zero; r.Messages[0].Content = "same" }, "done")
	waitCall(t, first, 20*time.Second)
	calls = append(calls, send(faq, "usage-cache-hit", func(r *client.Request) { r.Temperature = &zero; r.Messages[0].Content = "same" }, "done"))
	cancelMe := send(support, "usage-cancel-1", nil, "cancelled")
	<-cancelMe.Accepted()
	if err := support.Cancel(cancelMe.ID); err != nil {
		t.Fatal(err)
	}
	calls = append(calls, cancelMe)
	for _, c := range calls {
		waitCall(t, c, 20*time.Second)
	}

	// Metrics over HTTP, before the drain.
	resp, err := http.Get("http://" + g.Admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, m := range []string{`jetway_requests_total{app="support-assistant",model="mock-a",outcome="done",tenant="contoso"} 1`,
		`jetway_quota_rejections_total{app="tiny",scope="app",tenant="fabrikam",window="minute"} 1`,
		"jetway_active_sessions 4", "jetway_ttft_seconds_bucket"} {
		if !strings.Contains(string(body), m) {
			t.Errorf("/metrics lacks %q", m)
		}
	}
	if strings.Contains(string(body), "usage-user") {
		t.Errorf("/metrics carries a user id as a label")
	}

	g.stop(t) // the drain flushes the usage sink
	got := map[string]telemetry.UsageRecord{}
	err = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if !strings.HasPrefix(rel, "year=") || !strings.Contains(rel, "/month=") || !strings.Contains(rel, "/hour=") {
			t.Errorf("usage file %s is not in the year=/month=/day=/hour= layout", rel)
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var r telemetry.UsageRecord
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				t.Fatalf("bad usage line %s: %v", sc.Text(), err)
			}
			if _, dup := got[r.RequestID]; dup {
				t.Errorf("two usage records for %s", r.RequestID)
			}
			got[r.RequestID] = r
		}
		return sc.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	for id, outcome := range want {
		r, ok := got[id]
		if !ok {
			t.Errorf("no usage record for %s (%s)", id, outcome)
			continue
		}
		if r.Outcome != outcome || r.Server != "usage-task" || r.SessionID == "" || r.Tenant == "" || r.User == "" || r.TS.IsZero() {
			t.Errorf("%s: record %+v, want outcome %s", id, r, outcome)
		}
	}
	if r := got["usage-cache-hit"]; !r.Cached || r.OutputTokens != 0 {
		t.Errorf("cache hit record %+v", r)
	}
	if r := got["usage-done-1"]; r.InputTokens == 0 || r.OutputTokens != 300 || r.CostUSD <= 0 || r.ReservedTokens == 0 || r.Chunks != 300 {
		t.Errorf("done record %+v", r)
	}
	// The local report reads the same files.
	var out bytes.Buffer
	if err := run(context.Background(), []string{"usage", "--dir", dir, "--by", "tenant,app"}, func(string) string { return "" }, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "support-assistant") || !strings.Contains(out.String(), "fabrikam") {
		t.Fatalf("usage report:\n%s", out.String())
	}
}
