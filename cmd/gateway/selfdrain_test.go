package main

import (
	"context"
	"net/http"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jetway-gateway/jetway/internal/mockmodel"
)

// User-Agents of readiness pollers: the ALB's target group health check,
// and a person or script waiting for readiness.
const (
	albUserAgent  = "ELB-HealthChecker/2.0"
	curlUserAgent = "curl/8.5.0"
)

// healthChecker calls a gateway's /readyz every interval with a User-Agent,
// as the ALB's target group health check does (albUserAgent) or a script
// does (curlUserAgent), until stopped (for the ALB: deregistration).
type healthChecker struct {
	stop chan struct{}
	done chan struct{}
	ok   chan struct{} // closed after the first 200
}

func checkHealth(t *testing.T, admin, userAgent string, every time.Duration) *healthChecker {
	h := &healthChecker{stop: make(chan struct{}), done: make(chan struct{}), ok: make(chan struct{})}
	go func() {
		defer close(h.done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		var once sync.Once
		for {
			req, err := http.NewRequest(http.MethodGet, "http://"+admin+"/readyz", nil)
			if err != nil {
				panic(err)
			}
			req.Header.Set("User-Agent", userAgent)
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				if resp.StatusCode == http.StatusOK {
					once.Do(func() { close(h.ok) })
				}
				_ = resp.Body.Close()
			}
			select {
			case <-h.stop:
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(h.deregister)
	return h
}

// deregister stops the checks, as the ALB does for a draining target.
func (h *healthChecker) deregister() {
	select {
	case <-h.stop:
	default:
		close(h.stop)
	}
	<-h.done
}

// TestSelfDrainWhenHealthChecksStop: a task the load balancer deregisters
// (its health checks stop) drains by itself, before any SIGTERM: 50 streams
// in flight finish there with 0 failures, their clients' next requests land
// on the other server, and the drained process stays up until SIGTERM, then
// exits 0. The other server, never health checked, never drains.
func TestSelfDrainWhenHealthChecksStop(t *testing.T) {
	w := newWorld(t, mockmodel.Options{TTFT: 50 * time.Millisecond, PerToken: 10 * time.Millisecond})
	fast := map[string]string{"JETWAY_HEALTH_CHECK_INTERVAL": "200ms", "JETWAY_SELF_DRAIN_MISSES": "3"}
	a := w.startProcess(merge(fast, map[string]string{"JETWAY_SERVER_ID": "task-a"}))
	b := w.startProcess(merge(fast, map[string]string{"JETWAY_SERVER_ID": "task-b"}))
	alb := checkHealth(t, a.Admin, albUserAgent, 200*time.Millisecond)
	select {
	case <-alb.ok:
	case <-time.After(10 * time.Second):
		t.Fatal("server a never answered a health check")
	}

	const clients = 50
	failed, served := streamsAcrossDrain(t, w, a, b, clients, "dereg-user", alb.deregister)
	t.Logf("streams failed during the simulated deregistration: %d of %d", len(failed), clients)
	if len(failed) > 0 {
		t.Fatalf("%d requests failed across the self-drain: %v", len(failed), failed)
	}
	if served != clients {
		t.Fatalf("%d of %d clients got their next request served", served, clients)
	}
	d := a.logs.Find("draining", "")
	if len(d) != 1 || d[0]["reason"] != "health_checks_stopped" {
		t.Fatalf("server a's drain: %v, want one drain with reason health_checks_stopped", d)
	}
	if n := len(a.logs.Await("completed", "", clients, 10*time.Second)); n < clients {
		t.Fatalf("server a completed %d requests, want its %d in flight", n, clients)
	}
	// New work went to b, except a request that raced a's drain notice
	// (served on a, as in-flight work is; see TestDrainOnSIGTERM).
	t.Logf("completed on server a: %d, on server b: %d (%d clients)", len(a.logs.Find("completed", "")), len(b.logs.Find("completed", "")), clients)
	if n := len(b.logs.Await("completed", "", clients/2, 10*time.Second)); n < clients/2 {
		t.Fatalf("server b completed %d requests, want most of %d", n, clients)
	}
	// Drained, a keeps running (ECS sends SIGTERM after the deregistration
	// delay) and fails readiness.
	select {
	case <-a.p.Exited():
		t.Fatalf("server a exited after its self-drain, before SIGTERM: %v", a.p.Err())
	default:
	}
	if code := getStatus(t, "http://"+a.Admin+"/readyz"); code != http.StatusServiceUnavailable {
		t.Fatalf("drained server's /readyz: %d, want 503", code)
	}
	a.signal(syscall.SIGTERM)
	if code := a.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("drained server exited %d after SIGTERM, want 0", code)
	}
	if d := b.logs.Find("draining", ""); len(d) != 0 {
		t.Fatalf("server b, never health checked, drained: %v", d)
	}
}

// TestSelfDrainArmedOnlyByTheLoadBalancer: a gateway polled on /readyz by
// a script (curl's User-Agent, and Go's) answers readiness and never drains
// when the polling stops; one polled by the ALB's User-Agent arms the watch
// and drains once its checks stop. Both are polled the same way at the same
// pace and stopped together; after the armed one drained, the other gets
// five more silences to prove it does not.
func TestSelfDrainArmedOnlyByTheLoadBalancer(t *testing.T) {
	w := newWorld(t, fastPace())
	const interval, misses = 200 * time.Millisecond, 3
	fast := map[string]string{"JETWAY_HEALTH_CHECK_INTERVAL": interval.String(), "JETWAY_SELF_DRAIN_MISSES": "3"}
	byALB := w.startProcess(merge(fast, map[string]string{"JETWAY_SERVER_ID": "polled-by-alb"}))
	byCurl := w.startProcess(merge(fast, map[string]string{"JETWAY_SERVER_ID": "polled-by-curl"}))
	alb := checkHealth(t, byALB.Admin, albUserAgent, interval)
	curl := checkHealth(t, byCurl.Admin, curlUserAgent, interval)
	for name, h := range map[string]*healthChecker{"alb": alb, "curl": curl} {
		select {
		case <-h.ok:
		case <-time.After(10 * time.Second):
			t.Fatalf("the %s poller never got a 200 from /readyz", name)
		}
	}
	if n := len(byALB.logs.Await("self_drain_armed", "", 1, 10*time.Second)); n != 1 {
		t.Fatalf("the gateway polled by the ALB logged self_drain_armed %d times, want 1", n)
	}
	// A few more rounds of polling (Go's own User-Agent too), then both stop.
	for range 2 * misses {
		if code := getStatus(t, "http://"+byCurl.Admin+"/readyz"); code != http.StatusOK {
			t.Fatalf("polled-by-curl /readyz: %d, want 200", code)
		}
		<-time.After(interval)
	}
	alb.deregister()
	curl.deregister()

	d := byALB.logs.Await("draining", "", 1, 30*time.Second)
	if len(d) != 1 || d[0]["reason"] != "health_checks_stopped" {
		t.Fatalf("gateway polled by the ALB: drains %v, want one with reason health_checks_stopped", d)
	}
	silence := misses * interval
	if d := byCurl.logs.Await("draining", "", 1, 5*silence); len(d) != 0 {
		t.Fatalf("gateway polled only by curl drained: %v", d)
	}
	if a := byCurl.logs.Find("self_drain_armed", ""); len(a) != 0 {
		t.Fatalf("gateway polled only by curl armed self-drain: %v", a)
	}
	if code := getStatus(t, "http://"+byCurl.Admin+"/readyz"); code != http.StatusOK {
		t.Fatalf("gateway polled only by curl: /readyz %d after the polling stopped, want 200", code)
	}
	if code := getStatus(t, "http://"+byALB.Admin+"/readyz"); code != http.StatusServiceUnavailable {
		t.Fatalf("self-drained gateway: /readyz %d, want 503", code)
	}
}

// TestAdminDrain: POST /drain on the admin listener drains the server (the
// main listener has no such route); the process stays up until SIGTERM.
func TestAdminDrain(t *testing.T) {
	w := newWorld(t, fastPace())
	g := w.start(nil)
	if code := postStatus(t, "http://"+g.Addr+"/drain"); code != http.StatusNotFound {
		t.Fatalf("POST /drain on the main listener: %d, want 404", code)
	}
	c := w.dial(g, "admin-drain-user", nil)
	if code := postStatus(t, "http://"+g.Admin+"/drain"); code != http.StatusAccepted {
		t.Fatalf("POST /drain on the admin listener: %d, want 202", code)
	}
	deadline := time.Now().Add(10 * time.Second)
	for getStatus(t, "http://"+g.Admin+"/readyz") != http.StatusServiceUnavailable {
		if time.Now().After(deadline) {
			t.Fatal("/readyz still ready 10s after POST /drain")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The idle session is closed once the server is empty, and a new one is refused.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	call, err := c.Send(ctx, ask("after drain"))
	if err == nil {
		_, err = call.Wait(ctx)
	}
	if err == nil || ctx.Err() != nil {
		t.Fatalf("request after the drain: %v, want it refused at once", err)
	}
	t.Logf("request after the drain: %v", err)
	if code := postStatus(t, "http://"+g.Admin+"/drain"); code != http.StatusAccepted {
		t.Fatalf("second POST /drain: %d, want 202", code)
	}
	if d := g.logs.Find("draining", ""); len(d) != 1 || d[0]["reason"] != "admin" {
		t.Fatalf("drains logged: %v, want one with reason admin", d)
	}
	select {
	case err := <-g.done:
		t.Fatalf("gateway exited after POST /drain, before SIGTERM: %v", err)
	default:
	}
}

func merge(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

func getStatus(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

func postStatus(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Post(url, "application/json", nil)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}
