package main

import (
	"io"
	"strings"
	"testing"
)

// TestServeAdminSetting: JETWAY_SERVE_ADMIN is decided as
// JETWAY_SERVE_DEMO is: on by default in dev mode, off in production,
// and true or false when given.
func TestServeAdminSetting(t *testing.T) {
	parse := func(env map[string]string) (*settings, error) {
		env["HOME"] = t.TempDir()
		env["AWS_REGION"] = "us-east-1"
		return parseSettings("gateway serve", nil, func(k string) string { return env[k] }, io.Discard)
	}
	const issuer = "https://cognito-idp.us-east-1.amazonaws.com/us-east-1_example"
	for _, c := range []struct {
		name string
		env  map[string]string
		want bool
	}{
		{"dev mode", map[string]string{}, true},
		{"production", map[string]string{"JETWAY_AUTH_ISSUER": issuer}, false},
		{"production, on", map[string]string{"JETWAY_AUTH_ISSUER": issuer, "JETWAY_SERVE_ADMIN": "true"}, true},
		{"dev mode, off", map[string]string{"JETWAY_SERVE_ADMIN": "false"}, false},
		{"the demo off, the console by mode", map[string]string{"JETWAY_SERVE_DEMO": "false"}, true},
	} {
		s, err := parse(c.env)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if s.ServeAdmin != c.want {
			t.Errorf("%s: ServeAdmin %v, want %v", c.name, s.ServeAdmin, c.want)
		}
	}
	if _, err := parse(map[string]string{"JETWAY_SERVE_ADMIN": "sometimes"}); err == nil || !strings.Contains(err.Error(), `JETWAY_SERVE_ADMIN="sometimes": want true or false`) {
		t.Errorf("a bad JETWAY_SERVE_ADMIN: %v", err)
	}
}
