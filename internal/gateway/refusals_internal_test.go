package gateway

import (
	"fmt"
	"testing"
	"time"
)

// TestRefusalBucketsAreBounded: however many users are refused, the map
// holds at most max buckets; past it, full buckets are dropped and the
// rest share the overflow bucket.
func TestRefusalBucketsAreBounded(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	r := newRefusals(2, func() time.Time { return now })
	r.max = 100
	for i := range 10_000 {
		r.charge(fmt.Sprintf("t/a/user-%d", i))
		if len(r.users) > r.max+1 { // the tracked users and the shared bucket
			t.Fatalf("%d buckets after %d users, bound %d+1", len(r.users), i+1, r.max)
		}
	}
	// Users past the bound share one budget: spent by the flood above.
	if limited, _ := r.limit("t/a/someone-new"); !limited {
		t.Fatal("a user past the bound is not charged against the shared bucket")
	}
	now = now.Add(time.Second) // every bucket full again: all can be dropped
	r.charge("t/a/late-user")
	if _, ok := r.users["t/a/late-user"]; !ok || len(r.users) > 2 {
		t.Fatalf("after the buckets refilled: %d buckets, late user tracked %v", len(r.users), ok)
	}
}
