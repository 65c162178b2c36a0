package main

import "testing"

// TestRollingResumeMidToolInput: a tool call's pieces are not plain text,
// so their stored form differs between record formats; with this
// release's default (v1) the previous release resumes, mid input, a tool
// call this one started, and the other way round, frame for frame.
func TestRollingResumeMidToolInput(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the previous release")
	}
	prev := previousRelease(t)
	for _, dir := range []struct {
		name     string
		from, to int
	}{{"previous to this", 0, 1}, {"this to previous", 1, 0}} {
		t.Run(dir.name, func(t *testing.T) {
			w := newWorld(t, toolResumePace)
			resumeMidToolInput(t, w, w.clusterOf([]string{prev, ""}, nil), dir.from, dir.to)
		})
	}
}
