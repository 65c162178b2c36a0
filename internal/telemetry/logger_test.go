package telemetry

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// The unauthenticated refusals' logger writes at most
// UnauthenticatedLinesPerSecond lines of each message a second, however
// many refusals there are (issue 23: 2,000 bad tokens in 0.39 s wrote
// 532 KB); other messages keep their own allowance.
func TestUnauthenticatedLoggerIsBounded(t *testing.T) {
	var buf bytes.Buffer
	logger, err := NewLogger("info", &buf)
	if err != nil {
		t.Fatal(err)
	}
	sampled := UnauthenticatedLogger(logger).With()
	start := time.Now()
	for range 2000 {
		sampled.Info("token_rejected")
		sampled.Info("upgrade_refused")
	}
	// The allowance of every second tick the flood touched.
	bound := (int(time.Since(start)/time.Second) + 2) * UnauthenticatedLinesPerSecond
	logger.Info("unsampled")
	counts := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		for _, m := range []string{"token_rejected", "upgrade_refused", "unsampled"} {
			if strings.Contains(line, `"msg":"`+m+`"`) {
				counts[m]++
			}
		}
	}
	for _, m := range []string{"token_rejected", "upgrade_refused"} {
		if counts[m] < 1 || counts[m] > min(bound, 2000) || bound < 2000 && counts[m] == 2000 {
			t.Errorf("%s: %d lines for 2000 refusals, want 1..%d", m, counts[m], bound)
		}
	}
	if counts["unsampled"] != 1 {
		t.Errorf("the unsampled logger wrote %d lines, want 1", counts["unsampled"])
	}
}
