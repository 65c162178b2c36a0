package main

import (
	"context"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
)

// TestServeReleasesWhatItBuiltOnError: a listen address in use is an
// error of newServer, before anything serves, and what it had opened (the
// main listener) is closed again.
func TestServeReleasesWhatItBuiltOnError(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	probe, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mainAddr := probe.Addr().String()
	_ = probe.Close()

	home := t.TempDir()
	env := map[string]string{"HOME": home, "JETWAY_USAGE_DIR": filepath.Join(home, "usage"),
		"JETWAY_LISTEN": mainAddr, "JETWAY_ADMIN_LISTEN": busy.Addr().String()}
	s, err := parseSettings("gateway serve", nil, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := newServer(context.Background(), s, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "admin listen "+busy.Addr().String()) {
		if srv != nil {
			srv.close()
		}
		t.Fatalf("newServer with the admin address in use: %v, want an admin listen error", err)
	}
	again, err := net.Listen("tcp", mainAddr)
	if err != nil {
		t.Fatalf("the main listener %s was not released: %v", mainAddr, err)
	}
	_ = again.Close()
}
