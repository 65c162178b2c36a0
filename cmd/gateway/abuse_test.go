package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/jetway-gateway/jetway/internal/gatewaytest"
)

// The abuse suite: hostile input must cost the attacker, not the gateway.
// Each test floods a real gateway (started through run(), as `go run
// ./cmd/gateway` would) and asserts afterwards that /metrics, the heap,
// the log and the usage files grew by less than fixed bounds, and that a
// normal request is still served. Sizes are bounded so the suite runs in
// seconds under -race; JETWAY_ABUSE_FLOOD=1000 runs the full
// 1,000 x 100 KB `model` flood of docs/benchmarks.md.

// quietGW is a gateway whose log is counted, not kept, so the heap
// measured in this process is the gateway's own.
type quietGW struct {
	*gw
	usageDir string
	logBytes atomic.Int64
}

type countingWriter struct {
	q        *quietGW
	mu       sync.Mutex
	pending  []byte
	found    bool
	listenCh chan [2]string
}

func (c *countingWriter) Write(p []byte) (int, error) {
	c.q.logBytes.Add(int64(len(p)))
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.found {
		return len(p), nil
	}
	c.pending = append(c.pending, p...)
	for {
		i := bytes.IndexByte(c.pending, '\n')
		if i < 0 {
			return len(p), nil
		}
		line := c.pending[:i]
		c.pending = c.pending[i+1:]
		if bytes.Contains(line, []byte(`"msg":"listening"`)) {
			var raw map[string]any
			_ = json.Unmarshal(line, &raw)
			a, _ := raw["addr"].(string)
			b, _ := raw["admin_addr"].(string)
			c.found, c.pending = true, nil
			c.listenCh <- [2]string{a, b}
			return len(p), nil
		}
	}
}

func (w *world) startQuiet(overrides map[string]string) *quietGW {
	w.t.Helper()
	env := w.merged(overrides)
	for k, v := range env {
		if strings.HasPrefix(k, "AWS_") {
			w.t.Setenv(k, v)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	q := &quietGW{gw: &gw{cancel: cancel, done: make(chan error, 1), logs: &gatewaytest.Log{}}, usageDir: env["JETWAY_USAGE_DIR"]}
	cw := &countingWriter{q: q, listenCh: make(chan [2]string, 1)}
	go func() { q.done <- run(ctx, nil, func(k string) string { return env[k] }, cw) }()
	select {
	case a := <-cw.listenCh:
		q.Addr, q.Admin = a[0], a[1]
	case err := <-q.done:
		w.t.Fatalf("gateway exited before listening: %v", err)
	case <-time.After(20 * time.Second):
		w.t.Fatalf("gateway did not listen within 20s")
	}
	w.t.Cleanup(func() { q.stop(w.t) })
	return q
}

// footprint is what the gateway holds and has written.
type footprint struct {
	metricsBytes int
	heapBytes    uint64
	logBytes     int64
}

func (q *quietGW) footprint(t *testing.T) footprint {
	t.Helper()
	resp, err := http.Get("http://" + q.Admin + "/metrics")
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return footprint{metricsBytes: len(body), heapBytes: ms.HeapAlloc, logBytes: q.logBytes.Load()}
}

// usageBytes is the size of every usage file written (call after stop,
// which flushes the sink).
func (q *quietGW) usageBytes(t *testing.T) int64 {
	t.Helper()
	var n int64
	err := filepath.WalkDir(q.usageDir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err == nil {
			n += info.Size()
		}
		return err
	})
	if err != nil {
		t.Fatalf("usage dir: %v", err)
	}
	return n
}

// flood sends frames on one socket while reading every answer; it returns
// the number of frames read and the largest one. Frames that the server
// answers with nothing (pings are answered; everything here is) would
// make it wait: every frame sent must get exactly one frame back.
func flood(t *testing.T, ws *websocket.Conn, frames func(i int) []byte, n int) (read int, largest int) {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		for i := 0; i < n; i++ {
			if err := ws.WriteMessage(websocket.TextMessage, frames(i)); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	for read < n {
		_ = ws.SetReadDeadline(time.Now().Add(30 * time.Second))
		_, data, err := ws.ReadMessage()
		if err != nil {
			t.Fatalf("read after %d of %d answers: %v", read, n, err)
		}
		read++
		largest = max(largest, len(data))
	}
	if err := <-errc; err != nil {
		t.Fatalf("write: %v", err)
	}
	return read, largest
}

func dialRaw(t *testing.T, w *world, g *gw, sub string) *websocket.Conn {
	t.Helper()
	d := websocket.Dialer{Subprotocols: []string{"jetway.v1"}, HandshakeTimeout: 5 * time.Second}
	ws, resp, err := d.Dial(g.URL(), http.Header{"Authorization": {"Bearer " + w.token(sub, "contoso", "contoso-support", time.Hour)}})
	if err != nil {
		t.Fatalf("dial: %v (resp %v)", err, resp)
	}
	t.Cleanup(func() { _ = ws.Close() })
	ws.SetReadLimit(-1)
	if _, data, err := ws.ReadMessage(); err != nil || !strings.Contains(string(data), `"ready"`) {
		t.Fatalf("first frame %s, %v", data, err)
	}
	return ws
}

// served asserts that a normal request still gets its done frame.
func served(t *testing.T, w *world, g *gw) {
	t.Helper()
	c := w.dial(g, "after-the-flood", nil)
	call, err := c.Send(context.Background(), ask("still there?"))
	if err != nil {
		t.Fatalf("send after the flood: %v", err)
	}
	done, err := waitCall(t, call, 20*time.Second)
	if err != nil || done == nil {
		t.Fatalf("normal request after the flood: %v", err)
	}
}

func randomString(r *rand.Rand, n int) string {
	alphabet := []rune("abcdefghijklmnopqrstuvwxyz0123456789-_.:/ ÄÖÜ€\"\\")
	var b strings.Builder
	for b.Len() < n {
		b.WriteRune(alphabet[r.IntN(len(alphabet))])
	}
	return b.String()
}

// floodSize is the number of frames and the bytes of the flooded field:
// small enough for -race in `make test`, JETWAY_ABUSE_FLOOD=N for more.
func floodSize(t *testing.T) (n, size int) {
	n, size = 200, 100<<10
	if v := os.Getenv("JETWAY_ABUSE_FLOOD"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n <= 0 {
			t.Fatalf("JETWAY_ABUSE_FLOOD=%q: want a positive number", v)
		}
	}
	return n, size
}

// TestAbuseUniqueModelFlood: unique 100 KB `model` strings are refused
// model_not_allowed; none may become a metric series, a usage-record
// value, a log field or an echo without a bound.
func TestAbuseUniqueModelFlood(t *testing.T) {
	w := newWorld(t, fastPace())
	g := w.startQuiet(nil)
	served(t, w, g.gw)
	before := g.footprint(t)
	n, size := floodSize(t)
	r := rand.New(rand.NewPCG(1, 2))
	ws := dialRaw(t, w, g.gw, "flooder")
	start := time.Now()
	read, largest := flood(t, ws, func(i int) []byte {
		b, _ := json.Marshal(map[string]any{"type": "request", "request_id": fmt.Sprintf("flood-%06d", i),
			"model": fmt.Sprintf("%d-%s", i, randomString(r, size)), "messages": []map[string]string{{"role": "user", "content": "hi"}}})
		return b
	}, n)
	took := time.Since(start)
	after := g.footprint(t)
	served(t, w, g.gw)
	g.stop(t)
	usage := g.usageBytes(t)
	t.Logf("%d x %d KB model flood in %s: /metrics %d -> %d bytes; heap %.1f -> %.1f MB; log +%d bytes; usage files %d bytes; largest answer %d bytes",
		read, size>>10, took.Round(time.Millisecond), before.metricsBytes, after.metricsBytes,
		float64(before.heapBytes)/(1<<20), float64(after.heapBytes)/(1<<20), after.logBytes-before.logBytes, usage, largest)
	assertBounded(t, n, before, after, usage, largest)
	// Refused requests past the user's refusal budget are rate_limited with
	// no usage record; those within it say model "other".
	models := g.usageModels(t)
	if models["other"] < 1 || models["other"] > n || len(models) > 2 {
		t.Errorf("usage records by model %v: want only \"other\" (at most one per refused request) and the served mock-a", models)
	}
}

// usageModels counts the usage records by model.
func (q *quietGW) usageModels(t *testing.T) map[string]int {
	t.Helper()
	out := map[string]int{}
	err := filepath.WalkDir(q.usageDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, line := range bytes.Split(data, []byte("\n")) {
			var r struct{ Model string }
			if json.Unmarshal(line, &r) == nil {
				out[r.Model]++
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("usage dir: %v", err)
	}
	return out
}

// assertBounded holds the suite's fixed bounds for n hostile frames.
func assertBounded(t *testing.T, n int, before, after footprint, usage int64, largest int) {
	t.Helper()
	if d := after.metricsBytes - before.metricsBytes; d > 16<<10 {
		t.Errorf("/metrics grew by %d bytes (bound 16 KiB)", d)
	}
	if after.heapBytes > before.heapBytes && after.heapBytes-before.heapBytes > 32<<20 {
		t.Errorf("heap grew by %d bytes (bound 32 MiB)", after.heapBytes-before.heapBytes)
	}
	if d := after.logBytes - before.logBytes; d > int64(n)*2048 {
		t.Errorf("log grew by %d bytes for %d frames (bound 2 KiB a frame)", d, n)
	}
	if usage > int64(n+2)*1024 {
		t.Errorf("usage files hold %d bytes for %d frames (bound 1 KiB a frame)", usage, n)
	}
	if largest > 1024 {
		t.Errorf("largest answer frame %d bytes (bound 1 KiB)", largest)
	}
}

// drain sends frames on one socket, then a ping whose pong marks the end,
// reading every answer meanwhile; it returns the largest error frame.
func drain(t *testing.T, ws *websocket.Conn, frames [][]byte) (largestError int) {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		for _, f := range frames {
			mt := websocket.TextMessage
			if len(f) > 0 && f[0] == 0 { // a binary frame
				mt = websocket.BinaryMessage
			}
			if err := ws.WriteMessage(mt, f); err != nil {
				errc <- err
				return
			}
		}
		errc <- ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"ping","t":"end-of-flood"}`))
	}()
	for {
		_ = ws.SetReadDeadline(time.Now().Add(30 * time.Second))
		_, data, err := ws.ReadMessage()
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		var f struct{ Type, T string }
		_ = json.Unmarshal(data, &f)
		if f.Type == "error" {
			largestError = max(largestError, len(data))
		}
		if f.Type == "pong" && f.T == "end-of-flood" {
			break
		}
	}
	if err := <-errc; err != nil {
		t.Fatalf("write: %v", err)
	}
	return largestError
}

// randomFrame is a frame a fuzzer would send: JSON of the known shapes with
// random values, random JSON, random text, or a binary frame. Never `auth`
// (a bad token ends the session by design) and always valid UTF-8 (invalid
// UTF-8 closes with 1007, tested in TestProtocolEdges).
func randomFrame(r *rand.Rand) []byte {
	value := func() any {
		switch r.IntN(7) {
		case 0:
			return randomString(r, r.IntN(300))
		case 1:
			return r.NormFloat64() * 1e12
		case 2:
			return nil
		case 3:
			return []any{randomString(r, 5), r.IntN(10)}
		case 4:
			return map[string]any{"role": randomString(r, 4), "content": randomString(r, 20)}
		case 5:
			return r.IntN(2) == 0
		default:
			return -r.IntN(1 << 20)
		}
	}
	switch r.IntN(5) {
	case 0:
		return []byte(randomString(r, r.IntN(500)))
	case 1:
		b := make([]byte, 1+r.IntN(200))
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
		b[0] = 0
		return b
	default:
		types := []string{"request", "resume", "cancel", "ping", "", randomString(r, 12)}
		m := map[string]any{"type": types[r.IntN(len(types))]}
		for _, k := range []string{"request_id", "messages", "system", "model", "max_tokens", "temperature", "after_seq", "t"} {
			if r.IntN(2) == 0 {
				m[k] = value()
			}
		}
		b, _ := json.Marshal(m)
		return b
	}
}

// TestAbuseSuite: random frames, oversized values in every string field,
// and unique-value floods on every client field that reaches telemetry
// (model, request_id, session_id); afterwards the gateway's footprint grew
// less than fixed bounds and a normal request is served.
func TestAbuseSuite(t *testing.T) {
	w := newWorld(t, fastPace())
	g := w.startQuiet(nil)
	served(t, w, g.gw)
	before := g.footprint(t)
	r := rand.New(rand.NewPCG(3, 4))
	frames := 0

	t.Run("random frames", func(t *testing.T) {
		var fs [][]byte
		for range 2000 {
			fs = append(fs, randomFrame(r))
		}
		frames += len(fs)
		if largest := drain(t, dialRaw(t, w, g.gw, "fuzzer"), fs); largest > 1024 {
			t.Errorf("largest error frame %d bytes (bound 1 KiB)", largest)
		}
	})

	t.Run("oversized fields", func(t *testing.T) {
		big := randomString(r, 200<<10)
		msg := func(role, content string) []map[string]string {
			return []map[string]string{{"role": role, "content": content}}
		}
		var fs [][]byte
		for _, m := range []map[string]any{
			{"type": big},
			{"type": "request", "request_id": big, "messages": msg("user", "hi")},
			{"type": "request", "request_id": "oversized-model", "model": big, "messages": msg("user", "hi")},
			{"type": "request", "request_id": "oversized-role1", "messages": msg(big, "hi")},
			{"type": "request", "request_id": "oversized-sys01", "system": big, "model": "not-allowed", "messages": msg("user", "hi")},
			{"type": "request", "request_id": "oversized-cont1", "model": "not-allowed", "messages": msg("user", big)},
			{"type": "resume", "request_id": big},
			{"type": "cancel", "request_id": big},
			{"type": "ping", "t": big},
		} {
			b, _ := json.Marshal(m)
			fs = append(fs, b)
		}
		frames += len(fs)
		if largest := drain(t, dialRaw(t, w, g.gw, "oversizer"), fs); largest > 1024 {
			t.Errorf("largest error frame %d bytes (bound 1 KiB)", largest)
		}
		// session_id at the upgrade.
		d := websocket.Dialer{Subprotocols: []string{"jetway.v1"}, HandshakeTimeout: 5 * time.Second}
		_, resp, err := d.Dial(g.URL()+"?session_id="+strings.Repeat("s", 8<<10),
			http.Header{"Authorization": {"Bearer " + w.token("oversizer", "contoso", "contoso-support", time.Hour)}})
		if err == nil || resp == nil || resp.StatusCode != http.StatusBadRequest {
			t.Errorf("oversized session_id: %v (resp %v), want 400", err, resp)
		}
	})

	t.Run("unique values", func(t *testing.T) {
		// request_id and model together on one socket; session_id one
		// socket each, at most the per-user connection cap at once.
		var fs [][]byte
		for i := range 1000 {
			b, _ := json.Marshal(map[string]any{"type": "request", "request_id": fmt.Sprintf("uniq-%08d", i),
				"model": fmt.Sprintf("model-%08d", i), "messages": []map[string]string{{"role": "user", "content": "hi"}}})
			fs = append(fs, b)
		}
		frames += len(fs)
		drain(t, dialRaw(t, w, g.gw, "uniquer"), fs)
		d := websocket.Dialer{Subprotocols: []string{"jetway.v1"}, HandshakeTimeout: 5 * time.Second}
		hdr := http.Header{"Authorization": {"Bearer " + w.token("sessioner", "contoso", "contoso-support", time.Hour)}}
		for i := range 50 {
			ws, _, err := d.Dial(fmt.Sprintf("%s?session_id=unique-session-%06d", g.URL(), i), hdr)
			if err != nil {
				t.Fatalf("session %d: %v", i, err)
			}
			drain(t, ws, [][]byte{[]byte(`{"type":"request","request_id":"sessionreq1","model":"nope","messages":[{"role":"user","content":"hi"}]}`)})
			_ = ws.Close()
			frames++
		}
	})

	after := g.footprint(t)
	served(t, w, g.gw)
	g.stop(t)
	usage := g.usageBytes(t)
	t.Logf("%d hostile frames: /metrics %d -> %d bytes; heap %.1f -> %.1f MB; log +%d bytes; usage files %d bytes",
		frames, before.metricsBytes, after.metricsBytes, float64(before.heapBytes)/(1<<20), float64(after.heapBytes)/(1<<20),
		after.logBytes-before.logBytes, usage)
	assertBounded(t, frames, before, after, usage, 0)
}
