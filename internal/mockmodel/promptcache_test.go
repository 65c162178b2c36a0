package mockmodel

import (
	"crypto/sha256"
	"encoding/binary"
	"strings"
	"testing"
	"time"
)

// TestPromptCacheLivesFiveMinutesFromItsLastUse: a prefix is read while
// it is used within CacheTTL of its last write or read, and written again
// once it has expired. The clock is the caller's, so nothing sleeps.
func TestPromptCacheLivesFiveMinutesFromItsLastUse(t *testing.T) {
	c := newPromptCache()
	rule := CacheRule{MinTokens: 1024, MaxPoints: 4}
	body := []byte(`{"system":[{"text":"` + strings.Repeat("s", 6000) + `"},{"cachePoint":{"type":"default"}}],` +
		`"messages":[{"role":"user","content":[{"text":"hi"}]}]}`)
	t0 := time.Date(2026, 1, 5, 7, 0, 0, 0, time.UTC)
	for _, step := range []struct {
		at          time.Duration
		read, write int
	}{{0, 0, 1500}, {4 * time.Minute, 1500, 0}, {8 * time.Minute, 1500, 0}, {14 * time.Minute, 0, 1500}} {
		u, err := c.use("us-east-1", "mock-a", rule, true, body, t0.Add(step.at))
		if err != nil {
			t.Fatal(err)
		}
		if u.read != step.read || u.write != step.write {
			t.Errorf("at +%s: read %d write %d, want %d and %d", step.at, u.read, u.write, step.read, step.write)
		}
	}
	// Another model never reads this model's prefix.
	if u, _ := c.use("us-east-1", "mock-b", rule, true, body, t0.Add(15*time.Minute)); u.read != 0 || u.write != 1500 {
		t.Errorf("mock-b: %+v, want its own write", u)
	}
	// Refusals: a model that does not cache, more points than allowed.
	if _, err := c.use("us-east-1", "mock-cheap", CacheRule{}, false, body, t0); err == nil {
		t.Error("a point to a model without caching was accepted")
	}
	if _, err := c.use("us-east-1", "mock-a", CacheRule{MinTokens: 1024, MaxPoints: 0}, true, body, t0); err == nil {
		t.Error("more points than allowed were accepted")
	}
}

// TestPromptCacheIsBounded: at MaxCacheEntries the oldest written prefix goes.
func TestPromptCacheIsBounded(t *testing.T) {
	c := newPromptCache()
	exp := time.Now().Add(time.Hour)
	key := func(i int) [sha256.Size]byte {
		var k [sha256.Size]byte
		binary.BigEndian.PutUint64(k[:], uint64(i))
		return k
	}
	for i := range MaxCacheEntries + 10 {
		c.put(key(i), exp)
	}
	if len(c.entries) != MaxCacheEntries {
		t.Fatalf("%d entries, want the bound %d", len(c.entries), MaxCacheEntries)
	}
	if _, ok := c.entries[key(0)]; ok {
		t.Error("the oldest entry was kept")
	}
	if _, ok := c.entries[key(MaxCacheEntries+9)]; !ok {
		t.Error("the newest entry was dropped")
	}
}
