package stream

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// memorySweepInterval is how often MemoryStore drops expired records.
const memorySweepInterval = time.Minute

// MemoryStore is a Store in process memory, for the embedded default (one
// gateway process) and tests. It has DynamoStore's semantics, including
// its time precision (leases in milliseconds, expiry in seconds) and its
// size limit; records are forgotten once Expires passes by its clock.
type MemoryStore struct {
	now func() time.Time

	mu        sync.Mutex
	records   map[string]*memRecord
	lastSweep time.Time
}

// memRecord is a stored record; expires is in epoch seconds (0 = never)
// and bytes the size estimate, kept as DynamoStore keeps item_bytes (grown
// by every write, never recomputed) so both refuse the same writes.
type memRecord struct {
	rec     Record
	expires int64
	bytes   int
}

// NewMemoryStore returns an empty MemoryStore reading time from now
// (time.Now when nil).
func NewMemoryStore(now func() time.Time) *MemoryStore {
	if now == nil {
		now = time.Now
	}
	return &MemoryStore{now: now, records: make(map[string]*memRecord), lastSweep: now()}
}

// clone returns a deep copy, so callers never share the stored slices.
func (r *Record) clone() *Record {
	c := *r
	c.Accepted = slices.Clone(r.Accepted)
	c.Chunks = slices.Clone(r.Chunks)
	c.Terminal = slices.Clone(r.Terminal)
	c.Reservation = slices.Clone(r.Reservation)
	return &c
}

// Create implements Store.
func (s *MemoryStore) Create(ctx context.Context, r Record) (*Record, error) {
	if err := checkOwnerCall(r.Owner, r.RequestID, r.Server); err != nil {
		return nil, fmt.Errorf("create: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("create: %w: %w", ErrUnavailable, err)
	}
	r.State, r.Chunks, r.Terminal = StateRunning, nil, nil
	r.Accepted, r.Reservation = nonEmpty(r.Accepted), nonEmpty(r.Reservation)
	exp := expirySeconds(r.Expires)
	r.Expires = expiryTime(exp)
	size := recordBytes(&r)
	if size > MaxRecordBytes {
		return nil, fmt.Errorf("create: %w", ErrTooLarge)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur := s.load(r.Owner, r.RequestID); cur != nil {
		return cur.rec.clone(), fmt.Errorf("create %s: %w", r.RequestID, ErrExists)
	}
	s.records[recordKey(r.Owner, r.RequestID)] = &memRecord{rec: *r.clone(), expires: exp, bytes: size}
	return r.clone(), nil
}

// Checkpoint implements Store.
func (s *MemoryStore) Checkpoint(ctx context.Context, owner, requestID, server string, prevSeq int, chunks []string) error {
	if err := checkAppend(prevSeq); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return s.update(ctx, "checkpoint", owner, requestID, server, func(cur *memRecord) error {
		if err := s.appendable(cur, server, prevSeq, chunks, "", nil, 0); err != nil {
			return err
		}
		cur.rec.Chunks = append(cur.rec.Chunks, chunks...)
		cur.bytes += chunksBytes(chunks)
		return nil
	})
}

// Finish implements Store.
func (s *MemoryStore) Finish(ctx context.Context, owner, requestID, server string, prevSeq int, chunks []string, state string, terminal []byte, expires time.Time) error {
	if err := checkAppend(prevSeq); err != nil {
		return fmt.Errorf("finish: %w", err)
	}
	if err := checkTerminal(state, terminal); err != nil {
		return fmt.Errorf("finish: %w", err)
	}
	return s.update(ctx, "finish", owner, requestID, server, func(cur *memRecord) error {
		if err := s.appendable(cur, server, prevSeq, chunks, state, terminal, len(terminal)); err != nil {
			return err
		}
		cur.rec.Chunks = append(cur.rec.Chunks, chunks...)
		cur.bytes += chunksBytes(chunks) + len(terminal)
		cur.rec.State, cur.rec.Terminal, cur.rec.EndedAt = state, slices.Clone(terminal), time.UnixMilli(s.now().UnixMilli())
		cur.expires = expirySeconds(expires)
		cur.rec.Expires = expiryTime(cur.expires)
		return nil
	})
}

// errApplied marks a retried write that had already been applied.
var errApplied = errors.New("already applied")

// appendable checks Checkpoint's and Finish's conditions (plus extra bytes
// besides the chunks) as DynamoStore's condition expression does, then
// explains a refusal as DynamoStore does.
func (s *MemoryStore) appendable(cur *memRecord, server string, prevSeq int, chunks []string, state string, terminal []byte, extra int) error {
	r := &cur.rec
	if r.Server == server && r.State == StateRunning && r.Seq() == prevSeq && (state != "" || !r.Cancelled) &&
		cur.bytes+chunksBytes(chunks)+extra <= MaxRecordBytes {
		return nil
	}
	if err := appendRefusal(r, cur.bytes, server, prevSeq, chunks, state, terminal); err != nil {
		return err
	}
	return errApplied
}

// Get implements Store.
func (s *MemoryStore) Get(ctx context.Context, owner, requestID string) (*Record, error) {
	if err := checkIDs(owner, requestID); err != nil {
		return nil, fmt.Errorf("get: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("get: %w: %w", ErrUnavailable, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.load(owner, requestID)
	if cur == nil {
		return nil, fmt.Errorf("get %s: %w", requestID, ErrNotFound)
	}
	return cur.rec.clone(), nil
}

// Interrupt implements Store.
func (s *MemoryStore) Interrupt(ctx context.Context, owner, requestID, server string, terminal []byte, expires time.Time) error {
	if err := checkTerminal(StateError, terminal); err != nil {
		return fmt.Errorf("interrupt: %w", err)
	}
	return s.update(ctx, "interrupt", owner, requestID, server, func(cur *memRecord) error {
		if cur.rec.State != StateRunning || cur.rec.Server != server {
			return fmt.Errorf("%w: state %s, owner %s", ErrConflict, cur.rec.State, cur.rec.Server)
		}
		if cur.bytes+len(terminal) > MaxRecordBytes {
			return fmt.Errorf("%w: about %d bytes stored, %d more, limit %d", ErrTooLarge, cur.bytes, len(terminal), MaxRecordBytes)
		}
		cur.bytes += len(terminal)
		cur.rec.State, cur.rec.Terminal, cur.rec.EndedAt = StateError, slices.Clone(terminal), time.UnixMilli(s.now().UnixMilli())
		cur.expires = expirySeconds(expires)
		cur.rec.Expires = expiryTime(cur.expires)
		return nil
	})
}

// Withdraw implements Store.
func (s *MemoryStore) Withdraw(ctx context.Context, owner, requestID, server, bodyHash string) error {
	return s.update(ctx, "withdraw", owner, requestID, server, func(cur *memRecord) error {
		if err := withdrawRefusal(&cur.rec, server, bodyHash); err != nil {
			return err
		}
		cur.expires = s.now().Unix() - 1
		cur.rec.Expires = expiryTime(cur.expires)
		return nil
	})
}

// Cancel implements Store.
func (s *MemoryStore) Cancel(ctx context.Context, owner, requestID string) error {
	return s.update(ctx, "cancel", owner, requestID, "-", func(cur *memRecord) error {
		if cur.rec.State != StateRunning {
			return fmt.Errorf("%w: state %s", ErrConflict, cur.rec.State)
		}
		cur.rec.Cancelled = true
		return nil
	})
}

// update runs f on the live record under the lock; f changes it in place
// only when it returns nil. server is only validated ("-" for Interrupt and Cancel).
func (s *MemoryStore) update(ctx context.Context, op, owner, requestID, server string, f func(cur *memRecord) error) error {
	if err := checkOwnerCall(owner, requestID, server); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: %w: %w", op, ErrUnavailable, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.load(owner, requestID)
	if cur == nil {
		return fmt.Errorf("%s %s: %w", op, requestID, ErrNotFound)
	}
	// f works on a copy so a refused write changes nothing.
	work := &memRecord{rec: *cur.rec.clone(), expires: cur.expires, bytes: cur.bytes}
	switch err := f(work); {
	case errors.Is(err, errApplied):
		return nil
	case err != nil:
		return fmt.Errorf("%s %s: %w", op, requestID, err)
	}
	if _, ok := s.records[recordKey(owner, requestID)]; ok {
		*cur = *work
	}
	return nil
}

// load returns the live record, treating an expired one as absent, and
// now and then sweeps expired records. s.mu is held.
func (s *MemoryStore) load(owner, requestID string) *memRecord {
	now := s.now()
	if now.Sub(s.lastSweep) >= memorySweepInterval {
		for k, r := range s.records {
			if expired(r.expires, now) {
				delete(s.records, k)
			}
		}
		s.lastSweep = now
	}
	key := recordKey(owner, requestID)
	r, ok := s.records[key]
	if !ok {
		return nil
	}
	if expired(r.expires, now) {
		delete(s.records, key)
		return nil
	}
	return r
}

// Owned implements Store.
func (s *MemoryStore) Owned(ctx context.Context, server string, since time.Time) ([]RecordKey, error) {
	if server == "" {
		return nil, fmt.Errorf("owned: %w: empty server", ErrInvalid)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("owned: %w: %w", ErrUnavailable, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	var keys []RecordKey
	for _, r := range s.records {
		if r.rec.Server != server || expired(r.expires, now) {
			continue
		}
		if r.rec.State == StateRunning || !r.rec.EndedAt.Before(since) {
			keys = append(keys, RecordKey{Owner: r.rec.Owner, RequestID: r.rec.RequestID})
		}
	}
	return keys, nil
}

// Len returns the number of records held (expired ones until the next sweep).
func (s *MemoryStore) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.records)
}
