package firehosetest_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/firehose"
	"github.com/aws/aws-sdk-go-v2/service/firehose/types"
	"github.com/aws/smithy-go"

	"github.com/jetway-gateway/jetway/internal/telemetry/firehosetest"
)

func noRetries(o *firehose.Options) { o.Retryer = aws.NopRetryer{} }

func batch(n int, prefix string) []types.Record {
	recs := make([]types.Record, n)
	for i := range recs {
		recs[i] = types.Record{Data: fmt.Appendf(nil, "%s-%d\n", prefix, i)}
	}
	return recs
}

func TestRealClientPutRecordBatchAndPutRecord(t *testing.T) {
	srv := firehosetest.Start(t)
	client := srv.Client()
	ctx := context.Background()

	out, err := client.PutRecordBatch(ctx, &firehose.PutRecordBatchInput{
		DeliveryStreamName: aws.String("usage"), Records: batch(3, "a")})
	if err != nil {
		t.Fatalf("PutRecordBatch: %v", err)
	}
	if aws.ToInt32(out.FailedPutCount) != 0 || len(out.RequestResponses) != 3 || out.RequestResponses[0].RecordId == nil {
		t.Fatalf("response = %+v", out)
	}
	if _, err := client.PutRecord(ctx, &firehose.PutRecordInput{
		DeliveryStreamName: aws.String("usage"), Record: &types.Record{Data: []byte("single\n")}}); err != nil {
		t.Fatalf("PutRecord: %v", err)
	}
	got := srv.Records("usage")
	want := []string{"a-0\n", "a-1\n", "a-2\n", "single\n"}
	if len(got) != len(want) {
		t.Fatalf("stored %d records, want %d", len(got), len(want))
	}
	for i := range want {
		if string(got[i]) != want[i] {
			t.Errorf("record %d = %q, want %q", i, got[i], want[i])
		}
	}
}

func TestPartialFailureIsPerRecord(t *testing.T) {
	srv := firehosetest.Start(t)
	srv.FailNextRecords(2)
	out, err := srv.Client().PutRecordBatch(context.Background(), &firehose.PutRecordBatchInput{
		DeliveryStreamName: aws.String("s"), Records: batch(5, "p")})
	if err != nil {
		t.Fatalf("PutRecordBatch: %v", err)
	}
	if aws.ToInt32(out.FailedPutCount) != 2 {
		t.Fatalf("FailedPutCount = %d, want 2", aws.ToInt32(out.FailedPutCount))
	}
	for i, e := range out.RequestResponses {
		failed := e.ErrorCode != nil
		if failed != (i < 2) {
			t.Errorf("entry %d failed=%v", i, failed)
		}
		if failed && *e.ErrorCode != "ServiceUnavailableException" {
			t.Errorf("entry %d code %q", i, *e.ErrorCode)
		}
	}
	if n := len(srv.Records("s")); n != 3 {
		t.Fatalf("stored %d, want 3", n)
	}
}

func TestWholeCallFaults(t *testing.T) {
	srv := firehosetest.Start(t)
	srv.ThrottleNextCalls(1)
	srv.FailNextCalls(1, http.StatusBadRequest, "LimitExceededException")
	srv.FailNextCalls(1, http.StatusServiceUnavailable, "ServiceUnavailableException")
	client := srv.Client()
	for _, want := range []string{"ThrottlingException", "LimitExceededException", "ServiceUnavailableException"} {
		_, err := client.PutRecordBatch(context.Background(), &firehose.PutRecordBatchInput{
			DeliveryStreamName: aws.String("s"), Records: batch(1, "x")}, noRetries)
		var ae smithy.APIError
		if !errors.As(err, &ae) || ae.ErrorCode() != want {
			t.Fatalf("err = %v, want API error %s", err, want)
		}
	}
	var su *types.ServiceUnavailableException
	srv.FailNextCalls(1, http.StatusServiceUnavailable, "ServiceUnavailableException")
	_, err := client.PutRecordBatch(context.Background(), &firehose.PutRecordBatchInput{
		DeliveryStreamName: aws.String("s"), Records: batch(1, "x")}, noRetries)
	if !errors.As(err, &su) {
		t.Fatalf("err = %v, want the SDK's modeled *types.ServiceUnavailableException", err)
	}
	if n := len(srv.Records("s")); n != 0 {
		t.Fatalf("stored %d records during faults", n)
	}
}

func TestLimitsEnforced(t *testing.T) {
	srv := firehosetest.Start(t)
	client := srv.Client()
	cases := map[string][]types.Record{
		"501 records":          batch(501, "r"),
		"record over 1000 KiB": {{Data: bytes.Repeat([]byte("x"), firehosetest.MaxRecordBytes+1)}},
		"batch over 4 MiB": {
			{Data: bytes.Repeat([]byte("x"), firehosetest.MaxRecordBytes)},
			{Data: bytes.Repeat([]byte("x"), firehosetest.MaxRecordBytes)},
			{Data: bytes.Repeat([]byte("x"), firehosetest.MaxRecordBytes)},
			{Data: bytes.Repeat([]byte("x"), firehosetest.MaxRecordBytes)},
			{Data: bytes.Repeat([]byte("x"), firehosetest.MaxRecordBytes)},
		},
	}
	for name, recs := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := client.PutRecordBatch(context.Background(), &firehose.PutRecordBatchInput{
				DeliveryStreamName: aws.String("s"), Records: recs}, noRetries)
			var ia *types.InvalidArgumentException
			if !errors.As(err, &ia) {
				t.Fatalf("err = %v, want InvalidArgumentException", err)
			}
		})
	}
}

func TestWaitRecords(t *testing.T) {
	srv := firehosetest.Start(t)
	go func() {
		_, _ = srv.Client().PutRecordBatch(context.Background(), &firehose.PutRecordBatchInput{
			DeliveryStreamName: aws.String("w"), Records: batch(4, "w")})
	}()
	if got := srv.WaitRecords(t, "w", 4, 5*time.Second); len(got) != 4 {
		t.Fatalf("got %d", len(got))
	}
}
