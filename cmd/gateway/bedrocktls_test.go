package main

import (
	"encoding/pem"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jetway-gateway/jetway/internal/mockmodel"
)

// TestStreamsFromTLSBedrock: with JETWAY_BEDROCK_CA_FILE the gateway trusts
// the mock's self-signed certificate and streams a whole answer over HTTPS
// (HTTP/2 when the endpoint offers it, as AWS endpoints do); without it the
// same endpoint is refused as untrusted.
func TestStreamsFromTLSBedrock(t *testing.T) {
	w := newWorld(t, fastPace())
	ts := httptest.NewUnstartedServer(mockmodel.New(fastPace()))
	ts.EnableHTTP2 = true
	ts.Config.ErrorLog = log.New(io.Discard, "", 0) // the untrusting gateway's handshakes fail on purpose
	ts.StartTLS()
	t.Cleanup(ts.Close)
	ca := filepath.Join(t.TempDir(), "mock-ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}

	g := w.start(map[string]string{"AWS_ENDPOINT_URL_BEDROCK_RUNTIME": ts.URL, "JETWAY_BEDROCK_CA_FILE": ca})
	c := w.dial(g, "tls-user", nil)
	call, err := c.Send(t.Context(), ask("over tls"))
	if err != nil {
		t.Fatal(err)
	}
	done, err := waitCall(t, call, 30*time.Second)
	if err != nil {
		t.Fatalf("request through the TLS mock: %v", err)
	}
	if done.Text != expected("mock-a", "over tls", done.Chunks) || done.Chunks == 0 || done.StopReason != "end_turn" {
		t.Fatalf("answer over TLS: %d chunks, stop %q", done.Chunks, done.StopReason)
	}

	untrusting := w.start(map[string]string{"AWS_ENDPOINT_URL_BEDROCK_RUNTIME": ts.URL})
	c2 := w.dial(untrusting, "tls-user-2", nil)
	call2, err := c2.Send(t.Context(), ask("over tls, untrusted"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := waitCall(t, call2, 30*time.Second); err == nil {
		t.Fatal("a gateway without JETWAY_BEDROCK_CA_FILE trusted the self-signed mock")
	}
	// The log is read from the gateway's output as it comes: wait for the line.
	waitFor(t, 10*time.Second, func() bool { return strings.Contains(untrusting.logs.String(), "certificate") },
		func() string { return "the refusal's log names the certificate:\n" + untrusting.logs.String() })
}

func TestBedrockCAFileMustHoldACertificate(t *testing.T) {
	w := newWorld(t, fastPace())
	bad := filepath.Join(t.TempDir(), "empty.pem")
	if err := os.WriteFile(bad, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for k, v := range w.env {
		env[k] = v
	}
	env["JETWAY_BEDROCK_CA_FILE"] = bad
	err := run(t.Context(), nil, func(k string) string { return env[k] }, &strings.Builder{})
	if err == nil || !strings.Contains(err.Error(), "JETWAY_BEDROCK_CA_FILE") {
		t.Fatalf("run with a CA file without a certificate: %v", err)
	}
}
