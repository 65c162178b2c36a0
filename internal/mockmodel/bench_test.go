package mockmodel_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/jetway-gateway/jetway/internal/mockmodel"
)

// discardWriter is a flushable http.ResponseWriter that drops the body.
type discardWriter struct {
	h       http.Header
	written int64
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) WriteHeader(int)             {}
func (w *discardWriter) Flush()                      {}
func (w *discardWriter) Write(p []byte) (int, error) { w.written += int64(len(p)); return len(p), nil }

// BenchmarkServeConverseStream is the handler's own cost for one unpaced
// 300-token answer, without network or client.
func BenchmarkServeConverseStream(b *testing.B) {
	srv := mockmodel.New(mockmodel.Options{TTFT: mockmodel.NoDelay, PerToken: mockmodel.NoDelay})
	const body = `{"system":[{"text":"You are terse."}],"messages":[{"role":"user","content":[{"text":"What is a jet bridge?"}]}]}`
	w := &discardWriter{h: make(http.Header)}
	b.ReportAllocs()
	for b.Loop() {
		r, _ := http.NewRequestWithContext(b.Context(), http.MethodPost, "/model/mock-a/converse-stream", strings.NewReader(body))
		clear(w.h)
		srv.ServeHTTP(w, r)
	}
	b.ReportMetric(float64(w.written)/float64(b.N), "bytes/op")
}
