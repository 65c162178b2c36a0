package main

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
)

// Report is one run's result: the markdown tables and the --json document.
type Report struct {
	Scenario   string          `json:"scenario"`
	URL        string          `json:"url"`
	Started    time.Time       `json:"started"`
	Seconds    float64         `json:"seconds"`
	TimeoutS   float64         `json:"timeout_s"`
	Params     map[string]any  `json:"params"`
	Accounting Accounting      `json:"accounting"`
	Latencies  Latencies       `json:"latencies"`
	Quota      *QuotaResult    `json:"quota,omitempty"`
	Overhead   *OverheadResult `json:"overhead,omitempty"`
	Rate       *RateResult     `json:"rate,omitempty"`
	Frontier   *FrontierResult `json:"frontier,omitempty"`
	Capacity   *CapacityResult `json:"capacity,omitempty"`
	Soak       *SoakResult     `json:"soak,omitempty"`
	// PromptCache is the promptcache scenario's result.
	PromptCache *PromptCacheResult `json:"prompt_cache,omitempty"`
	// Responses is the responses scenario's result.
	Responses *ResponsesResult `json:"responses,omitempty"`
	Notes     []string         `json:"notes,omitempty"`
	Problems  []string         `json:"problems"`
	OK        bool             `json:"ok"`
}

func (r *Report) writeJSON(w io.Writer) error {
	r.OK = len(r.Problems) == 0
	if r.Problems == nil {
		r.Problems = []string{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// writeMarkdown writes the article's tables.
func (r *Report) writeMarkdown(w io.Writer) error {
	var b strings.Builder
	a := r.Accounting
	fmt.Fprintf(&b, "## loadtest %s\n\n", r.Scenario)
	fmt.Fprintf(&b, "%s against %s, %.1f s", r.Started.Format(time.RFC3339), r.URL, r.Seconds)
	if len(r.Params) > 0 {
		keys := make([]string, 0, len(r.Params))
		for k := range r.Params {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var ps []string
		for _, k := range keys {
			ps = append(ps, fmt.Sprintf("%s=%v", k, r.Params[k]))
		}
		fmt.Fprintf(&b, " (%s)", strings.Join(ps, ", "))
	}
	b.WriteString("\n\n")

	switch {
	case r.Quota != nil:
		q := r.Quota
		b.WriteString("| Result | |\n|---|---|\n")
		row(&b, "Requests that boarded", fmt.Sprint(q.Boarded))
		row(&b, "Clean 429 Token quota exceeded", fmt.Sprint(q.Clean429))
		row(&b, "Requests that got past the limit", fmt.Sprintf("%d (%d tokens over)", q.PastLimit, q.TokensOver))
		row(&b, "Requests that never heard back", fmt.Sprintf("%d of %d", q.NeverHeard, a.Sent))
		row(&b, "rate_limited (in-flight caps, not quota)", fmt.Sprint(q.RateLimited))
		row(&b, "Tokens charged (done.usage) / limit", fmt.Sprintf("%d + %d used before = %d / %d", q.ChargedInRun, q.PriorUsage, q.TotalUsage, q.Limit))
		row(&b, "WebSocket messages received", fmt.Sprint(a.FramesReceived))
		b.WriteString("\n")
	case r.Overhead != nil:
		o := r.Overhead
		fmt.Fprintf(&b, "%d concurrent streams, %d measured rounds each way.\n\n", o.Streams, o.Rounds)
		b.WriteString("| Metric | path | n | Median | p95 | p99 |\n|---|---|---|---|---|---|\n")
		distRow(&b, "Time to first token", "direct (Bedrock SDK)", o.Direct.TTFT)
		distRow(&b, "Time to first token", "through Jetway", o.Jetway.TTFT)
		distRow(&b, "Inter-chunk gap", "direct (Bedrock SDK)", o.Direct.Gap)
		distRow(&b, "Inter-chunk gap", "through Jetway", o.Jetway.Gap)
		if o.OpenAI != nil {
			distRow(&b, "Time to first token", "OpenAI door (SSE)", o.OpenAI.TTFT)
			distRow(&b, "Inter-chunk gap", "OpenAI door (SSE)", o.OpenAI.Gap)
		}
		for i, c := range o.Compares {
			distRow(&b, "Time to first token", compareName(i), c.Path.TTFT)
			distRow(&b, "Inter-chunk gap", compareName(i), c.Path.Gap)
		}
		b.WriteString("\n| Added by Jetway | Median | p95 | p99 |\n|---|---|---|---|\n")
		addedRow(&b, "TTFT", o.AddedTTFT)
		addedRow(&b, "Inter-chunk gap", o.AddedGap)
		if o.OpenAI != nil {
			addedRow(&b, "TTFT, OpenAI door", *o.AddedTTFTOpenAI)
			addedRow(&b, "TTFT, OpenAI door over the WebSocket", *o.OpenAIOverWS)
		}
		for i, c := range o.Compares {
			addedRow(&b, "TTFT, "+compareName(i), c.AddedTTFT)
			addedRow(&b, "TTFT, "+compareName(i)+" over the first", c.OverFirst)
		}
		fmt.Fprintf(&b, "\nDirect requests: %d, errors %d. Jetway requests: %d, errors %d.",
			o.Direct.Requests, o.Direct.Errors, o.Jetway.Requests, o.Jetway.Errors)
		if o.OpenAI != nil {
			fmt.Fprintf(&b, " OpenAI door requests: %d, errors %d.", o.OpenAI.Requests, o.OpenAI.Errors)
		}
		for i, c := range o.Compares {
			fmt.Fprintf(&b, " %s (%s) requests: %d, errors %d.", compareName(i), c.URL, c.Path.Requests, c.Path.Errors)
		}
		b.WriteString("\n\n")
		if o.GatewayCPUCores >= 0 {
			fmt.Fprintf(&b, "Gateway CPU: %.2f cores over the run", o.GatewayCPUCores)
			if o.GatewayCPUPerFrameUS >= 0 {
				fmt.Fprintf(&b, ", %.1f us per chunk frame delivered (%d frames, every gateway's)", o.GatewayCPUPerFrameUS, o.ChunkFrames)
			}
			if o.GatewayCPUPerChunkUS >= 0 {
				fmt.Fprintf(&b, ", %.1f us per chunk of its own path", o.GatewayCPUPerChunkUS)
			}
			b.WriteString(".\n\n")
		}
		for i, c := range o.Compares {
			if c.CPUCores >= 0 {
				fmt.Fprintf(&b, "%s CPU: %.2f cores over the run, %.1f us per chunk of its path.\n\n", compareName(i), c.CPUCores, c.CPUPerUS)
			}
		}
	case r.Rate != nil:
		o := r.Rate
		fmt.Fprintf(&b, "Non-streaming requests at %g per second on each path, %.1f s measured.\n\n", o.TargetRate, o.Seconds)
		b.WriteString("| Latency (sent to last byte) | path | n | Median | p95 | p99 |\n|---|---|---|---|---|---|\n")
		distRow(&b, "Whole answer", "direct (Bedrock SDK)", o.Direct.Latency)
		distRow(&b, "Whole answer", "door "+o.Path, o.Door.Latency)
		b.WriteString("\n| Added by the door | Median | p95 | p99 |\n|---|---|---|---|\n")
		addedRow(&b, "Latency", o.Added)
		fmt.Fprintf(&b, "\nDirect: %d requests, %d errors, %.1f/s. Door: %d requests, %d errors, %.1f/s. Not sent (--inflight reached): %d.\n\n",
			o.Direct.Requests, o.Direct.Errors, o.Direct.RPS, o.Door.Requests, o.Door.Errors, o.Door.RPS, o.Skipped)
		if o.GatewayCPUCores >= 0 {
			fmt.Fprintf(&b, "Gateway CPU: %.2f cores in the measured window; %.0f door requests per second per gateway core (%.1f us of gateway CPU per request).\n\n",
				o.GatewayCPUCores, o.DoorRPSPerCore, o.GatewayCPUPerReq)
		}
	case r.Frontier != nil:
		writeFrontier(&b, r.Frontier)
	case r.Capacity != nil:
		c := r.Capacity
		b.WriteString("| Capacity | |\n|---|---|\n")
		if c.IdleSessions > 0 {
			row(&b, "Idle sessions opened", fmt.Sprintf("%d in %.1f s (gateway reports %d)", c.IdleSessions, c.RampSeconds, c.GatewaySessions))
			row(&b, "Gateway RSS before / after", fmt.Sprintf("%.1f MiB / %.1f MiB (%s)", mib(c.RSSBefore), mib(c.RSSAfter), c.Source))
			if c.RSSAfterAnon >= 0 && c.RSSAfterFile >= 0 {
				row(&b, "Gateway RSS after: anonymous / file-backed", fmt.Sprintf("%.1f MiB / %.1f MiB", mib(c.RSSAfterAnon), mib(c.RSSAfterFile)))
			}
			row(&b, "RSS per idle session", fmt.Sprintf("%.1f KB", c.RSSPerSession/1000))
			if c.HeapPerSession >= 0 {
				row(&b, "Go heap in use per idle session", fmt.Sprintf("%.1f KB", c.HeapPerSession/1000))
			}
			if c.GoroutinesAfter >= 0 {
				row(&b, "Gateway goroutines before / after", fmt.Sprintf("%d / %d", c.GoroutinesBefore, c.GoroutinesAfter))
			}
		}
		if c.StreamingSessions > 0 {
			row(&b, "Streaming sessions", fmt.Sprintf("%d for %.1f s", c.StreamingSessions, c.StreamSeconds))
			row(&b, "Chunk frames delivered", fmt.Sprintf("%d (%.0f /s)", c.ChunkFrames, c.ChunkFramesPerSec))
			row(&b, "Requests completed", fmt.Sprintf("%.0f /s", c.RequestsPerSec))
			if c.GatewayCPUCores >= 0 {
				row(&b, "Gateway CPU", fmt.Sprintf("%.2f cores", c.GatewayCPUCores))
			}
			if c.GatewayCPUPerFrameUS >= 0 {
				row(&b, "Gateway CPU per chunk frame", fmt.Sprintf("%.1f us", c.GatewayCPUPerFrameUS))
			}
			row(&b, "Load tool CPU (same machine)", fmt.Sprintf("%.2f cores", c.ToolCPUCores))
			if c.StreamRSS >= 0 {
				split := ""
				if c.StreamRSSAnon >= 0 && c.StreamRSSFile >= 0 {
					split = fmt.Sprintf(" (anonymous %.1f MiB, file-backed %.1f MiB)", mib(c.StreamRSSAnon), mib(c.StreamRSSFile))
				}
				row(&b, "Gateway RSS at the end of streaming", fmt.Sprintf("%.1f MiB%s", mib(c.StreamRSS), split))
			}
		}
		b.WriteString("\n")
	case r.PromptCache != nil:
		r.PromptCache.writeMarkdown(&b)
	case r.Responses != nil:
		r.Responses.writeMarkdown(&b)
	case r.Soak != nil:
		s := r.Soak
		fmt.Fprintf(&b, "%d connections cut (Drop), %d reconnects, %d resumes.\n\n", s.Drops, a.Reconnects, a.Resumes)
		b.WriteString("| until | done | errors | lost | never finished | TTFT p50 | TTFT p99 | latency p50 | latency p99 | gateway RSS | goroutines |\n")
		b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, iv := range s.Intervals {
			fmt.Fprintf(&b, "| %.0f s | %d | %d | %d | %d | %s | %s | %s | %s | %s | %s |\n", iv.EndS, iv.Done, iv.Errors, iv.Lost,
				iv.Never, dur(iv.TTFT.P50), dur(iv.TTFT.P99), dur(iv.Latency.P50), dur(iv.Latency.P99), mibOrDash(iv.RSS), numOrDash(iv.Goroutines))
		}
		fmt.Fprintf(&b, "\nDrift (last row - first): TTFT p50 %+.1f ms, latency p99 %+.1f ms, RSS %+.1f MiB, goroutines %+d.\n\n",
			s.DriftTTFTP50, s.DriftLatencyP99, mib(s.DriftRSS), s.DriftGoroutines)
		if s.RSSPlateau >= 0 {
			fmt.Fprintf(&b, "RSS over the second half: plateau %.1f MiB, slope %+.2f MiB per minute.\n\n", mib(s.RSSPlateau), s.RSSSlopeMiBMin)
		}
	}

	// Test 1's tables: every scenario on the WebSocket has them.
	if r.Rate == nil && r.Frontier == nil && r.Responses == nil {
		r.writeDelivery(&b)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "Note: %s\n\n", n)
	}
	if len(r.Problems) == 0 {
		b.WriteString("**OK**: nothing lost, nothing unfinished.\n")
	} else {
		fmt.Fprintf(&b, "**FAILED**: %s\n", joinProblems(r.Problems))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeDelivery writes Test 1's tables: delivery accounting and latencies.
func (r *Report) writeDelivery(b *strings.Builder) {
	a := r.Accounting
	b.WriteString("| Result | |\n|---|---|\n")
	row(b, "Successful requests", fmt.Sprintf("%d of %d", a.Done, a.Sent))
	row(b, "Accepted", fmt.Sprint(a.Accepted))
	row(b, "Errors by code", errorsText(a.Errors))
	row(b, "Answers that arrived incomplete", fmt.Sprint(a.Incomplete))
	row(b, "Requests that never finished", fmt.Sprintf("%d (waited %s)", a.NeverFinished, r.paramTimeout()))
	if len(a.SessionErrors) > 0 {
		row(b, "Sessions refused", errorsText(a.SessionErrors))
	}
	b.WriteString("\n| Events lost | Duplicate chunks | Out-of-order chunks | Wrong answers |\n|---|---|---|---|\n")
	fmt.Fprintf(b, "| %d of %d (%s) | %d | %d | %d |\n\n", a.ChunksLost, a.ChunksPublished, percent(a.ChunksLost, a.ChunksPublished),
		a.Duplicates, a.OutOfOrder, a.WrongText)

	lat := r.Latencies
	b.WriteString("| Metric | n | Median | p95 | p99 |\n|---|---|---|---|---|\n")
	latRow(b, "Time to first token (client)", lat.ClientTTFT)
	latRow(b, "Time to first token (server ttft_ms)", lat.ServerTTFT)
	latRow(b, "Total latency", lat.Latency)
	b.WriteString("\n")
}

func (r *Report) paramTimeout() string { return fmt.Sprintf("%gs", r.TimeoutS) }

func row(b *strings.Builder, k, v string) { fmt.Fprintf(b, "| %s | %s |\n", k, v) }

func latRow(b *strings.Builder, name string, d Dist) {
	fmt.Fprintf(b, "| %s | %d | %s | %s | %s |\n", name, d.N, dur(d.P50), dur(d.P95), dur(d.P99))
}

func distRow(b *strings.Builder, name, path string, d Dist) {
	fmt.Fprintf(b, "| %s | %s | %d | %s | %s | %s |\n", name, path, d.N, dur(d.P50), dur(d.P95), dur(d.P99))
}

func addedRow(b *strings.Builder, name string, a Added) {
	fmt.Fprintf(b, "| %s | %+.3f ms (x%.3f) | %+.3f ms (x%.3f) | %+.3f ms (x%.3f) |\n", name, a.P50, a.RatioP50, a.P95, a.RatioP95, a.P99, a.RatioP99)
}

// dur formats milliseconds the way the article does: ms below 10 s.
func dur(msv float64) string {
	switch {
	case msv >= 10000:
		return fmt.Sprintf("%.1f s", msv/1000)
	case msv >= 100:
		return fmt.Sprintf("%.0f ms", msv)
	default:
		return fmt.Sprintf("%.2f ms", msv)
	}
}

func errorsText(m map[string]int64) string {
	if len(m) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range sortedKeys(m) {
		parts = append(parts, fmt.Sprintf("%s: %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

func percent(n, of int64) string {
	if of == 0 {
		return "0%"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(n)/float64(of))
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

func mibOrDash(b int64) string {
	if b < 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f MiB", mib(b))
}

func numOrDash(n int64) string {
	if n < 0 {
		return "-"
	}
	return fmt.Sprint(n)
}

// compareName names the i-th --compare-url gateway in reports.
func compareName(i int) string {
	if i == 0 {
		return "compare gateway"
	}
	return fmt.Sprintf("compare gateway %d", i+1)
}
