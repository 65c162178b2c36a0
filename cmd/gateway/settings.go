package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jetway-gateway/jetway/internal/gateway"
	"github.com/jetway-gateway/jetway/internal/selfdrain"
	"github.com/jetway-gateway/jetway/internal/stream"
)

// settings are the server's environment-variable settings (docs/configuration.md).
// Each has a flag of the same name, lower-case without the JETWAY_ prefix.
type settings struct {
	Listen, AdminListen, ConfigPath, LogLevel, ServerID string
	ServeDemo                                           bool

	AuthIssuer, AuthJWKSURL string
	AuthLeeway              time.Duration
	DevKeyFile              string
	DevAllowRemote          bool
	AllowedOrigins          string
	CognitoDomain           string
	CognitoClientID         string
	CognitoRedirectURI      string
	CognitoScopes           string

	Heartbeat             time.Duration
	MaxFrameBytes         int
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
	RequestTimeout        time.Duration
	FirstTokenTimeout     time.Duration
	DrainTimeout          time.Duration
	HealthCheckInterval   time.Duration
	SelfDrainMisses       int
	CheckpointInterval    time.Duration
	CheckpointChunks      int
	Lease                 time.Duration
	PollInterval          time.Duration

	Region               string
	MockBedrock          string // "", "true", "false"
	MockTTFT             time.Duration
	MockPerToken         time.Duration
	BedrockMaxAttempts   int
	DynamoDBMaxAttempts  int
	QuotaTable           string
	RequestsTable        string
	CacheTable           string
	CacheMaxBytes        int
	FirehoseStream       string
	UsageDir             string
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
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(out)
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
	dur(&s.AuthLeeway, "JETWAY_AUTH_LEEWAY", 5*time.Second, "clock skew allowed on exp/nbf/iat")
	str(&s.DevKeyFile, "JETWAY_DEV_KEY_FILE", defaultDevKeyFile(getenv), "dev mode: the dev issuer's key file")
	boolean(&s.DevAllowRemote, "JETWAY_DEV_ALLOW_REMOTE", false, "dev mode: allow a non-loopback listen address")
	str(&s.CognitoDomain, "JETWAY_COGNITO_DOMAIN", "", "demo page in production: the Cognito hosted UI base URL")
	str(&s.CognitoClientID, "JETWAY_COGNITO_CLIENT_ID", "", "demo page in production: the public app client id")
	str(&s.CognitoRedirectURI, "JETWAY_COGNITO_REDIRECT_URI", "", "demo page in production: the callback URL (default: the page's URL)")
	str(&s.CognitoScopes, "JETWAY_COGNITO_SCOPES", "", "demo page in production: space-separated scopes (default openid)")
	str(&s.AllowedOrigins, "JETWAY_ALLOWED_ORIGINS", "", "comma-separated allowed browser origins")
	dur(&s.Heartbeat, "JETWAY_HEARTBEAT", 25*time.Second, "WebSocket ping interval")
	num(&s.MaxFrameBytes, "JETWAY_MAX_FRAME_BYTES", 256<<10, "largest inbound frame in bytes")
	num(&s.SendQueueFrames, "JETWAY_SEND_QUEUE_FRAMES", 1024, "per-connection send queue bound, frames")
	num(&s.SendQueueBytes, "JETWAY_SEND_QUEUE_BYTES", 4<<20, "per-connection send queue bound, bytes")
	dur(&s.WriteTimeout, "JETWAY_WRITE_TIMEOUT", 10*time.Second, "longest time one socket write may take")
	num(&s.SocketSendBuffer, "JETWAY_SOCKET_SEND_BUFFER", 0, "SO_SNDBUF per connection in bytes (0: OS autotuning)")
	num(&s.MaxConnsPerUser, "JETWAY_MAX_CONNS_PER_USER", 16, "open WebSockets per user")
	num(&s.MaxInflightPerSession, "JETWAY_MAX_INFLIGHT_PER_SESSION", 4, "requests in flight per session")
	num(&s.MaxInflightPerUser, "JETWAY_MAX_INFLIGHT_PER_USER", 8, "requests in flight per user")
	num(&s.MaxRefusalsPerUser, "JETWAY_MAX_REFUSALS_PER_USER", gateway.DefaultMaxRefusalsPerUser, "refused requests a second per user (and the burst); past it: rate_limited at once, with no usage record")
	num(&s.MaxInflightPerTenant, "JETWAY_MAX_INFLIGHT_PER_TENANT", 0, "model calls in flight per tenant (0: no cap)")
	num(&s.MaxInflight, "JETWAY_MAX_INFLIGHT", 2000, "model calls in flight on this server")
	dur(&s.ResumeWindow, "JETWAY_RESUME_WINDOW", 10*time.Minute, "how long finished answers stay resumable")
	num(&s.RetainedAnswerBytes, "JETWAY_RETAINED_ANSWER_BYTES", stream.DefaultRetainedBytes, "memory budget of finished answers kept for resume, bytes (oldest evicted first)")
	dur(&s.HTTPReadTimeout, "JETWAY_HTTP_READ_TIMEOUT", 30*time.Second, "both listeners: longest time to read one HTTP request, body included")
	dur(&s.HTTPIdleTimeout, "JETWAY_HTTP_IDLE_TIMEOUT", 130*time.Second, "both listeners: how long an idle keep-alive connection stays open (keep above the ALB idle timeout, 120 s)")
	dur(&s.RequestTimeout, "JETWAY_REQUEST_TIMEOUT", 5*time.Minute, "longest a request may run")
	dur(&s.FirstTokenTimeout, "JETWAY_FIRST_TOKEN_TIMEOUT", 30*time.Second, "longest wait for a model's first token")
	dur(&s.CheckpointInterval, "JETWAY_CHECKPOINT_INTERVAL", time.Second, "how often a running request's record is checkpointed")
	num(&s.CheckpointChunks, "JETWAY_CHECKPOINT_CHUNKS", 64, "checkpoint early after this many chunks")
	dur(&s.Lease, "JETWAY_LEASE", 5*time.Second, "how long a request record's owner lease lasts unrenewed")
	dur(&s.PollInterval, "JETWAY_RESUME_POLL_INTERVAL", 200*time.Millisecond, "how often a resumed request owned by another server is polled")
	dur(&s.DrainTimeout, "JETWAY_DRAIN_TIMEOUT", 110*time.Second, "on SIGTERM, how long requests may take to finish")
	dur(&s.HealthCheckInterval, "JETWAY_HEALTH_CHECK_INTERVAL", selfdrain.DefaultInterval, "the load balancer's health check interval (/readyz)")
	num(&s.SelfDrainMisses, "JETWAY_SELF_DRAIN_MISSES", selfdrain.DefaultMisses, "drain when this many health check intervals pass without one (0: never)")
	str(&s.Region, "AWS_REGION", "", "AWS region")
	str(&s.MockBedrock, "JETWAY_MOCK_BEDROCK", "", "run the mock Bedrock endpoint in-process (default: in dev mode without AWS_ENDPOINT_URL_BEDROCK_RUNTIME)")
	dur(&s.MockTTFT, "JETWAY_MOCK_TTFT", 250*time.Millisecond, "in-process mock: time to first token")
	dur(&s.MockPerToken, "JETWAY_MOCK_PER_TOKEN", 8*time.Millisecond, "in-process mock: time per token")
	num(&s.BedrockMaxAttempts, "JETWAY_BEDROCK_MAX_ATTEMPTS", 1, "SDK attempts per Bedrock call")
	num(&s.DynamoDBMaxAttempts, "JETWAY_DYNAMODB_MAX_ATTEMPTS", 3, "SDK attempts per DynamoDB call")
	str(&s.QuotaTable, "JETWAY_QUOTA_TABLE", "", "DynamoDB quota table (unset: in memory)")
	str(&s.RequestsTable, "JETWAY_REQUESTS_TABLE", "", "DynamoDB requests table (unset: in memory)")
	str(&s.CacheTable, "JETWAY_CACHE_TABLE", "", "DynamoDB cache table (unset: in memory)")
	num(&s.CacheMaxBytes, "JETWAY_CACHE_MAX_BYTES", 64<<20, "in-memory response cache bound in bytes")
	str(&s.FirehoseStream, "JETWAY_FIREHOSE_STREAM", "", "Firehose stream for usage records (unset: local files)")
	str(&s.UsageDir, "JETWAY_USAGE_DIR", "usage", "local usage records directory")
	str(&s.EMF, "JETWAY_EMF", "off", "CloudWatch EMF output: off or stdout")
	serveDemo := env("JETWAY_SERVE_DEMO", "")
	fs.StringVar(&serveDemo, "serve-demo", serveDemo, "serve the demo page at / (default: in dev mode) (JETWAY_SERVE_DEMO)")
	if err := parseFlags(fs, args, out); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("settings: %s", strings.Join(errs, "; "))
	}
	s.bedrockEndpointIsSet = getenv("AWS_ENDPOINT_URL_BEDROCK_RUNTIME") != ""
	if serveDemo == "" {
		s.ServeDemo = s.devMode()
	} else {
		b, err := strconv.ParseBool(serveDemo)
		if err != nil {
			return nil, fmt.Errorf("settings: JETWAY_SERVE_DEMO=%q: want true or false", serveDemo)
		}
		s.ServeDemo = b
	}
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

// flagName turns JETWAY_MAX_INFLIGHT into max-inflight and AWS_REGION into aws-region.
func flagName(key string) string {
	return strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(key, "JETWAY_")), "_", "-")
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
