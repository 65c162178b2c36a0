package quota_test

import (
	"errors"
	"testing"
	"time"

	"github.com/jetway-gateway/jetway/internal/quota"
)

func TestWindowBounds(t *testing.T) {
	utc := func(y int, mo time.Month, d, h, mi, s int) time.Time {
		return time.Date(y, mo, d, h, mi, s, 0, time.UTC)
	}
	at := time.Date(2028, 2, 29, 23, 59, 59, 999, time.UTC) // a leap day, a nanosecond-precise instant
	tests := []struct {
		w          quota.Window
		t          time.Time
		start, end time.Time
	}{
		{quota.Minute, at, utc(2028, 2, 29, 23, 59, 0), utc(2028, 3, 1, 0, 0, 0)},
		{quota.Hour, at, utc(2028, 2, 29, 23, 0, 0), utc(2028, 3, 1, 0, 0, 0)},
		{quota.Day, at, utc(2028, 2, 29, 0, 0, 0), utc(2028, 3, 1, 0, 0, 0)},
		{quota.Month, at, utc(2028, 2, 1, 0, 0, 0), utc(2028, 3, 1, 0, 0, 0)},
		{quota.Month, utc(2031, 12, 31, 23, 59, 59), utc(2031, 12, 1, 0, 0, 0), utc(2032, 1, 1, 0, 0, 0)},
		{quota.Day, utc(2031, 1, 1, 0, 0, 0), utc(2031, 1, 1, 0, 0, 0), utc(2031, 1, 2, 0, 0, 0)}, // start is inclusive
		// Local times are windowed in UTC: 01:30 in UTC+2 is 23:30 UTC of the day before.
		{quota.Day, time.Date(2031, 6, 1, 1, 30, 0, 0, time.FixedZone("UTC+2", 2*3600)), utc(2031, 5, 31, 0, 0, 0), utc(2031, 6, 1, 0, 0, 0)},
		{quota.Month, time.Date(2031, 6, 1, 1, 30, 0, 0, time.FixedZone("UTC+2", 2*3600)), utc(2031, 5, 1, 0, 0, 0), utc(2031, 6, 1, 0, 0, 0)},
	}
	for _, tt := range tests {
		start, end := tt.w.Bounds(tt.t)
		if !start.Equal(tt.start) || !end.Equal(tt.end) || start.Location() != time.UTC {
			t.Errorf("%s.Bounds(%v) = %v, %v; want %v, %v", tt.w, tt.t, start, end, tt.start, tt.end)
		}
	}
	if s, e := quota.Window("week").Bounds(at); !s.IsZero() || !e.IsZero() {
		t.Errorf("unknown window bounds = %v, %v", s, e)
	}
}

func TestParseWindow(t *testing.T) {
	for _, w := range quota.Windows() {
		if got, err := quota.ParseWindow(string(w)); err != nil || got != w {
			t.Errorf("ParseWindow(%q) = %q, %v", w, got, err)
		}
	}
	if _, err := quota.ParseWindow("week"); !errors.Is(err, quota.ErrInvalidLimit) {
		t.Errorf("ParseWindow(week) = %v, want ErrInvalidLimit", err)
	}
}

func TestItemKey(t *testing.T) {
	at := time.Date(2026, 11, 29, 19, 7, 3, 0, time.UTC)
	tests := []struct {
		s    quota.Scope
		w    quota.Window
		want string
	}{
		{quota.TenantScope("contoso"), quota.Hour, "tenant#contoso#hour#2026-11-29T19"},
		{quota.AppScope("fabrikam", "document-summarizer"), quota.Minute, "app#fabrikam/document-summarizer#minute#2026-11-29T19:07"},
		{quota.UserScope("contoso", "support-assistant", "9f1c-sub"), quota.Day, "user#contoso/support-assistant/9f1c-sub#day#2026-11-29"},
		{quota.TenantScope("contoso"), quota.Month, "tenant#contoso#month#2026-11"},
	}
	for _, tt := range tests {
		start, _ := tt.w.Bounds(at)
		it := quota.Item{Scope: tt.s, Window: tt.w, Start: start}
		if got := it.Key(); got != tt.want {
			t.Errorf("Key = %q, want %q", got, tt.want)
		}
		if _, end := tt.w.Bounds(at); !it.End().Equal(end) || !it.Expires().Equal(end.Add(24*time.Hour)) {
			t.Errorf("%s: End/Expires = %v/%v", tt.want, it.End(), it.Expires())
		}
	}
}

func TestMicroUSD(t *testing.T) {
	if got := quota.MicroUSD(0.003); got != 3000 {
		t.Errorf("MicroUSD(0.003) = %d", got)
	}
	if got := quota.MicroUSD(12.5); got != 12500000 {
		t.Errorf("MicroUSD(12.5) = %d", got)
	}
}
