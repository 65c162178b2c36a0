package stream

// # Request records: the durable side of a stream
//
// A Log lives in one process. A Record is the same request's state in a
// Store shared by every gateway task, so that a client reconnecting to any
// task can resume it, and so that a request whose task died still ends in
// exactly one terminal outcome. MemoryStore keeps records in process memory
// (the embedded default: one process); DynamoStore keeps them in DynamoDB.
// Both pass the same contract tests (store_test.go), the DynamoDB one
// against dynalite.
//
// # Lifecycle
//
//	Create (conditional put of the accepted request with its encoded quota
//	        reservation: one record, hence one model call, per user and request id)
//	  -> Checkpoint ... (chunks appended in order)
//	  -> Finish (last chunks + terminal frame: done or error)
//	or, when the owning server is gone (its fleet membership says so:
//	killed, or stopped at the drain deadline), another task calls
//	Interrupt, which ends the record with its terminal frame (error
//	"interrupted"); exactly one caller wins. A slow or failing write never
//	ends a record: the owner retries, and nobody else touches a record
//	whose owner is alive.
//	A request rejected before acceptance never gets a record.
//	When the owner gave up on its Create (the put did not answer in
//	time, so the client was told `busy`) and the put landed after all,
//	the owner calls Withdraw: the record, still without a chunk, expires
//	at once, and the request id is as if it never arrived (a follower
//	elsewhere sees it vanish and refuses only its attempt).
//
// A client that reconnected to another task can cancel there: that task
// calls Cancel, which flags the running record. The flag is a condition
// of every Checkpoint, so the owner's next checkpoint (at most one
// checkpoint interval later) is refused with ErrCancelled, at no extra
// cost on the path where nobody cancels; the owner then stops its model
// call and ends the record with Finish as usual. Finish ignores the flag.
//
// Every write is a single-item conditional write (no transactions), so the
// same code runs on DynamoDB and on dynalite. The owner's writes are
// conditional on server = owner, state = running and, for Checkpoint and
// Finish, on the stored seq, so a task that lost its lease can never
// overwrite the outcome another task wrote, and a retried write can never
// duplicate chunks.
//
// Retries: a Checkpoint or Finish repeated with the same prevSeq and the
// same chunks (a retry after a timeout whose first attempt was in fact
// applied) is a no-op that returns nil; the same prevSeq with different
// chunks, or a prevSeq that is not the stored seq, returns ErrConflict.
// Chunks are never duplicated or reordered.
//
// Interrupt trusts that a record whose owner is gone gets no more chunks,
// so the text it read before interrupting is the text the record ends
// with (a write the owner sent before it died and that lands later is
// refused by Interrupt's own condition or finds the record ended).
//
// # DynamoDB table (DynamoStore)
//
// One item per request, partition key only:
//
//	pk           S  "req#" + owner + "#" + request id. The gateway's owner is
//	                "tenant/app/sub" (auth.Principal.Owner). Request ids
//	                never contain '#' (the protocol allows [A-Za-z0-9_-]), so keys are
//	                unambiguous whatever the sub holds.
//	server       S  the owning server's instance id (its fleet membership id)
//	ended_ms     N  epoch milliseconds of the end; 9999999999999 while running.
//	                With server, the key of the keys-only index by_server,
//	                whose entries with the running value list a server's
//	                running records (Running).
//	state        S  running | done | error
//	body_hash    S  fingerprint of the request body (idempotency conflicts)
//	format       N  the stored form of the events below (call.Format): 2 for
//	                v2; absent for v1, every earlier release's
//	accepted     B  the accepted event's stored form (call.EncodeAccepted), absent until accepted
//	reservation  B  the quota reservation (quota's codec), absent until accepted
//	trace        S  the W3C traceparent of the request's root span; absent when none
//	chunks       L  of S, the pieces in the item's format (call.StoredPieces),
//	                Chunks[i] has seq i+1; appended with
//	                SET chunks = list_append(if_not_exists(chunks, :empty), :new), seq = :seq
//	seq          N  the last seq stored (= the length of chunks)
//	terminal     B  the terminal event's stored form (call.EncodeDone,
//	                call.EncodeFailure), absent while running
//	item_bytes   N  the item's estimated size, for the size guard below
//	cancel       BOOL  true once Cancel flagged the running record; absent otherwise
//	expires_at   N  epoch seconds: the table's TTL attribute. While running, a bound
//	                set by the owner; once ended, the end plus the resume window.
//	                TTL deletion lags (up to days), so reads treat a passed
//	                expires_at as absent.
//
// # DynamoDB writes per request
//
// Create 1 (PutItem, carrying the accepted frame and reservation; plus one
// write to the by_server index), one per Checkpoint (UpdateItem; the gateway batches chunks, so this is one per
// checkpoint interval, not per chunk), Finish 1: an answer streamed with c
// checkpoints costs 2 + c writes. Interrupt is one write and happens only
// on failure; Cancel is one write and happens only when a client cancels
// on a task that does not own the request. A refused conditional write costs one extra strongly consistent
// GetItem on dynalite (to say why it was refused); DynamoDB returns the
// item with the refusal, so no extra read there.
//
// # Size
//
// A DynamoDB item holds at most 400 KB, attribute names included. A done
// terminal frame carries the whole text, so a finished record holds its
// answer twice (chunks and terminal). Every write that grows a record is
// conditional on the estimated size staying within MaxRecordBytes (350 KiB,
// leaving room for the estimate's error); a write that would pass it
// changes nothing and returns ErrTooLarge. An answer at the largest
// max_tokens (8192 tokens, about 32 KB of text) needs under 100 KB.
//
// Throttling and unreachable endpoints are retried by the DynamoDB client's
// retryer (the caller sizes the budget when building the client); the
// caller's ctx bounds each call. Every such failure wraps ErrUnavailable.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// withdrawRefusal says why Withdraw may not expire cur: only its server's
// running record, with no chunk yet and the same body, is withdrawn.
func withdrawRefusal(cur *Record, server, bodyHash string) error {
	if cur.State != StateRunning || cur.Server != server || cur.Seq() != 0 || cur.BodyHash != bodyHash {
		return fmt.Errorf("%w: state %s, owner %s, seq %d", ErrConflict, cur.State, cur.Server, cur.Seq())
	}
	return nil
}

// Record states.
const (
	// StateRunning: the owner is producing the answer.
	StateRunning = "running"
	// StateDone: ended with a done frame (terminal).
	StateDone = "done"
	// StateError: ended with an error frame (terminal), including interrupted.
	StateError = "error"
)

// MaxRecordBytes bounds a record's estimated stored size: DynamoDB's item
// limit (400 KB) less a margin for the estimate's error.
const MaxRecordBytes = 350 << 10

// Errors returned by Store implementations. Match them with errors.Is.
var (
	// ErrExists: Create found a record for the same owner and request id.
	ErrExists = errors.New("request record exists")
	// ErrNotFound: no record (or an expired one) for the owner and request id.
	ErrNotFound = errors.New("request record not found")
	// ErrLostLease: the caller no longer owns the record (another server
	// interrupted it, or it is no longer running).
	ErrLostLease = errors.New("request record lease lost")
	// ErrConflict: a conditional write lost to another one (an Interrupt
	// of a record that is live or already ended; a Checkpoint whose
	// prevSeq is not the stored seq).
	ErrConflict = errors.New("request record conflict")
	// ErrTooLarge: the write would make the record larger than
	// MaxRecordBytes; nothing was changed.
	ErrTooLarge = errors.New("request record too large")
	// ErrUnavailable: the store failed (throttled, unreachable, timed
	// out, ctx ended). The write may or may not have been applied; a
	// retry with the same arguments is safe.
	ErrUnavailable = errors.New("request store unavailable")
	// ErrCancelled: Checkpoint was refused because Cancel flagged the
	// record; nothing was written. The owner should stop and Finish.
	ErrCancelled = errors.New("request record cancelled")
	// ErrInvalid: the arguments are malformed (empty ids, a request id
	// holding '#', an unknown terminal state, a missing terminal frame).
	ErrInvalid = errors.New("invalid request record")
)

// Record is one request's durable state, keyed by Owner (the gateway
// uses auth.Principal.Owner: tenant, app and sub) and RequestID.
type Record struct {
	Owner, RequestID, BodyHash string
	// Server is the instance id of the server that owns the record.
	Server string
	// State is StateRunning, StateDone or StateError.
	State string
	// Accepted is the accepted event's stored form (Accepted.Stored), nil
	// until accepted.
	Accepted []byte
	// Chunks are the pieces (call.Encode) checkpointed so far; Chunks[i]
	// has seq i+1. Boundaries are preserved, so replays are
	// byte-identical. A store converts them to and from its items' format.
	Chunks []string
	// Terminal is the terminal event's stored form (Terminal.Stored), nil
	// while running.
	Terminal []byte
	// Reservation is the encoded quota reservation (opaque here), so any
	// server can settle it.
	Reservation []byte
	// Trace is the W3C traceparent of the request's root span ("" when
	// none), so a server that resumes, follows, cancels or takes the
	// request over links its spans to the request's trace.
	Trace string
	// Cancelled is set by Cancel while the record runs: its user asked to
	// stop it on some server.
	Cancelled bool
	// EndedAt is when it ended (millisecond precision); zero while running.
	EndedAt time.Time
	// Expires is when the record is forgotten (second precision): while
	// running a bound set by the owner, once ended the end plus the
	// resume window. Zero means never (MemoryStore) / no TTL (DynamoStore).
	Expires time.Time
}

// Seq is the last seq stored.
func (r *Record) Seq() int { return len(r.Chunks) }

// Ended reports whether the record holds its terminal outcome.
func (r *Record) Ended() bool { return r.State == StateDone || r.State == StateError }

// Store keeps request records shared by every gateway task. Every method
// reads or changes one record atomically. MemoryStore and DynamoStore
// implement it with identical semantics. Failures of the store itself wrap
// ErrUnavailable.
type Store interface {
	// Create stores r as a new running record (r.State, r.Chunks and
	// r.Terminal are ignored; Accepted and Reservation are stored as
	// given) unless a live record exists for its owner and request id: then it returns that record and ErrExists. A Create
	// whose first attempt was applied but whose answer was lost (ErrUnavailable,
	// or the SDK's own retry) finds the caller's own record: Server equal to
	// the caller's id, which must be unique per process.
	Create(ctx context.Context, r Record) (*Record, error)
	// Checkpoint appends chunks as seqs prevSeq+1.. (chunks may be
	// empty: a check for a Cancel). Conditional on server owning the
	// record, state running and the stored seq being prevSeq, and on no
	// Cancel having flagged it. Errors: ErrLostLease (another server took
	// it over, or it ended), ErrCancelled (flagged: stop and Finish),
	// ErrConflict (prevSeq is not the stored seq), ErrTooLarge,
	// ErrNotFound. Repeating an applied call is a no-op returning nil.
	Checkpoint(ctx context.Context, owner, requestID, server string, prevSeq int, chunks []string) error
	// Finish appends the last chunks and stores the terminal frame, the
	// terminal state (StateDone or StateError) and expires. Conditional
	// and idempotent like Checkpoint, with the same errors.
	Finish(ctx context.Context, owner, requestID, server string, prevSeq int, chunks []string, state string, terminal []byte, expires time.Time) error
	// Withdraw expires, at once, the record server created and gave up
	// on before it stored any chunk (its put did not answer in time but
	// landed): conditional on server owning it, state running, seq 0 and
	// bodyHash. Errors: ErrConflict (not such a record: it has chunks, it
	// ended, another server or body), ErrNotFound.
	Withdraw(ctx context.Context, owner, requestID, server, bodyHash string) error
	// Get reads the record (strongly consistent). ErrNotFound when there
	// is none or it has expired.
	Get(ctx context.Context, owner, requestID string) (*Record, error)
	// Interrupt ends a running record owned by server, a server the
	// caller knows is gone, with terminal (state StateError) and expires.
	// Exactly one of concurrent callers wins; the others, and any call
	// after the record ended or while another server owns it, get
	// ErrConflict (ErrNotFound when there is no record).
	Interrupt(ctx context.Context, owner, requestID, server string, terminal []byte, expires time.Time) error
	// Owned lists the keys of the records server owns that are running or
	// ended at or after since (Running: only the running ones). At least
	// those created a moment before the call; DynamoStore's index is
	// eventually consistent, so callers read each record before acting.
	Owned(ctx context.Context, server string, since time.Time) ([]RecordKey, error)
	// Cancel flags a running record as cancelled by its user, whichever
	// server owns it; the owner learns it from its next Checkpoint
	// (ErrCancelled). Repeating it is a no-op returning nil. Errors:
	// ErrConflict (the record already ended: nothing to stop), ErrNotFound.
	Cancel(ctx context.Context, owner, requestID string) error
}

// RecordKey names one record.
type RecordKey struct{ Owner, RequestID string }

// runningEndedMS is ended_ms while a record runs: larger than any end.
const runningEndedMS = 9999999999999

// Running, as Owned's since, lists only the running records.
var Running = time.UnixMilli(runningEndedMS)

// recordKey is the storage key of a record (DynamoDB's pk).
func recordKey(owner, requestID string) string { return "req#" + owner + "#" + requestID }

func checkIDs(owner, requestID string) error {
	switch {
	case owner == "":
		return fmt.Errorf("%w: empty owner", ErrInvalid)
	case requestID == "":
		return fmt.Errorf("%w: empty request id", ErrInvalid)
	case strings.Contains(requestID, "#"):
		return fmt.Errorf("%w: request id %q holds '#'", ErrInvalid, requestID)
	}
	return nil
}

func checkOwnerCall(owner, requestID, server string) error {
	if err := checkIDs(owner, requestID); err != nil {
		return err
	}
	if server == "" {
		return fmt.Errorf("%w: empty server", ErrInvalid)
	}
	return nil
}

func checkAppend(prevSeq int) error {
	if prevSeq < 0 {
		return fmt.Errorf("%w: negative prevSeq %d", ErrInvalid, prevSeq)
	}
	return nil
}

func checkTerminal(state string, terminal []byte) error {
	if state != StateDone && state != StateError {
		return fmt.Errorf("%w: terminal state %q", ErrInvalid, state)
	}
	if len(terminal) == 0 {
		return fmt.Errorf("%w: empty terminal frame", ErrInvalid)
	}
	return nil
}

// Size estimate, following DynamoDB's rules (attribute name bytes plus
// value bytes; a list costs 3 bytes plus 1 per element plus its elements;
// a number at most 21 bytes). Both stores use it, so they refuse the same
// writes.
const (
	// fixedRecordBytes covers the attribute names, the numbers and the
	// short strings (state, server) of a record.
	fixedRecordBytes = 256
	listElemBytes    = 1
)

// chunksBytes is what chunks add to a record.
func chunksBytes(chunks []string) int {
	n := 0
	for _, c := range chunks {
		n += len(c) + listElemBytes
	}
	return n
}

// recordBytes estimates a record's stored size.
func recordBytes(r *Record) int {
	return fixedRecordBytes + len(recordKey(r.Owner, r.RequestID)) + len(r.Server) + len(r.BodyHash) +
		len(r.Accepted) + len(r.Reservation) + len(r.Trace) + len(r.Terminal) + chunksBytes(r.Chunks)
}

// sameChunks reports whether stored[from:] is exactly chunks.
func sameChunks(stored []string, from int, chunks []string) bool {
	if from > len(stored) || len(stored)-from != len(chunks) {
		return false
	}
	for i, c := range chunks {
		if stored[from+i] != c {
			return false
		}
	}
	return true
}

// appendRefusal says why a conditional Checkpoint (state == "") or Finish
// was refused, given the record as it is now: nil when the refused call
// had already been applied (a retry), else the error to return.
func appendRefusal(cur *Record, size int, server string, prevSeq int, chunks []string, state string, terminal []byte) error {
	if cur == nil {
		return ErrNotFound
	}
	applied := cur.Server == server && cur.Seq() == prevSeq+len(chunks) && sameChunks(cur.Chunks, prevSeq, chunks)
	if state != "" && applied && cur.State == state && string(cur.Terminal) == string(terminal) {
		return nil
	}
	if cur.Server != server || cur.State != StateRunning {
		return fmt.Errorf("%w: state %s, owner %s", ErrLostLease, cur.State, cur.Server)
	}
	// A retried checkpoint whose chunks are stored succeeds, so the
	// owner's seq stays right; a bare renewal always learns of the Cancel.
	if state == "" && cur.Cancelled && !(applied && len(chunks) > 0) {
		return fmt.Errorf("%w: seq %d stored", ErrCancelled, cur.Seq())
	}
	if state == "" && applied {
		return nil
	}
	if cur.Seq() != prevSeq {
		return fmt.Errorf("%w: stored seq %d, prevSeq %d", ErrConflict, cur.Seq(), prevSeq)
	}
	return fmt.Errorf("%w: about %d bytes stored, %d more, limit %d", ErrTooLarge, size, chunksBytes(chunks)+len(terminal), MaxRecordBytes)
}

// Precision of the stored expiry: DynamoStore keeps it in epoch seconds;
// MemoryStore rounds the same way so both compare alike.
func expirySeconds(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.Unix()
}

func expiryTime(s int64) time.Time {
	if s == 0 {
		return time.Time{}
	}
	return time.Unix(s, 0)
}

// expired reports whether a record with expiry exp (epoch seconds, 0 =
// never) is gone at now.
func expired(exp int64, now time.Time) bool { return exp != 0 && exp <= now.Unix() }
