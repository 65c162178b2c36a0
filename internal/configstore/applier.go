package configstore

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/jetway-gateway/jetway/internal/config"
)

// Defaults of the Applier (docs/admin.md, "How a change reaches every server").
const (
	// DefaultPollInterval is how often a server reads the head item.
	DefaultPollInterval = time.Second
	// DefaultSettle is how long an announced change may take to land
	// before a reader gives up on it (its writer died between the two).
	DefaultSettle = 10 * time.Second
	// DefaultCallTimeout bounds each call to the config table.
	DefaultCallTimeout = 2 * time.Second
	// maxBatch bounds the announcements one poll reads.
	maxBatch = 1000
)

// ApplierOptions bound the Applier; zero values take the defaults.
type ApplierOptions struct {
	PollInterval, Settle, CallTimeout time.Duration
	// Applied is told of every change put in force (old, new): the
	// quota re-sizes its leases from it. It must not block.
	Applied func(old, new *config.Config)
	// Observe is told of each poll's outcome (ok, and the age of the
	// copy in force); nil: nothing.
	Observe func(ok bool, age time.Duration)
}

func (o ApplierOptions) withDefaults() ApplierOptions {
	if o.PollInterval <= 0 {
		o.PollInterval = DefaultPollInterval
	}
	if o.Settle <= 0 {
		o.Settle = DefaultSettle
	}
	if o.CallTimeout <= 0 {
		o.CallTimeout = DefaultCallTimeout
	}
	return o
}

// Applier keeps a server's configuration (a config.Live) in step with
// the config table: it reads the head item every PollInterval (one
// strongly consistent GetItem), and when head moved it reads the
// announcements after the seq it has applied, in order, reads each named
// document again and puts the batch in force as one new snapshot. While
// the table cannot be read it keeps the copy in force and says so
// (Status); it never puts half a document in force.
type Applier struct {
	store *Store
	live  *config.Live
	auth  config.Auth
	log   *zap.Logger
	opts  ApplierOptions

	mu      sync.Mutex // one poll at a time
	seq     int64
	missing map[int64]time.Time // announcements not there yet: first seen missing

	status atomic.Pointer[Status]
}

// Status is what a server knows of its configuration's freshness.
type Status struct {
	Seq      int64     `json:"seq"`       // the last change applied
	LastGood time.Time `json:"last_good"` // the last poll that read the table
	Error    string    `json:"error,omitempty"`
}

// NewApplier returns an Applier for store; auth is the tenants file's
// (the table holds no auth settings).
func NewApplier(store *Store, auth config.Auth, log *zap.Logger, o ApplierOptions) *Applier {
	return &Applier{store: store, auth: auth, log: log, opts: o.withDefaults(), missing: map[int64]time.Time{}}
}

// Live is the configuration in force (nil before Load).
func (a *Applier) Live() *config.Live { return a.live }

// Store is the table the Applier reads.
func (a *Applier) Store() *Store { return a.store }

// Status is the freshness of the configuration in force.
func (a *Applier) Status() Status {
	if s := a.status.Load(); s != nil {
		return *s
	}
	return Status{}
}

// Load reads the whole table (a Scan) and puts it in force; a server
// calls it once at start and cannot serve without it.
func (a *Applier) Load(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.load(ctx)
}

// load is Load with a.mu held.
func (a *Applier) load(ctx context.Context) error {
	head, docs, err := a.store.Scan(ctx)
	if err != nil {
		return fmt.Errorf("configstore: load: %w", err)
	}
	base := &config.Config{Auth: a.auth}
	e := base.Edit()
	var users []*Doc
	for _, d := range docs {
		if strings.HasPrefix(d.Key, "user#") {
			users = append(users, d) // after their apps
			continue
		}
		if err := applyDoc(e, d.Key, d); err != nil {
			a.log.Error("config_document_skipped", zap.String("key", d.Key), zap.Error(err))
		}
	}
	for _, d := range users {
		if err := applyDoc(e, d.Key, d); err != nil {
			a.log.Error("config_document_skipped", zap.String("key", d.Key), zap.Error(err))
		}
	}
	c := e.Done()
	a.seq = head
	if a.live == nil {
		a.live = config.NewLive(c)
	} else {
		old := a.live.Load()
		a.live.Store(c)
		a.applied(old, c)
	}
	a.status.Store(&Status{Seq: head, LastGood: time.Now()})
	a.log.Info("config_loaded", zap.Int64("seq", head), zap.Int("tenants", len(c.Tenants)), zap.Int("models", len(c.Models)),
		zap.Int("users", len(users)))
	return nil
}

// Run polls until ctx ends.
func (a *Applier) Run(ctx context.Context) {
	t := time.NewTicker(a.opts.PollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_ = a.Poll(ctx)
		}
	}
}

// Poll applies what changed since the last poll; a server's own writes
// call it at once, so it reads them.
func (a *Applier) Poll(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	st := a.Status()
	var err error
	if !st.LastGood.IsZero() && time.Since(st.LastGood) > ChangeRetention/2 {
		// Unread for so long that announcements may have expired: read
		// every document again instead.
		a.log.Warn("config_reload", zap.Time("last_good", st.LastGood))
		err = a.load(ctx)
	} else {
		err = a.poll(ctx)
	}
	st = a.Status()
	st.Seq = a.seq
	if err == nil {
		st.LastGood, st.Error = time.Now(), ""
	} else {
		st.Error = err.Error()
		a.log.Warn("config_poll_failed", zap.Error(err), zap.Time("last_good", st.LastGood))
	}
	a.status.Store(&st)
	if a.opts.Observe != nil {
		a.opts.Observe(err == nil, time.Since(st.LastGood))
	}
	return err
}

func (a *Applier) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, a.opts.CallTimeout)
}

func (a *Applier) poll(ctx context.Context) error {
	cctx, cancel := a.call(ctx)
	head, err := a.store.Head(cctx)
	cancel()
	if err != nil {
		return err
	}
	if head <= a.seq {
		return nil
	}
	old := a.live.Load()
	e := old.Edit()
	applied := 0
	defer func() {
		if applied > 0 {
			c := e.Done()
			a.live.Store(c)
			a.applied(old, c)
		}
	}()
	for s := a.seq + 1; s <= head && s <= a.seq+maxBatch; s++ {
		cctx, cancel := a.call(ctx)
		ch, err := a.store.Change(cctx, s)
		cancel()
		if err != nil {
			return err
		}
		if ch == nil {
			// Taken but not yet announced: its writer is between the
			// two calls, or died there.
			first, seen := a.missing[s]
			if !seen {
				a.missing[s] = time.Now()
				return nil
			}
			if time.Since(first) < a.opts.Settle {
				return nil
			}
			delete(a.missing, s)
			a.seq = s
			continue
		}
		delete(a.missing, s)
		if !ch.Void {
			cctx, cancel := a.call(ctx)
			d, err := a.store.Get(cctx, ch.Key)
			cancel()
			if err != nil {
				return err
			}
			if !landed(d, ch) && time.Since(ch.At) < a.opts.Settle {
				return nil // announced, not yet written: the next poll
			}
			if err := applyDoc(e, ch.Key, d); err != nil {
				a.log.Error("config_document_skipped", zap.String("key", ch.Key), zap.Int64("seq", s), zap.Error(err))
			}
			applied++
			a.log.Info("config_applied", zap.String("key", ch.Key), zap.Int64("seq", s), zap.Bool("deleted", d == nil))
		}
		a.seq = s
	}
	return nil
}

// landed reports whether the write ch announced (or a later one) is in d.
func landed(d *Doc, ch *Change) bool {
	if d == nil {
		return ch.Delete
	}
	want, _ := strconv.ParseInt(ch.Version, 10, 64)
	have, _ := strconv.ParseInt(d.Version, 10, 64)
	return have >= want
}

func (a *Applier) applied(old, c *config.Config) {
	if a.opts.Applied != nil {
		a.opts.Applied(old, c)
	}
}

// applyDoc puts the stored document d (nil: deleted) at key into e.
func applyDoc(e *config.Edit, key string, d *Doc) error {
	kind, id, _ := strings.Cut(key, "#")
	switch kind {
	case "tenant":
		if d == nil {
			e.DeleteTenant(id)
			return nil
		}
		var t config.Tenant
		if err := json.Unmarshal(d.Body, &t); err != nil {
			return fmt.Errorf("decode %s: %w", key, err)
		}
		t.Version = d.Version
		prev, _ := e.Tenant(id)
		for i := range t.Apps {
			ap := &t.Apps[i]
			ap.UID = d.UIDs[ap.ID]
			if prev == nil {
				continue
			}
			for j := range prev.Apps {
				if prev.Apps[j].ID == ap.ID && prev.Apps[j].UID == ap.UID {
					ap.Users = prev.Apps[j].Users // overrides are their own documents
				}
			}
		}
		e.PutTenant(t)
	case "model":
		if d == nil {
			e.DeleteModel(id)
			return nil
		}
		var m config.Model
		if err := json.Unmarshal(d.Body, &m); err != nil {
			return fmt.Errorf("decode %s: %w", key, err)
		}
		m.Version = d.Version
		e.PutModel(m)
	case "user":
		parts := strings.SplitN(id, "#", 3)
		if len(parts) != 3 {
			return fmt.Errorf("bad key %q", key)
		}
		if d == nil {
			e.PutUser(parts[0], parts[1], "", config.UserOverride{Sub: parts[2]}, true)
			return nil
		}
		var u config.UserOverride
		if err := json.Unmarshal(d.Body, &u); err != nil {
			return fmt.Errorf("decode %s: %w", key, err)
		}
		u.Version = d.Version
		e.PutUser(parts[0], parts[1], d.AppUID, u, false)
	default:
		return fmt.Errorf("unknown document kind %q", kind)
	}
	return nil
}
