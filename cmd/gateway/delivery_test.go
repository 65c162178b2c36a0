package main

import (
	"context"
	"fmt"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/jetway-gateway/jetway/client"
	"github.com/jetway-gateway/jetway/internal/mockmodel"
)

// TestSlowConsumerClosed4008ThenResumes: a client that stops reading is cut
// with 4008 (never waited on), and its answer is complete after a resume.
func TestSlowConsumerClosed4008ThenResumes(t *testing.T) {
	w := newWorld(t, mockmodel.Options{TTFT: time.Millisecond, PerToken: mockmodel.NoDelay, Tokens: 4000})
	g := w.start(map[string]string{"JETWAY_WRITE_TIMEOUT": "300ms", "JETWAY_SEND_QUEUE_FRAMES": "64", "JETWAY_SOCKET_SEND_BUFFER": "8192"})
	tok := w.token("pat", "contoso", "contoso-support", time.Hour)
	d := websocket.Dialer{Subprotocols: []string{"jetway.v1"}, ReadBufferSize: 1024,
		NetDialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetReadBuffer(4096) // a small window, so an idle reader backs up the server
			}
			return c, err
		}}
	ws, _, err := d.Dial(g.URL()+"?session_id=slow-session-1", map[string][]string{"Authorization": {"Bearer " + tok}})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	if err := ws.WriteJSON(map[string]any{"type": "request", "request_id": "slow-req-1", "max_tokens": 4000,
		"messages": []map[string]string{{"role": "user", "content": "a long answer"}}}); err != nil {
		t.Fatal(err)
	}
	// Stop reading until the server has given up on us.
	waitFor(t, 20*time.Second, func() bool { return len(g.logs.Find("slow_consumer", "")) > 0 },
		func() string { return "no slow_consumer close" })
	// Read what was buffered; the connection must end (4008 if the close frame fit).
	_ = ws.SetReadDeadline(time.Now().Add(10 * time.Second))
	lastSeq := 0
	for {
		var f map[string]any
		if err := ws.ReadJSON(&f); err != nil {
			// 4008 when the close frame still fit in the stalled socket; an
			// abnormal end (1006) when it did not: the client was not reading.
			if ce, ok := err.(*websocket.CloseError); ok && ce.Code != 4008 && ce.Code != websocket.CloseAbnormalClosure {
				t.Fatalf("closed with %d, want 4008", ce.Code)
			}
			break
		}
		if f["type"] == "chunk" {
			lastSeq = int(f["seq"].(float64))
		}
	}
	if lastSeq >= 4000 {
		t.Fatalf("the whole answer got through (seq %d): the client was never slow", lastSeq)
	}
	// Resume on a new connection: the answer is complete.
	c := w.dial(g, "pat", func(o *client.Options) { o.SessionID = "slow-session-1" })
	call, err := c.Resume(context.Background(), "slow-req-1", lastSeq)
	if err != nil {
		t.Fatal(err)
	}
	done, err := waitCall(t, call, 30*time.Second)
	if err != nil {
		t.Fatalf("resume after 4008: %v", err)
	}
	want := expected("mock-a", "a long answer", 4000)
	if done.Text != want || done.Chunks != 4000 || call.LastSeq() != 4000 {
		t.Fatalf("resumed answer: %d chunks, last seq %d, text ok %v", done.Chunks, call.LastSeq(), done.Text == want)
	}
}

// TestDrainOnSIGTERM: in-flight streams finish on the draining server,
// clients move new work to the other server, and the process exits 0.
func TestDrainOnSIGTERM(t *testing.T) {
	w := newWorld(t, mockmodel.Options{TTFT: 50 * time.Millisecond, PerToken: 5 * time.Millisecond})
	a := w.startProcess(map[string]string{"JETWAY_SERVER_ID": "task-a"})
	b := w.startProcess(map[string]string{"JETWAY_SERVER_ID": "task-b"})
	const clients = 20
	failed, movedAndServed := streamsAcrossDrain(t, w, a, b, clients, "drain-user", func() { a.signal(syscall.SIGTERM) })
	if len(failed) > 0 {
		t.Fatalf("%d requests failed across the drain: %v", len(failed), failed)
	}
	if code := a.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("drained server exited %d, want 0", code)
	}
	if movedAndServed != clients {
		t.Fatalf("%d of %d clients got new work served after the drain", movedAndServed, clients)
	}
	// New work went elsewhere: a client whose next request reached server a
	// in the instant between SIGTERM and its session hearing of the drain
	// is still served there (in-flight work finishes), so most, not
	// necessarily all, of it lands on b. Requests refused with `draining`
	// were sent again there by the client.
	if n := len(b.logs.Await("completed", "", clients/2, 10*time.Second)); n < clients/2 {
		t.Fatalf("server b completed %d requests, want most of %d", n, clients)
	}
}

// streamsAcrossDrain starts one stream per client on a (with b as the
// client's other URL), calls drain once every stream is accepted, and
// after each stream ends sends that client's next request. It returns the
// requests that failed and how many clients got their next request served.
func streamsAcrossDrain(t *testing.T, w *world, a, b *proc, clients int, userPrefix string, drain func()) (failed []string, served int) {
	t.Helper()
	var wg sync.WaitGroup
	started := make(chan struct{}, clients)
	var mu sync.Mutex
	fail := func(s string) {
		mu.Lock()
		failed = append(failed, s)
		mu.Unlock()
	}
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			c := w.dial(a.gw, fmt.Sprintf("%s-%d", userPrefix, i), func(o *client.Options) {
				o.URLs = []string{a.URL(), b.URL()}
				o.Reconnect = true
			})
			prompt := fmt.Sprintf("in flight %d", i)
			call, err := c.Send(context.Background(), ask(prompt))
			if err != nil {
				t.Error(err)
				started <- struct{}{}
				return
			}
			<-call.Accepted()
			started <- struct{}{}
			if done, err := waitCall(t, call, 60*time.Second); err != nil || done.Text != expected("mock-a", prompt, 300) {
				fail(fmt.Sprintf("%s: %v", call.ID, err))
				return
			}
			// New work after the drain goes to the other server.
			next, err := c.Send(context.Background(), ask(prompt+" next"))
			if err != nil {
				t.Error(err)
				return
			}
			if _, err := waitCall(t, next, 60*time.Second); err != nil {
				fail(fmt.Sprintf("after drain %s: %v", next.ID, err))
				return
			}
			mu.Lock()
			served++
			mu.Unlock()
		}(i)
	}
	for i := 0; i < clients; i++ {
		<-started
	}
	drain()
	wg.Wait()
	return failed, served
}
