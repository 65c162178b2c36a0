package gateway_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/jetway-gateway/jetway/internal/config"
	"github.com/jetway-gateway/jetway/internal/gateway"
	"github.com/jetway-gateway/jetway/internal/protocol"
	"github.com/jetway-gateway/jetway/internal/quota"
	"github.com/jetway-gateway/jetway/internal/router"
	"github.com/jetway-gateway/jetway/internal/stream"
)

// missingCache is a Cache that never hits, so every benchmark request
// computes its cache key and reaches the model call.
type missingCache struct{}

func (missingCache) Get(context.Context, string) (*router.CachedAnswer, bool)        { return nil, false }
func (missingCache) Put(context.Context, string, router.CachedAnswer, time.Duration) {}

// BenchmarkAdmitImageRequest is the admission path of a request with one
// 1 MiB image, from the frame's bytes to the router's call: protocol
// decoding and validation, the gateway's policy and capability checks,
// the attachment's conversion for the model call, the quota reservation
// (in memory), the cache key (the app caches) and the router handing the
// call to its model. The model answers at once with nothing; the SDK's
// serialization of the call is the model call's, measured by the router's
// BenchmarkConverseImageRequest. One op is one request, to its terminal.
func BenchmarkAdmitImageRequest(b *testing.B) {
	benchmarkAdmit(b, `{"type":"text","text":"what is this?"},{"type":"image","format":"png","data":"`+
		base64.StdEncoding.EncodeToString(benchImage(1<<20))+`"}`, 0, 0)
}

// BenchmarkAdmitTextRequest is the same path for the text alone.
func BenchmarkAdmitTextRequest(b *testing.B) {
	benchmarkAdmit(b, `{"type":"text","text":"what is this?"}`, 0, 0)
}

// BenchmarkAdmitTextRequestAtScale is BenchmarkAdmitTextRequest with the
// control plane's scale target loaded besides the caller's tenant:
// 10,000 more tenants and 100,000 user overrides.
func BenchmarkAdmitTextRequestAtScale(b *testing.B) {
	benchmarkAdmit(b, `{"type":"text","text":"what is this?"}`, 10_000, 100_000)
}

// benchImage is n bytes that are not all zero (an image's bytes, as far as
// base64 and hashing are concerned).
func benchImage(n int) []byte {
	img := make([]byte, n)
	for i := range img {
		img[i] = byte(i * 7)
	}
	return img
}

func benchmarkAdmit(b *testing.B, blocks string, tenants, users int) {
	cfg, err := config.Parse("bench.yaml", []byte(`
models:
  - {id: seeing, bedrock_id: seeing, capabilities: [images]}
tenants:
  - id: t
    apps:
      - id: cached
        client_ids: [cached-client]
        models: {default: seeing}
        cache: {ttl: 1h}
`))
	if err != nil {
		b.Fatal(err)
	}
	for i := range tenants {
		id := fmt.Sprintf("tenant-%05d", i)
		a := cfg.Tenants[0].Apps[0]
		a.ClientIDs = []string{id + "-client"}
		for j := i; j < users; j += tenants {
			a.Users = append(a.Users, config.UserOverride{Sub: fmt.Sprintf("user-%06d", j),
				Limits: []config.Limit{{Window: "day", Tokens: 50_000}}})
		}
		cfg.Tenants = append(cfg.Tenants, config.Tenant{ID: id, Apps: []config.App{a}})
	}
	cfg.Index()
	called := make(chan router.Call, 1)
	model := router.New(streamerFunc(func(_ context.Context, c router.Call, _ func(string)) (router.Result, error) {
		called <- c
		return router.Result{StopReason: "end_turn", UsageReported: true}, nil
	}), router.Options{})
	g := gateway.New(gateway.Deps{Config: config.NewLive(cfg), Logs: stream.NewRegistry(stream.RegistryOptions{}), Router: model,
		Quotas: quota.New(quota.NewMemoryStore(), quota.Options{}), Cache: missingCache{}, Usage: &usageLog{},
		Logger: zap.NewNop()}, gateway.Options{ServerID: "bench"})
	defer func() { _ = g.Wait(context.Background()) }()
	c := caller("cached")
	// One frame, its request id rewritten in place for each request (the
	// frame is not part of the path; decoding keeps none of its bytes).
	frame := []byte(`{"type":"request","request_id":"req_bench_00000000","temperature":0,` +
		`"messages":[{"role":"user","content":[` + blocks + `]}]}`)
	id := bytes.Index(frame, []byte("00000000"))
	b.ReportAllocs()
	b.SetBytes(int64(len(frame)))
	for i := 0; b.Loop(); i++ {
		copy(frame[id:], fmt.Sprintf("%08d", i))
		in, err := protocol.Decode(frame)
		if err != nil {
			b.Fatal(err)
		}
		log, _, err := g.Submit(context.Background(), c, frameRequest(in))
		if err != nil {
			b.Fatal(err)
		}
		<-called
		for s := log.Read(0); s.Terminal == nil; s = log.Read(0) {
			<-s.Changed
		}
	}
}

// streamerFunc is a router.Streamer.
type streamerFunc func(ctx context.Context, c router.Call, onDelta func(string)) (router.Result, error)

func (f streamerFunc) Stream(ctx context.Context, c router.Call, onDelta func(string)) (router.Result, error) {
	return f(ctx, c, onDelta)
}
