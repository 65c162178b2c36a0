package config

import (
	"slices"
	"sync/atomic"
)

// index finds what admission looks up on every request in constant time,
// whatever the number of tenants, apps and user overrides (the control
// plane's target: 10,000 tenants, 100,000 overrides).
type index struct {
	tenants map[string]int      // tenant id -> position in Tenants
	apps    map[appKey]int      // (tenant, app) -> position in its Apps
	clients map[string]appAt    // client id -> app
	models  map[string]int      // model id -> position in Models
	users   map[userKey]userRef // (tenant, app, sub) -> override
}

type appKey struct{ tenant, app string }

type appAt struct{ tenant, app int }

type userKey struct{ tenant, app, sub string }

type userRef struct {
	app appAt
	i   int
}

// Index builds the lookup index of a validated configuration (Validate
// builds it too). Call it again after changing c; a Config is read-only
// once it is shared.
func (c *Config) Index() {
	x := &index{
		tenants: make(map[string]int, len(c.Tenants)),
		apps:    map[appKey]int{},
		clients: map[string]appAt{},
		models:  make(map[string]int, len(c.Models)),
		users:   map[userKey]userRef{},
	}
	for i := range c.Models {
		x.models[c.Models[i].ID] = i
	}
	for ti := range c.Tenants {
		t := &c.Tenants[ti]
		x.tenants[t.ID] = ti
		for ai := range t.Apps {
			a := &t.Apps[ai]
			x.apps[appKey{t.ID, a.ID}] = ai
			for _, id := range a.ClientIDs {
				x.clients[id] = appAt{ti, ai}
			}
			for ui := range a.Users {
				x.users[userKey{t.ID, a.ID, a.Users[ui].Sub}] = userRef{appAt{ti, ai}, ui}
			}
		}
	}
	c.idx = x
}

// Tenant returns the tenant with id.
func (c *Config) Tenant(id string) (*Tenant, bool) {
	if c.idx != nil {
		i, ok := c.idx.tenants[id]
		if !ok {
			return nil, false
		}
		return &c.Tenants[i], true
	}
	for i := range c.Tenants {
		if c.Tenants[i].ID == id {
			return &c.Tenants[i], true
		}
	}
	return nil, false
}

// User returns the override of user sub in an app of a tenant, if any.
func (c *Config) User(tenant, app, sub string) (*UserOverride, bool) {
	if c.idx != nil {
		r, ok := c.idx.users[userKey{tenant, app, sub}]
		if !ok {
			return nil, false
		}
		return &c.Tenants[r.app.tenant].Apps[r.app.app].Users[r.i], true
	}
	_, a, ok := c.App(tenant, app)
	if !ok {
		return nil, false
	}
	for i := range a.Users {
		if a.Users[i].Sub == sub {
			return &a.Users[i], true
		}
	}
	return nil, false
}

// ClientOwner names the app (as "tenant/app") that holds client id, if any.
func (c *Config) ClientOwner(id string) (string, bool) {
	t, a, ok := c.AppForClient(id)
	return t + "/" + a, ok
}

// The copy-on-write edits of a shared configuration: each returns a new
// Config, indexed, that shares everything it did not change with c. The
// document must have been checked (CheckTenant, CheckModel, CheckUser).

// WithTenant returns c with tenant t added or replacing the one of its id.
func (c *Config) WithTenant(t Tenant) *Config {
	n := c.shallow()
	if i := slices.IndexFunc(n.Tenants, func(x Tenant) bool { return x.ID == t.ID }); i >= 0 {
		n.Tenants[i] = t
	} else {
		n.Tenants = append(n.Tenants, t)
	}
	n.Index()
	return n
}

// WithoutTenant returns c without tenant id.
func (c *Config) WithoutTenant(id string) *Config {
	n := c.shallow()
	n.Tenants = slices.DeleteFunc(n.Tenants, func(x Tenant) bool { return x.ID == id })
	n.Index()
	return n
}

// WithModel returns c with model m added or replacing the one of its id.
func (c *Config) WithModel(m Model) *Config {
	n := c.shallow()
	if i := slices.IndexFunc(n.Models, func(x Model) bool { return x.ID == m.ID }); i >= 0 {
		n.Models[i] = m
	} else {
		n.Models = append(n.Models, m)
	}
	n.Index()
	return n
}

// WithoutModel returns c without model id.
func (c *Config) WithoutModel(id string) *Config {
	n := c.shallow()
	n.Models = slices.DeleteFunc(n.Models, func(x Model) bool { return x.ID == id })
	n.Index()
	return n
}

// WithUser returns c with u set (deleted when del) in an app of a tenant;
// c unchanged when the app is absent.
func (c *Config) WithUser(tenant, app string, u UserOverride, del bool) *Config {
	t, a, ok := c.App(tenant, app)
	if !ok {
		return c
	}
	nt := *t
	nt.Apps = slices.Clone(t.Apps)
	na := &nt.Apps[slices.IndexFunc(nt.Apps, func(x App) bool { return x.ID == a.ID })]
	na.Users = slices.Clone(a.Users)
	i := slices.IndexFunc(na.Users, func(x UserOverride) bool { return x.Sub == u.Sub })
	switch {
	case del && i >= 0:
		na.Users = slices.Delete(na.Users, i, i+1)
	case del:
	case i >= 0:
		na.Users[i] = u
	default:
		na.Users = append(na.Users, u)
	}
	return c.WithTenant(nt)
}

// shallow copies c's top level: its lists are new, their elements shared.
func (c *Config) shallow() *Config {
	n := *c
	n.Models = slices.Clone(c.Models)
	n.Tenants = slices.Clone(c.Tenants)
	n.idx = nil
	return &n
}

// Live holds the configuration in force, swapped whole when a change is
// applied: a request reads one snapshot (Load) for its whole admission,
// so it never sees half a change. Its methods answer from the snapshot
// in force at the call; it satisfies auth.Directory.
type Live struct{ p atomic.Pointer[Config] }

// NewLive returns a Live holding c.
func NewLive(c *Config) *Live {
	l := &Live{}
	l.Store(c)
	return l
}

// Load is the configuration in force.
func (l *Live) Load() *Config { return l.p.Load() }

// Store puts c in force; c must be indexed (Validate, Index) and is
// read-only from now on.
func (l *Live) Store(c *Config) {
	if c.idx == nil {
		c.Index()
	}
	l.p.Store(c)
}

// AppForClient is Load().AppForClient.
func (l *Live) AppForClient(clientID string) (tenant, app string, ok bool) {
	return l.Load().AppForClient(clientID)
}

// App is Load().App.
func (l *Live) App(tenant, app string) (*Tenant, *App, bool) { return l.Load().App(tenant, app) }

// Model is Load().Model.
func (l *Live) Model(id string) (*Model, bool) { return l.Load().Model(id) }
