package session

import (
	"testing"

	"github.com/jetway-gateway/jetway/internal/stream/streamtest"
)

// TestRetainedAnswerBytes: a finished 300-token answer this door streamed
// keeps what the registry counts for it (its budget holds what the
// process holds): the heap it keeps is within 25% of the estimate
// (docs/configuration.md, "Sizing the retained answers", has the sizes).
func TestRetainedAnswerBytes(t *testing.T) {
	r := streamtest.MeasureRetained(t, frames{}, 200, 300)
	t.Logf("session: a 300-token answer keeps %d bytes on the heap; the registry counts %d", r.Heap, r.Estimate)
	if r.Heap > r.Estimate*5/4 || r.Heap < r.Estimate*3/4 {
		t.Errorf("heap %d bytes per answer, estimate %d: more than 25%% apart", r.Heap, r.Estimate)
	}
}
