package openai

import (
	"bufio"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/jetway-gateway/jetway/internal/door"
	"github.com/jetway-gateway/jetway/internal/gateway"
	"github.com/jetway-gateway/jetway/internal/protocol"
	"github.com/jetway-gateway/jetway/internal/stream"
	"github.com/jetway-gateway/jetway/internal/telemetry"
)

// A body that fails validation here is refused through the gateway
// (Refuse: its usage record, rejected line and refusal budget), as a frame
// on the WebSocket is; the answer is the 400 naming the parameter, or
// what the gateway answers instead (past the budget: 429). The next
// request is served (issue 23).
func TestBadBodiesAreRefusedThroughTheGateway(t *testing.T) {
	refused := make(chan gateway.Request, 8)
	gw := fakeGateway{
		submit: func(c gateway.Caller, req gateway.Request) (*stream.Log, int, error) {
			return finished(req, "ok"), 0, nil
		},
		refuse: func(c gateway.Caller, req gateway.Request, err error) error {
			if c.Principal.Subject != "alice" || gateway.Failure(err).Code != protocol.CodeInvalidRequest {
				t.Errorf("refusal of %v by %+v", err, c)
			}
			refused <- req
			if req.Temperature != nil && *req.Temperature == 7 {
				return errors.Join(errors.New("spent"), gateway.ErrBusy) // stands for the gateway's own answer
			}
			return err
		},
	}
	srv := httptest.NewServer(New(fakeVerifier{}, gw, fakeApps{}, nil, zap.NewNop(), door.Options{MaxBodyBytes: 4 << 10}))
	t.Cleanup(srv.Close)
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	for i, tc := range []struct {
		body   string
		status int
		param  string
	}{
		{`{` + msgs + `,"temperature":5}`, 400, "temperature"},
		{`{` + msgs + `,"n":2}`, 400, "n"},
		{`{"messages":[]}`, 400, ""},
		{`{"messages":[{"role":"user","content":"` + strings.Repeat("x", 5<<10) + `"}]}`, 413, ""},
		{`{` + msgs + `,"temperature":7}`, 503, ""},
	} {
		key := "refused-0" + string(rune('0'+i))
		resp := post(t, srv.URL, tc.body, map[string]string{"Idempotency-Key": key})
		e := decodeError(t, resp.Body)
		if resp.StatusCode != tc.status || tc.param != "" && (e.Param == nil || *e.Param != tc.param) {
			t.Errorf("%.40s: %d %+v, want %d naming %q", tc.body, resp.StatusCode, e, tc.status, tc.param)
		}
		select {
		case r := <-refused:
			if !r.IsRequest || r.RequestID != key || r.Door != gateway.DoorOpenAI || r.ReceivedAt.IsZero() {
				t.Errorf("%.40s: refused as %+v", tc.body, r)
			}
		default:
			t.Errorf("%.40s: answered without the gateway's refusal", tc.body)
		}
		if resp := post(t, srv.URL, `{`+msgs+`}`, nil); resp.StatusCode != 200 {
			t.Fatalf("after %.40s: %d", tc.body, resp.StatusCode)
		}
	}
}

// A Last-Event-ID past the answer's end gets no chunk events, and the
// finish event carries the answer's own last id, never the client's
// number (issue 23: it was echoed back).
func TestLastEventIDPastTheEnd(t *testing.T) {
	var log *stream.Log
	srv, _ := newDoor(t, func(c gateway.Caller, req gateway.Request) (*stream.Log, int, error) {
		if log == nil {
			log = finished(req, "Hel", "lo")
			return log, 0, nil
		}
		return log, req.AfterSeq, nil
	}, door.Options{})
	body := hello + `,"stream":true}`
	readEvents(t, post(t, srv.URL, body, map[string]string{"Idempotency-Key": "past-end-01"}).Body)
	for _, after := range []string{"2", "3", "999999999"} {
		resp := post(t, srv.URL, body, map[string]string{"Idempotency-Key": "past-end-01", "Last-Event-ID": after})
		evs := readEvents(t, resp.Body)
		if resp.StatusCode != 200 || len(evs) != 2 || evs[0].id != "2" || !strings.Contains(evs[0].data, `"finish_reason":"stop"`) ||
			evs[1].data != "[DONE]" {
			t.Errorf("Last-Event-ID %s: %d %+v, want the finish event with id 2, then [DONE]", after, resp.StatusCode, evs)
		}
	}
}

// A body trickled past the read timeout is answered 408, never a 200
// with an empty body (issue 23); the door's next request is served.
func TestTrickledBodyIsATimeout(t *testing.T) {
	srv := httptest.NewUnstartedServer(New(fakeVerifier{}, fakeGateway{submit: func(c gateway.Caller, req gateway.Request) (*stream.Log, int, error) {
		return finished(req, "ok"), 0, nil
	}}, fakeApps{}, nil, zap.NewNop(), door.Options{}))
	srv.Config.ReadTimeout = 300 * time.Millisecond
	srv.Start()
	t.Cleanup(srv.Close)
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := `{"messages":[{"role":"user","content":"hi"}]}`
	// Headers and the body's first bytes; the rest never comes.
	if _, err := conn.Write([]byte("POST " + PathChat + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer good\r\n" +
		"Content-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body[:10])); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second)) // a bound, not a wait: the server answers at its read timeout
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a trickled body: %v", err)
	}
	e := decodeError(t, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestTimeout || e.Code != protocol.CodeTimeout || e.Message == "" {
		t.Fatalf("trickled body: %d %+v, want 408 timeout", resp.StatusCode, e)
	}
	if resp := post(t, srv.URL, body, nil); resp.StatusCode != 200 {
		t.Fatalf("the next request: %d", resp.StatusCode)
	}
}

// Bad tokens at this door: every one counted, their lines sampled (issue 23).
func TestBadTokensHaveBoundedLogVolume(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	reg := prometheus.NewRegistry()
	srv := httptest.NewServer(New(fakeVerifier{}, fakeGateway{submit: func(c gateway.Caller, req gateway.Request) (*stream.Log, int, error) {
		return finished(req, "ok"), 0, nil
	}}, fakeApps{}, telemetry.NewMetrics(reg), zap.New(core), door.Options{}))
	t.Cleanup(srv.Close)
	const n = 300
	start := time.Now()
	for range n {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+PathChat, strings.NewReader(hello+"}"))
		req.Header.Set("Authorization", "Bearer forged")
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("a bad token: %v %v", err, resp)
		}
		resp.Body.Close()
	}
	bound := (int(time.Since(start)/time.Second) + 2) * telemetry.UnauthenticatedLinesPerSecond
	if lines := logs.FilterMessage("token_rejected").Len(); lines == 0 || lines > bound || logs.Len() != lines {
		t.Fatalf("%d token_rejected lines of %d for %d bad tokens, want 1..%d and nothing else", lines, logs.Len(), n, bound)
	}
	fams, _ := reg.Gather()
	var got float64
	for _, f := range fams {
		if f.GetName() == "jetway_unauthenticated_refusals_total" {
			got = f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	if got != n {
		t.Fatalf("jetway_unauthenticated_refusals_total = %v, want %d", got, n)
	}
	if resp := post(t, srv.URL, hello+"}", nil); resp.StatusCode != 200 {
		t.Fatalf("a good token after the flood: %d", resp.StatusCode)
	}
}
