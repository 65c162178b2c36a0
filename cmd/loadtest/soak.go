package main

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/jetway-gateway/jetway/client"
)

// SoakInterval is one row of the soak table.
type SoakInterval struct {
	EndS       float64 `json:"end_s"`
	Done       int64   `json:"done"`
	Errors     int64   `json:"errors"`
	Lost       int64   `json:"chunks_lost"`
	Never      int64   `json:"never_finished"`
	TTFT       Dist    `json:"ttft_client"`
	Latency    Dist    `json:"latency"`
	RSS        int64   `json:"gateway_rss_bytes"` // -1 unknown
	Goroutines int64   `json:"gateway_goroutines"`
}

// SoakResult is the soak's rows and the drift from the first to the last.
type SoakResult struct {
	Drops     int64          `json:"drops"`
	Intervals []SoakInterval `json:"intervals"`
	// Drift: last interval minus first.
	DriftTTFTP50    float64 `json:"drift_ttft_p50_ms"`
	DriftLatencyP99 float64 `json:"drift_latency_p99_ms"`
	DriftRSS        int64   `json:"drift_rss_bytes"`
	DriftGoroutines int64   `json:"drift_goroutines"`
	// The second half of the run's rows: the mean RSS (the plateau) and
	// its least-squares slope (the leak rate), MiB per minute; -1 unknown.
	RSSPlateau     int64   `json:"rss_plateau_bytes"`
	RSSSlopeMiBMin float64 `json:"rss_slope_mib_per_min"`
}

// rssTrend is the mean and the least-squares slope (MiB per minute) of the
// second half of rows' RSS; -1, -1 when fewer than two rows have one.
func rssTrend(rows []SoakInterval) (int64, float64) {
	var xs, ys []float64
	for _, r := range rows[len(rows)/2:] {
		if r.RSS >= 0 {
			xs, ys = append(xs, r.EndS/60), append(ys, float64(r.RSS)/(1<<20))
		}
	}
	if len(xs) < 2 {
		return -1, -1
	}
	var mx, my float64
	for i := range xs {
		mx, my = mx+xs[i], my+ys[i]
	}
	mx, my = mx/float64(len(xs)), my/float64(len(xs))
	var sxy, sxx float64
	for i := range xs {
		sxy += (xs[i] - mx) * (ys[i] - my)
		sxx += (xs[i] - mx) * (xs[i] - mx)
	}
	return int64(my * (1 << 20)), math.Round(sxy/sxx*100) / 100
}

// soak runs a steady mix with reconnection on, cutting a random session's
// connection every --drop-every, and reports a row per --interval.
func (e *env) soak(ctx context.Context) (*Report, error) {
	s := e.s
	if err := e.prefetch(ctx, s.Users); err != nil {
		return nil, err
	}
	l := newLedger(s.MockText)
	nIntervals := max(1, int((s.Duration+s.Interval-1)/s.Interval))
	rows := make([]*ledger, nIntervals)
	for i := range rows {
		rows[i] = newLedger(s.MockText)
	}
	probe := newGatewayProbe(s.PID, s.AdminURL)
	samples := make([]procSample, nIntervals)

	clients := make([]*client.Client, 0, s.Users)
	for u := 0; u < s.Users; u++ {
		c, err := e.dial(ctx, u, true, l)
		if err == nil {
			clients = append(clients, c)
		}
	}
	defer closeAll(clients)

	start := time.Now()
	deadline := start.Add(s.Duration)
	stop := make(chan struct{})
	bar := e.progress.bar(int64(s.Duration/time.Second), "soak (s)")
	bar.clock(start, stop)

	var bg sync.WaitGroup
	var drops int64
	if s.DropEvery > 0 && len(clients) > 0 {
		bg.Add(1)
		go func() {
			defer bg.Done()
			t := time.NewTicker(s.DropEvery)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
					clients[rand.IntN(len(clients))].Drop()
					drops++
				}
			}
		}()
	}
	bg.Add(1)
	go func() {
		defer bg.Done()
		for i := range samples {
			samples[i] = procSample{RSS: -1, Goroutines: -1}
			select {
			case <-stop:
				return
			case <-time.After(time.Until(start.Add(time.Duration(i+1) * s.Interval))):
			}
			if p, err := probe.sample(ctx); err == nil {
				samples[i] = p
			}
		}
	}()

	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; time.Now().Before(deadline) && ctx.Err() == nil; r++ {
				o := e.ask(ctx, c, i*1_000_000+r, l, nil)
				if o.call != nil && ctx.Err() == nil && o.call.SentAt().After(start) {
					idx := min(int(o.ended.Sub(start)/s.Interval), nIntervals-1)
					rows[idx].record(o)
				}
				select {
				case <-time.After(s.Pause):
				case <-ctx.Done():
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	bg.Wait()
	bar.finish()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for _, c := range clients {
		l.reconnects(c.Reconnects.Load())
	}

	res := SoakResult{Drops: drops}
	for i, row := range rows {
		a, lat := row.snapshot()
		var errs int64
		for _, n := range a.Errors {
			errs += n
		}
		res.Intervals = append(res.Intervals, SoakInterval{EndS: (time.Duration(i+1) * s.Interval).Seconds(), Done: a.Done,
			Errors: errs, Lost: a.ChunksLost, Never: a.NeverFinished, TTFT: lat.ClientTTFT, Latency: lat.Latency,
			RSS: samples[i].RSS, Goroutines: samples[i].Goroutines})
	}
	res.RSSPlateau, res.RSSSlopeMiBMin = -1, -1
	if n := len(res.Intervals); n > 1 {
		res.RSSPlateau, res.RSSSlopeMiBMin = rssTrend(res.Intervals)
		first, last := res.Intervals[0], res.Intervals[n-1]
		res.DriftTTFTP50 = last.TTFT.P50 - first.TTFT.P50
		res.DriftLatencyP99 = last.Latency.P99 - first.Latency.P99
		if first.RSS >= 0 && last.RSS >= 0 {
			res.DriftRSS = last.RSS - first.RSS
		}
		if first.Goroutines >= 0 && last.Goroutines >= 0 {
			res.DriftGoroutines = last.Goroutines - first.Goroutines
		}
	}
	a, lat := l.snapshot()
	rep := &Report{Scenario: "soak", URL: s.URL, Started: start, Seconds: time.Since(start).Seconds(),
		Params: map[string]any{"users": s.Users, "duration_s": s.Duration.Seconds(), "pause_ms": s.Pause.Milliseconds(),
			"drop_every_s": s.DropEvery.Seconds(), "interval_s": s.Interval.Seconds()},
		Accounting: a, Latencies: lat, Soak: &res}
	rep.Problems = a.problems()
	if len(clients) < s.Users {
		rep.Problems = append(rep.Problems, fmt.Sprintf("%d of %d sessions could not connect", s.Users-len(clients), s.Users))
	}
	return rep, nil
}
