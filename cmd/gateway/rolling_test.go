package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jetway-gateway/jetway/client"
	"github.com/jetway-gateway/jetway/internal/dynalitetest"
	"github.com/jetway-gateway/jetway/internal/gatewaytest"
	"github.com/jetway-gateway/jetway/internal/mockmodel"
	"github.com/jetway-gateway/jetway/internal/stream"
)

// previousRelease is the binary of the release before this one
// (testdata/previous-release), built from git.
func previousRelease(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("testdata/previous-release")
	if err != nil {
		t.Fatal(err)
	}
	rev, _, _ := strings.Cut(string(b), "\n")
	return gatewaytest.BinaryAt(t, strings.TrimSpace(rev))
}

// TestRollingDeployAcrossReleases: during a rolling deploy the fleet runs
// the previous release and this one on the same tables. Requests started
// on either are resumed, cancelled and taken over (owner SIGKILLed) on the
// other, both ways: 0 lost, each answer exact and whole, one model call per
// request. Quota leases pass between the two (Test 2 on a mixed fleet):
// nothing past the limit.
func TestRollingDeployAcrossReleases(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the previous release")
	}
	prev := previousRelease(t)
	t.Run("requests", func(t *testing.T) {
		w := newWorld(t, mockmodel.Options{TTFT: time.Millisecond, PerToken: 10 * time.Millisecond})
		cl := w.clusterOf([]string{prev, ""}, nil)
		old, cur := 0, 1
		calls := int64(0)
		for _, dir := range []struct {
			name     string
			from, to int
		}{{"previous to this", old, cur}, {"this to previous", cur, old}} {
			t.Run("resume "+dir.name, func(t *testing.T) {
				prompt := "rolling resume " + dir.name
				call, c := startCut(t, w, cl, dir.from, prompt, 50)
				done, err := waitCall(t, call, 30*time.Second)
				if err != nil {
					t.Fatalf("resume from %s: %v", dir.name, err)
				}
				calls++
				if st := call.Stats(); done.Text != expected("mock-a", prompt, 300) || call.Text() != done.Text || st.OutOfOrder != 0 || st.Terminals != 1 {
					t.Fatalf("answer after a resume %s is wrong: stats %+v", dir.name, st)
				}
				if len(cl.servers[dir.to].logs.Await("adopted", call.ID, 1, 10*time.Second)) != 1 {
					t.Fatalf("server %d did not follow the record", dir.to)
				}
				_ = c.Close()
			})
			t.Run("cancel "+dir.name, func(t *testing.T) {
				prompt := "rolling cancel " + dir.name
				full := expected("mock-a", prompt, 300)
				abandoned := w.mock.Abandoned()
				live := make(chan struct{})
				var liveOnce sync.Once
				call, c := startCut(t, w, cl, dir.from, prompt, 20, func(seq int) {
					if seq >= 40 {
						liveOnce.Do(func() { close(live) })
					}
				})
				select {
				case <-live:
				case <-time.After(20 * time.Second):
					t.Fatalf("%s: no chunk past seq 40 after the cut", call.ID)
				}
				if err := c.Cancel(call.ID); err != nil {
					t.Fatal(err)
				}
				_, err := waitCall(t, call, 20*time.Second)
				calls++
				e, ok := err.(*client.Error)
				if !ok || e.Code != "cancelled" || e.Text == nil || len(*e.Text) >= len(full) || *e.Text != full[:len(*e.Text)] || call.Text() != *e.Text {
					t.Fatalf("%s: %v, want a cancelled terminal with the streamed prefix", call.ID, err)
				}
				waitFor(t, 10*time.Second, func() bool { return w.mock.Abandoned() > abandoned },
					func() string { return "the owner's model call did not stop" })
				_ = c.Close()
			})
		}
		if n := w.mock.Requests("mock-a"); n != calls {
			t.Fatalf("%d model calls for %d requests: a resume or cancel across releases called the model again", n, calls)
		}

		// Takeover both ways: the owner is killed mid-answer; the other
		// release ends each of its requests (done or interrupted with the
		// saved text). First the previous release dies, then this one
		// beside a previous release started in its place.
		store := stream.NewDynamoStore(dynalitetest.Client(t, cl.endpoint), cl.requests)
		takeover := func(name string, victim, survivor *proc) {
			t.Run("takeover "+name, func(t *testing.T) {
				const n = 4
				var calls []*client.Call
				started := make(chan struct{}, n)
				for i := range n {
					user := fmt.Sprintf("rolling-kill-%s-%d", strings.ReplaceAll(name, " ", "-"), i)
					c := w.dial(victim.gw, user, func(o *client.Options) {
						o.URLs, o.Reconnect = []string{victim.URL(), survivor.URL()}, true
					})
					req := ask(fmt.Sprintf("rolling takeover %s %d", name, i))
					var once sync.Once
					req.OnChunk = func(seq int, _ string) {
						if seq == 30 {
							once.Do(func() { started <- struct{}{} })
						}
					}
					calls = append(calls, mustSend(t, c, req))
				}
				for range n {
					<-started
				}
				victim.signal(syscall.SIGKILL)
				victim.wait(t, 10*time.Second)
				for i, call := range calls {
					want := expected("mock-a", fmt.Sprintf("rolling takeover %s %d", name, i), 300)
					done, err := waitCall(t, call, 40*time.Second)
					switch e, _ := err.(*client.Error); {
					case err == nil:
						if done.Text != want {
							t.Fatalf("%s: done with the wrong text", call.ID)
						}
					case e != nil && e.Code == "interrupted":
						if e.Text == nil || *e.Text != want[:len(*e.Text)] {
							t.Fatalf("%s: interrupted frame %+v does not carry the saved text", call.ID, e)
						}
					default:
						t.Fatalf("%s: %v, want done or interrupted", call.ID, err)
					}
					user := fmt.Sprintf("rolling-kill-%s-%d", strings.ReplaceAll(name, " ", "-"), i)
					rec, err := store.Get(context.Background(), supportOwner(user), call.ID)
					if err != nil || rec == nil || !rec.Ended() {
						t.Fatalf("%s: record %+v (%v) is not ended", call.ID, rec, err)
					}
				}
			})
		}
		takeover("previous to this", cl.servers[old], cl.servers[cur])
		replacement := w.startBinary(prev, cl.serverEnv(cl.env, 2))
		takeover("this to previous", cl.servers[cur], replacement)
	})
	t.Run("quota leases", func(t *testing.T) {
		r := runTest2(t, nil, false, prev, "")
		if r.used != r.charged {
			t.Fatalf("settled usage %d != charged in done frames %d on a mixed fleet", r.used, r.charged)
		}
	})
}

// startCut sends prompt on server `from` of cl (its client fails over to
// the next server) and cuts the connection once seq `cut` arrived: the
// reconnect goes to the other server. onSeq sees every seq delivered.
func startCut(t *testing.T, w *world, cl *cluster, from int, prompt string, cut int, onSeq ...func(int)) (*client.Call, *client.Client) {
	t.Helper()
	cutNow := make(chan struct{})
	var once sync.Once
	c := w.dial(cl.servers[from].gw, "rolling-"+strings.ReplaceAll(prompt, " ", "-"), func(o *client.Options) {
		o.URLs, o.Reconnect = cl.urls(from), true
	})
	req := ask(prompt)
	req.OnChunk = func(seq int, _ string) {
		if seq == cut {
			once.Do(func() { close(cutNow) })
		}
		for _, f := range onSeq {
			f(seq)
		}
	}
	call := mustSend(t, c, req)
	select {
	case <-cutNow:
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: seq %d never arrived", call.ID, cut)
	}
	c.Drop()
	return call, c
}
