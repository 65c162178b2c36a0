package router

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkAffinityOrder is what placements add to a call before it is
// made: ranking two placements for a conversation and the affinity
// lookup (a remembered move, the worst case).
func BenchmarkAffinityOrder(b *testing.B) {
	a := newAffinity(time.Minute, 1000, func(string) uint64 { return 0 })
	t := &Target{ID: "claude", Places: []Place{{Name: "us-east-1"}, {Name: "us-west-2"}}}
	conv := "0123456789abcdef"
	_, first := a.order(t, conv)
	other := t.Places[0]
	if other.Name == first.Name {
		other = t.Places[1]
	}
	a.answered(t, conv, first, other)
	b.ReportAllocs()
	for b.Loop() {
		if order, _ := a.order(t, conv); order[0].Name != other.Name {
			b.Fatal(fmt.Sprint("order ", order))
		}
	}
}
