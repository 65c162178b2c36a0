package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/jetway-gateway/jetway/client"
)

// webhookReceiver checks each event's signature, as a receiver does, and keeps it.
type webhookReceiver struct {
	secret string
	mu     sync.Mutex
	events []map[string]any
	bad    []string
}

func (r *webhookReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	mac := hmac.New(sha256.New, []byte(r.secret))
	mac.Write(body)
	want := "sha256=" + hex.EncodeToString(mac.Sum(nil))
	r.mu.Lock()
	defer r.mu.Unlock()
	if !hmac.Equal([]byte(req.Header.Get("X-Jetway-Signature")), []byte(want)) {
		r.bad = append(r.bad, string(body))
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	var ev map[string]any
	if err := json.Unmarshal(body, &ev); err != nil {
		r.bad = append(r.bad, string(body))
	}
	r.events = append(r.events, ev)
	w.WriteHeader(http.StatusNoContent)
}

func (r *webhookReceiver) snapshot() ([]map[string]any, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]map[string]any(nil), r.events...), append([]string(nil), r.bad...)
}

// TestAlertsOncePerThresholdAcrossFleet: three servers with quota leases
// and concurrent traffic run Fabrikam's 20,000 tokens an hour to its end;
// the webhook gets exactly one signed event per threshold (80, 90, 100)
// and window instance, whichever servers saw it.
func TestAlertsOncePerThresholdAcrossFleet(t *testing.T) {
	w := newWorld(t, fastPace())
	rec := &webhookReceiver{secret: "alert-secret"}
	hook := httptest.NewServer(rec)
	t.Cleanup(hook.Close)
	cl := w.cluster(3, map[string]string{"JETWAY_ALERT_WEBHOOK_URL": hook.URL, "JETWAY_ALERT_WEBHOOK_SECRET": rec.secret})
	var wg sync.WaitGroup
	for i, s := range cl.servers {
		for j := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c := w.dialApp(s.gw, fmt.Sprintf("reader-%d-%d", i, j), "fabrikam", "fabrikam-docs")
				for refused := 0; refused < 2; {
					req := ask("summarize")
					req.MaxTokens = 500
					call, err := c.Send(t.Context(), req)
					if err != nil {
						t.Error(err)
						return
					}
					_, err = waitCall(t, call, 30*time.Second)
					if e, ok := err.(*client.Error); ok && (e.Code == "quota_exceeded" || e.Code == "busy") {
						refused++
					} else if err != nil {
						t.Errorf("request: %v", err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	thresholds := map[float64]bool{}
	until(t, 30*time.Second, "events for 80, 90 and 100", func() string {
		evs, _ := rec.snapshot()
		for _, ev := range evs {
			thresholds[ev["threshold"].(float64)] = true
		}
		if thresholds[80] && thresholds[90] && thresholds[100] {
			return ""
		}
		return fmt.Sprintf("thresholds so far %v", thresholds)
	})
	time.Sleep(3 * time.Second) // a duplicate would come within the queue's sending
	evs, bad := rec.snapshot()
	if len(bad) > 0 {
		t.Fatalf("events with a bad signature or body: %v", bad)
	}
	seen := map[string]int{}
	for _, ev := range evs {
		if ev["type"] != "jetway.quota.threshold" || ev["tenant"] != "fabrikam" || ev["scope"] != "app" || ev["window"] != "hour" {
			t.Errorf("unexpected event %v", ev)
		}
		seen[fmt.Sprintf("%v %v %v", ev["window_resets_at"], ev["measure"], ev["threshold"])]++
	}
	for k, n := range seen {
		if n != 1 {
			t.Errorf("%d events for %s, want 1", n, k)
		}
	}
	t.Logf("%d events: %v", len(evs), seen)
}
