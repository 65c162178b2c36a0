package main

import (
	"context"
	"testing"
	"time"

	"github.com/jetway-gateway/jetway/client"
	"github.com/jetway-gateway/jetway/internal/dynalitetest"
)

// TestResponseCache: a hit makes no model call, streams through the same
// protocol marked cached, is isolated between tenants and apps, applies only
// to deterministic requests, and is shared by two servers through DynamoDB.
func TestResponseCache(t *testing.T) {
	w := newWorld(t, fastPace())
	cl := w.cluster(2, map[string]string{"JETWAY_CACHE_TABLE": dynalitetest.TableName(t) + "-cache"})
	zero := 0.0
	dialApp := func(g *gw, sub, tenant, clientID string) *client.Client {
		tok := w.token(sub, tenant, clientID, time.Hour)
		return w.dial(g, sub, func(o *client.Options) { o.Token = func(context.Context) (string, error) { return tok, nil } })
	}
	askOnce := func(c *client.Client, temp *float64) (*client.Done, *client.Call) {
		t.Helper()
		req := ask("what is a jetway?")
		req.Temperature = temp
		call, err := c.Send(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		d, err := waitCall(t, call, 20*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return d, call
	}
	want := expected("mock-a", "what is a jetway?", 300)
	a := dialApp(cl.servers[0].gw, "faq-user", "contoso", "contoso-faq")
	first, _ := askOnce(a, &zero)
	if first.Cached || first.Text != want || w.mock.Requests("mock-a") != 1 {
		t.Fatalf("first answer: cached=%v calls=%d", first.Cached, w.mock.Requests("mock-a"))
	}
	hit, call := askOnce(a, &zero)
	if !hit.Cached || !call.AcceptedFrame().Cached || hit.Text != want || hit.Chunks != 300 || call.Text() != want {
		t.Fatalf("second answer not a full cache hit: %+v", hit)
	}
	t.Logf("cache hit: server ttft_ms=%d latency_ms=%d; client first chunk %s after send (miss: ttft_ms=%d)",
		hit.TTFTMs, hit.LatencyMs, call.FirstChunkAt().Sub(call.SentAt()), first.TTFTMs)
	if hit.Usage.OutputTokens != 0 || hit.Usage.InputTokens == 0 {
		t.Fatalf("a hit is charged the input estimate only: %+v", hit.Usage)
	}
	if n := w.mock.Requests("mock-a"); n != 1 {
		t.Fatalf("a cache hit called the model (%d calls)", n)
	}
	// The other server sees the same cache through DynamoDB.
	b := dialApp(cl.servers[1].gw, "faq-user-2", "contoso", "contoso-faq")
	if d, _ := askOnce(b, &zero); !d.Cached || d.Text != want || w.mock.Requests("mock-a") != 1 {
		t.Fatalf("server 1 missed the shared cache: cached=%v calls=%d", d.Cached, w.mock.Requests("mock-a"))
	}
	// Never shared across tenants or apps, and only for deterministic requests.
	if d, _ := askOnce(dialApp(cl.servers[0].gw, "fab-user", "fabrikam", "fabrikam-faq"), &zero); d.Cached {
		t.Fatal("another tenant's request hit the cache")
	}
	if d, _ := askOnce(dialApp(cl.servers[0].gw, "dev-user", "contoso", "contoso-dev"), &zero); d.Cached {
		t.Fatal("an app without a cache hit the cache")
	}
	if d, _ := askOnce(a, nil); d.Cached {
		t.Fatal("a request without temperature 0 hit the cache")
	}
	if n := w.mock.Requests("mock-a"); n != 4 {
		t.Fatalf("model calls %d, want 4", n)
	}
}
