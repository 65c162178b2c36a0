package door

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/jetway-gateway/jetway/internal/call"
	"github.com/jetway-gateway/jetway/internal/protocol"
	"github.com/jetway-gateway/jetway/internal/stream"
	"github.com/jetway-gateway/jetway/internal/telemetry"
)

// Options bound an HTTP door. Zero values mean the documented defaults
// (docs/configuration.md: the HTTP doors' bounds, shared).
type Options struct {
	MaxBodyBytes  int64                    // largest request body; default 256 KiB (the WebSocket's frame limit)
	WriteTimeout  time.Duration            // a write the client does not take within this is cut; default 10s
	OriginAllowed func(origin string) bool // the browser Origin policy; nil: no browser origin is allowed
	Intake        *Intake                  // the bodies both doors hold at once; nil: one of the defaults for this door alone
	Now           func() time.Time
}

// DefaultMaxFrameBytes is every door's default bound of an inbound frame
// or body (jetway.v1's, protocol.DefaultMaxFrame): the WebSocket doors'
// frames and the HTTP doors' bodies.
const DefaultMaxFrameBytes = protocol.DefaultMaxFrame

// Defaults fills the zero values.
func (o *Options) Defaults() {
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = DefaultMaxFrameBytes
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = 10 * time.Second
	}
	if o.OriginAllowed == nil {
		o.OriginAllowed = func(string) bool { return false }
	}
	if o.Intake == nil {
		o.Intake = NewIntake(0, 0, nil)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// CORS applies the browser Origin policy to r. It reports refused for an
// Origin the policy does not allow (the door answers 403 in its shape)
// and answered for a preflight it answered (204). Credentials are
// headers, never cookies, so any requested header may be allowed; expose
// names the response headers a page may read.
func CORS(w http.ResponseWriter, r *http.Request, allowed func(string) bool, expose string) (refused, answered bool) {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return false, false
	}
	if !allowed(origin) {
		return true, false
	}
	hd := w.Header()
	hd.Set("Access-Control-Allow-Origin", origin)
	hd.Add("Vary", "Origin")
	hd.Set("Access-Control-Expose-Headers", expose)
	if r.Method != http.MethodOptions {
		return false, false
	}
	hd.Set("Access-Control-Allow-Methods", "GET, POST, PUT, DELETE, OPTIONS")
	if req := r.Header.Get("Access-Control-Request-Headers"); req != "" {
		hd.Set("Access-Control-Allow-Headers", req)
	}
	hd.Set("Access-Control-Max-Age", "600")
	w.WriteHeader(http.StatusNoContent)
	return false, true
}

// SSE writes a door's Server-Sent Events to one client.
type SSE struct {
	W       http.ResponseWriter
	RC      *http.ResponseController
	Timeout time.Duration // a write the client does not take within this is cut
	Logger  *zap.Logger
	Metrics *telemetry.Metrics // may be nil
	Started bool               // the 200 and its headers went out
}

// Start sends the 200 and the event-stream headers.
func (s *SSE) Start() {
	h := s.W.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	s.W.WriteHeader(http.StatusOK)
	_ = s.RC.Flush()
	s.Started = true
}

// Write sends head (may be nil) and a batch's prepared events within the
// timeout; a client that does not take them is cut, as a slow WebSocket
// consumer is (slow_consumer), and a client that went is logged
// (client_gone). It reports success.
func (s *SSE) Write(head []byte, b *stream.Batch) bool {
	if head == nil && b.Chunks.Len() == 0 && b.TerminalBytes == nil {
		return true
	}
	_ = s.RC.SetWriteDeadline(time.Now().Add(s.Timeout))
	_, err := s.W.Write(head)
	for i := 0; err == nil && i < b.Chunks.Len(); i++ {
		_, err = s.W.Write(b.Chunks.At(i))
	}
	if err == nil && b.TerminalBytes != nil {
		_, err = s.W.Write(b.TerminalBytes)
	}
	if err == nil {
		err = s.RC.Flush()
	}
	if err == nil {
		return true
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		s.Logger.Warn("slow_consumer", zap.Duration("write_timeout", s.Timeout))
		s.Metrics.SlowConsumerClosed()
	} else {
		s.Logger.Info("client_gone", zap.Error(err))
	}
	return false
}

// WriteJSON sends v as the whole response (never cached), or fallback,
// a door's own internal error body, when v does not marshal.
func WriteJSON(w http.ResponseWriter, status int, v any, fallback string) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(fallback)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// RetryHeaders sets what an error tells the SDKs about retrying: when
// there is a wait, Retry-After (whole seconds, rounded up) and
// retry-after-ms (which the SDKs read first); and x-should-retry.
func RetryHeaders(h http.Header, retryAfterMs int64, shouldRetry bool) {
	if retryAfterMs > 0 {
		h.Set("Retry-After", strconv.FormatInt((retryAfterMs+999)/1000, 10))
		h.Set("retry-after-ms", strconv.FormatInt(retryAfterMs, 10))
	}
	h.Set("x-should-retry", strconv.FormatBool(shouldRetry))
}

// JSONProblem says briefly why a body is not the JSON a door takes.
func JSONProblem(err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("syntax error at byte %d", se.Offset)
	}
	if err == nil {
		return "null"
	}
	return protocol.Clip(err.Error())
}

// WriteWhole waits for the log's outcome and answers it whole: a success
// as its encoding in codec c (one JSON body, 200), an error through
// refuse (the door's shape and status), within the write timeout. When
// ctx ends first it logs client_gone: the answer continues, and the same
// Idempotency-Key gets it.
func WriteWhole(ctx context.Context, log *stream.Log, c stream.Codec, w http.ResponseWriter, rc *http.ResponseController,
	timeout time.Duration, logger *zap.Logger, refuse func(e *call.Failure)) {
	for b := range log.Follow(ctx, c, 0) {
		if b.Terminal == nil {
			continue
		}
		_ = rc.SetWriteDeadline(time.Now().Add(timeout))
		if e := b.Terminal.Error; e != nil {
			refuse(e)
			return
		}
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(b.TerminalBytes)
		return
	}
	logger.Info("client_gone", zap.String("hint", "the answer continues: send the request again with the same Idempotency-Key"))
}

// DefaultMaxHeaderBytes bounds the request line and headers of one HTTP
// request on both listeners (JETWAY_HTTP_MAX_HEADER_BYTES): a JWT is a
// few KiB, a browser's headers a few more.
const DefaultMaxHeaderBytes = 64 << 10

// maxNoRoutePath bounds the path a not-found line logs.
const maxNoRoutePath = 128

// NoRoute answers a path no route serves, on any listener: a JSON 404
// ({"error":{"code":"not_found",...}}, the shape of the WebSocket door's
// refusals, which OpenAI's SDKs also read), and a sampled line with the
// path clipped (anyone can ask for any path).
func NoRoute(logger *zap.Logger) http.Handler {
	sampled := telemetry.UnauthenticatedLogger(logger)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path := r.URL.Path
		if len(path) > maxNoRoutePath {
			path = path[:maxNoRoutePath] + "..."
		}
		sampled.Info("no_route", zap.String("method", protocol.Clip(r.Method)), zap.String("path", path))
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusNotFound)
		_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": protocol.CodeNotFound,
			"type": "not_found_error", "message": "no such endpoint: " + r.Method + " " + path}})
	})
}

// TypeProblem says, in the door's own field-path terms, what a JSON
// value of the wrong type should have been ("messages: expected an
// array, got a string"), never a Go type. It returns the path (the
// body's dotted JSON field names; "" for the body itself) and the text.
func TypeProblem(te *json.UnmarshalTypeError) (path, problem string) {
	path = te.Field
	where := path
	if where == "" {
		where = "the body"
	}
	return path, fmt.Sprintf("%s: expected %s, got %s", protocol.Clip(where), jsonKind(te.Type), jsonValue(te.Value))
}

// jsonKind is the JSON kind a Go type decodes from.
func jsonKind(t reflect.Type) string {
	if t == nil {
		return "another value"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	}
	return "another value"
}

// jsonValue names the JSON kind encoding/json reports as Value.
func jsonValue(v string) string {
	switch v {
	case "array", "object":
		return "an " + v
	case "string", "number", "bool", "boolean":
		return "a " + v
	}
	if strings.HasPrefix(v, "number") {
		return "a number"
	}
	return protocol.Clip(v)
}

// OpenAIErrorType is OpenAI's error type for an HTTP status, as its SDKs
// expect it (the Chat Completions and Responses doors' error shape).
func OpenAIErrorType(status int) string {
	switch {
	case status == http.StatusUnauthorized:
		return "authentication_error"
	case status == http.StatusForbidden:
		return "permission_error"
	case status == http.StatusNotFound:
		return "not_found_error"
	case status == http.StatusConflict:
		return "conflict_error"
	case status == http.StatusTooManyRequests:
		return "rate_limit_error"
	case status >= 500:
		return "server_error"
	default:
		return "invalid_request_error"
	}
}

// CompactJSON is a JSON value in compact form (its text, trimmed, when it
// is not valid JSON): how the doors compare a parameter's value with the
// values they accept.
func CompactJSON(raw json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(bytes.TrimSpace(raw))
	}
	return b.String()
}
