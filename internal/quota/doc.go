// Package quota enforces token, request and cost limits per tenant, app and
// user over calendar windows (minute, hour, day, month; UTC), atomically,
// however many requests and gateway tasks run at once.
//
// # Reserve, then settle
//
// LimitsFor turns a validated configuration into the limits of one request.
// Before a model call the gateway reserves an estimate (EstimateInputTokens
// plus max_tokens, one request, and the cost at the dearest model) on every
// limit that applies; after the terminal frame it settles the real usage,
// refunding the rest (Settle) or everything (Release). A reservation is all
// or nothing: items are reserved one at a time in a fixed order (narrowest
// scope, then narrowest window first), each with a single-item conditional
// write; when one refuses or fails, the ones already reserved are released
// (compensation) before Reserve returns. Each write checks and adds in one
// atomic step, so no interleaving of concurrent reservations can push a
// counter past its limit. During the short compensation window a counter
// may hold usage of a request that is about to be refused, which can only
// cause another request to be refused, never a limit to be overspent.
//
// # Storage: one item per (scope, window, window start)
//
// MemoryStore keeps the items in a map (the embedded default); DynamoStore
// keeps them in a DynamoDB table shared by every gateway task:
//
//	pk          S  partition key: <kind>#<scope key>#<window>#<window start>, e.g.
//	               tenant#contoso#month#2026-11
//	               app#fabrikam/document-summarizer#hour#2026-11-29T19
//	               user#contoso/support-assistant/<sub>#minute#2026-11-29T19:07
//	used        N  tokens (input + output) reserved or charged in the window
//	requests    N  requests
//	micro_usd   N  cost in micro-dollars
//	expires_at  N  epoch seconds, window end + 1 day: the table's TTL attribute
//
// All metrics of a (scope, window) ride on the same item, so one write
// reserves tokens, requests and cost together. A new window instance is a
// new key, so usage "resets" without any write, and TTL deletes old items.
// Reserve is UpdateItem with
//
//	ADD used :n, requests :r, micro_usd :c  SET expires_at = :exp
//	ConditionExpression  attribute_not_exists(used) OR used <= :max   (per limited metric; :max = limit - n)
//
// which needs no transactions: it runs unchanged on DynamoDB and on
// dynalite. Settlement is an unconditional ADD of (actual - reserved).
//
// # DynamoDB calls per request
//
// With k limit items applying to a request (Fabrikam's document-summarizer:
// k=1, its app's hour; Contoso's support-assistant: k=2, the tenant's month
// and the app's hour; user_limits add one each):
//
//   - admission (Reserve): k UpdateItem calls, one per item, in sequence;
//   - settlement (Settle): one UpdateItem per item when the actual usage
//     differs from the reservation (almost always: the estimate is an
//     upper bound), none when it is equal; off the client's critical path;
//   - a refusal at item i: i+1 UpdateItem calls, i compensating UpdateItem
//     calls, and on dynalite one GetItem to report the usage (DynamoDB
//     returns the refusing item with the error via
//     ReturnValuesOnConditionCheckFailure); a request larger than a limit
//     is refused with one GetItem and no write.
//
// So an admitted request costs 2k writes in total, k of them on the
// admission path. One item absorbs about 1,000 writes per second; a tenant
// needing more would split its counter into shards (not built).
//
// # Failures
//
// Store failures (DynamoDB throttled after the SDK's retries, endpoint
// unreachable, Options.StoreTimeout passed) make Reserve return
// ErrUnavailable with nothing left reserved: the gateway answers `busy`,
// never a hang and never a silent pass. The SDK client's retryer is the
// retry budget (the caller configures it; keep it small on the admission
// path). Settle retries with backoff until it succeeds, the item's window
// has ended, or its context ends.
package quota
