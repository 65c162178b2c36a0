package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/jetway-gateway/jetway/internal/socket"
)

// imageRequest is a request frame of the knowledge bot (mock-cheap takes
// images) carrying one PNG of n bytes.
func imageRequest(id string, n int) []byte {
	return []byte(`{"type":"request","request_id":"` + id + `","messages":[{"role":"user","content":[{"type":"text","text":"what is in the picture?"},` +
		`{"type":"image","format":"png","data":"` + base64.StdEncoding.EncodeToString(make([]byte, n)) + `"}]}]}`)
}

// dialKB is a raw socket of the knowledge bot's user sub.
func dialKB(t *testing.T, w *world, g *gw, sub string) *websocket.Conn {
	t.Helper()
	rc := w.raw(g, w.token(sub, "contoso", "contoso-kb", time.Hour), nil)
	rc.ws.SetReadLimit(-1)
	return rc.ws
}

// TestFinishedRequestsReleaseAttachments (issue 23): once its model call
// ended, nothing of a request but what resume and records need stays in
// memory, however long the resume window. 40 requests with 3 MB images
// go through the real stack (sessions, gateway, the Bedrock client, the
// mock model); after the last done frame the heap after GC may hold the
// retained answers (jetway_retained_answer_bytes, docs/configuration.md
// "Sizing the retained answers") and fixed slack, not the images: before
// the fix it held all 40 (128 MB).
func TestFinishedRequestsReleaseAttachments(t *testing.T) {
	const (
		sockets   = 4
		perSocket = 10
		imageSize = 3_000_000
		// slack is what else a served burst may leave: pooled frame
		// chunks, connection buffers, a live request's frame; far below
		// one image per socket.
		slack = 16 << 20
	)
	w := newWorld(t, fastPace())
	q := w.startQuiet(nil)
	conns := make([]*websocket.Conn, sockets)
	for i := range conns {
		conns[i] = dialKB(t, w, q.gw, fmt.Sprintf("attach-user-%d", i))
	}
	before := q.footprint(t)

	var wg sync.WaitGroup
	errs := make(chan error, sockets)
	for i, ws := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range perSocket {
				id := fmt.Sprintf("attach-%02d-%02d", i, j)
				if err := ws.WriteMessage(websocket.TextMessage, imageRequest(id, imageSize)); err != nil {
					errs <- err
					return
				}
				if err := readDone(ws, id); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	after := q.footprint(t)
	retained := scrapeMetric(t, q.Admin, "jetway_retained_answer_bytes")
	growth := int64(after.heapBytes) - int64(before.heapBytes)
	bound := int64(2*retained) + slack
	t.Logf("%d requests with %d-byte images: heap after GC %.1f -> %.1f MB (growth %.1f MB), retained answers %.0f KB, bound %.1f MB",
		sockets*perSocket, imageSize, mb(before.heapBytes), mb(after.heapBytes), float64(growth)/1e6, retained/1e3, float64(bound)/1e6)
	if growth > bound {
		writeHeapProfile(t)
		t.Fatalf("heap grew %.1f MB after %d finished requests (retained answers: %.0f KB): the requests' attachments outlive their model calls",
			float64(growth)/1e6, sockets*perSocket, retained/1e3)
	}
}

func mb(b uint64) float64 { return float64(b) / 1e6 }

// readDone reads frames until id's done; an error frame or a closed socket
// is an error.
func readDone(ws *websocket.Conn, id string) error {
	for {
		_ = ws.SetReadDeadline(time.Now().Add(30 * time.Second))
		_, data, err := ws.ReadMessage()
		if err != nil {
			return fmt.Errorf("request %s: %w", id, err)
		}
		s := string(data)
		switch {
		case strings.Contains(s, `"type":"done"`) && strings.Contains(s, `"`+id+`"`):
			return nil
		case strings.Contains(s, `"type":"error"`):
			return fmt.Errorf("request %s: %s", id, s)
		}
	}
}

// writeHeapProfile keeps the heap profile of a failed memory bound in the
// system's temp dir (its path is logged).
func writeHeapProfile(t *testing.T) {
	t.Helper()
	path := filepath.Join(os.TempDir(), "jetway-"+t.Name()+".heap")
	f, err := os.Create(path)
	if err != nil {
		t.Logf("heap profile: %v", err)
		return
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		t.Logf("heap profile: %v", err)
		return
	}
	t.Logf("heap profile: go tool pprof -sample_index=inuse_space %s", path)
}

// floodFrame is a request frame of about 7.7 MB for the flood: two
// images of 2.88 MB each (5.76 MB decoded, both under Bedrock's limit).
// Its request id is the same length for every i, so one frame is built
// and only the id is rewritten.
func floodFrame(frame []byte, i int) []byte {
	copy(frame[len(`{"type":"request","request_id":"`):], fmt.Sprintf("flood-%06d", i))
	return frame
}

func newFloodFrame() []byte {
	img := base64.StdEncoding.EncodeToString(make([]byte, 2_880_000))
	return []byte(`{"type":"request","request_id":"flood-000000","messages":[{"role":"user","content":[{"type":"text","text":"what is in the pictures?"},` +
		`{"type":"image","format":"png","data":"` + img + `"},{"type":"image","format":"png","data":"` + img + `"}]}]}`)
}

// procMemory is VmRSS and VmHWM (the peak of VmRSS) of a process, in bytes.
func procMemory(t *testing.T, pid int) (rss, hwm int64) {
	t.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Skipf("no /proc: %v", err) // the bound is Linux's VmHWM
	}
	for _, line := range strings.Split(string(status), "\n") {
		for key, p := range map[string]*int64{"VmRSS:": &rss, "VmHWM:": &hwm} {
			if v, ok := strings.CutPrefix(line, key); ok {
				var kb int64
				_, _ = fmt.Sscan(strings.TrimSuffix(strings.TrimSpace(v), " kB"), &kb)
				*p = kb << 10
			}
		}
	}
	return rss, hwm
}

// TestAttachmentFloodMemory (issue 23): a gateway process's real memory
// under a flood of ~7.7 MB image frames stays near (within 10% on a quiet
// machine, asserted within 20%)
// docs/configuration.md's "Sizing the attachment bounds", computed here
// from the settings: 40 and 100 sessions (one user each), every one
// sending a frame at once, with model calls (the knowledge bot takes
// images) and without (the support assistant's model takes none: each
// request is decoded, then refused).
func TestAttachmentFloodMemory(t *testing.T) {
	frame := newFloodFrame()
	for _, c := range []struct {
		sessions int
		clientID string
		calls    bool
	}{
		{40, "contoso-support", false},
		{100, "contoso-support", false},
		{40, "contoso-kb", true},
		{100, "contoso-kb", true},
	} {
		name := fmt.Sprintf("%d sessions, model calls %v", c.sessions, c.calls)
		t.Run(name, func(t *testing.T) {
			w := newWorld(t, fastPace())
			// As docs/configuration.md says to run it: GOMEMLIMIT at 90%
			// of the formula plus the idle process (the runtime overshoots
			// its soft limit by up to about 10% under a flood).
			limit := (idleProcessBytes + attachmentMemoryBound(c.sessions)) * 9 / 10
			p := w.startProcess(map[string]string{"GOMEMLIMIT": strconv.FormatInt(limit, 10)})
			conns := make([]*websocket.Conn, c.sessions)
			for i := range conns {
				rc := w.raw(p.gw, w.token(fmt.Sprintf("flood-%03d", i), "contoso", c.clientID, time.Hour), nil)
				conns[i] = rc.ws
			}
			idle, _ := procMemory(t, p.p.PID())

			answers := map[string]int{}
			var mu sync.Mutex
			var wg sync.WaitGroup
			for i, ws := range conns {
				own := append([]byte(nil), floodFrame(frame, i)...)
				wg.Add(1)
				go func() {
					defer wg.Done()
					code := "write failed"
					if ws.WriteMessage(websocket.TextMessage, own) == nil {
						code = floodAnswer(ws)
					}
					mu.Lock()
					answers[code]++
					mu.Unlock()
				}()
			}
			wg.Wait()
			_, peak := procMemory(t, p.p.PID())
			bound := idle + attachmentMemoryBound(c.sessions)
			t.Logf("%s: answers %v; RSS idle %.0f MB, peak (VmHWM) %.0f MB; formula %.0f MB (%.0f%%)",
				name, answers, float64(idle)/1e6, float64(peak)/1e6, float64(bound)/1e6, 100*float64(peak)/float64(bound))
			// Every frame's and every model call's bytes are given back.
			for deadline := time.Now().Add(30 * time.Second); scrapeMetric(t, p.Admin, "jetway_attachment_bytes_in_flight") != 0; {
				if time.Now().After(deadline) {
					t.Fatalf("jetway_attachment_bytes_in_flight is %v after every answer", scrapeMetric(t, p.Admin, "jetway_attachment_bytes_in_flight"))
				}
				time.Sleep(10 * time.Millisecond)
			}
			// Within 10% on a quiet machine (97-108%, docs/benchmarks.md);
			// a collector starved of CPU lags further (111% seen beside
			// other tests), so the assertion leaves 20%.
			if peak > bound+bound/5 {
				t.Fatalf("peak RSS %.0f MB is over docs/configuration.md's bound of %.0f MB by more than 20%%", float64(peak)/1e6, float64(bound)/1e6)
			}
		})
	}
}

// floodAnswer reads a flooded socket until its request's answer: "done",
// or the error's code.
func floodAnswer(ws *websocket.Conn) string {
	for {
		_ = ws.SetReadDeadline(time.Now().Add(60 * time.Second))
		_, data, err := ws.ReadMessage()
		if err != nil {
			return "socket: " + err.Error()
		}
		var f map[string]any
		_ = json.Unmarshal(data, &f)
		switch f["type"] {
		case "done":
			return "done"
		case "error":
			code, _ := f["code"].(string)
			return code
		}
	}
}

// idleProcessBytes is the idle gateway's memory that docs/configuration.md
// adds to the formula for GOMEMLIMIT (measured: 28-30 MB RSS).
const idleProcessBytes = 32 << 20

// attachmentMemoryBound is docs/configuration.md's "Sizing the attachment
// bounds" with the default settings: what a flood adds to the idle process.
func attachmentMemoryBound(sessions int) int64 {
	return 2 * (int64(sessions)*socket.DefaultMaxFrameBytes + socket.DefaultAttachmentBytesInFlight)
}
