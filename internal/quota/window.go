package quota

import (
	"fmt"
	"time"
)

// Window is a calendar window in UTC. A limit's usage resets when its
// window ends: on the minute, on the hour, at midnight UTC, or on the first
// day of the month at midnight UTC.
type Window string

// The windows a limit may use.
const (
	Minute Window = "minute"
	Hour   Window = "hour"
	Day    Window = "day"
	Month  Window = "month"
)

// Windows lists the windows, narrowest first.
func Windows() []Window { return []Window{Minute, Hour, Day, Month} }

// ParseWindow returns the window named s.
func ParseWindow(s string) (Window, error) {
	w := Window(s)
	if !w.Valid() {
		return "", fmt.Errorf("%w: unknown window %q", ErrInvalidLimit, s)
	}
	return w, nil
}

// Valid reports whether w is one of Minute, Hour, Day and Month.
func (w Window) Valid() bool { return w.rank() >= 0 }

// rank orders windows narrowest first; -1 for an unknown window.
func (w Window) rank() int {
	switch w {
	case Minute:
		return 0
	case Hour:
		return 1
	case Day:
		return 2
	case Month:
		return 3
	}
	return -1
}

// Bounds returns the window instance holding t: start (inclusive) and end
// (exclusive), both in UTC. An unknown window returns zero times.
func (w Window) Bounds(t time.Time) (start, end time.Time) {
	t = t.UTC()
	switch w {
	case Minute:
		start = t.Truncate(time.Minute)
		return start, start.Add(time.Minute)
	case Hour:
		start = t.Truncate(time.Hour)
		return start, start.Add(time.Hour)
	case Day:
		start = time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
		return start, start.AddDate(0, 0, 1)
	case Month:
		start = time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
		return start, start.AddDate(0, 1, 0)
	}
	return time.Time{}, time.Time{}
}

// label formats a window start as it appears in item keys:
// 2026-11-29T19:07 (minute), 2026-11-29T19 (hour), 2026-11-29 (day),
// 2026-11 (month).
func (w Window) label(start time.Time) string {
	start = start.UTC()
	switch w {
	case Minute:
		return start.Format("2006-01-02T15:04")
	case Hour:
		return start.Format("2006-01-02T15")
	case Day:
		return start.Format("2006-01-02")
	case Month:
		return start.Format("2006-01")
	}
	return start.Format(time.RFC3339)
}
