package quota_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/jetway-gateway/jetway/internal/quota"
)

// codecLimits are Contoso's support-assistant limits plus a user limit:
// three items, with token, request and cost caps.
var codecLimits = []quota.Limit{
	{Scope: contoso, Window: quota.Month, Tokens: 1_000_000, MicroUSD: 50_000_000},
	{Scope: support, Window: quota.Hour, Tokens: 20_000},
	{Scope: alice, Window: quota.Minute, Tokens: 5_000, Requests: 10},
}

// codecSide is one gateway task's view: a store and a Quota on it.
type codecSide struct {
	store quota.Store
	q     *quota.Quota
}

func newCodecSide(store quota.Store, now func() time.Time) codecSide {
	return codecSide{store: store, q: quota.New(store, quota.Options{Now: now})}
}

func (s codecSide) usage(t *testing.T) map[string]quota.Amount {
	t.Helper()
	got := map[string]quota.Amount{}
	for _, l := range codecLimits {
		u, err := s.q.Usage(context.Background(), l.Scope, l.Window)
		if err != nil {
			t.Fatal(err)
		}
		got[l.Scope.String()+" "+string(l.Window)] = u
	}
	return got
}

// A reservation restored on another task settles exactly like the
// original: the same refund or extra charge on every item.
func TestRestoredReservationSettlesLikeTheOriginal(t *testing.T) {
	now := func() time.Time { return midMonth }
	reserved := quota.Amount{Tokens: 1324, Requests: 1, MicroUSD: 9000}
	for name, actual := range map[string]quota.Amount{
		"refund":       {Tokens: 400, Requests: 1, MicroUSD: 2500},
		"extra charge": {Tokens: 2000, Requests: 1, MicroUSD: 12000},
		"exact":        reserved,
		"release":      {},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			// Two identical stores with identical earlier usage: one where
			// the reserving task settles, one where another task does.
			original := newCodecSide(quota.NewMemoryStore(), now)
			moved := newCodecSide(quota.NewMemoryStore(), now)
			for _, side := range []codecSide{original, moved} {
				earlier, err := side.q.Reserve(ctx, "req-earlier", codecLimits, reserved)
				if err != nil {
					t.Fatal(err)
				}
				if err := side.q.Settle(ctx, earlier, quota.Amount{Tokens: 700, Requests: 1, MicroUSD: 4000}); err != nil {
					t.Fatal(err)
				}
			}

			r1, err := original.q.Reserve(ctx, "req-1", codecLimits, reserved)
			if err != nil {
				t.Fatal(err)
			}
			r2, err := moved.q.Reserve(ctx, "req-1", codecLimits, reserved)
			if err != nil {
				t.Fatal(err)
			}
			data, err := r2.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			// Another task: a new Quota over the same store.
			other := newCodecSide(moved.store, now)
			restored, err := other.q.Restore(data)
			if err != nil {
				t.Fatalf("Restore(%s): %v", data, err)
			}
			if restored.RequestID() != "req-1" || restored.Amount() != reserved || !reflect.DeepEqual(restored.Items(), r2.Items()) || restored.Settled() {
				t.Fatalf("restored %s %+v %+v settled=%v, want %+v", restored.RequestID(), restored.Amount(), restored.Items(), restored.Settled(), r2.Items())
			}
			w1, l1, rem1 := r2.Tightest()
			if w2, l2, rem2 := restored.Tightest(); w1 != w2 || l1 != l2 || rem1 != rem2 {
				t.Errorf("Tightest = %s %d %d, want %s %d %d", w2, l2, rem2, w1, l1, rem1)
			}

			if err := original.q.Settle(ctx, r1, actual); err != nil {
				t.Fatal(err)
			}
			if err := other.q.Settle(ctx, restored, actual); err != nil {
				t.Fatal(err)
			}
			want, got := original.usage(t), other.usage(t)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("usage after settling the restored reservation = %v, want %v", got, want)
			}
			for key, u := range want {
				if exp := (quota.Amount{Tokens: 700, Requests: 1, MicroUSD: 4000}).Add(actual); u != exp {
					t.Errorf("%s = %+v, want %+v", key, u, exp)
				}
			}
			// Settling again changes nothing, as for the original.
			if err := other.q.Settle(ctx, restored, quota.Amount{Tokens: 1}); err != nil || !restored.Settled() {
				t.Fatalf("second Settle = %v, settled %v", err, restored.Settled())
			}
			if got := other.usage(t); !reflect.DeepEqual(got, want) {
				t.Errorf("usage after a second Settle = %v, want %v", got, want)
			}
		})
	}
}

func TestReservationEncodingIsVersionedJSON(t *testing.T) {
	ctx := context.Background()
	store := quota.NewMemoryStore()
	q := quota.New(store, quota.Options{Now: func() time.Time { return midMonth }})
	r, err := q.Reserve(ctx, "req-json", codecLimits, quota.Amount{Tokens: 100, Requests: 1, MicroUSD: 50})
	if err != nil {
		t.Fatal(err)
	}
	data, err := r.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		V         int    `json:"v"`
		RequestID string `json:"request_id"`
		Items     []struct {
			Kind, Key, Window, Start string
			Limit                    map[string]int64
		} `json:"items"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatalf("not JSON: %v: %s", err, data)
	}
	if doc.V != 1 || doc.RequestID != "req-json" || len(doc.Items) != 3 {
		t.Fatalf("encoded %s", data)
	}
	// Items in reservation order: narrowest scope first.
	first := doc.Items[0]
	if first.Kind != "user" || first.Key != "contoso/support-assistant/alice" || first.Window != "minute" ||
		first.Start != "2031-01-15T10:20:00Z" || first.Limit["tokens"] != 5000 || first.Limit["requests"] != 10 {
		t.Errorf("first item %+v in %s", first, data)
	}

	// A settled reservation restores settled: nothing is settled twice.
	if err := q.Settle(ctx, r, quota.Amount{Tokens: 10, Requests: 1}); err != nil {
		t.Fatal(err)
	}
	settled, err := r.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	restored, err := q.Restore(settled)
	if err != nil {
		t.Fatal(err)
	}
	if !restored.Settled() {
		t.Fatal("restored reservation is not settled")
	}
	if err := q.Release(ctx, restored); err != nil {
		t.Fatal(err)
	}
	if u, _ := q.Usage(ctx, alice, quota.Minute); u.Tokens != 10 {
		t.Errorf("alice tokens = %d, want 10", u.Tokens)
	}
}

func TestRestoreRejectsBadData(t *testing.T) {
	q := quota.New(quota.NewMemoryStore(), quota.Options{})
	item := `{"kind":"app","key":"contoso/support-assistant","window":"hour","start":"2031-01-15T10:00:00Z","limit":{"tokens":10}}`
	for name, data := range map[string]string{
		"not JSON":           `{"v":1,`,
		"no version":         `{"request_id":"r","items":[]}`,
		"future version":     `{"v":3,"request_id":"r","items":[]}`,
		"unknown window":     `{"v":1,"items":[{"kind":"app","key":"k","window":"week","start":"2031-01-15T10:00:00Z","limit":{"tokens":10}}]}`,
		"empty scope":        `{"v":1,"items":[{"kind":"","key":"k","window":"hour","start":"2031-01-15T10:00:00Z","limit":{"tokens":10}}]}`,
		"no cap":             `{"v":1,"items":[{"kind":"app","key":"k","window":"hour","start":"2031-01-15T10:00:00Z","limit":{}}]}`,
		"not a window start": `{"v":1,"items":[{"kind":"app","key":"k","window":"hour","start":"2031-01-15T10:20:00Z","limit":{"tokens":10}}]}`,
		"negative amount":    `{"v":1,"amount":{"tokens":-1},"items":[` + item + `]}`,
	} {
		if _, err := q.Restore([]byte(data)); !errors.Is(err, quota.ErrInvalidReservation) {
			t.Errorf("%s: Restore = %v, want ErrInvalidReservation", name, err)
		}
	}
	if _, err := q.Restore([]byte(`{"v":1,"request_id":"r","amount":{"tokens":5},"items":[` + item + `]}`)); err != nil {
		t.Errorf("valid: %v", err)
	}
}

// A reservation admitted from a lease is encoded as version 2 with its
// lease owner, so that no version-1 reader refunds it.
func TestLeasedReservationEncoding(t *testing.T) {
	ctx := context.Background()
	now := func() time.Time { return midMonth }
	q := quota.New(quota.NewMemoryStore(), quota.Options{Now: now, Lease: quota.LeaseOptions{Owner: "server-a"}})
	r, err := q.Reserve(ctx, "req-1", codecLimits, tokens(100))
	if err != nil {
		t.Fatal(err)
	}
	data, err := r.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	var raw struct {
		V     int `json:"v"`
		Items []struct {
			LeaseOwner string `json:"lease_owner"`
		} `json:"items"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		t.Fatal(err)
	}
	if raw.V != 2 || len(raw.Items) != 3 || raw.Items[0].LeaseOwner != "server-a" {
		t.Errorf("encoded = %s, want version 2 with lease_owner server-a on every item", data)
	}
	back, err := q.Restore(data)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back.Items(), r.Items()) {
		t.Errorf("restored items = %+v\nwant %+v", back.Items(), r.Items())
	}
}
