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
// # Leases (Options.Lease)
//
// With leases on, a server takes a block of a limit's item with one
// conditional write and admits requests from it locally, with no store call.
// Reserve, Settle and compensation are the same with and without leases:
// only how each item's part of a reservation is paid for differs, direct
// writes per request or this server's lease.
//
// The lease lives inside the item, one map attribute per server:
//
//	lease_<owner>  M  {granted: {t, r, c}, committed: {t, r, c}, expires_ms, seq}
//
// granted is in the item's used in full, so used = settled usage + every
// lease's granted stays within the limit (0 overshoot): a write that grows a
// lease adds the grant to used and the lease together, conditioned on
// used + grant <= limit and on the lease's seq. committed (a part of
// granted) is what the owner may spend without another write: it admits
// a request only while charged + in flight + request <= committed, and a
// write commits a little ahead (Ahead of the recent rate, at least
// MinRequests requests) and grants more ahead (Block), each grant capped at
// Fraction of the headroom left. Near the limit the cap is below one
// request and grants become exact: one write per request, as without
// leases. A refusal comes only when the store cannot fit the request after
// reclaiming expired leases, so the slack is what other live servers hold:
// at most Fraction of the headroom each, or one request's estimate.
// A server that refuses returns its lease's unused room to the item, so
// the last tokens of a limit go to whichever server's request fits them.
//
// Writes: a background top-up when the room left falls below half of Ahead
// (or the lease is past half its TTL), a synchronous one when a request does
// not fit, a forced one (no limit check) when usage passes what is committed
// (usage that happened is always recorded), and a return (Drain; Run for an
// idle lease) that gives back granted - (charged + in flight). Settlement is
// local: actual usage is charged to the lease, a refund goes back into its
// room, and the next write records both in committed. Every write carries
// seq = previous + 1, conditioned on the previous seq; a write that applied
// but whose caller saw an error is recognised on retry (the SDK's or ours)
// or by reading the item back, so nothing is granted or charged twice.
//
// A killed server's lease expires TTL after its last write; any server that
// sees it (in a write's answer or a refusal) reclaims it with one
// conditional write that returns granted - committed and removes it.
// committed covers every request the owner admitted, so no token that may
// have been used comes back; the owner's unspent commitment (at most its
// Ahead) stays counted until the window ends. If the owner was alive, its
// next write finds its lease gone and starts a new one from its committed.
// The fleet's membership speeds this up: a lease whose owner is known gone
// (LeaseOptions.Gone) is reclaimed at once, not at its expiry. A
// reservation restored by another server (Restore) from a lease is settled
// in full, refund included: the gateway restores only the reservations of
// servers the fleet knows are gone, whose committed amount still counts the
// whole reservation and will never be spent (a server judged gone while
// alive admits nothing and never settles a request another server ended).
//
// Tightest with leases reports the usage as this server last saw it in the
// store: other servers' leases count as used, its own unspent lease as free;
// it is as old as the lease's last write (about Ahead at a steady rate, at
// most TTL/2 for an active lease).
//
// Calls per request at steady load: one busy app at 20 requests/s takes
// 0.1 DynamoDB calls per admitted request over two limits (background writes
// only), a cold server 2 (one synchronous write per limit); see
// docs/benchmarks.md.
//
// # Failures
//
// Store failures (DynamoDB throttled after the SDK's retries, endpoint
// unreachable, Options.StoreTimeout passed) make Reserve return
// ErrUnavailable with nothing left reserved: the gateway answers `busy`,
// never a hang and never a silent pass. The SDK client's retryer is the
// retry budget (the caller configures it; keep it small on the admission
// path). Settle retries with backoff until it succeeds, the item's window
// has ended, or its context ends. With leases a server whose store is down
// keeps admitting from its lease until the lease expires (at most TTL), then
// answers ErrUnavailable.
package quota
