package main

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// CapacityResult is what one gateway holds and moves.
type CapacityResult struct {
	Source          string `json:"source"` // proc or metrics
	IdleSessions    int64  `json:"idle_sessions"`
	GatewaySessions int64  `json:"gateway_sessions"` // from /readyz, -1 unknown
	RSSBefore       int64  `json:"rss_before_bytes"`
	RSSAfter        int64  `json:"rss_after_bytes"`
	// With --pid: RSSAfter's anonymous and file-backed parts (-1 unknown).
	RSSAfterAnon      int64   `json:"rss_after_anon_bytes"`
	RSSAfterFile      int64   `json:"rss_after_file_bytes"`
	RSSPerSession     float64 `json:"rss_per_session_bytes"`
	HeapPerSession    float64 `json:"heap_inuse_per_session_bytes"` // -1 unknown
	GoroutinesBefore  int64   `json:"goroutines_before"`
	GoroutinesAfter   int64   `json:"goroutines_after"`
	RampSeconds       float64 `json:"ramp_s"`
	StreamingSessions int     `json:"streaming_sessions"`
	StreamSeconds     float64 `json:"stream_s"`
	ChunkFrames       int64   `json:"chunk_frames"`
	ChunkFramesPerSec float64 `json:"chunk_frames_per_s"`
	RequestsPerSec    float64 `json:"requests_per_s"`
	GatewayCPUCores   float64 `json:"gateway_cpu_cores"` // CPU seconds per wall second; -1 unknown
	// GatewayCPUPerFrameUS is the gateway's CPU (utime+stime) over the
	// streaming phase divided by the chunk frames delivered, in
	// microseconds; -1 unknown. With the mock's one token per delta and
	// one delta per frame it is the CPU per streamed token.
	GatewayCPUPerFrameUS float64 `json:"gateway_cpu_per_chunk_frame_us"`
	ToolCPUCores         float64 `json:"loadtest_cpu_cores"`
	// The gateway's RSS at the end of the streaming phase, and its
	// anonymous and file-backed parts (--pid; -1 unknown).
	StreamRSS     int64 `json:"stream_rss_bytes"`
	StreamRSSAnon int64 `json:"stream_rss_anon_bytes"`
	StreamRSSFile int64 `json:"stream_rss_file_bytes"`
}

// capacity ramps idle sessions and reads the gateway's memory, then
// streams as fast as the mock allows and counts chunk frames per second.
func (e *env) capacity(ctx context.Context) (*Report, error) {
	s := e.s
	probe := newGatewayProbe(s.PID, s.AdminURL)
	base, err := probe.sample(ctx)
	if err != nil {
		return nil, err
	}
	res := CapacityResult{Source: base.Source, RSSBefore: base.RSS, GoroutinesBefore: base.Goroutines, HeapPerSession: -1,
		GatewaySessions: -1, GatewayCPUCores: -1, GatewayCPUPerFrameUS: -1, RSSAfterAnon: -1, RSSAfterFile: -1,
		StreamRSS: -1, StreamRSSAnon: -1, StreamRSSFile: -1}
	l := newLedger(s.MockText)
	start := time.Now()
	var notes []string

	if s.Sessions > 0 {
		users := s.usersFor(s.Sessions)
		if err := e.prefetch(ctx, users); err != nil {
			return nil, err
		}
		rampStart := time.Now()
		idle, err := e.openSessions(ctx, s.URL, s.Sessions, users, l, "idle sessions")
		if err != nil {
			return nil, err
		}
		res.RampSeconds = time.Since(rampStart).Seconds()
		res.IdleSessions = int64(len(idle))
		select {
		case <-time.After(s.Settle):
		case <-ctx.Done():
			closeAll(idle)
			return nil, ctx.Err()
		}
		after, err := probe.sample(ctx)
		if err != nil {
			closeAll(idle)
			return nil, err
		}
		res.RSSAfter, res.GoroutinesAfter, res.GatewaySessions = after.RSS, after.Goroutines, after.Sessions
		res.RSSAfterAnon, res.RSSAfterFile = after.RSSAnon, after.RSSFile
		if n := float64(len(idle)); n > 0 {
			res.RSSPerSession = float64(after.RSS-base.RSS) / n
			if after.HeapInuse >= 0 && base.HeapInuse >= 0 {
				res.HeapPerSession = float64(after.HeapInuse-base.HeapInuse) / n
			}
		}
		closeAll(idle)
	}

	if s.StreamingSessions > 0 {
		// Every user may have 8 requests in flight: spread the sessions so that
		// none of them is held back by its user's cap.
		perUser := max(1, 8/max(1, s.StreamInflight))
		users := max(1, (s.StreamingSessions+perUser-1)/perUser)
		if err := e.prefetch(ctx, users); err != nil {
			return nil, err
		}
		clients, err := e.openSessions(ctx, s.URL, s.StreamingSessions, users, l, "streaming sessions")
		if err != nil {
			return nil, err
		}
		res.StreamingSessions = len(clients)
		before, err := probe.sample(ctx)
		if err != nil {
			closeAll(clients)
			return nil, err
		}
		toolBefore := selfCPU()
		t0 := time.Now()
		deadline := t0.Add(s.StreamDuration)
		stop := make(chan struct{})
		bar := e.progress.bar(int64(s.StreamDuration/time.Second), "streaming (s)")
		bar.clock(t0, stop)
		var wg sync.WaitGroup
		var n int64
		var mu sync.Mutex
		for i, c := range clients {
			for k := 0; k < s.StreamInflight; k++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for r := 0; time.Now().Before(deadline) && ctx.Err() == nil; r++ {
						o := e.ask(ctx, c, (i*s.StreamInflight+k)*1_000_000+r, l, nil)
						mu.Lock()
						n++
						mu.Unlock()
						if isDisconnect(o.err) {
							return
						}
					}
				}()
			}
		}
		wg.Wait()
		elapsed := time.Since(t0)
		close(stop)
		bar.finish()
		after, err := probe.sample(ctx)
		closeAll(clients)
		if err != nil {
			return nil, err
		}
		a, _ := l.snapshot()
		res.StreamSeconds = elapsed.Seconds()
		res.StreamRSS, res.StreamRSSAnon, res.StreamRSSFile = after.RSS, after.RSSAnon, after.RSSFile
		res.ChunkFrames = a.ChunkFrames
		res.ChunkFramesPerSec = float64(a.ChunkFrames) / elapsed.Seconds()
		res.RequestsPerSec = float64(n) / elapsed.Seconds()
		if before.CPUSeconds >= 0 && after.CPUSeconds >= 0 {
			res.GatewayCPUCores = (after.CPUSeconds - before.CPUSeconds) / elapsed.Seconds()
			res.GatewayCPUPerFrameUS = cpuPerFrameUS(after.CPUSeconds-before.CPUSeconds, a.ChunkFrames)
		}
		res.ToolCPUCores = (selfCPU() - toolBefore) / elapsed.Seconds()
		if before.Source == "metrics" {
			notes = append(notes, "gateway CPU from process_cpu_seconds_total (10 ms resolution)")
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	a, lat := l.snapshot()
	rep := &Report{Scenario: "capacity", URL: s.URL, Started: start, Seconds: time.Since(start).Seconds(),
		Params: map[string]any{"sessions": s.Sessions, "sessions_per_user": s.SessionsPerUser,
			"streaming_sessions": s.StreamingSessions, "stream_inflight": s.StreamInflight,
			"stream_duration_s": s.StreamDuration.Seconds(), "settle_s": s.Settle.Seconds(), "pid": s.PID, "admin_url": s.AdminURL},
		Accounting: a, Latencies: lat, Capacity: &res, Notes: notes}
	rep.Problems = a.problems()
	if res.GatewaySessions >= 0 && s.Sessions > 0 && res.GatewaySessions < res.IdleSessions {
		rep.Problems = append(rep.Problems, fmt.Sprintf("the gateway reported %d sessions, %d were opened", res.GatewaySessions, res.IdleSessions))
	}
	return rep, nil
}

// cpuPerFrameUS is CPU seconds per frame in microseconds; -1 without frames.
func cpuPerFrameUS(cpuSeconds float64, frames int64) float64 {
	if frames <= 0 {
		return -1
	}
	return cpuSeconds / float64(frames) * 1e6
}
