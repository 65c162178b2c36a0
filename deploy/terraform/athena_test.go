package terraform

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/zclconf/go-cty/cty"

	"github.com/jetway-gateway/jetway/client"
	"github.com/jetway-gateway/jetway/internal/auth/authtest"
	"github.com/jetway-gateway/jetway/internal/gatewaytest"
	"github.com/jetway-gateway/jetway/internal/mockmodel"
	"github.com/jetway-gateway/jetway/internal/telemetry"
)

// DuckDB stands in for Athena: the closest engine that runs here (npm
// @duckdb/node-api, prebuilt, driven by testdata/duckdb/run.mjs). The two
// speak different SQL; trinoToDuckDB is the one place that says how.

// duckdbSession is what every DuckDB session runs first, part of the
// translation below: Athena's session time zone is UTC, and Trino's
// from_iso8601_timestamp is DuckDB's cast of an ISO 8601 string.
var duckdbSession = []string{
	"SET TimeZone = 'UTC'",
	"CREATE MACRO from_iso8601_timestamp(s) AS CAST(s AS TIMESTAMPTZ)",
}

// trinoRewrites are the textual rewrites from Athena's dialect (Trino) to
// DuckDB's, in order:
//
//	Trino                      DuckDB                     why
//	date_format(d, fmt)        strftime(d, fmt)           same specifiers for %Y %m %d %H (the only ones allowed, see below)
//	approx_percentile(x, p)    quantile_disc(x, p)        exact nearest rank, so Go can compute the same value;
//	                                                      Trino's is approximate (within about 1% of the rank)
//	from_iso8601_timestamp(s)  (a macro, duckdbSession)   CAST(s AS TIMESTAMPTZ)
//
// Everything else the named queries use means the same in both: count_if,
// FILTER, date, date_trunc, nullif, round, ||, interval '30' day,
// current_date, now(), "user".
//
// One difference has no rewrite, so trinoToDuckDB refuses it: a decimal
// literal (1.0, 100.0). Trino types it DECIMAL(p,s), and avg and division
// keep that scale, so avg(CASE WHEN c THEN 1.0 ELSE 0.0 END) is 0.1 for
// 11% and 0.0 under 5%; DuckDB computes both in DOUBLE, so such a query
// would pass here and be wrong on Athena. Write 1e0 and 0e0 (DOUBLE in
// both) or CAST(x AS DOUBLE). A percentile (the p of approx_percentile)
// is a double parameter in Trino and may stay a decimal literal.
var trinoRewrites = []struct {
	from *regexp.Regexp
	to   string
}{
	{regexp.MustCompile(`(?i)\bdate_format\(`), "strftime("},
	{regexp.MustCompile(`(?i)\bapprox_percentile\(`), "quantile_disc("},
}

var (
	sqlStringLiteral = regexp.MustCompile(`'[^']*'|"[^"]*"`)
	percentileArg    = regexp.MustCompile(`(?i)\bapprox_percentile\(\s*[a-z_]+\s*,\s*0\.\d+\s*\)`)
	decimalLiteral   = regexp.MustCompile(`\b\d+\.\d+\b`)
	dateFormatArg    = regexp.MustCompile(`(?i)\bdate_format\([^']*'([^']*)'\s*\)`)
	dateSpecifier    = regexp.MustCompile(`%.`)
)

// trinoToDuckDB translates one Athena query into DuckDB's dialect (see
// trinoRewrites), or says why it cannot.
func trinoToDuckDB(q string) (string, error) {
	for _, m := range dateFormatArg.FindAllStringSubmatch(q, -1) {
		for _, spec := range dateSpecifier.FindAllString(m[1], -1) {
			if !strings.Contains("%Y %m %d %H", spec) {
				return "", fmt.Errorf("date_format specifier %s: Trino (MySQL) and DuckDB (strftime) may read it differently; add it to trinoRewrites once checked", spec)
			}
		}
	}
	bare := percentileArg.ReplaceAllString(sqlStringLiteral.ReplaceAllString(q, "''"), "")
	if lit := decimalLiteral.FindString(bare); lit != "" {
		return "", fmt.Errorf("decimal literal %s: Trino types it DECIMAL, and avg and division keep its scale (avg of 1.0/0.0 is 0.1 for 11%%); write 1e0/0e0 or CAST(... AS DOUBLE)", lit)
	}
	for _, r := range trinoRewrites {
		q = r.from.ReplaceAllString(q, r.to)
	}
	return q, nil
}

func TestTrinoToDuckDB(t *testing.T) {
	for _, c := range []struct{ in, want, refuse string }{
		{in: "SELECT date_format(current_date, '%Y%m%d')", want: "SELECT strftime(current_date, '%Y%m%d')"},
		{in: "SELECT approx_percentile(ttft_ms, 0.95) FILTER (WHERE chunks > 0)", want: "SELECT quantile_disc(ttft_ms, 0.95) FILTER (WHERE chunks > 0)"},
		{in: "SELECT round(avg(CASE WHEN cached THEN 1e0 ELSE 0e0 END), 4)", want: "SELECT round(avg(CASE WHEN cached THEN 1e0 ELSE 0e0 END), 4)"},
		{in: "SELECT '1.0', \"a.1.2\" FROM t", want: "SELECT '1.0', \"a.1.2\" FROM t"},
		{in: "SELECT round(avg(CASE WHEN cached THEN 1.0 ELSE 0.0 END), 4)", refuse: "decimal literal 1.0"},
		{in: "SELECT round(100.0 * count_if(status = 429) / count(*), 2)", refuse: "decimal literal 100.0"},
		{in: "SELECT date_format(current_date, '%i')", refuse: "specifier %i"},
	} {
		got, err := trinoToDuckDB(c.in)
		switch {
		case c.refuse != "" && (err == nil || !strings.Contains(err.Error(), c.refuse)):
			t.Errorf("%s: %q, %v; want it refused (%s)", c.in, got, err, c.refuse)
		case c.refuse == "" && (err != nil || got != c.want):
			t.Errorf("%s: %q, %v; want %q", c.in, got, err, c.want)
		}
	}
}

// duckResult is one query's answer from run.mjs.
type duckResult struct {
	Columns []string `json:"columns"`
	Types   []string `json:"types"`
	Rows    [][]any  `json:"rows"`
	Error   string   `json:"error"`
}

// runDuckDB runs statements (after duckdbSession), then queries, in one
// DuckDB session whose working directory is dir.
func runDuckDB(t *testing.T, dir string, statements []string, queries map[string]string) map[string]duckResult {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node is required for the DuckDB query tests (apt-get install nodejs npm; then make test-deps)")
	}
	script, err := filepath.Abs(filepath.Join("testdata", "duckdb", "run.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join("..", "..", "node_modules", "@duckdb", "node-api", "package.json")); err != nil {
		t.Fatal("the npm package @duckdb/node-api is missing: run `make test-deps` (npm ci) at the repository root")
	}
	in, err := json.Marshal(map[string]any{"statements": append(append([]string(nil), duckdbSession...), statements...), "queries": queries})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, script)
	cmd.Dir = dir
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("duckdb: %v\n%s", err, stderr.String())
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.UseNumber()
	var res map[string]duckResult
	if err := dec.Decode(&res); err != nil {
		t.Fatalf("duckdb output %s: %v", out, err)
	}
	return res
}

// analyticsConfig is the gateway's configuration for the record mix: every
// model priced, so a charge shows in cost_usd.
const analyticsConfig = `
models:
  - {id: mock-a, bedrock_id: mock-a, price: {input_per_1k: 0.003, output_per_1k: 0.015}}
  - {id: mock-b, bedrock_id: mock-b, price: {input_per_1k: 0.001, output_per_1k: 0.005}}
  - {id: mock-throttle, bedrock_id: mock-throttle, price: {input_per_1k: 0.003, output_per_1k: 0.015}}
  - {id: mock-unavailable, bedrock_id: mock-unavailable, price: {input_per_1k: 0.003, output_per_1k: 0.015}}
  - {id: mock-fail-after-5, bedrock_id: mock-fail-after-5, price: {input_per_1k: 0.003, output_per_1k: 0.015}}
  - {id: mock-stall, bedrock_id: mock-stall, price: {input_per_1k: 0.003, output_per_1k: 0.015}}
auth:
  tenant_claim: custom:tenant
tenants:
  - id: contoso
    apps:
      - id: support
        client_ids: [contoso-support]
        models: {default: mock-a, fallbacks: [mock-b], allow: [mock-a, mock-b, mock-fail-after-5, mock-stall]}
      - id: faq
        client_ids: [contoso-faq]
        models: {default: mock-a}
        cache: {ttl: 1h}
      - id: overflow
        client_ids: [contoso-overflow]
        models: {default: mock-throttle, fallbacks: [mock-b]}
  - id: fabrikam
    apps:
      - id: docs
        client_ids: [fabrikam-docs]
        models: {default: mock-throttle, fallbacks: [mock-unavailable]}
      - id: tiny
        client_ids: [fabrikam-tiny]
        models: {default: mock-a}
        limits: [{window: minute, tokens: 100}]
      - id: search
        client_ids: [fabrikam-search]
        models: {default: mock-b}
`

// gatewayUsageRecords runs a gateway process on the mock model with the
// file sink and sends it a mix of requests: done, cached, fallback,
// model_unavailable (every model throttled or unavailable), model_error,
// quota_exceeded (429) and interrupted (still waiting for its first token
// when the drain deadline passes). It returns the usage directory, after
// the gateway exited (the drain flushes the sink).
func gatewayUsageRecords(t *testing.T) string {
	t.Helper()
	mock := httptest.NewServer(mockmodel.New(mockmodel.Options{TTFT: time.Millisecond, PerToken: 100 * time.Microsecond, Tokens: 30}))
	t.Cleanup(mock.Close)
	issuer := authtest.NewIssuer(t)
	cfg := filepath.Join(t.TempDir(), "jetway.yaml")
	if err := os.WriteFile(cfg, []byte(analyticsConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	usage := filepath.Join(t.TempDir(), "usage")
	p := gatewaytest.Start(t, gatewaytest.Options{Name: "analytics", Env: map[string]string{
		"JETWAY_LISTEN":                    "127.0.0.1:0",
		"JETWAY_ADMIN_LISTEN":              "127.0.0.1:0",
		"JETWAY_CONFIG":                    cfg,
		"JETWAY_AUTH_ISSUER":               issuer.URL,
		"JETWAY_USAGE_DIR":                 usage,
		"JETWAY_SERVER_ID":                 "analytics-task",
		"JETWAY_DRAIN_TIMEOUT":             "2s",    // then the stalled request is interrupted
		"JETWAY_LOG_LEVEL":                 "debug", // the model_started line tells when the stalled call began
		"AWS_REGION":                       "us-east-1",
		"AWS_ACCESS_KEY_ID":                "test",
		"AWS_SECRET_ACCESS_KEY":            "test",
		"AWS_ENDPOINT_URL_BEDROCK_RUNTIME": mock.URL,
		"AWS_EC2_METADATA_DISABLED":        "true",
		"HOME":                             t.TempDir(),
	}})

	dial := func(sub, tenant, clientID string) *client.Client {
		now := time.Now()
		tok := issuer.Token(t, authtest.Claims{Subject: sub, Tenant: tenant, ClientID: clientID, IssuedAt: now, ExpiresAt: now.Add(time.Hour)})
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		c, err := client.Dial(ctx, client.Options{URLs: []string{p.URL()}, Token: func(context.Context) (string, error) { return tok, nil }})
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	zero := 0.0
	send := func(c *client.Client, id, model, prompt string) *client.Call {
		t.Helper()
		call, err := c.Send(context.Background(), client.Request{RequestID: idPrefix + id, Model: model, Temperature: &zero,
			Messages: []client.Message{{Role: "user", Content: prompt}}})
		if err != nil {
			t.Fatalf("send %s: %v", id, err)
		}
		return call
	}
	wait := func(call *client.Call, wantCode string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err := call.Wait(ctx)
		var e *client.Error
		switch {
		case ctx.Err() != nil:
			t.Fatalf("%s did not finish", call.ID)
		case wantCode == "" && err != nil:
			t.Fatalf("%s: %v, want done", call.ID, err)
		case wantCode != "" && (!asError(err, &e) || e.Code != wantCode):
			t.Fatalf("%s: %v, want %s", call.ID, err, wantCode)
		}
	}

	ana := dial("ana", "contoso", "contoso-support")
	ben := dial("ben", "contoso", "contoso-support")
	cat := dial("cat", "contoso", "contoso-faq")
	dan := dial("dan", "contoso", "contoso-overflow")
	eve := dial("eve", "fabrikam", "fabrikam-docs")
	fay := dial("fay", "fabrikam", "fabrikam-tiny")
	gus := dial("gus", "fabrikam", "fabrikam-search")
	for i := range 3 {
		wait(send(ana, fmt.Sprintf("ana-%d", i), "", fmt.Sprintf("question %d", i)), "")
	}
	wait(send(ben, "ben-done", "", "a longer question than the others"), "")
	wait(send(ben, "ben-broken", "mock-fail-after-5", "break after five"), "model_error")
	wait(send(cat, "cat-miss", "", "the same question"), "")
	wait(send(cat, "cat-hit-1", "", "the same question"), "")
	wait(send(cat, "cat-hit-2", "", "the same question"), "")
	wait(send(dan, "dan-fallback-1", "", "one"), "")
	wait(send(dan, "dan-fallback-2", "", "two"), "")
	wait(send(eve, "eve-unavailable-1", "", "one"), "model_unavailable")
	wait(send(eve, "eve-unavailable-2", "", "two"), "model_unavailable")
	wait(send(fay, "fay-quota-1", "", "one"), "quota_exceeded")
	wait(send(fay, "fay-quota-2", "", "two"), "quota_exceeded")
	wait(send(gus, "gus-done", "", "search"), "")
	send(ben, "ben-stalled", "mock-stall", "never answered")
	if len(p.Log.Await("model_started", idPrefix+"ben-stalled", 1, 20*time.Second)) == 0 {
		t.Fatal("the stalled request never reached the model")
	}
	p.Stop(t, gatewaytest.StopTimeout) // drain: the stalled request is interrupted, the sink flushed
	return usage
}

// idPrefix starts the test's request ids (the protocol wants 8 to 64 characters).
const idPrefix = "usage-"

func asError(err error, target **client.Error) bool {
	e, ok := err.(*client.Error)
	if ok {
		*target = e
	}
	return ok
}

// readUsage reads every record under dir.
func readUsage(t *testing.T, dir string) []telemetry.UsageRecord {
	t.Helper()
	recs, skipped, err := telemetry.ReadUsageDir(dir)
	if err != nil || skipped != 0 {
		t.Fatalf("usage records under %s: %v (%d lines not records)", dir, err, skipped)
	}
	return recs
}

// checkRecordMix checks the records are the mix asked for, and the
// accounting the queries rely on: a request no model took is charged
// nothing; ttft_ms is 0 exactly when no chunk was sent.
func checkRecordMix(t *testing.T, recs []telemetry.UsageRecord) {
	t.Helper()
	by := map[string]telemetry.UsageRecord{}
	for _, r := range recs {
		by[strings.TrimPrefix(r.RequestID, idPrefix)] = r
		if (r.Chunks > 0) != (r.TTFTMs > 0) {
			t.Errorf("%s (%s): %d chunks with ttft_ms %d; 0 must mean no chunk", r.RequestID, r.Outcome, r.Chunks, r.TTFTMs)
		}
	}
	if len(by) != 16 {
		t.Errorf("%d records (%d distinct ids), want 16", len(recs), len(by))
	}
	for id, want := range map[string]string{"ana-0": "done", "ben-broken": "model_error", "cat-hit-1": "done",
		"dan-fallback-1": "done", "eve-unavailable-1": "model_unavailable", "fay-quota-1": "quota_exceeded",
		"ben-stalled": "interrupted"} {
		if by[id].Outcome != want {
			t.Errorf("%s: outcome %q, want %s", id, by[id].Outcome, want)
		}
	}
	if r := by["cat-hit-1"]; !r.Cached || r.Chunks != 30 {
		t.Errorf("cache hit %+v, want cached with 30 chunks", r)
	}
	if r := by["dan-fallback-1"]; r.FallbackFrom != "mock-throttle" || r.Model != "mock-b" {
		t.Errorf("fallback %+v, want mock-b standing in for mock-throttle", r)
	}
	for _, id := range []string{"eve-unavailable-1", "eve-unavailable-2"} {
		if r := by[id]; r.InputTokens != 0 || r.OutputTokens != 0 || r.CostUSD != 0 || r.Chunks != 0 {
			t.Errorf("%s: %+v; no model took the call, so nothing is charged", id, r)
		}
	}
	if r := by["fay-quota-1"]; r.Status != 429 || r.CostUSD != 0 {
		t.Errorf("quota refusal %+v", r)
	}
}

// duckType is DuckDB's type for a Glue (Hive) column type.
func duckType(t *testing.T, glue string) string {
	t.Helper()
	types := map[string]string{"string": "VARCHAR", "boolean": "BOOLEAN", "int": "INTEGER", "bigint": "BIGINT", "double": "DOUBLE"}
	d, ok := types[glue]
	if !ok {
		t.Fatalf("Glue type %q has no DuckDB type here: add it to duckType", glue)
	}
	return d
}

// docsBlock is the SQL of the fenced block between docs/analytics.md's
// BEGIN and END markers named name.
func docsBlock(t *testing.T, name string) string {
	t.Helper()
	doc := string(readRepoFile(t, "docs/analytics.md"))
	_, rest, ok := strings.Cut(doc, "<!-- BEGIN "+name)
	body, _, ok2 := strings.Cut(rest, "<!-- END "+name)
	_, sql, ok3 := strings.Cut(body, "```sql\n")
	sql, _, ok4 := strings.Cut(sql, "```")
	if !ok || !ok2 || !ok3 || !ok4 {
		t.Fatalf("docs/analytics.md: no ```sql block between <!-- BEGIN %s --> and <!-- END %s -->", name, name)
	}
	return sql
}

// docsQueries are the SQL blocks of docs/analytics.md's "## Queries".
func docsQueries(t *testing.T) []string {
	t.Helper()
	doc := string(readRepoFile(t, "docs/analytics.md"))
	_, rest, ok := strings.Cut(doc, "\n## Queries\n")
	section, _, _ := strings.Cut(rest, "\n## ")
	blocks := regexp.MustCompile("(?s)```sql\n(.*?)```").FindAllStringSubmatch(section, -1)
	if !ok || len(blocks) == 0 {
		t.Fatal(`docs/analytics.md: no SQL in "## Queries"`)
	}
	var out []string
	for _, b := range blocks {
		out = append(out, b[1])
	}
	return out
}

// TestNamedQueriesOnGatewayRecords runs every Athena named query of the
// analytics module, translated for DuckDB (trinoToDuckDB), on records a
// gateway wrote, converted to Parquet the way docs/analytics.md says and
// loaded into a table of the Glue schema; each answer is compared with
// the same figures computed in Go from the records. The examples of
// docs/analytics.md's "## Queries" must translate and run too.
func TestNamedQueriesOnGatewayRecords(t *testing.T) {
	t.Parallel()
	s := loadStack(t)
	an := s.dir(t, "modules/analytics")

	usage := gatewayUsageRecords(t)
	recs := readUsage(t, usage)
	checkRecordMix(t, recs)
	copies := redeliver(t, usage, recs)

	// The Glue table, column for column, in DuckDB.
	cols := columnsOf(t, an, "usage_columns")
	parts := columnsOf(t, an, "partition_columns")
	var defs, partNames, wantParquet []string
	for _, c := range cols {
		defs = append(defs, fmt.Sprintf("%q %s", c.Name, duckType(t, c.Type)))
		wantParquet = append(wantParquet, c.Name+" "+duckType(t, c.Type))
	}
	for _, c := range parts {
		defs = append(defs, fmt.Sprintf("%q %s", c.Name, duckType(t, c.Type)))
		partNames = append(partNames, c.Name)
	}
	database := "jetway_test_analytics"
	table := fmt.Sprintf("%q.%q", database, asString(t, "table_name", eval(t, "table_name", an.local(t, "table_name"), nil)))
	parquetGlob := "'usage-parquet/" + strings.Repeat("*/", len(parts)) + "*.parquet'"
	statements := []string{
		docsBlock(t, "ndjson-to-parquet"), // writes usage-parquet/ from usage/
		"CREATE SCHEMA " + database,
		"CREATE TABLE " + table + " (" + strings.Join(defs, ", ") + ")",
		"INSERT INTO " + table + " BY NAME SELECT * FROM read_parquet(" + parquetGlob + ", hive_partitioning = true, hive_types_autocast = false)",
		"SET search_path = '" + database + "'", // the docs' examples say FROM usage
	}

	// The named queries, as Terraform gives them to Athena.
	ctx := an.evalContext()
	ctx.Variables["local"] = cty.ObjectVal(map[string]cty.Value{"table": cty.StringVal(table)})
	named := eval(t, "local.named_queries", an.local(t, "named_queries"), ctx)
	queries := map[string]string{
		"parquet schema": "SELECT column_name || ' ' || column_type FROM (DESCRIBE SELECT * FROM read_parquet(" + parquetGlob + ", hive_partitioning = false))",
		"parquet paths":  "SELECT DISTINCT regexp_extract(filename, 'usage-parquet/(.*)/[^/]*$', 1) FROM read_parquet(" + parquetGlob + ", filename = true)",
		"rows":           "SELECT count(*) FROM " + table,
	}
	var names []string
	for it := named.ElementIterator(); it.Next(); {
		k, v := it.Element()
		name := k.AsString()
		names = append(names, name)
		q, err := trinoToDuckDB(v.GetAttr("query").AsString())
		if err != nil {
			t.Errorf("named query %s does not mean on Athena what it says: %v", name, err)
			continue
		}
		queries[name] = q
	}
	for i, q := range docsQueries(t) {
		tq, err := trinoToDuckDB(q)
		if err != nil {
			t.Errorf("docs/analytics.md query %d: %v\n%s", i+1, err, q)
			continue
		}
		queries[fmt.Sprintf("docs %d", i+1)] = tq
	}

	dir := filepath.Dir(usage) // usage/ and usage-parquet/ side by side, as in the docs
	res := runDuckDB(t, dir, statements, queries)
	for name, r := range res {
		if r.Error != "" {
			t.Errorf("%s: %s\n%s", name, r.Error, queries[name])
		}
	}
	if got := cells(res["parquet schema"]); strings.Join(got, ", ") != strings.Join(wantParquet, ", ") {
		t.Errorf("the docs' Parquet conversion writes columns\n %s\nthe Glue table reads\n %s", strings.Join(got, ", "), strings.Join(wantParquet, ", "))
	}
	wantPaths := map[string]bool{}
	for _, r := range recs {
		wantPaths[r.PartitionPath()] = true
	}
	for _, p := range cells(res["parquet paths"]) {
		if !wantPaths[p] {
			t.Errorf("Parquet written under %s, which is no record's PartitionPath (%v)", p, wantPaths)
		}
	}
	if got := cells(res["rows"]); len(got) != 1 || got[0] != strconv.Itoa(len(recs)+copies) {
		t.Errorf("the table holds %v rows, the files %d records and %d second copies", got, len(recs), copies)
	}

	want := expectedAnswers(recs, time.Now().UTC())
	sort.Strings(names)
	for _, name := range names {
		w, ok := want[name]
		if !ok {
			t.Errorf("named query %s: no expected answer in expectedAnswers", name)
			continue
		}
		if r := res[name]; r.Error == "" && queries[name] != "" {
			compareAnswer(t, name, r, w)
		}
	}
}

// redeliver writes a second copy of every other record into its partition,
// as Firehose does when it stores a batch whose answer was lost and the
// sink sends it again (or drains it from the spool): the same line, the
// same record_id. The named queries must count each record once, so their
// expected answers are computed from recs alone. It returns the copies.
func redeliver(t *testing.T, dir string, recs []telemetry.UsageRecord) int {
	t.Helper()
	ids := map[string]bool{}
	byPart := map[string][]byte{}
	n := 0
	for i, r := range recs {
		if r.RecordID == "" || ids[r.RecordID] {
			t.Fatalf("record %s has record_id %q: empty or not unique", r.RequestID, r.RecordID)
		}
		ids[r.RecordID] = true
		if i%2 == 1 {
			continue
		}
		line, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		byPart[r.PartitionPath()] = append(append(byPart[r.PartitionPath()], line...), '\n')
		n++
	}
	for part, data := range byPart {
		if err := os.WriteFile(filepath.Join(dir, part, "usage-analytics-task-redelivered.json"), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

// cells is a one-column answer's values.
func cells(r duckResult) []string {
	var out []string
	for _, row := range r.Rows {
		out = append(out, fmt.Sprint(row[0]))
	}
	return out
}

// expectedAnswers computes every named query's answer in Go: one row per
// group, cells as the query's columns.
func expectedAnswers(recs []telemetry.UsageRecord, now time.Time) map[string][][]any {
	type group struct {
		key                  []any
		n, in, out, interr   int64
		cost                 float64
		fallbacks, cacheHits int64
		ttft, latency        []int64
	}
	groupBy := func(keep func(telemetry.UsageRecord) bool, key func(telemetry.UsageRecord) []any) []*group {
		m := map[string]*group{}
		var order []*group
		for _, r := range recs {
			if !keep(r) {
				continue
			}
			k := key(r)
			g := m[fmt.Sprint(k)]
			if g == nil {
				g = &group{key: k}
				m[fmt.Sprint(k)] = g
				order = append(order, g)
			}
			g.n++
			g.in += r.InputTokens
			g.out += r.OutputTokens
			g.cost += r.CostUSD
			if r.FallbackFrom != "" {
				g.fallbacks++
			}
			if r.Cached {
				g.cacheHits++
			}
			if r.Outcome == "interrupted" {
				g.interr++
			}
			g.ttft = append(g.ttft, r.TTFTMs)
			g.latency = append(g.latency, r.LatencyMs)
		}
		return order
	}
	all := func(telemetry.UsageRecord) bool { return true }
	round4 := func(x float64) float64 { return math.Round(x*1e4) / 1e4 }
	out := map[string][][]any{}
	for _, g := range groupBy(all, func(r telemetry.UsageRecord) []any {
		return []any{r.TS.UTC().Format("2006-01-02"), r.Tenant, r.App}
	}) {
		out["tokens-by-tenant-app-day"] = append(out["tokens-by-tenant-app-day"], append(g.key, g.n, g.in, g.out, round4(g.cost)))
	}
	answered := func(r telemetry.UsageRecord) bool {
		return r.Outcome == telemetry.OutcomeDone && !r.Cached && r.TS.After(now.Add(-24*time.Hour))
	}
	for _, g := range groupBy(answered, func(r telemetry.UsageRecord) []any { return []any{r.Model} }) {
		out["ttft-latency-by-model"] = append(out["ttft-latency-by-model"], append(g.key, g.n,
			nearestRank(g.ttft, 0.5), nearestRank(g.ttft, 0.95), nearestRank(g.latency, 0.5), nearestRank(g.latency, 0.95)))
	}
	for _, g := range groupBy(all, func(r telemetry.UsageRecord) []any {
		return []any{r.TS.UTC().Format("2006-01-02T15"), r.Outcome, int64(r.Status)}
	}) {
		out["outcomes-by-hour"] = append(out["outcomes-by-hour"], append(g.key, g.n))
	}
	thisMonth := func(r telemetry.UsageRecord) bool { return r.TS.UTC().Format("2006-01") == now.Format("2006-01") }
	for _, g := range groupBy(thisMonth, func(r telemetry.UsageRecord) []any { return []any{r.Tenant, r.App, r.User} }) {
		out["top-users-by-cost"] = append(out["top-users-by-cost"], append(g.key, g.n, g.in+g.out, round4(g.cost)))
	}
	for _, g := range groupBy(all, func(r telemetry.UsageRecord) []any { return []any{r.Tenant, r.App} }) {
		out["fallbacks-cache-interruptions"] = append(out["fallbacks-cache-interruptions"], append(g.key, g.n,
			round4(float64(g.fallbacks)/float64(g.n)), round4(float64(g.cacheHits)/float64(g.n)), g.interr))
	}
	return out
}

// nearestRank is the p-quantile of xs by nearest rank (the ceil(n*p)-th
// smallest), which is DuckDB's quantile_disc.
func nearestRank(xs []int64, p float64) int64 {
	s := append([]int64(nil), xs...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(math.Ceil(float64(len(s))*p)) - 1
	return s[max(i, 0)]
}

// compareAnswer compares a query's rows with want, in any order: integers
// and strings exactly, doubles within the 4th decimal (the queries round
// there; summing in another order may land a tie on the other side).
func compareAnswer(t *testing.T, name string, got duckResult, want [][]any) {
	t.Helper()
	key := func(row []any) string {
		var parts []string
		for _, c := range row {
			if _, isFloat := c.(float64); !isFloat {
				parts = append(parts, fmt.Sprint(c))
			}
		}
		return strings.Join(parts, "|")
	}
	if len(got.Rows) != len(want) {
		t.Errorf("%s: %d rows, want %d\n got %v\nwant %v", name, len(got.Rows), len(want), got.Rows, want)
		return
	}
	wantBy := map[string][]any{}
	for _, w := range want {
		wantBy[key(w)] = w
	}
	for _, row := range got.Rows {
		// Cells as Go values: the key cells by their text, doubles as float64.
		var gkey []string
		for i, c := range row {
			if got.Types[i] != "DOUBLE" {
				gkey = append(gkey, fmt.Sprint(c))
			}
		}
		w, ok := wantBy[strings.Join(gkey, "|")]
		if !ok {
			t.Errorf("%s: row %v is not expected; want rows %v (columns %v)", name, row, want, got.Columns)
			continue
		}
		for i, c := range row {
			if got.Types[i] != "DOUBLE" {
				continue
			}
			g, err := strconv.ParseFloat(fmt.Sprint(c), 64)
			wf, isFloat := w[i].(float64)
			if err != nil || !isFloat || math.Abs(g-wf) > 1.0001e-4 {
				t.Errorf("%s: row %v: %s = %v, want %v", name, row, got.Columns[i], c, w[i])
			}
		}
	}
}
