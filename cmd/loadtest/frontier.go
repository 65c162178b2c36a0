package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"
)

// FrontierResult is the frontier scenario's result: for each path (every
// Jetway door named by --paths, and the peer gateway of --peer-url), the
// rate steps it was driven through and, for each added-p99 bound, the
// highest rate it held within it.
type FrontierResult struct {
	Rates   []float64        `json:"rates"`
	Bounds  []float64        `json:"bounds_ms"`
	Seconds float64          `json:"seconds_per_step"`
	Targets []FrontierTarget `json:"targets"`
}

// FrontierTarget is one path's climb.
type FrontierTarget struct {
	Name  string         `json:"name"`
	URL   string         `json:"url"`
	Steps []FrontierStep `json:"steps"`
	// Held[i] is the highest rate of Steps held within Bounds[i] (0: none):
	// every request answered, none left unsent for want of a slot, and the
	// added p99 (the path's p99 minus the direct path's in the same step)
	// at most the bound.
	Held []float64 `json:"held"`
	// CPUAt[i] is the gateway's CPU per request (µs) at Held[i] (-1 unknown).
	CPUAt []float64 `json:"cpu_per_request_us_at_held"`
	// Stopped says why the climb ended before the last rate, if it did.
	Stopped string `json:"stopped,omitempty"`
}

// FrontierStep is one rate step of one path.
type FrontierStep struct {
	Rate        float64 `json:"rate"`
	RPS         float64 `json:"rps"`
	DirectRPS   float64 `json:"direct_rps"`
	DirectP99   float64 `json:"direct_p99_ms"`
	P50         float64 `json:"p50_ms"`
	P99         float64 `json:"p99_ms"`
	AddedP50    float64 `json:"added_p50_ms"`
	AddedP99    float64 `json:"added_p99_ms"`
	Errors      int64   `json:"errors"`
	Skipped     int64   `json:"skipped"`
	CPUCores    float64 `json:"gateway_cpu_cores"`
	CPUPerReqUS float64 `json:"gateway_cpu_per_request_us"`
	// Held: every request of the step answered and sent on schedule.
	Held bool `json:"held"`
}

// frontier drives each path through --rates in turn (each step --ramp
// unmeasured, then --duration measured, beside as many direct calls to
// the mock, as in the rate scenario), and stops a path's climb at the
// first step it does not hold, or whose added p99 is past the largest
// bound. Paths take turns at each rate, so they see the machine alike.
func (e *env) frontier(ctx context.Context) (*Report, error) {
	s := e.s
	r, err := e.newRater(ctx)
	if err != nil {
		return nil, err
	}
	var targets []rateTarget
	for _, p := range s.Paths {
		targets = append(targets, r.door(p))
	}
	if s.PeerURL != "" {
		h := s.peerHeader()
		h.Set("Content-Type", "application/json")
		targets = append(targets, rateTarget{name: s.PeerName, url: s.PeerURL, header: h, model: s.peerModel(), pid: s.PeerPID})
	}
	res := FrontierResult{Rates: s.Rates, Bounds: s.Bounds, Seconds: s.Duration.Seconds(), Targets: make([]FrontierTarget, len(targets))}
	for i, t := range targets {
		res.Targets[i] = FrontierTarget{Name: t.name, URL: t.url, Held: make([]float64, len(s.Bounds)), CPUAt: make([]float64, len(s.Bounds))}
		for b := range s.Bounds {
			res.Targets[i].CPUAt[b] = -1
		}
	}
	maxBound := s.Bounds[len(s.Bounds)-1]
	start := time.Now()
	rep := &Report{Scenario: "frontier", URL: s.URL, Started: start, Frontier: &res}
	for _, rate := range s.Rates {
		for i, t := range targets {
			ft := &res.Targets[i]
			if ft.Stopped != "" {
				continue
			}
			st, gerrs, derrs, err := r.step(ctx, t, rate, s.Duration, fmt.Sprintf("%s at %g/s", t.name, rate))
			if err != nil {
				return nil, err
			}
			step := FrontierStep{Rate: rate, RPS: st.Door.RPS, DirectRPS: st.Direct.RPS, DirectP99: st.Direct.Latency.P99,
				P50: st.Door.Latency.P50, P99: st.Door.Latency.P99, AddedP50: st.Added.P50, AddedP99: st.Added.P99,
				Errors: st.Door.Errors, Skipped: st.Skipped, CPUCores: st.GatewayCPUCores, CPUPerReqUS: st.GatewayCPUPerReq}
			step.Held = st.Door.Errors == 0 && st.Skipped == 0
			ft.Steps = append(ft.Steps, step)
			for msg, n := range gerrs {
				rep.Notes = append(rep.Notes, fmt.Sprintf("%s at %g/s: %d requests failed: %s", t.name, rate, n, msg))
			}
			for msg, n := range derrs {
				rep.Notes = append(rep.Notes, fmt.Sprintf("direct beside %s at %g/s: %d requests failed: %s", t.name, rate, n, msg))
			}
			switch {
			case !step.Held:
				ft.Stopped = fmt.Sprintf("at %g/s: %d errors, %d not sent", rate, step.Errors, step.Skipped)
			case step.AddedP99 > maxBound:
				ft.Stopped = fmt.Sprintf("at %g/s: added p99 %.2f ms", rate, step.AddedP99)
			}
			if st.Direct.Errors > 0 {
				ft.Stopped = fmt.Sprintf("at %g/s: the direct path failed (%d errors): the mock or the load tool is the limit", rate, st.Direct.Errors)
			}
			if !step.Held {
				continue
			}
			for b, bound := range s.Bounds {
				if step.AddedP99 <= bound && rate > ft.Held[b] {
					ft.Held[b], ft.CPUAt[b] = rate, step.CPUPerReqUS
				}
			}
		}
	}
	rep.Seconds = time.Since(start).Seconds()
	rep.Params = map[string]any{"rates": s.Rates, "bounds_ms": s.Bounds, "paths": s.Paths, "peer_url": s.PeerURL, "peer_name": s.PeerName,
		"duration_s": s.Duration.Seconds(), "ramp_s": s.Ramp.Seconds(), "inflight": s.Inflight, "users": r.users,
		"bedrock_url": s.BedrockURL, "bedrock_model": s.BedrockModel, "model": r.model, "max_tokens": r.maxTokens, "pid": s.PID, "peer_pid": s.PeerPID}
	return rep, nil
}

// writeFrontier is the frontier report: the held rates per bound, then
// every step.
func writeFrontier(b *strings.Builder, f *FrontierResult) {
	fmt.Fprintf(b, "Non-streaming requests, each path at each rate beside as many direct calls to the mock, %.0f s measured per step.\n\n", f.Seconds)
	b.WriteString("| Path |")
	for _, bound := range f.Bounds {
		fmt.Fprintf(b, " held at added p99 <= %g ms (CPU/request) |", bound)
	}
	b.WriteString(" climb ended |\n|---|")
	for range f.Bounds {
		b.WriteString("---|")
	}
	b.WriteString("---|\n")
	for _, t := range f.Targets {
		fmt.Fprintf(b, "| %s |", t.Name)
		for i := range f.Bounds {
			switch {
			case t.Held[i] == 0:
				b.WriteString(" none |")
			case t.CPUAt[i] >= 0:
				fmt.Fprintf(b, " %g/s (%.0f us) |", t.Held[i], t.CPUAt[i])
			default:
				fmt.Fprintf(b, " %g/s |", t.Held[i])
			}
		}
		stopped := t.Stopped
		if stopped == "" {
			stopped = "held every rate"
		}
		fmt.Fprintf(b, " %s |\n", stopped)
	}
	b.WriteString("\n| Path | rate | achieved | direct p99 | p50 | p99 | added p50 | added p99 | errors | not sent | gateway cores | CPU/request |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, t := range f.Targets {
		steps := append([]FrontierStep(nil), t.Steps...)
		sort.Slice(steps, func(i, j int) bool { return steps[i].Rate < steps[j].Rate })
		for _, s := range steps {
			cores, cpu := "-", "-"
			if s.CPUCores >= 0 {
				cores = fmt.Sprintf("%.2f", s.CPUCores)
			}
			if s.CPUPerReqUS >= 0 {
				cpu = fmt.Sprintf("%.0f us", s.CPUPerReqUS)
			}
			fmt.Fprintf(b, "| %s | %g/s | %.0f/s | %.2f ms | %.2f ms | %.2f ms | %+.2f ms | %+.2f ms | %d | %d | %s | %s |\n",
				t.Name, s.Rate, s.RPS, s.DirectP99, s.P50, s.P99, s.AddedP50, s.AddedP99, s.Errors, s.Skipped, cores, cpu)
		}
	}
	b.WriteString("\n")
}
