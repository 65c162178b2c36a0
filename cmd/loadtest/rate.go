package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jetway-gateway/jetway/internal/router"
)

// RateResult is the rate scenario's result: non-streaming requests through
// an HTTP door and straight to the model endpoint, sent side by side at a
// fixed rate each.
type RateResult struct {
	Path       string  `json:"path"`
	TargetRate float64 `json:"target_rate"` // requests per second on each path
	Seconds    float64 `json:"seconds_measured"`
	// Each path's requests started in the measured window; Skipped counts
	// those not started because their path already had --inflight
	// requests outstanding (the target rate was not met).
	Direct  RatePath `json:"direct"`
	Door    RatePath `json:"door"`
	Added   Added    `json:"added_latency"`
	Skipped int64    `json:"skipped"`
	// With --pid: the gateway's CPU in the measured window, and the door's
	// requests per second per core it used; -1 unknown.
	GatewayCPUCores  float64 `json:"gateway_cpu_cores"`
	DoorRPSPerCore   float64 `json:"door_rps_per_gateway_core"`
	GatewayCPUPerReq float64 `json:"gateway_cpu_per_request_us"`
}

// RatePath is one path's latencies (request sent to the answer's last
// byte) and what it achieved.
type RatePath struct {
	Requests int64   `json:"requests"`
	Errors   int64   `json:"errors"`
	RPS      float64 `json:"rps"`
	Latency  Dist    `json:"latency"`
}

// rateSamples collects one path's latencies.
type rateSamples struct {
	mu       sync.Mutex
	lat      []time.Duration
	requests int64
	errors   map[string]int64
}

func (p *rateSamples) add(d time.Duration, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.requests++
	if err != nil {
		if p.errors == nil {
			p.errors = map[string]int64{}
		}
		p.errors[err.Error()]++
		return
	}
	p.lat = append(p.lat, d)
}

func (p *rateSamples) result(seconds float64) (RatePath, map[string]int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var errs int64
	for _, n := range p.errors {
		errs += n
	}
	return RatePath{Requests: p.requests, Errors: errs, RPS: math.Round(float64(p.requests-errs)/seconds*10) / 10,
		Latency: dist(p.lat)}, p.errors
}

// rate sends non-streaming requests at --rate per second through the door
// at --path (POST, the same JSON body for the OpenAI and the Anthropic
// door: model, max_tokens, one user message; for /v1/responses its own:
// model, max_output_tokens, input, store false) and --rate per second
// straight to the mock endpoint through the Bedrock SDK (the call the
// gateway makes for them), interleaved on one schedule so both paths see
// the same machine at the same moments. Requests are sent on schedule
// whatever the answers do (open loop), at most --inflight outstanding per
// path. The leading --ramp is sent but not measured.
func (e *env) rate(ctx context.Context) (*Report, error) {
	s := e.s
	r, err := e.newRater(ctx)
	if err != nil {
		return nil, err
	}
	t := r.door(s.Path)
	start := time.Now()
	res, gerrs, derrs, err := r.step(ctx, t, s.Rate, s.Duration, "rate")
	if err != nil {
		return nil, err
	}
	res.Path = s.Path
	rep := &Report{Scenario: "rate", URL: t.url, Started: start, Seconds: time.Since(start).Seconds(),
		Params: map[string]any{"rate": s.Rate, "path": s.Path, "duration_s": s.Duration.Seconds(), "ramp_s": s.Ramp.Seconds(),
			"inflight": s.Inflight, "users": r.users, "bedrock_url": s.BedrockURL, "bedrock_model": s.BedrockModel,
			"model": r.model, "max_tokens": r.maxTokens, "pid": s.PID},
		Rate: &res}
	for msg, n := range gerrs {
		rep.Problems = append(rep.Problems, fmt.Sprintf("%d door requests failed: %s", n, msg))
	}
	for msg, n := range derrs {
		rep.Problems = append(rep.Problems, fmt.Sprintf("%d direct requests failed: %s", n, msg))
	}
	if res.Skipped > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("%d requests not sent: their path had --inflight %d outstanding (the target rate was not met)",
			res.Skipped, s.Inflight))
	}
	return rep, nil
}

// rater sends the rate and frontier scenarios' requests: one HTTP path
// (a Jetway door, or a peer gateway) and the direct call to the mock,
// side by side.
type rater struct {
	e         *env
	direct    *router.Bedrock
	hc        *http.Client
	users     int
	model     string
	maxTokens int
}

// rateTarget is one HTTP path: its URL, the headers every request carries
// and whether it signs in with the run's JWTs (a Jetway door) or not (a
// peer, whose headers carry what it needs). model is the body's model.
type rateTarget struct {
	name   string
	url    string
	header http.Header
	jwt    bool
	model  string
	pid    int
}

func (e *env) newRater(ctx context.Context) (*rater, error) {
	s := e.s
	direct, err := e.directModel(ctx)
	if err != nil {
		return nil, err
	}
	r := &rater{e: e, direct: direct, users: s.usersFor(s.Inflight), model: s.Model, maxTokens: s.MaxTokens}
	if r.maxTokens == 0 {
		r.maxTokens = 16
	}
	if r.model == "" {
		r.model = s.BedrockModel
	}
	if err := e.prefetch(ctx, r.users); err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = s.Inflight
	r.hc = &http.Client{Transport: tr, Timeout: s.Timeout}
	return r, nil
}

// door is the Jetway door at path on --url's host.
func (r *rater) door(path string) rateTarget {
	s := r.e.s
	base := strings.Replace(strings.Replace(s.URL, "wss://", "https://", 1), "ws://", "http://", 1)
	return rateTarget{name: "jetway " + path, url: strings.TrimSuffix(base, "/v1/ws") + path, jwt: true, model: r.model, pid: s.PID,
		header: http.Header{"Content-Type": {"application/json"}}}
}

// send makes request n on t: POST, the whole answer read.
func (r *rater) send(ctx context.Context, t rateTarget, n int) error {
	s := r.e.s
	body, _ := json.Marshal(map[string]any{"model": t.model, "max_tokens": r.maxTokens,
		"messages": []map[string]string{{"role": "user", "content": s.prompt(n)}}})
	if strings.HasSuffix(t.url, "/v1/responses") {
		body, _ = json.Marshal(map[string]any{"model": t.model, "max_output_tokens": r.maxTokens, "input": s.prompt(n), "store": false})
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header = t.header.Clone()
	if t.jwt {
		tok, err := r.e.tokens.forUser(s.user(n%r.users), n%r.users)(ctx)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := r.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return nil
}

// call makes request n straight to the mock through the Bedrock SDK.
func (r *rater) call(ctx context.Context, n int) error {
	s := r.e.s
	cctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	_, err := r.direct.Stream(cctx, router.Call{ModelID: s.BedrockModel,
		Messages: []router.Message{{Role: "user", Content: s.prompt(n)}}, MaxTokens: r.maxTokens}, func(string) {})
	return err
}

// step sends rate requests a second on t and as many direct, interleaved
// on one open-loop schedule, for --ramp (not measured) and then measure.
// It returns the result and each path's errors by message.
func (r *rater) step(ctx context.Context, t rateTarget, rate float64, measure time.Duration, what string) (RateResult, map[string]int64, map[string]int64, error) {
	s := r.e.s
	var probe *gatewayProbe
	if t.pid > 0 {
		probe = newGatewayProbe(t.pid, "")
	}
	var d, g rateSamples
	var skipped atomic.Int64
	slots := [2]chan struct{}{make(chan struct{}, s.Inflight), make(chan struct{}, s.Inflight)}
	interval := time.Duration(float64(time.Second) / (2 * rate))
	start := time.Now()
	measureFrom := start.Add(s.Ramp)
	end := measureFrom.Add(measure)
	bar := r.e.progress.bar(int64(2*rate*(s.Ramp+measure).Seconds()), what)
	var before procSample
	sampled := false
	var err error
	var wg sync.WaitGroup
	for i := 0; ; i++ {
		due := start.Add(time.Duration(i) * interval)
		if !due.Before(end) || ctx.Err() != nil {
			break
		}
		if wait := time.Until(due); wait > 0 {
			select {
			case <-time.After(wait):
			case <-ctx.Done():
			}
		}
		measured := !due.Before(measureFrom)
		if measured && !sampled && probe != nil {
			sampled = true
			if before, err = probe.sample(ctx); err != nil {
				return RateResult{}, nil, nil, err
			}
			measureFrom = time.Now() // the window the CPU sample covers
		}
		path := i % 2 // 0: door, 1: direct; each request number is sent once on each path
		select {
		case slots[path] <- struct{}{}:
		default:
			if measured {
				skipped.Add(1)
			}
			bar.add(1)
			continue
		}
		wg.Add(1)
		go func() {
			defer func() { <-slots[path]; wg.Done(); bar.add(1) }()
			n := i / 2
			t0 := time.Now()
			var err error
			if path == 0 {
				err = r.send(ctx, t, n)
			} else {
				err = r.call(ctx, n)
			}
			if measured {
				if path == 0 {
					g.add(time.Since(t0), err)
				} else {
					d.add(time.Since(t0), err)
				}
			}
		}()
	}
	wg.Wait()
	bar.finish()
	if err := ctx.Err(); err != nil {
		return RateResult{}, nil, nil, err
	}
	elapsed := time.Since(measureFrom).Seconds()
	res := RateResult{Path: t.url, TargetRate: rate, Seconds: math.Round(elapsed*100) / 100,
		Skipped: skipped.Load(), GatewayCPUCores: -1, DoorRPSPerCore: -1, GatewayCPUPerReq: -1}
	var derrs, gerrs map[string]int64
	res.Direct, derrs = d.result(elapsed)
	res.Door, gerrs = g.result(elapsed)
	res.Added = added(res.Direct.Latency, res.Door.Latency)
	if probe != nil && sampled {
		after, err := probe.sample(ctx)
		if err != nil {
			return RateResult{}, nil, nil, err
		}
		// The window ends when the last answer is in (wg.Wait above).
		cpu := after.CPUSeconds - before.CPUSeconds
		window := after.At.Sub(before.At).Seconds()
		res.GatewayCPUCores = math.Round(cpu/window*1000) / 1000
		if ok := res.Door.Requests - res.Door.Errors; ok > 0 && cpu > 0 {
			res.DoorRPSPerCore = math.Round(float64(ok)/cpu*10) / 10
			res.GatewayCPUPerReq = math.Round(cpu/float64(ok)*1e6*10) / 10
		}
	}
	return res, gerrs, derrs, nil
}
