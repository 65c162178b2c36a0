package door

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/jetway-gateway/jetway/internal/call"
	"github.com/jetway-gateway/jetway/internal/gateway"
	"github.com/jetway-gateway/jetway/internal/telemetry"
)

// ByteBudget is a server-wide budget of bytes; Take never waits. The
// WebSocket door's attachment budget and the HTTP doors' body budget are
// both one.
type ByteBudget struct {
	limit   int64
	used    atomic.Int64
	observe func(used int64) // the metric; called after every change
}

// NewByteBudget returns a budget of limit bytes; observe (not nil) is
// told the bytes used after every change.
func NewByteBudget(limit int64, observe func(used int64)) *ByteBudget {
	return &ByteBudget{limit: limit, observe: observe}
}

// Take reserves n bytes, or none and false when they do not fit.
func (b *ByteBudget) Take(n int64) bool {
	used := b.used.Add(n)
	if used > b.limit {
		b.used.Add(-n)
		return false
	}
	b.observe(used)
	return true
}

// Give returns n bytes taken before.
func (b *ByteBudget) Give(n int64) {
	if n > 0 {
		b.observe(b.used.Add(-n))
	}
}

// Used is the bytes taken now.
func (b *ByteBudget) Used() int64 { return b.used.Load() }

// The defaults of the HTTP doors' intake (docs/configuration.md).
const (
	// DefaultBodyBytesInFlight is 256 bodies at the default body bound,
	// or 16 at 4 MiB (docs/anthropic.md's bound for Claude Code).
	DefaultBodyBytesInFlight = 64 << 20
	// DefaultRequestsPerUser is the WebSocket door's connections per user.
	DefaultRequestsPerUser = 16
)

// intakeChunk is the piece a body without Content-Length is read and
// counted in.
const intakeChunk = 32 << 10

// ErrRefused is a request refused before its body was read: the user had
// its cap of requests arriving (it also matches gateway.ErrRateLimited),
// or the server's body budget was spent (gateway.ErrAtCapacity).
var ErrRefused = errors.New("refused before the body was read")

// Intake bounds the HTTP request bodies the OpenAI and Anthropic doors
// hold at once: one server-wide budget of body bytes (past it: `busy`)
// and a cap on one user's requests whose bodies are arriving or being
// checked (past it: `rate_limited`). Both count from the first byte: a
// request takes its slot before any byte is read, and its Content-Length
// from the budget before the read (a chunked body takes its bytes as they
// arrive), so however many connections hold a body one byte short, the
// bytes held stay under the budget. Nothing waits for room. One Intake
// serves both doors.
type Intake struct {
	budget  *ByteBudget
	perUser int
	metrics *telemetry.Metrics // may be nil

	mu    sync.Mutex
	users map[string]int // by auth.Principal.Owner: requests arriving; absent at 0
}

// NewIntake returns the doors' intake: bytesInFlight and perUser at most
// (0: the defaults). metrics may be nil.
func NewIntake(bytesInFlight int64, perUser int, metrics *telemetry.Metrics) *Intake {
	if bytesInFlight <= 0 {
		bytesInFlight = DefaultBodyBytesInFlight
	}
	if perUser <= 0 {
		perUser = DefaultRequestsPerUser
	}
	return &Intake{budget: NewByteBudget(bytesInFlight, metrics.HTTPBodyBytesInFlight), perUser: perUser,
		metrics: metrics, users: map[string]int{}}
}

// Body is a request body read under the intake's bounds. Release gives
// its slot and bytes back, once it was handed on (or refused); it may be
// called more than once.
type Body struct {
	Bytes   []byte
	release func()
	once    sync.Once
}

// Release gives the body's slot and bytes back.
func (b *Body) Release() {
	if b != nil {
		b.once.Do(b.release)
	}
}

// Read reads r's body for owner (auth.Principal.Owner), at most max
// bytes, into a buffer sized from its Content-Length. Errors: ErrRefused
// (with gateway.ErrRateLimited or gateway.ErrAtCapacity; nothing was
// read), *http.MaxBytesError past max, or the read's error.
func (in *Intake) Read(w http.ResponseWriter, r *http.Request, door, owner string, max int64) (*Body, error) {
	body, err := in.take(w, r, door, owner, max)
	if err != nil {
		// A body left unread would be drained before the answer (net/http
		// reads up to 256 KiB of it, waiting for a client holding it back):
		// the refusal closes the connection instead.
		w.Header().Set("Connection", "close")
	}
	return body, err
}

func (in *Intake) take(w http.ResponseWriter, r *http.Request, door, owner string, max int64) (*Body, error) {
	in.mu.Lock()
	if in.users[owner] >= in.perUser {
		in.mu.Unlock()
		in.metrics.HTTPRequestRefused(door, telemetry.HTTPRefusedUser)
		return nil, fmt.Errorf("%w: %w", ErrRefused, &call.ClientError{Err: gateway.ErrRateLimited,
			Problem: fmt.Sprintf("more than %d requests of this user arriving at once: wait for an answer before sending more", in.perUser)})
	}
	in.users[owner]++
	in.mu.Unlock()
	var held int64
	release := func() {
		in.budget.Give(held)
		in.mu.Lock()
		if in.users[owner]--; in.users[owner] <= 0 {
			delete(in.users, owner)
		}
		in.mu.Unlock()
	}
	data, err := in.read(w, r, door, max, &held)
	if err != nil {
		release()
		return nil, err
	}
	return &Body{Bytes: data, release: release}, nil
}

func (in *Intake) read(w http.ResponseWriter, r *http.Request, door string, max int64, held *int64) ([]byte, error) {
	take := func(n int64) error {
		if !in.budget.Take(n) {
			in.metrics.HTTPRequestRefused(door, telemetry.HTTPRefusedServer)
			return fmt.Errorf("%w: %w: the HTTP doors' %d bytes of bodies in flight are spent", ErrRefused, gateway.ErrAtCapacity, in.budget.limit)
		}
		*held += n
		return nil
	}
	if r.ContentLength > max {
		return nil, &http.MaxBytesError{Limit: max}
	}
	body := http.MaxBytesReader(w, r.Body, max)
	if n := r.ContentLength; n >= 0 {
		if err := take(n); err != nil {
			return nil, err
		}
		data := make([]byte, n)
		if _, err := io.ReadFull(body, data); err != nil {
			return nil, err
		}
		return data, nil
	}
	var data []byte
	for {
		if err := take(intakeChunk); err != nil {
			return nil, err
		}
		data = append(data, make([]byte, intakeChunk)...)
		n, err := io.ReadFull(body, data[len(data)-intakeChunk:])
		data = data[:len(data)-intakeChunk+n]
		in.budget.Give(int64(intakeChunk - n))
		*held -= int64(intakeChunk - n)
		switch {
		case err == nil:
		case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
			return data, nil
		default:
			return nil, err
		}
	}
}
