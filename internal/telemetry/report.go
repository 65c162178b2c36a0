package telemetry

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jetway-gateway/jetway/internal/call"
)

// ReportOptions select what Report reads and how it groups.
type ReportOptions struct {
	// Dir is the usage directory (JETWAY_USAGE_DIR); required.
	Dir string
	// Since is how far back to look from Now; default 24h. Only hour
	// partitions that overlap the window are read, and only records with
	// ts in it are counted.
	Since time.Duration
	// By lists the grouping keys, any of reportKeys (tenant, app, model,
	// user, door, placement, profile, tier), in
	// column order; nil means tenant, app, model. An empty, non-nil slice
	// gives one total row.
	By []string
	// Now ends the window; zero means time.Now().
	Now time.Time
}

// reportKeys are the fields Report can group by; defaultReportKeys those
// it groups by when none are given.
var (
	reportKeys        = []string{"tenant", "app", "model", "user", "door", "placement", "profile", "tier"}
	defaultReportKeys = []string{"tenant", "app", "model"}
)

// serviceTierOf is a record's tier; a record written before tiers were
// recorded was served in the default tier.
func serviceTierOf(r UsageRecord) string {
	if r.ServiceTier == "" {
		return "default"
	}
	return r.ServiceTier
}

// Report reads the NDJSON usage files under o.Dir (the FileSink layout) and
// writes an aligned table to w, one row per group plus a total row:
// requests, outcomes (done, errors, 429), input and output tokens, cost,
// the prompt cache's hit ratio (input tokens read from the model's prompt
// cache, in % of all input tokens) and what it saved in USD
// (UsageRecord.CacheSavedUSD), and p50/p95 TTFT over requests that sent a
// chunk. INPUT_TOKENS counts every input token, cached or not. Lines that are not
// usage records (a partial last line while a file is being written, for
// example) are skipped and counted in the footer.
func Report(w io.Writer, o ReportOptions) error {
	if o.Dir == "" {
		return errors.New("usage report: no directory given")
	}
	if o.Since <= 0 {
		o.Since = 24 * time.Hour
	}
	if o.By == nil {
		o.By = defaultReportKeys
	}
	for _, k := range o.By {
		if !slices.Contains(reportKeys, k) {
			return fmt.Errorf("usage report: cannot group by %q (want %s)", k, strings.Join(reportKeys, ", "))
		}
	}
	if o.Now.IsZero() {
		o.Now = time.Now()
	}
	from, to := o.Now.Add(-o.Since), o.Now

	files, err := partitionFiles(o.Dir, from, to)
	if err != nil {
		return err
	}
	groups := map[string]*reportRow{}
	total := &reportRow{}
	var skipped, records int
	for _, f := range files {
		s, err := readUsageFile(f, func(r UsageRecord) {
			if r.TS.Before(from) || r.TS.After(to) {
				return
			}
			records++
			vals := make([]string, len(o.By))
			// Records written before models were folded may hold any
			// client string: a column stays at most call.MaxEchoBytes wide.
			for i, k := range o.By {
				switch k {
				case "tenant":
					vals[i] = call.Clip(r.Tenant)
				case "app":
					vals[i] = call.Clip(r.App)
				case "model":
					vals[i] = call.Clip(r.Model)
				case "user":
					vals[i] = call.Clip(r.User)
				case "door":
					vals[i] = call.Clip(r.Door)
				case "placement":
					vals[i] = call.Clip(r.Placement)
				case "profile":
					vals[i] = call.Clip(r.BedrockProfile)
				case "tier":
					vals[i] = call.Clip(serviceTierOf(r))
				}
			}
			key := strings.Join(vals, "\x00")
			g := groups[key]
			if g == nil {
				g = &reportRow{keys: vals}
				groups[key] = g
			}
			g.add(r)
			total.add(r)
		})
		if err != nil {
			return err
		}
		skipped += s
	}

	rows := make([]*reportRow, 0, len(groups))
	for _, g := range groups {
		if len(o.By) > 0 { // with no keys the total row says it all
			rows = append(rows, g)
		}
	}
	sort.Slice(rows, func(i, j int) bool {
		return slices.Compare(rows[i].keys, rows[j].keys) < 0
	})

	header := make([]string, 0, len(o.By)+10)
	for _, k := range o.By {
		header = append(header, strings.ToUpper(k))
	}
	header = append(header, "REQUESTS", "DONE", "ERRORS", "429", "INPUT_TOKENS", "OUTPUT_TOKENS", "COST_USD", "CACHE_HIT_PCT", "CACHE_SAVED_USD", "TTFT_P50_MS", "TTFT_P95_MS")
	table := [][]string{header}
	for _, r := range rows {
		table = append(table, r.cells(r.keys))
	}
	if len(o.By) == 0 || len(rows) > 1 {
		keys := make([]string, len(o.By))
		if len(keys) > 0 {
			keys[0] = "TOTAL"
		} else {
			keys = nil
		}
		table = append(table, total.cells(keys))
	}

	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "usage %s to %s (%s), %d records from %d files\n",
		from.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339), o.Since, records, len(files))
	if records == 0 {
		fmt.Fprintln(bw, "no usage records in this window")
	} else {
		writeAligned(bw, table, len(o.By))
	}
	if skipped > 0 {
		fmt.Fprintf(bw, "%d lines were not usage records and were skipped\n", skipped)
	}
	return bw.Flush()
}

// reportRow accumulates one group.
type reportRow struct {
	keys                   []string
	requests, done, errs   int
	rejected429            int
	inputTokens, outTokens int64 // input: all of it, cached or not
	cacheRead              int64
	cost, saved            float64
	ttft                   []int64
}

func (g *reportRow) add(r UsageRecord) {
	g.requests++
	switch {
	case r.Outcome == OutcomeDone:
		g.done++
	case r.Status == 429:
		g.rejected429++
	default:
		g.errs++
	}
	g.inputTokens += r.InputTokens + r.CacheReadInputTokens + r.CacheWriteInputTokens
	g.cacheRead += r.CacheReadInputTokens
	g.outTokens += r.OutputTokens
	g.cost += r.CostUSD
	g.saved += r.CacheSavedUSD
	if r.Chunks > 0 {
		g.ttft = append(g.ttft, r.TTFTMs)
	}
}

func (g *reportRow) cells(keys []string) []string {
	out := append([]string(nil), keys...)
	p50, p95, hit := "-", "-", "-"
	if g.inputTokens > 0 {
		hit = strconv.FormatFloat(100*float64(g.cacheRead)/float64(g.inputTokens), 'f', 1, 64)
	}
	if len(g.ttft) > 0 {
		slices.Sort(g.ttft)
		p50 = strconv.FormatInt(percentile(g.ttft, 50), 10)
		p95 = strconv.FormatInt(percentile(g.ttft, 95), 10)
	}
	return append(out,
		strconv.Itoa(g.requests), strconv.Itoa(g.done), strconv.Itoa(g.errs), strconv.Itoa(g.rejected429),
		strconv.FormatInt(g.inputTokens, 10), strconv.FormatInt(g.outTokens, 10),
		strconv.FormatFloat(g.cost, 'f', 4, 64), hit, strconv.FormatFloat(g.saved, 'f', 4, 64), p50, p95)
}

// percentile is the nearest-rank percentile of sorted values.
func percentile(sorted []int64, p int) int64 {
	rank := (p*len(sorted) + 99) / 100 // ceil(p/100 * n)
	if rank < 1 {
		rank = 1
	}
	return sorted[rank-1]
}

// writeAligned prints the table with the first textCols columns aligned
// left and the rest (numbers) aligned right, two spaces apart.
func writeAligned(w io.Writer, table [][]string, textCols int) {
	widths := make([]int, len(table[0]))
	for _, row := range table {
		for i, c := range row {
			widths[i] = max(widths[i], len(c))
		}
	}
	for _, row := range table {
		var b strings.Builder
		for i, c := range row {
			if i > 0 {
				b.WriteString("  ")
			}
			pad := strings.Repeat(" ", widths[i]-len(c))
			if i < textCols {
				b.WriteString(c)
				if i < len(row)-1 {
					b.WriteString(pad)
				}
			} else {
				b.WriteString(pad)
				b.WriteString(c)
			}
		}
		fmt.Fprintln(w, b.String())
	}
}

// partitionFiles lists the usage files under dir whose hour partition
// overlaps [from, to].
func partitionFiles(dir string, from, to time.Time) ([]string, error) {
	var files []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path == dir {
				return fmt.Errorf("usage report: %w", err)
			}
			return nil // unreadable subtree: skip
		}
		rel, _ := filepath.Rel(dir, path)
		parts := strings.Split(filepath.ToSlash(rel), "/")
		if d.IsDir() {
			if rel == "." {
				return nil
			}
			if len(parts) > 4 {
				return fs.SkipDir
			}
			if start, ok := partitionStart(parts); ok && (start.Add(partitionSpan(len(parts))).Before(from) || start.After(to)) {
				return fs.SkipDir
			}
			return nil
		}
		if len(parts) != 5 || !strings.HasSuffix(d.Name(), ".json") {
			return nil
		}
		if _, ok := partitionStart(parts[:4]); !ok {
			return nil
		}
		files = append(files, path)
		return nil
	})
	sort.Strings(files)
	return files, err
}

// partitionStart parses leading "year=/month=/day=/hour=" segments into the
// start of the period they name.
func partitionStart(parts []string) (time.Time, bool) {
	names := []string{"year", "month", "day", "hour"}
	vals := []int{0, 1, 1, 0}
	for i, p := range parts {
		if i >= len(names) {
			break
		}
		v, ok := strings.CutPrefix(p, names[i]+"=")
		if !ok {
			return time.Time{}, false
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			return time.Time{}, false
		}
		vals[i] = n
	}
	return time.Date(vals[0], time.Month(vals[1]), vals[2], vals[3], 0, 0, 0, time.UTC), true
}

// partitionSpan is the length of a period named by n segments.
func partitionSpan(n int) time.Duration {
	switch n {
	case 1:
		return 366 * 24 * time.Hour
	case 2:
		return 31 * 24 * time.Hour
	case 3:
		return 24 * time.Hour
	default:
		return time.Hour
	}
}

// ReadUsageDir reads every usage record in the NDJSON files under dir (a
// FileSink's directory, all partitions) and says how many lines were not
// records. For tools and tests; Report reads only the partitions it needs.
func ReadUsageDir(dir string) (recs []UsageRecord, skipped int, err error) {
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		n, err := readUsageFile(path, func(r UsageRecord) { recs = append(recs, r) })
		skipped += n
		return err
	})
	return recs, skipped, err
}

// readUsageFile calls fn for each usage record in an NDJSON file and
// returns how many lines were skipped.
func readUsageFile(path string, fn func(UsageRecord)) (skipped int, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("usage report: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 2<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if len(strings.TrimSpace(string(line))) == 0 {
			continue
		}
		var r UsageRecord
		if err := json.Unmarshal(line, &r); err != nil || r.TS.IsZero() {
			skipped++
			continue
		}
		fn(r)
	}
	if err := sc.Err(); err != nil {
		return skipped, fmt.Errorf("usage report: %s: %w", path, err)
	}
	return skipped, nil
}
