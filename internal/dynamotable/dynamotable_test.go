package dynamotable_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/jetway-gateway/jetway/internal/dynalitetest"
	"github.com/jetway-gateway/jetway/internal/dynamotable"
)

// Create is idempotent and makes the one shape every Jetway table has.
func TestCreateIsIdempotent(t *testing.T) {
	client := dynalitetest.Client(t, dynalitetest.Start(t))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	table := dynalitetest.TableName(t)
	for range 2 {
		if err := dynamotable.Create(ctx, client, table, "pk", "expires_at"); err != nil {
			t.Fatalf("Create: %v", err)
		}
	}
	out, err := client.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)})
	if err != nil {
		t.Fatal(err)
	}
	d := out.Table
	if d.TableStatus != types.TableStatusActive || len(d.KeySchema) != 1 || aws.ToString(d.KeySchema[0].AttributeName) != "pk" ||
		d.KeySchema[0].KeyType != types.KeyTypeHash {
		t.Errorf("table = %s %+v, want ACTIVE with hash key pk", d.TableStatus, d.KeySchema)
	}
}
