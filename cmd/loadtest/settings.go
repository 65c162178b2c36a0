package main

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
)

// settings are the command line. Every flag is documented by --help.
type settings struct {
	Scenario string

	URL         string
	Tenant, App string
	UserPrefix  string
	Model       string
	MaxTokens   int
	Prompt      string
	Timeout     time.Duration
	JSON        bool
	Progress    string
	MockText    bool

	Token, TokenFile, TokenCmd string
	TokenConcurrency           int

	// delivery, quota, soak
	Users    int
	Requests int
	Duration time.Duration
	Pause    time.Duration

	// quota
	Limit    int64
	SameUser bool

	// overhead
	Streams      int
	Rounds       int
	Warmup       int
	Ramp         time.Duration
	BedrockURL   string
	BedrockCA    string
	BedrockModel string
	Door         string
	Region       string
	CompareURL   stringList // repeatable: one more path per gateway
	CompareDoor  string     // the door the --compare-url paths speak: ws or ai-sdk
	ComparePID   intList    // repeatable: the process id of each --compare-url gateway, in order

	// rate
	Rate     float64
	Path     string
	Inflight int

	// frontier (and rate's flags above)
	Rates      []float64
	RateList   string
	Bounds     []float64
	BoundList  string
	Paths      []string
	PathList   string
	PeerURL    string
	PeerName   string
	PeerModel  string
	PeerHeader stringList
	PeerPID    int

	// capacity
	Sessions          int
	StreamingSessions int
	StreamInflight    int
	StreamDuration    time.Duration
	DialConcurrency   int
	Settle            time.Duration
	PID               int
	AdminURL          string
	SessionsPerUser   int

	// soak
	DropEvery time.Duration
	Interval  time.Duration

	// promptcache
	Turns                           int
	SystemTokens                    int
	DoorList                        string
	Doors                           []string
	CompareApp                      string
	PriceInput, PriceOutput         float64
	PriceCacheRead, PriceCacheWrite float64

	// set are the flags given on the command line.
	set map[string]bool
}

// scenarioHelp is the first part of --help.
const scenarioHelp = `usage: loadtest <scenario> [flags]

Scenarios (the article's tests, plus what it could not measure):
  delivery  Test 1: --users U x --requests R (default 10 x 10), one connection
            per session, requests sent one after another on it. Reports
            delivery accounting and TTFT/latency percentiles.
  quota     Test 2: --users N (default 20) hammer an app with a small quota
            (default Fabrikam's document-summarizer, 20,000 tokens/hour) for
            --duration. Reports requests that boarded, clean 429s, requests
            past --limit (from done.usage sums), requests that never heard back.
            With --same-user (default) the gateway's per-user caps
            (JETWAY_MAX_CONNS_PER_USER=16, JETWAY_MAX_INFLIGHT_PER_USER=8) must
            allow --users sessions, or some get rate_limited.
  overhead  --streams concurrent workers, each alternating one request sent
            straight to the mock Bedrock endpoint (--bedrock-url, through the
            Bedrock SDK exactly as the gateway calls it) and one through
            Jetway. Reports the added TTFT and the added inter-chunk gap
            (p50/p95/p99) as differences and ratios.
  rate      Non-streaming HTTP requests through a door (--path, default
            /v1/chat/completions; /v1/messages for the Anthropic door) at
            --rate per second, and as many straight to the mock Bedrock
            endpoint (--bedrock-url, through the Bedrock SDK as the gateway
            calls it), interleaved on one open-loop schedule for --duration
            (default 20s) after a --ramp warm-up. Reports both latencies,
            what the door adds (p50/p95/p99) and, with --pid, the door's
            requests per second per gateway core. Run the mock at 0 ms.
  frontier  The throughput frontier: each door of --paths (default the
            OpenAI, Anthropic and Responses doors) and the peer gateway of
            --peer-url (an OpenAI-compatible endpoint, Portkey's for one)
            driven through --rates in turn, each step as the rate scenario
            (the path beside as many direct calls to the mock, --ramp then
            --duration, default 10s). Reports, for each added-p99 bound of
            --bounds (1, 5 and 10 ms), the highest rate each path held with
            every request answered and sent on schedule, and its CPU per
            request (--pid, --peer-pid). Run the mock at 0 ms.
  capacity  Ramp --sessions idle sessions and report the gateway's RSS per
            session (/proc/<--pid>/status, else process_resident_memory_bytes
            from --admin-url/metrics); then --streaming-sessions sessions
            stream for --stream-duration (run the mock at 0 ms per token):
            chunk frames per second delivered, and the gateway's CPU.
  soak      --users sessions with reconnection on, a steady request mix for
            --duration, one random connection cut (client Drop) every
            --drop-every; a row per --interval shows drift.
  promptcache
            A --turns conversation (default 20) with a --system-tokens
            system prompt (default 3000) through each door of --doors
            (default ws,openai), on --app (default chat: prompt_cache auto)
            and --compare-app (default chat-off: prompt_cache off) side by
            side: per turn the input billed at full price, cache reads and
            writes, cost in USD (at the --price-* flags) and TTFT. Fails
            unless input cost is >= 70% lower with the cache, median TTFT
            from turn 3 lower, and the answers the same. Run the gateway
            with cmd/loadtest/testdata/bench.yaml (it has both apps).
  responses --streams S (default 10) concurrent sessions, each a --turns T
            (default 20) tool loop through the Responses door on --app
            (default coding-agent: mock-tools), two arms at once: POST
            /v1/responses with the full conversation every turn (store:false,
            the stateless client) on --url's gateway, and WebSocket mode with
            only the new input and previous_response_id on --compare-url's
            (default: the same gateway). A ~17 KB developer prompt and 9
            function tools; turns alternate user message -> function_call and
            function_call_output -> text. Per arm: turn-to-first-token
            p50/p95/p99 (and by turn), gateway CPU per turn (--pid,
            --compare-pid), bytes sent per turn, turns/s; then the gain. With
            --bedrock-url given, also the direct mock's TTFT of the first
            turn. Run the gateways with cmd/loadtest/testdata/bench.yaml.

Tokens: --token (one token for every user), --token-file (one token per line,
user i gets line i), or --token-cmd (a shell command printing a token; the
placeholders {user} {tenant} {app} are replaced, shell-quoted). The default
mints dev-issuer tokens with the gateway's own command and needs the repository
as working directory; build it once and pass
--token-cmd './gateway token --sub {user} --tenant {tenant} --app {app}'
for runs with many users.

Exit status: 0 when nothing was lost, everything finished, nothing arrived
twice or out of order, every answer was right and no request got past the
quota; 1 otherwise (the report lists the problems).

Flags:
`

func parseSettings(args []string, getenv func(string) string, out io.Writer) (*settings, error) {
	s := &settings{}
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		s.Scenario, args = args[0], args[1:]
	}
	if s.Scenario == "help" {
		args = []string{"-h"}
	}
	fs := s.flagSet(getenv, out)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	s.set = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { s.set[f.Name] = true })
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	if s.Scenario == "" {
		fs.Usage()
		return nil, fmt.Errorf("name a scenario: delivery, quota, overhead, rate, capacity, soak, promptcache or responses")
	}
	return s, s.defaults()
}

// flagSet binds every flag to s.
func (s *settings) flagSet(getenv func(string) string, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("loadtest", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprint(out, scenarioHelp)
		fs.PrintDefaults()
	}
	env := func(k, def string) string {
		if v := getenv(k); v != "" {
			return v
		}
		return def
	}
	fs.StringVar(&s.URL, "url", env("LOADTEST_URL", "ws://127.0.0.1:8080/v1/ws"), "the gateway's WebSocket endpoint (LOADTEST_URL); responses: the HTTP arm's gateway (its scheme and host are used)")
	fs.StringVar(&s.Tenant, "tenant", "", "tenant of the users (default: contoso; quota: fabrikam)")
	fs.StringVar(&s.App, "app", "", "app of the users (default: support-assistant; quota: document-summarizer)")
	fs.StringVar(&s.UserPrefix, "user-prefix", "load-user", "users are <prefix>-1, <prefix>-2, ...")
	fs.StringVar(&s.Model, "model", "", "model to ask for (default: the app's default model)")
	fs.IntVar(&s.MaxTokens, "max-tokens", 0, "max_tokens of every request (0: the app's default)")
	fs.StringVar(&s.Prompt, "prompt", "Tell me about flight %d", "prompt; %d is replaced by a per-request number")
	fs.DurationVar(&s.Timeout, "timeout", 60*time.Second, "a request with no terminal frame by then never finished (the article waited 60s)")
	fs.BoolVar(&s.JSON, "json", false, "write the report as JSON instead of markdown")
	fs.StringVar(&s.Progress, "progress", "auto", "progress bar on stderr: auto (when stderr is a terminal), on, off")
	fs.BoolVar(&s.MockText, "mock-text", true, "check every answer against the mock model's deterministic text (turn off against a real model)")

	fs.StringVar(&s.Token, "token", env("LOADTEST_TOKEN", ""), "a bearer token used for every user (LOADTEST_TOKEN)")
	fs.StringVar(&s.TokenFile, "token-file", "", "file of bearer tokens, one per line; user i uses line i (mod the count)")
	fs.StringVar(&s.TokenCmd, "token-cmd", "go run ./cmd/gateway token --sub {user} --tenant {tenant} --app {app}",
		"shell command printing a token for {user} {tenant} {app}; run once per user and again before the token expires")
	fs.IntVar(&s.TokenConcurrency, "token-concurrency", 4, "token commands run at once")

	fs.IntVar(&s.Users, "users", 0, "users (sessions) of delivery (default 10), quota (20), soak (20); capacity and overhead: distinct users (default: enough for --sessions-per-user)")
	fs.IntVar(&s.Requests, "requests", 10, "delivery: requests per user, one after another on its session")
	fs.DurationVar(&s.Duration, "duration", 0, "quota (default 1m) and soak (default 5m): how long to send")
	fs.DurationVar(&s.Pause, "pause", 0, "quota and soak: pause after each request (default: quota 250ms, soak 200ms)")

	fs.Int64Var(&s.Limit, "limit", 20000, "quota: the app's configured token limit for the window, to count requests past it")
	fs.BoolVar(&s.SameUser, "same-user", true, "quota: every session is the same user (the article's shape); false: one user per session")

	fs.IntVar(&s.Streams, "streams", 1000, "overhead: concurrent streams (workers); responses: concurrent sessions per arm (default 10)")
	fs.IntVar(&s.Rounds, "rounds", 3, "overhead: rounds per worker; a round is one direct request and one through Jetway")
	fs.IntVar(&s.Warmup, "warmup", 1, "overhead: leading rounds left out of the numbers")
	fs.DurationVar(&s.Ramp, "ramp", 2*time.Second, "overhead: workers start spread over this long")
	fs.StringVar(&s.BedrockURL, "bedrock-url", env("AWS_ENDPOINT_URL_BEDROCK_RUNTIME", "http://127.0.0.1:8090"), "overhead, and responses when given: the mock Bedrock endpoint the gateway uses (AWS_ENDPOINT_URL_BEDROCK_RUNTIME)")
	fs.StringVar(&s.BedrockCA, "bedrock-ca", "", "overhead: PEM file of the CA the mock's --tls certificate is signed with (the gateway's JETWAY_BEDROCK_CA_FILE)")
	fs.StringVar(&s.BedrockModel, "bedrock-model", "mock-a", "overhead: the Bedrock model id the app's model maps to")
	fs.StringVar(&s.Door, "door", "ws", "overhead: ws (direct vs the WebSocket), or openai (direct, the WebSocket and POST /v1/chat/completions side by side)")
	fs.Var(&s.CompareURL, "compare-url", "overhead: another gateway's WebSocket endpoint (for example the production shape, tables in DynamoDB, or tracing on) measured in the same run as one more path (--door ws only); repeatable. responses: the WebSocket mode arm's gateway (the first one)")
	fs.StringVar(&s.CompareDoor, "compare-door", "ws", "overhead: the door every --compare-url path speaks: ws (/v1/ws), ai-sdk (/v1/ai-sdk at the same gateway, the WebSocketChatTransport wire) or openai (--compare-url is a peer gateway's chat completions URL, streamed as Server-Sent Events, signed in by --peer-header)")
	fs.Var(&s.ComparePID, "compare-pid", "overhead: the process id of each --compare-url gateway, in the same order: its CPU per chunk; repeatable. responses: the WebSocket arm's gateway's, its CPU per turn")
	fs.StringVar(&s.Region, "region", env("AWS_REGION", "us-east-1"), "overhead: region of the direct Bedrock client (AWS_REGION)")

	fs.Float64Var(&s.Rate, "rate", 2000, "rate: requests per second on each path (door and direct)")
	fs.StringVar(&s.Path, "path", "/v1/chat/completions", "rate: the door's path on the gateway's listener (--url's host)")
	fs.IntVar(&s.Inflight, "inflight", 256, "rate and frontier: most requests outstanding per path; a request due past it is not sent (counted)")
	fs.StringVar(&s.RateList, "rates", "250,500,1000,1500,2000,2500,3000", "frontier: the rate steps, requests per second on each path, comma-separated, climbed in order")
	fs.StringVar(&s.BoundList, "bounds", "1,5,10", "frontier: added-p99 bounds in ms, comma-separated: the report gives the highest rate held within each")
	fs.StringVar(&s.PathList, "paths", "/v1/chat/completions,/v1/messages,/v1/responses", "frontier: the Jetway doors climbed, comma-separated paths on --url's host (empty: none)")
	fs.StringVar(&s.PeerURL, "peer-url", "", "frontier: a peer gateway's OpenAI-compatible chat completions URL, climbed beside the doors (no JWT: --peer-header carries what it needs); overhead with --compare-door openai: see --compare-url")
	fs.StringVar(&s.PeerName, "peer-name", "peer", "frontier: the peer's name in the report")
	fs.StringVar(&s.PeerModel, "peer-model", "", "frontier and overhead: the model the peer's requests name (default --bedrock-model)")
	fs.Var(&s.PeerHeader, "peer-header", "frontier, and overhead with --compare-door openai: a header every peer request carries, \"Name: value\"; repeatable")
	fs.IntVar(&s.PeerPID, "peer-pid", 0, "frontier: the peer's process id, for its CPU per request")

	fs.IntVar(&s.Sessions, "sessions", 10000, "capacity: idle sessions to ramp to")
	fs.IntVar(&s.SessionsPerUser, "sessions-per-user", 8, "capacity and overhead: sessions per user (the gateway allows 16 connections and 8 requests in flight per user)")
	fs.IntVar(&s.StreamingSessions, "streaming-sessions", 64, "capacity: sessions streaming in the throughput phase (0: skip it)")
	fs.IntVar(&s.StreamInflight, "stream-inflight", 2, "capacity: requests in flight per streaming session")
	fs.DurationVar(&s.StreamDuration, "stream-duration", 20*time.Second, "capacity: how long the streaming phase sends")
	fs.IntVar(&s.DialConcurrency, "dial-concurrency", 64, "capacity and overhead: sessions opened at once")
	fs.DurationVar(&s.Settle, "settle", 3*time.Second, "capacity: wait after the ramp before reading RSS; responses: the idle window before the run that reads each gateway's idle CPU (default 5s)")
	fs.IntVar(&s.PID, "pid", 0, "capacity, overhead and soak: the gateway's process id, for /proc/<pid>/status and /proc/<pid>/stat (local gateways): RSS and CPU per chunk frame; responses: the HTTP arm's gateway's, its CPU per turn")
	fs.StringVar(&s.AdminURL, "admin-url", env("LOADTEST_ADMIN_URL", "http://127.0.0.1:9090"), "the gateway's admin listener, for /metrics and /readyz (LOADTEST_ADMIN_URL; empty: none)")

	fs.DurationVar(&s.DropEvery, "drop-every", 5*time.Second, "soak: cut one random session's connection this often (0: never)")
	fs.DurationVar(&s.Interval, "interval", 0, "soak: one report row per interval (default: --duration/10)")

	fs.IntVar(&s.Turns, "turns", 20, "promptcache: turns of each conversation; responses: turns of each session's tool loop")
	fs.IntVar(&s.SystemTokens, "system-tokens", 3000, "promptcache: tokens of the system prompt (four bytes each)")
	fs.StringVar(&s.DoorList, "doors", "ws,openai", "promptcache: doors to converse through, comma-separated: ws, openai (anthropic once that door exists)")
	fs.StringVar(&s.CompareApp, "compare-app", "chat-off", "promptcache: the app with prompt_cache off (--app is the one with auto)")
	fs.Float64Var(&s.PriceInput, "price-input", 0.003, "promptcache: USD per 1,000 input tokens (the model's input_per_1k)")
	fs.Float64Var(&s.PriceOutput, "price-output", 0.015, "promptcache: USD per 1,000 output tokens")
	fs.Float64Var(&s.PriceCacheRead, "price-cache-read", 0.0003, "promptcache: USD per 1,000 tokens read from the prompt cache")
	fs.Float64Var(&s.PriceCacheWrite, "price-cache-write", 0.00375, "promptcache: USD per 1,000 tokens written to the prompt cache")
	return fs
}

// defaults fills the per-scenario defaults and checks the flags.
func (s *settings) defaults() error {
	switch s.Scenario {
	case "delivery", "quota", "overhead", "rate", "frontier", "capacity", "soak", "promptcache", "responses":
	default:
		return fmt.Errorf("unknown scenario %q (want delivery, quota, overhead, rate, frontier, capacity, soak, promptcache or responses)", s.Scenario)
	}
	if s.Scenario == "frontier" {
		if err := s.frontierDefaults(); err != nil {
			return err
		}
	}
	if s.Scenario == "responses" {
		if err := s.responsesDefaults(); err != nil {
			return err
		}
	}
	if s.Scenario == "promptcache" {
		if s.App == "" {
			s.App = "chat"
		}
		for _, d := range strings.Split(s.DoorList, ",") {
			switch d = strings.TrimSpace(d); {
			case d == "anthropic":
				return fmt.Errorf("--doors anthropic: this build has no Anthropic door yet")
			case !slices.Contains(promptCacheDoors, d):
				return fmt.Errorf("--doors: unknown door %q (want ws, openai)", d)
			case !slices.Contains(s.Doors, d):
				s.Doors = append(s.Doors, d)
			}
		}
		if s.Turns < 3 || s.SystemTokens < 0 {
			return fmt.Errorf("--turns must be at least 3 and --system-tokens not negative")
		}
	}
	if s.Tenant == "" {
		s.Tenant = "contoso"
		if s.Scenario == "quota" {
			s.Tenant = "fabrikam"
		}
	}
	if s.App == "" {
		s.App = "support-assistant"
		if s.Scenario == "quota" {
			s.App = "document-summarizer"
		}
	}
	if s.Users == 0 {
		switch s.Scenario {
		case "delivery":
			s.Users = 10
		case "quota", "soak":
			s.Users = 20
		}
	}
	if s.Duration == 0 {
		switch s.Scenario {
		case "soak":
			s.Duration = 5 * time.Minute
		case "rate":
			s.Duration = 20 * time.Second
		case "frontier":
			s.Duration = 10 * time.Second
		default:
			s.Duration = time.Minute
		}
	}
	if s.Scenario == "rate" && (s.Rate <= 0 || s.Inflight <= 0 || !strings.HasPrefix(s.Path, "/")) {
		return fmt.Errorf("rate: --rate and --inflight must be positive and --path start with /")
	}
	if s.Pause == 0 {
		s.Pause = 250 * time.Millisecond
		if s.Scenario == "soak" {
			s.Pause = 200 * time.Millisecond
		}
	}
	if s.Interval == 0 {
		s.Interval = s.Duration / 10
	}
	if s.SessionsPerUser <= 0 {
		s.SessionsPerUser = 1
	}
	if s.Door != "ws" && s.Door != "openai" {
		return fmt.Errorf("--door %q: want ws or openai", s.Door)
	}
	if len(s.CompareURL) > 0 && s.Door != "ws" {
		return fmt.Errorf("--compare-url needs --door ws")
	}
	if s.CompareDoor != "ws" && s.CompareDoor != "ai-sdk" && s.CompareDoor != "openai" {
		return fmt.Errorf("--compare-door %q: want ws, ai-sdk or openai", s.CompareDoor)
	}
	if len(s.ComparePID) > len(s.CompareURL) {
		return fmt.Errorf("--compare-pid: %d given for %d --compare-url", len(s.ComparePID), len(s.CompareURL))
	}
	switch s.Progress {
	case "auto", "on", "off":
	default:
		return fmt.Errorf("--progress %q: want auto, on or off", s.Progress)
	}
	if s.Timeout <= 0 || s.Users < 0 || s.Requests < 0 || s.Streams < 0 || s.Sessions < 0 || s.Rounds <= s.Warmup && s.Scenario == "overhead" {
		return fmt.Errorf("--timeout must be positive, counts not negative, and --rounds more than --warmup")
	}
	if s.DialConcurrency <= 0 {
		s.DialConcurrency = 1
	}
	if s.TokenConcurrency <= 0 {
		s.TokenConcurrency = 1
	}
	return nil
}

// frontierDefaults parses the frontier's lists: rates and bounds
// positive and ascending, paths starting with /, something to climb.
func (s *settings) frontierDefaults() error {
	var err error
	if s.Rates, err = ascending("--rates", s.RateList); err != nil {
		return err
	}
	if s.Bounds, err = ascending("--bounds", s.BoundList); err != nil {
		return err
	}
	for _, p := range strings.Split(s.PathList, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		if !strings.HasPrefix(p, "/") {
			return fmt.Errorf("--paths: %q does not start with /", p)
		}
		s.Paths = append(s.Paths, p)
	}
	if len(s.Paths) == 0 && s.PeerURL == "" {
		return fmt.Errorf("frontier: nothing to climb (--paths empty and no --peer-url)")
	}
	for _, h := range s.PeerHeader {
		if k, _, ok := strings.Cut(h, ":"); !ok || strings.TrimSpace(k) == "" {
			return fmt.Errorf("--peer-header %q: want \"Name: value\"", h)
		}
	}
	if s.Inflight <= 0 {
		return fmt.Errorf("frontier: --inflight must be positive")
	}
	return nil
}

// ascending parses a comma-separated list of positive, ascending numbers.
func ascending(flag, list string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(list, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || v <= 0 || len(out) > 0 && v <= out[len(out)-1] {
			return nil, fmt.Errorf("%s %q: want positive numbers in ascending order, comma-separated", flag, list)
		}
		out = append(out, v)
	}
	return out, nil
}

// usersFor is how many distinct users carry n sessions.
func (s *settings) usersFor(n int) int {
	if s.Users > 0 {
		return s.Users
	}
	return max(1, (n+s.SessionsPerUser-1)/s.SessionsPerUser)
}

// user names the i-th user (0-based).
func (s *settings) user(i int) string { return fmt.Sprintf("%s-%d", s.UserPrefix, i+1) }

// prompt is the n-th request's prompt.
func (s *settings) prompt(n int) string {
	if strings.Contains(s.Prompt, "%d") {
		return fmt.Sprintf(s.Prompt, n)
	}
	return s.Prompt
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return fmt.Sprint([]string(*l)) }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

// intList is a repeatable integer flag.
type intList []int

func (l *intList) String() string { return fmt.Sprint([]int(*l)) }
func (l *intList) Set(v string) error {
	n, err := strconv.Atoi(v)
	if err != nil {
		return err
	}
	*l = append(*l, n)
	return nil
}
