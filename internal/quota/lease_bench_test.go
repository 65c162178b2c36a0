package quota_test

import (
	"context"
	"net/http"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/jetway-gateway/jetway/internal/dynalitetest"
	"github.com/jetway-gateway/jetway/internal/quota"
)

// countingHTTP counts the HTTP requests a DynamoDB client sends (SDK
// retries included).
type countingHTTP struct {
	http  *http.Client
	calls atomic.Int64
}

func (c *countingHTTP) Do(r *http.Request) (*http.Response, error) {
	c.calls.Add(1)
	return c.http.Do(r)
}

// BenchmarkDynamoReserveSettle compares one admitted request's quota work
// (Reserve then Settle on Contoso's support assistant: the tenant's month
// and the app's hour) on dynalite behind a proxy adding 2.5 ms each way,
// without leases (a conditional write per item to reserve, another to
// settle) and with them, paced in real time at benchRate requests/s (one
// busy app at steady load; run it with -benchtime 200x or so). Metrics: reserve-p50-us and reserve-p99-us are the admission's latency
// (on the path to the first token), calls/op the DynamoDB calls per
// request at steady load (background lease writes included), cold-calls
// the calls of a new server's first request.
const benchRate = 20

func BenchmarkDynamoReserveSettle(b *testing.B) {
	endpoint := dynalitetest.StartDelayed(b, dynalitetest.RoundTripDelay/2)
	for _, mode := range []struct {
		name  string
		lease quota.LeaseOptions
	}{{"exact", quota.LeaseOptions{}}, {"lease", quota.LeaseOptions{Owner: "bench"}}} {
		b.Run(mode.name, func(b *testing.B) {
			ctx := context.Background()
			counter := &countingHTTP{http: &http.Client{}}
			client := dynalitetest.Client(b, endpoint, func(o *dynamodb.Options) { o.HTTPClient = counter })
			store := newDynamoStore(b, client)
			q := quota.New(store, quota.Options{Lease: mode.lease})
			limits := []quota.Limit{
				{Scope: contoso, Window: quota.Month, Tokens: 1 << 40},
				{Scope: support, Window: quota.Hour, Tokens: 1 << 40},
			}
			one := func() time.Duration {
				begin := time.Now()
				r, err := q.Reserve(ctx, "req", limits, tokens(1338))
				took := time.Since(begin)
				if err != nil {
					b.Fatal(err)
				}
				if err := q.Settle(ctx, r, tokens(371)); err != nil {
					b.Fatal(err)
				}
				return took
			}
			counter.calls.Store(0)
			one()
			cold := counter.calls.Load()
			counter.calls.Store(0)
			var took []time.Duration
			pace := time.NewTicker(time.Second / benchRate)
			defer pace.Stop()
			for b.Loop() {
				<-pace.C
				took = append(took, one())
			}
			b.StopTimer()
			if err := q.Drain(ctx); err != nil { // waits for background writes, so they are counted
				b.Fatal(err)
			}
			slices.Sort(took)
			n := len(took)
			b.ReportMetric(float64(took[n/2].Microseconds()), "reserve-p50-us")
			b.ReportMetric(float64(took[n*99/100].Microseconds()), "reserve-p99-us")
			b.ReportMetric(float64(counter.calls.Load())/float64(n), "calls/op")
			b.ReportMetric(float64(cold), "cold-calls")
		})
	}
}
