package telemetry

import (
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Label values must come from the configuration (tenant, app and model ids)
// or from fixed enums (outcome codes, directions, operations, error kinds,
// sink names, rejection reasons); never user ids, request ids or free text,
// so the number of series stays bounded. An empty value is recorded as
// "none"; after LimitModels, a model id outside the configuration as
// OtherModel.

// OtherModel is the one label (and usage-record value) for every model id
// that is not in the configuration: a client may name any string, and none
// may become a series of its own.
const OtherModel = "other"

// Directions for token counts.
const (
	DirectionInput  = "input"
	DirectionOutput = "output"
	// Input tokens read from and written to the model's prompt cache
	// (DirectionInput counts the rest).
	DirectionCacheRead  = "cache_read"
	DirectionCacheWrite = "cache_write"
)

// Sink names used as the "sink" label.
const (
	SinkFirehose = "firehose"
	SinkFile     = "file"
)

// BreakerState is a circuit breaker's state as a gauge value. The numbers
// match gobreaker's State (closed 0, half-open 1, open 2), so
// BreakerState(st) converts.
type BreakerState int

// Breaker states.
const (
	BreakerClosed   BreakerState = 0
	BreakerHalfOpen BreakerState = 1
	BreakerOpen     BreakerState = 2
)

// durationBuckets (seconds) serve TTFT, latency and AWS call
// latency: 1 ms to 60 s.
var durationBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 20, 30, 60}

// Metrics are Jetway's Prometheus metrics (namespace "jetway"). Every method
// is safe for concurrent use, never blocks, and is a no-op on a nil
// *Metrics, so callers may pass nil to switch metrics off. When an EMF
// aggregator is attached (SetEMF), the same calls feed it.
type Metrics struct {
	emf    atomic.Pointer[EMF]
	models atomic.Pointer[map[string]struct{}] // nil: every model id is a label

	activeSessions    prometheus.Gauge
	inflight          prometheus.Gauge
	requests          *prometheus.CounterVec   // tenant, app, model, outcome
	tokens            *prometheus.CounterVec   // tenant, app, model, direction
	cacheSaved        *prometheus.CounterVec   // tenant, app, model
	ttft              *prometheus.HistogramVec // tenant, app, model
	latency           *prometheus.HistogramVec // tenant, app, model
	chunks            prometheus.Counter
	slowConsumer      prometheus.Counter
	quotaRejections   *prometheus.CounterVec   // tenant, app, scope, window
	dynamoCalls       *prometheus.CounterVec   // table, op, outcome
	dynamoLatency     *prometheus.HistogramVec // table, op
	bedrockLatency    *prometheus.HistogramVec // model
	bedrockErrors     *prometheus.CounterVec   // model, kind
	breaker           *prometheus.GaugeVec     // model
	usageSent         *prometheus.CounterVec   // sink
	usageFailed       *prometheus.CounterVec   // sink
	usageDropped      *prometheus.CounterVec   // sink, reason
	spoolRecords      prometheus.Gauge
	spoolBytes        prometheus.Gauge
	spansFailed       prometheus.Counter
	connRejected      *prometheus.CounterVec // reason
	retainedBytes     prometheus.Gauge
	retainedEvicted   prometheus.Counter
	refusalsLimited   prometheus.Counter
	followed          prometheus.Counter
	takenOver         prometheus.Counter
	attachmentBytes   prometheus.Gauge
	attachmentRefused prometheus.Counter
	sessionsMoved     *prometheus.CounterVec // reason
	unauthenticated   *prometheus.CounterVec // door
	authCache         *prometheus.CounterVec // result
	httpBodyBytes     prometheus.Gauge
	httpRefused       *prometheus.CounterVec // door, reason
	countTokens       prometheus.Counter
	quotaAlerts       *prometheus.CounterVec // scope, threshold, sink, outcome
	configAge         prometheus.Gauge       // seconds since the config table was last read
	configPolls       *prometheus.CounterVec // outcome
}

// NewMetrics makes the metrics and registers them with reg (nil: not
// registered, still usable). It panics if reg already holds metrics with
// the same names, like prometheus.MustRegister.
//
// The metrics, all prefixed "jetway_":
//
//	active_sessions                       gauge
//	requests_in_flight                    gauge
//	requests_total                        counter   tenant, app, model, outcome
//	tokens_total                          counter   tenant, app, model, direction (input|output|cache_read|cache_write)
//	prompt_cache_saved_usd_total          counter   tenant, app, model (negative increments are left out)
//	ttft_seconds                          histogram tenant, app, model
//	request_duration_seconds              histogram tenant, app, model
//	chunks_sent_total                     counter
//	slow_consumer_closes_total            counter
//	quota_rejections_total                counter   tenant, app, scope, window
//	dynamodb_calls_total                  counter   table (quota|requests|cache), op, outcome
//	dynamodb_call_duration_seconds        histogram table, op
//	bedrock_call_duration_seconds         histogram model
//	bedrock_errors_total                  counter   model, kind
//	breaker_state                         gauge     model, placement ("" without placements; 0 closed, 1 half-open, 2 open)
//	usage_records_sent_total              counter   sink
//	usage_records_failed_total            counter   sink
//	usage_records_dropped_total           counter   sink, reason (buffer_full|spool_full|spool_error)
//	usage_spool_records                   gauge
//	usage_spool_bytes                     gauge
//	trace_spans_export_failed_total       counter
//	connections_rejected_total            counter   reason
//	retained_answer_bytes                 gauge
//	retained_answers_evicted_total        counter
//	refusals_limited_total                counter
//	requests_followed_total               counter
//	requests_taken_over_total             counter
//	attachment_bytes_in_flight            gauge
//	attachment_frames_refused_total       counter
//	sessions_moved_total                  counter   reason (balance|busy)
//	unauthenticated_refusals_total        counter   door (ws|openai|anthropic)
//	auth_cache_lookups_total              counter   result (hit|miss)
//	quota_alerts_total                    counter   scope, threshold, sink, outcome (sent|failed|dropped|claimed_elsewhere|claim_failed)
func NewMetrics(reg prometheus.Registerer) *Metrics {
	const ns = "jetway"
	hist := func(name, help string, labels ...string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: name, Help: help, Buckets: durationBuckets}, labels)
	}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: name, Help: help}, labels)
	}
	m := &Metrics{
		activeSessions: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "active_sessions",
			Help: "WebSocket sessions open on this server."}),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "requests_in_flight",
			Help: "Requests admitted and not yet ended on this server."}),
		requests: counter("requests_total", "Requests by outcome (done or the error code).", "tenant", "app", "model", "outcome"),
		tokens:   counter("tokens_total", "Tokens charged, by direction (input|output|cache_read|cache_write).", "tenant", "app", "model", "direction"),
		cacheSaved: counter("prompt_cache_saved_usd_total", "What the prompt cache saved, in USD (requests that saved money; "+
			"cache_saved_usd in the usage records has the exact sum, losses included).", "tenant", "app", "model"),
		ttft:    hist("ttft_seconds", "Time from request arrival to the first chunk sent.", "tenant", "app", "model"),
		latency: hist("request_duration_seconds", "Time from request arrival to the done frame.", "tenant", "app", "model"),
		chunks: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "chunks_sent_total",
			Help: "Chunk frames produced for requests."}),
		slowConsumer: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "slow_consumer_closes_total",
			Help: "Connections closed because the client stopped reading (4008)."}),
		quotaRejections: counter("quota_rejections_total", "Requests rejected by a quota, by the scope and window that was exhausted.", "tenant", "app", "scope", "window"),
		dynamoCalls: counter("dynamodb_calls_total", "DynamoDB calls by table role, store operation and outcome "+
			"(ok|throttled|condition_failed|timeout|unavailable|other).", "table", "op", "outcome"),
		dynamoLatency:  hist("dynamodb_call_duration_seconds", "DynamoDB call latency by table role and store operation.", "table", "op"),
		bedrockLatency: hist("bedrock_call_duration_seconds", "Bedrock call latency (to the end of the stream).", "model"),
		bedrockErrors:  counter("bedrock_errors_total", "Bedrock call errors by kind.", "model", "kind"),
		breaker: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "breaker_state",
			Help: "Circuit breaker state per model and placement: 0 closed, 1 half-open, 2 open."}, []string{"model", "placement"}),
		usageSent:    counter("usage_records_sent_total", "Usage records delivered by the sink.", "sink"),
		usageFailed:  counter("usage_records_failed_total", "Usage records the sink gave up on.", "sink"),
		usageDropped: counter("usage_records_dropped_total", "Usage records lost: the sink's buffer was full (no spool), the spool was full (its oldest records) or could not be written.", "sink", "reason"),
		spoolRecords: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "usage_spool_records", Help: "Usage records waiting in the local spool for Firehose."}),
		spoolBytes:   prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "usage_spool_bytes", Help: "Bytes of the local spool's segment files."}),
		spansFailed:  prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "trace_spans_export_failed_total", Help: "Spans in OTLP exports that failed (the collector down or refusing): lost."}),
		connRejected: counter("connections_rejected_total", "WebSocket connections refused before the upgrade, by reason.", "reason"),
		retainedBytes: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "retained_answer_bytes",
			Help: "Estimated memory of the finished answers kept for resume (bounded by JETWAY_RETAINED_ANSWER_BYTES)."}),
		retainedEvicted: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "retained_answers_evicted_total",
			Help: "Finished answers forgotten before the resume window ended because the retained bytes passed their budget."}),
		refusalsLimited: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "refusals_limited_total",
			Help: "Requests refused rate_limited at once, with no usage record, because their user passed JETWAY_MAX_REFUSALS_PER_USER."}),
		followed: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "requests_followed_total",
			Help: "Requests whose record another server already held: the local model call was stopped and this server follows the owner."}),
		takenOver: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "requests_taken_over_total",
			Help: "Records of servers the fleet judged gone that this server ended (interrupted), settling their quota."}),
		attachmentBytes: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "attachment_bytes_in_flight",
			Help: "Bytes past JETWAY_MAX_FRAME_BYTES of inbound frames being read or admitted (bounded by JETWAY_ATTACHMENT_BYTES_IN_FLIGHT)."}),
		attachmentRefused: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "attachment_frames_refused_total",
			Help: "Frames past JETWAY_MAX_FRAME_BYTES read and dropped because JETWAY_ATTACHMENT_BYTES_IN_FLIGHT (their request answered busy) or the user's share of it, JETWAY_ATTACHMENT_BYTES_PER_USER (rate_limited), was spent."}),
		sessionsMoved: counter("sessions_moved_total", "Sessions asked to move to another server (a draining frame for that session), "+
			"by reason: balance (this server above the fleet's mean), busy (answered busy while another server had room).", "reason"),
		unauthenticated: counter("unauthenticated_refusals_total", "Connections and requests refused for their credentials (missing, "+
			"malformed, in the query string, invalid or expired, or a user with no tenant or app), by door; their log lines are sampled.", "door"),
		authCache: counter("auth_cache_lookups_total", "Token verifications answered from the verified-token cache (hit) or checked in full (miss; "+
			"bounded by JETWAY_AUTH_CACHE_ENTRIES).", "result"),
		httpBodyBytes: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "http_body_bytes_in_flight",
			Help: "Bytes of HTTP request bodies being read or checked by the OpenAI and Anthropic doors (bounded by JETWAY_HTTP_BODY_BYTES_IN_FLIGHT)."}),
		httpRefused: counter("http_requests_refused_total", "HTTP requests refused before their body was read, by door and reason: "+
			"user (the user had JETWAY_HTTP_REQUESTS_PER_USER bodies arriving: rate_limited), server (JETWAY_HTTP_BODY_BYTES_IN_FLIGHT spent: busy).", "door", "reason"),
		countTokens: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "count_tokens_total",
			Help: "POST /v1/messages/count_tokens requests answered (or refused) by the Anthropic door."}),
		quotaAlerts: counter("quota_alerts_total", "Quota threshold alerts by scope, threshold (percent) and sink, by outcome: sent or failed "+
			"(per sink), dropped (the alert queue was full or closed), claimed_elsewhere (another server sends it), claim_failed (the claim "+
			"could not be made: not sent); the last three with sink \"none\".", "scope", "threshold", "sink", "outcome"),
		configAge: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "config_age_seconds",
			Help: "Seconds since this server last read the config table (JETWAY_CONFIG_TABLE): it serves its last good configuration meanwhile; alarm above a few poll intervals."}),
		configPolls: counter("config_polls_total", "Reads of the config table's head item (JETWAY_CONFIG_POLL_INTERVAL), by outcome: ok or failed.", "outcome"),
	}
	if reg != nil {
		reg.MustRegister(m.activeSessions, m.inflight, m.requests, m.tokens, m.cacheSaved, m.ttft, m.latency, m.chunks,
			m.slowConsumer, m.quotaRejections, m.dynamoCalls, m.dynamoLatency,
			m.bedrockLatency, m.bedrockErrors, m.breaker, m.usageSent, m.usageFailed, m.usageDropped, m.spoolRecords, m.spoolBytes, m.spansFailed,
			m.connRejected, m.retainedBytes, m.retainedEvicted, m.followed, m.takenOver, m.refusalsLimited, m.attachmentBytes, m.attachmentRefused,
			m.unauthenticated, m.sessionsMoved, m.authCache, m.httpBodyBytes, m.httpRefused, m.countTokens, m.quotaAlerts,
			m.configAge, m.configPolls)
	}
	return m
}

// SetEMF attaches an EMF aggregator fed by the same calls from now on (nil
// detaches). Safe to call at any time.
func (m *Metrics) SetEMF(e *EMF) {
	if m == nil {
		return
	}
	m.emf.Store(e)
}

// LimitModels makes ids the only model labels from now on: any other model
// id is recorded as OtherModel. Call it with the configuration's model ids.
func (m *Metrics) LimitModels(ids []string) {
	if m == nil {
		return
	}
	set := make(map[string]struct{}, len(ids))
	for _, id := range ids {
		set[id] = struct{}{}
	}
	m.models.Store(&set)
}

// model is the label for a model id: "none", a configured id or OtherModel.
func (m *Metrics) model(id string) string {
	if id == "" {
		return "none"
	}
	if set := m.models.Load(); set != nil {
		if _, ok := (*set)[id]; !ok {
			return OtherModel
		}
	}
	return id
}

func label(v string) string {
	if v == "" {
		return "none"
	}
	return v
}

// SessionOpened counts a WebSocket session as open.
func (m *Metrics) SessionOpened() {
	if m == nil {
		return
	}
	m.activeSessions.Inc()
	m.emf.Load().addSessions(1)
}

// SessionClosed counts a WebSocket session as closed.
func (m *Metrics) SessionClosed() {
	if m == nil {
		return
	}
	m.activeSessions.Dec()
	m.emf.Load().addSessions(-1)
}

// RequestStarted counts a request as in flight (admitted); pair it with
// RequestFinished.
func (m *Metrics) RequestStarted() {
	if m == nil {
		return
	}
	m.inflight.Inc()
	m.emf.Load().addInflight(1)
}

// RequestFinished counts an in-flight request as ended.
func (m *Metrics) RequestFinished() {
	if m == nil {
		return
	}
	m.inflight.Dec()
	m.emf.Load().addInflight(-1)
}

// ObserveRequest records a finished request from its usage record (call it
// once per request, with the record given to the sink): requests_total by
// outcome, tokens by direction, chunks sent, TTFT when a chunk was sent
// (Chunks > 0), and latency when the outcome is "done". It does not touch
// the in-flight gauge (RequestFinished).
func (m *Metrics) ObserveRequest(r UsageRecord) {
	if m == nil {
		return
	}
	t, a, mo := label(r.Tenant), label(r.App), m.model(r.Model)
	m.requests.WithLabelValues(t, a, mo, label(r.Outcome)).Inc()
	if r.InputTokens > 0 {
		m.tokens.WithLabelValues(t, a, mo, DirectionInput).Add(float64(r.InputTokens))
	}
	if r.OutputTokens > 0 {
		m.tokens.WithLabelValues(t, a, mo, DirectionOutput).Add(float64(r.OutputTokens))
	}
	if r.CacheReadInputTokens > 0 {
		m.tokens.WithLabelValues(t, a, mo, DirectionCacheRead).Add(float64(r.CacheReadInputTokens))
	}
	if r.CacheWriteInputTokens > 0 {
		m.tokens.WithLabelValues(t, a, mo, DirectionCacheWrite).Add(float64(r.CacheWriteInputTokens))
	}
	if r.CacheSavedUSD > 0 {
		m.cacheSaved.WithLabelValues(t, a, mo).Add(r.CacheSavedUSD)
	}
	if r.Chunks > 0 {
		m.chunks.Add(float64(r.Chunks))
		m.ttft.WithLabelValues(t, a, mo).Observe(msToSeconds(r.TTFTMs))
	}
	if r.Outcome == OutcomeDone {
		m.latency.WithLabelValues(t, a, mo).Observe(msToSeconds(r.LatencyMs))
	}
	m.emf.Load().observeRequest(r)
}

// OutcomeDone is the outcome of a request that ended with a done frame.
const OutcomeDone = "done"

func msToSeconds(ms int64) float64 { return float64(ms) / 1000 }

// SlowConsumerClosed counts a connection closed because its client stopped
// reading.
func (m *Metrics) SlowConsumerClosed() {
	if m == nil {
		return
	}
	m.slowConsumer.Inc()
}

// ConnectionRejected counts a connection refused before the upgrade; reason
// is a protocol code (unauthorized, forbidden, rate_limited, draining).
func (m *Metrics) ConnectionRejected(reason string) {
	if m == nil {
		return
	}
	m.connRejected.WithLabelValues(label(reason)).Inc()
}

// UnauthenticatedRefusal counts a connection or request refused for its
// credentials at door (a fixed name: "ws", "openai", "anthropic"). Every one is
// counted; their log lines are sampled (UnauthenticatedLogger).
func (m *Metrics) UnauthenticatedRefusal(door string) {
	if m == nil {
		return
	}
	m.unauthenticated.WithLabelValues(label(door)).Inc()
}

// QuotaRejected counts a request refused by a quota; scope is the kind of
// the exhausted limit (tenant|app|user, never the user id) and window its
// window (minute|hour|day|month).
func (m *Metrics) QuotaRejected(tenant, app, scope, window string) {
	if m == nil {
		return
	}
	m.quotaRejections.WithLabelValues(label(tenant), label(app), label(scope), label(window)).Inc()
}

// ObserveDynamoDB records one DynamoDB call (it implements
// dynamotable.Observer): table is a fixed role (quota|requests|cache), op
// the store's operation, outcome one of dynamotable's outcomes.
func (m *Metrics) ObserveDynamoDB(table, op, outcome string, d time.Duration) {
	if m == nil {
		return
	}
	t, o := label(table), label(op)
	m.dynamoCalls.WithLabelValues(t, o, label(outcome)).Inc()
	m.dynamoLatency.WithLabelValues(t, o).Observe(d.Seconds())
}

// ObserveBedrock records one Bedrock call for a configured model id; errKind
// is "" on success, else the router's error kind (throttled, unavailable,
// timeout, validation, mid_stream, ...).
func (m *Metrics) ObserveBedrock(model string, d time.Duration, errKind string) {
	if m == nil {
		return
	}
	mo := m.model(model)
	m.bedrockLatency.WithLabelValues(mo).Observe(d.Seconds())
	if errKind != "" {
		m.bedrockErrors.WithLabelValues(mo, errKind).Inc()
	}
}

// SetBreakerState records the circuit breaker state of a model's
// placement (place "" for a model without placements).
func (m *Metrics) SetBreakerState(model, place string, s BreakerState) {
	if m == nil {
		return
	}
	m.breaker.WithLabelValues(m.model(model), place).Set(float64(s))
}

// UsageRecordsSent counts records a sink delivered.
func (m *Metrics) UsageRecordsSent(sink string, n int) {
	if m == nil || n <= 0 {
		return
	}
	m.usageSent.WithLabelValues(label(sink)).Add(float64(n))
}

// UsageRecordsFailed counts records a sink gave up on.
func (m *Metrics) UsageRecordsFailed(sink string, n int) {
	if m == nil || n <= 0 {
		return
	}
	m.usageFailed.WithLabelValues(label(sink)).Add(float64(n))
}

// Reasons a usage record is dropped (usage_records_dropped_total's reason).
const (
	DropBufferFull = "buffer_full" // the sink's buffer was full (no spool) or Run had ended
	DropSpoolFull  = "spool_full"  // the spool was full: its oldest records made room
	DropSpoolError = "spool_error" // the spool could not be written
)

// UsageRecordsDropped counts records a sink lost, and why (a Drop*
// reason).
func (m *Metrics) UsageRecordsDropped(sink, reason string, n int) {
	if m == nil || n <= 0 {
		return
	}
	m.usageDropped.WithLabelValues(label(sink), label(reason)).Add(float64(n))
	m.emf.Load().addUsageDropped(int64(n))
}

// SpansExportFailed counts the spans of a failed trace export.
func (m *Metrics) SpansExportFailed(n int) {
	if m == nil || n <= 0 {
		return
	}
	m.spansFailed.Add(float64(n))
}

// UsageSpool records what the local spool holds.
func (m *Metrics) UsageSpool(records int, bytes int64) {
	if m == nil {
		return
	}
	m.spoolRecords.Set(float64(records))
	m.spoolBytes.Set(float64(bytes))
}

// RetainedAnswerBytes records the estimated memory of the finished answers
// kept for resume.
func (m *Metrics) RetainedAnswerBytes(n int64) {
	if m == nil {
		return
	}
	m.retainedBytes.Set(float64(n))
}

// RefusalLimited counts a request refused at once because its user's
// refusal budget was spent.
func (m *Metrics) RefusalLimited() {
	if m == nil {
		return
	}
	m.refusalsLimited.Inc()
}

// RetainedAnswerEvicted counts a finished answer forgotten early to keep
// the retained bytes within their budget.
func (m *Metrics) RetainedAnswerEvicted() {
	if m == nil {
		return
	}
	m.retainedEvicted.Inc()
}

// RequestFollowed counts a request whose record another server already
// held when this one tried to store it: the local model call was stopped
// and this server follows the owner's record.
func (m *Metrics) RequestFollowed() {
	if m == nil {
		return
	}
	m.followed.Inc()
}

// RequestTakenOver counts a record of a gone server that this server
// ended as interrupted.
func (m *Metrics) RequestTakenOver() {
	if m == nil {
		return
	}
	m.takenOver.Inc()
	m.emf.Load().addTakeover()
}

// AttachmentBytesInFlight records the bytes past the plain frame bound of
// the inbound frames being read or admitted.
func (m *Metrics) AttachmentBytesInFlight(n int64) {
	if m == nil {
		return
	}
	m.attachmentBytes.Set(float64(n))
}

// AttachmentFrameRefused counts a frame dropped, and its request refused,
// because the server's budget for large frames, or the user's share of
// it, was spent.
func (m *Metrics) AttachmentFrameRefused() {
	if m == nil {
		return
	}
	m.attachmentRefused.Inc()
}

// HTTPBodyBytesInFlight records the bytes of HTTP request bodies being
// read or checked.
func (m *Metrics) HTTPBodyBytesInFlight(n int64) {
	if m == nil {
		return
	}
	m.httpBodyBytes.Set(float64(n))
}

// Why an HTTP request was refused before its body was read: the reason
// label of jetway_http_requests_refused_total, a fixed set.
const (
	HTTPRefusedUser   = "user"
	HTTPRefusedServer = "server"
)

// HTTPRequestRefused counts an HTTP request refused before its body was
// read (reason is HTTPRefusedUser or HTTPRefusedServer).
func (m *Metrics) HTTPRequestRefused(door, reason string) {
	if m == nil {
		return
	}
	m.httpRefused.WithLabelValues(door, reason).Inc()
}

// CountTokens counts one count_tokens request.
func (m *Metrics) CountTokens() {
	if m == nil {
		return
	}
	m.countTokens.Inc()
}

// Why a session was asked to move: the reason label of
// jetway_sessions_moved_total, a fixed set.
const (
	// MoveBalance: this server held more sessions than the fleet's mean by
	// the balance margin.
	MoveBalance = "balance"
	// MoveBusy: the session's request was answered busy while another
	// server had room.
	MoveBusy = "busy"
)

// SessionMoved counts a session asked to move to another server; reason is
// MoveBalance or MoveBusy (anything else is counted as "other").
func (m *Metrics) SessionMoved(reason string) {
	if m == nil {
		return
	}
	if reason != MoveBalance && reason != MoveBusy {
		reason = "other"
	}
	m.sessionsMoved.WithLabelValues(reason).Inc()
	m.emf.Load().addMoved()
}

// AuthCacheLookup counts a token verification answered from the
// verified-token cache (hit) or checked in full (miss).
func (m *Metrics) AuthCacheLookup(hit bool) {
	if m == nil {
		return
	}
	result := "miss"
	if hit {
		result = "hit"
	}
	m.authCache.WithLabelValues(result).Inc()
}

// Outcomes of a quota threshold alert: the outcome label of
// jetway_quota_alerts_total, a fixed set.
const (
	AlertSent             = "sent"              // a sink took the event
	AlertFailed           = "failed"            // a sink gave up on it (its retries spent)
	AlertDropped          = "dropped"           // the alert queue was full or closed: nobody sends it from here
	AlertClaimedElsewhere = "claimed_elsewhere" // another server (or an earlier observation) claimed it
	AlertClaimFailed      = "claim_failed"      // the claim could not be made: not sent, so never twice
)

// QuotaAlert counts one quota threshold alert's outcome: scope is the
// limit's kind (tenant|app|user, anything else "other"), threshold the
// configured percent, sink a sink's fixed name ("" for the outcomes that
// are not a sink's: "none").
func (m *Metrics) QuotaAlert(scope string, threshold int, sink, outcome string) {
	if m == nil {
		return
	}
	if scope != "tenant" && scope != "app" && scope != "user" {
		scope = "other"
	}
	m.quotaAlerts.WithLabelValues(scope, strconv.Itoa(threshold), label(sink), label(outcome)).Inc()
}

// ConfigPoll records one poll of the config table: whether it read the
// table, and the age of the configuration in force.
func (m *Metrics) ConfigPoll(ok bool, age time.Duration) {
	if m == nil {
		return
	}
	outcome := "ok"
	if !ok {
		outcome = "failed"
	}
	m.configPolls.WithLabelValues(outcome).Inc()
	m.configAge.Set(age.Seconds())
}
