package gateway_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jetway-gateway/jetway/internal/gateway"
	"github.com/jetway-gateway/jetway/internal/protocol"
	"github.com/jetway-gateway/jetway/internal/stream"
)

// clock is a settable Now.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *clock) add(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

// TestRefusalsAreRateBoundedPerUser: past MaxRefusalsPerUser refusals a
// second, a user's requests (allowed or not) and resumes are refused
// rate_limited at once, with no usage record; other users are untouched;
// once the budget refills the user is served again.
func TestRefusalsAreRateBoundedPerUser(t *testing.T) {
	e := newEnv(t)
	clk := &clock{now: time.Unix(1_800_000_000, 0)}
	g := e.gateway(reply("cheap", "ok"), gateway.Options{MaxRefusalsPerUser: 3, Now: clk.Now})
	alice := caller("chat")
	for i := range 10 {
		log, _, err := g.Submit(alice, request(fmt.Sprintf("refused-%02d", i), "not-a-model"))
		switch {
		case i < 3 && (err != nil || terminal(t, log)["code"] != protocol.CodeModelNotAllowed):
			t.Fatalf("refusal %d within the budget: %v, want model_not_allowed", i, err)
		case i >= 3:
			pe := gateway.ProtocolError(err)
			if pe.Code != protocol.CodeRateLimited || !pe.Retryable || pe.RetryAfterMs <= 0 {
				t.Fatalf("refusal %d past the budget: %v (%+v), want rate_limited", i, err, pe)
			}
		}
	}
	if _, _, err := g.Submit(alice, request("allowed-01", "")); gateway.ProtocolError(err).Code != protocol.CodeRateLimited {
		t.Fatalf("an allowed request while the budget is spent: %v, want rate_limited", err)
	}
	if _, err := g.Resume(alice, "refused-01"); gateway.ProtocolError(err).Code != protocol.CodeRateLimited {
		t.Fatalf("a resume while the budget is spent: %v, want rate_limited", err)
	}
	bob := alice
	bob.Principal.Subject = "user-2"
	log, _, err := g.Submit(bob, request("bob-0001", ""))
	if err != nil || terminal(t, log)["type"] != "done" {
		t.Fatalf("another user: %v", err)
	}
	clk.add(time.Second / 2) // a token back
	log, _, err = g.Submit(alice, request("allowed-02", ""))
	if err != nil || terminal(t, log)["type"] != "done" {
		t.Fatalf("after the budget refilled: %v", err)
	}
	recs := e.settle(g)
	if len(recs) != 5 {
		t.Fatalf("%d usage records, want 5 (3 refusals within the budget, 2 answers): %+v", len(recs), recs)
	}
}

// TestServerCausedRefusalsTakeNoBudget: busy (here: the request store
// failing) is the server's fault and never turns into rate_limited.
func TestServerCausedRefusalsTakeNoBudget(t *testing.T) {
	e := newEnv(t)
	e.records = failingCreate{stream.NewMemoryStore(nil)}
	g := e.gateway(reply("cheap", "ok"), gateway.Options{MaxRefusalsPerUser: 1})
	for i := range 5 {
		log, _, err := g.Submit(caller("chat"), request(fmt.Sprintf("busy-%04d", i), ""))
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if f := terminal(t, log); f["code"] != protocol.CodeBusy {
			t.Fatalf("request %d: %v, want busy", i, f)
		}
	}
	e.settle(g)
}
