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
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/firehose"
	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/jetway-gateway/jetway/internal/anthropic"
	"github.com/jetway-gateway/jetway/internal/auth"
	"github.com/jetway-gateway/jetway/internal/config"
	"github.com/jetway-gateway/jetway/internal/door"
	"github.com/jetway-gateway/jetway/internal/fleet"
	"github.com/jetway-gateway/jetway/internal/gateway"
	"github.com/jetway-gateway/jetway/internal/mockmodel"
	"github.com/jetway-gateway/jetway/internal/openai"
	"github.com/jetway-gateway/jetway/internal/quota"
	"github.com/jetway-gateway/jetway/internal/router"
	"github.com/jetway-gateway/jetway/internal/selfdrain"
	"github.com/jetway-gateway/jetway/internal/session"
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
	if err := s.checkFleet(); err != nil {
		return err
	}
	logger, err := telemetry.NewLogger(s.LogLevel, stdout)
	if err != nil {
		return err
	}
	defer func() { _ = logger.Sync() }()
	cfg, err := loadConfig(s.ConfigPath)
	if err != nil {
		return err
	}

	// Everything background runs under bg, which outlives ctx so the drain can finish.
	bg, stopBG := context.WithCancel(context.Background())
	defer stopBG()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := telemetry.NewMetrics(reg)

	verifier, dev, err := buildVerifier(bg, s, cfg, metrics, logger)
	if err != nil {
		return err
	}
	if s.devMode() && !s.DevAllowRemote {
		for _, addr := range []string{s.Listen, s.AdminListen} {
			if !isLoopback(addr) {
				return fmt.Errorf("dev mode (JETWAY_AUTH_ISSUER unset) refuses the non-loopback address %q: anyone could mint tokens; set JETWAY_AUTH_ISSUER, or JETWAY_DEV_ALLOW_REMOTE=true to force it", addr)
			}
		}
	}

	modelIDs := make([]string, 0, len(cfg.Models))
	for _, m := range cfg.Models {
		modelIDs = append(modelIDs, m.ID)
	}
	metrics.LimitModels(modelIDs) // any other model id a client names is "other"

	g, gctx := errgroup.WithContext(bg)

	// The model: the real Bedrock client, pointed at the in-process mock in dev mode.
	awsCfg, err := awsconfig.LoadDefaultConfig(bg, awsconfig.WithRegion(s.Region))
	if err != nil {
		return fmt.Errorf("aws config: %w", err)
	}
	if awsCfg.HTTPClient == nil {
		awsCfg.HTTPClient = awshttp.NewBuildableClient()
	}
	awsCfg.HTTPClient = router.ReadOnlyBodies(awsCfg.HTTPClient)
	bedrockOpts := []func(*bedrockruntime.Options){func(o *bedrockruntime.Options) {
		o.RetryMaxAttempts = max(s.BedrockMaxAttempts, 1)
	}}
	if s.BedrockCAFile != "" {
		hc, err := trustingClient(s.BedrockCAFile)
		if err != nil {
			return err
		}
		bedrockOpts = append(bedrockOpts, func(o *bedrockruntime.Options) { o.HTTPClient = router.ReadOnlyBodies(hc) })
	}
	if s.useMockBedrock() {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return fmt.Errorf("mock bedrock listen: %w", err)
		}
		mock := &http.Server{Handler: mockmodel.New(mockmodel.Options{TTFT: s.MockTTFT, PerToken: s.MockPerToken,
			PerInputToken: s.MockPerInputToken, Caching: mockCaching(cfg)}),
			ReadHeaderTimeout: 10 * time.Second}
		g.Go(func() error { return serveHTTP(gctx, mock, ln, time.Second) })
		endpoint := "http://" + ln.Addr().String()
		logger.Info("mock_bedrock", zap.String("endpoint", endpoint), zap.Duration("ttft", s.MockTTFT),
			zap.Duration("per_token", s.MockPerToken), zap.Duration("per_input_token", s.MockPerInputToken))
		bedrockOpts = append(bedrockOpts, func(o *bedrockruntime.Options) {
			o.BaseEndpoint = aws.String(endpoint)
			o.Credentials = credentials.NewStaticCredentialsProvider("dev", "dev", "")
		})
	}
	bedrock := bedrockruntime.NewFromConfig(awsCfg, bedrockOpts...)
	dynamo := dynamodb.NewFromConfig(awsCfg, func(o *dynamodb.Options) { o.Retryer = dynamoRetryer(s.DynamoDBMaxAttempts) })

	// The fleet: this server's membership item, renewed with a client of
	// its own so heartbeats never wait behind request writes. Its load is
	// read at each heartbeat (hub and gw are set below, before Join).
	instance, err := s.instanceID()
	if err != nil {
		return err
	}
	var fleetStore fleet.Store
	if s.MembersTable != "" {
		fs := fleet.NewDynamoStore(dynamodb.NewFromConfig(awsCfg, func(o *dynamodb.Options) { o.Retryer = dynamoRetryer(2) }), s.MembersTable)
		fs.SetObserver(metrics)
		fleetStore = fs
	}
	var hub *session.Hub
	var gw *gateway.Gateway
	// Seen serving: the load balancer's health checks reach this server
	// (set at /readyz), or it has held a session. With self-drain off
	// there is no such signal, and a member always says it serves.
	var serving atomic.Bool
	serving.Store(s.selfDrainMisses() < 0)
	members := fleet.NewMembership(fleetStore, fleet.Options{ID: instance, Heartbeat: s.FleetHeartbeat, StaleAfter: s.FleetStaleAfter,
		Load: func() fleet.Load {
			n := gw.Inflight()
			// Sessions asked to move are leaving: the balancer counts what stays.
			return fleet.Load{Sessions: hub.Staying(), Streams: n, InFlight: n}
		},
		Serving: func() bool {
			if hub.Sessions() > 0 {
				serving.Store(true)
			}
			return serving.Load()
		}}, logger)

	var qstore quota.Store = quota.NewMemoryStore()
	if s.QuotaTable != "" {
		qs := quota.NewDynamoStore(dynamo, s.QuotaTable)
		qs.SetObserver(metrics)
		qstore = qs
	}
	lease := s.quotaLease(instance)
	quotas := quota.New(qstore, quota.Options{Logger: logger, Lease: lease})
	g.Go(func() error { return quotas.Run(gctx) })

	var records gateway.Records
	if s.RequestsTable != "" {
		rs := stream.NewDynamoStore(dynamo, s.RequestsTable)
		rs.SetObserver(metrics)
		rs.SetFormat(s.recordFormat)
		records = rs
	}

	cache := router.NewCache(router.CacheOptions{Dynamo: dynamoIf(s.CacheTable != "", dynamo), Table: s.CacheTable,
		MaxBytes: int64(s.CacheMaxBytes), Observer: metrics, Logger: logger, Format: s.recordFormat})

	var sink telemetry.Sink
	if s.FirehoseStream != "" {
		o := telemetry.FirehoseOptions{SpoolDrainRate: s.UsageSpoolDrainRate}
		if s.UsageSpoolDir != "" {
			sp, err := telemetry.OpenSpool(s.UsageSpoolDir, telemetry.SpoolOptions{MaxBytes: int64(s.UsageSpoolBytes)})
			if err != nil {
				return fmt.Errorf("JETWAY_USAGE_SPOOL_DIR: %w", err)
			}
			o.Spool = sp
		}
		sink = telemetry.NewFirehoseSink(firehose.NewFromConfig(awsCfg), s.FirehoseStream, o, logger, metrics)
	} else {
		sink = telemetry.NewFileSink(s.UsageDir, telemetry.FileOptions{Server: s.ServerID, Metrics: metrics}, logger)
	}
	sinkCtx, stopSink := context.WithCancel(context.Background())
	defer stopSink()
	sinkDone := make(chan error, 1)
	go func() { sinkDone <- sink.Run(sinkCtx) }()

	logs := stream.NewRegistry(stream.RegistryOptions{Retention: s.ResumeWindow,
		RetainedBytes: int64(s.RetainedAnswerBytes), Observer: metrics})
	g.Go(func() error { return logs.Run(gctx) })

	var liveness gateway.Fleet
	if fleetStore != nil {
		liveness = members
	}
	// Tracing (docs/operations.md, "Tracing"): off unless the OTEL_*
	// variables ask for it; spans are flushed at the end of the drain.
	traces, err := tracing.New(bg, getenv, tracing.Options{Logger: logger, Observer: metrics}, semconv.ServiceInstanceID(instance), attribute.String("jetway.server_id", s.ServerID))
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := traces.Shutdown(sctx); err != nil {
			logger.Warn("trace_flush_failed", zap.Error(err))
		}
	}()
	var tracer trace.Tracer // nil: off
	if traces.Enabled() {
		tracer = traces.Tracer()
		logger.Info("tracing", zap.String("exporter", "otlp"))
	}
	gw = gateway.New(gateway.Deps{Config: cfg, Logs: logs,
		Router: router.New(router.NewBedrock(bedrock), router.Options{Metrics: metrics, Logger: logger,
			EstimateTokens: quota.EstimateTextTokens, Tracer: tracer}),
		Quotas: quotas, Records: records, Fleet: liveness, Cache: cache, Usage: sink, Metrics: metrics, Tracer: tracer, Logger: logger}, gateway.Options{
		MaxInflight: s.MaxInflight, MaxInflightPerTenant: s.MaxInflightPerTenant, MaxInflightPerUser: s.MaxInflightPerUser,
		MaxInflightPerSession: s.MaxInflightPerSession, MaxRefusalsPerUser: s.MaxRefusalsPerUser, RequestTimeout: s.RequestTimeout,
		FirstTokenTimeout: s.FirstTokenTimeout, ServerID: s.ServerID, Instance: instance, CheckpointInterval: s.CheckpointInterval,
		CheckpointChunks: s.CheckpointChunks, PollInterval: s.PollInterval, ResumeWindow: s.ResumeWindow})
	// With a members table the balancer spreads sessions over the fleet
	// (without one the fleet is this server alone and nothing moves).
	var balancer *fleet.Balancer
	sessionOpts := session.Options{
		Heartbeat: s.Heartbeat, MaxFrameBytes: int64(s.MaxFrameBytes), MaxAttachmentFrameBytes: s.attachmentFrameBytes(),
		AttachmentBytesInFlight: int64(s.AttachBytesInFlight), AttachmentBytesPerUser: int64(s.AttachBytesPerUser),
		FrameReadTimeout: s.FrameReadTimeout, SendQueueFrames: s.SendQueueFrames,
		SendQueueBytes: s.SendQueueBytes, WriteTimeout: s.WriteTimeout, SocketSendBuffer: s.SocketSendBuffer, MaxConnsPerUser: s.MaxConnsPerUser,
		AllowedOrigins: s.origins(), AllowLoopback: s.devMode()}
	if fleetStore != nil {
		sessionOpts.RoomElsewhere = func() (fleet.Spread, bool) { return balancer.RoomElsewhere() }
	}
	hub = session.NewHub(verifier, gw, metrics, logger, sessionOpts)
	if fleetStore != nil {
		balancer = fleet.NewBalancer(members, hub, logger, fleet.BalanceOptions{Interval: s.BalanceInterval,
			Margin: s.BalanceMargin, MovesPerSecond: float64(s.BalanceMovesPerSec)})
		g.Go(func() error { return balancer.Run(gctx) })
	}

	if s.EMF == "stdout" {
		emf := telemetry.NewEMF(stdout, telemetry.EMFOptions{Server: s.ServerID}, logger)
		metrics.SetEMF(emf)
		g.Go(func() error { return emf.Run(gctx) })
	}

	var ready atomic.Bool
	// A drain starts at SIGTERM, when the load balancer's health checks stop
	// (it deregistered this task), or on POST /drain, whichever comes first.
	drainReq := make(chan string, 1)
	requestDrain := func(reason string) {
		select {
		case drainReq <- reason:
		default:
		}
	}
	// A gone member's requests are ended and its quota leases taken back
	// in the background: the heartbeat goes on meanwhile.
	members.OnGone(gw.Sweep)
	members.OnExpelled(func() { requestDrain("expelled_from_fleet") })
	// A server that cannot write its item yet serves, but admits nothing
	// (busy) until a heartbeat lands: no record of it can exist before
	// its item does.
	if err := members.Join(bg); err != nil {
		logger.Error("fleet_join_failed", zap.Error(err))
	}
	g.Go(func() error { return members.Run(gctx) })
	healthChecks := selfdrain.New(selfdrain.Options{Interval: s.HealthCheckInterval, Misses: s.selfDrainMisses(),
		UserAgent: s.HealthCheckUserAgent})
	g.Go(func() error {
		_ = healthChecks.Run(gctx, func() { requestDrain("health_checks_stopped") })
		return nil
	})
	// gin routes both listeners (the project's HTTP framework); every
	// handler is a plain http.Handler.
	gin.SetMode(gin.ReleaseMode)
	main := gin.New()
	main.Use(gin.Recovery())
	main.GET("/v1/ws", gin.WrapH(hub))
	// One intake for both HTTP doors: their bodies share one budget.
	intake := door.NewIntake(int64(s.HTTPBodyBytesInFlight), s.HTTPRequestsPerUser, metrics)
	openaiDoor := openai.New(verifier, gw, cfg, metrics, logger, door.Options{MaxBodyBytes: int64(s.MaxFrameBytes),
		WriteTimeout: s.WriteTimeout, OriginAllowed: hub.OriginAllowed, Intake: intake})
	anthropicDoor := anthropic.New(verifier, gw, cfg, metrics, logger, door.Options{MaxBodyBytes: int64(s.MaxFrameBytes),
		WriteTimeout: s.WriteTimeout, OriginAllowed: hub.OriginAllowed, Intake: intake})
	methods := []string{http.MethodGet, http.MethodPost, http.MethodOptions}
	main.Match(methods, openai.PathChat, gin.WrapH(openaiDoor))
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
	if s.ServeDemo {
		web.Mount(main, web.Options{DevIssuer: dev, Config: cfg, Cognito: web.Cognito{Domain: s.CognitoDomain,
			ClientID: s.CognitoClientID, RedirectURI: s.CognitoRedirectURI, Scopes: s.CognitoScopes}})
	}
	admin := gin.New()
	admin.Use(gin.Recovery())
	admin.GET("/healthz", gin.WrapF(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"status": "ok"})
	}))
	admin.GET("/readyz", gin.WrapF(func(w http.ResponseWriter, r *http.Request) {
		// Only the load balancer's own checks arm the self-drain watch;
		// anyone else asking gets the same answer and arms nothing.
		if healthChecks.Checked(r.UserAgent()) {
			serving.Store(true)
			logger.Info("self_drain_armed", zap.String("user_agent", s.HealthCheckUserAgent),
				zap.Duration("silence", healthChecks.Silence()))
		}
		if !ready.Load() {
			writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "draining"})
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"status": "ready", "sessions": hub.Sessions(), "inflight": gw.Inflight()})
	}))
	admin.POST("/drain", gin.WrapH(drainHandler(requestDrain)))
	main.NoRoute(gin.WrapH(door.NoRoute(logger)))
	admin.NoRoute(gin.WrapH(door.NoRoute(logger.With(zap.String("listener", "admin")))))
	admin.GET("/metrics", gin.WrapH(promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})))
	if s.Pprof {
		admin.GET("/debug/pprof/*profile", gin.WrapH(pprofHandler()))
	}

	mainLn, err := net.Listen("tcp", s.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", s.Listen, err)
	}
	adminLn, err := net.Listen("tcp", s.AdminListen)
	if err != nil {
		_ = mainLn.Close()
		return fmt.Errorf("admin listen %s: %w", s.AdminListen, err)
	}
	// A hijacked WebSocket starts with the read deadline set here; the
	// session replaces it with its heartbeat deadline before its first read.
	mainSrv := &http.Server{Handler: main, ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: s.HTTPMaxHeaderBytes,
		ReadTimeout: s.HTTPReadTimeout, IdleTimeout: s.HTTPIdleTimeout}
	adminSrv := &http.Server{Handler: admin, ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: s.HTTPMaxHeaderBytes,
		ReadTimeout: s.HTTPReadTimeout, IdleTimeout: s.HTTPIdleTimeout}
	g.Go(func() error { return serveHTTP(gctx, mainSrv, mainLn, 0) })
	g.Go(func() error { return serveHTTP(gctx, adminSrv, adminLn, 0) })
	ready.Store(true)
	logger.Info("listening", zap.String("addr", mainLn.Addr().String()), zap.String("admin_addr", adminLn.Addr().String()),
		zap.Bool("dev_mode", s.devMode()), zap.String("server", s.ServerID), zap.String("instance", instance),
		zap.String("members_table", s.MembersTable))
	if s.ServeDemo {
		logger.Info("demo_page", zap.String("url", demoPageURL(mainLn.Addr())))
	}

	// Drain: fail readiness, refuse new sessions and requests, let requests
	// in flight finish within the drain timeout, then close sockets with 1001.
	// It runs once, whatever started it.
	var start time.Time
	drain := func(reason string) {
		start = time.Now()
		logger.Info("draining", zap.String("reason", reason), zap.Duration("timeout", s.DrainTimeout),
			zap.Int("sessions", hub.Sessions()), zap.Int("inflight", gw.Inflight()))
		// New work is refused before readiness fails, so a failing /readyz
		// means no request is admitted here any more.
		gw.Drain()
		hub.Drain()
		members.SetDraining()
		ready.Store(false)
		drainCtx, cancelDrain := context.WithTimeout(context.Background(), s.DrainTimeout)
		defer cancelDrain()
		// No request is admitted any more: unused lease tokens go back to
		// the other servers now, not when the leases expire.
		if err := quotas.Drain(drainCtx); err != nil {
			logger.Warn("quota_lease_return_failed", zap.Error(err))
		}
		if err := gw.Wait(drainCtx); err != nil {
			logger.Warn("drain_deadline", zap.Error(err))
		}
		if err := hub.Close(drainCtx); err != nil {
			logger.Warn("sessions_closed_at_deadline", zap.Error(err))
		}
		// Its requests have ended (or the deadline passed): the fleet need
		// not wait for the stale bound to end what is left.
		if err := members.Leave(drainCtx); err != nil {
			logger.Warn("fleet_leave_failed", zap.Error(err))
		}
		logger.Info("drained", zap.String("reason", reason), zap.Duration("took", time.Since(start)))
	}

	// Run until a signal (ctx) or a component fails (gctx). A drain that
	// starts before either keeps the process up, drained, until SIGTERM:
	// ECS stops the task itself after the deregistration delay.
	select {
	case <-ctx.Done():
		drain("signal")
	case <-gctx.Done():
		drain("failure")
	case reason := <-drainReq:
		drain(reason)
		select {
		case <-ctx.Done():
		case <-gctx.Done():
		}
	}
	shutCtx, cancelShut := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancelShut()
	_ = mainSrv.Shutdown(shutCtx)
	_ = adminSrv.Shutdown(shutCtx)
	stopBG()
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
func buildVerifier(ctx context.Context, s *settings, cfg *config.Config, metrics *telemetry.Metrics, logger *zap.Logger) (*auth.Verifier, *auth.DevIssuer, error) {
	ac := auth.Config{Issuer: s.AuthIssuer, JWKSURL: s.AuthJWKSURL, TenantClaim: cfg.Auth.TenantClaim,
		TenantGroupPrefix: cfg.Auth.TenantGroupPrefix, Leeway: s.AuthLeeway,
		CacheEntries: s.AuthCacheEntries, CacheLookup: metrics.AuthCacheLookup}
	if s.AuthCacheEntries == 0 {
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
	v, err := auth.NewVerifier(ctx, ac, cfg, logger)
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
func mockCaching(cfg *config.Config) map[string]mockmodel.CacheRule {
	rules := mockmodel.DefaultCaching()
	for _, m := range cfg.Models {
		if m.PromptCache != nil {
			rules[m.BedrockID] = mockmodel.CacheRule{MinTokens: m.PromptCache.MinTokens, MaxPoints: m.PromptCache.MaxPoints}
		}
	}
	return rules
}
