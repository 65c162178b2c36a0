package telemetry

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/firehose"
	"github.com/aws/aws-sdk-go-v2/service/firehose/types"
	"github.com/aws/smithy-go"
	"go.uber.org/zap"

	"github.com/jetway-gateway/jetway/internal/backoff"
)

// Firehose's PutRecordBatch limits (they cannot be raised).
const (
	FirehoseMaxBatchRecords = 500
	FirehoseMaxBatchBytes   = 4 << 20    // 4 MiB of record data per call
	FirehoseMaxRecordBytes  = 1000 << 10 // 1,000 KiB per record, before base64
)

// FirehoseOptions configure a FirehoseSink. Zero values mean the defaults.
type FirehoseOptions struct {
	// FlushInterval is how often buffered records are sent; default 1s.
	// A full batch (500 records or 4 MiB) is sent at once.
	FlushInterval time.Duration
	// MaxBufferedRecords and MaxBufferedBytes bound the buffer; a record
	// that does not fit is dropped and counted. Defaults 10,000 and 16 MiB.
	MaxBufferedRecords int
	MaxBufferedBytes   int
	// MaxBatchRecords and MaxBatchBytes bound one PutRecordBatch call;
	// defaults (and upper limits) 500 and 4 MiB.
	MaxBatchRecords int
	MaxBatchBytes   int
	// MaxAttempts bounds the calls made for one batch, the first included,
	// for whole-call errors (throttling, 5xx, network) and for records the
	// response marks failed alike; default 5. Then the records still unsent
	// are counted failed and logged.
	MaxAttempts int
	// BaseBackoff and MaxBackoff shape the jittered exponential wait between
	// attempts: attempt n waits uniformly in [d/2, d], d = BaseBackoff*2^(n-1)
	// capped at MaxBackoff. Defaults 100ms and 5s.
	BaseBackoff time.Duration
	MaxBackoff  time.Duration
	// CallTimeout bounds one PutRecordBatch call; default 10s. A call in
	// flight when Run's ctx ends is allowed to finish (within CallTimeout)
	// so its outcome is known and nothing is sent twice.
	CallTimeout time.Duration
	// ShutdownTimeout bounds the final flush after Run's ctx ends; default
	// 10s.
	ShutdownTimeout time.Duration
	// DropLogInterval is the least time between two log lines about dropped
	// records; default 10s.
	DropLogInterval time.Duration
}

func (o *FirehoseOptions) defaults() {
	if o.FlushInterval <= 0 {
		o.FlushInterval = time.Second
	}
	if o.MaxBufferedRecords <= 0 {
		o.MaxBufferedRecords = 10_000
	}
	if o.MaxBufferedBytes <= 0 {
		o.MaxBufferedBytes = 16 << 20
	}
	if o.MaxBatchRecords <= 0 || o.MaxBatchRecords > FirehoseMaxBatchRecords {
		o.MaxBatchRecords = FirehoseMaxBatchRecords
	}
	if o.MaxBatchBytes <= 0 || o.MaxBatchBytes > FirehoseMaxBatchBytes {
		o.MaxBatchBytes = FirehoseMaxBatchBytes
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = 5
	}
	if o.BaseBackoff <= 0 {
		o.BaseBackoff = 100 * time.Millisecond
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 5 * time.Second
	}
	if o.CallTimeout <= 0 {
		o.CallTimeout = 10 * time.Second
	}
	if o.ShutdownTimeout <= 0 {
		o.ShutdownTimeout = 10 * time.Second
	}
	if o.DropLogInterval <= 0 {
		o.DropLogInterval = 10 * time.Second
	}
}

// FirehoseSink sends usage records to an Amazon Data Firehose stream with
// PutRecordBatch, each record one JSON object ending in '\n' (so the S3
// objects are NDJSON). Batches hold at most 500 records and 4 MiB; a record
// over 1,000 KiB is counted failed. When a response marks records failed
// (FailedPutCount, RequestResponses[i].ErrorCode) only those are sent again,
// so a partial failure neither loses nor duplicates records; whole-call
// errors are retried the same way. The sink owns retrying: it turns the
// SDK's retryer off for its calls, so the attempts and waits are exactly
// MaxAttempts and the documented backoff.
//
// One batch is in flight at a time (about 10,000 records/s at 50 ms per
// call, far above one task's request rate).
type FirehoseSink struct {
	client *firehose.Client
	stream string
	o      FirehoseOptions
	logger *zap.Logger
	m      *Metrics
	buf    *recordBuffer

	sent   atomic.Uint64
	failed atomic.Uint64
}

// NewFirehoseSink returns a sink for the stream. m may be nil.
func NewFirehoseSink(client *firehose.Client, stream string, o FirehoseOptions, logger *zap.Logger, m *Metrics) *FirehoseSink {
	o.defaults()
	return &FirehoseSink{
		client: client, stream: stream, o: o, logger: logger, m: m,
		buf: newRecordBuffer(o.MaxBufferedRecords, o.MaxBufferedBytes, o.MaxBatchRecords, o.MaxBatchBytes),
	}
}

var _ Sink = (*FirehoseSink)(nil)

// Record queues r; it never blocks. When the buffer is full (or Run has
// ended) r is dropped and counted.
func (s *FirehoseSink) Record(r UsageRecord) {
	ok, failed := s.buf.add(r)
	switch {
	case failed:
		s.failed.Add(1)
		s.m.UsageRecordsFailed(SinkFirehose, 1)
	case !ok:
		s.m.UsageRecordsDropped(SinkFirehose, 1)
	}
}

// Stats returns the sink's counters.
func (s *FirehoseSink) Stats() SinkStats {
	dropped, _ := s.buf.counts()
	return SinkStats{Sent: s.sent.Load(), Failed: s.failed.Load(), Dropped: dropped, Buffered: s.buf.len()}
}

// Run sends buffered records every FlushInterval, and at once whenever a
// full batch is waiting, until ctx ends; then it stops taking records, sends
// what is buffered within ShutdownTimeout, and returns. The error wraps
// ErrUndelivered when records were left unsent at the end.
func (s *FirehoseSink) Run(ctx context.Context) error {
	t := time.NewTicker(s.o.FlushInterval)
	defer t.Stop()
	var lastDropLog time.Time
	for {
		select {
		case <-ctx.Done():
			s.buf.close()
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.o.ShutdownTimeout)
			failed := s.flush(fctx, true)
			cancel()
			s.logDrops(time.Time{}, &lastDropLog)
			if failed > 0 {
				return fmt.Errorf("firehose sink: %d records at shutdown: %w", failed, ErrUndelivered)
			}
			return nil
		case <-t.C:
		case <-s.buf.kick:
		}
		s.flush(ctx, false)
		s.logDrops(time.Now(), &lastDropLog)
	}
}

func (s *FirehoseSink) logDrops(now time.Time, last *time.Time) {
	if !now.IsZero() && now.Sub(*last) < s.o.DropLogInterval {
		return
	}
	dropped, failed := s.buf.unreported()
	if dropped == 0 && failed == 0 {
		return
	}
	*last = now
	s.logger.Warn("usage_records_dropped", zap.String("sink", SinkFirehose), zap.String("stream", s.stream),
		zap.Uint64("dropped", dropped), zap.Uint64("unencodable", failed),
		zap.Int("max_buffered_records", s.o.MaxBufferedRecords), zap.Int("max_buffered_bytes", s.o.MaxBufferedBytes))
}

// flush sends everything buffered, batch by batch, and returns how many
// records were given up on. When ctx ends: in a regular flush the unsent
// records go back to the buffer for the final flush; in the final flush
// (ctx is the shutdown budget) they are given up on.
func (s *FirehoseSink) flush(ctx context.Context, final bool) (failed int) {
	for {
		entries := s.buf.take()
		if len(entries) == 0 {
			return failed
		}
		lines := make([][]byte, 0, len(entries))
		for _, e := range entries {
			if len(e.line) > FirehoseMaxRecordBytes {
				failed += s.giveUp(1, "record_too_large", nil)
				continue
			}
			lines = append(lines, e.line)
		}
		batches := splitBatches(lines, s.o.MaxBatchRecords, s.o.MaxBatchBytes)
		for i, b := range batches {
			n, left := s.sendBatch(ctx, b, final)
			failed += n
			if len(left) > 0 || ctx.Err() != nil {
				var back [][]byte
				back = append(back, left...)
				for _, rest := range batches[i+1:] {
					back = append(back, rest...)
				}
				if final {
					failed += s.giveUp(len(back), "shutdown_timeout", ctx.Err())
				} else {
					s.buf.requeue(back)
				}
				return failed
			}
		}
	}
}

// splitBatches cuts lines into PutRecordBatch-sized batches, in order.
func splitBatches(lines [][]byte, maxRecs, maxBytes int) [][][]byte {
	var out [][][]byte
	var cur [][]byte
	size := 0
	for _, l := range lines {
		if len(cur) > 0 && (len(cur) == maxRecs || size+len(l) > maxBytes) {
			out = append(out, cur)
			cur, size = nil, 0
		}
		cur = append(cur, l)
		size += len(l)
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// noSDKRetries turns the SDK's own retryer off for one call: the sink's
// loop is the only retry policy.
func noSDKRetries(o *firehose.Options) { o.Retryer = aws.NopRetryer{} }

// sendBatch delivers one batch, resending only failed records. It returns
// how many records were given up on and, when ctx ended before the batch
// was settled, the records still pending (not counted anywhere yet).
func (s *FirehoseSink) sendBatch(ctx context.Context, batch [][]byte, final bool) (failed int, left [][]byte) {
	pending := batch
	var lastCode string
	var lastErr error
	retry := backoff.Policy{Base: s.o.BaseBackoff, Max: s.o.MaxBackoff, Jitter: backoff.Equal, Attempts: s.o.MaxAttempts}
	for attempt := 1; ; attempt++ {
		if ctx.Err() != nil {
			return 0, pending
		}
		recs := make([]types.Record, len(pending))
		for i, l := range pending {
			recs[i] = types.Record{Data: l}
		}
		cctx, cancel := s.callContext(ctx, final)
		out, err := s.client.PutRecordBatch(cctx, &firehose.PutRecordBatchInput{
			DeliveryStreamName: aws.String(s.stream),
			Records:            recs,
		}, noSDKRetries)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return 0, pending
			}
			lastErr, lastCode = err, errorCode(err)
			if !retryableCallError(err) {
				return s.giveUp(len(pending), lastCode, err), nil
			}
			s.logger.Debug("firehose_put_failed", zap.Int("attempt", attempt), zap.Int("records", len(pending)),
				zap.String("code", lastCode), zap.Error(err))
		} else {
			next, code := failedRecords(pending, out)
			ok := len(pending) - len(next)
			s.sent.Add(uint64(ok))
			s.m.UsageRecordsSent(SinkFirehose, ok)
			if len(next) == 0 {
				return 0, nil
			}
			lastErr, lastCode = nil, code
			s.logger.Debug("firehose_records_failed", zap.Int("attempt", attempt), zap.Int("failed", len(next)),
				zap.Int("records", len(pending)), zap.String("code", code))
			pending = next
		}
		if err := retry.Wait(ctx, attempt); errors.Is(err, backoff.ErrExhausted) {
			return s.giveUp(len(pending), lastCode, lastErr), nil
		} else if err != nil {
			return 0, pending
		}
	}
}

// callContext bounds one call by CallTimeout. Outside the final flush the
// call does not end with Run's ctx, so a call already sent is settled
// rather than abandoned (abandoning invites duplicates).
func (s *FirehoseSink) callContext(ctx context.Context, final bool) (context.Context, context.CancelFunc) {
	if final {
		return context.WithTimeout(ctx, s.o.CallTimeout)
	}
	return context.WithTimeout(context.WithoutCancel(ctx), s.o.CallTimeout)
}

// failedRecords returns the records the response marks failed, in order,
// and the first error code seen.
func failedRecords(sent [][]byte, out *firehose.PutRecordBatchOutput) ([][]byte, string) {
	if aws.ToInt32(out.FailedPutCount) == 0 {
		return nil, ""
	}
	if len(out.RequestResponses) != len(sent) {
		// Firehose promises one entry per record; without them we cannot
		// tell which failed, so all are resent (duplicates are possible).
		return sent, "malformed_response"
	}
	var next [][]byte
	code := ""
	for i, r := range out.RequestResponses {
		if r.ErrorCode != nil {
			next = append(next, sent[i])
			if code == "" {
				code = *r.ErrorCode
			}
		}
	}
	return next, code
}

// giveUp counts n records failed and logs it; it returns n.
func (s *FirehoseSink) giveUp(n int, code string, err error) int {
	if n <= 0 {
		return 0
	}
	s.failed.Add(uint64(n))
	s.m.UsageRecordsFailed(SinkFirehose, n)
	s.logger.Error("usage_records_failed", zap.String("sink", SinkFirehose), zap.String("stream", s.stream),
		zap.Int("records", n), zap.String("code", code), zap.Int("max_attempts", s.o.MaxAttempts), zap.Error(err))
	return n
}

func errorCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "timeout"
	}
	return "transport"
}

// retryableCallError: everything except errors that another attempt cannot
// fix (a missing stream, bad input, a KMS key problem).
func retryableCallError(err error) bool {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "ResourceNotFoundException", "InvalidArgumentException", "InvalidKMSResourceException",
			"InvalidSourceException", "ValidationException", "AccessDeniedException":
			return false
		}
	}
	return true
}
