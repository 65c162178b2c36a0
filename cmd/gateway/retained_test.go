package main

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jetway-gateway/jetway/internal/dynalitetest"
	"github.com/jetway-gateway/jetway/internal/fleet"
	"github.com/jetway-gateway/jetway/internal/stream"
)

// Finished answers past JETWAY_RETAINED_ANSWER_BYTES are evicted oldest
// first (and counted); without a requests table an evicted answer is
// not_found, with one it is still resumed from the table.
func TestRetainedAnswerBudget(t *testing.T) {
	w := newWorld(t, fastPace())
	endpoint := dynalitetest.Start(t)
	table := dynalitetest.TableName(t) + "-req"
	if err := stream.CreateTable(context.Background(), dynalitetest.Client(t, endpoint), table); err != nil {
		t.Fatal(err)
	}
	if err := fleet.CreateTable(context.Background(), dynalitetest.Client(t, endpoint), table+"-members"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		env   map[string]string
		found bool
	}{
		{"memory only", map[string]string{"JETWAY_RETAINED_ANSWER_BYTES": "1"}, false},
		{"requests table", map[string]string{"JETWAY_RETAINED_ANSWER_BYTES": "1",
			"AWS_ENDPOINT_URL_DYNAMODB": endpoint, "JETWAY_REQUESTS_TABLE": table}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := w.start(c.env)
			rc := w.raw(g, w.token("keeper-"+strings.ReplaceAll(c.name, " ", "-"), "contoso", "contoso-support", time.Hour), nil)
			var first map[string]any
			for _, id := range []string{"retained-0001", "retained-0002"} {
				rc.send(map[string]any{"type": "request", "request_id": id, "messages": []map[string]string{{"role": "user", "content": "keep " + id}}})
				done, _ := rc.readUntil("done")
				if first == nil {
					first = done
				}
			}
			rc.send(map[string]any{"type": "resume", "request_id": "retained-0001"})
			if !c.found {
				if f := rc.read(); f["code"] != "not_found" {
					t.Fatalf("resume of an evicted answer without a table: %v, want not_found", f)
				}
			} else {
				done, _ := rc.readUntil("done")
				if done["text"] != first["text"] {
					t.Fatalf("resumed text %q, want %q", done["text"], first["text"])
				}
			}
			m := scrapeMetric(t, g.Admin, "jetway_retained_answers_evicted_total")
			if m < 1 {
				t.Fatalf("retained_answers_evicted_total = %v, want >= 1", m)
			}
		})
	}
}

// scrapeMetric is the value of an unlabelled metric on the admin listener.
func scrapeMetric(t *testing.T, admin, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	t.Fatalf("/metrics has no %s", name)
	return 0
}
