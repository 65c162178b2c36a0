// Package alert sends quota threshold alerts (the admin API's contract,
// "Alerts"; docs/configuration.md, "Quota alerts"): when a scope's use of
// a limit in one window instance first reaches one of the limit's
// thresholds (percent; 100 also when a request is first refused for it),
// one event goes to every configured sink, once across the whole fleet.
//
// The gateway hands each admission's measures to Notifier.Observe, which
// only does arithmetic and, for a crossing, a non-blocking send on a
// bounded queue (a full queue drops the alert and counts it): admission
// never waits on an alert. Workers behind the queue ask a Claimer who
// sends each (scope, window instance, measure, threshold) event, exactly
// one caller across the fleet winning (DynamoDB: one conditional put), and
// the winner sends the event to every Sink (a signed webhook, an SNS
// topic), logs it (`quota_alert`) and counts it
// (jetway_quota_alerts_total). A claim that fails is not sent: an alert
// may be lost, never sent twice by two servers.
package alert

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"go.uber.org/zap"

	"github.com/jetway-gateway/jetway/internal/telemetry"
)

// EventType is the "type" of every event this package sends.
const EventType = "jetway.quota.threshold"

// DefaultThresholds are a limit's alerts when it names none.
var DefaultThresholds = []int{80, 90, 100}

// Scopes and measures: the values an Observation carries.
const (
	ScopeTenant = "tenant"
	ScopeApp    = "app"
	ScopeUser   = "user"

	MeasureTokens   = "tokens"
	MeasureRequests = "requests"
	MeasureUSD      = "usd" // in micro-dollars in an Observation, in dollars in an Event
)

// Defaults of Options (docs/configuration.md, "Quota alerts").
const (
	DefaultQueueSize       = 1024
	DefaultWorkers         = 4
	DefaultClaimTimeout    = 2 * time.Second
	DefaultSendTimeout     = 15 * time.Second
	DefaultRecentCrossings = 10000
	// ClaimGrace is how long past its window's end a claim is kept (the
	// quota items' own grace, quota.ExpiryGrace).
	ClaimGrace = 24 * time.Hour
)

// Observation is one measure of one limit seen at admission.
type Observation struct {
	Tenant, App, User           string    // User empty unless Scope is "user"
	Scope                       string    // "tenant", "app" or "user"
	Window                      string    // minute|hour|day|month
	WindowStart, WindowResetsAt time.Time // the window instance
	Measure                     string    // "tokens", "requests" or "usd"
	// Limit, Before and After are in the measure's unit (usd in
	// micro-dollars, 1e-6 USD); Before and After are the use before and
	// after this request's reservation.
	Limit, Before, After int64
	Thresholds           []int // the limit's alerts; nil = DefaultThresholds
	Refused              bool  // the request was refused for this limit (counts as reaching 100)
}

// mark is the use at which threshold t (percent) of limit is reached:
// ceil(limit*t/100), computed without overflow for t <= 100.
func mark(limit int64, t int) int64 {
	q, r := limit/100, limit%100
	return q*int64(t) + (r*int64(t)+99)/100
}

// crosses reports whether this observation is at or past threshold t
// (percent, 1..100; any other never is): ceil(Limit*t/100) <= After, or a
// refusal for the limit when t is 100 (even with After below it). Not
// only the observation that passes the mark: with quota leases a server
// sees other servers' use in jumps (their lease grants), so the one that
// passed it may be on no server at all. The claim makes it one event.
func (o Observation) crosses(t int) bool {
	if t < 1 || t > 100 || o.Limit <= 0 {
		return false
	}
	if o.Refused && t == 100 {
		return true
	}
	return mark(o.Limit, t) <= o.After
}

// scopeKey names the scope's counter: the tenant, tenant/app or
// tenant/app/user; "" for an unknown scope.
func (o Observation) scopeKey() string {
	switch o.Scope {
	case ScopeTenant:
		return o.Tenant
	case ScopeApp:
		return o.Tenant + "/" + o.App
	case ScopeUser:
		return o.Tenant + "/" + o.App + "/" + o.User
	}
	return ""
}

// Key is the claim key of threshold t of this observation's window
// instance, for example "user#contoso/support/alice#hour#2026-11-29T19:00:00Z#tokens#80".
// The scope never contains '#' and the last four fields have fixed forms,
// so keys are unambiguous whatever the tenant, app and user hold.
func (o Observation) Key(t int) string {
	return o.Scope + "#" + o.scopeKey() + "#" + o.Window + "#" + o.WindowStart.UTC().Format(time.RFC3339) +
		"#" + o.Measure + "#" + strconv.Itoa(t)
}

// Event is what every sink receives, as JSON.
type Event struct {
	Type           string      `json:"type"` // EventType
	Tenant         string      `json:"tenant"`
	App            string      `json:"app"` // the app of the request that reached the threshold (for a tenant limit, one of its apps)
	User           string      `json:"user,omitempty"`
	Scope          string      `json:"scope"`
	Window         string      `json:"window"`
	Measure        string      `json:"measure"`
	Limit          json.Number `json:"limit"` // in the measure's unit: tokens, requests, or dollars
	Used           json.Number `json:"used"`  // the use after the request that reached the threshold
	Threshold      int         `json:"threshold"`
	WindowResetsAt time.Time   `json:"window_resets_at"`
	At             time.Time   `json:"at"`
}

// amount is v in the measure's natural unit (usd: dollars).
func amount(measure string, v int64) json.Number {
	if measure == MeasureUSD {
		return json.Number(strconv.FormatFloat(float64(v)/1e6, 'f', -1, 64))
	}
	return json.Number(strconv.FormatInt(v, 10))
}

// crossing is one threshold reached, waiting in the queue.
type crossing struct {
	key       string
	threshold int
	obs       Observation // Thresholds cleared
	at        time.Time
}

func (c *crossing) event() Event {
	o := &c.obs
	return Event{
		Type: EventType, Tenant: o.Tenant, App: o.App, User: o.User, Scope: o.Scope, Window: o.Window, Measure: o.Measure,
		Limit: amount(o.Measure, o.Limit), Used: amount(o.Measure, o.After), Threshold: c.threshold,
		WindowResetsAt: o.WindowResetsAt.UTC(), At: c.at.UTC(),
	}
}

// Claimer decides, across the fleet, who sends one (scope, window
// instance, measure, threshold) event: Claim returns true to exactly one
// caller of a key until expires. An error means the claim is unknown (it
// may have been made): the caller does not send.
type Claimer interface {
	Claim(ctx context.Context, key string, expires time.Time) (bool, error)
}

// Sink delivers one event's JSON body. Name is a fixed name (the sink
// label of jetway_quota_alerts_total); Send retries within its own bounds
// and ends with ctx.
type Sink interface {
	Name() string
	Send(ctx context.Context, body []byte) error
}

// Options bound a Notifier; zero values mean the defaults.
type Options struct {
	// QueueSize bounds the crossings waiting for a worker
	// (DefaultQueueSize); past it Observe drops them, counted.
	QueueSize int
	// Workers claim and send in parallel (DefaultWorkers).
	Workers int
	// ClaimTimeout bounds one claim (DefaultClaimTimeout).
	ClaimTimeout time.Duration
	// SendTimeout bounds one sink's delivery of one event, its retries
	// included (DefaultSendTimeout).
	SendTimeout time.Duration
	// RecentCrossings bounds the keys this process remembers having
	// queued (DefaultRecentCrossings): a repeat of one (every refused
	// request reaches 100) costs no claim.
	RecentCrossings int
	// Now is the clock of the events' "at" (nil: time.Now).
	Now func() time.Time
}

func (o Options) withDefaults() Options {
	if o.QueueSize <= 0 {
		o.QueueSize = DefaultQueueSize
	}
	if o.Workers <= 0 {
		o.Workers = DefaultWorkers
	}
	if o.ClaimTimeout <= 0 {
		o.ClaimTimeout = DefaultClaimTimeout
	}
	if o.SendTimeout <= 0 {
		o.SendTimeout = DefaultSendTimeout
	}
	if o.RecentCrossings <= 0 {
		o.RecentCrossings = DefaultRecentCrossings
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Notifier turns observations into alerts. Its methods are safe for
// concurrent use; Observe never blocks.
type Notifier struct {
	o       Options
	claims  Claimer
	sinks   []Sink
	metrics *telemetry.Metrics
	log     *zap.Logger
	recent  *lru.Cache[string, struct{}]

	ctx    context.Context // ends when Close gives up waiting
	cancel context.CancelFunc

	mu     sync.RWMutex // guards closed and the queue's closing
	closed bool
	queue  chan crossing

	closeOnce sync.Once
	done      chan struct{} // closed when every worker has returned
}

// New returns a Notifier sending to sinks (none: Observe does nothing)
// after claims (nil: NewMemoryClaimer, one process) agrees. m and log may
// be nil. Its workers run until Close.
func New(o Options, claims Claimer, sinks []Sink, m *telemetry.Metrics, log *zap.Logger) *Notifier {
	o = o.withDefaults()
	if claims == nil {
		claims = NewMemoryClaimer()
	}
	if log == nil {
		log = zap.NewNop()
	}
	recent, _ := lru.New[string, struct{}](o.RecentCrossings) // only a size <= 0 errs
	n := &Notifier{o: o, claims: claims, sinks: sinks, metrics: m, log: log, recent: recent,
		queue: make(chan crossing, o.QueueSize), done: make(chan struct{})}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	if !n.Enabled() {
		close(n.done)
		return n
	}
	var wg sync.WaitGroup
	for range o.Workers {
		wg.Go(func() {
			for c := range n.queue {
				n.deliver(c)
			}
		})
	}
	go func() { wg.Wait(); close(n.done) }()
	return n
}

// Enabled reports whether any sink is configured (false on a nil
// Notifier, whose Observe and Close do nothing).
func (n *Notifier) Enabled() bool { return n != nil && len(n.sinks) > 0 }

// Observe queues an alert for every threshold that obs reach first. It
// never blocks: a crossing this process queued recently is skipped, and
// one that finds the queue full (or the Notifier closed) is dropped and
// counted (outcome "dropped").
func (n *Notifier) Observe(obs ...Observation) {
	if !n.Enabled() {
		return
	}
	var at time.Time
	for i := range obs {
		o := &obs[i]
		if o.scopeKey() == "" {
			continue
		}
		ts := o.Thresholds
		if ts == nil {
			ts = DefaultThresholds
		}
		for _, t := range ts {
			if !o.crosses(t) {
				continue
			}
			if at.IsZero() {
				at = n.o.Now()
			}
			c := crossing{key: o.Key(t), threshold: t, obs: *o, at: at}
			c.obs.Thresholds = nil
			n.enqueue(c)
		}
	}
}

func (n *Notifier) enqueue(c crossing) {
	n.mu.RLock()
	defer n.mu.RUnlock()
	if n.closed {
		n.metrics.QuotaAlert(c.obs.Scope, c.threshold, "", telemetry.AlertDropped)
		return
	}
	if seen, _ := n.recent.ContainsOrAdd(c.key, struct{}{}); seen {
		return
	}
	select {
	case n.queue <- c:
	default:
		n.recent.Remove(c.key) // a later observation may try again
		n.metrics.QuotaAlert(c.obs.Scope, c.threshold, "", telemetry.AlertDropped)
	}
}

// deliver claims c and, when this process won it, sends it to every sink.
func (n *Notifier) deliver(c crossing) {
	if n.ctx.Err() != nil { // Close stopped waiting
		n.metrics.QuotaAlert(c.obs.Scope, c.threshold, "", telemetry.AlertDropped)
		return
	}
	ctx, cancel := context.WithTimeout(n.ctx, n.o.ClaimTimeout)
	won, err := n.claims.Claim(ctx, c.key, c.obs.WindowResetsAt.Add(ClaimGrace))
	cancel()
	switch {
	case err != nil:
		n.recent.Remove(c.key) // a later observation may claim it again: the claim itself is exactly once
		n.metrics.QuotaAlert(c.obs.Scope, c.threshold, "", telemetry.AlertClaimFailed)
		n.log.Warn("quota_alert_claim_failed", append(fields(&c), zap.Error(err))...)
		return
	case !won:
		n.metrics.QuotaAlert(c.obs.Scope, c.threshold, "", telemetry.AlertClaimedElsewhere)
		return
	}
	body, err := json.Marshal(c.event())
	if err != nil { // no value of Event fails to encode
		n.log.Error("quota_alert_encode", append(fields(&c), zap.Error(err))...)
		return
	}
	errs := make([]error, len(n.sinks))
	var wg sync.WaitGroup
	for i, s := range n.sinks {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(n.ctx, n.o.SendTimeout)
			defer cancel()
			errs[i] = s.Send(ctx, body)
		})
	}
	wg.Wait()
	var sent, failed []string
	fs := fields(&c)
	for i, s := range n.sinks {
		if errs[i] != nil {
			failed = append(failed, s.Name())
			fs = append(fs, zap.NamedError(s.Name()+"_error", errs[i]))
			n.metrics.QuotaAlert(c.obs.Scope, c.threshold, s.Name(), telemetry.AlertFailed)
			continue
		}
		sent = append(sent, s.Name())
		n.metrics.QuotaAlert(c.obs.Scope, c.threshold, s.Name(), telemetry.AlertSent)
	}
	fs = append(fs, zap.Strings("sent", sent), zap.Strings("failed", failed))
	if len(failed) > 0 {
		n.log.Warn("quota_alert", fs...)
		return
	}
	n.log.Info("quota_alert", fs...)
}

// fields are the event's log fields.
func fields(c *crossing) []zap.Field {
	e := c.event()
	return []zap.Field{
		zap.String("tenant", e.Tenant), zap.String("app", e.App), zap.String("user", e.User),
		zap.String("scope", e.Scope), zap.String("window", e.Window), zap.String("measure", e.Measure),
		logAmount("limit", e.Measure, c.obs.Limit), logAmount("used", e.Measure, c.obs.After), zap.Int("threshold", e.Threshold),
		zap.Time("window_resets_at", e.WindowResetsAt), zap.Time("at", e.At), zap.Bool("refused", c.obs.Refused),
	}
}

// logAmount is the field of v in the measure's natural unit, as a number.
func logAmount(key, measure string, v int64) zap.Field {
	if measure == MeasureUSD {
		return zap.Float64(key, float64(v)/1e6)
	}
	return zap.Int64(key, v)
}

// Close stops taking observations and waits, bounded by ctx, until what
// is queued has been claimed and sent. When ctx ends first it stops the
// claims and sends under way, counts what is still queued as dropped, and
// returns ctx's error at once. It is safe to call twice.
func (n *Notifier) Close(ctx context.Context) error {
	if n == nil {
		return nil
	}
	n.closeOnce.Do(func() {
		n.mu.Lock()
		n.closed = true
		close(n.queue)
		n.mu.Unlock()
	})
	select {
	case <-n.done:
		n.cancel()
		return nil
	case <-ctx.Done():
		n.cancel()
		return ctx.Err()
	}
}
