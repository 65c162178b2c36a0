package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jetway-gateway/jetway/client"
	"github.com/jetway-gateway/jetway/internal/dynalitetest"
	"github.com/jetway-gateway/jetway/internal/gateway"
)

// TestAbuseRefusalFlood: 3,000 refused requests from one user cost at most
// the refusal budget's worth of usage records and log lines (the rest are
// rate_limited at once), other users are served throughout, and the same
// user is served again once its budget refills.
func TestAbuseRefusalFlood(t *testing.T) {
	w := newWorld(t, fastPace())
	g := w.startQuiet(nil)
	served(t, w, g.gw)
	before := g.footprint(t)
	const n = 3000
	ws := dialRaw(t, w, g.gw, "refuser")
	start := time.Now()
	codes := map[string]int{}
	errc := make(chan error, 1)
	go func() {
		for i := range n {
			b, _ := json.Marshal(map[string]any{"type": "request", "request_id": fmt.Sprintf("refused-%06d", i),
				"model": "not-allowed", "messages": []map[string]string{{"role": "user", "content": "hi"}}})
			if err := ws.WriteMessage(1, b); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	for range n {
		_ = ws.SetReadDeadline(time.Now().Add(30 * time.Second))
		_, data, err := ws.ReadMessage()
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		var f struct{ Code string }
		_ = json.Unmarshal(data, &f)
		codes[f.Code]++
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	after := g.footprint(t)
	served(t, w, g.gw) // another user, at once
	// The same user, once its budget refills (poll: each try is refused at once until then).
	c := w.dial(g.gw, "refuser", nil)
	deadline := time.Now().Add(20 * time.Second)
	for {
		call, err := c.Send(context.Background(), ask("am I back?"))
		if err != nil {
			t.Fatal(err)
		}
		_, err = waitCall(t, call, 20*time.Second)
		if err == nil {
			break
		}
		if !isCode(err, "rate_limited") || time.Now().After(deadline) {
			t.Fatalf("the refused user's normal request: %v", err)
		}
	}
	g.stop(t)
	usage := g.usageBytes(t)
	// At most the burst plus the refill over the flood's duration went through.
	budget := int64(gateway.DefaultMaxRefusalsPerUser) + int64(math.Ceil(took.Seconds()*gateway.DefaultMaxRefusalsPerUser)) + 1
	t.Logf("%d refused requests in %s: %v; usage files %d bytes; log +%d bytes; /metrics %d -> %d bytes (load: %s)",
		n, took.Round(time.Millisecond), codes, usage, after.logBytes-before.logBytes, before.metricsBytes, after.metricsBytes, loadAverage())
	if codes["model_not_allowed"] > int(budget) || codes["rate_limited"] < n-int(budget) {
		t.Errorf("answers %v: want at most %d model_not_allowed, the rest rate_limited", codes, budget)
	}
	if usage > (budget+4)*1024 {
		t.Errorf("usage files hold %d bytes: more than %d refusals' worth (1 KiB each)", usage, budget)
	}
	if d := after.logBytes - before.logBytes; d > budget*2048+8192 {
		t.Errorf("log grew by %d bytes: more than %d refusals' worth (2 KiB each)", d, budget)
	}
}

// TestRequestsTableFailureIsVisible: with the requests table set and
// DynamoDB unreachable, or no credentials, every request is a retryable
// busy, logged `rejected` with its cause: the server cannot renew its
// fleet membership (the members table is on the same DynamoDB), so it
// admits nothing; the failed calls are counted in
// jetway_dynamodb_calls_total{table="members"}.
func TestRequestsTableFailureIsVisible(t *testing.T) {
	for _, c := range []struct {
		name string
		env  map[string]string
	}{
		{"unreachable", map[string]string{"AWS_ENDPOINT_URL_DYNAMODB": "http://127.0.0.1:1"}},
		{"no credentials", map[string]string{"AWS_ENDPOINT_URL_DYNAMODB": "", // set below: a live dynalite
			"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "", "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
			"AWS_CONFIG_FILE": "/nonexistent"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld(t, fastPace())
			env := withEnv(c.env, "JETWAY_REQUESTS_TABLE", dynalitetest.TableName(t)+"-req")
			if env["AWS_ENDPOINT_URL_DYNAMODB"] == "" {
				env["AWS_ENDPOINT_URL_DYNAMODB"] = dynalitetest.Start(t)
				w.runCommand(map[string]string{"AWS_ENDPOINT_URL_DYNAMODB": env["AWS_ENDPOINT_URL_DYNAMODB"],
					"JETWAY_REQUESTS_TABLE": env["JETWAY_REQUESTS_TABLE"]}, "tables", "create")
			}
			g := w.start(env)
			cl := w.dial(g, "olga", nil)
			call, err := cl.Send(context.Background(), client.Request{RequestID: "busy-req-0001",
				Messages: []client.Message{{Role: "user", Content: "hi"}}})
			if err != nil {
				t.Fatal(err)
			}
			_, err = waitCall(t, call, 20*time.Second)
			var e *client.Error
			if !errors.As(err, &e) || e.Code != "busy" || !e.Retryable {
				t.Fatalf("with the requests table failing: %v, want retryable busy", err)
			}
			lines := g.logs.Await("rejected", "busy-req-0001", 1, 10*time.Second)
			if len(lines) != 1 || lines[0]["code"] != "busy" || !strings.Contains(fmt.Sprint(lines[0]["error"]), "fleet membership") ||
				lines[0]["user"] != "olga" || lines[0]["level"] != "warn" {
				t.Fatalf("rejected log lines %v, want one warn line with code busy and the cause", lines)
			}
			if n := failedDynamoCalls(t, g.Admin, "members"); n < 1 {
				t.Fatalf("jetway_dynamodb_calls_total{table=\"members\",outcome!=\"ok\"} = %v, want >= 1", n)
			}
			t.Logf("rejected: %q", lines[0]["error"])
		})
	}
}

// failedDynamoCalls sums jetway_dynamodb_calls_total for table over every
// outcome but ok.
func failedDynamoCalls(t *testing.T, admin, table string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var n float64
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, "jetway_dynamodb_calls_total{") || !strings.Contains(line, `table="`+table+`"`) ||
			strings.Contains(line, `outcome="ok"`) {
			continue
		}
		f, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		n += f
	}
	return n
}
