package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jetway-gateway/jetway/internal/auth"
	"github.com/jetway-gateway/jetway/internal/call"
	"github.com/jetway-gateway/jetway/internal/door"
	"github.com/jetway-gateway/jetway/internal/fleet"
	"github.com/jetway-gateway/jetway/internal/gateway"
	"github.com/jetway-gateway/jetway/internal/mockmodel"
	"github.com/jetway-gateway/jetway/internal/quota"
	"github.com/jetway-gateway/jetway/internal/router"
	"github.com/jetway-gateway/jetway/internal/selfdrain"
	"github.com/jetway-gateway/jetway/internal/session"
	"github.com/jetway-gateway/jetway/internal/stream"
	"github.com/jetway-gateway/jetway/internal/telemetry"
)

// settings are the server's environment-variable settings (docs/configuration.md).
// Each has a flag of the same name, lower-case without the JETWAY_ prefix.
type settings struct {
	Listen, AdminListen, ConfigPath, LogLevel, ServerID string
	ServeDemo                                           bool

	AuthIssuer, AuthJWKSURL string
	AuthLeeway              time.Duration
	AuthCacheEntries        int
	DevKeyFile              string
	DevAllowRemote          bool
	AllowedOrigins          string
	CognitoDomain           string
	CognitoClientID         string
	CognitoRedirectURI      string
	CognitoScopes           string

	Heartbeat             time.Duration
	MaxFrameBytes         int
	MaxAttachFrameBytes   int
	AttachBytesInFlight   int
	AttachBytesPerUser    int
	FrameReadTimeout      time.Duration
	SendQueueFrames       int
	SendQueueBytes        int
	WriteTimeout          time.Duration
	SocketSendBuffer      int
	MaxConnsPerUser       int
	MaxInflightPerSession int
	MaxRefusalsPerUser    int
	MaxInflightPerUser    int
	MaxInflightPerTenant  int
	MaxInflight           int
	ResumeWindow          time.Duration
	RetainedAnswerBytes   int
	HTTPReadTimeout       time.Duration
	HTTPIdleTimeout       time.Duration
	HTTPMaxHeaderBytes    int
	HTTPBodyBytesInFlight int
	HTTPRequestsPerUser   int
	RequestTimeout        time.Duration
	FirstTokenTimeout     time.Duration
	DrainTimeout          time.Duration
	HealthCheckInterval   time.Duration
	SelfDrainMisses       int
	HealthCheckUserAgent  string
	CheckpointInterval    time.Duration
	CheckpointChunks      int
	FleetHeartbeat        time.Duration
	FleetStaleAfter       time.Duration
	PollInterval          time.Duration

	Region               string
	MockBedrock          string // "", "true", "false"
	MockTTFT             time.Duration
	MockPerToken         time.Duration
	MockPerInputToken    time.Duration
	BedrockMaxAttempts   int
	BedrockCAFile        string
	Pprof                bool
	DynamoDBMaxAttempts  int
	QuotaTable           string
	QuotaLease           bool
	QuotaLeaseTTL        time.Duration
	QuotaLeaseAhead      time.Duration
	QuotaLeaseBlock      time.Duration
	QuotaLeaseFraction   float64
	QuotaLeaseMinReqs    int
	QuotaLeaseMaxItems   int
	RequestsTable        string
	CacheTable           string
	RecordFormat         string
	recordFormat         call.Format
	MembersTable         string
	BalanceInterval      time.Duration
	BalanceMargin        float64
	BalanceMovesPerSec   int
	CacheMaxBytes        int
	FirehoseStream       string
	UsageDir             string
	UsageSpoolDir        string
	UsageSpoolBytes      int
	UsageSpoolDrainRate  int
	EMF                  string
	bedrockEndpointIsSet bool
}

// devMode is true when no real issuer is configured.
func (s *settings) devMode() bool { return s.AuthIssuer == "" }

// useMockBedrock: explicit setting, else dev mode without a Bedrock endpoint.
func (s *settings) useMockBedrock() bool {
	switch s.MockBedrock {
	case "true", "1", "yes":
		return true
	case "false", "0", "no":
		return false
	}
	return s.devMode() && !s.bedrockEndpointIsSet
}

func defaultDevKeyFile(getenv func(string) string) string {
	dir := getenv("XDG_CACHE_HOME")
	if dir == "" {
		if home := getenv("HOME"); home != "" {
			dir = filepath.Join(home, ".cache")
		} else {
			dir = os.TempDir()
		}
	}
	return filepath.Join(dir, "jetway", "dev-signing-key.pem")
}

// parseSettings reads the environment, then flags (which win).
func parseSettings(name string, args []string, getenv func(string) string, out io.Writer) (*settings, error) {
	s := &settings{}
	fs, serveDemo, errs := s.flags(name, getenv)
	if err := parseFlags(fs, args, out); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	if len(*errs) > 0 {
		return nil, fmt.Errorf("settings: %s", strings.Join(*errs, "; "))
	}
	for _, l := range []struct{ key, addr string }{{"JETWAY_LISTEN", s.Listen}, {"JETWAY_ADMIN_LISTEN", s.AdminListen}} {
		if err := checkHostPort(l.addr); err != nil {
			return nil, fmt.Errorf("settings: %s (--%s) %q: not a host:port, such as 127.0.0.1:8080: %v", l.key, flagName(l.key), l.addr, err)
		}
	}
	s.bedrockEndpointIsSet = getenv("AWS_ENDPOINT_URL_BEDROCK_RUNTIME") != ""
	if *serveDemo == "" {
		s.ServeDemo = s.devMode()
	} else {
		b, err := strconv.ParseBool(*serveDemo)
		if err != nil {
			return nil, fmt.Errorf("settings: JETWAY_SERVE_DEMO=%q: want true or false", *serveDemo)
		}
		s.ServeDemo = b
	}
	format, err := call.ParseFormat(s.RecordFormat)
	if err != nil {
		return nil, fmt.Errorf("settings: JETWAY_RECORD_FORMAT (--%s): %w", flagName("JETWAY_RECORD_FORMAT"), err)
	}
	s.recordFormat = format
	if s.EMF != "off" && s.EMF != "stdout" {
		return nil, fmt.Errorf("settings: JETWAY_EMF=%q: want off or stdout", s.EMF)
	}
	if s.Region == "" {
		if s.devMode() {
			s.Region = "us-east-1"
		} else if s.Region = getenv("AWS_DEFAULT_REGION"); s.Region == "" {
			return nil, fmt.Errorf("settings: AWS_REGION is required outside dev mode")
		}
	}
	return s, nil
}

// checkHostPort checks a listen address before anything is judged by its
// host: a port (number or service name) after a host, which may be empty.
func checkHostPort(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	var bad *net.AddrError
	if errors.As(err, &bad) {
		return errors.New(bad.Err)
	} else if err != nil {
		return err
	}
	if _, err := strconv.ParseUint(port, 10, 16); err == nil {
		return nil
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return fmt.Errorf("port %q: want a number 0-65535", port)
	}
	return nil
}

// flags declares every setting as a flag whose default is the environment
// variable named in its usage, else the setting's default. It returns the
// raw JETWAY_SERVE_DEMO and the environment values that did not parse.
func (s *settings) flags(name string, getenv func(string) string) (*flag.FlagSet, *string, *[]string) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	var errs []string
	env := func(key, def string) string {
		if v := getenv(key); v != "" {
			return v
		}
		return def
	}
	str := func(p *string, key, def, usage string) {
		fs.StringVar(p, flagName(key), env(key, def), usage+" ("+key+")")
	}
	dur := func(p *time.Duration, key string, def time.Duration, usage string) {
		v := def
		if raw := getenv(key); raw != "" {
			d, err := time.ParseDuration(raw)
			if err != nil || d < 0 {
				errs = append(errs, fmt.Sprintf("%s=%q: want a duration such as 30s", key, raw))
			} else {
				v = d
			}
		}
		fs.DurationVar(p, flagName(key), v, usage+" ("+key+")")
	}
	num := func(p *int, key string, def int, usage string) {
		v := def
		if raw := getenv(key); raw != "" {
			n, err := strconv.Atoi(raw)
			if err != nil || n < 0 {
				errs = append(errs, fmt.Sprintf("%s=%q: want a whole number >= 0", key, raw))
			} else {
				v = n
			}
		}
		fs.IntVar(p, flagName(key), v, usage+" ("+key+")")
	}
	fraction := func(p *float64, key string, def float64, usage string) {
		v := def
		if raw := getenv(key); raw != "" {
			f, err := strconv.ParseFloat(raw, 64)
			if err != nil || !(f > 0 && f <= 1) {
				errs = append(errs, fmt.Sprintf("%s=%q: want a fraction in (0, 1]", key, raw))
			} else {
				v = f
			}
		}
		fs.Float64Var(p, flagName(key), v, usage+" ("+key+")")
	}
	boolean := func(p *bool, key string, def bool, usage string) {
		v := def
		if raw := getenv(key); raw != "" {
			b, err := strconv.ParseBool(raw)
			if err != nil {
				errs = append(errs, fmt.Sprintf("%s=%q: want true or false", key, raw))
			} else {
				v = b
			}
		}
		fs.BoolVar(p, flagName(key), v, usage+" ("+key+")")
	}
	host, _ := os.Hostname()
	str(&s.Listen, "JETWAY_LISTEN", "127.0.0.1:8080", "main listener: WebSocket /v1/ws and the demo page")
	str(&s.AdminListen, "JETWAY_ADMIN_LISTEN", "127.0.0.1:9090", "admin listener: /healthz /readyz /metrics")
	str(&s.ConfigPath, "JETWAY_CONFIG", "", "tenants/apps/models YAML file (default: built in)")
	str(&s.LogLevel, "JETWAY_LOG_LEVEL", "info", "log level: debug, info, warn, error")
	str(&s.ServerID, "JETWAY_SERVER_ID", host, "this task's id")
	str(&s.AuthIssuer, "JETWAY_AUTH_ISSUER", "", "Cognito issuer URL (unset: dev mode)")
	str(&s.AuthJWKSURL, "JETWAY_AUTH_JWKS_URL", "", "JWKS URL (default: issuer + /.well-known/jwks.json)")
	dur(&s.AuthLeeway, "JETWAY_AUTH_LEEWAY", auth.DefaultLeeway, "clock skew allowed on exp/nbf/iat")
	num(&s.AuthCacheEntries, "JETWAY_AUTH_CACHE_ENTRIES", auth.DefaultCacheEntries, "verified tokens remembered, by their SHA-256, never past exp or a JWKS reload (0: no cache)")
	str(&s.DevKeyFile, "JETWAY_DEV_KEY_FILE", defaultDevKeyFile(getenv), "dev mode: the dev issuer's key file")
	boolean(&s.DevAllowRemote, "JETWAY_DEV_ALLOW_REMOTE", false, "dev mode: allow a non-loopback listen address")
	str(&s.CognitoDomain, "JETWAY_COGNITO_DOMAIN", "", "demo page in production: the Cognito hosted UI base URL")
	str(&s.CognitoClientID, "JETWAY_COGNITO_CLIENT_ID", "", "demo page in production: the public app client id")
	str(&s.CognitoRedirectURI, "JETWAY_COGNITO_REDIRECT_URI", "", "demo page in production: the callback URL (default: the page's URL)")
	str(&s.CognitoScopes, "JETWAY_COGNITO_SCOPES", "", "demo page in production: space-separated scopes (default openid)")
	str(&s.AllowedOrigins, "JETWAY_ALLOWED_ORIGINS", "", "comma-separated allowed browser origins")
	dur(&s.Heartbeat, "JETWAY_HEARTBEAT", session.DefaultHeartbeat, "WebSocket ping interval")
	num(&s.MaxFrameBytes, "JETWAY_MAX_FRAME_BYTES", session.DefaultMaxFrameBytes, "largest inbound frame in bytes")
	num(&s.MaxAttachFrameBytes, "JETWAY_MAX_ATTACHMENT_FRAME_BYTES", session.DefaultMaxAttachmentFrameBytes, "largest inbound frame with an image or document, bytes (0: the plain frame bound)")
	num(&s.AttachBytesInFlight, "JETWAY_ATTACHMENT_BYTES_IN_FLIGHT", session.DefaultAttachmentBytesInFlight, "server-wide bytes of frames past the plain bound being read or admitted; past it: busy")
	num(&s.AttachBytesPerUser, "JETWAY_ATTACHMENT_BYTES_PER_USER", 0, "one user's share of that budget over all its sessions, bytes (0: a quarter of it); past it: rate_limited")
	dur(&s.FrameReadTimeout, "JETWAY_FRAME_READ_TIMEOUT", session.DefaultFrameReadTimeout, "longest time from an inbound frame's first byte to its last (pings do not extend it); past it: close 1008")
	num(&s.SendQueueFrames, "JETWAY_SEND_QUEUE_FRAMES", session.DefaultSendQueueFrames, "per-connection send queue bound, frames")
	num(&s.SendQueueBytes, "JETWAY_SEND_QUEUE_BYTES", session.DefaultSendQueueBytes, "per-connection send queue bound, bytes")
	dur(&s.WriteTimeout, "JETWAY_WRITE_TIMEOUT", session.DefaultWriteTimeout, "longest time one socket write may take")
	num(&s.SocketSendBuffer, "JETWAY_SOCKET_SEND_BUFFER", 0, "SO_SNDBUF per connection in bytes (0: OS autotuning)")
	num(&s.MaxConnsPerUser, "JETWAY_MAX_CONNS_PER_USER", session.DefaultMaxConnsPerUser, "open WebSockets per user")
	num(&s.MaxInflightPerSession, "JETWAY_MAX_INFLIGHT_PER_SESSION", gateway.DefaultMaxInflightPerSession, "requests in flight per session")
	num(&s.MaxInflightPerUser, "JETWAY_MAX_INFLIGHT_PER_USER", gateway.DefaultMaxInflightPerUser, "requests in flight per user")
	num(&s.MaxRefusalsPerUser, "JETWAY_MAX_REFUSALS_PER_USER", gateway.DefaultMaxRefusalsPerUser, "refused requests a second per user (and the burst); past it: rate_limited at once, with no usage record")
	num(&s.MaxInflightPerTenant, "JETWAY_MAX_INFLIGHT_PER_TENANT", gateway.DefaultMaxInflightPerTenant, "model calls in flight per tenant (0: no cap)")
	num(&s.MaxInflight, "JETWAY_MAX_INFLIGHT", gateway.DefaultMaxInflight, "model calls in flight on this server")
	dur(&s.ResumeWindow, "JETWAY_RESUME_WINDOW", gateway.DefaultResumeWindow, "how long finished answers stay resumable")
	num(&s.RetainedAnswerBytes, "JETWAY_RETAINED_ANSWER_BYTES", stream.DefaultRetainedBytes, "memory budget of finished answers kept for resume, bytes (oldest evicted first)")
	dur(&s.HTTPReadTimeout, "JETWAY_HTTP_READ_TIMEOUT", 30*time.Second, "both listeners: longest time to read one HTTP request, body included")
	dur(&s.HTTPIdleTimeout, "JETWAY_HTTP_IDLE_TIMEOUT", 130*time.Second, "both listeners: how long an idle keep-alive connection stays open (keep above the ALB idle timeout, 120 s)")
	num(&s.HTTPMaxHeaderBytes, "JETWAY_HTTP_MAX_HEADER_BYTES", door.DefaultMaxHeaderBytes, "both listeners: largest request line and headers of one HTTP request, bytes; past it: 431")
	num(&s.HTTPBodyBytesInFlight, "JETWAY_HTTP_BODY_BYTES_IN_FLIGHT", door.DefaultBodyBytesInFlight, "server-wide bytes of HTTP request bodies being read or checked (OpenAI and Anthropic doors); past it: busy")
	num(&s.HTTPRequestsPerUser, "JETWAY_HTTP_REQUESTS_PER_USER", door.DefaultRequestsPerUser, "one user's HTTP requests whose bodies are arriving or being checked at once; past it: rate_limited")
	dur(&s.RequestTimeout, "JETWAY_REQUEST_TIMEOUT", gateway.DefaultRequestTimeout, "longest a request may run")
	dur(&s.FirstTokenTimeout, "JETWAY_FIRST_TOKEN_TIMEOUT", gateway.DefaultFirstTokenTimeout, "longest wait for a model's first token")
	dur(&s.CheckpointInterval, "JETWAY_CHECKPOINT_INTERVAL", gateway.DefaultCheckpointInterval, "how often a running request's record is checkpointed")
	num(&s.CheckpointChunks, "JETWAY_CHECKPOINT_CHUNKS", gateway.DefaultCheckpointChunks, "checkpoint early after this many chunks")
	dur(&s.FleetHeartbeat, "JETWAY_FLEET_HEARTBEAT", fleet.DefaultHeartbeat, "how often a server renews its fleet membership item and reads the others'")
	dur(&s.FleetStaleAfter, "JETWAY_FLEET_STALE_AFTER", fleet.DefaultStaleAfter, "a member whose heartbeat stays unchanged this long (while the table answers) is gone: its requests are ended as interrupted and its quota given back")
	dur(&s.PollInterval, "JETWAY_RESUME_POLL_INTERVAL", gateway.DefaultPollInterval, "how often a resumed request owned by another server is polled")
	dur(&s.DrainTimeout, "JETWAY_DRAIN_TIMEOUT", 110*time.Second, "on SIGTERM, how long requests may take to finish")
	dur(&s.HealthCheckInterval, "JETWAY_HEALTH_CHECK_INTERVAL", selfdrain.DefaultInterval, "the load balancer's health check interval (/readyz)")
	num(&s.SelfDrainMisses, "JETWAY_SELF_DRAIN_MISSES", selfdrain.DefaultMisses, "drain when this many health check intervals pass without one (0: never)")
	str(&s.HealthCheckUserAgent, "JETWAY_HEALTH_CHECK_USER_AGENT", selfdrain.DefaultUserAgent, "User-Agent prefix of the load balancer's health checks; only these arm self-drain")
	str(&s.Region, "AWS_REGION", "", "AWS region")
	str(&s.MockBedrock, "JETWAY_MOCK_BEDROCK", "", "run the mock Bedrock endpoint in-process (default: in dev mode without AWS_ENDPOINT_URL_BEDROCK_RUNTIME)")
	dur(&s.MockTTFT, "JETWAY_MOCK_TTFT", mockmodel.DefaultTTFT, "in-process mock: time to first token")
	dur(&s.MockPerToken, "JETWAY_MOCK_PER_TOKEN", mockmodel.DefaultPerToken, "in-process mock: time per token")
	dur(&s.MockPerInputToken, "JETWAY_MOCK_PER_INPUT_TOKEN", mockmodel.RealisticPerInputToken, "in-process mock: time to first token added per input token not read from the prompt cache")
	num(&s.BedrockMaxAttempts, "JETWAY_BEDROCK_MAX_ATTEMPTS", 1, "SDK attempts per Bedrock call")
	str(&s.BedrockCAFile, "JETWAY_BEDROCK_CA_FILE", "", "test only: PEM file of the CA the Bedrock endpoint's certificate is signed with (mockbedrock --tls), instead of the system roots")
	boolean(&s.Pprof, "JETWAY_PPROF", false, "serve Go profiles at /debug/pprof/ on the admin listener")
	num(&s.DynamoDBMaxAttempts, "JETWAY_DYNAMODB_MAX_ATTEMPTS", 3, "SDK attempts per DynamoDB call")
	str(&s.QuotaTable, "JETWAY_QUOTA_TABLE", "", "DynamoDB quota table (unset: in memory)")
	boolean(&s.QuotaLease, "JETWAY_QUOTA_LEASE", true, "with a quota table: admit from leased blocks of each limit, no DynamoDB call per request")
	dur(&s.QuotaLeaseTTL, "JETWAY_QUOTA_LEASE_TTL", quota.DefaultLeaseTTL, "a quota lease's life after its last write (a killed server's tokens come back after it)")
	dur(&s.QuotaLeaseAhead, "JETWAY_QUOTA_LEASE_AHEAD", quota.DefaultLeaseAhead, "what a quota lease write commits ahead, in time at the recent rate")
	dur(&s.QuotaLeaseBlock, "JETWAY_QUOTA_LEASE_BLOCK", quota.DefaultLeaseBlock, "what a quota lease write takes from the limit ahead, in time at the recent rate")
	fraction(&s.QuotaLeaseFraction, "JETWAY_QUOTA_LEASE_FRACTION", quota.DefaultLeaseFraction, "the largest share of a limit's headroom one quota lease write takes")
	num(&s.QuotaLeaseMinReqs, "JETWAY_QUOTA_LEASE_MIN_REQUESTS", quota.DefaultLeaseMinRequests, "the smallest quota lease commitment, in requests")
	num(&s.QuotaLeaseMaxItems, "JETWAY_QUOTA_LEASE_MAX_ITEMS", quota.DefaultLeaseMaxItems, "quota items one server holds leases on")
	str(&s.RequestsTable, "JETWAY_REQUESTS_TABLE", "", "DynamoDB requests table (unset: in memory)")
	str(&s.CacheTable, "JETWAY_CACHE_TABLE", "", "DynamoDB cache table (unset: in memory)")
	str(&s.RecordFormat, "JETWAY_RECORD_FORMAT", "v1", "stored form of the request records and cache entries this server writes: v1 (read by the previous release) or v2 (compact; every server of the fleet must read it first); both are read")
	str(&s.MembersTable, "JETWAY_MEMBERS_TABLE", "", "DynamoDB fleet members table (unset: a fleet of one); required with a requests table")
	dur(&s.BalanceInterval, "JETWAY_BALANCE_INTERVAL", fleet.DefaultBalanceInterval, "with a members table: how often this server compares its sessions with the fleet's mean")
	fraction(&s.BalanceMargin, "JETWAY_BALANCE_MARGIN", fleet.DefaultBalanceMargin, "with a members table: move idle sessions only while above the fleet's mean by this fraction")
	num(&s.BalanceMovesPerSec, "JETWAY_BALANCE_MOVES_PER_SECOND", fleet.DefaultMovesPerSecond, "with a members table: sessions asked to move per second, at most (balance and busy moves together)")
	num(&s.CacheMaxBytes, "JETWAY_CACHE_MAX_BYTES", router.DefaultCacheMaxBytes, "in-memory response cache bound in bytes")
	str(&s.FirehoseStream, "JETWAY_FIREHOSE_STREAM", "", "Firehose stream for usage records (unset: local files)")
	str(&s.UsageDir, "JETWAY_USAGE_DIR", "usage", "local usage records directory")
	str(&s.UsageSpoolDir, "JETWAY_USAGE_SPOOL_DIR", "", "with a Firehose stream: directory of the local spool that keeps usage records through a Firehose outage (unset: no spool)")
	num(&s.UsageSpoolBytes, "JETWAY_USAGE_SPOOL_BYTES", telemetry.DefaultSpoolBytes, "usage spool bound in bytes; when full its oldest records are dropped")
	num(&s.UsageSpoolDrainRate, "JETWAY_USAGE_SPOOL_DRAIN_RATE", telemetry.DefaultSpoolDrainRate, "spooled usage records sent back to Firehose per second, at most")
	str(&s.EMF, "JETWAY_EMF", "off", "CloudWatch EMF output: off or stdout")
	serveDemo := env("JETWAY_SERVE_DEMO", "")
	fs.StringVar(&serveDemo, "serve-demo", serveDemo, "serve the demo page at / (default: in dev mode) (JETWAY_SERVE_DEMO)")
	return fs, &serveDemo, &errs
}

// flagName turns JETWAY_MAX_INFLIGHT into max-inflight and AWS_REGION into aws-region.
func flagName(key string) string {
	return strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(key, "JETWAY_")), "_", "-")
}

// instanceID is this process's id in the fleet: the server id plus a
// random suffix, so a restarted task is a new member that never takes over
// the records or quota leases of its killed predecessor (which the fleet
// ends and settles).
func (s *settings) instanceID() (string, error) {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("instance id: %w", err)
	}
	return s.ServerID + "-" + hex.EncodeToString(b[:]), nil
}

// checkFleet refuses tables that only a fleet can use safely without the
// members table that tells a dead server from a slow one.
func (s *settings) checkFleet() error {
	if s.MembersTable == "" && s.RequestsTable != "" {
		return fmt.Errorf("JETWAY_REQUESTS_TABLE is set without JETWAY_MEMBERS_TABLE: servers sharing " +
			"request records must know which of them are alive (see docs/operations.md, \"The fleet\"); create it with `gateway tables create`")
	}
	return nil
}

// quotaLease returns the quota lease options: off without a quota table
// (the in-memory store is this process's alone) or with JETWAY_QUOTA_LEASE
// false. The owner is the instance id.
func (s *settings) quotaLease(owner string) quota.LeaseOptions {
	if s.QuotaTable == "" || !s.QuotaLease {
		return quota.LeaseOptions{}
	}
	return quota.LeaseOptions{Owner: owner, TTL: s.QuotaLeaseTTL,
		Ahead: s.QuotaLeaseAhead, Block: s.QuotaLeaseBlock, Fraction: s.QuotaLeaseFraction,
		MinRequests: s.QuotaLeaseMinReqs, MaxItems: s.QuotaLeaseMaxItems}
}

// attachmentFrameBytes is the session's MaxAttachmentFrameBytes: 0 means
// no larger bound for attachments (the plain frame bound).
func (s *settings) attachmentFrameBytes() int64 {
	if s.MaxAttachFrameBytes == 0 {
		return int64(s.MaxFrameBytes)
	}
	return int64(s.MaxAttachFrameBytes)
}

// selfDrainMisses is the watcher's Misses: 0 turns self-drain off.
func (s *settings) selfDrainMisses() int {
	if s.SelfDrainMisses == 0 {
		return -1
	}
	return s.SelfDrainMisses
}

// origins splits the allowed-origins setting.
func (s *settings) origins() []string {
	var out []string
	for _, o := range strings.Split(s.AllowedOrigins, ",") {
		if o = strings.TrimSpace(o); o != "" {
			out = append(out, o)
		}
	}
	return out
}
