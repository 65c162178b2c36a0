package gateway_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

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
		log, _, err := g.Submit(context.Background(), alice, request(fmt.Sprintf("refused-%02d", i), "not-a-model"))
		switch {
		case i < 3 && (err != nil || terminal(t, log)["code"] != protocol.CodeModelNotAllowed):
			t.Fatalf("refusal %d within the budget: %v, want model_not_allowed", i, err)
		case i >= 3:
			pe := gateway.Failure(err)
			if pe.Code != protocol.CodeRateLimited || !pe.Retryable || pe.RetryAfterMs <= 0 {
				t.Fatalf("refusal %d past the budget: %v (%+v), want rate_limited", i, err, pe)
			}
		}
	}
	if _, _, err := g.Submit(context.Background(), alice, request("allowed-01", "")); gateway.Failure(err).Code != protocol.CodeRateLimited {
		t.Fatalf("an allowed request while the budget is spent: %v, want rate_limited", err)
	}
	if _, err := g.Resume(context.Background(), alice, "refused-01"); gateway.Failure(err).Code != protocol.CodeRateLimited {
		t.Fatalf("a resume while the budget is spent: %v, want rate_limited", err)
	}
	bob := alice
	bob.Principal.Subject = "user-2"
	log, _, err := g.Submit(context.Background(), bob, request("bob-0001", ""))
	if err != nil || terminal(t, log)["type"] != "done" {
		t.Fatalf("another user: %v", err)
	}
	clk.add(time.Second / 2) // a token back
	log, _, err = g.Submit(context.Background(), alice, request("allowed-02", ""))
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
		log, _, err := g.Submit(context.Background(), caller("chat"), request(fmt.Sprintf("busy-%04d", i), ""))
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if f := terminal(t, log); f["code"] != protocol.CodeBusy {
			t.Fatalf("request %d: %v, want busy", i, f)
		}
	}
	e.settle(g)
}

// invalidFrames are request frames that fail validation at decode, each
// with the message its refusal names (issue 23).
var invalidFrames = []struct{ frame, msg string }{
	{`{"type":"request","request_id":"bad-temp-01","temperature":5,"messages":[{"role":"user","content":"hi"}]}`, "temperature must be between 0 and 1"},
	{`{"type":"request","request_id":"bad-b64-001","messages":[{"role":"user","content":[{"type":"image","format":"png","data":"not base64!"}]}]}`, "messages[0].content[0].data is not valid base64"},
	{`{"type":"request","request_id":"bad-block-1","messages":[{"role":"user","content":[{"type":"video","data":"AAAA"}]}]}`, `messages[0].content[0].type "video" is unknown`},
	{`{"type":"request","request_id":"big-image-1","messages":[{"role":"user","content":[{"type":"image","format":"png","data":"` +
		strings.Repeat("AAAA", protocol.MaxImageBytes/3+1) + `"}]}]}`, "over the 3932160 bytes an image may have"},
	{`{"type":"request","request_id":"no-msgs-001","messages":[]}`, "messages must not be empty"},
	{`{"type":"request","request_id":"neg-max-001","max_tokens":-1,"messages":[{"role":"user","content":"hi"}]}`, "max_tokens must be >= 0"},
	{`{"type":"request","request_id":"choice-0001","tool_choice":"auto","messages":[{"role":"user","content":"hi"}]}`, "tool_choice needs tools"},
	{`{"type":"request","request_id":"budget-0001","max_tokens":2000,"reasoning":{"budget_tokens":2000},"messages":[{"role":"user","content":"hi"}]}`, "less than max_tokens"},
	{`{"type":"request","request_id":"bad-type-01","temperature":"hot","messages":[{"role":"user","content":"hi"}]}`, `field "temperature" has the wrong type`},
}

// TestDoorRefusalsCostWhatEveryRefusalCosts: a request that failed
// validation at the door (Refuse) gets a usage record and a rejected line
// and takes a token of its user's refusal budget, as a refusal in the
// pipeline does; another frame a rejected line and a token. Past the
// budget the user gets rate_limited, other users are served.
func TestDoorRefusalsCostWhatEveryRefusalCosts(t *testing.T) {
	e := newEnv(t)
	core, logs := observer.New(zap.InfoLevel)
	e.logger = zap.New(core)
	g := e.gateway(reply("cheap", "ok"), gateway.Options{MaxRefusalsPerUser: 100})
	alice := caller("chat")
	for _, c := range invalidFrames {
		in, err := protocol.Decode([]byte(c.frame))
		if err == nil {
			t.Fatalf("%s: decoded", c.frame[:60])
		}
		err = g.Refuse(context.Background(), alice, frameRequest(in), err)
		if pe := gateway.Failure(err); pe.Code != protocol.CodeInvalidRequest || !strings.Contains(pe.Message, c.msg) {
			t.Errorf("%s: %+v, want invalid_request naming %q", in.RequestID, pe, c.msg)
		}
	}
	in, err := protocol.Decode([]byte(`{"type":"bogus","request_id":"bogus-00001"}`))
	if gateway.Failure(g.Refuse(context.Background(), alice, frameRequest(in), err)).Code != protocol.CodeInvalidRequest {
		t.Fatal("an unknown frame type")
	}
	// The same user's next request is served.
	log, _, err := g.Submit(context.Background(), alice, request("after-refusals", ""))
	if err != nil || terminal(t, log)["type"] != "done" {
		t.Fatalf("after the refusals: %v", err)
	}
	recs := e.settle(g)
	if len(recs) != len(invalidFrames)+1 {
		t.Fatalf("%d usage records, want %d (one per refused request, one answer; none for a frame of no request)", len(recs), len(invalidFrames)+1)
	}
	for i, c := range invalidFrames {
		r := recs[i]
		if !strings.Contains(c.frame, `"`+r.RequestID+`"`) || r.Outcome != protocol.CodeInvalidRequest || r.Status != 400 ||
			r.Door != gateway.DoorWS || r.User != "user-1" || r.InputTokens+r.OutputTokens != 0 || r.CostUSD != 0 {
			t.Errorf("usage record %d: %+v", i, r)
		}
	}
	rejected := logs.FilterMessage("rejected")
	if rejected.Len() != len(invalidFrames)+1 {
		t.Fatalf("%d rejected lines, want %d", rejected.Len(), len(invalidFrames)+1)
	}
	for _, l := range rejected.All() {
		if l.ContextMap()["code"] != protocol.CodeInvalidRequest || l.ContextMap()["request_id"] == "" {
			t.Errorf("rejected line %v", l.ContextMap())
		}
	}

	// The refusal budget counts them: two refusals at the door spend a
	// budget of two, and the user's next request is refused rate_limited.
	e2 := newEnv(t)
	g2 := e2.gateway(reply("cheap", "ok"), gateway.Options{MaxRefusalsPerUser: 2, Now: (&clock{now: time.Unix(1_800_000_000, 0)}).Now})
	for _, c := range invalidFrames[:2] {
		in, err := protocol.Decode([]byte(c.frame))
		if gateway.Failure(g2.Refuse(context.Background(), alice, frameRequest(in), err)).Code != protocol.CodeInvalidRequest {
			t.Fatal("within the budget")
		}
	}
	in, err = protocol.Decode([]byte(invalidFrames[2].frame))
	if pe := gateway.Failure(g2.Refuse(context.Background(), alice, frameRequest(in), err)); pe.Code != protocol.CodeRateLimited {
		t.Fatalf("a refusal past the budget: %+v, want rate_limited", pe)
	}
	if _, _, err := g2.Submit(context.Background(), alice, request("allowed-0001", "")); gateway.Failure(err).Code != protocol.CodeRateLimited {
		t.Fatalf("a valid request past the budget: %v, want rate_limited", err)
	}
	bob := alice
	bob.Principal.Subject = "user-2"
	log, _, err = g2.Submit(context.Background(), bob, request("bob-00000001", ""))
	if err != nil || terminal(t, log)["type"] != "done" {
		t.Fatalf("another user: %v", err)
	}
	if recs := e2.settle(g2); len(recs) != 3 {
		t.Fatalf("%d usage records, want 3 (2 refusals, bob's answer)", len(recs))
	}
}

// TestCancelOfUnknownIDsIsGated: cancels of ids that are not running
// here are refusals like resumes of unknown ids: past the user's budget
// they are refused rate_limited at once, and the log does not grow with them.
func TestCancelOfUnknownIDsIsGated(t *testing.T) {
	e := newEnv(t)
	core, logs := observer.New(zap.InfoLevel)
	e.logger = zap.New(core)
	clk := &clock{now: time.Unix(1_800_000_000, 0)}
	g := e.gateway(reply("cheap", "ok"), gateway.Options{MaxRefusalsPerUser: 3, Now: clk.Now})
	alice := caller("chat")
	for i := range 2000 {
		err := g.Cancel(context.Background(), alice, fmt.Sprintf("unknown-%04d", i))
		code := gateway.Failure(err).Code
		switch {
		case i < 3 && code != protocol.CodeNotFound:
			t.Fatalf("cancel %d within the budget: %v, want not_found", i, err)
		case i >= 3 && code != protocol.CodeRateLimited:
			t.Fatalf("cancel %d past the budget: %v, want rate_limited", i, err)
		}
	}
	if lines := logs.FilterMessage("rejected").Len(); lines > 4 {
		t.Fatalf("%d rejected lines for 2,000 cancels of unknown ids, want at most 4", lines)
	}
	clk.add(2 * time.Second)
	if err := g.Cancel(context.Background(), alice, "unknown-again"); gateway.Failure(err).Code != protocol.CodeNotFound {
		t.Fatalf("after the budget refilled: %v, want not_found", err)
	}
}
