package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jetway-gateway/jetway/client"
	"github.com/jetway-gateway/jetway/internal/dynalitetest"
	"github.com/jetway-gateway/jetway/internal/mockmodel"
	"github.com/jetway-gateway/jetway/internal/quota"
	"github.com/jetway-gateway/jetway/internal/stream"
)

// cluster is n gateway processes sharing dynalite (quota and request records).
type cluster struct {
	servers  []*proc
	endpoint string
	quota    string
	requests string
	env      map[string]string // every server's settings (beside its id)
}

func (w *world) cluster(n int, extra map[string]string) *cluster {
	w.t.Helper()
	return w.clusterOf(make([]string, n), extra)
}

// clusterOf is a cluster whose server i runs binary bins[i] ("" is this
// release's).
func (w *world) clusterOf(bins []string, extra map[string]string) *cluster {
	w.t.Helper()
	cl := &cluster{endpoint: dynalitetest.Start(w.t), quota: dynalitetest.TableName(w.t), requests: dynalitetest.TableName(w.t) + "-req"}
	env := map[string]string{"AWS_ENDPOINT_URL_DYNAMODB": cl.endpoint, "JETWAY_QUOTA_TABLE": cl.quota,
		"JETWAY_REQUESTS_TABLE": cl.requests, "JETWAY_CHECKPOINT_INTERVAL": "300ms",
		"JETWAY_RESUME_POLL_INTERVAL": "100ms"}
	for k, v := range extra {
		env[k] = v
	}
	w.runCommand(env, "tables", "create")
	for i, bin := range bins {
		cl.servers = append(cl.servers, w.startBinary(bin, cl.serverEnv(env, i)))
	}
	cl.env = env
	return cl
}

// serverEnv is the cluster's settings for its server i.
func (cl *cluster) serverEnv(env map[string]string, i int) map[string]string {
	e := map[string]string{"JETWAY_SERVER_ID": fmt.Sprintf("task-%d", i)}
	for k, v := range env {
		e[k] = v
	}
	return e
}

func (cl *cluster) urls(first int) []string {
	var out []string
	for i := range cl.servers {
		out = append(out, cl.servers[(first+i)%len(cl.servers)].URL())
	}
	return out
}

// TestResumeOnAnotherServer: a client cut off from the server that owns its
// stream resumes on another one and gets the whole answer, exactly once.
func TestResumeOnAnotherServer(t *testing.T) {
	w := newWorld(t, mockmodel.Options{TTFT: time.Millisecond, PerToken: 3 * time.Millisecond})
	cl := w.cluster(2, nil)
	cut := make(chan struct{})
	lat := &resumeLatency{}
	c := w.dial(cl.servers[0].gw, "quinn", func(o *client.Options) {
		o.URLs = cl.urls(0)
		o.Reconnect = true
		o.OnState = lat.state
	})
	req := ask("cross-server resume")
	req.OnChunk = func(seq int, _ string) {
		if seq == 50 {
			close(cut)
		}
		lat.chunk()
	}
	call, err := c.Send(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	<-cut
	lat.dropped()
	c.Drop() // the reconnect goes to the next URL: the other server
	done, err := waitCall(t, call, 30*time.Second)
	if err != nil {
		t.Fatalf("resume on another server: %v", err)
	}
	t.Logf("cross-server resume: %s", lat.String())
	st := call.Stats()
	if done.Text != expected("mock-a", "cross-server resume", 300) || call.Text() != done.Text || st.OutOfOrder != 0 {
		t.Fatalf("answer after a cross-server resume is wrong: stats %+v", st)
	}
	if len(cl.servers[1].logs.Await("adopted", call.ID, 1, 10*time.Second)) != 1 {
		t.Fatalf("server 1 did not follow the record:\n%s", cl.servers[1].logs.String())
	}
	if n := w.mock.Requests("mock-a"); n != 1 {
		t.Fatalf("model calls %d, want 1", n)
	}
	// The same request sent to the other server is a resume there too: no second call.
	c2 := w.dial(cl.servers[1].gw, "quinn", nil)
	again, err := c2.Send(context.Background(), client.Request{RequestID: call.ID, Messages: req.Messages})
	if err != nil {
		t.Fatal(err)
	}
	if d, err := waitCall(t, again, 10*time.Second); err != nil || d.Text != done.Text {
		t.Fatalf("re-send on another server: %v", err)
	}
	if n := w.mock.Requests("mock-a"); n != 1 {
		t.Fatalf("model calls %d after a re-send elsewhere, want 1", n)
	}
}

// TestSIGKILLOwnerResolvesElsewhere: the server streaming answers dies; every
// affected request resolves through another server (done, or interrupted
// with the saved text), quota is settled, and no record stays running.
func TestSIGKILLOwnerResolvesElsewhere(t *testing.T) {
	w := newWorld(t, mockmodel.Options{TTFT: time.Millisecond, PerToken: 10 * time.Millisecond})
	cl := w.cluster(2, nil) // the fleet's default stale bound (10 s) and lease TTL (30 s)
	const n = 10
	var calls []*client.Call
	var clients []*client.Client
	started := make(chan struct{}, n)
	for i := 0; i < n; i++ {
		c := w.dial(cl.servers[0].gw, fmt.Sprintf("kill-user-%d", i), func(o *client.Options) { o.URLs = cl.urls(0); o.Reconnect = true })
		req := ask(fmt.Sprintf("killed mid-stream %d", i))
		var once sync.Once
		req.OnChunk = func(seq int, _ string) {
			if seq == 40 {
				once.Do(func() { started <- struct{}{} })
			}
		}
		call, err := c.Send(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		calls, clients = append(calls, call), append(clients, c)
	}
	for i := 0; i < n; i++ {
		<-started
	}
	killedAt := time.Now()
	var worst time.Duration
	cl.servers[0].signal(syscall.SIGKILL)
	cl.servers[0].wait(t, 10*time.Second)
	for i, call := range calls {
		done, err := waitCall(t, call, 30*time.Second)
		took := time.Since(killedAt)
		switch e, _ := err.(*client.Error); {
		case err == nil:
			if done.Text != expected("mock-a", fmt.Sprintf("killed mid-stream %d", i), 300) {
				t.Fatalf("%s: done with the wrong text", call.ID)
			}
		case e != nil && e.Code == "interrupted":
			// The saved text is what the last checkpoint held: a prefix of the answer.
			want := expected("mock-a", fmt.Sprintf("killed mid-stream %d", i), 300)
			if !e.Retryable || e.Text == nil || e.Chunks == nil || *e.Chunks == 0 || len(*e.Text) > len(want) || *e.Text != want[:len(*e.Text)] {
				t.Fatalf("%s: interrupted frame %+v does not carry the saved text", call.ID, e)
			}
		default:
			t.Fatalf("%s: %v, want done or interrupted", call.ID, err)
		}
		if took > 15*time.Second {
			t.Fatalf("%s resolved %s after the kill, want within 15s", call.ID, took)
		}
		worst = max(worst, took)
	}
	t.Logf("SIGKILL: %d streams resolved through the other server, the last %s after the kill", n, worst)
	// No record is left running, and the quota was settled (nothing stays reserved at max_tokens).
	store := stream.NewDynamoStore(dynalitetest.Client(t, cl.endpoint), cl.requests)
	for i, call := range calls {
		rec, err := store.Get(context.Background(), supportOwner(fmt.Sprintf("kill-user-%d", i)), call.ID)
		if err != nil || !rec.Ended() {
			t.Fatalf("%s: record %+v (%v) is not ended", call.ID, rec, err)
		}
	}
	// With quota leases (the default) the killed server's lease committed
	// its requests in flight at their reservations (~1,030 tokens each)
	// plus what it committed ahead (at least 4 requests). Once the fleet
	// judged it gone, a survivor ended each request at what it generated
	// (its reservation's rest refunded) and reclaimed the lease's
	// uncommitted room at once, well before the lease's 30 s TTL.
	ownerOf := func(p *proc) string {
		o, _ := p.logs.Find("listening", "")[0]["instance"].(string)
		return o
	}
	dead, alive := ownerOf(cl.servers[0]), ownerOf(cl.servers[1])
	qs := quota.NewDynamoStore(dynalitetest.Client(t, cl.endpoint), cl.quota)
	start, _ := quota.Hour.Bounds(time.Now())
	item := quota.Item{Scope: quota.AppScope("contoso", "support-assistant"), Window: quota.Hour, Start: start}
	after := w.dial(cl.servers[1].gw, "after-kill-user", nil)
	var st quota.ItemState
	for i := 0; ; i++ {
		var err error
		if st, err = qs.ReadItem(context.Background(), item); err != nil {
			t.Fatal(err)
		}
		if _, held := st.Leases[dead]; !held {
			break
		}
		if time.Since(killedAt) > 25*time.Second {
			t.Fatalf("the killed server's lease %+v was not reclaimed within 25s of the kill (its TTL is 30s)", st.Leases[dead])
		}
		if _, err := waitCall(t, mustSend(t, after, ask(fmt.Sprint("after the kill ", i))), 20*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	counted := st.Used.Tokens - st.Leases[alive].Granted.Tokens
	t.Logf("quota after the kill: the dead lease was reclaimed %s after the kill; %d tokens stay counted for its %d requests",
		time.Since(killedAt).Round(time.Millisecond), counted, n)
	// What its requests generated (well under half their reservations:
	// killed at seq 40-ish of 300) plus its commitment ahead, not their
	// whole reservations.
	if counted <= 0 || counted > int64(4+n/2)*1100 {
		t.Fatalf("%d tokens counted for the killed server, want what its %d requests generated plus its commitment ahead: <= %d",
			counted, n, (4+n/2)*1100)
	}
	_ = clients
}

// TestConnectionResetsAcrossServers injects 1-3 connection resets into each
// of 1,000 streams served by three servers: nothing lost, duplicated after
// dedupe, or reordered; exactly one terminal each; every text exact.
func TestConnectionResetsAcrossServers(t *testing.T) {
	if testing.Short() {
		t.Skip("long: run without -short")
	}
	w := newWorld(t, mockmodel.Options{TTFT: time.Millisecond, PerToken: 500 * time.Microsecond, Tokens: 120})
	// No server dies here, so no stream may end interrupted, however late
	// a checkpoint is on a starved machine: liveness comes from the fleet's
	// membership, with its default settings.
	cl := w.cluster(3, nil)
	const users, perUser = 50, 20 // 1,000 streams
	var mu sync.Mutex
	var bad []string
	resets, refusals := 0, 0 // refusals: busy before acceptance, sent again
	var wg sync.WaitGroup
	for u := 0; u < users; u++ {
		wg.Add(1)
		go func(u int) {
			defer wg.Done()
			c := w.dial(cl.servers[u%3].gw, fmt.Sprintf("reset-user-%d", u), func(o *client.Options) {
				o.URLs = cl.urls(u % 3)
				o.Reconnect = true
				o.MinBackoff = 10 * time.Millisecond
			})
			rng := rand.New(rand.NewPCG(uint64(u), 7))
			for r := 0; r < perUser; r++ {
				prompt := fmt.Sprintf("reset %d/%d", u, r)
				cuts := 1 + rng.IntN(3)
				at := map[int]bool{}
				for len(at) < cuts {
					at[1+rng.IntN(110)] = true
				}
				req := ask(prompt)
				req.MaxTokens = 120
				req.OnChunk = func(seq int, _ string) {
					if at[seq] {
						delete(at, seq)
						go c.Drop()
					}
				}
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				call, done, refused, err := sendRetryingRefusals(ctx, c, req)
				timedOut := ctx.Err() != nil
				cancel()
				if call == nil {
					t.Error(err)
					return
				}
				st := call.Stats()
				mu.Lock()
				resets += cuts - len(at)
				refusals += refused
				switch {
				case timedOut:
					bad = append(bad, call.ID+": never finished")
				case err != nil:
					bad = append(bad, fmt.Sprintf("%s: %v", call.ID, err))
				case done.Text != expected("mock-a", prompt, 120) || call.Text() != done.Text || st.OutOfOrder != 0 || st.Mismatch:
					bad = append(bad, fmt.Sprintf("%s: wrong text or order (%+v)", call.ID, st))
				}
				mu.Unlock()
			}
		}(u)
	}
	wg.Wait()
	t.Logf("1,000 streams, %d connection resets injected, %d refusals sent again, %d bad", resets, refusals, len(bad))
	if len(bad) > 0 {
		t.Fatalf("%d streams went wrong, first: %v", len(bad), bad[:min(5, len(bad))])
	}
	// A request re-sent to another server before its accepted frame arrived
	// starts a model call there beside the record's put; the put finds the
	// record and that call is stopped before it delivers anything. So does
	// one refused busy because its put failed (a slow store on a busy
	// machine): the client sends it again.
	stopped := 0
	for _, s := range cl.servers {
		stopped += len(s.logs.Find("follows_other_server", ""))
		for _, l := range s.logs.Find("rejected", "") {
			if l["code"] == "busy" {
				stopped++
			}
		}
	}
	if n := w.mock.Requests("mock-a"); n < users*perUser || n > int64(users*perUser+stopped) {
		t.Fatalf("model calls %d, want %d (one per request) plus at most the %d stopped duplicates", n, users*perUser, stopped)
	}
	t.Logf("model calls %d: %d requests, %d duplicates stopped", w.mock.Requests("mock-a"), users*perUser, stopped)
}

func mustSend(t *testing.T, c *client.Client, r client.Request) *client.Call {
	t.Helper()
	call, err := c.Send(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	return call
}
