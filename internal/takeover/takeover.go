// Package takeover is what a survivor does for the fleet: it follows the
// records of requests other servers run (a client resumed here), ends
// those whose server the fleet judged gone, and, once a server is gone,
// sweeps what it left behind (its running records, then its quota
// leases). Exactly one server ends a record: the ending is the pipeline's
// own (Core.End, the gateway's finish); this package decides only when.
//
// Liveness is the fleet's word (Fleet.Gone), never a late write: an owner
// that is alive is followed however slow its writes are.
package takeover

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/jetway-gateway/jetway/internal/quota"
	"github.com/jetway-gateway/jetway/internal/stream"
	"github.com/jetway-gateway/jetway/internal/tracing"
)

// Records is the shared request store, as far as a survivor reads it.
type Records interface {
	Get(ctx context.Context, owner, requestID string) (*stream.Record, error)
	// Owned lists the records server created since then (by its clock).
	Owned(ctx context.Context, server string, since time.Time) ([]stream.RecordKey, error)
}

// Fleet says whether a server is gone (*fleet.Membership).
type Fleet interface {
	// Gone reports whether server is known to be gone, for a record it
	// created at since (by its clock).
	Gone(server string, since time.Time) bool
}

// Leases takes back the quota leases of a server the fleet judged gone.
type Leases interface {
	GoneLeases(ctx context.Context, owner string, items []quota.Item) []quota.HeldLease
	ReclaimGone(ctx context.Context, h quota.HeldLease, keep quota.Amount) error
}

// Ending is how a followed request ends on this server (Core.End).
type Ending int

const (
	// Interrupted: its owner is gone. End ends the record with its saved
	// text (exactly one server wins the record's conditional interrupt),
	// delivers, writes the usage record and settles; it reports whether
	// this server won.
	Interrupted Ending = iota
	// Withdrawn: the record vanished before any chunk (its owner gave up
	// on the put that stored it, or it expired): nothing ran that this
	// copy knows of, so only this attempt is refused, retryably.
	Withdrawn
	// Vanished: the record vanished after chunks: only this copy ends
	// (cancelled, with what it has); the owner, whoever it is, charges.
	Vanished
)

// Core is what a survivor asks of the pipeline (internal/gateway): a
// request's one ending, and what a record's facts say. The record's
// format is the pipeline's.
type Core interface {
	// End ends log, the local copy of rec (nil unless Interrupted), as how
	// says; tctx carries the span its spans are children of. It reports
	// whether this server ended the request.
	End(tctx context.Context, how Ending, log *stream.Log, rec *stream.Record, logger *zap.Logger) bool
	// Facts reads rec's facts; an error says it is unreadable (the
	// facts are then zero).
	Facts(rec *stream.Record) (Facts, error)
	// Charged is what rec, ended done, was charged; false when it did not
	// end done.
	Charged(rec *stream.Record) (quota.Amount, bool)
}

// Facts are what a survivor needs of a record's request.
type Facts struct {
	ReceivedAt  time.Time          // by its server's clock; zero: unknown
	Reservation *quota.Reservation // nil: none, or it could not be restored
}

// Deps are a survivor's collaborators.
type Deps struct {
	Records Records
	Fleet   Fleet // nil: a fleet of one, nobody is ever gone
	Leases  Leases
	Logs    *stream.Registry
	Core    Core
	// Go runs f in the background, counted by the pipeline's drain
	// (Gateway.Wait); ctx ends at the drain's deadline.
	Go     func(f func(ctx context.Context))
	Tracer trace.Tracer // nil: no spans
	Logger *zap.Logger
}

// Options bound a survivor. PollInterval and StoreTimeout have no
// defaults of their own: the pipeline passes its (gateway.Options).
type Options struct {
	PollInterval time.Duration // between reads of a followed record
	StoreTimeout time.Duration // one store call
	Now          func() time.Time
}

// Bounds of a survivor's work.
const (
	maxPollBackoff   = 2 * time.Second  // between polls of a record after store errors
	sweepTimeout     = 30 * time.Second // listing and adopting a gone server's running records
	sweepConcurrency = 4                // sweeps of gone servers run at once; the rest wait their turn
)

// Survivor follows other servers' records and takes over a gone server's.
type Survivor struct {
	d      Deps
	o      Options
	sweeps chan struct{} // one slot per sweep running (sweepConcurrency)
}

// New returns a survivor.
func New(d Deps, o Options) *Survivor {
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Survivor{d: d, o: o, sweeps: make(chan struct{}, sweepConcurrency)}
}

// storeCtx bounds one store call.
func (s *Survivor) storeCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.o.StoreTimeout)
}

// start starts a span under ctx's; with tracing off it starts nothing and
// returns ctx's own span, as the pipeline's spans do.
func (s *Survivor) start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if s.d.Tracer == nil {
		return ctx, trace.SpanFromContext(ctx)
	}
	return s.d.Tracer.Start(ctx, name, opts...)
}

// recordTrace is the parent of a span about another server's record: its
// root span (invalid when the record carries none).
func recordTrace(traceparent string) context.Context {
	sc := tracing.Parse(traceparent)
	if !sc.IsValid() {
		return context.Background()
	}
	return trace.ContextWithRemoteSpanContext(context.Background(), sc)
}
