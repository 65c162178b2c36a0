package main

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
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
