package router

import (
	"context"
	"time"

	"github.com/jetway-gateway/jetway/internal/call"
	"github.com/jetway-gateway/jetway/internal/dynamotable"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"go.uber.org/zap"
)

// The cache table's shape: one item per answer.
//
//	pk           S  "cache#" + CacheKey(...)   (partition key)
//	chunks       L  of S, the deltas in order
//	model        S
//	usage        M  {input_tokens N, output_tokens N}
//	stop_reason  S
//	expires_at   N  epoch seconds; the table's TTL attribute
//	format       N  the chunks' stored form (call.Format); absent: v1
const (
	cachePKPrefix    = "cache#"
	cacheAttrPK      = dynamotable.PK
	cacheAttrExpires = "expires_at"
)

// dynamoMaxItemBytes is DynamoDB's item size limit (400 KB, attribute names
// included). Larger answers stay in memory only.
const dynamoMaxItemBytes = 400 * 1024

// Bounds of CreateCacheTable's wait for an ACTIVE table (dynalite makes
// tables ACTIVE at once).
const (
	cacheTableWaitMin = 100 * time.Millisecond
	cacheTableWaitMax = 5 * time.Second
	cacheTableWait    = 5 * time.Minute
)

// Attributes of a cached answer's item (the partition key and expiry above).
const (
	cacheAttrChunks       = "chunks"
	cacheAttrModel        = "model"
	cacheAttrUsage        = "usage"
	cacheAttrStopReason   = "stop_reason"
	cacheAttrInputTokens  = "input_tokens"
	cacheAttrOutputTokens = "output_tokens"
	cacheAttrFormat       = "format"
)

// itemSize over-estimates the DynamoDB size of an answer's item, by
// DynamoDB's rules: names and strings count their UTF-8 bytes, a number up
// to 21 bytes, a list or map 3 bytes plus 1 per element.
func itemSize(key string, a *CachedAnswer) int {
	const num = 21
	n := len(cacheAttrPK) + len(cachePKPrefix) + len(key)
	n += len(cacheAttrChunks) + 3
	for _, ch := range a.Chunks {
		n += 1 + len(ch)
	}
	n += len(cacheAttrModel) + len(a.Model)
	n += len(cacheAttrUsage) + 3 + 2*(1+num) + len(cacheAttrInputTokens) + len(cacheAttrOutputTokens)
	n += len(cacheAttrStopReason) + len(a.StopReason)
	n += len(cacheAttrExpires) + num
	return n
}

// getDynamo reads key from the table. Expired items (DynamoDB deletes them
// lazily, up to days later) and failures are misses.
func (c *Cache) getDynamo(ctx context.Context, key string, now time.Time) (*CachedAnswer, time.Time, bool) {
	ctx, cancel := context.WithTimeout(ctx, c.opts.DynamoTimeout)
	defer cancel()
	item, err := c.table.Get(ctx, "get", cachePKPrefix+key, false)
	if err != nil {
		c.failed("GetItem", key, err)
		return nil, time.Time{}, false
	}
	if item == nil {
		return nil, time.Time{}, false
	}
	exp, _ := dynamotable.Int(item, cacheAttrExpires)
	expires := time.Unix(exp, 0)
	if !now.Before(expires) {
		return nil, time.Time{}, false
	}
	usage := dynamotable.Map(item, cacheAttrUsage)
	in, _ := dynamotable.Int(usage, cacheAttrInputTokens)
	out, _ := dynamotable.Int(usage, cacheAttrOutputTokens)
	format := call.FormatV1
	if f, ok := dynamotable.Int(item, cacheAttrFormat); ok {
		format = call.Format(f)
	}
	chunks := call.LoadPieces(format, dynamotable.Strings(item, cacheAttrChunks))
	return &CachedAnswer{Model: dynamotable.String(item, cacheAttrModel), Chunks: chunks,
		StopReason: dynamotable.String(item, cacheAttrStopReason), Usage: Usage{InputTokens: int(in), OutputTokens: int(out)}}, expires, true
}

// putDynamo writes an answer unless it is too large for one item.
func (c *Cache) putDynamo(ctx context.Context, key string, a *CachedAnswer, expires time.Time) {
	if itemSize(key, a) > dynamoMaxItemBytes {
		c.dynamoSkipped.Add(1)
		return
	}
	item := dynamotable.Item{
		cacheAttrPK:         dynamotable.S(cachePKPrefix + key),
		cacheAttrChunks:     dynamotable.L(call.StoredPieces(c.format(), a.Chunks)),
		cacheAttrModel:      dynamotable.S(a.Model),
		cacheAttrStopReason: dynamotable.S(a.StopReason),
		cacheAttrUsage: dynamotable.M(dynamotable.Item{
			cacheAttrInputTokens:  dynamotable.N(int64(a.Usage.InputTokens)),
			cacheAttrOutputTokens: dynamotable.N(int64(a.Usage.OutputTokens)),
		}),
		cacheAttrExpires: dynamotable.N(expires.Unix()),
	}
	if f := c.format(); f >= call.FormatV2 {
		item[cacheAttrFormat] = dynamotable.N(int64(f))
	}
	ctx, cancel := context.WithTimeout(ctx, c.opts.DynamoTimeout)
	defer cancel()
	if err := c.table.Put(ctx, "put", item, "", nil, nil); err != nil {
		c.failed("PutItem", key, err)
	}
}

// format is the stored form the shared tier writes.
func (c *Cache) format() call.Format { return max(c.opts.Format, call.FormatV1) }

// readOnlyRequestBodies is, per call, the second of sdkWorkarounds
// (bedrock.go) for DynamoDB: smithy-go's request body reader fails a write
// with io.EOF once the SDK has closed it, and net/http then closes the
// connection under the response ("deserialization failed ... use of closed
// network connection"), about once in a few thousand GetItem calls against
// dynalite on loopback.
func readOnlyRequestBodies(o *dynamodb.Options) {
	if o.HTTPClient != nil {
		o.HTTPClient = readOnlyBodies{o.HTTPClient}
	}
}

func (c *Cache) failed(op, key string, err error) {
	c.dynamoErrors.Add(1)
	c.opts.Logger.Warn("cache_dynamodb_failed", zap.String("op", op), zap.String("table", c.opts.Table),
		zap.String("key", key), zap.Error(err))
}

// CreateCacheTable creates the response cache table (partition key pk,
// on-demand billing) if it does not exist, waits until it is ACTIVE, and
// enables TTL on expires_at. It is idempotent. It is for local and test use
// (`gateway tables create`); production tables come from Terraform.
// dynalite has no TTL API, which is tolerated: Get treats an item past its
// expires_at as a miss whether or not DynamoDB has deleted it yet.
func CreateCacheTable(ctx context.Context, client *dynamodb.Client, table string) error {
	return dynamotable.Create(ctx, client, table, cacheAttrPK, cacheAttrExpires)
}
