package gateway

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/types"

	"github.com/jetway-gateway/jetway/internal/auth"
	"github.com/jetway-gateway/jetway/internal/call"
	"github.com/jetway-gateway/jetway/internal/protocol"
	"github.com/jetway-gateway/jetway/internal/quota"
	"github.com/jetway-gateway/jetway/internal/router"
)

// TestFailureTable pins the one table from errors to failure codes.
func TestFailureTable(t *testing.T) {
	me := func(kind router.ErrorKind, sentinel error, streamed bool) error {
		return &router.ModelError{Kind: kind, Model: "m", Streamed: streamed, Err: sentinel}
	}
	cases := []struct {
		err       error
		code      string
		retryable bool
	}{
		{fmt.Errorf("decode: %w", call.Errorf(call.ErrInvalid, "messages must not be empty")), protocol.CodeInvalidRequest, false},
		{&quota.ExceededError{Scope: quota.AppScope("t", "a"), Window: quota.Hour, RetryAfter: time.Minute}, protocol.CodeQuotaExceeded, true},
		{errConflict, protocol.CodeConflict, false},
		{errNotFound, protocol.CodeNotFound, false},
		{call.Errorf(errModelNotAllowed, "model x"), protocol.CodeModelNotAllowed, false},
		{errForbidden, protocol.CodeForbidden, false},
		{fmt.Errorf("verify: %w", auth.ErrNoTenant), protocol.CodeForbidden, false},
		{fmt.Errorf("verify: %w", auth.ErrExpired), protocol.CodeUnauthorized, false},
		{call.Errorf(errRateLimited, "4 in flight"), protocol.CodeRateLimited, true},
		{errDraining, protocol.CodeDraining, true},
		{errBusy, protocol.CodeBusy, true},
		{fmt.Errorf("%w: in-flight cap", ErrAtCapacity), protocol.CodeBusy, true},
		{fmt.Errorf("%w (%w)", fmt.Errorf("%w: in-flight cap", ErrAtCapacity), ErrRoomElsewhere), protocol.CodeBusy, true},
		{fmt.Errorf("reserve: %w", quota.ErrUnavailable), protocol.CodeBusy, true},
		{errCancelled, protocol.CodeCancelled, false},
		{errTimeout, protocol.CodeTimeout, true},
		{errInterrupted, protocol.CodeInterrupted, true},
		{fmt.Errorf("%w: %w", router.ErrAllUnavailable, me(router.KindThrottled, router.ErrThrottled, false)), protocol.CodeModelUnavailable, true},
		{fmt.Errorf("%w: %w", router.ErrAllUnavailable, me(router.KindTimeout, router.ErrTimeout, false)), protocol.CodeTimeout, true},
		{me(router.KindMidStream, router.ErrMidStream, true), protocol.CodeModelError, true},
		{me(router.KindValidation, router.ErrValidation, false), protocol.CodeInvalidRequest, false},
		{context.Canceled, protocol.CodeInterrupted, true},
		{errors.New("something unexpected"), protocol.CodeInternal, true},
	}
	for _, c := range cases {
		e := Failure(c.err)
		if e.Code != c.code || e.Status != protocol.Status(c.code) || e.Retryable != c.retryable || e.Message == "" {
			t.Errorf("Failure(%v) = %+v, want code %s retryable %v", c.err, e, c.code, c.retryable)
		}
	}
	// One place builds busy: a session moving to a server with room is told
	// to send again sooner than a plain busy.
	if e := Failure(fmt.Errorf("%w (%w)", ErrAtCapacity, ErrRoomElsewhere)); e.RetryAfterMs != RetryAfterMovedMs {
		t.Errorf("busy with room elsewhere: retry_after_ms %d, want %d", e.RetryAfterMs, RetryAfterMovedMs)
	}
	if e := Failure(ErrAtCapacity); e.RetryAfterMs != RetryAfterBusyMs {
		t.Errorf("busy: retry_after_ms %d, want %d", e.RetryAfterMs, RetryAfterBusyMs)
	}
	if e := Failure(&quota.ExceededError{Scope: quota.AppScope("t", "a"), Window: quota.Hour, RetryAfter: time.Minute}); e.Message != "Token quota exceeded" ||
		e.RetryAfterMs != 60000 || e.Scope != "app" || e.Window != "hour" {
		t.Errorf("quota error frame %+v", e)
	}
	if e := Failure(fmt.Errorf("decode: %w", call.Errorf(call.ErrInvalid, "messages must not be empty"))); e.Message != "messages must not be empty" {
		t.Errorf("invalid_request message %q", e.Message)
	}
	refused := &router.ModelError{Kind: router.KindValidation, Model: "m",
		Err: fmt.Errorf("%w: %w", router.ErrValidation, &types.ValidationException{Message: aws.String("messages.0.content.1.image: too many pixels")})}
	if e := Failure(refused); e.Message != "the model rejected the request: messages.0.content.1.image: too many pixels" {
		t.Errorf("a model's validation message: %q", e.Message)
	}
	if e := Failure(errors.New("db password is hunter2")); e.Message != "internal error" {
		t.Errorf("internal detail leaked to the client: %q", e.Message)
	}
}
