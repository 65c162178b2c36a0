package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetway-gateway/jetway/client"
	"github.com/jetway-gateway/jetway/internal/delayproxy"
	"github.com/jetway-gateway/jetway/internal/dynalitetest"
	"github.com/jetway-gateway/jetway/internal/mockmodel"
	"github.com/jetway-gateway/jetway/internal/stream"
)

// TestDynamoStallEndsNoLiveAnswer: three gateways with every table
// (quota leases, request records, the fleet's members) on one DynamoDB
// that stalls for 10 s while 30 answers stream (every call hangs: no
// error, no answer). Default settings. No server is gone, so no answer may
// end interrupted: every one finishes with its exact text, and after the
// stall every record catches up and ends with all its chunks.
func TestDynamoStallEndsNoLiveAnswer(t *testing.T) {
	const perServer, tokens, stall = 10, 300, 10 * time.Second
	w := newWorld(t, mockmodel.Options{TTFT: time.Millisecond, PerToken: 50 * time.Millisecond})
	endpoint := dynalitetest.Start(t)
	proxy, err := delayproxy.Start(strings.TrimPrefix(endpoint, "http://"), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	table := dynalitetest.TableName(t)
	env := map[string]string{"AWS_ENDPOINT_URL_DYNAMODB": endpoint, "JETWAY_QUOTA_TABLE": table, "JETWAY_REQUESTS_TABLE": table + "-req"}
	w.runCommand(env, "tables", "create")
	env["AWS_ENDPOINT_URL_DYNAMODB"] = "http://" + proxy.Addr()
	var servers []*proc
	for i := range 3 {
		e := map[string]string{"JETWAY_SERVER_ID": fmt.Sprintf("task-%d", i)}
		for k, v := range env {
			e[k] = v
		}
		servers = append(servers, w.startProcess(e))
	}

	type asked struct {
		call   *client.Call
		prompt string
	}
	var calls []asked
	started := make(chan struct{}, 3*perServer)
	for i, p := range servers {
		for j := range perServer {
			prompt := fmt.Sprintf("through the stall %d-%d", i, j)
			c := w.dial(p.gw, fmt.Sprintf("stall-user-%d-%d", i, j), nil)
			req := ask(prompt)
			var once sync.Once
			req.OnChunk = func(seq int, _ string) {
				if seq == 20 {
					once.Do(func() { started <- struct{}{} })
				}
			}
			calls = append(calls, asked{mustSend(t, c, req), prompt})
		}
	}
	for range calls {
		select {
		case <-started:
		case <-time.After(60 * time.Second):
			t.Fatal("the answers never started")
		}
	}
	proxy.Stall()
	stalledAt := time.Now()
	<-time.After(stall) // the stall itself is the test's input, not a wait for an event
	proxy.Resume()
	t.Logf("DynamoDB stalled for %s", time.Since(stalledAt).Round(time.Millisecond))

	for _, a := range calls {
		done, err := waitCall(t, a.call, 90*time.Second)
		if err != nil {
			t.Fatalf("%s: %v, want done: a stalled store must not end a live answer", a.call.ID, err)
		}
		if done.Text != expected("mock-a", a.prompt, tokens) {
			t.Fatalf("%s: done with other text", a.call.ID)
		}
	}
	// The records catch up: each ends done with every chunk.
	store := stream.NewDynamoStore(dynalitetest.Client(t, endpoint), table+"-req")
	for i, a := range calls {
		sub := fmt.Sprintf("stall-user-%d-%d", i/perServer, i%perServer)
		deadline := time.Now().Add(60 * time.Second)
		for {
			rec, err := store.Get(context.Background(), supportOwner(sub), a.call.ID)
			if err == nil && rec.State == stream.StateDone && rec.Seq() == a.call.LastSeq() {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: record %+v (%v) never caught up", a.call.ID, rec, err)
			}
			<-time.After(50 * time.Millisecond) // polling the store with a deadline
		}
	}
	failed, gone := 0, 0
	for _, p := range servers {
		failed += len(p.logs.Find("checkpoint_failed", "")) + len(p.logs.Find("record_finish_failed", ""))
		gone += len(p.logs.Find("fleet_member_gone", "")) + len(p.logs.Find("interrupted", ""))
	}
	if failed == 0 {
		t.Fatal("no write failed: the stall did not reach the gateways")
	}
	if gone != 0 {
		t.Fatalf("%d member gone / interrupted lines while every server was alive", gone)
	}
	t.Logf("%d answers through a %s stall: all done and exact, %d failed writes retried, records caught up", len(calls), stall, failed)
}
