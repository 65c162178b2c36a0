package quota_test

import (
	"reflect"
	"testing"

	"github.com/jetway-gateway/jetway/internal/config"
	"github.com/jetway-gateway/jetway/internal/quota"
)

func TestLimitsFor(t *testing.T) {
	c := config.Default()
	ten, app, _ := c.App("contoso", "support-assistant")
	app.UserLimits = []config.Limit{{Window: "minute", Requests: 10, USD: 0.25}}
	got := quota.LimitsFor(ten, app, "alice", nil)
	want := []quota.Limit{
		{Scope: quota.TenantScope("contoso"), Window: quota.Month, Tokens: 100000000},
		{Scope: quota.AppScope("contoso", "support-assistant"), Window: quota.Hour, Tokens: 2000000},
		{Scope: quota.UserScope("contoso", "support-assistant", "alice"), Window: quota.Minute, Requests: 10, MicroUSD: 250000},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("LimitsFor = %+v\nwant %+v", got, want)
	}
	if got := quota.LimitsFor(ten, app, "", nil); len(got) != 2 {
		t.Errorf("LimitsFor without a user = %+v, want no user limits", got)
	}
	ten, app, _ = c.App("fabrikam", "document-summarizer")
	if got := quota.LimitsFor(ten, app, "u", nil); !reflect.DeepEqual(got, []quota.Limit{
		{Scope: quota.AppScope("fabrikam", "document-summarizer"), Window: quota.Hour, Tokens: 20000},
	}) {
		t.Errorf("fabrikam limits = %+v", got)
	}
}
