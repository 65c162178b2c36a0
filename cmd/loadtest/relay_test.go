package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/gorilla/websocket"
)

// fault decides what the relay forwards for one server->client frame:
// nothing (drop), the frame, or more than one frame (duplicate, or a frame
// held back earlier and released now). It keeps per-connection state.
type fault func(f relayFrame, raw []byte) [][]byte

type relayFrame struct {
	Type      string `json:"type"`
	RequestID string `json:"request_id"`
	Seq       int    `json:"seq"`
}

// faultySeq is the chunk seq the faults below pick on, in every request.
const faultySeq = 3

// relayFault returns the constructor of the named fault (one state per
// connection): none, drop, duplicate, reorder or lose-terminal.
func relayFault(name string) func() fault {
	return map[string]func() fault{
		"none": func() fault { return func(_ relayFrame, raw []byte) [][]byte { return [][]byte{raw} } },
		// drop: chunk 3 of every request never arrives (AppSync's lost events).
		"drop": func() fault {
			return func(f relayFrame, raw []byte) [][]byte {
				if f.Type == "chunk" && f.Seq == faultySeq {
					return nil
				}
				return [][]byte{raw}
			}
		},
		// duplicate: chunk 3 of every request arrives twice.
		"duplicate": func() fault {
			return func(f relayFrame, raw []byte) [][]byte {
				if f.Type == "chunk" && f.Seq == faultySeq {
					return [][]byte{raw, raw}
				}
				return [][]byte{raw}
			}
		},
		// reorder: chunk 3 of every request arrives after chunk 4.
		"reorder": func() fault {
			held := map[string][]byte{}
			return func(f relayFrame, raw []byte) [][]byte {
				switch {
				case f.Type == "chunk" && f.Seq == faultySeq:
					held[f.RequestID] = raw
					return nil
				case f.Type == "chunk" && f.Seq == faultySeq+1 && held[f.RequestID] != nil:
					h := held[f.RequestID]
					delete(held, f.RequestID)
					return [][]byte{raw, h}
				}
				return [][]byte{raw}
			}
		},
		// lose-terminal: the done frame never arrives (the article's 9 of 100).
		"lose-terminal": func() fault {
			return func(f relayFrame, raw []byte) [][]byte {
				if f.Type == "done" {
					return nil
				}
				return [][]byte{raw}
			}
		},
	}[name]
}

// startRelay is a WebSocket proxy between the tool and a real gateway that
// plays a fault on the server->client direction.
func startRelay(t *testing.T, upstream string, newFault func() fault) string {
	t.Helper()
	up := websocket.Upgrader{Subprotocols: []string{"jetway.v1"}, CheckOrigin: func(*http.Request) bool { return true }}
	var wg sync.WaitGroup
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := http.Header{}
		if a := r.Header.Get("Authorization"); a != "" {
			h.Set("Authorization", a)
		}
		d := websocket.Dialer{Subprotocols: []string{"jetway.v1"}}
		server, resp, err := d.Dial(upstream+"?"+r.URL.RawQuery, h)
		if err != nil {
			status := http.StatusBadGateway
			if resp != nil {
				status = resp.StatusCode
			}
			http.Error(w, err.Error(), status)
			return
		}
		defer server.Close()
		cl, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer cl.Close()
		wg.Add(1)
		defer wg.Done()
		f := newFault()
		done := make(chan struct{})
		go func() { // client -> server, untouched
			defer close(done)
			for {
				mt, data, err := cl.ReadMessage()
				if err != nil {
					_ = server.Close()
					return
				}
				if server.WriteMessage(mt, data) != nil {
					return
				}
			}
		}()
		for { // server -> client, through the fault
			_, data, err := server.ReadMessage()
			if err != nil {
				_ = cl.Close()
				break
			}
			var fr relayFrame
			_ = json.Unmarshal(data, &fr)
			for _, out := range f(fr, data) {
				if cl.WriteMessage(websocket.TextMessage, out) != nil {
					break
				}
			}
		}
		<-done
	}))
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		wg.Wait()
	})
	return "ws" + strings.TrimPrefix(srv.URL, "http") + "/v1/ws"
}
