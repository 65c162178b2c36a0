package main

import (
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jetway-gateway/jetway/internal/quota"
)

// TestSettingsDocumented diffs the settings table against
// docs/configuration.md: every setting is documented with the default the
// table gives it, and every documented setting is in the table.
func TestSettingsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := documentedSettings(string(doc))
	// Defaults the server computes, named in words by the docs.
	computed := map[string]string{"JETWAY_SERVER_ID": "host name"}
	getenv := func(k string) string {
		if k == "XDG_CACHE_HOME" {
			return "$XDG_CACHE_HOME" // so the dev key file's default reads as documented
		}
		return ""
	}
	inTable := map[string]bool{}
	fields := map[any]string{}
	for _, r := range (&settings{}).settingsTable(getenv) {
		if inTable[r.key] {
			t.Errorf("%s is in the table twice", r.key)
		}
		inTable[r.key] = true
		if other, ok := fields[r.field]; ok {
			t.Errorf("%s and %s set the same field", other, r.key)
		}
		fields[r.field] = r.key
		if strings.TrimSpace(r.doc) == "" {
			t.Errorf("%s has no -h line", r.key)
		}
		def, ok := rows[r.key]
		switch {
		case !ok:
			t.Errorf("%s (-%s) is not documented in docs/configuration.md", r.key, r.flag())
		case computed[r.key] != "":
			if !strings.Contains(def, computed[r.key]) {
				t.Errorf("%s: documented default %q, want it to say %q", r.key, def, computed[r.key])
			}
		case r.def == "":
			if strings.TrimSpace(def) == "" {
				t.Errorf("%s: no default documented", r.key)
			}
		default:
			if !sameDefault(r.def, def) {
				t.Errorf("%s: documented default %q, the table's is %v", r.key, def, r.def)
			}
		}
	}
	for key := range rows {
		switch {
		case strings.HasPrefix(key, "AWS_ENDPOINT_URL_"): // the SDK's own variables
		case !inTable[key]:
			t.Errorf("%s is documented but is no setting", key)
		}
	}
}

var (
	settingName = regexp.MustCompile(`\b(?:JETWAY|AWS)_[A-Z0-9_]+\b`)
	firstCode   = regexp.MustCompile("`([^`]*)`")
)

// documentedSettings maps each variable of the settings tables to the text
// of its default column.
func documentedSettings(doc string) map[string]string {
	start := strings.Index(doc, "## Settings")
	end := strings.Index(doc, "## The tenants file")
	rows := map[string]string{}
	for _, line := range strings.Split(doc[start:end], "\n") {
		cols := strings.Split(line, "|")
		if len(cols) < 4 {
			continue
		}
		for _, key := range settingName.FindAllString(cols[1], -1) {
			rows[key] = strings.TrimSpace(cols[2])
		}
	}
	return rows
}

// sameDefault compares the first `value` of the documented default with
// the table's default, read as the default's type reads it.
func sameDefault(def any, documented string) bool {
	m := firstCode.FindStringSubmatch(documented)
	if m == nil {
		return false
	}
	doc := m[1]
	switch want := def.(type) {
	case time.Duration:
		d, err := time.ParseDuration(doc)
		return err == nil && d == want
	case int:
		n, err := strconv.Atoi(doc)
		return err == nil && n == want
	case int64:
		n, err := strconv.ParseInt(doc, 10, 64)
		return err == nil && n == want
	case float64:
		f, err := strconv.ParseFloat(doc, 64)
		return err == nil && f == want
	case bool:
		b, err := strconv.ParseBool(doc)
		return err == nil && b == want
	case string:
		return doc == want || filepath.Clean(doc) == filepath.Clean(want)
	}
	return false
}

// TestQuotaLeaseSettings: leases are on with a quota table unless turned
// off, the owner is the instance id (the server id plus a suffix new in
// every process), and the defaults are internal/quota's.
func TestQuotaLeaseSettings(t *testing.T) {
	parse := func(env map[string]string) *settings {
		t.Helper()
		env["AWS_REGION"] = "us-east-1"
		s, err := parseSettings("gateway", nil, func(k string) string { return env[k] }, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	lease := func(s *settings) quota.LeaseOptions {
		t.Helper()
		id, err := s.instanceID()
		if err != nil {
			t.Fatal(err)
		}
		return s.quotaLease(id)
	}
	if lo := lease(parse(map[string]string{})); lo.Owner != "" {
		t.Errorf("leases on without a quota table: %+v", lo)
	}
	if lo := lease(parse(map[string]string{"JETWAY_QUOTA_TABLE": "q", "JETWAY_QUOTA_LEASE": "false"})); lo.Owner != "" {
		t.Errorf("leases on with JETWAY_QUOTA_LEASE=false: %+v", lo)
	}
	s := parse(map[string]string{"JETWAY_QUOTA_TABLE": "q", "JETWAY_SERVER_ID": "task-7"})
	a, b := lease(s), lease(s)
	if !strings.HasPrefix(a.Owner, "task-7-") || a.Owner == b.Owner {
		t.Errorf("owners %q and %q: want task-7-<random>, new each time", a.Owner, b.Owner)
	}
	want := quota.LeaseOptions{Owner: a.Owner, TTL: quota.DefaultLeaseTTL, Ahead: quota.DefaultLeaseAhead,
		Block: quota.DefaultLeaseBlock, Fraction: quota.DefaultLeaseFraction, MinRequests: quota.DefaultLeaseMinRequests,
		MaxItems: quota.DefaultLeaseMaxItems}
	if a != want {
		t.Errorf("lease options %+v, want the quota package's defaults %+v", a, want)
	}
	s = parse(map[string]string{"JETWAY_QUOTA_TABLE": "q", "JETWAY_QUOTA_LEASE_TTL": "2s", "JETWAY_QUOTA_LEASE_FRACTION": "0.25"})
	if lo := lease(s); lo.TTL != 2*time.Second || lo.Fraction != 0.25 {
		t.Errorf("lease options %+v, want TTL 2s and fraction 0.25", lo)
	}
	for _, bad := range []string{"0", "1.5", "x"} {
		env := map[string]string{"AWS_REGION": "us-east-1", "JETWAY_QUOTA_LEASE_FRACTION": bad}
		if _, err := parseSettings("gateway", nil, func(k string) string { return env[k] }, io.Discard); err == nil {
			t.Errorf("JETWAY_QUOTA_LEASE_FRACTION=%s accepted", bad)
		}
	}
}

// TestSettingsParseRules: each kind of setting reads its variable by its
// own rule, refuses a bad value with the same words as before the table,
// and its flag wins over the variable; an int64 flag is refused negative
// as an int flag is.
func TestSettingsParseRules(t *testing.T) {
	parse := func(env map[string]string, args ...string) (*settings, error) {
		env["HOME"] = t.TempDir()
		return parseSettings("gateway serve", args, func(k string) string { return env[k] }, io.Discard)
	}
	s, err := parse(map[string]string{"JETWAY_HEARTBEAT": "5s", "JETWAY_MAX_FRAME_BYTES": "1000", "JETWAY_SEND_QUEUE_FRAMES": "7",
		"JETWAY_BALANCE_MARGIN": "0.5", "JETWAY_PPROF": "true", "JETWAY_LOG_LEVEL": "debug", "JETWAY_SERVE_DEMO": "false"})
	if err != nil {
		t.Fatal(err)
	}
	if s.Session.Heartbeat != 5*time.Second || s.Session.MaxFrameBytes != 1000 || s.Session.SendQueueFrames != 7 ||
		s.Balance.Margin != 0.5 || !s.Pprof || s.LogLevel != "debug" || s.ServeDemo {
		t.Errorf("settings from the environment: %+v", s)
	}
	s, err = parse(map[string]string{"JETWAY_HEARTBEAT": "5s", "JETWAY_MAX_FRAME_BYTES": "1000"}, "--heartbeat=6s", "--max-frame-bytes=2000")
	if err != nil || s.Session.Heartbeat != 6*time.Second || s.Session.MaxFrameBytes != 2000 {
		t.Errorf("flags over the environment: %v, %+v", err, s)
	}
	for _, c := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{map[string]string{"JETWAY_HEARTBEAT": "soon"}, nil, `settings: JETWAY_HEARTBEAT="soon": want a duration such as 30s`},
		{map[string]string{"JETWAY_HEARTBEAT": "-1s"}, nil, `JETWAY_HEARTBEAT="-1s": want a duration such as 30s`},
		{map[string]string{"JETWAY_MAX_FRAME_BYTES": "-1"}, nil, `JETWAY_MAX_FRAME_BYTES="-1": want a whole number >= 0`},
		{map[string]string{"JETWAY_MAX_INFLIGHT": "64MiB"}, nil, `JETWAY_MAX_INFLIGHT="64MiB": want a whole number >= 0`},
		{map[string]string{"JETWAY_BALANCE_MARGIN": "0"}, nil, `JETWAY_BALANCE_MARGIN="0": want a fraction in (0, 1]`},
		{map[string]string{"JETWAY_PPROF": "maybe"}, nil, `JETWAY_PPROF="maybe": want true or false`},
		{map[string]string{"JETWAY_HEARTBEAT": "x", "JETWAY_PPROF": "y"}, nil,
			`settings: JETWAY_HEARTBEAT="x": want a duration such as 30s; JETWAY_PPROF="y": want true or false`},
		{map[string]string{}, []string{"--max-frame-bytes=-1"}, "--max-frame-bytes=-1: want a whole number >= 0"},
		{map[string]string{}, []string{"--send-queue-frames=-1"}, "--send-queue-frames=-1: want a whole number >= 0"},
		{map[string]string{}, []string{"--heartbeat=-1s"}, "--heartbeat=-1s: want a duration >= 0"},
	} {
		if _, err := parse(c.env, c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v %v: %v, want an error containing %q", c.env, c.args, err, c.want)
		}
	}
}
