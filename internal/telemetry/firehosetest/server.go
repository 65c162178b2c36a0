// Package firehosetest is a local Amazon Data Firehose endpoint for tests:
// an HTTP server speaking the Firehose JSON 1.1 protocol
// (application/x-amz-json-1.1, X-Amz-Target: Firehose_20150804.PutRecordBatch
// and .PutRecord) that the real aws-sdk-go-v2 firehose client talks to when
// its BaseEndpoint points here. It stores what arrives and has fault knobs:
// per-record failures, throttled calls, failed calls, an outage (SetDown).
//
// It enforces Firehose's PutRecordBatch limits (500 records, 4 MiB per call,
// 1,000 KiB per record) and answers a violation with HTTP 400
// InvalidArgumentException, so a client that splits badly fails its test.
package firehosetest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/firehose"
)

// Limits Firehose applies to PutRecordBatch.
const (
	MaxBatchRecords = 500
	MaxBatchBytes   = 4 << 20
	MaxRecordBytes  = 1000 << 10
)

const (
	targetPrefix = "Firehose_20150804."
	contentType  = "application/x-amz-json-1.1"
)

// Call is one request the server answered.
type Call struct {
	Operation string // PutRecordBatch or PutRecord
	Stream    string
	Records   int    // records in the request
	Bytes     int    // record data bytes (decoded)
	Failed    int    // records answered with a per-record error
	ErrorType string // whole-call error (__type) or ""
}

// Server is the fake endpoint; its zero value is not usable, see New.
type Server struct {
	// URL is the endpoint (set by Start; empty for a Server used as a bare
	// http.Handler).
	URL string

	mu          sync.Mutex
	records     map[string][][]byte
	calls       []Call
	failRecords int               // next records to fail per-record
	failMatch   func([]byte) bool // nil: any record
	callFaults  []fault           // next calls to fail whole
	down        bool              // every call fails whole (SetDown)
	nextID      int64
	changed     chan struct{} // closed and replaced on every stored record
}

type fault struct {
	status int
	typ    string
	msg    string
}

// New returns a server with no faults armed.
func New() *Server {
	return &Server{records: map[string][][]byte{}, changed: make(chan struct{})}
}

// Start serves a new Server on a local port until the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	s := New()
	hs := httptest.NewServer(s)
	t.Cleanup(hs.Close)
	s.URL = hs.URL
	return s
}

// NewClient returns a real SDK firehose client for endpoint: region
// us-east-1, static credentials, BaseEndpoint set. The client's own retryer
// is left at the SDK default.
func NewClient(endpoint string) *firehose.Client {
	return firehose.New(firehose.Options{
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
		BaseEndpoint: aws.String(endpoint),
	})
}

// Client is NewClient(s.URL).
func (s *Server) Client() *firehose.Client { return NewClient(s.URL) }

// FailNextRecords makes the next k records that arrive (across calls, in
// order) fail with per-record ErrorCode ServiceUnavailableException, the
// rest of their batch succeeding, as Firehose does on a partial failure.
func (s *Server) FailNextRecords(k int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failRecords += k
	s.failMatch = nil
}

// FailNextRecordsMatching is FailNextRecords restricted to records for
// which match returns true (others succeed and do not use up k), to fail
// chosen records in the middle of a batch.
func (s *Server) FailNextRecordsMatching(k int, match func(data []byte) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failRecords += k
	s.failMatch = match
}

// ThrottleNextCalls makes the next n calls fail whole with HTTP 400 and
// __type ThrottlingException (nothing stored).
func (s *Server) ThrottleNextCalls(n int) {
	s.FailNextCalls(n, http.StatusBadRequest, "ThrottlingException")
}

// FailNextCalls makes the next n calls fail whole with the given HTTP status
// and __type, for example 400 LimitExceededException or 503
// ServiceUnavailableException (nothing stored).
func (s *Server) FailNextCalls(n, status int, errorType string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.callFaults = append(s.callFaults, fault{status: status, typ: errorType, msg: "injected by firehosetest"})
	}
}

// SetDown makes every call that arrives fail whole with HTTP 503
// ServiceUnavailableException (nothing stored; its Call has no record
// counts) until SetDown(false): an outage of any length.
func (s *Server) SetDown(down bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = down
}

// Records returns a copy of the records stored for the stream, in arrival
// order.
func (s *Server) Records(stream string) [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([][]byte, len(s.records[stream]))
	for i, r := range s.records[stream] {
		out[i] = append([]byte(nil), r...)
	}
	return out
}

// Calls returns a copy of the calls answered so far.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Call(nil), s.calls...)
}

// WaitRecords waits until the stream holds at least n records or the
// timeout passes, and returns what it holds.
func (s *Server) WaitRecords(t testing.TB, stream string, n int, timeout time.Duration) [][]byte {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		have := len(s.records[stream])
		ch := s.changed
		s.mu.Unlock()
		if have >= n {
			return s.Records(stream)
		}
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("firehosetest: stream %q holds %d records after %v, want %d", stream, have, timeout, n)
			return nil
		}
	}
}

// ServeHTTP answers the Firehose JSON protocol.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		writeError(w, http.StatusMethodNotAllowed, "UnknownOperationException", "POST only")
		return
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, contentType) {
		writeError(w, http.StatusBadRequest, "SerializationException", fmt.Sprintf("content type %q, want %s", ct, contentType))
		return
	}
	op, ok := strings.CutPrefix(r.Header.Get("X-Amz-Target"), targetPrefix)
	if !ok || (op != "PutRecordBatch" && op != "PutRecord") {
		writeError(w, http.StatusBadRequest, "UnknownOperationException", "unsupported target "+r.Header.Get("X-Amz-Target"))
		return
	}
	// Down is decided when the call arrives, before its body is read: a
	// call the client gave up on while the server was down (its deadline
	// passed while a slow handler read the body) must not be stored once
	// the test brings the server back up.
	s.mu.Lock()
	if s.down {
		s.calls = append(s.calls, Call{Operation: op, ErrorType: "ServiceUnavailableException"})
		s.mu.Unlock()
		writeError(w, http.StatusServiceUnavailable, "ServiceUnavailableException", "down (firehosetest SetDown)")
		return
	}
	s.mu.Unlock()
	body, err := io.ReadAll(r.Body)
	if err != nil {
		writeError(w, http.StatusBadRequest, "SerializationException", err.Error())
		return
	}
	switch op {
	case "PutRecordBatch":
		s.putRecordBatch(w, body)
	case "PutRecord":
		s.putRecord(w, body)
	}
}

type wireRecord struct {
	Data []byte `json:"Data"` // base64 on the wire; encoding/json decodes it
}

type entry struct {
	RecordID     string `json:"RecordId,omitempty"`
	ErrorCode    string `json:"ErrorCode,omitempty"`
	ErrorMessage string `json:"ErrorMessage,omitempty"`
}

func (s *Server) putRecordBatch(w http.ResponseWriter, body []byte) {
	var in struct {
		DeliveryStreamName string       `json:"DeliveryStreamName"`
		Records            []wireRecord `json:"Records"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		writeError(w, http.StatusBadRequest, "SerializationException", err.Error())
		return
	}
	call := Call{Operation: "PutRecordBatch", Stream: in.DeliveryStreamName, Records: len(in.Records)}
	for _, rec := range in.Records {
		call.Bytes += len(rec.Data)
	}
	if msg := validateBatch(in.DeliveryStreamName, in.Records, call.Bytes); msg != "" {
		call.ErrorType = "InvalidArgumentException"
		s.record(call)
		writeError(w, http.StatusBadRequest, call.ErrorType, msg)
		return
	}

	s.mu.Lock()
	if f, ok := s.faultLocked(); ok {
		call.ErrorType = f.typ
		s.calls = append(s.calls, call)
		s.mu.Unlock()
		writeError(w, f.status, f.typ, f.msg)
		return
	}
	resp := struct {
		Encrypted        bool    `json:"Encrypted"`
		FailedPutCount   int     `json:"FailedPutCount"`
		RequestResponses []entry `json:"RequestResponses"`
	}{RequestResponses: make([]entry, len(in.Records))}
	for i, rec := range in.Records {
		if s.failRecords > 0 && (s.failMatch == nil || s.failMatch(rec.Data)) {
			s.failRecords--
			resp.FailedPutCount++
			resp.RequestResponses[i] = entry{ErrorCode: "ServiceUnavailableException", ErrorMessage: "Slow down."}
			continue
		}
		resp.RequestResponses[i] = entry{RecordID: s.storeLocked(in.DeliveryStreamName, rec.Data)}
	}
	call.Failed = resp.FailedPutCount
	s.calls = append(s.calls, call)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, resp)
}

func (s *Server) putRecord(w http.ResponseWriter, body []byte) {
	var in struct {
		DeliveryStreamName string     `json:"DeliveryStreamName"`
		Record             wireRecord `json:"Record"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		writeError(w, http.StatusBadRequest, "SerializationException", err.Error())
		return
	}
	call := Call{Operation: "PutRecord", Stream: in.DeliveryStreamName, Records: 1, Bytes: len(in.Record.Data)}
	if msg := validateBatch(in.DeliveryStreamName, []wireRecord{in.Record}, call.Bytes); msg != "" {
		call.ErrorType = "InvalidArgumentException"
		s.record(call)
		writeError(w, http.StatusBadRequest, call.ErrorType, msg)
		return
	}
	s.mu.Lock()
	if f, ok := s.faultLocked(); ok {
		call.ErrorType = f.typ
		s.calls = append(s.calls, call)
		s.mu.Unlock()
		writeError(w, f.status, f.typ, f.msg)
		return
	}
	if s.failRecords > 0 && (s.failMatch == nil || s.failMatch(in.Record.Data)) {
		// PutRecord has no per-record result: a record failure is the
		// call's ServiceUnavailableException.
		s.failRecords--
		call.Failed, call.ErrorType = 1, "ServiceUnavailableException"
		s.calls = append(s.calls, call)
		s.mu.Unlock()
		writeError(w, http.StatusServiceUnavailable, "ServiceUnavailableException", "Slow down.")
		return
	}
	id := s.storeLocked(in.DeliveryStreamName, in.Record.Data)
	s.calls = append(s.calls, call)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, struct {
		RecordID  string `json:"RecordId"`
		Encrypted bool   `json:"Encrypted"`
	}{RecordID: id})
}

func validateBatch(stream string, recs []wireRecord, total int) string {
	switch {
	case stream == "":
		return "DeliveryStreamName is required"
	case len(recs) == 0:
		return "Records must have at least 1 member"
	case len(recs) > MaxBatchRecords:
		return fmt.Sprintf("Records has %d members, at most %d allowed", len(recs), MaxBatchRecords)
	case total > MaxBatchBytes:
		return fmt.Sprintf("batch holds %d bytes of record data, at most %d allowed", total, MaxBatchBytes)
	}
	for i, r := range recs {
		if len(r.Data) == 0 {
			return fmt.Sprintf("Records[%d].Data is empty", i)
		}
		if len(r.Data) > MaxRecordBytes {
			return fmt.Sprintf("Records[%d].Data has %d bytes, at most %d allowed", i, len(r.Data), MaxRecordBytes)
		}
	}
	return ""
}

// faultLocked is the whole-call failure the next call gets, if any; s.mu
// must be held.
func (s *Server) faultLocked() (fault, bool) {
	if len(s.callFaults) == 0 {
		return fault{}, false
	}
	f := s.callFaults[0]
	s.callFaults = s.callFaults[1:]
	return f, true
}

func (s *Server) record(c Call) {
	s.mu.Lock()
	s.calls = append(s.calls, c)
	s.mu.Unlock()
}

// storeLocked keeps a record and returns its id; s.mu must be held.
func (s *Server) storeLocked(stream string, data []byte) string {
	s.nextID++
	s.records[stream] = append(s.records[stream], append([]byte(nil), data...))
	close(s.changed)
	s.changed = make(chan struct{})
	return fmt.Sprintf("rec-%012d", s.nextID)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", contentType)
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// writeError answers the way Firehose does: the error type in the body's
// __type (and in X-Amzn-ErrorType), a message, and the HTTP status.
func writeError(w http.ResponseWriter, status int, typ, msg string) {
	w.Header().Set("X-Amzn-ErrorType", typ)
	writeJSON(w, status, struct {
		Type    string `json:"__type"`
		Message string `json:"message"`
	}{typ, msg})
}
