package main

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jetway-gateway/jetway/client"
	"github.com/jetway-gateway/jetway/internal/mockmodel"
)

// Accounting is the delivery ledger of a run: what was sent, what the
// server said it published, what arrived. Every counter is over the whole
// run; the JSON names are the report's.
type Accounting struct {
	Sent          int64            `json:"requests_sent"`
	Accepted      int64            `json:"accepted"`
	Done          int64            `json:"done"`
	Errors        map[string]int64 `json:"errors_by_code"`
	ErrorsAfter   int64            `json:"errors_after_accepted"`
	NeverFinished int64            `json:"never_finished"`

	ChunksPublished int64 `json:"chunks_published"` // sum of done.chunks (and error.chunks)
	ChunksReceived  int64 `json:"chunks_received"`  // distinct seqs that arrived
	ChunkFrames     int64 `json:"chunk_frames"`     // chunk frames that arrived, duplicates included
	FramesReceived  int64 `json:"frames_received"`  // accepted + chunk + terminal frames, replays included
	ChunksLost      int64 `json:"chunks_lost"`
	Incomplete      int64 `json:"incomplete_answers"` // chunks missing, or chunks joined != done.text
	Duplicates      int64 `json:"duplicate_chunks"`
	OutOfOrder      int64 `json:"out_of_order_chunks"` // arrived ahead of a gap that was then filled
	WrongText       int64 `json:"wrong_answers"`       // done.text differs from the mock model's answer
	Resends         int64 `json:"resends"`
	Resumes         int64 `json:"resumes"`

	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`

	SessionsOpened int64            `json:"sessions_opened"`
	SessionErrors  map[string]int64 `json:"sessions_refused,omitempty"`
	Reconnects     int64            `json:"reconnects"`
}

// Dist is a latency distribution in milliseconds.
type Dist struct {
	N    int     `json:"n"`
	P50  float64 `json:"p50_ms"`
	P95  float64 `json:"p95_ms"`
	P99  float64 `json:"p99_ms"`
	Max  float64 `json:"max_ms"`
	Mean float64 `json:"mean_ms"`
}

// Latencies are the run's timing distributions.
type Latencies struct {
	ClientTTFT Dist `json:"ttft_client"` // request sent -> first chunk, as the client saw it
	ServerTTFT Dist `json:"ttft_server"` // done.ttft_ms: request arrival -> first model token, inside the gateway
	Latency    Dist `json:"latency"`     // request sent -> terminal frame
}

// ledger collects outcomes from many goroutines.
type ledger struct {
	mockText bool

	mu                   sync.Mutex
	a                    Accounting
	ttft, sttft, latency []time.Duration
	doneTimes            []usageAt // for requests past a quota
}

type usageAt struct {
	at     time.Time
	tokens int64
}

func newLedger(mockText bool) *ledger {
	return &ledger{mockText: mockText, a: Accounting{Errors: map[string]int64{}, SessionErrors: map[string]int64{}}}
}

// sent counts a request handed to the client.
func (l *ledger) sent() {
	l.mu.Lock()
	l.a.Sent++
	l.mu.Unlock()
}

// session counts a session opened, or refused with err.
func (l *ledger) session(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err == nil {
		l.a.SessionsOpened++
		return
	}
	l.a.SessionErrors[errCode(err)]++
}

func (l *ledger) reconnects(n int64) {
	l.mu.Lock()
	l.a.Reconnects += n
	l.mu.Unlock()
}

// errCode names an error for the tables: the protocol code, the HTTP
// refusal's code, or a client-side condition.
func errCode(err error) string {
	var e *client.Error
	var he *client.HTTPError
	switch {
	case errors.As(err, &e):
		return e.Code
	case errors.As(err, &he):
		return fmt.Sprintf("http_%d_%s", he.Status, he.Code)
	case errors.Is(err, client.ErrDisconnected):
		return "client_disconnected"
	case errors.Is(err, client.ErrClosed):
		return "client_closed"
	}
	return "client_error"
}

// outcome is what happened to one call.
type outcome struct {
	call     *client.Call
	done     *client.Done
	err      error
	timedOut bool
	ended    time.Time
	prompt   string // the single user message, for the mock text check
}

// record books one finished (or abandoned) call.
func (l *ledger) record(o outcome) {
	st := o.call.Stats()
	acc := o.call.AcceptedFrame() != nil
	unique := int64(st.ChunksReceived - st.Duplicates)
	lastSeq := o.call.LastSeq()
	var ttft time.Duration
	if fc := o.call.FirstChunkAt(); !fc.IsZero() {
		ttft = fc.Sub(o.call.SentAt())
	}
	wrong := false
	if o.done != nil && l.mockText && o.prompt != "" && !o.done.Cached {
		want := strings.Join(mockmodel.Tokens(o.done.Model, "", []string{o.prompt}, int(o.done.Usage.OutputTokens)), "")
		wrong = want != o.done.Text
	}

	l.mu.Lock()
	defer l.mu.Unlock()
	a := &l.a
	if acc {
		a.Accepted++
	}
	a.ChunkFrames += int64(st.ChunksReceived)
	a.FramesReceived += int64(st.ChunksReceived + st.Terminals)
	if acc {
		a.FramesReceived++
	}
	a.ChunksReceived += unique
	a.Duplicates += int64(st.Duplicates)
	// A frame that arrived past a gap that was never filled is the lost
	// chunk's consequence (the client counts it out of order on arrival):
	// only frames that arrived early and were later put in place count as
	// reordered.
	a.OutOfOrder += max(0, int64(st.OutOfOrder)-max(0, unique-int64(lastSeq)))
	a.Resends += int64(st.Resends)
	a.Resumes += int64(st.Resumes)
	published := int64(-1)
	switch {
	case o.timedOut:
		a.NeverFinished++
	case o.err != nil:
		a.Errors[errCode(o.err)]++
		var e *client.Error
		if acc {
			a.ErrorsAfter++
		}
		if errors.As(o.err, &e) && e.Chunks != nil {
			published = int64(*e.Chunks)
		}
	default:
		d := o.done
		a.Done++
		published = int64(d.Chunks)
		a.InputTokens += d.Usage.InputTokens
		a.OutputTokens += d.Usage.OutputTokens
		if lastSeq < d.Chunks || st.Mismatch {
			a.Incomplete++
		}
		if wrong {
			a.WrongText++
		}
		l.sttft = append(l.sttft, time.Duration(d.TTFTMs)*time.Millisecond)
		l.latency = append(l.latency, o.ended.Sub(o.call.SentAt()))
		l.doneTimes = append(l.doneTimes, usageAt{o.ended, d.Usage.InputTokens + d.Usage.OutputTokens})
	}
	if published >= 0 {
		a.ChunksPublished += published
		if lost := published - unique; lost > 0 {
			a.ChunksLost += lost
		}
	}
	if ttft > 0 && o.done != nil {
		l.ttft = append(l.ttft, ttft)
	}
}

// snapshot returns a copy of the accounting and the latency distributions.
func (l *ledger) snapshot() (Accounting, Latencies) {
	l.mu.Lock()
	defer l.mu.Unlock()
	a := l.a
	a.Errors = maps(l.a.Errors)
	a.SessionErrors = maps(l.a.SessionErrors)
	return a, Latencies{ClientTTFT: dist(l.ttft), ServerTTFT: dist(l.sttft), Latency: dist(l.latency)}
}

func maps(m map[string]int64) map[string]int64 {
	out := make(map[string]int64, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// problems lists what makes the run fail. allowed are error codes that are
// a correct outcome in this scenario (quota_exceeded in the quota test).
func (a *Accounting) problems(allowed ...string) []string {
	var p []string
	add := func(n int64, what string) {
		if n > 0 {
			p = append(p, fmt.Sprintf("%d %s", n, what))
		}
	}
	add(a.ChunksLost, "chunks lost")
	add(a.Incomplete, "incomplete answers")
	add(a.NeverFinished, "requests never finished")
	add(a.Duplicates, "duplicate chunks")
	add(a.OutOfOrder, "out-of-order chunks")
	add(a.WrongText, "wrong answers")
	for _, code := range sortedKeys(a.Errors) {
		if !slices.Contains(allowed, code) {
			add(a.Errors[code], "errors "+code)
		}
	}
	for _, code := range sortedKeys(a.SessionErrors) {
		add(a.SessionErrors[code], "sessions refused "+code)
	}
	return p
}

func sortedKeys(m map[string]int64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// dist summarises durations with nearest-rank percentiles.
func dist(ds []time.Duration) Dist {
	if len(ds) == 0 {
		return Dist{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	return Dist{N: len(s), P50: ms(pct(s, 50)), P95: ms(pct(s, 95)), P99: ms(pct(s, 99)), Max: ms(s[len(s)-1]),
		Mean: ms(sum / time.Duration(len(s)))}
}

// pct is the p-th percentile of sorted s (nearest rank).
func pct(s []time.Duration, p float64) time.Duration {
	i := int(math.Ceil(float64(len(s))*p/100)) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func ms(d time.Duration) float64 { return math.Round(float64(d)/1e3) / 1e3 }

func joinProblems(p []string) string { return strings.Join(p, ", ") }
