package fleet_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jetway-gateway/jetway/internal/dynalitetest"
	"github.com/jetway-gateway/jetway/internal/fleet"
)

// The DynamoDB store against dynalite: the conditions that make
// liveness safe (a gone member is never revived; marking gone loses to a
// renewal).
func TestDynamoStore(t *testing.T) {
	client := dynalitetest.Client(t, dynalitetest.Start(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := fleet.CreateTable(ctx, client, "members"); err != nil {
		t.Fatal(err)
	}
	s := fleet.NewDynamoStore(client, "members")
	now := time.UnixMilli(time.Now().UnixMilli())
	a := fleet.Item{Member: fleet.Member{ID: "task-a-1f2e", Started: now.Add(-time.Minute), Heartbeat: now,
		Load: fleet.Load{Sessions: 3, Streams: 2, InFlight: 1}, Draining: true}, Expires: now.Add(time.Hour)}
	b := fleet.Item{Member: fleet.Member{ID: "task-b-9a8b", Started: now, Heartbeat: now}, Expires: now.Add(time.Hour)}
	for _, it := range []fleet.Item{a, b} {
		if err := s.Put(ctx, it); err != nil {
			t.Fatal(err)
		}
	}
	items, err := s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got fleet.Item
	for _, it := range items {
		if it.ID == a.ID {
			got = it
		}
	}
	if len(items) != 2 || !got.Heartbeat.Equal(a.Heartbeat) || !got.Started.Equal(a.Started) || got.Load != a.Load ||
		!got.Draining || got.Gone || got.Expires.Unix() != a.Expires.Unix() {
		t.Fatalf("listed %+v, want %+v among 2", got, a)
	}
	// A renewal since the read wins over marking gone.
	renewed := b
	renewed.Heartbeat = now.Add(time.Second)
	if err := s.Put(ctx, renewed); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkGone(ctx, b.ID, b.Heartbeat, now.Add(time.Hour)); !errors.Is(err, fleet.ErrChanged) {
		t.Fatalf("MarkGone with an old heartbeat = %v, want ErrChanged", err)
	}
	if err := s.MarkGone(ctx, b.ID, renewed.Heartbeat, now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	// A member marked gone is never revived by its own late heartbeat.
	renewed.Heartbeat = now.Add(2 * time.Second)
	if err := s.Put(ctx, renewed); !errors.Is(err, fleet.ErrGone) {
		t.Fatalf("Put after gone = %v, want ErrGone", err)
	}
	// Only a gone item is forgotten (deleted).
	if err := s.Forget(ctx, a.ID); !errors.Is(err, fleet.ErrChanged) {
		t.Fatalf("Forget of a live item = %v, want ErrChanged", err)
	}
	if err := s.Forget(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	// A clean stop marks itself gone unconditionally.
	if err := s.MarkGone(ctx, a.ID, time.Time{}, now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	items, err = s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 1 {
		t.Fatalf("%d items listed, want a's alone (b forgotten)", len(items))
	}
	for _, it := range items {
		if !it.Gone {
			t.Errorf("%s not gone", it.ID)
		}
	}
}
