package quota_test

import (
	"context"
	"testing"
	"time"

	"github.com/jetway-gateway/jetway/internal/dynalitetest"
	"github.com/jetway-gateway/jetway/internal/quota"
)

// BenchmarkMemoryReserveSettle measures one admitted request's quota work
// on the embedded store: a reservation on three limits and its settlement.
func BenchmarkMemoryReserveSettle(b *testing.B) {
	benchReserveSettle(b, quota.NewMemoryStore())
}

// BenchmarkDynamoCodecReserveSettle is the same work on DynamoStore,
// answered by a canned response without a network: the client-side cost
// of the conditional reservation writes and the settlement writes
// (building the expressions and values, signing, encoding, decoding).
func BenchmarkDynamoCodecReserveSettle(b *testing.B) {
	client := dynalitetest.Canned(b, `{"Attributes":{"used":{"N":"1338"},"requests":{"N":"1"},"micro_usd":{"N":"0"}}}`)
	benchReserveSettle(b, quota.NewDynamoStore(client, "quota"))
}

func benchReserveSettle(b *testing.B, store quota.Store) {
	ctx := context.Background()
	q := quota.New(store, quota.Options{Now: func() time.Time { return midMonth }})
	limits := []quota.Limit{
		{Scope: contoso, Window: quota.Month, Tokens: 1 << 60},
		{Scope: support, Window: quota.Hour, Tokens: 1 << 60},
		{Scope: alice, Window: quota.Minute, Tokens: 1 << 60, Requests: 1 << 60},
	}
	b.ReportAllocs()
	for b.Loop() {
		r, err := q.Reserve(ctx, "req", limits, tokens(1338))
		if err != nil {
			b.Fatal(err)
		}
		if err := q.Settle(ctx, r, tokens(371)); err != nil {
			b.Fatal(err)
		}
	}
}
