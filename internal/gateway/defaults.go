package gateway

import (
	"time"

	"github.com/jetway-gateway/jetway/internal/stream"
)

// The pipeline's defaults, written once: Options' zero values mean these,
// settings parsing uses them, and docs/configuration.md states them.
const (
	DefaultMaxInflight           = 2000 // model calls in flight on one server
	DefaultMaxInflightPerTenant  = 0    // no cap
	DefaultMaxInflightPerUser    = 8
	DefaultMaxInflightPerSession = 4
	DefaultMaxRefusalsPerUser    = 10 // a second, and the burst
	DefaultRequestTimeout        = 5 * time.Minute
	DefaultFirstTokenTimeout     = 30 * time.Second // a model's own setting wins
	DefaultReserveTimeout        = 3 * time.Second
	DefaultSettleTimeout         = time.Hour // settlement retries until its window ends, at most this
	DefaultStoreTimeout          = 2 * time.Second
	DefaultPollInterval          = 200 * time.Millisecond
	DefaultCheckpointInterval    = time.Second
	DefaultCheckpointChunks      = 64
	DefaultResumeWindow          = stream.DefaultRetention
	// DefaultCacheLookup bounds the response cache's DynamoDB tier before
	// the model call (the memory tier answers at once): past it the lookup
	// is a miss. In-region GetItem p99 is 10-25 ms.
	DefaultCacheLookup = 50 * time.Millisecond
)

// Bounds of retrying writes to the request store. A terminal's write is
// retried, at most maxStoreBackoff apart, until it lands or the resume
// window passes (the record means nothing after it): a slow store delays
// followers on other servers, it never ends an answer.
const (
	persistBackoff     = 50 * time.Millisecond
	maxStoreBackoff    = 2 * time.Second // between retries of a terminal's write
	drainPersistMargin = time.Second     // Wait's extra time, past StoreTimeout, for stopped requests to persist
)

// Options bound the pipeline. Zero values mean the Default* constants above.
type Options struct {
	MaxInflight           int // model calls in flight on this server
	MaxInflightPerTenant  int // 0: no cap
	MaxInflightPerUser    int
	MaxInflightPerSession int
	MaxRefusalsPerUser    int // client-caused refusals a second per user, then rate_limited at once (see refusals.go)
	RequestTimeout        time.Duration
	FirstTokenTimeout     time.Duration // a model's own setting wins
	ReserveTimeout        time.Duration // the quota reservation's budget
	SettleTimeout         time.Duration // how long settlement keeps retrying (until the window ends, at most this)
	ServerID              string        // the task's id, in usage records
	Instance              string        // this process's fleet id: the owner of its request records (default ServerID)
	StoreTimeout          time.Duration // one request-store call
	PollInterval          time.Duration // following a record owned by another server
	CheckpointInterval    time.Duration
	CheckpointChunks      int           // checkpoint early after this many chunks
	ResumeWindow          time.Duration // finished records are kept this long
	CacheLookup           time.Duration // the response cache's lookup before the model call
	Now                   func() time.Time
}

func (o *Options) defaults() {
	orInt(&o.MaxInflight, DefaultMaxInflight)
	orInt(&o.MaxInflightPerUser, DefaultMaxInflightPerUser)
	orInt(&o.MaxInflightPerSession, DefaultMaxInflightPerSession)
	orInt(&o.MaxRefusalsPerUser, DefaultMaxRefusalsPerUser)
	orInt(&o.CheckpointChunks, DefaultCheckpointChunks)
	orDur(&o.RequestTimeout, DefaultRequestTimeout)
	orDur(&o.FirstTokenTimeout, DefaultFirstTokenTimeout)
	orDur(&o.ReserveTimeout, DefaultReserveTimeout)
	orDur(&o.SettleTimeout, DefaultSettleTimeout)
	orDur(&o.StoreTimeout, DefaultStoreTimeout)
	orDur(&o.PollInterval, DefaultPollInterval)
	orDur(&o.CheckpointInterval, DefaultCheckpointInterval)
	orDur(&o.ResumeWindow, DefaultResumeWindow)
	orDur(&o.CacheLookup, DefaultCacheLookup)
	if o.MaxInflightPerTenant < 0 {
		o.MaxInflightPerTenant = DefaultMaxInflightPerTenant
	}
	if o.Instance == "" {
		o.Instance = o.ServerID
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

func orInt(v *int, d int) {
	if *v <= 0 {
		*v = d
	}
}

func orDur(v *time.Duration, d time.Duration) {
	if *v <= 0 {
		*v = d
	}
}
