package configstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jetway-gateway/jetway/internal/config"
)

// Errors of the document operations, beside the store's.
var (
	ErrNotFound = errors.New("configstore: no such document")
	ErrExists   = errors.New("configstore: the document exists")
	ErrInUse    = errors.New("configstore: the document is in use")
)

// Precondition is a write's condition: Create (If-None-Match: *) or the
// version it replaces (If-Match).
type Precondition struct {
	Create  bool
	IfMatch string
}

// Service is the document operations of the admin API and of `gateway
// config import`: each write is decoded and checked by the tenants file's
// rules against the configuration in force, stored whole under its
// condition, audited, and applied on this server before it returns.
type Service struct {
	store   *Store
	applier *Applier
}

// NewService returns the operations over the applier's store.
func NewService(a *Applier) *Service { return &Service{store: a.store, applier: a} }

// Result is a write's outcome: the stored document's version, and
// whether it was made.
type Result struct {
	Version string
	Created bool
}

// check tests the stored version against p.
func check(p Precondition, stored *Doc) error {
	switch {
	case p.Create && stored != nil:
		return ErrExists
	case p.Create:
		return nil
	case stored == nil:
		return ErrNotFound
	case stored.Version != p.IfMatch:
		return ErrStale
	}
	return nil
}

func (s *Service) write(ctx context.Context, w Write) (Result, error) {
	v, err := s.store.Write(ctx, w)
	if err != nil && v == "" {
		return Result{}, err
	}
	// Applied here before answering, so this server reads its own write.
	_ = s.applier.Poll(ctx)
	return Result{Version: v, Created: w.Expect == "" && w.Put != nil}, err
}

// storedTenant reads tenant id as stored.
func (s *Service) storedTenant(ctx context.Context, id string) (*Doc, *config.Tenant, error) {
	d, err := s.store.Get(ctx, TenantKey(id))
	if err != nil || d == nil {
		return d, nil, err
	}
	var t config.Tenant
	if err := json.Unmarshal(d.Body, &t); err != nil {
		return nil, nil, fmt.Errorf("configstore: stored %s: %w", d.Key, err)
	}
	for i := range t.Apps {
		t.Apps[i].UID = d.UIDs[t.Apps[i].ID]
	}
	return d, &t, nil
}

// PutTenant writes tenant t (decoded by config.DecodeTenant) as id.
func (s *Service) PutTenant(ctx context.Context, actor, path, id string, t *config.Tenant, p Precondition) (Result, error) {
	if t.ID == "" {
		t.ID = id
	}
	if t.ID != id {
		return Result{}, &config.Error{Path: "id", Problem: fmt.Sprintf("%q is not the tenant of the path, %q", t.ID, id)}
	}
	if err := s.applier.Live().Load().CheckTenant(t); err != nil {
		return Result{}, err
	}
	stored, prev, err := s.storedTenant(ctx, id)
	if err != nil {
		return Result{}, err
	}
	if err := check(p, stored); err != nil {
		return Result{}, err
	}
	return s.writeTenant(ctx, actor, path, t, prev, stored)
}

// writeTenant stores t over stored (nil: a new tenant), keeping the
// incarnations of the apps it keeps.
func (s *Service) writeTenant(ctx context.Context, actor, path string, t, prev *config.Tenant, stored *Doc) (Result, error) {
	uids := map[string]string{}
	for i := range t.Apps {
		a := &t.Apps[i]
		a.Version = ""
		if prev != nil {
			if j := slices.IndexFunc(prev.Apps, func(x config.App) bool { return x.ID == a.ID }); j >= 0 {
				a.UID = prev.Apps[j].UID
			}
		}
		if a.UID == "" {
			a.UID = newUID()
		}
		uids[a.ID] = a.UID
	}
	t.Version = ""
	body, err := json.Marshal(t)
	if err != nil {
		return Result{}, err
	}
	w := Write{Key: TenantKey(t.ID), Put: &Doc{Body: body, UIDs: uids},
		Audit: Audit{Actor: actor, Action: "create", Path: path, Tenant: t.ID, After: body}}
	if stored != nil {
		w.Expect, w.Audit.Action, w.Audit.Before = stored.Version, "replace", stored.Body
	}
	return s.write(ctx, w)
}

// DeleteTenant deletes tenant id at version p.IfMatch.
func (s *Service) DeleteTenant(ctx context.Context, actor, path, id string, p Precondition) error {
	stored, err := s.store.Get(ctx, TenantKey(id))
	if err != nil {
		return err
	}
	if err := check(p, stored); err != nil {
		return err
	}
	_, err = s.write(ctx, Write{Key: TenantKey(id), Expect: stored.Version,
		Audit: Audit{Actor: actor, Action: "delete", Path: path, Tenant: id, Before: stored.Body}})
	return err
}

// PutApp writes app a (decoded by config.DecodeApp) as app id of tenant.
// An app's version is its tenant's: any change to the tenant's document
// changes it.
func (s *Service) PutApp(ctx context.Context, actor, path, tenant, id string, a *config.App, p Precondition) (Result, error) {
	if a.ID == "" {
		a.ID = id
	}
	if a.ID != id {
		return Result{}, &config.Error{Path: "id", Problem: fmt.Sprintf("%q is not the app of the path, %q", a.ID, id)}
	}
	stored, t, err := s.storedTenant(ctx, tenant)
	if err != nil {
		return Result{}, err
	}
	if stored == nil {
		return Result{}, fmt.Errorf("%w: tenant %q", ErrNotFound, tenant)
	}
	i := slices.IndexFunc(t.Apps, func(x config.App) bool { return x.ID == id })
	switch {
	case p.Create && i >= 0:
		return Result{}, ErrExists
	case !p.Create && i < 0:
		return Result{}, ErrNotFound
	case !p.Create && stored.Version != p.IfMatch:
		return Result{}, ErrStale
	}
	prev := *t
	prev.Apps = slices.Clone(t.Apps)
	next := *t
	next.Apps = slices.Clone(t.Apps)
	if i >= 0 {
		next.Apps[i] = *a
	} else {
		next.Apps = append(next.Apps, *a)
		i = len(next.Apps) - 1
	}
	if err := s.applier.Live().Load().CheckTenant(&next); err != nil {
		return Result{}, within(err, fmt.Sprintf("apps[%d]", i))
	}
	*a = next.Apps[i]
	r, err := s.writeTenant(ctx, actor, path, &next, &prev, stored)
	r.Created = p.Create && (err == nil || errors.Is(err, ErrAuditLost))
	return r, err
}

// DeleteApp deletes app id of tenant at version p.IfMatch (its tenant's).
func (s *Service) DeleteApp(ctx context.Context, actor, path, tenant, id string, p Precondition) error {
	stored, t, err := s.storedTenant(ctx, tenant)
	if err != nil {
		return err
	}
	if stored == nil {
		return fmt.Errorf("%w: tenant %q", ErrNotFound, tenant)
	}
	i := slices.IndexFunc(t.Apps, func(x config.App) bool { return x.ID == id })
	switch {
	case i < 0:
		return ErrNotFound
	case stored.Version != p.IfMatch:
		return ErrStale
	case len(t.Apps) == 1:
		return fmt.Errorf("%w: app %q is tenant %q's only app: delete the tenant instead", ErrInUse, id, tenant)
	}
	prev := *t
	next := *t
	next.Apps = slices.Delete(slices.Clone(t.Apps), i, i+1)
	_, err = s.writeTenant(ctx, actor, path, &next, &prev, stored)
	if err == nil {
		// The audit entry of a tenant write says "replace"; the path says which app went.
		return nil
	}
	return err
}

// within moves errors at prefix (apps[2].limits[0]) to the document
// under it (limits[0]); errors elsewhere keep their paths.
func within(err error, prefix string) error {
	errs := config.Errors(err)
	out := make([]error, 0, len(errs))
	for _, e := range errs {
		c := *e
		if rest, ok := strings.CutPrefix(c.Path, prefix); ok {
			c.Path = strings.TrimPrefix(rest, ".")
		}
		out = append(out, &c)
	}
	return errors.Join(out...)
}

// PutUser writes user override u (decoded by config.DecodeUser) as sub in
// an app of a tenant.
func (s *Service) PutUser(ctx context.Context, actor, path, tenant, app, sub string, u *config.UserOverride, p Precondition) (Result, error) {
	if u.Sub == "" {
		u.Sub = sub
	}
	if u.Sub != sub {
		return Result{}, &config.Error{Path: "sub", Problem: fmt.Sprintf("%q is not the user of the path, %q", u.Sub, sub)}
	}
	if err := config.CheckUser(u); err != nil {
		return Result{}, err
	}
	_, a, ok := s.applier.Live().Load().App(tenant, app)
	if !ok {
		return Result{}, fmt.Errorf("%w: app %q of tenant %q", ErrNotFound, app, tenant)
	}
	key := UserKey(tenant, app, sub)
	stored, err := s.store.Get(ctx, key)
	if err != nil {
		return Result{}, err
	}
	if err := check(p, stored); err != nil {
		return Result{}, err
	}
	u.Version = ""
	body, err := json.Marshal(u)
	if err != nil {
		return Result{}, err
	}
	w := Write{Key: key, Put: &Doc{Body: body, AppUID: a.UID},
		Audit: Audit{Actor: actor, Action: "create", Path: path, Tenant: tenant, After: body}}
	if stored != nil {
		w.Expect, w.Audit.Action, w.Audit.Before = stored.Version, "replace", stored.Body
	}
	return s.write(ctx, w)
}

// DeleteUser deletes the override of sub at version p.IfMatch.
func (s *Service) DeleteUser(ctx context.Context, actor, path, tenant, app, sub string, p Precondition) error {
	key := UserKey(tenant, app, sub)
	stored, err := s.store.Get(ctx, key)
	if err != nil {
		return err
	}
	if err := check(p, stored); err != nil {
		return err
	}
	_, err = s.write(ctx, Write{Key: key, Expect: stored.Version,
		Audit: Audit{Actor: actor, Action: "delete", Path: path, Tenant: tenant, Before: stored.Body}})
	return err
}

// PutModel writes model m (decoded by config.DecodeModel) as id.
func (s *Service) PutModel(ctx context.Context, actor, path, id string, m *config.Model, p Precondition) (Result, error) {
	if m.ID == "" {
		m.ID = id
	}
	if m.ID != id {
		return Result{}, &config.Error{Path: "id", Problem: fmt.Sprintf("%q is not the model of the path, %q", m.ID, id)}
	}
	if err := config.CheckModel(m); err != nil {
		return Result{}, err
	}
	stored, err := s.store.Get(ctx, ModelKey(id))
	if err != nil {
		return Result{}, err
	}
	if err := check(p, stored); err != nil {
		return Result{}, err
	}
	m.Version = ""
	body, err := json.Marshal(m)
	if err != nil {
		return Result{}, err
	}
	w := Write{Key: ModelKey(id), Put: &Doc{Body: body}, Audit: Audit{Actor: actor, Action: "create", Path: path, After: body}}
	if stored != nil {
		w.Expect, w.Audit.Action, w.Audit.Before = stored.Version, "replace", stored.Body
	}
	return s.write(ctx, w)
}

// DeleteModel deletes model id at version p.IfMatch, unless an app uses it.
func (s *Service) DeleteModel(ctx context.Context, actor, path, id string, p Precondition) error {
	for _, t := range s.applier.Live().Load().Tenants {
		for _, a := range t.Apps {
			if a.Models.Default == id || slices.Contains(a.Models.Fallbacks, id) || slices.Contains(a.Models.Allow, id) {
				return fmt.Errorf("%w: model %q is used by app %q of tenant %q", ErrInUse, id, a.ID, t.ID)
			}
		}
	}
	stored, err := s.store.Get(ctx, ModelKey(id))
	if err != nil {
		return err
	}
	if err := check(p, stored); err != nil {
		return err
	}
	_, err = s.write(ctx, Write{Key: ModelKey(id), Expect: stored.Version,
		Audit: Audit{Actor: actor, Action: "delete", Path: path, Before: stored.Body}})
	return err
}

func newUID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
