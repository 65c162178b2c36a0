package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jetway-gateway/jetway/internal/gatewaytest"
	"github.com/jetway-gateway/jetway/internal/mockmodel"
)

func TestMain(m *testing.M) {
	code := m.Run()
	gatewaytest.RemoveBinary()
	os.Exit(code)
}

// world is one test's real parts: the mock Bedrock endpoint and a gateway
// process in dev mode pointed at it.
type world struct {
	t               *testing.T
	mock            *mockmodel.Server
	mockURL         string
	url, admin      string
	gw              *gatewaytest.Process
	config, keyFile string
}

// mockTokens is the answer length of the test mock: short answers, fast tests.
const mockTokens = 40

// newWorld starts the mock and a gateway. quotaLimit replaces Fabrikam's
// 20,000 tokens/hour so the quota test reaches it quickly.
func newWorld(t *testing.T, quotaLimit int) *world {
	t.Helper()
	dir := t.TempDir()
	w := &world{t: t, keyFile: filepath.Join(dir, "dev-key.pem"), config: filepath.Join(dir, "jetway.yaml")}
	w.mock = mockmodel.New(mockmodel.Options{TTFT: 2 * time.Millisecond, PerToken: 200 * time.Microsecond, Tokens: mockTokens})
	ts := httptest.NewServer(w.mock)
	t.Cleanup(ts.Close)
	w.mockURL = ts.URL

	cfg, err := os.ReadFile("testdata/bench.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfgText := strings.Replace(string(cfg), "tokens: 20000}", fmt.Sprintf("tokens: %d}", quotaLimit), 1)
	if err := os.WriteFile(w.config, []byte(cfgText), 0o600); err != nil {
		t.Fatal(err)
	}
	w.gw = gatewaytest.Start(t, gatewaytest.Options{Env: map[string]string{
		"HOME":          dir,
		"JETWAY_LISTEN": "127.0.0.1:0", "JETWAY_ADMIN_LISTEN": "127.0.0.1:0",
		"JETWAY_CONFIG": w.config, "JETWAY_DEV_KEY_FILE": w.keyFile,
		"JETWAY_USAGE_DIR": filepath.Join(dir, "usage"), "JETWAY_DRAIN_TIMEOUT": "2s",
		"AWS_ENDPOINT_URL_BEDROCK_RUNTIME": ts.URL, "AWS_REGION": "us-east-1",
		"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_EC2_METADATA_DISABLED": "true",
	}})
	w.url, w.admin = w.gw.URL(), "http://"+w.gw.Admin
	return w
}

func (w *world) logs() string { return w.gw.Log.String() }

// tokenCmd mints dev tokens with the gateway binary, as an operator would.
func (w *world) tokenCmd() string {
	return fmt.Sprintf("%s token --sub {user} --tenant {tenant} --app {app} --dev-key-file %s --config %s",
		gatewaytest.Binary(w.t), shellQuote(w.keyFile), shellQuote(w.config))
}

// loadtest runs the tool with --json and returns its report and error.
func (w *world) loadtest(url string, args ...string) (*Report, error) {
	w.t.Helper()
	full := append(args, "--url", url, "--json", "--progress", "off", "--token-cmd", w.tokenCmd(),
		"--admin-url", w.admin, "--user-prefix", strings.ReplaceAll(w.t.Name(), "/", "-"))
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err := runWith(ctx, full, func(string) string { return "" }, &out, io.Discard)
	var rep Report
	if jerr := json.Unmarshal(out.Bytes(), &rep); jerr != nil {
		w.t.Fatalf("loadtest %v: %v; output is not a JSON report (%v):\n%s\ngateway:\n%s", args, err, jerr, out.String(), w.logs())
	}
	return &rep, err
}

// TestCleanRunReportsZero: through a relay that changes nothing, Test 1
// delivers everything and every fault counter reads 0.
func TestCleanRunReportsZero(t *testing.T) {
	w := newWorld(t, 20000)
	relay := startRelay(t, w.url, relayFault("none"))
	rep, err := w.loadtest(relay, "delivery", "--users", "3", "--requests", "4")
	if err != nil {
		t.Fatalf("clean run failed: %v (%v)", err, rep.Problems)
	}
	a := rep.Accounting
	if a.Sent != 12 || a.Accepted != 12 || a.Done != 12 || len(a.Errors) != 0 {
		t.Fatalf("sent/accepted/done/errors = %d/%d/%d/%v, want 12/12/12/none", a.Sent, a.Accepted, a.Done, a.Errors)
	}
	if a.ChunksPublished != 12*mockTokens || a.ChunksReceived != a.ChunksPublished || a.ChunkFrames != a.ChunksPublished {
		t.Fatalf("chunks published %d, received %d, frames %d; want %d each", a.ChunksPublished, a.ChunksReceived, a.ChunkFrames, 12*mockTokens)
	}
	if a.ChunksLost != 0 || a.Duplicates != 0 || a.OutOfOrder != 0 || a.Incomplete != 0 || a.NeverFinished != 0 || a.WrongText != 0 {
		t.Fatalf("clean run counted faults: %+v", a)
	}
	if !rep.OK || rep.Latencies.ClientTTFT.N != 12 || rep.Latencies.Latency.N != 12 || rep.Latencies.ClientTTFT.P50 <= 0 {
		t.Fatalf("report: ok=%v latencies %+v", rep.OK, rep.Latencies)
	}
	if got := w.mock.Requests("mock-a"); got != 12 {
		t.Fatalf("the model was called %d times, want 12", got)
	}
}

// TestCountersCatchFaults: a relay that drops, duplicates, reorders chunk
// frames or loses the terminal frame is caught by the matching counter,
// and only by it, and the run fails.
func TestCountersCatchFaults(t *testing.T) {
	w := newWorld(t, 20000)
	const users, requests = 2, 3
	const n = users * requests
	for _, tc := range []struct {
		fault                                                  string
		lost, dup, ooo, incomplete, never, done, chunksArrived int64
	}{
		{fault: "drop", lost: n, incomplete: n, done: n, chunksArrived: n * (mockTokens - 1)},
		{fault: "duplicate", dup: n, done: n, chunksArrived: n * (mockTokens + 1)},
		{fault: "reorder", ooo: n, done: n, chunksArrived: n * mockTokens},
		{fault: "lose-terminal", never: n, chunksArrived: n * mockTokens},
	} {
		t.Run(tc.fault, func(t *testing.T) {
			relay := startRelay(t, w.url, relayFault(tc.fault))
			rep, err := w.loadtest(relay, "delivery", "--users", fmt.Sprint(users), "--requests", fmt.Sprint(requests), "--timeout", "1s")
			if !errors.Is(err, ErrFailed) || rep.OK {
				t.Fatalf("run with fault %s: err %v, ok %v; want ErrFailed", tc.fault, err, rep.OK)
			}
			a := rep.Accounting
			got := [7]int64{a.ChunksLost, a.Duplicates, a.OutOfOrder, a.Incomplete, a.NeverFinished, a.Done, a.ChunkFrames}
			want := [7]int64{tc.lost, tc.dup, tc.ooo, tc.incomplete, tc.never, tc.done, tc.chunksArrived}
			if got != want {
				t.Fatalf("fault %s: lost/dup/ooo/incomplete/never/done/frames = %v, want %v", tc.fault, got, want)
			}
			if a.WrongText != 0 {
				t.Fatalf("done.text is the server's: it must still be right, got %d wrong", a.WrongText)
			}
		})
	}
}

// TestQuotaSqueeze: Test 2 against a small limit boards requests, answers
// the rest with clean 429s, lets nothing past; a --limit below the
// gateway's real one proves the past-the-limit counter.
func TestQuotaSqueeze(t *testing.T) {
	const limit = 3000
	w := newWorld(t, limit)
	rep, err := w.loadtest(w.url, "quota", "--users", "4", "--duration", "1500ms", "--pause", "1ms", "--limit", fmt.Sprint(limit))
	if err != nil {
		t.Fatalf("quota run: %v %v", err, rep.Problems)
	}
	q := rep.Quota
	if q.Boarded == 0 || q.Clean429 == 0 || q.PastLimit != 0 || q.NeverHeard != 0 || q.Unclean429 != 0 {
		t.Fatalf("quota tally %+v", q)
	}
	if q.TotalUsage > limit || q.FrameLimit != limit || q.FrameWindow != "hour" {
		t.Fatalf("usage %d of %d; frame limit %d %s", q.TotalUsage, limit, q.FrameLimit, q.FrameWindow)
	}
	if got := w.mock.Requests("mock-a"); got != q.Boarded {
		t.Fatalf("model calls %d != boarded %d", got, q.Boarded)
	}
	// A fresh gateway with the same limit, while the tool is told a lower
	// one: the requests that board past it must be counted.
	w = newWorld(t, limit)
	rep, err = w.loadtest(w.url, "quota", "--users", "2", "--duration", "300ms", "--pause", "1ms", "--limit", "100")
	if !errors.Is(err, ErrFailed) || rep.Quota.PastLimit == 0 || rep.Quota.PastLimit >= rep.Quota.Boarded {
		t.Fatalf("past-limit run: err %v, quota %+v", err, rep.Quota)
	}
}

// TestOverheadInterleaves: both paths carry the same requests and give
// TTFT and gap distributions.
func TestOverheadInterleaves(t *testing.T) {
	w := newWorld(t, 20000)
	rep, err := w.loadtest(w.url, "overhead", "--streams", "4", "--rounds", "3", "--warmup", "1", "--ramp", "10ms",
		"--bedrock-url", w.mockURL)
	if err != nil {
		t.Fatalf("overhead: %v %v", err, rep.Problems)
	}
	o := rep.Overhead
	for name, p := range map[string]PathStats{"direct": o.Direct, "jetway": o.Jetway} {
		if p.Requests != 8 || p.Errors != 0 || p.TTFT.N != 8 || p.Gap.N != 8*(mockTokens-1) {
			t.Fatalf("%s path: %+v", name, p)
		}
	}
	if o.AddedTTFT.RatioP50 <= 0 || rep.Accounting.Done != 12 {
		t.Fatalf("added %+v, done %d", o.AddedTTFT, rep.Accounting.Done)
	}
	if got := w.mock.Requests("mock-a"); got != 24 {
		t.Fatalf("mock saw %d requests, want 24 (12 direct, 12 through the gateway)", got)
	}
}

// TestCapacityReadsTheGateway: idle sessions show up in the gateway's
// session count and RSS; the streaming phase counts chunk frames and CPU.
func TestCapacityReadsTheGateway(t *testing.T) {
	w := newWorld(t, 20000)
	rep, err := w.loadtest(w.url, "capacity", "--sessions", "40", "--settle", "10ms", "--pid", fmt.Sprint(w.gw.PID()),
		"--streaming-sessions", "2", "--stream-duration", "500ms")
	if err != nil {
		t.Fatalf("capacity: %v %v", err, rep.Problems)
	}
	c := rep.Capacity
	if c.Source != "proc" || c.IdleSessions != 40 || c.GatewaySessions != 40 || c.RSSAfter <= 0 || c.RSSBefore <= 0 {
		t.Fatalf("idle phase %+v", c)
	}
	if c.ChunkFrames == 0 || c.ChunkFrames != rep.Accounting.ChunksPublished || c.ChunkFramesPerSec <= 0 || c.GatewayCPUCores < 0 {
		t.Fatalf("streaming phase %+v, published %d", c, rep.Accounting.ChunksPublished)
	}
}

// TestSoakSurvivesDrops: connections cut mid-stream are resumed, nothing lost.
func TestSoakSurvivesDrops(t *testing.T) {
	w := newWorld(t, 20000)
	rep, err := w.loadtest(w.url, "soak", "--users", "3", "--duration", "1500ms", "--interval", "500ms",
		"--drop-every", "100ms", "--pause", "5ms")
	if err != nil {
		t.Fatalf("soak: %v %v", err, rep.Problems)
	}
	s := rep.Soak
	if s.Drops == 0 || rep.Accounting.Reconnects == 0 || len(s.Intervals) != 3 || rep.Accounting.Done == 0 {
		t.Fatalf("soak %+v, accounting %+v", s, rep.Accounting)
	}
	for _, iv := range s.Intervals {
		if iv.RSS <= 0 || iv.Goroutines <= 0 {
			t.Fatalf("interval without gateway metrics: %+v", iv)
		}
	}
}

// TestHelpDocumentsEveryFlag: --help lists every scenario and flag.
func TestHelpDocumentsEveryFlag(t *testing.T) {
	var out bytes.Buffer
	err := runWith(context.Background(), []string{"--help"}, func(string) string { return "" }, &out, io.Discard)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help: %v", err)
	}
	help := out.String()
	for _, want := range []string{"delivery", "quota", "overhead", "rate", "capacity", "soak", "Exit status"} {
		if !strings.Contains(help, want) {
			t.Errorf("help lacks %q", want)
		}
	}
	n := 0
	(&settings{}).flagSet(func(string) string { return "" }, io.Discard).VisitAll(func(f *flag.Flag) {
		n++
		if !strings.Contains(help, "  -"+f.Name+" ") && !strings.Contains(help, "  -"+f.Name+"\n") {
			t.Errorf("help lacks flag --%s", f.Name)
		}
		if f.Usage == "" {
			t.Errorf("flag --%s has no documentation", f.Name)
		}
	})
	if n < 30 {
		t.Fatalf("only %d flags found", n)
	}
}

// TestTokenSources: a token file hands users their lines; a token command
// gets shell-quoted placeholders and is run once per user.
func TestTokenSources(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "tokens")
	if err := os.WriteFile(file, []byte("# tokens\nA\n\nB\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ts, err := newTokenSource(&settings{TokenFile: file, TokenConcurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"A", "B", "A"} {
		if got, _ := ts.get(context.Background(), "u", i); got != want {
			t.Fatalf("user %d got %q, want %q", i, got, want)
		}
	}
	count := filepath.Join(dir, "count")
	ts, err = newTokenSource(&settings{Tenant: "fab'rikam", App: "a;b", TokenConcurrency: 2,
		TokenCmd: "echo run >> " + count + "; printf 'tok:%s:%s:%s\\n' {user} {tenant} {app}"})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if got, err := ts.get(context.Background(), "ann", 0); err != nil || got != "tok:ann:fab'rikam:a;b" {
			t.Fatalf("token %q, %v", got, err)
		}
	}
	runs, _ := os.ReadFile(count)
	if n := strings.Count(string(runs), "run"); n != 1 {
		t.Fatalf("token command ran %d times for one user, want 1", n)
	}
	exp := time.Unix(2000000000, 0)
	payload := fmt.Sprintf(`{"exp":%d}`, exp.Unix())
	tok := "h." + base64.RawURLEncoding.EncodeToString([]byte(payload)) + ".s"
	if got := jwtExpiry(tok); !got.Equal(exp) {
		t.Fatalf("jwtExpiry = %v, want %v", got, exp)
	}
}

// TestOverheadOpenAIDoor: --door openai adds the OpenAI door as a third
// path beside the direct call and the WebSocket, in the same run.
func TestOverheadOpenAIDoor(t *testing.T) {
	w := newWorld(t, 20000)
	rep, err := w.loadtest(w.url, "overhead", "--door", "openai", "--streams", "4", "--rounds", "3", "--warmup", "1",
		"--ramp", "10ms", "--bedrock-url", w.mockURL)
	if err != nil {
		t.Fatalf("overhead: %v %v", err, rep.Problems)
	}
	o := rep.Overhead
	if o.OpenAI == nil || o.AddedTTFTOpenAI == nil || o.OpenAIOverWS == nil {
		t.Fatalf("no OpenAI door path: %+v", o)
	}
	for name, p := range map[string]PathStats{"direct": o.Direct, "jetway": o.Jetway, "openai": *o.OpenAI} {
		if p.Requests != 8 || p.Errors != 0 || p.TTFT.N != 8 || p.Gap.N != 8*(mockTokens-1) {
			t.Fatalf("%s path: %+v", name, p)
		}
	}
	if got := w.mock.Requests("mock-a"); got != 36 {
		t.Fatalf("mock saw %d requests, want 36 (12 per path)", got)
	}
}

// TestOverheadCompareURL: --compare-url adds a second gateway as a third
// path beside the direct call and the first gateway, in the same run (here
// the same gateway under another URL spelling).
func TestOverheadCompareURL(t *testing.T) {
	w := newWorld(t, 20000)
	second := strings.Replace(w.url, "127.0.0.1", "localhost", 1)
	if second == w.url {
		t.Fatalf("cannot respell %s", w.url)
	}
	rep, err := w.loadtest(w.url, "overhead", "--compare-url", second, "--streams", "4", "--rounds", "3", "--warmup", "1",
		"--ramp", "10ms", "--bedrock-url", w.mockURL)
	if err != nil {
		t.Fatalf("overhead: %v %v", err, rep.Problems)
	}
	o := rep.Overhead
	if o.Compare == nil || o.AddedTTFTCompare == nil || o.CompareOverWS == nil {
		t.Fatalf("no compare path: %+v", o)
	}
	for name, p := range map[string]PathStats{"direct": o.Direct, "jetway": o.Jetway, "compare": *o.Compare} {
		if p.Requests != 8 || p.Errors != 0 || p.TTFT.N != 8 || p.Gap.N != 8*(mockTokens-1) {
			t.Fatalf("%s path: %+v", name, p)
		}
	}
	if got := w.mock.Requests("mock-a"); got != 36 {
		t.Fatalf("mock saw %d requests, want 36 (12 per path)", got)
	}
	noEnv := func(string) string { return "" }
	if _, err := parseSettings([]string{"overhead", "--door", "openai", "--compare-url", second}, noEnv, io.Discard); err == nil {
		t.Fatal("--compare-url with --door openai was accepted")
	}
}

// TestRateSideBySide: the rate scenario sends its schedule (50 a second on
// each path for 1.2 s: 60 through the door, 60 straight to the mock) in
// one run, measures both paths after the ramp and reads the gateway's CPU.
func TestRateSideBySide(t *testing.T) {
	w := newWorld(t, 20000)
	rep, err := w.loadtest(w.url, "rate", "--rate", "50", "--duration", "1s", "--ramp", "200ms",
		"--bedrock-url", w.mockURL, "--pid", fmt.Sprint(w.gw.PID()))
	if err != nil {
		t.Fatalf("rate: %v %v", err, rep.Problems)
	}
	r := rep.Rate
	if r == nil || r.Path != "/v1/chat/completions" || r.Skipped != 0 {
		t.Fatalf("rate result %+v", r)
	}
	for name, p := range map[string]RatePath{"direct": r.Direct, "door": r.Door} {
		if p.Requests < 1 || p.Requests > 60 || p.Errors != 0 || p.Latency.N != int(p.Requests) {
			t.Fatalf("%s path: %+v", name, p)
		}
	}
	if r.GatewayCPUCores < 0 || r.DoorRPSPerCore <= 0 {
		t.Fatalf("no gateway CPU: %+v", r)
	}
	if got := w.mock.Requests("mock-a"); got != 120 {
		t.Fatalf("mock saw %d requests, want 120 (60 per path)", got)
	}
}

// TestPromptCacheConversations: the promptcache scenario holds the same
// conversation with prompt_cache auto and off through both doors; with
// auto the gateway's cache points show as reads from turn 2 on, off shows
// none, and the answers are the same. (Whether the goals are met is the
// benchmark's to say: a 3-turn run is too short for them.)
func TestPromptCacheConversations(t *testing.T) {
	w := newWorld(t, 20000)
	rep, err := w.loadtest(w.url, "promptcache", "--turns", "3", "--system-tokens", "1500")
	pc := rep.PromptCache
	if pc == nil || len(pc.Runs) != 4 {
		t.Fatalf("report %+v (%v)", rep, err)
	}
	for _, p := range rep.Problems {
		if !strings.Contains(p, "goal") && !strings.Contains(p, "not lower") {
			t.Errorf("problem %q", p)
		}
	}
	for _, r := range pc.Runs {
		if r.Err != "" || len(r.Turns) != 3 {
			t.Fatalf("%s/%s: %d turns, error %q", r.Door, r.Mode, len(r.Turns), r.Err)
		}
		for _, turn := range r.Turns {
			cached := turn.CacheRead > 0
			if want := r.Mode == cacheAuto && turn.Turn >= 2; cached != want || turn.TTFTMs <= 0 || turn.CostUSD <= 0 {
				t.Errorf("%s/%s turn %+v: want cache reads %v", r.Door, r.Mode, turn, want)
			}
		}
	}
	for _, c := range pc.Comparisons {
		if !c.SameAnswers || c.InputCostSaving <= 0 {
			t.Errorf("comparison %+v", c)
		}
	}
}

// TestOverheadSeveralCompareURLs: --compare-url repeats (one path per
// gateway, all in the same run), and --compare-pid reads each one's CPU
// per chunk of its own path (here the same gateway process three times).
func TestOverheadSeveralCompareURLs(t *testing.T) {
	w := newWorld(t, 20000)
	second := strings.Replace(w.url, "127.0.0.1", "localhost", 1)
	pid := fmt.Sprint(w.gw.PID())
	rep, err := w.loadtest(w.url, "overhead", "--compare-url", second, "--compare-url", w.url, "--pid", pid,
		"--compare-pid", pid, "--compare-pid", pid, "--streams", "4", "--rounds", "3", "--warmup", "1",
		"--ramp", "10ms", "--bedrock-url", w.mockURL, "--admin-url", "")
	if err != nil {
		t.Fatalf("overhead: %v %v", err, rep.Problems)
	}
	o := rep.Overhead
	if len(o.Compares) != 2 || o.Compare == nil || *o.Compare != o.Compares[0].Path {
		t.Fatalf("compares %+v", o.Compares)
	}
	for i, c := range o.Compares {
		if c.Path.Requests != 8 || c.Path.Errors != 0 || c.Path.TTFT.N != 8 || c.CPUCores < 0 || c.CPUPerUS <= 0 {
			t.Fatalf("compare %d: %+v", i, c)
		}
	}
	if o.GatewayCPUPerChunkUS <= 0 {
		t.Fatalf("gateway CPU per chunk %v", o.GatewayCPUPerChunkUS)
	}
	if got := w.mock.Requests("mock-a"); got != 48 {
		t.Fatalf("mock saw %d requests, want 48 (12 per path)", got)
	}
	noEnv := func(string) string { return "" }
	if _, err := parseSettings([]string{"overhead", "--compare-url", second, "--compare-pid", "1", "--compare-pid", "2"}, noEnv, io.Discard); err == nil {
		t.Fatal("more --compare-pid than --compare-url was accepted")
	}
}

// token mints a dev token for user of Contoso's support assistant, as a
// peer's header would carry one.
func (w *world) token(user string) string {
	w.t.Helper()
	cmd := strings.NewReplacer("{user}", user, "{tenant}", "contoso", "{app}", "support-assistant").Replace(w.tokenCmd())
	out, err := exec.Command("sh", "-c", cmd).Output()
	if err != nil {
		w.t.Fatalf("minting a token: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// TestFrontierClimbs: the frontier scenario drives every door and a peer
// (here the gateway's own OpenAI door under another spelling, signed in by
// --peer-header alone) through each rate beside the direct call, and
// reports the rates each held within each bound.
func TestFrontierClimbs(t *testing.T) {
	w := newWorld(t, 1000000)
	peer := strings.Replace(w.url, "127.0.0.1", "localhost", 1)
	peer = strings.Replace(strings.TrimSuffix(peer, "/v1/ws"), "ws://", "http://", 1) + "/v1/chat/completions"
	rep, err := w.loadtest(w.url, "frontier", "--rates", "10,20", "--bounds", "50,1000", "--duration", "500ms", "--ramp", "100ms",
		"--bedrock-url", w.mockURL, "--pid", fmt.Sprint(w.gw.PID()), "--peer-url", peer, "--peer-name", "peer",
		"--peer-model", "mock-a", "--peer-header", "Authorization: Bearer "+w.token("frontier-peer"))
	if err != nil {
		t.Fatalf("frontier: %v %v", err, rep.Problems)
	}
	f := rep.Frontier
	if f == nil || len(f.Targets) != 4 || !slices.Equal(f.Bounds, []float64{50, 1000}) {
		t.Fatalf("frontier result %+v", f)
	}
	for _, target := range f.Targets {
		if len(target.Steps) != 2 || target.Stopped != "" {
			t.Fatalf("%s: %+v", target.Name, target)
		}
		for _, s := range target.Steps {
			if !s.Held || s.Errors != 0 || s.RPS <= 0 || s.DirectRPS <= 0 {
				t.Fatalf("%s step %+v", target.Name, s)
			}
		}
		if target.Held[1] != 20 {
			t.Fatalf("%s held %v within %v", target.Name, target.Held, f.Bounds)
		}
	}
	if f.Targets[0].CPUAt[1] <= 0 || f.Targets[3].CPUAt[1] != -1 {
		t.Fatalf("CPU per request at the held rates: door %v, peer (no --peer-pid) %v", f.Targets[0].CPUAt, f.Targets[3].CPUAt)
	}
	noEnv := func(string) string { return "" }
	for _, bad := range [][]string{{"--rates", "20,10"}, {"--bounds", "0,5"}, {"--paths", "v1/x"}, {"--paths", ""},
		{"--peer-url", "http://x", "--peer-header", "no colon"}} {
		if _, err := parseSettings(append([]string{"frontier"}, bad...), noEnv, io.Discard); err == nil {
			t.Fatalf("frontier %v was accepted", bad)
		}
	}
}

// TestOverheadPeerDoor: --compare-door openai streams from a peer's
// OpenAI-compatible endpoint (here the gateway's own, signed in by
// --peer-header alone) as one more path beside the direct call and /v1/ws.
func TestOverheadPeerDoor(t *testing.T) {
	w := newWorld(t, 20000)
	peer := strings.Replace(strings.TrimSuffix(w.url, "/v1/ws"), "ws://", "http://", 1) + "/v1/chat/completions"
	rep, err := w.loadtest(w.url, "overhead", "--compare-url", peer, "--compare-door", "openai", "--peer-model", "mock-a",
		"--peer-header", "Authorization: Bearer "+w.token("overhead-peer"), "--streams", "4", "--rounds", "3", "--warmup", "1",
		"--ramp", "10ms", "--bedrock-url", w.mockURL)
	if err != nil {
		t.Fatalf("overhead: %v %v", err, rep.Problems)
	}
	o := rep.Overhead
	if o.Compare == nil {
		t.Fatalf("no peer path: %+v", o)
	}
	for name, p := range map[string]PathStats{"direct": o.Direct, "jetway": o.Jetway, "peer": *o.Compare} {
		if p.Requests != 8 || p.Errors != 0 || p.TTFT.N != 8 || p.Gap.N != 8*(mockTokens-1) {
			t.Fatalf("%s path: %+v", name, p)
		}
	}
}
