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
	// Spool, when set, takes the records Firehose would lose: those that
	// do not fit the buffer, those given up on after MaxAttempts, and those
	// unsent when the final flush ends. While it holds records, new records
	// go behind them, so they reach Firehose in the order recorded. Run
	// drains it, oldest first, whenever Firehose accepts records (also the
	// spool a previous process left), and closes it when it returns.
	Spool *Spool
	// SpoolDrainRate bounds how many spooled records a second Run sends
	// back (so a fleet recovering at once does not throttle the stream)
	// over the records arriving meanwhile, which go behind the spooled
	// ones and are sent too; default DefaultSpoolDrainRate. The final
	// flush drains unpaced.
	SpoolDrainRate int
}

// DefaultSpoolDrainRate is the default FirehoseOptions.SpoolDrainRate:
// 1,000 records/s (about 0.7 MB/s) per task, ten times a busy task's
// request rate, so a backlog of 30 minutes at 100 requests/s drains in
// about 3 minutes (the rate is over the records arriving meanwhile); 20 tasks draining at once stay well under a
// stream's Direct PUT quota of 100,000 records/s (1,000 PutRecordBatch
// calls/s at 2 batches per task per second).
const DefaultSpoolDrainRate = 1000

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
	if o.SpoolDrainRate <= 0 {
		o.SpoolDrainRate = DefaultSpoolDrainRate
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

	spool *Spool // nil: none

	sent        atomic.Uint64
	failed      atomic.Uint64
	liveSpooled atomic.Int64 // records Record spooled since the drain last paced
}

// NewFirehoseSink returns a sink for the stream. m may be nil.
func NewFirehoseSink(client *firehose.Client, stream string, o FirehoseOptions, logger *zap.Logger, m *Metrics) *FirehoseSink {
	o.defaults()
	return &FirehoseSink{
		client: client, stream: stream, o: o, logger: logger, m: m,
		buf:   newRecordBuffer(o.MaxBufferedRecords, o.MaxBufferedBytes, o.MaxBatchRecords, o.MaxBatchBytes),
		spool: o.Spool,
	}
}

var _ Sink = (*FirehoseSink)(nil)

// Record queues r; it never waits on the network. With a spool it writes
// r to the spool when the buffer is full or the spool already holds
// records (one small local file write, while Firehose is failing);
// without one, or once Run has ended, a record that does not fit is
// dropped and counted.
func (s *FirehoseSink) Record(r UsageRecord) {
	line, err := encodeLine(r)
	if err != nil {
		s.buf.encodeFailed()
		s.failed.Add(1)
		s.m.UsageRecordsFailed(SinkFirehose, 1)
		return
	}
	if s.spool != nil && !s.buf.isClosed() {
		if n, _ := s.spool.Len(); n > 0 {
			s.liveSpooled.Add(1)
			s.toSpool([][]byte{line})
			return
		}
	}
	switch s.buf.addLine(line, r.TS) {
	case addOK:
	case addFull:
		if s.spool != nil {
			s.toSpool([][]byte{line})
			return
		}
		fallthrough
	default:
		s.buf.countDropped(1)
		s.m.UsageRecordsDropped(SinkFirehose, DropBufferFull, 1)
	}
}

// toSpool writes lines to the spool, counting what the spool dropped to
// make room (its oldest records) or could not write.
func (s *FirehoseSink) toSpool(lines [][]byte) {
	dropped, err := s.spool.Append(lines)
	s.m.UsageRecordsDropped(SinkFirehose, DropSpoolFull, dropped)
	if err != nil {
		s.m.UsageRecordsDropped(SinkFirehose, DropSpoolError, len(lines))
		dropped += len(lines)
		s.logger.Error("usage_spool_write_failed", zap.String("dir", s.spool.Dir()), zap.Int("records", len(lines)), zap.Error(err))
	}
	s.buf.countDropped(dropped) // in Stats and the usage_records_dropped log line
	s.reportSpool()
}

func (s *FirehoseSink) reportSpool() {
	if s.spool == nil {
		return
	}
	recs, bytes := s.spool.Len()
	s.m.UsageSpool(recs, bytes)
}

// Stats returns the sink's counters.
func (s *FirehoseSink) Stats() SinkStats {
	dropped, _ := s.buf.counts()
	st := SinkStats{Sent: s.sent.Load(), Failed: s.failed.Load(), Dropped: dropped, Buffered: s.buf.len()}
	if s.spool != nil {
		st.Spooled, _ = s.spool.Len()
	}
	return st
}

// Run sends buffered records every FlushInterval, and at once whenever a
// full batch is waiting, and drains the spool (at SpoolDrainRate) while
// Firehose accepts records, until ctx ends; then it stops taking records,
// sends what is buffered and then what is spooled within ShutdownTimeout,
// and returns. The error wraps ErrUndelivered when records were left unsent
// at the end: given up on, or left in the spool (logged as
// usage_spool_left with the count and bytes).
func (s *FirehoseSink) Run(ctx context.Context) error {
	if s.spool != nil {
		defer s.spool.Close()
		if n, b := s.spool.Len(); n > 0 {
			s.logger.Info("usage_spool_found", zap.String("dir", s.spool.Dir()), zap.Int("records", n), zap.Int64("bytes", b))
		}
		s.reportSpool()
	}
	t := time.NewTicker(s.o.FlushInterval)
	defer t.Stop()
	var lastDropLog time.Time
	pace := newPacer(s.o.SpoolDrainRate)
	for {
		select {
		case <-ctx.Done():
			s.buf.close()
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.o.ShutdownTimeout)
			failed := s.flush(fctx, true)
			left, leftBytes := s.drainSpool(fctx, true, nil)
			cancel()
			s.logDrops(time.Time{}, &lastDropLog)
			if left > 0 {
				s.logger.Warn("usage_spool_left", zap.String("dir", s.spool.Dir()), zap.Int("records", left), zap.Int64("bytes", leftBytes))
			}
			if failed > 0 || left > 0 {
				return fmt.Errorf("firehose sink: %d records given up on, %d left in the spool at shutdown: %w", failed, left, ErrUndelivered)
			}
			return nil
		case <-t.C:
		case <-s.buf.kick:
		}
		s.flush(ctx, false)
		s.drainSpool(ctx, false, pace)
		s.logDrops(time.Now(), &lastDropLog)
	}
}

// drainSpool sends spooled records, oldest first, batch by batch, until
// the spool is empty, a batch cannot be delivered (Firehose still down:
// the records stay) or ctx ends; pace (nil in the final flush) spaces
// the batches to SpoolDrainRate. It returns what is left in the spool.
// Records of a batch that were delivered are acknowledged; when only some
// were, the others are appended again at the end (so nothing is sent
// twice and nothing lost, at the cost of their order).
func (s *FirehoseSink) drainSpool(ctx context.Context, final bool, pace *pacer) (left int, leftBytes int64) {
	if s.spool == nil {
		return 0, 0
	}
	defer s.reportSpool()
	for ctx.Err() == nil {
		if n, _ := s.spool.Len(); n == 0 {
			break
		}
		batch, cur, err := s.spool.Peek(s.o.MaxBatchRecords, s.o.MaxBatchBytes)
		if err != nil {
			s.logger.Error("usage_spool_read_failed", zap.String("dir", s.spool.Dir()), zap.Error(err))
			break
		}
		if len(batch) == 0 {
			break
		}
		var sendable [][]byte
		for _, l := range batch {
			if len(l) > FirehoseMaxRecordBytes {
				s.giveUp(1, "record_too_large", nil)
				continue
			}
			sendable = append(sendable, l)
		}
		pending, _, _ := s.sendBatch(ctx, sendable, final)
		if len(pending) == len(sendable) && len(sendable) > 0 {
			break // nothing delivered: try again later
		}
		// Acknowledge first: appending the undelivered ones may make room
		// by dropping the oldest segment, which must not be this one.
		ackErr := s.spool.Ack(cur, cur.Len())
		if len(pending) > 0 {
			s.toSpool(pending)
		}
		if ackErr != nil {
			s.logger.Error("usage_spool_delete_failed", zap.String("dir", s.spool.Dir()), zap.Error(ackErr))
			break
		}
		// Records that arrived meanwhile (spooled by Record) do not use up
		// the rate: the backlog shrinks at SpoolDrainRate whatever the
		// task's own rate.
		if pace != nil && !pace.wait(ctx, len(batch)-int(s.liveSpooled.Swap(0))) {
			break
		}
	}
	return s.spool.Len()
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
		zap.Int("max_buffered_records", s.o.MaxBufferedRecords), zap.Int("max_buffered_bytes", s.o.MaxBufferedBytes),
		zap.Bool("spool", s.spool != nil))
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
			pending, code, err := s.sendBatch(ctx, b, final)
			if len(pending) > 0 && ctx.Err() == nil && s.spool != nil {
				// Firehose is failing: the rest goes to the spool behind
				// these, and so does what arrived meanwhile, in order; the
				// spool drains once Firehose takes records again.
				back := pending
				for _, rest := range batches[i+1:] {
					back = append(back, rest...)
				}
				for _, e := range s.buf.take() {
					back = append(back, e.line)
				}
				return failed + s.undeliverable(back, code, err)
			}
			if len(pending) > 0 && ctx.Err() == nil {
				failed += s.giveUp(len(pending), code, err)
				continue
			}
			if ctx.Err() != nil {
				var back [][]byte
				back = append(back, pending...)
				for _, rest := range batches[i+1:] {
					back = append(back, rest...)
				}
				if final {
					failed += s.undeliverable(back, "shutdown_timeout", ctx.Err())
				} else {
					s.buf.requeue(back)
				}
				return failed
			}
		}
	}
}

// undeliverable is where records go that Firehose did not take: the spool
// when there is one (returns 0), else they are given up on (returns how
// many).
func (s *FirehoseSink) undeliverable(lines [][]byte, code string, err error) int {
	if s.spool == nil {
		return s.giveUp(len(lines), code, err)
	}
	s.logger.Warn("usage_records_spooled", zap.String("sink", SinkFirehose), zap.String("stream", s.stream),
		zap.Int("records", len(lines)), zap.String("code", code), zap.Error(err))
	s.toSpool(lines)
	return 0
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
// the records still pending (not counted anywhere yet) when it stopped:
// after MaxAttempts, on an error another attempt cannot fix (code and err
// say which), or when ctx ended (err is nil then; check ctx).
func (s *FirehoseSink) sendBatch(ctx context.Context, batch [][]byte, final bool) (pending [][]byte, code string, err error) {
	pending = batch
	var lastCode string
	var lastErr error
	retry := backoff.Policy{Base: s.o.BaseBackoff, Max: s.o.MaxBackoff, Jitter: backoff.Equal, Attempts: s.o.MaxAttempts}
	for attempt := 1; ; attempt++ {
		if ctx.Err() != nil {
			return pending, "", nil
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
				return pending, "", nil
			}
			lastErr, lastCode = err, errorCode(err)
			if !retryableCallError(err) {
				return pending, lastCode, err
			}
			s.logger.Debug("firehose_put_failed", zap.Int("attempt", attempt), zap.Int("records", len(pending)),
				zap.String("code", lastCode), zap.Error(err))
		} else {
			next, code := failedRecords(pending, out)
			ok := len(pending) - len(next)
			s.sent.Add(uint64(ok))
			s.m.UsageRecordsSent(SinkFirehose, ok)
			if len(next) == 0 {
				return nil, "", nil
			}
			lastErr, lastCode = nil, code
			s.logger.Debug("firehose_records_failed", zap.Int("attempt", attempt), zap.Int("failed", len(next)),
				zap.Int("records", len(pending)), zap.String("code", code))
			pending = next
		}
		if err := retry.Wait(ctx, attempt); errors.Is(err, backoff.ErrExhausted) {
			return pending, lastCode, lastErr
		} else if err != nil {
			return pending, "", nil
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
