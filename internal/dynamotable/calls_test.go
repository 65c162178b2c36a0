package dynamotable_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/jetway-gateway/jetway/internal/dynamotable"
)

func TestClassify(t *testing.T) {
	api := func(code string) error { return &smithy.GenericAPIError{Code: code, Message: "m"} }
	cases := []struct {
		err  error
		want string
	}{
		{nil, dynamotable.OutcomeOK},
		{fmt.Errorf("update: %w", &types.ConditionalCheckFailedException{}), dynamotable.OutcomeConditionFailed},
		{api("ConditionalCheckFailedException"), dynamotable.OutcomeConditionFailed},
		{api("ProvisionedThroughputExceededException"), dynamotable.OutcomeThrottled},
		{api("ThrottlingException"), dynamotable.OutcomeThrottled},
		{api("RequestLimitExceeded"), dynamotable.OutcomeThrottled},
		{api("InternalServerError"), dynamotable.OutcomeUnavailable},
		{fmt.Errorf("call: %w", context.DeadlineExceeded), dynamotable.OutcomeTimeout},
		{&net.OpError{Op: "dial", Err: errors.New("connection refused")}, dynamotable.OutcomeUnavailable},
		{api("ValidationException"), dynamotable.OutcomeOther},
		{context.Canceled, dynamotable.OutcomeOther},
	}
	for _, c := range cases {
		if got := dynamotable.Classify(c.err); got != c.want {
			t.Errorf("Classify(%v) = %s, want %s", c.err, got, c.want)
		}
	}
}

type observer func(table, op, outcome string, d time.Duration)

func (f observer) ObserveDynamoDB(table, op, outcome string, d time.Duration) {
	f(table, op, outcome, d)
}
