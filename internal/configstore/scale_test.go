package configstore

import (
	"encoding/json"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/jetway-gateway/jetway/internal/config"
)

// scaleDocs is the control plane's scale target as stored documents:
// tenants tenants of one app each, users overrides spread over them.
func scaleDocs(tb testing.TB, tenants, users int) []*Doc {
	tb.Helper()
	var docs []*Doc
	m, _ := json.Marshal(config.Model{ID: "mock-a", BedrockID: "mock-a"})
	docs = append(docs, &Doc{Key: ModelKey("mock-a"), Version: "1", Body: m})
	for i := range tenants {
		id := fmt.Sprintf("tenant-%05d", i)
		t := config.Tenant{ID: id, Limits: []config.Limit{{Window: "month", Tokens: 100_000_000}},
			Apps: []config.App{{ID: "chat", ClientIDs: []string{id + "-chat"}, Models: config.AppModels{Default: "mock-a", Allow: []string{"mock-a"}},
				Limits: []config.Limit{{Window: "hour", Tokens: 2_000_000}}, UserLimits: []config.Limit{{Window: "day", Tokens: 200_000}},
				MaxTokens: 1024, MaxTokensLimit: 8192, PromptCache: "auto"}}}
		b, _ := json.Marshal(t)
		docs = append(docs, &Doc{Key: TenantKey(id), Version: "2", Body: b, UIDs: map[string]string{"chat": "u" + id}})
	}
	for i := range users {
		tenant := fmt.Sprintf("tenant-%05d", i%tenants)
		u := config.UserOverride{Sub: fmt.Sprintf("user-%06d", i), Limits: []config.Limit{{Window: "day", Tokens: 50_000}}}
		b, _ := json.Marshal(u)
		docs = append(docs, &Doc{Key: UserKey(tenant, "chat", u.Sub), Version: "3", Body: b, AppUID: "u" + tenant})
	}
	return docs
}

// load builds the configuration from docs as Applier.Load does.
func load(tb testing.TB, docs []*Doc) *config.Config {
	e := (&config.Config{}).Edit()
	for _, pass := range []bool{false, true} {
		for _, d := range docs {
			if isUser := d.Key[:5] == "user#"; isUser != pass {
				continue
			}
			if err := applyDoc(e, d.Key, d); err != nil {
				tb.Fatal(err)
			}
		}
	}
	return e.Done()
}

// TestScaleTarget: 10,000 tenants and 100,000 user overrides load, and
// one change applies, with every lookup of admission answered from the
// index. It logs the memory, the load time and the change's apply time
// (docs/benchmarks.md, "The control plane at scale").
func TestScaleTarget(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	const tenants, users = 10_000, 100_000
	docs := scaleDocs(t, tenants, users)
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	c := load(t, docs)
	took := time.Since(start)
	runtime.GC()
	runtime.ReadMemStats(&after)
	docs = nil
	if len(c.Tenants) != tenants {
		t.Fatalf("%d tenants", len(c.Tenants))
	}
	u, ok := c.User("tenant-00042", "chat", "user-010042")
	if !ok || u.Limits[0].Tokens != 50_000 {
		t.Fatalf("user override not found: %v %v", u, ok)
	}
	if tn, app, ok := c.AppForClient("tenant-09999-chat"); !ok || tn != "tenant-09999" || app != "chat" {
		t.Fatal("client id not found")
	}
	// One change: a user override of one tenant.
	start = time.Now()
	e := c.Edit()
	e.PutUser("tenant-00007", "chat", "utenant-00007", config.UserOverride{Sub: "new-user", Disabled: true}, false)
	c2 := e.Done()
	change := time.Since(start)
	if u, ok := c2.User("tenant-00007", "chat", "new-user"); !ok || !u.Disabled {
		t.Fatal("the change is not in force")
	}
	if _, ok := c.User("tenant-00007", "chat", "new-user"); ok {
		t.Fatal("the change reached the old snapshot")
	}
	t.Logf("%d tenants, %d overrides: loaded in %s (decode and index of %d documents), heap %.1f MiB; one change applied in %s",
		tenants, users, took.Round(time.Millisecond), tenants+users+1, float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), change.Round(time.Microsecond))
}

// BenchmarkAdmissionLookups is what admission asks the configuration per
// request (app, user override, client id): with the scale target loaded
// and with a tenants file's few tenants, side by side.
func BenchmarkAdmissionLookups(b *testing.B) {
	for _, size := range []struct{ tenants, users int }{{3, 0}, {10_000, 100_000}} {
		b.Run(fmt.Sprintf("tenants=%d,overrides=%d", size.tenants, size.users), func(b *testing.B) {
			c := load(b, scaleDocs(b, size.tenants, size.users))
			ids := make([]string, size.tenants)
			for i := range ids {
				ids[i] = fmt.Sprintf("tenant-%05d", i)
			}
			b.ResetTimer()
			for i := range b.N {
				t := ids[i%len(ids)]
				if _, _, ok := c.App(t, "chat"); !ok {
					b.Fatal("app")
				}
				c.User(t, "chat", "user-000001")
				c.AppForClient(t + "-chat")
			}
		})
	}
}
