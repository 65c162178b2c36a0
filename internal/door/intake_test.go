package door

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/jetway-gateway/jetway/internal/gateway"
)

// intakeServer reads every body through in for the user named in the
// X-User header and holds it until release is closed; it answers the
// refusal's protocol code, or "read N".
func intakeServer(t *testing.T, in *Intake, release chan struct{}) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := in.Read(w, r, "test", r.Header.Get("X-User"), 1<<20)
		if err != nil {
			if errors.Is(err, ErrRefused) {
				_, _ = io.WriteString(w, gateway.Failure(err).Code)
				return
			}
			_, _ = io.WriteString(w, "error: "+err.Error())
			return
		}
		defer body.Release()
		<-release
		fmt.Fprintf(w, "read %d", len(body.Bytes))
	}))
	t.Cleanup(srv.Close)
	return srv
}

// holdBody opens a connection sending a body of n bytes one byte short.
func holdBody(t *testing.T, addr, user string, n int) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: x\r\nX-User: %s\r\nContent-Length: %d\r\n\r\n%s", user, n, strings.Repeat("a", n-1))
	return c
}

func waitUsed(t *testing.T, in *Intake, want int64) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); in.budget.Used() != want; {
		if time.Now().After(deadline) {
			t.Fatalf("budget holds %d bytes, want %d", in.budget.Used(), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func post(t *testing.T, url, user string, body []byte) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("X-User", user)
	rsp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer rsp.Body.Close()
	b, _ := io.ReadAll(rsp.Body)
	return string(b)
}

// The probe's reproduction: one user's connections each holding a body
// one byte short. Past the user's cap the next is rate_limited before a
// byte of its body is read; another user still gets in; the bytes held
// are the Content-Lengths of the requests let in, no more.
func TestIntakeUserCapCountsFromFirstByte(t *testing.T) {
	in := NewIntake(64<<20, 4, nil)
	release := make(chan struct{})
	srv := intakeServer(t, in, release)
	addr := strings.TrimPrefix(srv.URL, "http://")
	const n = 100 << 10
	for range 4 {
		holdBody(t, addr, "u1", n)
	}
	waitUsed(t, in, 4*n)
	if got := post(t, srv.URL, "u1", []byte("x")); got != "rate_limited" {
		t.Fatalf("the user's fifth request: %q, want rate_limited", got)
	}
	close(release)
	if got := post(t, srv.URL, "u2", []byte("hello")); got != "read 5" {
		t.Fatalf("another user: %q", got)
	}
}

// The server's budget: past it a request is answered busy, whoever sends it;
// bytes come back when the bodies are handed on.
func TestIntakeBudgetRefusesBusy(t *testing.T) {
	const n = 100 << 10
	in := NewIntake(3*n, 16, nil)
	release := make(chan struct{})
	srv := intakeServer(t, in, release)
	addr := strings.TrimPrefix(srv.URL, "http://")
	var held []net.Conn
	for i := range 3 {
		held = append(held, holdBody(t, addr, fmt.Sprint("u", i), n))
	}
	waitUsed(t, in, 3*n)
	if got := post(t, srv.URL, "other", make([]byte, 10)); got != "busy" {
		t.Fatalf("past the budget: %q, want busy", got)
	}
	close(release)
	// The senders go: their bodies never arrive, and their bytes come back.
	for _, c := range held {
		_ = c.Close()
	}
	waitUsed(t, in, 0)
	if got := post(t, srv.URL, "other", make([]byte, 10)); got != "read 10" {
		t.Fatalf("after release: %q", got)
	}
}

// A body without Content-Length is read in chunks, each counted as it
// arrives, and given back when released.
func TestIntakeChunkedBody(t *testing.T) {
	in := NewIntake(1<<20, 4, nil)
	release := make(chan struct{})
	close(release)
	srv := intakeServer(t, in, release)
	body := strings.Repeat("b", 3*intakeChunk+7)
	req, _ := http.NewRequest(http.MethodPost, srv.URL, io.MultiReader(strings.NewReader(body)))
	req.ContentLength = -1
	rsp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rsp.Body)
	_ = rsp.Body.Close()
	if string(b) != fmt.Sprint("read ", len(body)) {
		t.Fatalf("chunked: %q", b)
	}
	waitUsed(t, in, 0)
	if len(in.users) != 0 {
		t.Fatalf("user slots left: %v", in.users)
	}
}

// An unknown path is a JSON 404 naming it (clipped), never Go's plain text.
func TestNoRouteAnswersJSON(t *testing.T) {
	srv := httptest.NewServer(NoRoute(zap.NewNop()))
	defer srv.Close()
	rsp, err := http.Get(srv.URL + "/v1/nothing/" + strings.Repeat("p", 500))
	if err != nil {
		t.Fatal(err)
	}
	defer rsp.Body.Close()
	var got struct {
		Error struct{ Code, Message string }
	}
	if err := json.NewDecoder(rsp.Body).Decode(&got); err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	if rsp.StatusCode != 404 || rsp.Header.Get("Content-Type") != "application/json" || got.Error.Code != "not_found" ||
		!strings.Contains(got.Error.Message, "GET /v1/nothing/") || len(got.Error.Message) > maxNoRoutePath+64 {
		t.Fatalf("%d %s %+v", rsp.StatusCode, rsp.Header.Get("Content-Type"), got)
	}
}
