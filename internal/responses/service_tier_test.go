package responses

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/jetway-gateway/jetway/internal/auth"
	"github.com/jetway-gateway/jetway/internal/call"
	"github.com/jetway-gateway/jetway/internal/door"
	"github.com/jetway-gateway/jetway/internal/gateway"
	"github.com/jetway-gateway/jetway/internal/stream"
)

// service_tier, in a POST body and in WebSocket mode's response.create,
// is the core's tier: "auto" (and absent, and null) the app's; "scale"
// and anything else a 400 naming it.
func TestServiceTierValues(t *testing.T) {
	for _, ws := range []bool{false, true} {
		for value, want := range map[string]string{"": "", `null`: "", `"auto"`: "", `"default"`: call.TierDefault,
			`"flex"`: call.TierFlex, `"priority"`: call.TierPriority} {
			data := `{"input":"x"`
			if value != "" {
				data += `,"service_tier":` + value
			}
			b, err := decodeBody([]byte(data+"}"), ws)
			if err != nil || b.tier != want {
				t.Errorf("ws %v, service_tier %s: tier %q, %v; want %q", ws, value, b.tier, err, want)
			}
		}
		for value, code := range map[string]string{`"scale"`: "unsupported_parameter", `"standard_only"`: "invalid_request",
			`"Flex"`: "invalid_request", `3`: "invalid_request"} {
			_, err := decodeBody([]byte(`{"input":"x","service_tier":`+value+`}`), ws)
			var re *requestError
			if !errors.As(err, &re) || re.param != "service_tier" || re.code != code || !strings.Contains(re.msg, "service_tier") {
				t.Errorf("ws %v, service_tier %s: %v, want %s naming service_tier", ws, value, err, code)
			}
		}
	}
}

// tierDoor is a door over a gateway that answers every request served by
// the tier it asked for, its requests on submitted.
func tierDoor(t *testing.T, submitted chan<- gateway.Request) (*Door, *httptest.Server) {
	t.Helper()
	gw := &fakeGateway{logs: map[string]*stream.Log{}, submit: func(req gateway.Request) (*stream.Log, error) {
		submitted <- req
		if req.ServiceTier == "flex" && strings.Contains(req.Messages[len(req.Messages)-1].Text(), "refuse") {
			return nil, call.FieldErrorf(call.ErrInvalid, "service_tier", ` "flex" is not allowed for app support (its tier is default)`)
		}
		return answeredBy(req, req.ServiceTier, "ok"), nil
	}}
	d := New(fakeVerifier{}, gw, fakeConfig{}, NewMemoryStore(), nil, zap.NewNop(), door.Options{}, Options{})
	srv := httptest.NewServer(d)
	t.Cleanup(srv.Close)
	return d, srv
}

func create(t *testing.T, url, body, key string) (int, map[string]json.RawMessage) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+Path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer good")
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	return resp.StatusCode, m
}

// The tier asked for reaches the core; the response object says which
// tier served (none when the model call named none); a continuation
// (previous_response_id) asks for its own tier, as OpenAI's does: the
// previous response's is not inherited.
func TestServiceTierRequestAndEcho(t *testing.T) {
	submitted := make(chan gateway.Request, 4)
	_, srv := tierDoor(t, submitted)
	status, obj := create(t, srv.URL, `{"model":"mock-a","input":"hi","service_tier":"priority"}`, "tier-first-1")
	if req := <-submitted; status != 200 || req.ServiceTier != call.TierPriority || string(obj["service_tier"]) != `"priority"` {
		t.Fatalf("first: %d %s, Options.ServiceTier %q", status, obj["service_tier"], req.ServiceTier)
	}
	status, obj = create(t, srv.URL, `{"model":"mock-a","input":"and?","previous_response_id":"resp_tier-first-1"}`, "tier-next-01")
	if req := <-submitted; status != 200 || req.ServiceTier != "" || len(req.Messages) != 3 {
		t.Fatalf("continuation: %d, Options.ServiceTier %q, %d turns", status, req.ServiceTier, len(req.Messages))
	}
	if _, has := obj["service_tier"]; has {
		t.Errorf("an answer whose model call named no tier has service_tier %s", obj["service_tier"])
	}
	// The gateway's refusal of a tier names it as the parameter.
	status, obj = create(t, srv.URL, `{"model":"mock-a","input":"refuse","service_tier":"flex"}`, "tier-refused")
	<-submitted
	var e errorDetail
	_ = json.Unmarshal(obj["error"], &e)
	if status != 400 || e.Param == nil || *e.Param != "service_tier" || e.Type != "invalid_request_error" ||
		!strings.HasPrefix(e.Message, `service_tier "flex" is not allowed`) {
		t.Errorf("the gateway's refusal: %d %+v", status, e)
	}
	// A tier the door does not serve never reaches the core.
	status, obj = create(t, srv.URL, `{"model":"mock-a","input":"hi","service_tier":"scale"}`, "tier-scale-1")
	_ = json.Unmarshal(obj["error"], &e)
	if status != 400 || e.Param == nil || *e.Param != "service_tier" || len(submitted) != 0 {
		t.Errorf("scale: %d %+v, %d submitted", status, e, len(submitted))
	}
}

// WebSocket mode's response.create maps service_tier as a POST body does,
// and a continuation from the socket's memory does not inherit it.
func TestServiceTierWebSocketCreate(t *testing.T) {
	d, _ := tierDoor(t, make(chan gateway.Request, 1))
	caller := gateway.Caller{Principal: auth.Principal{Subject: "alice", Tenant: "contoso", App: "support"}}
	p, err := d.parse([]byte(`{"type":"response.create","model":"mock-a","input":"hi","service_tier":"flex"}`), "ws-tier-0001", true)
	if err == nil {
		err = d.prepareWith(context.Background(), caller, p, nil)
	}
	if err != nil || p.Request().ServiceTier != call.TierFlex {
		t.Fatalf("response.create: %v, %+v", err, p.Request().Options)
	}
	memory := func(string) []json.RawMessage { return p.conversation }
	next, err := d.parse([]byte(`{"type":"response.create","input":"and?","previous_response_id":"resp_ws-tier-0001"}`), "ws-tier-0002", true)
	if err == nil {
		err = d.prepareWith(context.Background(), caller, next, memory)
	}
	if err != nil || next.Request().ServiceTier != "" {
		t.Fatalf("continuation: %v, %+v", err, next.Request().Options)
	}
	if _, err := d.parse([]byte(`{"type":"response.create","input":"hi","service_tier":"batch"}`), "ws-tier-0003", true); err == nil {
		t.Fatal("a bad tier in response.create was taken")
	}
}

// The codec puts the tier that served in the final response object, in
// every framing, and nowhere before it.
func TestServiceTierInTheFinalResponse(t *testing.T) {
	done := *answerDone
	done.ServiceTier = call.TierFlex
	for _, f := range []framing{framingLines, framingWhole} {
		out := encodeAll(t, codec{f, nil}, answer, &stream.Terminal{Done: &done})
		lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
		for i, line := range lines {
			has := strings.Contains(line, `"service_tier":"flex"`)
			if last := i == len(lines)-1; has != last {
				t.Errorf("framing %d, line %d of %d: service_tier %v: %.120s", f, i, len(lines), has, line)
			}
		}
		if plain := encodeAll(t, codec{f, nil}, answer, &stream.Terminal{Done: answerDone}); strings.Contains(string(plain), "service_tier") {
			t.Errorf("framing %d: an answer whose model call named no tier has a service_tier", f)
		}
	}
	// The pending object of a background response knows no tier yet.
	log := stream.NewLog("alice", "bg-tier-0001", "h", time.Unix(1700000000, 0))
	d, _ := tierDoor(t, make(chan gateway.Request, 1))
	if b := d.pending(log, "mock-a"); strings.Contains(string(b), "service_tier") {
		t.Errorf("pending: %s", b)
	}
}
