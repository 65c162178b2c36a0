package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetway-gateway/jetway/client"
	"github.com/jetway-gateway/jetway/internal/dynalitetest"
	"github.com/jetway-gateway/jetway/internal/mockmodel"
	"github.com/jetway-gateway/jetway/internal/quota"
)

// TestArticleTest2 is the article's quota squeeze against shared DynamoDB:
// three gateway processes share one dynalite table; 20 clients of the same
// Fabrikam user hammer its 20,000 tokens/hour. Nothing may slip past.
func TestArticleTest2(t *testing.T) {
	w := newWorld(t, mockmodel.Options{TTFT: time.Millisecond, PerToken: time.Millisecond})
	endpoint := dynalitetest.Start(t)
	table := dynalitetest.TableName(t)
	aws := map[string]string{"AWS_ENDPOINT_URL_DYNAMODB": endpoint, "JETWAY_QUOTA_TABLE": table}
	out := w.runCommand(aws, "tables", "create")
	if !strings.Contains(out, table) {
		t.Fatalf("tables create: %s", out)
	}
	w.runCommand(aws, "tables", "create") // idempotent
	var servers []*proc
	for i := 0; i < 3; i++ {
		servers = append(servers, w.startProcess(map[string]string{
			"AWS_ENDPOINT_URL_DYNAMODB": endpoint, "JETWAY_QUOTA_TABLE": table, "JETWAY_SERVER_ID": fmt.Sprintf("task-%d", i)}))
	}
	tok := w.token("fabrikam-user", "fabrikam", "fabrikam-docs", time.Hour)

	type tally struct {
		boarded, rejected429, other, neverHeard, charged int64
	}
	var mu sync.Mutex
	var total tally
	var wg sync.WaitGroup
	deadline := time.Now().Add(6 * time.Second)
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			c := w.dial(servers[i%3].gw, "fabrikam-user", func(o *client.Options) {
				o.Token = func(context.Context) (string, error) { return tok, nil }
			})
			for n := 0; time.Now().Before(deadline); n++ {
				call, err := c.Send(context.Background(), ask(fmt.Sprintf("summarize doc %d-%d", i, n)))
				if err != nil {
					t.Errorf("send: %v", err)
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				done, err := call.Wait(ctx)
				timedOut := ctx.Err() != nil
				cancel()
				mu.Lock()
				switch e, _ := err.(*client.Error); {
				case timedOut:
					total.neverHeard++
				case err == nil:
					total.boarded++
					total.charged += done.Usage.InputTokens + done.Usage.OutputTokens
				case e != nil && e.Code == "quota_exceeded":
					total.rejected429++
					if e.Status != 429 || e.Message != "Token quota exceeded" || e.RetryAfterMs <= 0 || e.Scope != "app" || e.Window != "hour" {
						t.Errorf("unclean 429: %+v", e)
					}
				default:
					total.other++
					t.Errorf("unexpected outcome: %v", err)
				}
				mu.Unlock()
			}
		}(i)
	}
	wg.Wait()

	// Settlement is off the client's path: wait until the counters settle.
	q := quota.New(quota.NewDynamoStore(dynalitetest.Client(t, endpoint), table), quota.Options{})
	scope := quota.AppScope("fabrikam", "document-summarizer")
	var used int64
	waitFor(t, 15*time.Second, func() bool {
		u, err := q.Usage(context.Background(), scope, quota.Hour)
		used = u.Tokens
		return err == nil && used == total.charged
	}, func() string { return fmt.Sprintf("settled usage %d, charged in done frames %d", used, total.charged) })

	calls := w.mock.Requests("mock-a")
	t.Logf("Test 2: boarded=%d clean429=%d past_limit=%d never_heard=%d settled=%d/20000 model_calls=%d",
		total.boarded, total.rejected429, max(0, used-20000), total.neverHeard, used, calls)
	if total.boarded == 0 || total.rejected429 == 0 || total.neverHeard != 0 || total.other != 0 {
		t.Fatalf("Test 2 tally %+v", total)
	}
	if used > 20000 {
		t.Fatalf("settled usage %d passed the 20,000 limit", used)
	}
	if calls != total.boarded {
		t.Fatalf("model calls %d != boarded %d: a rejected request reached the model", calls, total.boarded)
	}
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, within time.Duration, cond func() bool, what func() string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %s: %s", within, what())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
