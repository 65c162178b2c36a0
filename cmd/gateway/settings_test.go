package main

import (
	"flag"
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

// TestSettingsDocumented: every setting is in docs/configuration.md with
// the default the server really uses, and every documented setting exists.
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
	fs, _, _ := (&settings{}).flags("gateway", getenv)
	seen := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) {
		key := settingKey(f.Usage)
		if key == "" {
			t.Errorf("flag -%s names no variable in its usage %q", f.Name, f.Usage)
			return
		}
		seen[key] = true
		def, ok := rows[key]
		switch {
		case !ok:
			t.Errorf("%s (-%s) is not documented in docs/configuration.md", key, f.Name)
		case computed[key] != "":
			if !strings.Contains(def, computed[key]) {
				t.Errorf("%s: documented default %q, want it to say %q", key, def, computed[key])
			}
		case f.DefValue == "":
			if strings.TrimSpace(def) == "" {
				t.Errorf("%s: no default documented", key)
			}
		default:
			if !sameDefault(f, def) {
				t.Errorf("%s: documented default %q, the server's is %q", key, def, f.DefValue)
			}
		}
	})
	for key := range rows {
		switch {
		case strings.HasPrefix(key, "AWS_ENDPOINT_URL_"): // the SDK's own variables
		case !seen[key]:
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

// settingKey is the variable named at the end of a flag's usage: "... (KEY)".
func settingKey(usage string) string {
	i := strings.LastIndex(usage, "(")
	if i < 0 || !strings.HasSuffix(usage, ")") {
		return ""
	}
	return settingName.FindString(usage[i:])
}

// sameDefault compares the first `value` of the documented default with the
// flag's, as the flag's type reads it.
func sameDefault(f *flag.Flag, def string) bool {
	m := firstCode.FindStringSubmatch(def)
	if m == nil {
		return false
	}
	doc := m[1]
	switch f.Value.(flag.Getter).Get().(type) {
	case time.Duration:
		d, err := time.ParseDuration(doc)
		return err == nil && d.String() == f.DefValue
	case int:
		n, err := strconv.Atoi(doc)
		return err == nil && strconv.Itoa(n) == f.DefValue
	default:
		return doc == f.DefValue || filepath.Clean(doc) == filepath.Clean(f.DefValue)
	}
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
