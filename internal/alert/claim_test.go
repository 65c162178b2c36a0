package alert

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jetway-gateway/jetway/internal/dynalitetest"
	"github.com/jetway-gateway/jetway/internal/dynamotable"
)

// Both claimers: a key is claimed once; of racing claimers (three
// servers, each its own client) exactly one wins; other keys are apart.
func TestClaimersContract(t *testing.T) {
	ctx := context.Background()
	endpoint := dynalitetest.Start(t)
	table := dynalitetest.TableName(t)
	if err := dynamotable.Create(ctx, dynalitetest.Client(t, endpoint), table, dynamotable.PK, attrExpires); err != nil {
		t.Fatal(err)
	}
	expires := time.Now().Add(25 * time.Hour)
	memory := NewMemoryClaimer()
	for name, servers := range map[string][]Claimer{
		"memory": {memory, memory, memory},
		"dynamodb": {
			NewDynamoClaimer(dynamotable.NewTable(dynalitetest.Client(t, endpoint), table, dynamotable.TableQuota)),
			NewDynamoClaimer(dynamotable.NewTable(dynalitetest.Client(t, endpoint), table, dynamotable.TableQuota)),
			NewDynamoClaimer(dynamotable.NewTable(dynalitetest.Client(t, endpoint), table, dynamotable.TableQuota)),
		},
	} {
		t.Run(name, func(t *testing.T) {
			for round := range 5 {
				key := hourly(80).Key(80 + round)
				wins := make([]bool, len(servers))
				var start, wg sync.WaitGroup
				start.Add(1)
				for i, c := range servers {
					wg.Go(func() {
						start.Wait()
						won, err := c.Claim(ctx, key, expires)
						if err != nil {
							t.Error(err)
						}
						wins[i] = won
					})
				}
				start.Done()
				wg.Wait()
				n := 0
				for _, w := range wins {
					if w {
						n++
					}
				}
				if n != 1 {
					t.Fatalf("round %d: %d of %d racing claimers won, want 1", round, n, len(servers))
				}
				if won, err := servers[0].Claim(ctx, key, expires); won || err != nil {
					t.Fatalf("round %d: a second claim: %v %v", round, won, err)
				}
			}
		})
	}
	// The claim item carries the quota table's TTL attribute.
	tbl := dynamotable.NewTable(dynalitetest.Client(t, endpoint), table, dynamotable.TableQuota)
	item, err := tbl.Get(ctx, "get", "alert#"+hourly(80).Key(80), true)
	if err != nil || item == nil {
		t.Fatalf("claim item: %v %v", item, err)
	}
	if exp, ok := dynamotable.Int(item, "expires_at"); !ok || exp != expires.Unix() {
		t.Errorf("expires_at %d (%v), want %d", exp, ok, expires.Unix())
	}
}

// A Notifier on the DynamoDB claimer: the claim's expiry is the window's
// end plus a day, and an unreachable table is a claim error (not sent).
func TestDynamoClaimerInNotifier(t *testing.T) {
	ctx := context.Background()
	endpoint := dynalitetest.Start(t)
	table := dynalitetest.TableName(t)
	client := dynalitetest.Client(t, endpoint)
	if err := dynamotable.Create(ctx, client, table, dynamotable.PK, attrExpires); err != nil {
		t.Fatal(err)
	}
	tbl := dynamotable.NewTable(client, table, dynamotable.TableQuota)
	a, b := &recorder{name: "a"}, &recorder{name: "b"}
	na := New(Options{}, NewDynamoClaimer(tbl), []Sink{a}, nil, nil)
	nb := New(Options{}, NewDynamoClaimer(dynamotable.NewTable(dynalitetest.Client(t, endpoint), table, dynamotable.TableQuota)), []Sink{b}, nil, nil)
	o := hourly(90)
	o.Thresholds = []int{90}
	na.Observe(o)
	nb.Observe(o)
	closeWithin(t, na)
	closeWithin(t, nb)
	if got := len(a.events(t)) + len(b.events(t)); got != 1 {
		t.Fatalf("%d events from two servers, want 1", got)
	}
	item, err := tbl.Get(ctx, "get", "alert#"+o.Key(90), true)
	if err != nil || item == nil {
		t.Fatalf("claim item: %v %v", item, err)
	}
	if exp, _ := dynamotable.Int(item, "expires_at"); exp != o.WindowResetsAt.Add(24*time.Hour).Unix() {
		t.Errorf("expires_at %d, want the window's end plus a day (%d)", exp, o.WindowResetsAt.Add(24*time.Hour).Unix())
	}

	down := dynalitetest.Client(t, dynalitetest.UnreachableEndpoint(t), dynalitetest.SmallRetryBudget)
	c := &recorder{name: "c"}
	nc := New(Options{}, NewDynamoClaimer(dynamotable.NewTable(down, table, dynamotable.TableQuota)), []Sink{c}, nil, nil)
	nc.Observe(hourly(80))
	closeWithin(t, nc)
	if len(c.events(t)) != 0 {
		t.Error("sent on a failed claim")
	}
}

// The memory claimer holds at most MaxMemoryClaims claims: past that a
// claim is an error (not sent) until expired ones make room.
func TestMemoryClaimerBounded(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	c := NewMemoryClaimer().(*memoryClaimer)
	c.now = func() time.Time { return now }
	for i := range MaxMemoryClaims {
		if won, err := c.Claim(ctx, fmt.Sprint("k", i), now.Add(time.Hour)); !won || err != nil {
			t.Fatalf("claim %d: %v %v", i, won, err)
		}
	}
	if won, err := c.Claim(ctx, "one-more", now.Add(time.Hour)); won || !errors.Is(err, ErrClaimsFull) {
		t.Fatalf("past the bound: %v %v, want ErrClaimsFull", won, err)
	}
	if won, err := c.Claim(ctx, "k7", now.Add(time.Hour)); won || err != nil {
		t.Fatalf("a held claim: %v %v", won, err)
	}
	now = now.Add(2 * time.Hour)
	if won, err := c.Claim(ctx, "one-more", now.Add(time.Hour)); !won || err != nil {
		t.Fatalf("once the others expired: %v %v", won, err)
	}
	if len(c.claims) != 1 {
		t.Errorf("%d claims held, want the expired ones swept", len(c.claims))
	}
}
