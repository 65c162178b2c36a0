package router

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

func httpError(status int) error {
	return &smithy.OperationError{ServiceID: "Bedrock Runtime", OperationName: "ConverseStream", Err: &smithyhttp.ResponseError{
		Response: &smithyhttp.Response{Response: &http.Response{StatusCode: status}},
		Err:      errors.New("boom"),
	}}
}

func TestKindOf(t *testing.T) {
	cases := []struct {
		err  error
		want ErrorKind
	}{
		{&types.ThrottlingException{}, KindThrottled},
		{&types.ServiceQuotaExceededException{}, KindThrottled},
		{&types.ModelNotReadyException{}, KindNotReady},
		{&types.ServiceUnavailableException{}, KindUnavailable},
		{&types.InternalServerException{}, KindUnavailable},
		{&types.ModelErrorException{}, KindUnavailable},
		{&types.ModelStreamErrorException{}, KindUnavailable},
		{&types.ValidationException{}, KindValidation},
		{&types.AccessDeniedException{}, KindAccessDenied},
		{&types.ResourceNotFoundException{}, KindAccessDenied},
		{&types.ModelTimeoutException{}, KindTimeout},
		{&smithy.GenericAPIError{Code: "ThrottlingException"}, KindThrottled},
		{&smithy.GenericAPIError{Code: "UnrecognizedClientException"}, KindAccessDenied},
		{httpError(429), KindThrottled},
		{httpError(408), KindTimeout},
		{httpError(400), KindValidation},
		{httpError(413), KindValidation},
		{httpError(401), KindAccessDenied},
		{httpError(403), KindAccessDenied},
		{httpError(404), KindAccessDenied},
		{httpError(500), KindUnavailable},
		{httpError(503), KindUnavailable},
		{fmt.Errorf("op: %w", smithy.InvalidParamsError{Context: "ConverseStreamInput"}), KindValidation},
		{&smithyhttp.RequestSendError{Err: syscall.ECONNREFUSED}, KindUnavailable},
		{errNoStop, KindUnavailable},
		{errors.New("something nobody expected"), KindUnavailable},
	}
	for _, c := range cases {
		if got := kindOf(c.err); got != c.want {
			t.Errorf("kindOf(%T %v) = %s, want %s", c.err, c.err, got, c.want)
		}
	}
}

func TestClassify(t *testing.T) {
	live := context.Background()
	canceled, cancel := context.WithCancel(live)
	cancel()
	expired, cancel2 := context.WithTimeout(live, -1)
	defer cancel2()
	causeDeadline, cancel3 := context.WithCancelCause(live)
	cancel3(context.DeadlineExceeded)
	throttled := &types.ThrottlingException{}

	cases := []struct {
		name     string
		ctx      context.Context
		streamed bool
		err      error
		want     ErrorKind
	}{
		{"typed, nothing streamed", live, false, throttled, KindThrottled},
		{"any failure after a delta", live, true, throttled, KindMidStream},
		{"canceled wins over the SDK error", canceled, false, errors.New("read: use of closed network connection"), KindCanceled},
		{"canceled after a delta", canceled, true, throttled, KindCanceled},
		{"deadline", expired, false, context.DeadlineExceeded, KindTimeout},
		{"deadline after a delta", expired, true, errors.New("decode event"), KindTimeout},
		{"cancel caused by a deadline", causeDeadline, false, context.Canceled, KindTimeout},
	}
	for _, c := range cases {
		me := classify(c.ctx, "m1", c.streamed, c.err)
		if me.Kind != c.want || me.Streamed != c.streamed || me.Model != "m1" {
			t.Errorf("%s: %+v, want kind %s", c.name, me, c.want)
		}
		if !errors.Is(me, c.err) {
			t.Errorf("%s: %v does not wrap the original error", c.name, me)
		}
		if c.ctx.Err() != nil && !errors.Is(me, c.ctx.Err()) {
			t.Errorf("%s: %v does not wrap %v", c.name, me, c.ctx.Err())
		}
	}
}

func TestModelError(t *testing.T) {
	sentinels := map[ErrorKind]error{
		KindThrottled: ErrThrottled, KindNotReady: ErrNotReady, KindUnavailable: ErrUnavailable,
		KindValidation: ErrValidation, KindAccessDenied: ErrAccessDenied, KindMidStream: ErrMidStream,
		KindTimeout: ErrTimeout, KindCanceled: ErrCanceled,
	}
	retryable := map[ErrorKind]bool{KindThrottled: true, KindNotReady: true, KindUnavailable: true, KindTimeout: true}
	for kind, sentinel := range sentinels {
		cause := &types.ThrottlingException{Message: new("slow down")}
		e := &ModelError{Kind: kind, Model: "m1", Err: cause}
		var err error = fmt.Errorf("route: %w", e)
		if !errors.Is(err, sentinel) {
			t.Errorf("%s: errors.Is(err, %v) is false", kind, sentinel)
		}
		for other, s := range sentinels {
			if other != kind && errors.Is(err, s) {
				t.Errorf("%s: also matches %v", kind, s)
			}
		}
		var te *types.ThrottlingException
		if !errors.As(err, &te) {
			t.Errorf("%s: the SDK error is not reachable with errors.As", kind)
		}
		if e.Retryable() != retryable[kind] {
			t.Errorf("%s: Retryable() = %v", kind, e.Retryable())
		}
		e.Streamed = true
		if e.Retryable() {
			t.Errorf("%s: retryable after streaming", kind)
		}
		if msg := e.Error(); !strings.Contains(msg, "m1") || !strings.Contains(msg, string(kind)) || !strings.Contains(msg, "slow down") {
			t.Errorf("%s: message %q lacks model, kind or cause", kind, msg)
		}
	}
}
