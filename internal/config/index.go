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

// Edit is a batch of copy-on-write changes to a shared configuration:
// it shares everything it does not change with the original, and Done
// indexes the result once, however many documents the batch changed.
// The documents must have been checked (CheckTenant, CheckModel,
// CheckUser).
type Edit struct {
	c       *Config
	tenants map[string]int           // tenant id -> position in c.Tenants (-1: deleted)
	owned   map[int]bool             // tenants whose Apps this edit has cloned
	users   map[appAt]map[string]int // per cloned app: sub -> position in Users
}

// Edit starts a batch of changes to c.
func (c *Config) Edit() *Edit {
	n := *c
	n.Models = slices.Clone(c.Models)
	n.Tenants = slices.Clone(c.Tenants)
	n.idx = nil
	e := &Edit{c: &n, tenants: make(map[string]int, len(n.Tenants)), owned: map[int]bool{}, users: map[appAt]map[string]int{}}
	for i := range n.Tenants {
		e.tenants[n.Tenants[i].ID] = i
	}
	return e
}

// Tenant is the tenant id as the edit has it so far.
func (e *Edit) Tenant(id string) (*Tenant, bool) {
	i, ok := e.tenants[id]
	if !ok || i < 0 {
		return nil, false
	}
	return &e.c.Tenants[i], true
}

// PutTenant adds t or replaces the tenant of its id.
func (e *Edit) PutTenant(t Tenant) {
	if i, ok := e.tenants[t.ID]; ok && i >= 0 {
		e.c.Tenants[i] = t
		delete(e.owned, i)
		for k := range e.users {
			if k.tenant == i {
				delete(e.users, k)
			}
		}
		return
	}
	e.c.Tenants = append(e.c.Tenants, t)
	e.tenants[t.ID] = len(e.c.Tenants) - 1
}

// DeleteTenant removes tenant id.
func (e *Edit) DeleteTenant(id string) {
	if i, ok := e.tenants[id]; ok && i >= 0 {
		e.c.Tenants[i] = Tenant{}
		e.tenants[id] = -1
	}
}

// PutModel adds m or replaces the model of its id.
func (e *Edit) PutModel(m Model) {
	if i := slices.IndexFunc(e.c.Models, func(x Model) bool { return x.ID == m.ID }); i >= 0 {
		e.c.Models[i] = m
		return
	}
	e.c.Models = append(e.c.Models, m)
}

// DeleteModel removes model id.
func (e *Edit) DeleteModel(id string) {
	e.c.Models = slices.DeleteFunc(e.c.Models, func(x Model) bool { return x.ID == id })
}

// PutUser sets u in app of tenant when that app's UID is uid (an
// override written for an app since deleted is left out); del removes
// the override of u.Sub instead. It reports whether the app was there.
func (e *Edit) PutUser(tenant, app, uid string, u UserOverride, del bool) bool {
	ti, ok := e.tenants[tenant]
	if !ok || ti < 0 {
		return false
	}
	t := &e.c.Tenants[ti]
	ai := slices.IndexFunc(t.Apps, func(x App) bool { return x.ID == app })
	if ai < 0 || (!del && t.Apps[ai].UID != uid) {
		return false
	}
	if !e.owned[ti] {
		t.Apps = slices.Clone(t.Apps)
		e.owned[ti] = true
	}
	at := appAt{ti, ai}
	pos, ok := e.users[at]
	if !ok {
		a := &t.Apps[ai]
		a.Users = slices.Clone(a.Users)
		pos = make(map[string]int, len(a.Users))
		for i := range a.Users {
			pos[a.Users[i].Sub] = i
		}
		e.users[at] = pos
	}
	a := &t.Apps[ai]
	i, found := pos[u.Sub]
	switch {
	case del && found:
		last := len(a.Users) - 1
		a.Users[i] = a.Users[last]
		pos[a.Users[i].Sub] = i
		a.Users = a.Users[:last]
		delete(pos, u.Sub)
	case del:
	case found:
		a.Users[i] = u
	default:
		a.Users = append(a.Users, u)
		pos[u.Sub] = len(a.Users) - 1
	}
	return true
}

// Done ends the batch: the new configuration, indexed.
func (e *Edit) Done() *Config {
	e.c.Tenants = slices.DeleteFunc(e.c.Tenants, func(t Tenant) bool { return t.ID == "" })
	e.c.Index()
	c := e.c
	e.c = nil
	return c
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

// User is Load().User.
func (l *Live) User(tenant, app, sub string) (*UserOverride, bool) {
	return l.Load().User(tenant, app, sub)
}
