// Package dynamotable is Jetway's one DynamoDB package: every store (quota,
// request records, the response cache, fleet membership) talks to its
// table through it, the way benbjohnson/wtf keeps one package per
// technology.
//
//   - The item codec: typed values written and read by hand (S, N, B, BOOL,
//     M, L; String, Int, Bytes, Bool, Map, Strings), no reflection.
//   - The expression style: Update, plain strings with named placeholders
//     (#name, :value); Put and Query take the same style.
//   - Table: every call metered (Meter, one outcome vocabulary, Classify)
//     and its error read once: Refused (a condition failed, with the item it
//     saw), Invalid, TooLarge; anything else is the store's "unavailable".
//   - Create: the tables, all of one shape (a string partition key pk,
//     on-demand billing, a TTL attribute), for local and test use (`gateway
//     tables create`); production tables come from Terraform with the same
//     shape.
//
// The choice of hand-written values and plain expressions over
// attributevalue and the expression builder is measured in
// docs/benchmarks.md ("One DynamoDB codec").
package dynamotable

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
)

// Bounds of the wait for a new table to become ACTIVE.
const (
	waitMinDelay = 50 * time.Millisecond
	waitMaxDelay = time.Second
	waitMax      = 2 * time.Minute
)

// Index is a keys-only global secondary index of a table Create makes.
type Index struct {
	Name                string
	Hash, Range         string // Range may be empty
	HashType, RangeType types.ScalarAttributeType
}

// Create makes the table (partition key pk, on-demand, with indexes)
// unless it exists, waits until it is ACTIVE, and enables TTL on ttlAttr.
// It is idempotent (an existing table is left as it is). dynalite has no
// TTL API; that is tolerated, since every reader of these tables treats an
// item past its TTL attribute as absent.

func Create(ctx context.Context, client *dynamodb.Client, table, pk, ttlAttr string, indexes ...Index) error {
	in := &dynamodb.CreateTableInput{
		TableName:            aws.String(table),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String(pk), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String(pk), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	}
	defined := map[string]bool{pk: true}
	define := func(name string, t types.ScalarAttributeType) {
		if !defined[name] {
			defined[name] = true
			in.AttributeDefinitions = append(in.AttributeDefinitions, types.AttributeDefinition{AttributeName: aws.String(name), AttributeType: t})
		}
	}
	for _, ix := range indexes {
		define(ix.Hash, ix.HashType)
		keys := []types.KeySchemaElement{{AttributeName: aws.String(ix.Hash), KeyType: types.KeyTypeHash}}
		if ix.Range != "" {
			define(ix.Range, ix.RangeType)
			keys = append(keys, types.KeySchemaElement{AttributeName: aws.String(ix.Range), KeyType: types.KeyTypeRange})
		}
		in.GlobalSecondaryIndexes = append(in.GlobalSecondaryIndexes, types.GlobalSecondaryIndex{
			IndexName: aws.String(ix.Name), KeySchema: keys,
			Projection: &types.Projection{ProjectionType: types.ProjectionTypeKeysOnly}})
	}
	_, err := client.CreateTable(ctx, in)
	var inUse *types.ResourceInUseException
	if err != nil && !errors.As(err, &inUse) {
		return fmt.Errorf("create table %s: %w", table, err)
	}
	waiter := dynamodb.NewTableExistsWaiter(client, func(o *dynamodb.TableExistsWaiterOptions) {
		o.MinDelay, o.MaxDelay = waitMinDelay, waitMaxDelay
	})
	if err := waiter.Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)}, waitMax); err != nil {
		return fmt.Errorf("create table %s: wait for ACTIVE: %w", table, err)
	}
	ttl, err := client.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(table)})
	if err == nil && ttl.TimeToLiveDescription != nil && aws.ToString(ttl.TimeToLiveDescription.AttributeName) == ttlAttr &&
		(ttl.TimeToLiveDescription.TimeToLiveStatus == types.TimeToLiveStatusEnabled ||
			ttl.TimeToLiveDescription.TimeToLiveStatus == types.TimeToLiveStatusEnabling) {
		return nil
	}
	_, err = client.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
		TableName:               aws.String(table),
		TimeToLiveSpecification: &types.TimeToLiveSpecification{AttributeName: aws.String(ttlAttr), Enabled: aws.Bool(true)},
	})
	var apiErr smithy.APIError
	switch {
	case err == nil:
	case errors.As(err, &apiErr) && apiErr.ErrorCode() == "UnknownOperationException":
		// dynalite: no TTL support.
	case errors.As(err, &apiErr) && apiErr.ErrorCode() == "ValidationException" &&
		strings.Contains(strings.ToLower(apiErr.ErrorMessage()), "already enabled"):
	default:
		return fmt.Errorf("create table %s: enable TTL on %s: %w", table, ttlAttr, err)
	}
	return nil
}
