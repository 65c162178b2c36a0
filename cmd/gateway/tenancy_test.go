package main

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/jetway-gateway/jetway/internal/auth"
	"github.com/jetway-gateway/jetway/internal/auth/authtest"
	"github.com/jetway-gateway/jetway/internal/dynalitetest"
	"github.com/jetway-gateway/jetway/internal/mockmodel"
)

// twoTenantToken is a token of alice, who is in both tenant groups, for
// an app client of either tenant (or of another app of the same tenant).
func (w *world) twoTenantToken(clientID string) string {
	now := time.Now()
	return w.issuer.Token(w.t, authtest.Claims{Subject: "alice", ClientID: clientID,
		Groups: []string{"tenant:contoso", "tenant:fabrikam"}, IssuedAt: now, ExpiresAt: now.Add(time.Hour)})
}

// TestRequestIDsBelongToTenantAppAndUser: the same person (one Cognito sub)
// in two tenants, or in two apps of one tenant, owns two separate sets of
// request ids: from the other tenant or app, a resume is not_found and a
// re-send is a new request, charged there, never the other's answer. With
// the requests table the other tenant's request lives on another server,
// so the lookup goes to the table.
func TestRequestIDsBelongToTenantAppAndUser(t *testing.T) {
	for _, table := range []bool{false, true} {
		t.Run(fmt.Sprintf("requests table %v", table), func(t *testing.T) {
			w := newWorld(t, fastPace())
			env := map[string]string{}
			if table {
				env = map[string]string{"AWS_ENDPOINT_URL_DYNAMODB": dynalitetest.Start(t),
					"JETWAY_REQUESTS_TABLE": dynalitetest.TableName(t) + "-req"}
				w.runCommand(env, "tables", "create")
			}
			first := w.start(withEnv(env, "JETWAY_SERVER_ID", "task-0"))
			second := first
			if table {
				second = w.start(withEnv(env, "JETWAY_SERVER_ID", "task-1"))
			}
			contoso := w.raw(first, w.twoTenantToken("contoso-support"), nil)
			if f := contoso.ws.Subprotocol(); f != "jetway.v1" {
				t.Fatalf("subprotocol %q", f)
			}
			req := map[string]any{"type": "request", "request_id": "shared-req-0001",
				"messages": []map[string]string{{"role": "user", "content": "contoso's secret"}}}
			contoso.send(req)
			accContoso, _ := contoso.readUntil("accepted")
			doneContoso, _ := contoso.readUntil("done")

			for _, client := range []string{"fabrikam-docs", "contoso-dev"} {
				other := w.raw(second, w.twoTenantToken(client), nil)
				other.send(map[string]any{"type": "resume", "request_id": "shared-req-0001", "after_seq": 0})
				if e := other.read(); e["type"] != "error" || e["code"] != "not_found" {
					t.Fatalf("%s: resume of the other tenant's or app's request: %v, want not_found", client, e)
				}
			}
			// A re-send of the same id and body from fabrikam is fabrikam's own request.
			fabrikam := w.raw(second, w.twoTenantToken("fabrikam-docs"), nil)
			fabrikam.send(req)
			acc, _ := fabrikam.readUntil("accepted")
			quota, _ := acc["quota"].(map[string]any)
			if acc["cached"] == true || quota["limit"] != float64(20000) {
				t.Fatalf("fabrikam's re-send was answered with %v (contoso's was %v), want fabrikam's own quota (limit 20000)", acc, accContoso)
			}
			fabrikam.readUntil("done")
			if n := w.mock.Requests("mock-a"); n != 2 {
				t.Fatalf("model calls %d, want 2: fabrikam's request must call the model and be charged", n)
			}
			// And the reverse: contoso still has its own answer.
			contoso.send(map[string]any{"type": "resume", "request_id": "shared-req-0001", "after_seq": 0})
			if f, _ := contoso.readUntil("done"); f["text"] != doneContoso["text"] {
				t.Fatalf("contoso's resume: %v", f)
			}
		})
	}
}

// TestPerUserCapsPerTenantAndApp: the per-user connection and in-flight
// caps count alice@contoso, alice@fabrikam and alice on another contoso
// app apart.
func TestPerUserCapsPerTenantAndApp(t *testing.T) {
	w := newWorld(t, mockmodel.Options{TTFT: time.Millisecond, PerToken: 20 * time.Millisecond})
	g := w.start(map[string]string{"JETWAY_MAX_CONNS_PER_USER": "1", "JETWAY_MAX_INFLIGHT_PER_USER": "1"})
	contoso := w.raw(g, w.twoTenantToken("contoso-support"), nil)
	d := websocket.Dialer{Subprotocols: []string{"jetway.v1"}, HandshakeTimeout: 5 * time.Second}
	_, resp, err := d.Dial(g.URL(), http.Header{"Authorization": {"Bearer " + w.twoTenantToken("contoso-support")}})
	if err == nil || resp == nil || resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("second contoso connection: %v (resp %v), want 429", err, resp)
	}
	fabrikam := w.raw(g, w.twoTenantToken("fabrikam-docs"), nil) // a different (tenant, app, user)
	w.raw(g, w.twoTenantToken("contoso-dev"), nil)               // another app of the same tenant
	msg := []map[string]string{{"role": "user", "content": "slow"}}
	contoso.send(map[string]any{"type": "request", "request_id": "cap-contoso-1", "messages": msg})
	contoso.readUntil("accepted")
	fabrikam.send(map[string]any{"type": "request", "request_id": "cap-fabrikam-1", "messages": msg})
	if f := fabrikam.read(); f["type"] != "accepted" {
		t.Fatalf("fabrikam's request while contoso's is in flight: %v, want accepted", f)
	}
	contoso.send(map[string]any{"type": "request", "request_id": "cap-contoso-2", "messages": msg})
	if f, _ := contoso.readUntil("error"); f["code"] != "rate_limited" || f["request_id"] != "cap-contoso-2" {
		t.Fatalf("contoso's second request: %v, want rate_limited", f)
	}
}

// supportOwner is the request-record owner of sub on Contoso's support
// assistant (the app of w.dial): records belong to tenant, app and user.
func supportOwner(sub string) string {
	return auth.Principal{Tenant: "contoso", App: "support-assistant", Subject: sub}.Owner()
}

func withEnv(env map[string]string, k, v string) map[string]string {
	out := map[string]string{k: v}
	for k, v := range env {
		out[k] = v
	}
	return out
}
