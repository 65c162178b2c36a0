package main

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"

	"github.com/jetway-gateway/jetway/client"
	"github.com/jetway-gateway/jetway/internal/router"
)

// appDefaultMaxTokens is what the gateway asks the model for when neither
// the client nor the app says otherwise (config: apps[].max_tokens).
const appDefaultMaxTokens = 1024

// PathStats are one path's timings: TTFT from the request leaving the tool
// to the first text arriving, and every gap between consecutive texts.
type PathStats struct {
	Requests int64 `json:"requests"`
	Errors   int64 `json:"errors"`
	TTFT     Dist  `json:"ttft"`
	Gap      Dist  `json:"inter_chunk_gap"`
}

// Added is Jetway's cost over the direct path at each percentile: the
// difference of the two percentiles (ms) and their ratio.
type Added struct {
	P50      float64 `json:"p50_ms"`
	P95      float64 `json:"p95_ms"`
	P99      float64 `json:"p99_ms"`
	RatioP50 float64 `json:"ratio_p50"`
	RatioP95 float64 `json:"ratio_p95"`
	RatioP99 float64 `json:"ratio_p99"`
}

// OverheadResult compares the same load sent direct and through Jetway.
type OverheadResult struct {
	Streams   int       `json:"streams"`
	Rounds    int       `json:"rounds_measured"`
	Direct    PathStats `json:"direct"`
	Jetway    PathStats `json:"jetway"`
	AddedTTFT Added     `json:"added_ttft"`
	AddedGap  Added     `json:"added_gap"`
	// With --door openai: the OpenAI door's path, what it adds to the
	// direct call, and what it adds over the WebSocket door.
	OpenAI          *PathStats `json:"openai,omitempty"`
	AddedTTFTOpenAI *Added     `json:"added_ttft_openai,omitempty"`
	OpenAIOverWS    *Added     `json:"openai_over_ws_ttft,omitempty"`
	// With --compare-url: the second gateway's path, what it adds to the
	// direct call, and what it adds over the first gateway (--url).
	Compare          *PathStats `json:"compare,omitempty"`
	AddedTTFTCompare *Added     `json:"added_ttft_compare,omitempty"`
	CompareOverWS    *Added     `json:"compare_over_ws_ttft,omitempty"`
	// Compares are every --compare-url gateway's path (the first is also
	// Compare above), each with its CPU when --compare-pid names it.
	Compares []ComparePath `json:"compares,omitempty"`
	// GatewayCPUPerChunkUS is the --pid gateway's CPU per chunk its own
	// path delivered (-1 unknown): unlike GatewayCPUPerFrameUS, it stays
	// right when other gateways share the run.
	GatewayCPUPerChunkUS float64 `json:"gateway_cpu_per_chunk_us"`
	// With --pid: the gateway's CPU over the whole run (warm-up included)
	// and, without --door openai (whose tokens are no chunk frames), per
	// WebSocket chunk frame it delivered; -1 unknown.
	GatewayCPUCores      float64 `json:"gateway_cpu_cores"`
	GatewayCPUPerFrameUS float64 `json:"gateway_cpu_per_chunk_frame_us"`
	ChunkFrames          int64   `json:"chunk_frames"`
}

// ComparePath is one --compare-url gateway's share of an overhead run.
type ComparePath struct {
	URL       string    `json:"url"`
	Path      PathStats `json:"path"`
	AddedTTFT Added     `json:"added_ttft"`               // over the direct call
	OverFirst Added     `json:"over_first_ttft"`          // over the --url gateway
	CPUCores  float64   `json:"gateway_cpu_cores"`        // -1 without its --compare-pid
	CPUPerUS  float64   `json:"gateway_cpu_per_chunk_us"` // its CPU per chunk its path delivered; -1 unknown
}

type pathSamples struct {
	mu        sync.Mutex
	ttft, gap []time.Duration
	requests  int64
	errors    int64
	chunks    int64 // texts received, warm-up included
}

func (p *pathSamples) add(ttft time.Duration, gaps []time.Duration, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.requests++
	if err != nil || ttft <= 0 {
		p.errors++
		return
	}
	p.ttft = append(p.ttft, ttft)
	p.gap = append(p.gap, gaps...)
}

// counted adds the texts of one request, warm-up included (the CPU read
// spans the whole run).
func (p *pathSamples) counted(t *timing) {
	if t.first.IsZero() {
		return
	}
	p.mu.Lock()
	p.chunks += int64(len(t.gaps)) + 1
	p.mu.Unlock()
}

func (p *pathSamples) texts() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.chunks
}

func (p *pathSamples) stats() PathStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return PathStats{Requests: p.requests, Errors: p.errors, TTFT: dist(p.ttft), Gap: dist(p.gap)}
}

// timing records when texts arrive; each request has its own.
type timing struct {
	start, first, last time.Time
	gaps               []time.Duration
}

func (t *timing) text() {
	now := time.Now()
	if t.first.IsZero() {
		t.first = now
	} else {
		t.gaps = append(t.gaps, now.Sub(t.last))
	}
	t.last = now
}

func (t *timing) ttft() time.Duration {
	if t.first.IsZero() {
		return 0
	}
	return t.first.Sub(t.start)
}

// directModel is the direct path: the Bedrock SDK pointed at the mock as
// the gateway builds it (cmd/gateway): one attempt, the SDK's default HTTP
// client, the endpoint the gateway is pointed at.
func (e *env) directModel(ctx context.Context) (*router.Bedrock, error) {
	s := e.s
	opts := []func(*awsconfig.LoadOptions) error{awsconfig.WithRegion(s.Region),
		awsconfig.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("loadtest", "loadtest", ""))}
	if s.BedrockCA != "" {
		// The gateway's JETWAY_BEDROCK_CA_FILE, for a mock serving --tls.
		pem, err := os.ReadFile(s.BedrockCA)
		if err != nil {
			return nil, fmt.Errorf("--bedrock-ca: %w", err)
		}
		opts = append(opts, awsconfig.WithCustomCABundle(bytes.NewReader(pem)))
	}
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("aws config: %w", err)
	}
	return router.NewBedrock(bedrockruntime.NewFromConfig(awsCfg, func(o *bedrockruntime.Options) {
		o.BaseEndpoint = aws.String(s.BedrockURL)
		o.RetryMaxAttempts = 1
	})), nil
}

// overhead sends the same requests straight to the model endpoint through
// the Bedrock SDK (as the gateway calls it) and through Jetway,
// interleaved: every worker alternates, odd workers starting direct, so
// both paths see the same load at the same moments.
func (e *env) overhead(ctx context.Context) (*Report, error) {
	s := e.s
	direct, err := e.directModel(ctx)
	if err != nil {
		return nil, err
	}
	maxTokens := s.MaxTokens
	if maxTokens == 0 {
		maxTokens = appDefaultMaxTokens
	}

	users := s.usersFor(s.Streams)
	if err := e.prefetch(ctx, users); err != nil {
		return nil, err
	}
	l := newLedger(s.MockText)
	clients, err := e.openSessions(ctx, s.URL, s.Streams, users, l, "opening sessions")
	if err != nil {
		return nil, err
	}
	defer closeAll(clients)
	compares := make([][]*client.Client, len(s.CompareURL))
	chatDoors := make([]*aisdkDoor, len(s.CompareURL))  // with --compare-door ai-sdk
	peerDoors := make([]*openaiDoor, len(s.CompareURL)) // with --compare-door openai
	for i, u := range s.CompareURL {
		if s.CompareDoor == "openai" {
			peerDoors[i] = newPeerDoor(u, s)
			compares[i] = clients // the peer path makes its own connections
			continue
		}
		if s.CompareDoor == "ai-sdk" {
			chatDoors[i] = newAISDKDoor(u, s, e.tokens, users)
			defer chatDoors[i].close()
			compares[i] = clients // the ai-sdk path opens its own sockets
			continue
		}
		if compares[i], err = e.openSessions(ctx, u, s.Streams, users, l, "opening sessions (compare)"); err != nil {
			return nil, err
		}
		defer closeAll(compares[i])
		if len(compares[i]) < len(clients) {
			return nil, fmt.Errorf("compare gateway %s: %d of %d sessions opened", u, len(compares[i]), len(clients))
		}
	}

	// Every gateway's CPU is read before and after: --pid, then each --compare-pid.
	pids := append([]int{s.PID}, s.ComparePID...)
	probes := make([]*gatewayProbe, len(pids))
	befores := make([]procSample, len(pids))
	for i, pid := range pids {
		if pid <= 0 {
			continue
		}
		probes[i] = newGatewayProbe(pid, "")
		if befores[i], err = probes[i].sample(ctx); err != nil {
			return nil, err
		}
	}
	var d, j, oa pathSamples
	cmp := make([]pathSamples, len(compares))
	paths := 2
	var door *openaiDoor
	if s.Door == "openai" {
		paths, door = 3, newOpenAIDoor(s, e.tokens, users)
	}
	paths += len(compares)
	bar := e.progress.bar(int64(paths*s.Streams*s.Rounds), "overhead")
	start := time.Now()
	var wg sync.WaitGroup
	for w, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Spread the starts so the measured rounds run in a steady state.
			select {
			case <-time.After(time.Duration(int64(s.Ramp) * int64(w) / int64(max(1, s.Streams)))):
			case <-ctx.Done():
				return
			}
			for r := 0; r < s.Rounds && ctx.Err() == nil; r++ {
				n := w*1000 + r
				for k := 0; k < paths; k++ {
					path := (w + k) % paths // 0: WebSocket, 1: direct, 2: OpenAI door, or 2...: the compare gateways
					viaJetway := path == 0
					t := &timing{gaps: make([]time.Duration, 0, 320)}
					var err error
					if path >= 2 && len(compares) > 0 {
						i := path - 2
						if peerDoors[i] != nil {
							cctx, cancel := context.WithTimeout(ctx, s.Timeout)
							err = peerDoors[i].ask(cctx, w, s.prompt(n), maxTokens, t)
							cancel()
						} else if chatDoors[i] != nil {
							cctx, cancel := context.WithTimeout(ctx, s.Timeout)
							err = chatDoors[i].ask(cctx, w, s.prompt(n), maxTokens, t)
							cancel()
						} else {
							t.start = time.Now()
							o := e.ask(ctx, compares[i][w], n, l, func(int, string) { t.text() })
							err = o.err
							if o.timedOut {
								err = fmt.Errorf("timeout")
							}
						}
						bar.add(1)
						cmp[i].counted(t)
						if r >= s.Warmup {
							cmp[i].add(t.ttft(), t.gaps, err)
						}
						continue
					}
					if path == 2 {
						err = door.ask(ctx, w, s.prompt(n), maxTokens, t)
						bar.add(1)
						if r >= s.Warmup {
							oa.add(t.ttft(), t.gaps, err)
						}
						continue
					}
					if viaJetway {
						t.start = time.Now()
						o := e.ask(ctx, c, n, l, func(int, string) { t.text() })
						err = o.err
						if o.timedOut {
							err = fmt.Errorf("timeout")
						}
					} else {
						cctx, cancel := context.WithTimeout(ctx, s.Timeout)
						t.start = time.Now()
						_, err = direct.Stream(cctx, router.Call{ModelID: s.BedrockModel,
							Messages: []router.Message{{Role: "user", Content: s.prompt(n)}}, MaxTokens: maxTokens},
							func(string) { t.text() })
						cancel()
					}
					bar.add(1)
					if viaJetway {
						j.counted(t)
					}
					if r < s.Warmup {
						continue
					}
					if viaJetway {
						j.add(t.ttft(), t.gaps, err)
					} else {
						d.add(t.ttft(), t.gaps, err)
					}
				}
			}
		}()
	}
	wg.Wait()
	bar.finish()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	elapsed := time.Since(start)
	res := OverheadResult{Streams: s.Streams, Rounds: s.Rounds - s.Warmup, Direct: d.stats(), Jetway: j.stats(),
		GatewayCPUCores: -1, GatewayCPUPerFrameUS: -1, GatewayCPUPerChunkUS: -1}
	res.AddedTTFT = added(res.Direct.TTFT, res.Jetway.TTFT)
	res.AddedGap = added(res.Direct.Gap, res.Jetway.Gap)
	if door != nil {
		st := oa.stats()
		a, w := added(res.Direct.TTFT, st.TTFT), added(res.Jetway.TTFT, st.TTFT)
		res.OpenAI, res.AddedTTFTOpenAI, res.OpenAIOverWS = &st, &a, &w
	}
	// cpu is the CPU seconds of gateway i over the run (-1 unknown).
	cpu := func(i int) (float64, error) {
		if i >= len(probes) || probes[i] == nil {
			return -1, nil
		}
		after, err := probes[i].sample(ctx)
		if err != nil {
			return -1, err
		}
		return after.CPUSeconds - befores[i].CPUSeconds, nil
	}
	for i := range compares {
		st := cmp[i].stats()
		c := ComparePath{URL: s.CompareURL[i], Path: st, AddedTTFT: added(res.Direct.TTFT, st.TTFT),
			OverFirst: added(res.Jetway.TTFT, st.TTFT), CPUCores: -1, CPUPerUS: -1}
		if secs, err := cpu(i + 1); err != nil {
			return nil, err
		} else if secs >= 0 {
			c.CPUCores, c.CPUPerUS = secs/elapsed.Seconds(), cpuPerFrameUS(secs, cmp[i].texts())
		}
		res.Compares = append(res.Compares, c)
	}
	if len(res.Compares) > 0 {
		first := res.Compares[0]
		res.Compare, res.AddedTTFTCompare, res.CompareOverWS = &first.Path, &first.AddedTTFT, &first.OverFirst
	}
	a, lat := l.snapshot()
	res.ChunkFrames = a.ChunkFrames
	if secs, err := cpu(0); err != nil {
		return nil, err
	} else if secs >= 0 {
		res.GatewayCPUCores = secs / elapsed.Seconds()
		res.GatewayCPUPerChunkUS = cpuPerFrameUS(secs, j.texts())
		if door == nil {
			res.GatewayCPUPerFrameUS = cpuPerFrameUS(secs, a.ChunkFrames)
		}
	}
	rep := &Report{Scenario: "overhead", URL: s.URL, Started: start, Seconds: time.Since(start).Seconds(),
		Params: map[string]any{"streams": s.Streams, "rounds": s.Rounds, "warmup_rounds": s.Warmup, "users": users,
			"bedrock_url": s.BedrockURL, "pid": s.PID, "bedrock_model": s.BedrockModel, "max_tokens": maxTokens, "ramp_s": s.Ramp.Seconds(), "door": s.Door,
			"compare_url": s.CompareURL, "compare_pid": s.ComparePID, "compare_door": s.CompareDoor},
		Accounting: a, Latencies: lat, Overhead: &res}
	rep.Problems = a.problems()
	if res.Direct.Errors > 0 {
		rep.Problems = append(rep.Problems, fmt.Sprintf("%d direct requests failed", res.Direct.Errors))
	}
	for _, c := range res.Compares {
		if c.Path.Errors > 0 {
			rep.Problems = append(rep.Problems, fmt.Sprintf("%d requests to the compare gateway %s failed", c.Path.Errors, c.URL))
		}
	}
	return rep, nil
}

func added(direct, jetway Dist) Added {
	ratio := func(j, d float64) float64 {
		if d == 0 {
			return 0
		}
		return math.Round(j/d*1000) / 1000
	}
	r3 := func(x float64) float64 { return math.Round(x*1000) / 1000 }
	return Added{P50: r3(jetway.P50 - direct.P50), P95: r3(jetway.P95 - direct.P95), P99: r3(jetway.P99 - direct.P99),
		RatioP50: ratio(jetway.P50, direct.P50), RatioP95: ratio(jetway.P95, direct.P95), RatioP99: ratio(jetway.P99, direct.P99)}
}

// openSessions dials n sessions spread over users (session i is user
// i % users), at most --dial-concurrency at once. Refused sessions are
// booked and left out.
func (e *env) openSessions(ctx context.Context, url string, n, users int, l *ledger, what string) ([]*client.Client, error) {
	bar := e.progress.bar(int64(n), what)
	defer bar.finish()
	out := make([]*client.Client, n)
	sem := make(chan struct{}, e.s.DialConcurrency)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			c, err := e.dialURL(ctx, url, i%users, false, l)
			if err == nil {
				out[i] = c
			}
			bar.add(1)
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		closeAll(out)
		return nil, err
	}
	opened := out[:0]
	for _, c := range out {
		if c != nil {
			opened = append(opened, c)
		}
	}
	return opened, nil
}

func closeAll(cs []*client.Client) {
	var wg sync.WaitGroup
	for _, c := range cs {
		if c != nil {
			wg.Add(1)
			go func() { defer wg.Done(); _ = c.Close() }()
		}
	}
	wg.Wait()
}
