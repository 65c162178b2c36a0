package openai

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/jetway-gateway/jetway/internal/auth"
	"github.com/jetway-gateway/jetway/internal/auth/authtest"
	"github.com/jetway-gateway/jetway/internal/config"
	"github.com/jetway-gateway/jetway/internal/door"
	"github.com/jetway-gateway/jetway/internal/gateway"
	"github.com/jetway-gateway/jetway/internal/mockmodel"
	"github.com/jetway-gateway/jetway/internal/mockmodel/mockmodeltest"
	"github.com/jetway-gateway/jetway/internal/quota"
	"github.com/jetway-gateway/jetway/internal/router"
	"github.com/jetway-gateway/jetway/internal/stream"
	"github.com/jetway-gateway/jetway/internal/telemetry"
)

// discardUsage is a usage sink that keeps nothing (the file sink's cost is
// the sink's, not the door's).
type discardUsage struct{}

func (discardUsage) Record(telemetry.UsageRecord) {}

// BenchmarkChatWhole is one non-streaming POST /v1/chat/completions
// through everything the door and the core do for it: a real HTTP
// connection (kept alive), the real verifier (a Cognito-shaped token, its
// verification cached after the first request), the real gateway with
// in-memory quotas, stream registry and metrics, and the router's
// Bedrock adapter calling the mock endpoint at 0 ms per token (16 tokens).
// Logs are encoded as in production and discarded. One op is one
// request, to the last byte of its answer; allocs/op counts the whole
// process (client, mock and gateway).
func BenchmarkChatWhole(b *testing.B) {
	iss := authtest.NewIssuer(b)
	cfg := config.Default()
	acfg := iss.Config()
	v, err := auth.NewVerifier(b.Context(), acfg, cfg, zap.NewNop())
	if err != nil {
		b.Fatal(err)
	}
	token := iss.Token(b, authtest.Claims{ClientID: "contoso-dev", Tenant: "contoso"})
	_, mockURL := mockmodeltest.Start(b, mockmodel.Options{TTFT: mockmodel.NoDelay, PerToken: mockmodel.NoDelay})
	logger, err := telemetry.NewLogger("info", io.Discard)
	if err != nil {
		b.Fatal(err)
	}
	metrics := telemetry.NewMetrics(nil)
	logs := stream.NewRegistry(stream.RegistryOptions{Observer: metrics})
	gw := gateway.New(gateway.Deps{Config: config.NewLive(cfg), Logs: logs,
		Router: router.New(router.NewBedrock(mockmodeltest.Client(b, mockURL)), router.Options{Metrics: metrics, Logger: logger}),
		Quotas: quota.New(quota.NewMemoryStore(), quota.Options{Logger: logger}), Cache: router.NewCache(router.CacheOptions{Logger: logger}),
		Usage: discardUsage{}, Metrics: metrics, Logger: logger}, gateway.Options{ServerID: "bench"})
	defer func() { _ = gw.Wait(context.Background()) }()
	srv := httptest.NewServer(New(v, gw, cfg, metrics, logger, door.Options{}))
	defer srv.Close()
	hc := srv.Client()

	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		body := `{"model":"mock-a","max_tokens":16,"messages":[{"role":"user","content":"Tell me about flight ` + strconv.Itoa(i) + `"}]}`
		req, _ := http.NewRequest(http.MethodPost, srv.URL+PathChat, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || !strings.Contains(string(got), `"finish_reason":"length"`) {
			b.Fatalf("HTTP %d: %s (%v)", resp.StatusCode, got, err)
		}
	}
}
