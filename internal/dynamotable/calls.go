package dynamotable

import (
	"context"
	"errors"
	"net"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
)

// Outcomes of a DynamoDB call: the one classification of DynamoDB errors,
// whichever table is called, and the "outcome" label of
// jetway_dynamodb_calls_total.
const (
	OutcomeOK              = "ok"
	OutcomeThrottled       = "throttled"        // over the table's or account's throughput
	OutcomeConditionFailed = "condition_failed" // a conditional write refused (often the expected answer)
	OutcomeTimeout         = "timeout"          // the caller's deadline passed
	OutcomeUnavailable     = "unavailable"      // unreachable, or a server-side error
	OutcomeOther           = "other"            // anything else (validation, access, a cancelled call)
)

// Table roles: the "table" label. A fixed role, never a table name from
// the environment nor anything a client sent.
const (
	TableQuota    = "quota"
	TableRequests = "requests"
	TableCache    = "cache"
	TableMembers  = "members"
	TableConfig   = "config"
)

// Classify sorts a DynamoDB call's error into one of the outcomes above
// (OutcomeOK for nil).
func Classify(err error) string {
	var apiErr smithy.APIError
	var refused *types.ConditionalCheckFailedException
	var netErr net.Error
	var status interface{ HTTPStatusCode() int }
	switch {
	case err == nil:
		return OutcomeOK
	case errors.As(err, &refused):
		return OutcomeConditionFailed
	case errors.Is(err, context.DeadlineExceeded):
		return OutcomeTimeout
	case errors.As(err, &apiErr):
		switch apiErr.ErrorCode() {
		case "ProvisionedThroughputExceededException", "ThrottlingException", "RequestLimitExceeded":
			return OutcomeThrottled
		case "ConditionalCheckFailedException":
			return OutcomeConditionFailed
		case "InternalServerError", "ServiceUnavailable":
			return OutcomeUnavailable
		}
	case errors.As(err, &netErr):
		return OutcomeUnavailable
	}
	if errors.As(err, &status) && status.HTTPStatusCode() >= 500 {
		return OutcomeUnavailable
	}
	return OutcomeOther
}

// Refused reports whether err is a conditional write's refusal, and the
// item the condition saw when the engine returned it (DynamoDB does;
// dynalite does not, and then item is nil: read it).
func Refused(err error) (item Item, ok bool) {
	var refused *types.ConditionalCheckFailedException
	if !errors.As(err, &refused) {
		return nil, false
	}
	return refused.Item, true
}

// Invalid reports whether DynamoDB refused the request itself
// (ValidationException): a retry cannot succeed.
func Invalid(err error) bool {
	var apiErr smithy.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode() == "ValidationException"
}

// TooLarge reports whether the request was refused for the size of the
// item it would make (over DynamoDB's 400 KB).
func TooLarge(err error) bool {
	var apiErr smithy.APIError
	return Invalid(err) && errors.As(err, &apiErr) && strings.Contains(strings.ToLower(apiErr.ErrorMessage()), "size")
}

// Observer takes one observation per DynamoDB call: the table's role, the
// store's operation (a fixed name such as "reserve" or "checkpoint"), the
// outcome (see Classify) and the call's duration. *telemetry.Metrics is one.
type Observer interface {
	ObserveDynamoDB(table, op, outcome string, d time.Duration)
}

// observe reports a call of op on t that started at start and returned
// err to t's observer, if any.
func (t *Table) observe(op string, start time.Time, err error) {
	if t.obs == nil {
		return
	}
	t.obs.ObserveDynamoDB(t.role, op, Classify(err), time.Since(start))
}
