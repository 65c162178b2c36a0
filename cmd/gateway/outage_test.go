package main

import (
	"context"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetway-gateway/jetway/client"
	"github.com/jetway-gateway/jetway/internal/dynalitetest"
)

// switchProxy forwards TCP to target while up; while down it cuts every
// connection, as an unreachable DynamoDB endpoint would.
type switchProxy struct {
	ln     net.Listener
	target string
	down   atomic.Bool
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
}

func newSwitchProxy(t *testing.T, target string) *switchProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &switchProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	t.Cleanup(func() { ln.Close(); p.cut() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if p.down.Load() {
				c.Close()
				continue
			}
			go p.pipe(c)
		}
	}()
	return p
}

func (p *switchProxy) pipe(c net.Conn) {
	u, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	p.conns[c], p.conns[u] = struct{}{}, struct{}{}
	p.mu.Unlock()
	go func() { _, _ = io.Copy(u, c); u.Close() }()
	_, _ = io.Copy(c, u)
	c.Close()
}

func (p *switchProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
	p.conns = map[net.Conn]struct{}{}
}

func (p *switchProxy) URL() string { return "http://" + p.ln.Addr().String() }

// TestDynamoOutageGivesCleanBusy: with DynamoDB unreachable a request gets
// a retryable `busy` within a bounded time, never a hang and never a model
// call without a reservation. With quota leases (the default) a server
// whose lease is alive keeps admitting from it (docs/operations.md) until
// the lease's room or life (JETWAY_QUOTA_LEASE_TTL) runs out.
func TestDynamoOutageGivesCleanBusy(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
	}{
		{"without leases", map[string]string{"JETWAY_QUOTA_LEASE": "false"}},
		{"with leases", map[string]string{"JETWAY_QUOTA_LEASE_TTL": "2s"}},
	} {
		t.Run(tc.name, func(t *testing.T) { testDynamoOutage(t, tc.env) })
	}
}

func testDynamoOutage(t *testing.T, env map[string]string) {
	w := newWorld(t, fastPace())
	endpoint := dynalitetest.Start(t)
	proxy := newSwitchProxy(t, endpoint[len("http://"):])
	table := dynalitetest.TableName(t)
	w.runCommand(map[string]string{"AWS_ENDPOINT_URL_DYNAMODB": endpoint, "JETWAY_QUOTA_TABLE": table}, "tables", "create")
	env["AWS_ENDPOINT_URL_DYNAMODB"], env["JETWAY_QUOTA_TABLE"] = proxy.URL(), table
	g := w.start(env)
	leased := env["JETWAY_QUOTA_LEASE"] != "false"
	c := w.dial(g, "olga", nil)
	send := func(prompt string) (*client.Done, error, time.Duration) {
		start := time.Now()
		call, err := c.Send(context.Background(), ask(prompt))
		if err != nil {
			t.Fatal(err)
		}
		d, err := waitCall(t, call, 20*time.Second)
		return d, err, time.Since(start)
	}
	if _, err, _ := send("before the outage"); err != nil {
		t.Fatalf("before the outage: %v", err)
	}
	proxy.down.Store(true)
	proxy.cut()
	outage := time.Now()
	// With a lease, requests are admitted from it until its room or its
	// 2 s life runs out; then, as without one, every request is busy.
	// A request the lease had no room for is busy, yet the one after it
	// may fit again once the request before settles and its refund comes
	// back to the lease: so it takes 3 busy in a row to end the loop.
	var fromLease int64
	for busy := 0; busy < 3; {
		_, err, took := send("during the outage")
		if took > 5*time.Second {
			t.Fatalf("an answer during the outage took %s: a hang, not a clean error", took)
		}
		if err == nil && leased {
			fromLease++
			busy = 0
			if time.Since(outage) > 10*time.Second {
				t.Fatalf("still admitting %s into the outage: the lease outlived its 2s TTL", time.Since(outage))
			}
			continue
		}
		e, ok := err.(*client.Error)
		if !ok || e.Code != "busy" || !e.Retryable || e.Status != 503 || e.RetryAfterMs <= 0 {
			t.Fatalf("during the outage: %v, want retryable busy", err)
		}
		busy++
	}
	t.Logf("admitted from the lease during the outage: %d; first busy after %s", fromLease, time.Since(outage))
	if n := w.mock.Requests("mock-a"); n != 1+fromLease {
		t.Fatalf("model calls %d, want %d: a request passed without a quota reservation", n, 1+fromLease)
	}
	proxy.down.Store(false)
	// Back: admitted again (a busy client retries; on a loaded machine the
	// first calls may still pass the store timeout).
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err, _ := send("after the outage")
		if err == nil {
			break
		}
		if e, ok := err.(*client.Error); !ok || e.Code != "busy" || time.Now().After(deadline) {
			t.Fatalf("after the outage: %v", err)
		}
	}
}

// TestRequestsTableOutageGivesCleanBusy: with the requests table down (the
// quota in memory), the record's put, made beside the model call, fails:
// the request ends with exactly one retryable busy, no accepted frame and
// nothing streamed, within a bounded time, and the model call is stopped.
func TestRequestsTableOutageGivesCleanBusy(t *testing.T) {
	w := newWorld(t, fastPace())
	endpoint := dynalitetest.Start(t)
	proxy := newSwitchProxy(t, endpoint[len("http://"):])
	table := dynalitetest.TableName(t)
	w.runCommand(map[string]string{"AWS_ENDPOINT_URL_DYNAMODB": endpoint, "JETWAY_REQUESTS_TABLE": table}, "tables", "create")
	g := w.start(map[string]string{"AWS_ENDPOINT_URL_DYNAMODB": proxy.URL(), "JETWAY_REQUESTS_TABLE": table})
	c := w.dial(g, "olga", nil)
	if _, err := waitCall(t, mustSend(t, c, ask("before the outage")), 20*time.Second); err != nil {
		t.Fatalf("before the outage: %v", err)
	}
	proxy.down.Store(true)
	proxy.cut()
	for i := 0; i < 3; i++ {
		start := time.Now()
		call := mustSend(t, c, ask("during the outage"))
		_, err := waitCall(t, call, 20*time.Second)
		e, ok := err.(*client.Error)
		if !ok || e.Code != "busy" || !e.Retryable || e.Status != 503 {
			t.Fatalf("during the outage: %v, want retryable busy", err)
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Fatalf("busy took %s: a hang, not a clean error", took)
		}
		if st := call.Stats(); call.AcceptedFrame() != nil || call.Text() != "" || st.Terminals != 1 {
			t.Fatalf("a request whose record was not stored was accepted or streamed: accepted %v, text %q, stats %+v",
				call.AcceptedFrame(), call.Text(), st)
		}
	}
	if n := len(g.logs.Await("rejected", "", 3, 10*time.Second)); n != 3 {
		t.Fatalf("%d rejected log lines, want 3 (one per request):\n%s", n, g.logs.String())
	}
	proxy.down.Store(false)
	if _, err := waitCall(t, mustSend(t, c, ask("after the outage")), 20*time.Second); err != nil {
		t.Fatalf("after the outage: %v", err)
	}
}
