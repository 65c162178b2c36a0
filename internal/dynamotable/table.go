package dynamotable

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Table is one table of a fixed role (TableQuota, ...): every call through
// it is metered, and its errors are the SDK's, wrapped with the call and
// the key, for Refused, TooLarge, Invalid and Classify to read. Throttling
// and unreachable endpoints are retried by the client's retryer, whose
// budget the caller sizes when building the client; ctx bounds each call.
type Table struct {
	client *dynamodb.Client
	name   string
	role   string
	obs    Observer
	opts   []func(*dynamodb.Options)
}

// NewTable returns the table name of role on client; opts apply to every
// call (per-call client options).
func NewTable(client *dynamodb.Client, name, role string, opts ...func(*dynamodb.Options)) *Table {
	return &Table{client: client, name: name, role: role, opts: opts}
}

// Name is the table's name.
func (t *Table) Name() string { return t.name }

// SetObserver reports every call from now on to obs; call it before the
// table is used.
func (t *Table) SetObserver(obs Observer) { t.obs = obs }

// Get reads the item whose partition key is key (nil when absent),
// strongly consistent when consistent is set.
func (t *Table) Get(ctx context.Context, op, key string, consistent bool) (Item, error) {
	start := time.Now()
	out, err := t.client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      aws.String(t.name),
		Key:            Item{PK: S(key)},
		ConsistentRead: aws.Bool(consistent),
	}, t.opts...)
	t.observe(op, start, err)
	if err != nil {
		return nil, fmt.Errorf("dynamodb GetItem %s: %w", key, err)
	}
	return out.Item, nil
}

// Put writes item (which holds its PK), when cond is not empty only if it
// holds; names and values bind cond's placeholders. A refused condition
// returns the item it saw (see Refused).
func (t *Table) Put(ctx context.Context, op string, item Item, cond string,
	names map[string]string, values Item) error {
	in := &dynamodb.PutItemInput{TableName: aws.String(t.name), Item: item}
	if cond != "" {
		in.ConditionExpression = aws.String(cond)
		in.ExpressionAttributeNames, in.ExpressionAttributeValues = names, values
		in.ReturnValuesOnConditionCheckFailure = types.ReturnValuesOnConditionCheckFailureAllOld
	}
	start := time.Now()
	_, err := t.client.PutItem(ctx, in, t.opts...)
	t.observe(op, start, err)
	if err != nil {
		return fmt.Errorf("dynamodb PutItem %s: %w", String(item, PK), err)
	}
	return nil
}

// Update runs u and returns what u.Return asked for.
func (t *Table) Update(ctx context.Context, op string, u *Update) (Item, error) {
	start := time.Now()
	out, err := t.client.UpdateItem(ctx, u.Input(t.name), t.opts...)
	t.observe(op, start, err)
	if err != nil {
		return nil, fmt.Errorf("dynamodb UpdateItem %s: %w", u.key, err)
	}
	return out.Attributes, nil
}

// Query runs in (its TableName set here) and hands each page's items to
// each, all pages.
func (t *Table) Query(ctx context.Context, op string, in *dynamodb.QueryInput, each func([]Item)) error {
	in.TableName = aws.String(t.name)
	return pages(ctx, t, op, dynamodb.NewQueryPaginator(t.client, in), func(o *dynamodb.QueryOutput) []Item { return o.Items }, each)
}

// QueryPage runs one page of a query (in.Limit bounds it).
func (t *Table) QueryPage(ctx context.Context, op string, in *dynamodb.QueryInput) ([]Item, error) {
	in.TableName = aws.String(t.name)
	start := time.Now()
	out, err := t.client.Query(ctx, in, t.opts...)
	t.observe(op, start, err)
	if err != nil {
		return nil, fmt.Errorf("dynamodb %s %s: %w", op, t.name, err)
	}
	return out.Items, nil
}

// Scan reads the whole table, strongly consistent, and hands each page's
// items to each.
func (t *Table) Scan(ctx context.Context, op string, each func([]Item)) error {
	in := &dynamodb.ScanInput{TableName: aws.String(t.name), ConsistentRead: aws.Bool(true)}
	return pages(ctx, t, op, dynamodb.NewScanPaginator(t.client, in), func(o *dynamodb.ScanOutput) []Item { return o.Items }, each)
}

// pages reads every page of a paginator, each call metered as op.
func pages[O any](ctx context.Context, t *Table, op string, p interface {
	HasMorePages() bool
	NextPage(context.Context, ...func(*dynamodb.Options)) (O, error)
}, items func(O) []Item, each func([]Item)) error {
	for p.HasMorePages() {
		start := time.Now()
		out, err := p.NextPage(ctx, t.opts...)
		t.observe(op, start, err)
		if err != nil {
			return fmt.Errorf("dynamodb %s %s: %w", op, t.name, err)
		}
		each(items(out))
	}
	return nil
}

// Delete deletes the item whose partition key is key, when cond is not
// empty only if it holds (a refused condition: see Refused); names and
// values bind cond's placeholders.
func (t *Table) Delete(ctx context.Context, op, key, cond string, names map[string]string, values Item) error {
	in := &dynamodb.DeleteItemInput{TableName: aws.String(t.name), Key: Item{PK: S(key)}}
	if cond != "" {
		in.ConditionExpression = aws.String(cond)
		in.ExpressionAttributeNames, in.ExpressionAttributeValues = names, values
	}
	start := time.Now()
	_, err := t.client.DeleteItem(ctx, in, t.opts...)
	t.observe(op, start, err)
	if err != nil {
		return fmt.Errorf("dynamodb DeleteItem %s: %w", key, err)
	}
	return nil
}
