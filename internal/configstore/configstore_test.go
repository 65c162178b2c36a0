package configstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/jetway-gateway/jetway/internal/config"
	"github.com/jetway-gateway/jetway/internal/dynalitetest"
	"github.com/jetway-gateway/jetway/internal/dynamotable"
)

// twoServers is a config table on dynalite, seeded from the built-in
// configuration, and two servers' Appliers on it.
func twoServers(t *testing.T, o ApplierOptions) (a, b *Applier, s *Service) {
	t.Helper()
	ctx := context.Background()
	client := dynalitetest.Client(t, dynalitetest.Start(t))
	table := dynalitetest.TableName(t)
	if err := CreateTable(ctx, client, table); err != nil {
		t.Fatal(err)
	}
	seed := config.Default()
	a = NewApplier(NewStore(client, table), seed.Auth, zaptest.NewLogger(t), o)
	if err := a.Load(ctx); err != nil {
		t.Fatal(err)
	}
	s = NewService(a)
	if _, err := s.Import(ctx, seed); err != nil {
		t.Fatal(err)
	}
	b = NewApplier(NewStore(client, table), seed.Auth, zaptest.NewLogger(t), o)
	if err := b.Load(ctx); err != nil {
		t.Fatal(err)
	}
	return a, b, s
}

func tenant(id, client string, tokens int64) *config.Tenant {
	return &config.Tenant{ID: id, Apps: []config.App{{ID: "chat", ClientIDs: []string{client},
		Models: config.AppModels{Default: "mock-a"}, Limits: []config.Limit{{Window: "hour", Tokens: tokens}}}}}
}

// TestApplierFollowsWrites: a write on one server is applied by the
// other's next poll; versions are conditions (a stale one writes
// nothing); a delete is applied too.
func TestApplierFollowsWrites(t *testing.T) {
	ctx := context.Background()
	_, b, s := twoServers(t, ApplierOptions{})
	res, err := s.PutTenant(ctx, "ops", "/t", "acme", tenant("acme", "acme-chat", 5000), Precondition{Create: true})
	if err != nil || !res.Created {
		t.Fatalf("create: %+v %v", res, err)
	}
	if _, err := s.PutTenant(ctx, "ops", "/t", "acme", tenant("acme", "acme-chat", 1), Precondition{Create: true}); !errors.Is(err, ErrExists) {
		t.Fatalf("a second create: %v, want ErrExists", err)
	}
	if _, err := s.PutTenant(ctx, "ops", "/t", "acme", tenant("acme", "acme-chat", 1), Precondition{IfMatch: "1"}); !errors.Is(err, ErrStale) {
		t.Fatalf("a stale replace: %v, want ErrStale", err)
	}
	if err := b.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	got, ok := b.Live().Load().Tenant("acme")
	if !ok || got.Version != res.Version || got.Apps[0].Limits[0].Tokens != 5000 {
		t.Fatalf("the other server has %+v, want version %s with 5000 tokens", got, res.Version)
	}
	if tn, app, ok := b.Live().AppForClient("acme-chat"); !ok || tn != "acme" || app != "chat" {
		t.Fatal("the new client id is not in force on the other server")
	}
	if err := s.DeleteTenant(ctx, "ops", "/t", "acme", Precondition{IfMatch: res.Version}); err != nil {
		t.Fatal(err)
	}
	if err := b.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := b.Live().Load().Tenant("acme"); ok {
		t.Fatal("the deleted tenant is still in force on the other server")
	}
}

// TestApplierWaitsForAnnouncedWrites: a change announced but not yet
// written holds the reader at it (later changes wait behind it, in
// order) until it lands, or until Settle gives up on it.
func TestApplierWaitsForAnnouncedWrites(t *testing.T) {
	ctx := context.Background()
	_, b, s := twoServers(t, ApplierOptions{Settle: 500 * time.Millisecond})
	st := s.store
	// A writer that took seq and announced tenant "ghost" but died
	// before writing it.
	u := dynamotable.NewUpdate(headKey).Name("#seq", attrSeq).Value(":one", dynamotable.N(1)).Add("#seq :one")
	u.Return = "UPDATED_NEW"
	out, err := st.table.Update(ctx, "seq", u)
	if err != nil {
		t.Fatal(err)
	}
	seq, _ := dynamotable.Int(out, attrSeq)
	if err := st.table.Put(ctx, "announce", dynamotable.Item{dynamotable.PK: dynamotable.S(changeKey(seq)),
		attrKey: dynamotable.S(TenantKey("ghost")), attrVersion: dynamotable.S("999999"),
		attrAt: dynamotable.N(time.Now().UnixMilli()), attrDelete: dynamotable.BOOL(false)}, "", nil, nil); err != nil {
		t.Fatal(err)
	}
	// A later change, written in full.
	if _, err := s.PutTenant(ctx, "ops", "/t", "later", tenant("later", "later-chat", 5000), Precondition{Create: true}); err != nil {
		t.Fatal(err)
	}
	if err := b.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := b.Live().Load().Tenant("later"); ok {
		t.Fatal("a change was applied past one announced and not yet written")
	}
	if b.Status().Seq >= seq {
		t.Fatalf("the reader moved to seq %d past the unwritten %d", b.Status().Seq, seq)
	}
	time.Sleep(600 * time.Millisecond)
	if err := b.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := b.Live().Load().Tenant("later"); !ok {
		t.Fatal("the later change is not applied after the unwritten one was given up")
	}
	if _, ok := b.Live().Load().Tenant("ghost"); ok {
		t.Fatal("a tenant that was never written is in force")
	}
}

// TestUserOverridesFollowTheirApp: an override written for an app stays
// with that app; an app deleted and made again does not inherit it.
func TestUserOverridesFollowTheirApp(t *testing.T) {
	ctx := context.Background()
	a, b, s := twoServers(t, ApplierOptions{})
	r, err := s.PutTenant(ctx, "ops", "/t", "acme", tenant("acme", "acme-chat", 5000), Precondition{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutUser(ctx, "ops", "/u", "acme", "chat", "bob", &config.UserOverride{Disabled: true}, Precondition{Create: true}); err != nil {
		t.Fatal(err)
	}
	if err := b.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	if u, ok := b.Live().User("acme", "chat", "bob"); !ok || !u.Disabled {
		t.Fatal("the override is not in force on the other server")
	}
	// Replacing the tenant keeps the app, and so its overrides.
	if r, err = s.PutTenant(ctx, "ops", "/t", "acme", tenant("acme", "acme-chat", 6000), Precondition{IfMatch: r.Version}); err != nil {
		t.Fatal(err)
	}
	if err := b.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := b.Live().User("acme", "chat", "bob"); !ok {
		t.Fatal("replacing the tenant lost its app's override")
	}
	// Deleted and made again: a new app, without the old override.
	if err := s.DeleteTenant(ctx, "ops", "/t", "acme", Precondition{IfMatch: r.Version}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutTenant(ctx, "ops", "/t", "acme", tenant("acme", "acme-chat", 5000), Precondition{Create: true}); err != nil {
		t.Fatal(err)
	}
	for _, ap := range []*Applier{a, b} {
		if err := ap.Load(ctx); err != nil { // a fresh start reads every document
			t.Fatal(err)
		}
		if _, ok := ap.Live().User("acme", "chat", "bob"); ok {
			t.Fatal("an app made again inherited the deleted one's override")
		}
	}
}
