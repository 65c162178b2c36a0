package quota

import (
	"context"
	"testing"
	"time"
)

// TestStandings: a server's own lease counts at what it spent, another
// server's lease in full (granted), and without leases the item's usage
// is what was reserved and charged.
func TestStandings(t *testing.T) {
	ctx := context.Background()
	// Half past the current hour: the memory store forgets items by the
	// wall clock (Item.Expires), so a fixed date would expire them.
	hour := time.Now().UTC().Truncate(time.Hour)
	now := hour.Add(30 * time.Minute)
	clock := func() time.Time { return now }
	store := NewMemoryStore()
	a := New(store, Options{Now: clock, Lease: LeaseOptions{Owner: "a"}})
	b := New(store, Options{Now: clock, Lease: LeaseOptions{Owner: "b"}})
	direct := New(store, Options{Now: clock})
	limits := []Limit{{Scope: AppScope("t", "x"), Window: Hour, Tokens: 100000, Requests: 1000}}

	r, err := a.Reserve(ctx, "r1", limits, Amount{Tokens: 1000, Requests: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Settle(ctx, r, Amount{Tokens: 300, Requests: 1}); err != nil {
		t.Fatal(err)
	}
	st, err := a.Standings(ctx, limits)
	if err != nil || len(st) != 1 {
		t.Fatal(st, err)
	}
	if got := st[0].Used; got != (Amount{Tokens: 300, Requests: 1}) {
		t.Errorf("own server: used %+v, want what it spent", got)
	}
	if end := st[0].Item.End(); !end.Equal(hour.Add(time.Hour)) {
		t.Errorf("resets at %v", end)
	}
	item, _ := store.ReadItem(ctx, st[0].Item)
	granted := item.Leases["a"].Granted
	if granted.Tokens <= 300 {
		t.Fatalf("lease a granted %+v: the test needs unspent tokens", granted)
	}
	for name, q := range map[string]*Quota{"other server": b, "no leases": direct} {
		st, err := q.Standings(ctx, limits)
		if err != nil {
			t.Fatal(err)
		}
		if got := st[0].Used; got != item.Used {
			t.Errorf("%s: used %+v, want the item's %+v (a's lease in full)", name, got, item.Used)
		}
	}
}
