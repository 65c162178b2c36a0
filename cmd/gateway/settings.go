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

	"github.com/jetway-gateway/jetway/internal/aisdk"
	"github.com/jetway-gateway/jetway/internal/auth"
	"github.com/jetway-gateway/jetway/internal/call"
	"github.com/jetway-gateway/jetway/internal/configstore"
	"github.com/jetway-gateway/jetway/internal/door"
	"github.com/jetway-gateway/jetway/internal/fleet"
	"github.com/jetway-gateway/jetway/internal/gateway"
	"github.com/jetway-gateway/jetway/internal/mockmodel"
	"github.com/jetway-gateway/jetway/internal/quota"
	"github.com/jetway-gateway/jetway/internal/responses"
	"github.com/jetway-gateway/jetway/internal/router"
	"github.com/jetway-gateway/jetway/internal/selfdrain"
	"github.com/jetway-gateway/jetway/internal/socket"
	"github.com/jetway-gateway/jetway/internal/stream"
	"github.com/jetway-gateway/jetway/internal/telemetry"
	"github.com/jetway-gateway/jetway/web"
)

// settings are the server's settings (docs/configuration.md), set by the
// rows of settingsTable. A setting that bounds a package is that
// package's own Options field; the rest are the wiring's.
type settings struct {
	// A setting's 0 sometimes means what the package's zero does not:
	// sessionOptions, selfDrainOptions and buildVerifier translate those.
	Auth      auth.Config               // Issuer, JWKSURL, Leeway, CacheEntries
	Session   socket.Options            // the WebSocket doors' bounds
	AISDK     aisdk.Options             // MaxStreams (its Retain is the request timeout plus the resume window)
	Responses responses.Options         // MaxConnectionAge (its ResumeWindow is the request timeout plus the resume window)
	Gateway   gateway.Options           // the pipeline's bounds, and ServerID
	Retained  stream.RegistryOptions    // RetainedBytes (its Retention is Gateway.ResumeWindow)
	Fleet     fleet.Options             // Heartbeat, StaleAfter
	Balance   fleet.BalanceOptions      // Interval, Margin
	SelfDrain selfdrain.Options         // Interval, Misses, UserAgent
	Lease     quota.LeaseOptions        // all but Owner
	Mock      mockmodel.Options         // TTFT, PerToken, PerInputToken
	Cache     router.CacheOptions       // MaxBytes
	Spool     telemetry.SpoolOptions    // MaxBytes
	Firehose  telemetry.FirehoseOptions // SpoolDrainRate
	Cognito   web.Cognito               // the demo page's sign-in in production
	HTTP      httpOptions               // both listeners'
	Intake    intakeOptions             // the HTTP doors' shared intake

	Listen, AdminListen, ConfigPath, LogLevel string
	DevKeyFile                                string
	ReasoningKey                              string // JETWAY_RESPONSES_REASONING_KEY: responses.ParseKey
	DevAllowRemote                            bool
	AllowedOrigins                            string // comma-separated: Session.AllowedOrigins
	BalanceMovesPerSec                        int    // a whole number (Balance.MovesPerSecond)
	DrainTimeout                              time.Duration
	Region                                    string
	MockBedrock                               string // "", "true", "false" (raw: see useMockBedrock)
	BedrockMaxAttempts, DynamoDBMaxAttempts   int
	BedrockCAFile                             string
	Breaker                                   router.Options // FailureThreshold, OpenTimeout, AffinityTTL
	Pprof                                     bool
	QuotaTable, RequestsTable                 string
	CacheTable, MembersTable                  string
	ConfigTable                               string
	ConfigPoll                                time.Duration
	AlertWebhookURL, AlertWebhookSecret       string
	AlertSNSTopic                             string
	RecordFormat                              string      // "v1" or "v2": parsed into recordFormat
	recordFormat                              call.Format // what records and cache entries are written in
	QuotaLease                                bool
	FirehoseStream, UsageDir, UsageSpoolDir   string
	EMF                                       string
	ServeDemo                                 bool
	ServeAdmin                                bool

	serveDemo            string                  // JETWAY_SERVE_DEMO as given: "" means by mode
	serveAdmin           string                  // JETWAY_SERVE_ADMIN as given: "" means by mode
	bedrockEndpointIsSet bool                    // AWS_ENDPOINT_URL_BEDROCK_RUNTIME is set
	getenv               func(key string) string // the environment, for the OTEL_* variables tracing reads
}

// httpOptions bound both listeners' HTTP servers.
type httpOptions struct {
	ReadTimeout, IdleTimeout time.Duration
	MaxHeaderBytes           int
}

// intakeOptions are door.NewIntake's bounds.
type intakeOptions struct {
	BodyBytesInFlight int64
	RequestsPerUser   int
}

// setting is one row of the table: the environment variable, the field it
// sets (its flag is flagName(key)), its default and its -h line.
type setting struct {
	key   string
	field any // *string, *bool, *int, *int64, *float64 (a fraction in (0, 1]) or *time.Duration
	def   any // of the field's type
	doc   string
}

// settingValue is what a setting's field may be.
type settingValue interface {
	string | bool | int | int64 | float64 | time.Duration
}

// row is a setting whose default has its field's type.
func row[T settingValue](field *T, key string, def T, doc string) setting {
	return setting{key: key, field: field, def: def, doc: doc}
}

// settingsTable is every setting, bound to s's fields. A package's bound
// takes the package's own default; getenv and the host name give the
// defaults that depend on the machine.
func (s *settings) settingsTable(getenv func(string) string) []setting {
	host, _ := os.Hostname()
	return []setting{
		row(&s.Listen, "JETWAY_LISTEN", "127.0.0.1:8080", "main listener: WebSocket /v1/ws and the demo page"),
		row(&s.AdminListen, "JETWAY_ADMIN_LISTEN", "127.0.0.1:9090", "admin listener: /healthz /readyz /metrics"),
		row(&s.ConfigPath, "JETWAY_CONFIG", "", "tenants/apps/models YAML file (default: built in)"),
		row(&s.LogLevel, "JETWAY_LOG_LEVEL", "info", "log level: debug, info, warn, error"),
		row(&s.Gateway.ServerID, "JETWAY_SERVER_ID", host, "this task's id"),
		row(&s.serveDemo, "JETWAY_SERVE_DEMO", "", "serve the demo page at / (default: in dev mode)"),
		row(&s.serveAdmin, "JETWAY_SERVE_ADMIN", "", "serve the admin console at /admin (default: in dev mode)"),
		row(&s.Auth.Issuer, "JETWAY_AUTH_ISSUER", "", "Cognito issuer URL (unset: dev mode)"),
		row(&s.Auth.JWKSURL, "JETWAY_AUTH_JWKS_URL", "", "JWKS URL (default: issuer + /.well-known/jwks.json)"),
		row(&s.Auth.Leeway, "JETWAY_AUTH_LEEWAY", auth.DefaultLeeway, "clock skew allowed on exp/nbf/iat"),
		row(&s.Auth.CacheEntries, "JETWAY_AUTH_CACHE_ENTRIES", auth.DefaultCacheEntries, "verified tokens remembered, by their SHA-256, never past exp or a JWKS reload (0: no cache)"),
		row(&s.DevKeyFile, "JETWAY_DEV_KEY_FILE", defaultDevKeyFile(getenv), "dev mode: the dev issuer's key file"),
		row(&s.DevAllowRemote, "JETWAY_DEV_ALLOW_REMOTE", false, "dev mode: allow a non-loopback listen address"),
		row(&s.Cognito.Domain, "JETWAY_COGNITO_DOMAIN", "", "demo page in production: the Cognito hosted UI base URL"),
		row(&s.Cognito.ClientID, "JETWAY_COGNITO_CLIENT_ID", "", "demo page in production: the public app client id"),
		row(&s.Cognito.RedirectURI, "JETWAY_COGNITO_REDIRECT_URI", "", "demo page in production: the callback URL (default: the page's URL)"),
		row(&s.Cognito.Scopes, "JETWAY_COGNITO_SCOPES", "", "demo page in production: space-separated scopes (default openid)"),
		row(&s.AllowedOrigins, "JETWAY_ALLOWED_ORIGINS", "", "comma-separated allowed browser origins"),

		row(&s.Session.Heartbeat, "JETWAY_HEARTBEAT", socket.DefaultHeartbeat, "WebSocket ping interval"),
		row(&s.Session.MaxFrameBytes, "JETWAY_MAX_FRAME_BYTES", socket.DefaultMaxFrameBytes, "largest inbound frame in bytes"),
		row(&s.Session.MaxAttachmentFrameBytes, "JETWAY_MAX_ATTACHMENT_FRAME_BYTES", socket.DefaultMaxAttachmentFrameBytes, "largest inbound frame with an image or document, bytes (0: the plain frame bound)"),
		row(&s.Session.AttachmentBytesInFlight, "JETWAY_ATTACHMENT_BYTES_IN_FLIGHT", socket.DefaultAttachmentBytesInFlight, "server-wide bytes of frames past the plain bound being read or admitted; past it: busy"),
		row(&s.Session.AttachmentBytesPerUser, "JETWAY_ATTACHMENT_BYTES_PER_USER", 0, "one user's share of that budget over all its sessions, bytes (0: a quarter of it); past it: rate_limited"),
		row(&s.Session.FrameReadTimeout, "JETWAY_FRAME_READ_TIMEOUT", socket.DefaultFrameReadTimeout, "longest time from an inbound frame's first byte to its last (pings do not extend it); past it: close 1008"),
		row(&s.Session.SendQueueFrames, "JETWAY_SEND_QUEUE_FRAMES", socket.DefaultSendQueueFrames, "per-connection send queue bound, frames"),
		row(&s.Session.SendQueueBytes, "JETWAY_SEND_QUEUE_BYTES", socket.DefaultSendQueueBytes, "per-connection send queue bound, bytes"),
		row(&s.Session.WriteTimeout, "JETWAY_WRITE_TIMEOUT", socket.DefaultWriteTimeout, "longest time one socket write may take"),
		row(&s.Session.SocketSendBuffer, "JETWAY_SOCKET_SEND_BUFFER", 0, "SO_SNDBUF per connection in bytes (0: OS autotuning)"),
		row(&s.Session.MaxConnsPerUser, "JETWAY_MAX_CONNS_PER_USER", socket.DefaultMaxConnsPerUser, "open WebSockets per user"),
		row(&s.Responses.MaxConnectionAge, "JETWAY_RESPONSES_MAX_CONNECTION_AGE", responses.DefaultMaxConnectionAge, "longest a Responses WebSocket mode connection stays open; then websocket_connection_limit_reached"),
		row(&s.ReasoningKey, "JETWAY_RESPONSES_REASONING_KEY", "", "32 bytes in base64 that seal the Responses door's reasoning (encrypted_content), the same on every server (unset: a key of this process)"),
		row(&s.AISDK.MaxStreams, "JETWAY_AISDK_MAX_STREAMS", aisdk.DefaultMaxStreams, "responses one AI SDK socket delivers at once (sends and resumes); past it: rate_limited"),

		row(&s.Gateway.MaxInflightPerSession, "JETWAY_MAX_INFLIGHT_PER_SESSION", gateway.DefaultMaxInflightPerSession, "requests in flight per session"),
		row(&s.Gateway.MaxInflightPerUser, "JETWAY_MAX_INFLIGHT_PER_USER", gateway.DefaultMaxInflightPerUser, "requests in flight per user"),
		row(&s.Gateway.MaxRefusalsPerUser, "JETWAY_MAX_REFUSALS_PER_USER", gateway.DefaultMaxRefusalsPerUser, "refused requests a second per user (and the burst); past it: rate_limited at once, with no usage record"),
		row(&s.Gateway.MaxInflightPerTenant, "JETWAY_MAX_INFLIGHT_PER_TENANT", gateway.DefaultMaxInflightPerTenant, "model calls in flight per tenant (0: no cap)"),
		row(&s.Gateway.MaxInflight, "JETWAY_MAX_INFLIGHT", gateway.DefaultMaxInflight, "model calls in flight on this server"),
		row(&s.Gateway.ResumeWindow, "JETWAY_RESUME_WINDOW", gateway.DefaultResumeWindow, "how long finished answers stay resumable"),
		row(&s.Retained.RetainedBytes, "JETWAY_RETAINED_ANSWER_BYTES", stream.DefaultRetainedBytes, "memory budget of finished answers kept for resume, bytes (oldest evicted first)"),
		row(&s.HTTP.ReadTimeout, "JETWAY_HTTP_READ_TIMEOUT", 30*time.Second, "both listeners: longest time to read one HTTP request, body included"),
		row(&s.HTTP.IdleTimeout, "JETWAY_HTTP_IDLE_TIMEOUT", 130*time.Second, "both listeners: how long an idle keep-alive connection stays open (keep above the ALB idle timeout, 120 s)"),
		row(&s.HTTP.MaxHeaderBytes, "JETWAY_HTTP_MAX_HEADER_BYTES", door.DefaultMaxHeaderBytes, "both listeners: largest request line and headers of one HTTP request, bytes; past it: 431"),
		row(&s.Intake.BodyBytesInFlight, "JETWAY_HTTP_BODY_BYTES_IN_FLIGHT", door.DefaultBodyBytesInFlight, "server-wide bytes of HTTP request bodies being read or checked (OpenAI and Anthropic doors); past it: busy"),
		row(&s.Intake.RequestsPerUser, "JETWAY_HTTP_REQUESTS_PER_USER", door.DefaultRequestsPerUser, "one user's HTTP requests whose bodies are arriving or being checked at once; past it: rate_limited"),
		row(&s.Gateway.RequestTimeout, "JETWAY_REQUEST_TIMEOUT", gateway.DefaultRequestTimeout, "longest a request may run"),
		row(&s.Gateway.FirstTokenTimeout, "JETWAY_FIRST_TOKEN_TIMEOUT", gateway.DefaultFirstTokenTimeout, "longest wait for a model's first token"),
		row(&s.Gateway.CheckpointInterval, "JETWAY_CHECKPOINT_INTERVAL", gateway.DefaultCheckpointInterval, "how often a running request's record is checkpointed"),
		row(&s.Gateway.CheckpointChunks, "JETWAY_CHECKPOINT_CHUNKS", gateway.DefaultCheckpointChunks, "checkpoint early after this many chunks"),
		row(&s.Fleet.Heartbeat, "JETWAY_FLEET_HEARTBEAT", fleet.DefaultHeartbeat, "how often a server renews its fleet membership item and reads the others'"),
		row(&s.Fleet.StaleAfter, "JETWAY_FLEET_STALE_AFTER", fleet.DefaultStaleAfter, "a member whose heartbeat stays unchanged this long (while the table answers) is gone: its requests are ended as interrupted and its quota given back"),
		row(&s.Gateway.PollInterval, "JETWAY_RESUME_POLL_INTERVAL", gateway.DefaultPollInterval, "how often a resumed request owned by another server is polled"),
		row(&s.DrainTimeout, "JETWAY_DRAIN_TIMEOUT", 110*time.Second, "on SIGTERM, how long requests may take to finish"),
		row(&s.SelfDrain.Interval, "JETWAY_HEALTH_CHECK_INTERVAL", selfdrain.DefaultInterval, "the load balancer's health check interval (/readyz)"),
		row(&s.SelfDrain.Misses, "JETWAY_SELF_DRAIN_MISSES", selfdrain.DefaultMisses, "drain when this many health check intervals pass without one (0: never)"),
		row(&s.SelfDrain.UserAgent, "JETWAY_HEALTH_CHECK_USER_AGENT", selfdrain.DefaultUserAgent, "User-Agent prefix of the load balancer's health checks; only these arm self-drain"),

		row(&s.Region, "AWS_REGION", "", "AWS region"),
		row(&s.MockBedrock, "JETWAY_MOCK_BEDROCK", "", "run the mock Bedrock endpoint in-process (default: in dev mode without AWS_ENDPOINT_URL_BEDROCK_RUNTIME)"),
		row(&s.Mock.TTFT, "JETWAY_MOCK_TTFT", mockmodel.DefaultTTFT, "in-process mock: time to first token"),
		row(&s.Mock.PerToken, "JETWAY_MOCK_PER_TOKEN", mockmodel.DefaultPerToken, "in-process mock: time per token"),
		row(&s.Mock.PerInputToken, "JETWAY_MOCK_PER_INPUT_TOKEN", mockmodel.RealisticPerInputToken, "in-process mock: time to first token added per input token not read from the prompt cache"),
		row(&s.BedrockMaxAttempts, "JETWAY_BEDROCK_MAX_ATTEMPTS", 1, "SDK attempts per Bedrock call"),
		row(&s.Breaker.FailureThreshold, "JETWAY_BREAKER_THRESHOLD", router.DefaultFailureThreshold, "consecutive failures before the first token (throttled, unavailable, first-token timeout) that open the circuit breaker of a model's placement"),
		row(&s.Breaker.OpenTimeout, "JETWAY_BREAKER_OPEN_TIMEOUT", router.DefaultOpenTimeout, "how long an open breaker skips its placement before a probe is let through"),
		row(&s.Breaker.AffinityTTL, "JETWAY_PLACEMENT_AFFINITY_TTL", router.DefaultAffinityTTL, "how long a server remembers the placement a conversation moved to after its last answer there"),
		row(&s.BedrockCAFile, "JETWAY_BEDROCK_CA_FILE", "", "test only: PEM file of the CA the Bedrock endpoint's certificate is signed with (mockbedrock --tls), instead of the system roots"),
		row(&s.Pprof, "JETWAY_PPROF", false, "serve Go profiles at /debug/pprof/ on the admin listener"),
		row(&s.DynamoDBMaxAttempts, "JETWAY_DYNAMODB_MAX_ATTEMPTS", 3, "SDK attempts per DynamoDB call"),
		row(&s.QuotaTable, "JETWAY_QUOTA_TABLE", "", "DynamoDB quota table (unset: in memory)"),
		row(&s.ConfigTable, "JETWAY_CONFIG_TABLE", "", "DynamoDB config table: tenants, apps, user overrides and models changed at runtime through the admin API (unset: the tenants file, read-only)"),
		row(&s.AlertWebhookURL, "JETWAY_ALERT_WEBHOOK_URL", "", "quota alerts: a webhook POSTed each threshold event (https, or http on loopback)"),
		row(&s.AlertWebhookSecret, "JETWAY_ALERT_WEBHOOK_SECRET", "", "the key of the webhook's X-Jetway-Signature (HMAC-SHA256); required with the webhook"),
		row(&s.AlertSNSTopic, "JETWAY_ALERT_SNS_TOPIC_ARN", "", "quota alerts: an SNS topic published each threshold event"),
		row(&s.ConfigPoll, "JETWAY_CONFIG_POLL_INTERVAL", configstore.DefaultPollInterval, "how often a server looks for configuration changes in the config table (one GetItem)"),
		row(&s.QuotaLease, "JETWAY_QUOTA_LEASE", true, "with a quota table: admit from leased blocks of each limit, no DynamoDB call per request"),
		row(&s.Lease.TTL, "JETWAY_QUOTA_LEASE_TTL", quota.DefaultLeaseTTL, "a quota lease's life after its last write (a killed server's tokens come back after it)"),
		row(&s.Lease.Ahead, "JETWAY_QUOTA_LEASE_AHEAD", quota.DefaultLeaseAhead, "what a quota lease write commits ahead, in time at the recent rate"),
		row(&s.Lease.Block, "JETWAY_QUOTA_LEASE_BLOCK", quota.DefaultLeaseBlock, "what a quota lease write takes from the limit ahead, in time at the recent rate"),
		row(&s.Lease.Fraction, "JETWAY_QUOTA_LEASE_FRACTION", quota.DefaultLeaseFraction, "the largest share of a limit's headroom one quota lease write takes"),
		row(&s.Lease.MinRequests, "JETWAY_QUOTA_LEASE_MIN_REQUESTS", quota.DefaultLeaseMinRequests, "the smallest quota lease commitment, in requests"),
		row(&s.Lease.MaxItems, "JETWAY_QUOTA_LEASE_MAX_ITEMS", quota.DefaultLeaseMaxItems, "quota items one server holds leases on"),
		row(&s.RequestsTable, "JETWAY_REQUESTS_TABLE", "", "DynamoDB requests table (unset: in memory)"),
		row(&s.CacheTable, "JETWAY_CACHE_TABLE", "", "DynamoDB cache table (unset: in memory)"),
		row(&s.RecordFormat, "JETWAY_RECORD_FORMAT", "v1", "stored form of the request records and cache entries this server writes: v1 (read by the previous release) or v2 (compact; every server of the fleet must read it first); both are read"),
		row(&s.MembersTable, "JETWAY_MEMBERS_TABLE", "", "DynamoDB fleet members table (unset: a fleet of one); required with a requests table"),
		row(&s.Balance.Interval, "JETWAY_BALANCE_INTERVAL", fleet.DefaultBalanceInterval, "with a members table: how often this server compares its sessions with the fleet's mean"),
		row(&s.Balance.Margin, "JETWAY_BALANCE_MARGIN", fleet.DefaultBalanceMargin, "with a members table: move idle sessions only while above the fleet's mean by this fraction"),
		row(&s.BalanceMovesPerSec, "JETWAY_BALANCE_MOVES_PER_SECOND", fleet.DefaultMovesPerSecond, "with a members table: sessions asked to move per second, at most (balance and busy moves together)"),
		row(&s.Cache.MaxBytes, "JETWAY_CACHE_MAX_BYTES", router.DefaultCacheMaxBytes, "in-memory response cache bound in bytes"),
		row(&s.FirehoseStream, "JETWAY_FIREHOSE_STREAM", "", "Firehose stream for usage records (unset: local files)"),
		row(&s.UsageDir, "JETWAY_USAGE_DIR", "usage", "local usage records directory"),
		row(&s.UsageSpoolDir, "JETWAY_USAGE_SPOOL_DIR", "", "with a Firehose stream: directory of the local spool that keeps usage records through a Firehose outage (unset: no spool)"),
		row(&s.Spool.MaxBytes, "JETWAY_USAGE_SPOOL_BYTES", telemetry.DefaultSpoolBytes, "usage spool bound in bytes; when full its oldest records are dropped"),
		row(&s.Firehose.SpoolDrainRate, "JETWAY_USAGE_SPOOL_DRAIN_RATE", telemetry.DefaultSpoolDrainRate, "spooled usage records sent back to Firehose per second, at most"),
		row(&s.EMF, "JETWAY_EMF", "off", "CloudWatch EMF output: off or stdout"),
	}
}

// flag is the setting's flag: JETWAY_MAX_INFLIGHT is -max-inflight.
func (r setting) flag() string { return flagName(r.key) }

// declare defines r's flag on fs. Its default is the environment's value
// when it is set, else r's default; an environment value that does not
// parse is returned, and the flag keeps r's default.
func (r setting) declare(fs *flag.FlagSet, getenv func(string) string) error {
	name, usage := r.flag(), r.doc+" ("+r.key+")"
	switch p := r.field.(type) {
	case *string:
		v, err := fromEnv(r, getenv, func(raw string) (string, bool) { return raw, true }, "")
		fs.StringVar(p, name, v, usage)
		return err
	case *bool:
		v, err := fromEnv(r, getenv, func(raw string) (bool, bool) {
			b, err := strconv.ParseBool(raw)
			return b, err == nil
		}, "true or false")
		fs.BoolVar(p, name, v, usage)
		return err
	case *int:
		v, err := fromEnv(r, getenv, func(raw string) (int, bool) {
			n, err := strconv.Atoi(raw)
			return n, err == nil && n >= 0
		}, "a whole number >= 0")
		fs.IntVar(p, name, v, usage)
		return err
	case *int64:
		v, err := fromEnv(r, getenv, func(raw string) (int64, bool) {
			n, err := strconv.ParseInt(raw, 10, 64)
			return n, err == nil && n >= 0
		}, "a whole number >= 0")
		fs.Int64Var(p, name, v, usage)
		return err
	case *float64:
		v, err := fromEnv(r, getenv, func(raw string) (float64, bool) {
			f, err := strconv.ParseFloat(raw, 64)
			return f, err == nil && f > 0 && f <= 1
		}, "a fraction in (0, 1]")
		fs.Float64Var(p, name, v, usage)
		return err
	case *time.Duration:
		v, err := fromEnv(r, getenv, func(raw string) (time.Duration, bool) {
			d, err := time.ParseDuration(raw)
			return d, err == nil && d >= 0
		}, "a duration such as 30s")
		fs.DurationVar(p, name, v, usage)
		return err
	}
	panic(fmt.Sprintf("setting %s: field of type %T", r.key, r.field)) // row's constraint rules this out
}

// fromEnv is r's environment value read by parse, else r's default; a value
// parse refuses is an error saying what it must be (want), with the default.
func fromEnv[T settingValue](r setting, getenv func(string) string, parse func(raw string) (T, bool), want string) (T, error) {
	def := r.def.(T)
	raw := getenv(r.key)
	if raw == "" {
		return def, nil
	}
	v, ok := parse(raw)
	if !ok {
		return def, fmt.Errorf("%s=%q: want %s", r.key, raw, want)
	}
	return v, nil
}

// devMode is true when no real issuer is configured.
func (s *settings) devMode() bool { return s.Auth.Issuer == "" }

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
	s := &settings{getenv: getenv}
	fs, errs := s.flags(name, getenv)
	if err := parseFlags(fs, args, out); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("settings: %s", strings.Join(errs, "; "))
	}
	for _, l := range []struct{ key, addr string }{{"JETWAY_LISTEN", s.Listen}, {"JETWAY_ADMIN_LISTEN", s.AdminListen}} {
		if err := checkHostPort(l.addr); err != nil {
			return nil, fmt.Errorf("settings: %s (--%s) %q: not a host:port, such as 127.0.0.1:8080: %v", l.key, flagName(l.key), l.addr, err)
		}
	}
	s.bedrockEndpointIsSet = getenv("AWS_ENDPOINT_URL_BEDROCK_RUNTIME") != ""
	if s.serveDemo == "" {
		s.ServeDemo = s.devMode()
	} else {
		b, err := strconv.ParseBool(s.serveDemo)
		if err != nil {
			return nil, fmt.Errorf("settings: JETWAY_SERVE_DEMO=%q: want true or false", s.serveDemo)
		}
		s.ServeDemo = b
	}
	if s.serveAdmin == "" {
		s.ServeAdmin = s.devMode()
	} else {
		b, err := strconv.ParseBool(s.serveAdmin)
		if err != nil {
			return nil, fmt.Errorf("settings: JETWAY_SERVE_ADMIN=%q: want true or false", s.serveAdmin)
		}
		s.ServeAdmin = b
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

// flags declares every setting of the table as a flag whose default is
// its environment variable, else the setting's default. It returns the
// environment values that did not parse.
func (s *settings) flags(name string, getenv func(string) string) (*flag.FlagSet, []string) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	var errs []string
	for _, r := range s.settingsTable(getenv) {
		if err := r.declare(fs, getenv); err != nil {
			errs = append(errs, err.Error())
		}
	}
	return fs, errs
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
	return s.Gateway.ServerID + "-" + hex.EncodeToString(b[:]), nil
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

// checkDevListen refuses a dev-mode listener off loopback unless
// JETWAY_DEV_ALLOW_REMOTE forces it: anyone reaching it could mint tokens.
func (s *settings) checkDevListen() error {
	if !s.devMode() || s.DevAllowRemote {
		return nil
	}
	for _, addr := range []string{s.Listen, s.AdminListen} {
		if !isLoopback(addr) {
			return fmt.Errorf("dev mode (JETWAY_AUTH_ISSUER unset) refuses the non-loopback address %q: anyone could mint tokens; set JETWAY_AUTH_ISSUER, or JETWAY_DEV_ALLOW_REMOTE=true to force it", addr)
		}
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
	lease := s.Lease
	lease.Owner = owner
	return lease
}

// sessionOptions are the session's options: the settings' bounds, with
// what the settings say in their own terms put in the session's.
func (s *settings) sessionOptions() socket.Options {
	o := s.Session
	// 0 means no larger bound for attachments: the plain frame bound.
	if o.MaxAttachmentFrameBytes == 0 {
		o.MaxAttachmentFrameBytes = o.MaxFrameBytes
	}
	o.AllowedOrigins = s.origins()
	o.AllowLoopback = s.devMode()
	return o
}

// selfDrainOptions are the watcher's options: a Misses of 0 turns
// self-drain off.
func (s *settings) selfDrainOptions() selfdrain.Options {
	o := s.SelfDrain
	if o.Misses == 0 {
		o.Misses = -1
	}
	return o
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
