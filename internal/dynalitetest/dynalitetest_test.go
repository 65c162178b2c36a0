package dynalitetest_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/jetway-gateway/jetway/internal/dynalitetest"
)

func TestStartServesDynamoDB(t *testing.T) {
	endpoint := dynalitetest.Start(t)
	if !strings.HasPrefix(endpoint, "http://127.0.0.1:") {
		t.Fatalf("endpoint = %q, want a loopback URL", endpoint)
	}
	client := dynalitetest.Client(t, endpoint)
	table := dynalitetest.TableName(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	_, err := client.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String(table),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("pk"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("pk"), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	})
	if err != nil {
		t.Fatalf("CreateTable: %v", err)
	}
	out, err := client.ListTables(ctx, &dynamodb.ListTablesInput{})
	if err != nil {
		t.Fatalf("ListTables: %v", err)
	}
	if len(out.TableNames) != 1 || out.TableNames[0] != table {
		t.Fatalf("tables = %v, want [%s]", out.TableNames, table)
	}
}

func TestStartTwiceGivesSeparateServers(t *testing.T) {
	a, b := dynalitetest.Start(t), dynalitetest.Start(t)
	if a == b {
		t.Fatalf("two Starts share endpoint %s", a)
	}
}

func TestTableNameIsUniqueAndValid(t *testing.T) {
	a, b := dynalitetest.TableName(t), dynalitetest.TableName(t)
	if a == b {
		t.Fatalf("TableName returned %q twice", a)
	}
	for _, r := range a {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_.", r)) {
			t.Fatalf("TableName %q has invalid character %q", a, r)
		}
	}
}

func TestStartDelayedServesThroughTheProxy(t *testing.T) {
	endpoint := dynalitetest.StartDelayed(t, time.Millisecond)
	client := dynalitetest.Client(t, endpoint)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := client.ListTables(ctx, &dynamodb.ListTablesInput{}); err != nil {
		t.Fatalf("ListTables through the delaying proxy: %v", err)
	}
}
