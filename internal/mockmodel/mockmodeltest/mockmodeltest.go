// Package mockmodeltest runs the mock Bedrock endpoint for tests of any
// package and builds real bedrockruntime clients pointed at it.
package mockmodeltest

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"

	"github.com/jetway-gateway/jetway/internal/mockmodel"
)

// Start serves a mockmodel.Server with options o on a loopback port until the
// test ends, and returns it with its base URL.
func Start(tb testing.TB, o mockmodel.Options) (*mockmodel.Server, string) {
	tb.Helper()
	srv := mockmodel.New(o)
	ts := httptest.NewServer(srv)
	tb.Cleanup(ts.Close)
	return srv, ts.URL
}

// Client returns a plain bedrockruntime client for the endpoint at url:
// region us-east-1, static credentials, one attempt per call (the SDK
// retryer never hides a fault from the test), and its own HTTP transport,
// whose idle connections are closed when the test ends so goroutine-leak
// checks pass. Call it after Start so that cleanup closes the client first.
//
// Calling ConverseStream on it directly needs the per-call SDK workarounds
// that router.Bedrock applies (see internal/router/bedrock.go).
func Client(tb testing.TB, url string) *bedrockruntime.Client {
	tb.Helper()
	return ClientIn(tb, url, "us-east-1")
}

// ClientIn is Client for region: its calls are signed for region, which is
// how the mock tells the regions apart on its one endpoint.
func ClientIn(tb testing.TB, url, region string) *bedrockruntime.Client {
	tb.Helper()
	tr := &http.Transport{MaxIdleConns: 2000, MaxIdleConnsPerHost: 2000}
	tb.Cleanup(tr.CloseIdleConnections)
	return bedrockruntime.New(bedrockruntime.Options{
		Region:           region,
		Credentials:      credentials.NewStaticCredentialsProvider("test", "test", ""),
		BaseEndpoint:     aws.String(url),
		HTTPClient:       &http.Client{Transport: tr},
		RetryMaxAttempts: 1,
	})
}
