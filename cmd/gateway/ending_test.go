package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// TestAttemptsAroundTheEnding drives the race a fresh clone's CI once lost:
// a re-send or a resume that reaches the server at the instant a request
// ends (its terminal queued, its delivery returning). Each request gets a
// re-send while it streams, then attempts one after another, each fired
// the moment the previous one's terminal arrived or a little later, on
// either server: every attempt is followed on its socket by the request's
// terminal, identical each time, and the model runs once per request.
// 10,000 attempts on one server with in-memory stores, then 10,000 across
// two servers sharing dynalite (about half on the server that does not own
// the request, which follows its record).
func TestAttemptsAroundTheEnding(t *testing.T) {
	const workers, requests, attempts = 8, 125, 10 // 8 x 125 x 10 = 10,000 attempts per shape
	t.Run("memory", func(t *testing.T) {
		w := newWorld(t, fastPace())
		g := w.start(nil)
		r := &endingRace{t: t, w: w, urls: []string{g.URL()}}
		r.run(workers, requests, attempts)
		if n := w.mock.Requests("mock-a"); n != workers*requests {
			t.Errorf("model calls = %d, want %d (one per request)", n, workers*requests)
		}
	})
	t.Run("dynalite", func(t *testing.T) {
		w := newWorld(t, fastPace())
		cl := w.cluster(2, nil)
		r := &endingRace{t: t, w: w, urls: []string{cl.servers[0].URL(), cl.servers[1].URL()}}
		r.run(workers, requests, attempts)
	})
}

// endingRace is one shape's run: each worker is a user with a socket on
// every server, sending its requests one after another.
type endingRace struct {
	t    *testing.T
	w    *world
	urls []string
}

// raceSocket is one socket of a worker. One goroutine reads its frames and
// notes, per request, when its last terminal came in the worker's order of
// events (tick), so that a terminal can be matched to the attempt before it.
type raceSocket struct {
	ws      *websocket.Conn
	writeMu sync.Mutex

	mu      sync.Mutex
	termAt  map[string]int64
	first   map[string]string // the first terminal frame of each request on this socket
	bad     []string
	readErr error
	changed chan struct{} // closed at the next terminal or read error
}

func (r *endingRace) run(workers, requests, attempts int) {
	var wg sync.WaitGroup
	errs := make(chan string, workers*requests*attempts)
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.worker(i, requests, attempts, errs)
		}()
	}
	wg.Wait()
	close(errs)
	n := 0
	for e := range errs {
		if n < 10 {
			r.t.Error(e)
		}
		n++
	}
	if n > 0 {
		r.t.Fatalf("%d lost or wrong terminals", n)
	}
}

// answerWithin bounds the wait for an attempt's terminal: far above a
// short answer's time on a starved machine, far below "never".
const answerWithin = 30 * time.Second

func (r *endingRace) worker(i, requests, attempts int, errs chan<- string) {
	sub := fmt.Sprintf("racer-%d", i)
	tok := r.w.token(sub, "contoso", "contoso-support", time.Hour)
	var clockMu sync.Mutex
	var clock int64
	tick := func() int64 { clockMu.Lock(); defer clockMu.Unlock(); clock++; return clock }
	rng := rand.New(rand.NewPCG(uint64(i), 7))
	var socks []*raceSocket
	for _, u := range r.urls {
		socks = append(socks, r.dial(u, tok, tick))
	}
	defer func() {
		for _, s := range socks {
			_ = s.ws.Close()
		}
	}()
	attempt := func(s *raceSocket, id string) int64 {
		after := rng.IntN(10)
		if rng.IntN(2) == 0 {
			return s.send(r.t, tick, requestFrame(id, after))
		}
		return s.send(r.t, tick, map[string]any{"type": "resume", "request_id": id, "after_seq": after})
	}
	for q := range requests {
		id := fmt.Sprintf("ending-%d-%d", i, q)
		home := socks[0]
		sent := home.send(r.t, tick, requestFrame(id, 0))
		// A re-send while the answer streams (or as it ends).
		time.Sleep(time.Duration(rng.IntN(4000)) * time.Microsecond) // jitter over the answer's life, not a wait for it
		s := socks[rng.IntN(len(socks))]
		sentMid := s.send(r.t, tick, requestFrame(id, rng.IntN(10)))
		if !home.await(id, sent, errs, sub) || !s.await(id, sentMid, errs, sub) {
			return
		}
		for range attempts - 2 {
			// At once when the last terminal arrived (its delivery may
			// still be returning), or a little later.
			if rng.IntN(2) == 0 {
				time.Sleep(time.Duration(rng.IntN(1000)) * time.Microsecond)
			}
			s := socks[rng.IntN(len(socks))]
			if !s.await(id, attempt(s, id), errs, sub) {
				return
			}
		}
	}
	for _, s := range socks {
		s.mu.Lock()
		for _, b := range s.bad {
			errs <- fmt.Sprintf("%s: %s", sub, b)
		}
		s.mu.Unlock()
	}
	// Each request's terminals are one frame, the same on every socket.
	want := map[string]string{}
	for _, s := range socks {
		s.mu.Lock()
		for id, f := range s.first {
			if w, ok := want[id]; ok && w != f {
				errs <- fmt.Sprintf("%s: %s ended differently on two sockets:\n%s\n%s", sub, id, w, f)
			}
			want[id] = f
		}
		s.mu.Unlock()
	}
}

// await waits for a terminal of id read after event sent; false (and the
// problem reported) when none comes.
func (s *raceSocket) await(id string, sent int64, errs chan<- string, sub string) bool {
	timeout := time.After(answerWithin)
	for {
		s.mu.Lock()
		got, readErr, changed := s.termAt[id] > sent, s.readErr, s.changed
		s.mu.Unlock()
		switch {
		case got:
			return true
		case readErr != nil:
			errs <- fmt.Sprintf("%s: socket read: %v", sub, readErr)
			return false
		}
		select {
		case <-changed:
		case <-timeout:
			errs <- fmt.Sprintf("%s: no terminal for %s within %s of an attempt", sub, id, answerWithin)
			return false
		}
	}
}

// requestFrame is request id's frame (its body the same every time, so a
// re-send is the same request), resuming after seq after.
func requestFrame(id string, after int) map[string]any {
	return map[string]any{"type": "request", "request_id": id, "after_seq": after, "max_tokens": 8,
		"messages": []map[string]string{{"role": "user", "content": "around the ending"}}}
}

func (r *endingRace) dial(url, tok string, tick func() int64) *raceSocket {
	r.t.Helper()
	h := http.Header{}
	h.Set("Authorization", "Bearer "+tok)
	d := websocket.Dialer{Subprotocols: []string{"jetway.v1"}, HandshakeTimeout: 10 * time.Second}
	ws, resp, err := d.Dial(url, h)
	if err != nil {
		r.t.Fatalf("dial %s: %v (%v)", url, err, resp)
	}
	s := &raceSocket{ws: ws, termAt: map[string]int64{}, first: map[string]string{}, changed: make(chan struct{})}
	go s.read(tick)
	return s
}

// send writes an attempt and returns its event: a terminal read after it
// answers it.
func (s *raceSocket) send(t *testing.T, tick func() int64, frame map[string]any) int64 {
	b, _ := json.Marshal(frame)
	at := tick() // before the write: the answer may be read before Write returns
	s.writeMu.Lock()
	err := s.ws.WriteMessage(websocket.TextMessage, b)
	s.writeMu.Unlock()
	if err != nil {
		t.Errorf("write %v: %v", frame["request_id"], err)
	}
	return at
}

// wake tells waiters something changed. Callers hold mu.
func (s *raceSocket) wake() {
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *raceSocket) read(tick func() int64) {
	for {
		_, data, err := s.ws.ReadMessage()
		if err != nil {
			s.mu.Lock()
			s.readErr = err
			s.wake()
			s.mu.Unlock()
			return
		}
		var f struct {
			Type      string `json:"type"`
			RequestID string `json:"request_id"`
			Code      string `json:"code"`
			Chunks    *int   `json:"chunks"`
		}
		if json.Unmarshal(data, &f) != nil {
			s.fail(fmt.Sprintf("a frame that is not JSON: %.100s", data))
			continue
		}
		switch {
		case f.Type == "done" || (f.Type == "error" && f.Chunks != nil):
			s.mu.Lock()
			s.termAt[f.RequestID] = tick()
			s.wake()
			if prev, ok := s.first[f.RequestID]; !ok {
				s.first[f.RequestID] = string(data)
			} else if prev != string(data) {
				s.bad = append(s.bad, fmt.Sprintf("%s: a second terminal differs:\n%s\n%s", f.RequestID, prev, data))
			}
			s.mu.Unlock()
			if f.Type != "done" {
				s.fail(fmt.Sprintf("%s ended %s, want done", f.RequestID, data))
			}
		case f.Type == "error":
			// An attempt refused (no chunks): the request runs on, but an
			// attempt here is never refused: the request is known.
			s.fail(fmt.Sprintf("attempt refused: %s", data))
		}
	}
}

func (s *raceSocket) fail(msg string) {
	s.mu.Lock()
	s.bad = append(s.bad, msg)
	s.mu.Unlock()
}
