package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestDockerfileBuildsLikeCI keeps the image buildable by construction: its
// build line is the Makefile's `build` target, which CI runs.
func TestDockerfileBuildsLikeCI(t *testing.T) {
	df, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^BUILD = (.+)$`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("Makefile has no BUILD line")
	}
	build := strings.ReplaceAll(string(m[1]), "$(GO)", "go")
	if !strings.Contains(string(df), "RUN "+build+"\n") {
		t.Fatalf("Dockerfile does not run the Makefile's build line %q", build)
	}
	for _, want := range []string{"CGO_ENABLED=0", "USER nonroot", "EXPOSE 8080 9090", "distroless/static", "go mod download"} {
		if !strings.Contains(string(df), want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
	if !strings.Contains(string(df), "FROM golang:1.26") {
		t.Errorf("Dockerfile's Go is not 1.26 (go.mod's)")
	}
}
