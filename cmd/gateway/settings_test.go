package main

import (
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
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
