package telemetry

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// EMFOptions configure an EMF aggregator. Zero values mean the defaults.
type EMFOptions struct {
	// Namespace is the CloudWatch namespace; default "Jetway".
	Namespace string
	// Server is the value of the Server dimension (the task id,
	// JETWAY_SERVER_ID); default "local".
	Server string
	// Interval is how often lines are written; default 1 minute.
	Interval time.Duration
	// Now is the clock for _aws.Timestamp; default time.Now.
	Now func() time.Time
}

func (o *EMFOptions) defaults() {
	if o.Namespace == "" {
		o.Namespace = "Jetway"
	}
	if o.Server == "" {
		o.Server = "local"
	}
	if o.Interval <= 0 {
		o.Interval = time.Minute
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// EMF aggregates what Metrics observes (attach it with Metrics.SetEMF) and,
// once per interval, writes CloudWatch Embedded Metric Format lines to its
// writer (the task's stdout, which the awslogs driver ships to CloudWatch
// Logs, where the metrics are extracted):
//
//   - one server line, Dimensions [["Server"], []] (per task, and the
//     dimensionless fleet-wide series autoscaling and alarms read):
//     ActiveSessions, InFlight (gauges at write time), Takeovers (records
//     of gone servers this one ended), SessionsMoved (sessions asked to
//     move to another server), UsageRecordsDropped (usage records lost:
//     buffer or spool full, spool unwritable), Requests, Errors (status >= 500),
//     QuotaRejections (status 429), InputTokens, CacheReadTokens,
//     CacheWriteTokens (input tokens uncached, read from and written to
//     the prompt cache), CacheSavedMicroUSD (what the prompt cache saved,
//     UsageRecord.CacheSavedUSD in micro-dollars), TTFT, Latency;
//   - one line per tenant/app with requests in the interval, Dimensions
//     [["Tenant", "App"]] (summed over the fleet by CloudWatch): the same
//     but ActiveSessions, InFlight, Takeovers, SessionsMoved and
//     UsageRecordsDropped.
//
// Counts have unit Count and cover the interval. TTFT and Latency
// (Milliseconds) are distributions written as an object with
// Values/Counts arrays plus Max, Min, Count and Sum, the histogram form of
// AWS's EMF libraries: at most 100 bins, bins about 12% wide (values under
// 1 ms share one bin), each bin's value is the mean of its samples, so Sum
// and Count are exact. A distribution with no samples is left out.
type EMF struct {
	w      io.Writer
	logger *zap.Logger
	o      EMFOptions

	sessions atomic.Int64
	inflight atomic.Int64

	mu     sync.Mutex
	server emfAgg
	apps   map[appKey]*emfAgg

	writeMu sync.Mutex
}

type appKey struct{ tenant, app string }

type emfAgg struct {
	requests, errors, quota int64
	// input tokens: uncached, read from and written to the prompt cache;
	// what the prompt cache saved, in micro-USD
	inputTokens, cacheRead, cacheWrite, cacheSavedMicroUSD int64
	takeovers                                              int64 // server line only: records of gone servers this one ended
	moved                                                  int64 // server line only: sessions asked to move to another server
	usageDropped                                           int64 // server line only: usage records lost (usage_records_dropped_total)
	ttft, latency                                          dist
}

// NewEMF returns an aggregator writing to w. Each line is written with one
// Write call; if w is shared with the logger, give both a writer that keeps
// whole writes together (os.Stdout does for a pipe up to 4 KiB per write).
func NewEMF(w io.Writer, o EMFOptions, logger *zap.Logger) *EMF {
	o.defaults()
	return &EMF{w: w, logger: logger, o: o, apps: map[appKey]*emfAgg{}}
}

// Run writes lines every interval until ctx ends, then writes the final
// lines and returns nil.
func (e *EMF) Run(ctx context.Context) error {
	t := time.NewTicker(e.o.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			if err := e.Flush(); err != nil {
				e.logger.Warn("emf_write_failed", zap.Error(err))
			}
			return nil
		case <-t.C:
			if err := e.Flush(); err != nil {
				e.logger.Warn("emf_write_failed", zap.Error(err))
			}
		}
	}
}

// Flush writes the lines for what was observed since the last flush and
// starts a new interval.
func (e *EMF) Flush() error {
	e.writeMu.Lock()
	defer e.writeMu.Unlock()

	e.mu.Lock()
	server := e.server
	apps := e.apps
	e.server = emfAgg{}
	e.apps = map[appKey]*emfAgg{}
	e.mu.Unlock()

	ts := e.o.Now().UnixMilli()
	lines := make([][]byte, 0, 1+len(apps))

	doc := emfDoc{ns: e.o.Namespace, ts: ts, dims: [][]string{{"Server"}, {}},
		props: map[string]any{"Server": e.o.Server}}
	doc.count("ActiveSessions", e.sessions.Load())
	doc.count("InFlight", e.inflight.Load())
	doc.count("Takeovers", server.takeovers)
	doc.count("SessionsMoved", server.moved)
	doc.count("UsageRecordsDropped", server.usageDropped)
	server.put(&doc)
	b, err := doc.marshal()
	if err != nil {
		return err
	}
	lines = append(lines, b)

	keys := make([]appKey, 0, len(apps))
	for k := range apps {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].tenant != keys[j].tenant {
			return keys[i].tenant < keys[j].tenant
		}
		return keys[i].app < keys[j].app
	})
	for _, k := range keys {
		doc := emfDoc{ns: e.o.Namespace, ts: ts, dims: [][]string{{"Tenant", "App"}},
			props: map[string]any{"Tenant": k.tenant, "App": k.app, "Server": e.o.Server}}
		apps[k].put(&doc)
		b, err := doc.marshal()
		if err != nil {
			return err
		}
		lines = append(lines, b)
	}
	for _, l := range lines {
		if _, err := e.w.Write(l); err != nil {
			return fmt.Errorf("emf: write: %w", err)
		}
	}
	return nil
}

func (a *emfAgg) put(d *emfDoc) {
	d.count("Requests", a.requests)
	d.count("Errors", a.errors)
	d.count("QuotaRejections", a.quota)
	d.count("InputTokens", a.inputTokens)
	d.count("CacheReadTokens", a.cacheRead)
	d.count("CacheWriteTokens", a.cacheWrite)
	d.count("CacheSavedMicroUSD", a.cacheSavedMicroUSD)
	d.dist("TTFT", &a.ttft)
	d.dist("Latency", &a.latency)
}

// The feed, called by Metrics. All are no-ops on a nil *EMF.

func (e *EMF) addMoved() {
	if e == nil {
		return
	}
	e.mu.Lock()
	e.server.moved++
	e.mu.Unlock()
}

func (e *EMF) addUsageDropped(n int64) {
	if e == nil {
		return
	}
	e.mu.Lock()
	e.server.usageDropped += n
	e.mu.Unlock()
}

func (e *EMF) addTakeover() {
	if e == nil {
		return
	}
	e.mu.Lock()
	e.server.takeovers++
	e.mu.Unlock()
}

func (e *EMF) addSessions(n int64) {
	if e != nil {
		e.sessions.Add(n)
	}
}

func (e *EMF) addInflight(n int64) {
	if e != nil {
		e.inflight.Add(n)
	}
}

func (e *EMF) observeRequest(r UsageRecord) {
	if e == nil {
		return
	}
	k := appKey{label(r.Tenant), label(r.App)}
	e.mu.Lock()
	defer e.mu.Unlock()
	a := e.apps[k]
	if a == nil {
		a = &emfAgg{}
		e.apps[k] = a
	}
	for _, g := range []*emfAgg{&e.server, a} {
		g.requests++
		if r.Status >= 500 {
			g.errors++
		}
		if r.Status == 429 {
			g.quota++
		}
		g.inputTokens += r.InputTokens
		g.cacheRead += r.CacheReadInputTokens
		g.cacheWrite += r.CacheWriteInputTokens
		g.cacheSavedMicroUSD += int64(math.Round(r.CacheSavedUSD * 1e6))
		if r.Chunks > 0 {
			g.ttft.add(float64(r.TTFTMs))
		}
		if r.Outcome == OutcomeDone {
			g.latency.add(float64(r.LatencyMs))
		}
	}
}

// emfDoc builds one EMF line.
type emfDoc struct {
	ns      string
	ts      int64
	dims    [][]string
	props   map[string]any
	metrics []emfMetric
}

type emfMetric struct {
	Name string `json:"Name"`
	Unit string `json:"Unit"`
}

func (d *emfDoc) count(name string, v int64) {
	d.metrics = append(d.metrics, emfMetric{Name: name, Unit: "Count"})
	d.props[name] = v
}

func (d *emfDoc) dist(name string, v *dist) {
	if v.count == 0 {
		return
	}
	d.metrics = append(d.metrics, emfMetric{Name: name, Unit: "Milliseconds"})
	d.props[name] = v.histogram()
}

func (d *emfDoc) marshal() ([]byte, error) {
	root := make(map[string]any, len(d.props)+1)
	for k, v := range d.props {
		root[k] = v
	}
	root["_aws"] = map[string]any{
		"Timestamp": d.ts,
		"CloudWatchMetrics": []any{map[string]any{
			"Namespace":  d.ns,
			"Dimensions": d.dims,
			"Metrics":    d.metrics,
		}},
	}
	b, err := json.Marshal(root)
	if err != nil {
		return nil, fmt.Errorf("emf: encode: %w", err)
	}
	return append(b, '\n'), nil
}

// dist is a bounded histogram of millisecond values: bin -1 holds values
// under 1 ms; bin i >= 0 holds [1.12^i, 1.12^(i+1)) ms, the last bin also
// everything above, so there are at most 99 bins (EMF allows 100).
type dist struct {
	bins          map[int]*distBin
	count         int64
	sum, min, max float64
}

type distBin struct {
	count int64
	sum   float64
}

const (
	distRatio   = 1.12
	distMaxBin  = 97 // 1.12^97 ms ~ 59 s
	distUnderMs = 1.0
)

var distLogRatio = math.Log(distRatio)

func distBinOf(v float64) int {
	if v < distUnderMs {
		return -1
	}
	i := int(math.Floor(math.Log(v) / distLogRatio))
	return min(i, distMaxBin)
}

func (d *dist) add(v float64) {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return
	}
	if v < 0 {
		v = 0
	}
	if d.bins == nil {
		d.bins = map[int]*distBin{}
	}
	i := distBinOf(v)
	b := d.bins[i]
	if b == nil {
		b = &distBin{}
		d.bins[i] = b
	}
	b.count++
	b.sum += v
	if d.count == 0 || v < d.min {
		d.min = v
	}
	if d.count == 0 || v > d.max {
		d.max = v
	}
	d.count++
	d.sum += v
}

// emfHistogram is the EMF distribution object.
type emfHistogram struct {
	Values []float64 `json:"Values"`
	Counts []int64   `json:"Counts"`
	Max    float64   `json:"Max"`
	Min    float64   `json:"Min"`
	Count  int64     `json:"Count"`
	Sum    float64   `json:"Sum"`
}

func (d *dist) histogram() emfHistogram {
	idx := make([]int, 0, len(d.bins))
	for i := range d.bins {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	h := emfHistogram{Max: d.max, Min: d.min, Count: d.count, Sum: d.sum,
		Values: make([]float64, 0, len(idx)), Counts: make([]int64, 0, len(idx))}
	for _, i := range idx {
		b := d.bins[i]
		h.Values = append(h.Values, b.sum/float64(b.count))
		h.Counts = append(h.Counts, b.count)
	}
	return h
}
