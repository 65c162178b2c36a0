package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jetway-gateway/jetway/client"
	"github.com/jetway-gateway/jetway/internal/dynalitetest"
	"github.com/jetway-gateway/jetway/internal/mockmodel"
	"github.com/jetway-gateway/jetway/internal/quota"
	"github.com/jetway-gateway/jetway/internal/stream"
	"github.com/jetway-gateway/jetway/internal/telemetry"
)

// TestCancelReachesTheOwner: a client streams on server A, is cut off,
// reconnects to B, resumes there and cancels there. A stops its model call
// (the mock counts the stream abandoned before its end), the client gets
// exactly one `cancelled` terminal with the partial text, A's usage record
// says cancelled with the streamed output, and the quota is settled at
// that. It runs with the default checkpoint (1s) and poll (200ms)
// intervals and logs the cancel latency across servers
// (docs/benchmarks.md).
func TestCancelReachesTheOwner(t *testing.T) {
	const rounds, tokens = 5, 300
	w := newWorld(t, mockmodel.Options{TTFT: time.Millisecond, PerToken: 20 * time.Millisecond, Tokens: tokens})
	cl := w.cluster(2, map[string]string{"JETWAY_CHECKPOINT_INTERVAL": "1s", "JETWAY_RESUME_POLL_INTERVAL": "200ms"})
	a, b := cl.servers[0], cl.servers[1]
	var stops, terminals []time.Duration
	texts := map[string]string{} // request id -> the cancelled terminal's text
	owners := map[string]string{}
	for i := range rounds {
		user := fmt.Sprintf("cancel-user-%d", i)
		prompt := fmt.Sprintf("cancelled on another server %d", i)
		full := expected("mock-a", prompt, tokens)
		c := w.dial(a.gw, user, func(o *client.Options) { o.URLs = cl.urls(0); o.Reconnect = true })
		const liveAt = 40
		cut, live := make(chan struct{}), make(chan struct{})
		var cutOnce, liveOnce sync.Once
		req := ask(prompt)
		req.OnChunk = func(seq int, _ string) {
			switch {
			case seq >= liveAt:
				liveOnce.Do(func() { close(live) })
			case seq >= 20:
				cutOnce.Do(func() { close(cut) })
			}
		}
		call, err := c.Send(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		<-cut
		c.Drop() // the reconnect goes to the next URL: B, which follows A's record
		waitFor(t, 10*time.Second, func() bool { return len(b.logs.Find("adopted", call.ID)) == 1 },
			func() string { return "B never resumed " + call.ID })
		select {
		case <-live:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no chunk past seq %d through B", call.ID, liveAt)
		}
		// Chunks reach B's client in bursts, one poll after each of A's
		// checkpoints; a user's cancel falls anywhere in A's checkpoint
		// cycle, so each round cancels at another offset from a burst.
		<-time.After(time.Duration(i) * time.Second / rounds)
		var doneAt time.Time
		terminal := make(chan struct{})
		go func() { <-call.Done(); doneAt = time.Now(); close(terminal) }()

		sent := time.Now()
		if err := c.Cancel(call.ID); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for w.mock.Abandoned() < int64(i+1) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: A's model call did not stop within 10s of the cancel", call.ID)
			}
			<-time.After(time.Millisecond) // polling the mock with a deadline
		}
		stopped := time.Since(sent)
		_, err = waitCall(t, call, 10*time.Second)
		<-terminal
		stops, terminals = append(stops, stopped), append(terminals, doneAt.Sub(sent))

		e, ok := err.(*client.Error)
		if !ok || e.Code != "cancelled" || e.Text == nil || e.Chunks == nil {
			t.Fatalf("%s: %v, want a cancelled terminal carrying the streamed text", call.ID, err)
		}
		if *e.Chunks < liveAt || len(*e.Text) >= len(full) || *e.Text != full[:len(*e.Text)] || call.Text() != *e.Text {
			t.Fatalf("%s: cancelled after %d chunks with %d of %d bytes; the client assembled %d: want the streamed prefix",
				call.ID, *e.Chunks, len(*e.Text), len(full), len(call.Text()))
		}
		if st := call.Stats(); st.Terminals != 1 || st.OutOfOrder != 0 {
			t.Fatalf("%s: stats %+v, want exactly one terminal, in order", call.ID, st)
		}
		if n := w.mock.Requests("mock-a"); n != int64(i+1) {
			t.Fatalf("model calls %d after %d requests: a resume or cancel called the model again", n, i+1)
		}
		if len(b.logs.Await("cancel_sent_to_owner", call.ID, 1, 10*time.Second)) != 1 || len(a.logs.Await("cancelled_elsewhere", call.ID, 1, 10*time.Second)) != 1 ||
			len(b.logs.Find("interrupted", call.ID)) != 0 {
			t.Fatalf("%s: the cancel did not go B -> record -> A:\nA:\n%s\nB:\n%s", call.ID, a.logs.String(), b.logs.String())
		}
		texts[call.ID], owners[call.ID] = *e.Text, user
		_ = c.Close()
	}
	t.Logf("cancel across servers, %d rounds (checkpoint 1s, poll 200ms; load %s): cancel sent -> owner's model call stopped %s; -> cancelled terminal received %s",
		rounds, loadAverage(), spread(stops), spread(terminals))

	// The records end cancelled; nothing was left running.
	store := stream.NewDynamoStore(dynalitetest.Client(t, cl.endpoint), cl.requests)
	var charged int64
	for id, user := range owners {
		rec, err := store.Get(context.Background(), supportOwner(user), id)
		if err != nil || rec.State != stream.StateError || !rec.Cancelled || terminalCode(rec.Terminal) != "cancelled" {
			t.Fatalf("%s: record %+v (%v), want ended cancelled", id, rec, err)
		}
	}
	// A's usage records, after a drain flushed them: one each, cancelled, charging what was streamed.
	for _, p := range cl.servers {
		p.signal(syscall.SIGTERM)
	}
	for _, p := range cl.servers {
		if code := p.wait(t, 30*time.Second); code != 0 {
			t.Fatalf("gateway exited %d", code)
		}
	}
	recs := readUsage(t, w.env["JETWAY_USAGE_DIR"])
	for id, text := range texts {
		rs := recs[id]
		if len(rs) != 1 {
			t.Fatalf("%s: %d usage records, want 1: %+v", id, len(rs), rs)
		}
		r := rs[0]
		if r.Outcome != "cancelled" || r.Server != "task-0" || r.OutputTokens != quota.EstimateOutputTokens(len(text)) || r.InputTokens == 0 {
			t.Fatalf("%s: usage record %+v, want A's, cancelled, charging the %d streamed bytes", id, r, len(text))
		}
		charged += r.InputTokens + r.OutputTokens
	}
	q := quota.New(quota.NewDynamoStore(dynalitetest.Client(t, cl.endpoint), cl.quota), quota.Options{})
	u, err := q.Usage(context.Background(), quota.AppScope("contoso", "support-assistant"), quota.Hour)
	if err != nil || u.Tokens != charged {
		t.Fatalf("quota holds %+v (%v), want exactly the %d tokens the usage records charge", u, err, charged)
	}
}

// terminalCode is a terminal frame's error code ("" for done).
func terminalCode(frame []byte) string {
	var f struct{ Code string }
	_ = json.Unmarshal(frame, &f)
	return f.Code
}

// spread summarises durations as min / median / max.
func spread(ds []time.Duration) string {
	s := slices.Clone(ds)
	slices.Sort(s)
	return fmt.Sprintf("min %s, median %s, max %s", s[0].Round(time.Millisecond), s[len(s)/2].Round(time.Millisecond),
		s[len(s)-1].Round(time.Millisecond))
}

// readUsage reads every usage record under dir, by request id.
func readUsage(t *testing.T, dir string) map[string][]telemetry.UsageRecord {
	t.Helper()
	recs, skipped, err := telemetry.ReadUsageDir(dir)
	if err != nil || skipped != 0 {
		t.Fatalf("usage records under %s: %v (%d lines not records)", dir, err, skipped)
	}
	out := map[string][]telemetry.UsageRecord{}
	for _, r := range recs {
		out[r.RequestID] = append(out[r.RequestID], r)
	}
	return out
}

// loadAverage is /proc/loadavg's first three fields, to read beside a timing.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}
