package gateway

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/jetway-gateway/jetway/internal/call"
)

// Refusals cost the client, not the gateway. Each refusal a client caused
// (bad input, found by the pipeline or by a door's validation (Refuse), model_not_allowed, quota_exceeded, rate_limited, conflict,
// not_found, forbidden) takes one token from its user's bucket:
// MaxRefusalsPerUser tokens, refilled at MaxRefusalsPerUser a second. While
// the bucket is empty, the user's requests and resumes are refused
// `rate_limited` at once: before any store call, with no usage record and
// no log line of their own (the first of a streak logs `rejected`, the
// streak's count is logged as `refusals_limited` when it ends, and
// jetway_refusals_limited_total counts each). Refusals the server caused
// (busy, draining, internal) take no token.
//
// The buckets are keyed by auth.Principal.Owner (tenant, app, sub: a user
// holding a verified token). A bucket exists only while it is not full, and
// at most maxRefusalUsers exist (plus one shared): past that, full buckets are dropped, and if
// none is, the new user shares one overflow bucket with the others past the
// bound, so the map never grows with the number of users.

// maxRefusalUsers bounds the users whose refusals are tracked one by one.
const maxRefusalUsers = 10000

// overflowUser is the shared bucket of users past maxRefusalUsers.
const overflowUser = ""

var errRefusalRate = errors.New("too many refused requests")

type refusals struct {
	rate float64 // tokens a second, and the bucket's size
	max  int
	now  func() time.Time

	mu    sync.Mutex
	users map[string]*refusalBucket
}

type refusalBucket struct {
	tokens  float64
	at      time.Time
	limited int // requests refused at once since the last refusal that was let through
}

func newRefusals(perSecond int, now func() time.Time) *refusals {
	return &refusals{rate: float64(perSecond), max: maxRefusalUsers, now: now, users: map[string]*refusalBucket{}}
}

// refill brings b up to now.
func (r *refusals) refill(b *refusalBucket, now time.Time) {
	b.tokens = min(r.rate, b.tokens+now.Sub(b.at).Seconds()*r.rate)
	b.at = now
}

// bucket is user's bucket refilled to now, created (full) when absent.
// Callers hold mu.
func (r *refusals) bucket(user string, now time.Time) *refusalBucket {
	if b, ok := r.users[user]; ok {
		r.refill(b, now)
		return b
	}
	if len(r.users) >= r.max {
		for k, b := range r.users {
			if r.refill(b, now); b.tokens >= r.rate && b.limited == 0 {
				delete(r.users, k)
			}
		}
	}
	if len(r.users) >= r.max {
		user = overflowUser
		if b, ok := r.users[user]; ok {
			r.refill(b, now)
			return b
		}
	}
	b := &refusalBucket{tokens: r.rate, at: now}
	r.users[user] = b
	return b
}

// limit reports whether user's refusal budget is spent; if so it counts
// this request and says whether it is the first of a streak.
func (r *refusals) limit(user string) (limited, first bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	b, ok := r.users[user]
	if !ok && len(r.users) >= r.max {
		b, ok = r.users[overflowUser]
	}
	if !ok {
		return false, false // a full bucket
	}
	r.refill(b, r.now())
	if b.tokens >= 1 {
		return false, false
	}
	b.limited++
	return true, b.limited == 1
}

// charge takes a token for a refusal and returns how many requests were
// refused at once since the last charge.
func (r *refusals) charge(user string) (limited int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.bucket(user, r.now())
	b.tokens = max(0, b.tokens-1)
	limited, b.limited = b.limited, 0
	return limited
}

// clientCaused reports whether a refusal's cause is the client's (it
// takes a token) rather than the server's.
func clientCaused(code string) bool {
	switch code {
	case call.CodeBusy, call.CodeDraining, call.CodeInternal, call.CodeInterrupted:
		return false
	}
	return true
}

// refusalGate refuses the request at once when its user's refusal budget
// is spent. It returns nil otherwise.
func (g *Gateway) refusalGate(c Caller, requestID string) error {
	limited, first := g.refusals.limit(c.Principal.Owner())
	if !limited {
		return nil
	}
	g.metrics.RefusalLimited()
	err := call.Errorf(errors.Join(errRateLimited, errRefusalRate),
		"more than %d refused requests a second: slow down", int(g.refusals.rate))
	if first {
		g.requestLogger(c, requestID).Info("rejected", zap.String("code", call.CodeRateLimited),
			zap.Int("status", call.Status(call.CodeRateLimited)), zap.Error(err),
			zap.String("note", "further refusals of this user are counted, not logged, until its budget refills"))
	}
	return err
}

// chargeRefusal takes a token from the user's refusal budget when the
// client caused err, logging the streak of requests refused at once that
// this refusal ends.
func (g *Gateway) chargeRefusal(logger *zap.Logger, owner string, err error) {
	if !clientCaused(Failure(err).Code) {
		return
	}
	if n := g.refusals.charge(owner); n > 0 {
		logger.Info("refusals_limited", zap.Int("count", n))
	}
}

// Refuse is the refusal of what a door could not hand to the pipeline: a
// frame or body that failed validation (protocol.Decode,
// protocol.ValidateRequest, a door's own parsing), err. It costs what
// every refusal the client causes costs: a token of the user's refusal
// budget and a `rejected` line, and for a request (req.IsRequest) its
// usage record, as a request refused in the
// pipeline has. Past the budget it is refused `rate_limited` at once
// instead. It returns the error to send: err, or that rate_limited. ctx
// is the caller's; the refused request's trace is its child.
func (g *Gateway) Refuse(ctx context.Context, c Caller, req Request, err error) error {
	if lerr := g.refusalGate(c, req.RequestID); lerr != nil {
		return lerr
	}
	if !req.IsRequest {
		return g.refused(c, req.RequestID, err)
	}
	g.newFlight(ctx, c, req, nil).reject(err)
	return err
}

// refused logs a refusal that happens outside a flight (a conflict or a
// store failure found before admission, a resume or cancel of an unknown
// request), charges the user's refusal budget and returns err.
func (g *Gateway) refused(c Caller, requestID string, err error) error {
	pe := Failure(err)
	logger := g.requestLogger(c, requestID)
	fields := []zap.Field{zap.String("code", pe.Code), zap.Int("status", pe.Status), zap.Error(err)}
	if clientCaused(pe.Code) {
		logger.Info("rejected", fields...)
	} else {
		logger.Warn("rejected", fields...)
	}
	g.chargeRefusal(logger, c.Principal.Owner(), err)
	return err
}

// requestLogger is the logger of one request's lines, with more fields
// (one clone of the logger per request, not one per With).
func (g *Gateway) requestLogger(c Caller, requestID string, more ...zap.Field) *zap.Logger {
	return g.logger.With(append([]zap.Field{zap.String("request_id", requestID), zap.String("session_id", c.SessionID),
		zap.String("tenant", c.Principal.Tenant), zap.String("app", c.Principal.App),
		zap.String("user", c.Principal.Subject)}, more...)...)
}
