package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/credentials/stscreds"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/firehose"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	"github.com/gin-gonic/gin"
	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/jetway-gateway/jetway/internal/admin"
	"github.com/jetway-gateway/jetway/internal/aisdk"
	"github.com/jetway-gateway/jetway/internal/alert"
	"github.com/jetway-gateway/jetway/internal/anthropic"
	"github.com/jetway-gateway/jetway/internal/auth"
	"github.com/jetway-gateway/jetway/internal/config"
	"github.com/jetway-gateway/jetway/internal/configstore"
	"github.com/jetway-gateway/jetway/internal/door"
	"github.com/jetway-gateway/jetway/internal/fleet"
	"github.com/jetway-gateway/jetway/internal/gateway"
	"github.com/jetway-gateway/jetway/internal/mockmodel"
	"github.com/jetway-gateway/jetway/internal/openai"
	"github.com/jetway-gateway/jetway/internal/quota"
	"github.com/jetway-gateway/jetway/internal/responses"
	"github.com/jetway-gateway/jetway/internal/router"
	"github.com/jetway-gateway/jetway/internal/selfdrain"
	"github.com/jetway-gateway/jetway/internal/selfservice"
	"github.com/jetway-gateway/jetway/internal/session"
	"github.com/jetway-gateway/jetway/internal/socket"
	"github.com/jetway-gateway/jetway/internal/stream"
	"github.com/jetway-gateway/jetway/internal/telemetry"
	"github.com/jetway-gateway/jetway/internal/tracing"
	"github.com/jetway-gateway/jetway/web"
)

// devIssuerName is the `iss` of dev-mode tokens.
const devIssuerName = "jetway-dev"

func loadConfig(path string) (*config.Config, error) {
	if path == "" {
		return config.Default(), nil
	}
	return config.Load(path)
}

// serve runs the gateway until ctx ends (SIGTERM), then drains.
func serve(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	s, err := parseSettings("gateway serve", args, getenv, stdout)
	if err != nil {
		return err
	}
	srv, err := newServer(ctx, s, stdout)
	if err != nil {
		return err
	}
	return srv.Run(ctx)
}

// server is the gateway's parts, built by newServer in dependency order
// and started by Run.
type server struct {
	s        *settings
	logger   *zap.Logger
	config   *configstore.Applier // the config table's; nil: the tenants file is the configuration
	notifier *alert.Notifier      // quota alerts; nil: no sink
	instance string               // this process's fleet id (settings.instanceID)

	// Everything background runs under bg, which outlives Run's ctx so
	// the drain can finish.
	bg     context.Context
	stopBG context.CancelFunc

	mock    *http.Server // the in-process Bedrock endpoint; nil: none
	mockLn  net.Listener
	members *fleet.Membership
	quotas  *quota.Quota
	logs    *stream.Registry
	sink    telemetry.Sink
	traces  *tracing.Provider
	gw      *gateway.Gateway
	hub     *socket.Hub
	chats   aisdk.Chats     // the AI SDK door's chats: the requests table's, or memory
	stored  responses.Store // the Responses door's stored responses: the requests table's, or memory
	// reasoningKeys seal the Responses door's reasoning (JETWAY_RESPONSES_REASONING_KEY).
	reasoningKeys *responses.Keys
	balancer      *fleet.Balancer // nil without a members table
	emf           *telemetry.EMF  // nil: EMF off
	healthChecks  *selfdrain.Watcher

	mainSrv, adminSrv *http.Server
	mainLn, adminLn   net.Listener

	ready atomic.Bool
	// Seen serving: the load balancer's health checks reach this server
	// (set at /readyz), or it has held a session. With self-drain off
	// there is no such signal, and a member always says it serves.
	serving atomic.Bool
	// A drain starts at SIGTERM, when the load balancer's health checks stop
	// (it deregistered this task), or on POST /drain, whichever comes first.
	drainReq chan string
}

// newServer builds the server: every part after the parts it uses, the
// listeners bound last so an address in use is an error here. Nothing
// serves until Run.
func newServer(ctx context.Context, s *settings, stdout io.Writer) (_ *server, err error) {
	if err := s.checkFleet(); err != nil {
		return nil, err
	}
	logger, err := telemetry.NewLogger(s.LogLevel, stdout)
	if err != nil {
		return nil, err
	}
	srv := &server{s: s, logger: logger, drainReq: make(chan string, 1)}
	srv.bg, srv.stopBG = context.WithCancel(context.WithoutCancel(ctx))
	defer func() {
		if err != nil {
			srv.close()
		}
	}()
	file, err := loadConfig(s.ConfigPath)
	if err != nil {
		return nil, err
	}
	awsCfg, err := loadAWSConfig(srv.bg, s.Region)
	if err != nil {
		return nil, err
	}
	reg, metrics := newMetrics(file)
	live, err := srv.configuration(file, awsCfg, metrics)
	if err != nil {
		return nil, err
	}
	cfg := live.Load()
	verifier, dev, err := buildVerifier(srv.bg, s, live, metrics, logger)
	if err != nil {
		return nil, err
	}
	if err := s.checkDevListen(); err != nil {
		return nil, err
	}
	bedrock, err := srv.bedrock(awsCfg, cfg)
	if err != nil {
		return nil, err
	}

	if srv.instance, err = s.instanceID(); err != nil {
		return nil, err
	}
	selfDrain := s.selfDrainOptions()
	srv.serving.Store(selfDrain.Misses < 0)
	liveness := srv.fleet(awsCfg, metrics)
	if err := srv.pipeline(live, awsCfg, bedrock, liveness, metrics); err != nil {
		return nil, err
	}

	// With a members table the balancer spreads sessions over the fleet
	// (without one the fleet is this server alone and nothing moves). It
	// moves the hub's sessions, and the hub asks it for room elsewhere
	// only once requests arrive (Run).
	so := s.sessionOptions()
	if liveness != nil {
		so.RoomElsewhere = srv.roomElsewhere
	}
	srv.hub = socket.NewHub(verifier, metrics, logger, so)
	var key []byte
	if s.ReasoningKey != "" {
		if key, err = responses.ParseKey(s.ReasoningKey); err != nil {
			return nil, fmt.Errorf("JETWAY_RESPONSES_REASONING_KEY: %w", err)
		}
	} else {
		logger.Info("responses_reasoning_key", zap.String("hint", "JETWAY_RESPONSES_REASONING_KEY is unset: reasoning passed back round-trips only through this server"))
	}
	if srv.reasoningKeys, err = responses.NewKeys(key); err != nil {
		return nil, fmt.Errorf("JETWAY_RESPONSES_REASONING_KEY: %w", err)
	}
	if liveness != nil {
		bo := s.Balance
		bo.MovesPerSecond = float64(s.BalanceMovesPerSec)
		srv.balancer = fleet.NewBalancer(srv.members, srv.hub, logger, bo)
	}
	if s.EMF == "stdout" {
		srv.emf = telemetry.NewEMF(stdout, telemetry.EMFOptions{Server: s.Gateway.ServerID}, logger)
		metrics.SetEMF(srv.emf)
	}
	// A gone member's requests are ended and its quota leases taken back
	// in the background: the heartbeat goes on meanwhile.
	srv.members.OnGone(srv.gw.Sweep)
	srv.members.OnExpelled(func() { srv.requestDrain("expelled_from_fleet") })
	srv.healthChecks = selfdrain.New(selfDrain)

	if err := srv.listen(srv.mainHandler(verifier, live, dev, metrics), srv.adminHandler(reg)); err != nil {
		return nil, err
	}
	return srv, nil
}

// newMetrics is the Prometheus registry and the gateway's metrics on it,
// their model label bounded by the tenants file's models.
func newMetrics(cfg *config.Config) (*prometheus.Registry, *telemetry.Metrics) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := telemetry.NewMetrics(reg)
	metrics.LimitModels(modelIDs(cfg)) // any other model id a client names is "other"
	return reg, metrics
}

// modelIDs are the configured models' ids (the model label's values).
func modelIDs(cfg *config.Config) []string {
	ids := make([]string, 0, len(cfg.Models))
	for _, m := range cfg.Models {
		ids = append(ids, m.ID)
	}
	return ids
}

// pipeline builds the gateway (srv.gw) over what it uses: quotas,
// request records, the response cache, the usage sink, the stream logs
// and the tracer.
func (srv *server) pipeline(cfg *config.Live, awsCfg aws.Config, bedrock *router.Bedrock, liveness gateway.Fleet, metrics *telemetry.Metrics) error {
	s, logger := srv.s, srv.logger
	dynamo := dynamodb.NewFromConfig(awsCfg, func(o *dynamodb.Options) { o.Retryer = dynamoRetryer(s.DynamoDBMaxAttempts) })
	srv.quotas = quota.New(quotaStore(s, dynamo, metrics), quota.Options{Logger: logger, Lease: s.quotaLease(srv.instance)})
	var records gateway.Records
	if s.RequestsTable != "" {
		rs := stream.NewDynamoStore(dynamo, s.RequestsTable)
		rs.SetObserver(metrics)
		rs.SetFormat(s.recordFormat)
		records = rs
		chats := aisdk.NewDynamoChats(dynamo, s.RequestsTable)
		chats.SetObserver(metrics)
		srv.chats = chats
		stored := responses.NewDynamoStore(dynamo, s.RequestsTable)
		stored.SetObserver(metrics)
		srv.stored = stored
	} else {
		srv.chats = aisdk.NewMemoryChats()
		srv.stored = responses.NewMemoryStore()
	}
	co := s.Cache
	co.Dynamo, co.Table, co.Observer, co.Logger = dynamoIf(s.CacheTable != "", dynamo), s.CacheTable, metrics, logger
	co.Format = s.recordFormat
	cache := router.NewCache(co)
	var err error
	if srv.sink, err = usageSink(s, awsCfg, metrics, logger); err != nil {
		return err
	}
	ro := s.Retained
	ro.Retention, ro.Observer = s.Gateway.ResumeWindow, metrics
	srv.logs = stream.NewRegistry(ro)
	tracer, err := srv.tracer(metrics)
	if err != nil {
		return err
	}
	if srv.notifier, err = srv.alerts(awsCfg, dynamo, metrics); err != nil {
		return err
	}
	gwo := s.Gateway
	gwo.Instance = srv.instance
	srv.gw = gateway.New(gateway.Deps{Config: cfg, Logs: srv.logs, Alerts: srv.notifier,
		Router: router.New(bedrock, router.Options{Metrics: metrics, Logger: logger,
			EstimateTokens: quota.EstimateTextTokens, Tracer: tracer, FailureThreshold: s.Breaker.FailureThreshold,
			OpenTimeout: s.Breaker.OpenTimeout, AffinityTTL: s.Breaker.AffinityTTL}),
		Quotas: srv.quotas, Records: records, Fleet: liveness, Cache: cache, Usage: srv.sink, Metrics: metrics, Tracer: tracer, Logger: logger}, gwo)
	return nil
}

// loadAWSConfig is the SDK's configuration for every AWS client.
func loadAWSConfig(ctx context.Context, region string) (aws.Config, error) {
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx, awsconfig.WithRegion(region))
	if err != nil {
		return aws.Config{}, fmt.Errorf("aws config: %w", err)
	}
	if awsCfg.HTTPClient == nil {
		awsCfg.HTTPClient = awshttp.NewBuildableClient()
	}
	awsCfg.HTTPClient = router.ReadOnlyBodies(awsCfg.HTTPClient)
	return awsCfg, nil
}

// fleet builds this server's membership (srv.members) and returns it as
// the gateway's Fleet, or nil without a members table: a fleet of one.
// Its item is renewed with a client of its own so heartbeats never wait
// behind request writes. The membership comes before the gateway, which
// asks it who is gone; it reads the gateway's and the hub's load only
// from Join on (Run), when both exist.
func (srv *server) fleet(awsCfg aws.Config, metrics *telemetry.Metrics) gateway.Fleet {
	s := srv.s
	var store fleet.Store
	if s.MembersTable != "" {
		fs := fleet.NewDynamoStore(dynamodb.NewFromConfig(awsCfg, func(o *dynamodb.Options) { o.Retryer = dynamoRetryer(2) }), s.MembersTable)
		fs.SetObserver(metrics)
		store = fs
	}
	fo := s.Fleet
	fo.ID, fo.Load, fo.Serving = srv.instance, srv.load, srv.isServing
	srv.members = fleet.NewMembership(store, fo, srv.logger)
	if store == nil {
		return nil
	}
	return srv.members
}

// quotaStore is the quota counters' store: the quota table, else memory.
func quotaStore(s *settings, dynamo *dynamodb.Client, metrics *telemetry.Metrics) quota.Store {
	if s.QuotaTable == "" {
		return quota.NewMemoryStore()
	}
	qs := quota.NewDynamoStore(dynamo, s.QuotaTable)
	qs.SetObserver(metrics)
	return qs
}

// tracer is the pipeline's tracer (docs/operations.md, "Tracing"), nil
// unless the OTEL_* variables ask for it; srv.traces flushes its spans
// at close.
func (srv *server) tracer(metrics *telemetry.Metrics) (trace.Tracer, error) {
	var err error
	srv.traces, err = tracing.New(srv.bg, srv.s.getenv, tracing.Options{Logger: srv.logger, Observer: metrics},
		semconv.ServiceInstanceID(srv.instance), attribute.String("jetway.server_id", srv.s.Gateway.ServerID))
	if err != nil {
		return nil, err
	}
	if !srv.traces.Enabled() {
		return nil, nil
	}
	srv.logger.Info("tracing", zap.String("exporter", "otlp"))
	return srv.traces.Tracer(), nil
}

// bedrock is the model's adapter over the real Bedrock client, pointed at
// an in-process mock (srv.mock, served by Run) when the settings ask for
// one. A placement in another account is reached with the role it names,
// assumed from the task role through STS (credentials cached and renewed
// by the SDK); with the in-process mock no role is assumed (it checks no
// credentials).
func (srv *server) bedrock(awsCfg aws.Config, cfg *config.Config) (*router.Bedrock, error) {
	s := srv.s
	opts := []func(*bedrockruntime.Options){func(o *bedrockruntime.Options) {
		o.RetryMaxAttempts = max(s.BedrockMaxAttempts, 1)
	}}
	if s.BedrockCAFile != "" {
		hc, err := trustingClient(s.BedrockCAFile)
		if err != nil {
			return nil, err
		}
		opts = append(opts, func(o *bedrockruntime.Options) { o.HTTPClient = router.ReadOnlyBodies(hc) })
	}
	if s.useMockBedrock() {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("mock bedrock listen: %w", err)
		}
		mo := s.Mock
		mo.Caching, mo.Profiles = mockCaching(cfg), mockProfiles(cfg)
		srv.mock, srv.mockLn = &http.Server{Handler: mockmodel.New(mo), ReadHeaderTimeout: 10 * time.Second}, ln
		endpoint := "http://" + ln.Addr().String()
		srv.logger.Info("mock_bedrock", zap.String("endpoint", endpoint), zap.Duration("ttft", mo.TTFT),
			zap.Duration("per_token", mo.PerToken), zap.Duration("per_input_token", mo.PerInputToken))
		dev := credentials.NewStaticCredentialsProvider("dev", "dev", "")
		opts = append(opts, func(o *bedrockruntime.Options) {
			o.BaseEndpoint = aws.String(endpoint)
			o.Credentials = dev
		})
		b := router.NewBedrock(bedrockruntime.NewFromConfig(awsCfg, opts...))
		b.AssumeRoles(func(string) aws.CredentialsProvider { return dev })
		return b, nil
	}
	b := router.NewBedrock(bedrockruntime.NewFromConfig(awsCfg, opts...))
	roles := sts.NewFromConfig(awsCfg)
	session := "jetway-" + sessionName(s.Gateway.ServerID)
	b.AssumeRoles(func(role string) aws.CredentialsProvider {
		return aws.NewCredentialsCache(stscreds.NewAssumeRoleProvider(roles, role, func(o *stscreds.AssumeRoleOptions) {
			o.RoleSessionName = session
		}))
	})
	return b, nil
}

// sessionName is a server id as an STS role session name (2-64 of
// [\w+=,.@-]; the caller prefixes 7 characters).
func sessionName(id string) string {
	b := []byte(id)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("_+=,.@-", c) >= 0) {
			b[i] = '-'
		}
	}
	return string(b[:min(len(b), 57)])
}

// usageSink is where usage records go: Firehose (through a local spool
// when one is set), else local files.
func usageSink(s *settings, awsCfg aws.Config, metrics *telemetry.Metrics, logger *zap.Logger) (telemetry.Sink, error) {
	if s.FirehoseStream == "" {
		return telemetry.NewFileSink(s.UsageDir, telemetry.FileOptions{Server: s.Gateway.ServerID, Metrics: metrics}, logger), nil
	}
	o := s.Firehose
	if s.UsageSpoolDir != "" {
		sp, err := telemetry.OpenSpool(s.UsageSpoolDir, s.Spool)
		if err != nil {
			return nil, fmt.Errorf("JETWAY_USAGE_SPOOL_DIR: %w", err)
		}
		o.Spool = sp
	}
	return telemetry.NewFirehoseSink(firehose.NewFromConfig(awsCfg), s.FirehoseStream, o, logger, metrics), nil
}

// mainHandler routes the main listener: the WebSocket, both HTTP doors,
// the caller's standing (GET /v1/me) and the demo page. gin routes both listeners (the project's HTTP
// framework); every handler is a plain http.Handler.
func (srv *server) mainHandler(verifier *auth.Verifier, cfg *config.Live, dev *auth.DevIssuer, metrics *telemetry.Metrics) http.Handler {
	s := srv.s
	gin.SetMode(gin.ReleaseMode)
	main := gin.New()
	main.Use(gin.Recovery())
	main.GET("/v1/ws", gin.WrapH(srv.hub.Handler(session.New(srv.gw), gateway.DoorWS)))
	// A chat remembers its latest response while it may run and for the
	// resume window after.
	ao := s.AISDK
	ao.Retain = s.Gateway.RequestTimeout + s.Gateway.ResumeWindow
	chatDoor := aisdk.New(srv.gw, srv.chats, ao)
	main.GET(aisdk.Path, gin.WrapH(srv.hub.Handler(chatDoor, gateway.DoorAISDK)))
	// One intake for both HTTP doors: their bodies share one budget.
	intake := door.NewIntake(s.Intake.BodyBytesInFlight, s.Intake.RequestsPerUser, metrics)
	doorOpts := door.Options{MaxBodyBytes: s.Session.MaxFrameBytes, WriteTimeout: s.Session.WriteTimeout,
		OriginAllowed: srv.hub.OriginAllowed, Intake: intake}
	openaiDoor := openai.New(verifier, srv.gw, cfg, metrics, srv.logger, doorOpts)
	anthropicDoor := anthropic.New(verifier, srv.gw, cfg, metrics, srv.logger, doorOpts)
	methods := []string{http.MethodGet, http.MethodPost, http.MethodOptions}
	main.Match(methods, openai.PathChat, gin.WrapH(openaiDoor))
	ro := s.Responses
	ro.ResumeWindow = s.Gateway.RequestTimeout + s.Gateway.ResumeWindow
	ro.Keys = srv.reasoningKeys
	responsesDoor := responses.New(verifier, srv.gw, cfg, srv.stored, metrics, srv.logger, doorOpts, ro)
	responsesSocket := srv.hub.Handler(responsesDoor, gateway.DoorResponses)
	// GET /v1/responses is WebSocket mode; the rest is the HTTP door.
	all := append(methods, http.MethodDelete)
	main.Match(all, responses.Path, gin.WrapF(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && websocket.IsWebSocketUpgrade(r) {
			responsesSocket.ServeHTTP(w, r)
			return
		}
		responsesDoor.ServeHTTP(w, r)
	}))
	main.Match(all, responses.Path+"/*rest", gin.WrapH(responsesDoor))
	for _, p := range []string{anthropic.PathMessages, anthropic.PathCountTokens, anthropic.PathModels + "/:id"} {
		main.Match(methods, p, gin.WrapH(anthropicDoor))
	}
	// Both doors serve GET /v1/models: Anthropic's SDKs always send
	// anthropic-version, OpenAI's never do.
	main.Match(methods, openai.PathModels, gin.WrapF(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(anthropic.VersionHeader) != "" {
			anthropicDoor.ServeHTTP(w, r)
			return
		}
		openaiDoor.ServeHTTP(w, r)
	}))
	me := &selfservice.Handler{SignIn: &door.SignIn{Verifier: verifier, Door: "me", Metrics: metrics}, Apps: cfg, Usage: srv.quotas, Logger: srv.logger, OriginAllowed: srv.hub.OriginAllowed}
	main.Match([]string{http.MethodGet, http.MethodOptions}, selfservice.Path, gin.WrapH(me))
	adm := &admin.Handler{Verifier: verifier, Live: cfg, Metrics: metrics, Logger: srv.logger, OriginAllowed: srv.hub.OriginAllowed}
	if srv.config != nil {
		adm.Service, adm.Audit = configstore.NewService(srv.config), srv.config.Store()
	}
	if s.FirehoseStream == "" {
		adm.UsageDir = s.UsageDir
	}
	adm.Mount(main)
	if s.ServeDemo || s.ServeAdmin {
		web.Mount(main, web.Options{DevIssuer: dev, Config: cfg, Cognito: s.Cognito, Console: s.ServeAdmin, NoDemo: !s.ServeDemo})
	}
	main.NoRoute(gin.WrapH(door.NoRoute(srv.logger)))
	return main
}

// adminHandler routes the admin listener: health, readiness, drain,
// metrics and (JETWAY_PPROF) profiles.
func (srv *server) adminHandler(reg *prometheus.Registry) http.Handler {
	admin := gin.New()
	admin.Use(gin.Recovery())
	admin.GET("/healthz", gin.WrapF(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"status": "ok"})
	}))
	admin.GET("/readyz", gin.WrapF(srv.readyz))
	admin.POST("/drain", gin.WrapH(drainHandler(srv.requestDrain)))
	admin.NoRoute(gin.WrapH(door.NoRoute(srv.logger.With(zap.String("listener", "admin")))))
	admin.GET("/metrics", gin.WrapH(promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})))
	if srv.s.Pprof {
		admin.GET("/debug/pprof/*profile", gin.WrapH(pprofHandler()))
	}
	return admin
}

// listen binds both listeners and builds their servers.
func (srv *server) listen(main, admin http.Handler) error {
	s := srv.s
	var err error
	if srv.mainLn, err = net.Listen("tcp", s.Listen); err != nil {
		return fmt.Errorf("listen %s: %w", s.Listen, err)
	}
	if srv.adminLn, err = net.Listen("tcp", s.AdminListen); err != nil {
		return fmt.Errorf("admin listen %s: %w", s.AdminListen, err)
	}
	// A hijacked WebSocket starts with the read deadline set here; the
	// session replaces it with its heartbeat deadline before its first read.
	srv.mainSrv = &http.Server{Handler: main, ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: s.HTTP.MaxHeaderBytes,
		ReadTimeout: s.HTTP.ReadTimeout, IdleTimeout: s.HTTP.IdleTimeout}
	srv.adminSrv = &http.Server{Handler: admin, ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: s.HTTP.MaxHeaderBytes,
		ReadTimeout: s.HTTP.ReadTimeout, IdleTimeout: s.HTTP.IdleTimeout}
	return nil
}

// load is this server's load for its membership item. Sessions asked to
// move are leaving: the balancer counts what stays.
func (srv *server) load() fleet.Load {
	n := srv.gw.Inflight()
	return fleet.Load{Sessions: srv.hub.Staying(), Streams: n, InFlight: n}
}

// isServing is the membership item's Serving: seen serving, or holding a session.
func (srv *server) isServing() bool {
	if srv.hub.Sessions() > 0 {
		srv.serving.Store(true)
	}
	return srv.serving.Load()
}

// roomElsewhere is the session's RoomElsewhere: the balancer's answer.
func (srv *server) roomElsewhere() (fleet.Spread, bool) { return srv.balancer.RoomElsewhere() }

// requestDrain asks Run to drain; a drain already asked for stands.
func (srv *server) requestDrain(reason string) {
	select {
	case srv.drainReq <- reason:
	default:
	}
}

// readyz answers the load balancer's health check.
func (srv *server) readyz(w http.ResponseWriter, r *http.Request) {
	// Only the load balancer's own checks arm the self-drain watch;
	// anyone else asking gets the same answer and arms nothing.
	if srv.healthChecks.Checked(r.UserAgent()) {
		srv.serving.Store(true)
		srv.logger.Info("self_drain_armed", zap.String("user_agent", srv.s.SelfDrain.UserAgent),
			zap.Duration("silence", srv.healthChecks.Silence()))
	}
	if !srv.ready.Load() {
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "draining"})
		return
	}
	body := map[string]any{"status": "ready", "sessions": srv.hub.Sessions(), "inflight": srv.gw.Inflight()}
	if srv.config != nil {
		// A server whose config table cannot be read stays ready: it
		// serves its last good configuration, and says how old it is.
		st := srv.config.Status()
		c := map[string]any{"source": "table", "seq": st.Seq, "last_good": st.LastGood.UTC().Format(time.RFC3339Nano),
			"age_ms": time.Since(st.LastGood).Milliseconds()}
		if st.Error != "" {
			c["stale"], c["error"] = true, st.Error
		}
		body["config"] = c
	} else {
		body["config"] = map[string]any{"source": "file"}
	}
	writeJSON(w, http.StatusOK, body)
}

// Run serves until ctx ends (a signal) or a part fails, drains, and
// closes the server.
func (srv *server) Run(ctx context.Context) error {
	defer srv.close()
	logger := srv.logger
	g, gctx := errgroup.WithContext(srv.bg)
	sinkCtx, stopSink := context.WithCancel(context.Background())
	defer stopSink()
	sinkDone := make(chan error, 1)
	go func() { sinkDone <- srv.sink.Run(sinkCtx) }()
	srv.start(gctx, g)

	// Run until a signal (ctx) or a part fails (gctx). A drain that
	// starts before either keeps the process up, drained, until SIGTERM:
	// ECS stops the task itself after the deregistration delay.
	var reason string
	asked := false
	select {
	case <-ctx.Done():
		reason = "signal"
	case <-gctx.Done():
		reason = "failure"
	case reason = <-srv.drainReq:
		asked = true
	}
	start := time.Now()
	srv.drain(reason)
	if asked {
		select {
		case <-ctx.Done():
		case <-gctx.Done():
		}
	}
	shutCtx, cancelShut := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancelShut()
	_ = srv.mainSrv.Shutdown(shutCtx)
	_ = srv.adminSrv.Shutdown(shutCtx)
	srv.stopBG()
	gErr := g.Wait()
	stopSink()
	if err := <-sinkDone; err != nil {
		logger.Warn("usage_flush_failed", zap.Error(err))
	}
	logger.Info("stopped", zap.Duration("drain", time.Since(start)))
	if ctx.Err() == nil && gErr != nil {
		return gErr
	}
	return nil
}

// start runs the background parts under g, joins the fleet, and serves
// both listeners.
func (srv *server) start(gctx context.Context, g *errgroup.Group) {
	s, logger := srv.s, srv.logger
	if srv.mock != nil {
		g.Go(func() error { return serveHTTP(gctx, srv.mock, srv.mockLn, time.Second) })
	}
	g.Go(func() error { return srv.quotas.Run(gctx) })
	g.Go(func() error { return srv.logs.Run(gctx) })
	if srv.balancer != nil {
		g.Go(func() error { return srv.balancer.Run(gctx) })
	}
	if srv.emf != nil {
		g.Go(func() error { return srv.emf.Run(gctx) })
	}
	// A server that cannot write its item yet serves, but admits nothing
	// (busy) until a heartbeat lands: no record of it can exist before
	// its item does.
	if err := srv.members.Join(srv.bg); err != nil {
		logger.Error("fleet_join_failed", zap.Error(err))
	}
	g.Go(func() error { return srv.members.Run(gctx) })
	g.Go(func() error {
		_ = srv.healthChecks.Run(gctx, func() { srv.requestDrain("health_checks_stopped") })
		return nil
	})
	g.Go(func() error { return serveHTTP(gctx, srv.mainSrv, srv.mainLn, 0) })
	g.Go(func() error { return serveHTTP(gctx, srv.adminSrv, srv.adminLn, 0) })
	srv.ready.Store(true)
	logger.Info("listening", zap.String("addr", srv.mainLn.Addr().String()), zap.String("admin_addr", srv.adminLn.Addr().String()),
		zap.Bool("dev_mode", s.devMode()), zap.String("server", s.Gateway.ServerID), zap.String("instance", srv.instance),
		zap.String("members_table", s.MembersTable))
	if s.ServeDemo {
		logger.Info("demo_page", zap.String("url", demoPageURL(srv.mainLn.Addr())))
	}
}

// drain fails readiness, refuses new sessions and requests, lets requests
// in flight finish within the drain timeout, then closes sockets with 1001.
func (srv *server) drain(reason string) {
	logger, start := srv.logger, time.Now()
	logger.Info("draining", zap.String("reason", reason), zap.Duration("timeout", srv.s.DrainTimeout),
		zap.Int("sessions", srv.hub.Sessions()), zap.Int("inflight", srv.gw.Inflight()))
	// New work is refused before readiness fails, so a failing /readyz
	// means no request is admitted here any more.
	srv.gw.Drain()
	srv.hub.Drain()
	srv.members.SetDraining()
	srv.ready.Store(false)
	drainCtx, cancelDrain := context.WithTimeout(context.Background(), srv.s.DrainTimeout)
	defer cancelDrain()
	// No request is admitted any more: unused lease tokens go back to
	// the other servers now, not when the leases expire.
	if err := srv.quotas.Drain(drainCtx); err != nil {
		logger.Warn("quota_lease_return_failed", zap.Error(err))
	}
	if err := srv.gw.Wait(drainCtx); err != nil {
		logger.Warn("drain_deadline", zap.Error(err))
	}
	if err := srv.hub.Close(drainCtx); err != nil {
		logger.Warn("sessions_closed_at_deadline", zap.Error(err))
	}
	// Its requests have ended (or the deadline passed): the fleet need
	// not wait for the stale bound to end what is left.
	if err := srv.members.Leave(drainCtx); err != nil {
		logger.Warn("fleet_leave_failed", zap.Error(err))
	}
	logger.Info("drained", zap.String("reason", reason), zap.Duration("took", time.Since(start)))
}

// close releases what newServer opened, whether Run ran or not: the
// background context, the listeners, the trace exporter (flushing its
// spans) and the logger.
func (srv *server) close() {
	if srv.notifier != nil {
		actx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = srv.notifier.Close(actx) // what is queued is sent, within a bound
		cancel()
	}
	srv.stopBG()
	for _, ln := range []net.Listener{srv.mockLn, srv.mainLn, srv.adminLn} {
		if ln != nil {
			_ = ln.Close() // already closed by its server's shutdown after Run
		}
	}
	if srv.traces != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.traces.Shutdown(sctx); err != nil {
			srv.logger.Warn("trace_flush_failed", zap.Error(err))
		}
	}
	_ = srv.logger.Sync()
}

// dynamoIf returns the client when a table is configured.
func dynamoIf(use bool, c *dynamodb.Client) *dynamodb.Client {
	if use {
		return c
	}
	return nil
}

// dynamoRetryer bounds the SDK's retries per call and turns off its
// client-wide retry token bucket: after an outage the bucket would stay
// empty and fail calls long after DynamoDB is back. Jetway's own callers
// bound their retries (quota reserve budget, settlement backoff).
func dynamoRetryer(attempts int) aws.Retryer {
	return retry.NewStandard(func(o *retry.StandardOptions) {
		o.MaxAttempts = max(attempts, 1)
		o.MaxBackoff = 500 * time.Millisecond
		o.RateLimiter = ratelimit.None
	})
}

// serveHTTP serves until ctx ends, then shuts down within grace.
func serveHTTP(ctx context.Context, srv *http.Server, ln net.Listener, grace time.Duration) error {
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return fmt.Errorf("serve %s: %w", ln.Addr(), err)
	case <-ctx.Done():
		if grace > 0 {
			sctx, cancel := context.WithTimeout(context.Background(), grace)
			defer cancel()
			_ = srv.Shutdown(sctx)
		}
		_ = srv.Close()
		return nil
	}
}

// buildVerifier returns the Cognito verifier, or in dev mode the dev issuer's.
func buildVerifier(ctx context.Context, s *settings, live *config.Live, metrics *telemetry.Metrics, logger *zap.Logger) (*auth.Verifier, *auth.DevIssuer, error) {
	ac := s.Auth
	cfg := live.Load()
	ac.TenantClaim, ac.TenantGroupPrefix, ac.CacheLookup = cfg.Auth.TenantClaim, cfg.Auth.TenantGroupPrefix, metrics.AuthCacheLookup
	if ac.CacheEntries == 0 {
		ac.CacheEntries = -1 // the setting's 0 is off; the Config's zero is the default
	}
	var dev *auth.DevIssuer
	if s.devMode() {
		var err error
		dev, err = auth.LoadOrCreateDevIssuer(s.DevKeyFile, devIssuerName)
		if err != nil {
			return nil, nil, fmt.Errorf("dev issuer: %w", err)
		}
		ac.Issuer, ac.KeySet = dev.Issuer(), dev.KeySet()
		logger.Warn("dev_mode", zap.String("issuer", dev.Issuer()), zap.String("key_file", s.DevKeyFile),
			zap.String("hint", `try it: ./bin/gateway chat "Hello" (after make build; or go run ./cmd/gateway chat "Hello"); `+
				"mint a token with: gateway token --sub alice --tenant contoso --app support-assistant"))
	}
	v, err := auth.NewVerifier(ctx, ac, live, logger)
	if err != nil {
		return nil, nil, fmt.Errorf("auth: %w", err)
	}
	return v, dev, nil
}

// demoPageURL is the demo page's address on the main listener; a wildcard
// listener is reached on loopback.
func demoPageURL(addr net.Addr) string {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok {
		return "http://" + addr.String() + "/"
	}
	ip := tcp.IP
	if ip.IsUnspecified() {
		ip = net.IPv4(127, 0, 0, 1)
	}
	return "http://" + net.JoinHostPort(ip.String(), strconv.Itoa(tcp.Port)) + "/"
}

func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// trustingClient is the SDK's HTTP client trusting only the CA in caFile
// (JETWAY_BEDROCK_CA_FILE): the mock Bedrock endpoint's self-signed
// certificate, so that tests and benchmarks pay for TLS as production does.
func trustingClient(caFile string) (*awshttp.BuildableClient, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("JETWAY_BEDROCK_CA_FILE: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("JETWAY_BEDROCK_CA_FILE %s: no PEM certificate in it", caFile)
	}
	return awshttp.NewBuildableClient().WithTransportOptions(func(tr *http.Transport) {
		if tr.TLSClientConfig == nil {
			tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		tr.TLSClientConfig.RootCAs = pool
	}), nil
}

// writeJSON answers with v as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "encode: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// pprofHandler serves net/http/pprof's profiles (JETWAY_PPROF).
func pprofHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// mockCaching is the in-process mock's prompt caching: its own models', and
// every Bedrock id the tenants file gives prompt_cache, with that rule, so a
// tenants file written for Bedrock (docs/anthropic.md's Claude Code recipe)
// runs in dev mode as it would on Bedrock.
// mockProfiles registers the tenants file's application inference
// profiles with the in-process mock, each resolving to its model's
// bedrock_id (as a profile created from that model would).
func mockProfiles(cfg *config.Config) map[string]string {
	profiles := map[string]string{}
	add := func(byModel map[string]string) {
		for model, arn := range byModel {
			if m, ok := cfg.Model(model); ok {
				profiles[arn] = mockmodel.BaseModelID(m.BedrockID)
			}
		}
	}
	for _, t := range cfg.Tenants {
		add(t.BedrockProfiles)
		for _, a := range t.Apps {
			add(a.BedrockProfiles)
		}
	}
	return profiles
}

func mockCaching(cfg *config.Config) map[string]mockmodel.CacheRule {
	rules := mockmodel.DefaultCaching()
	for _, m := range cfg.Models {
		if m.PromptCache != nil {
			rules[m.BedrockID] = mockmodel.CacheRule{MinTokens: m.PromptCache.MinTokens, MaxPoints: m.PromptCache.MaxPoints}
		}
	}
	return rules
}
