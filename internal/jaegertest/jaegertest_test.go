package jaegertest

import (
	"os"
	"strings"
	"testing"
)

// TestMakefileBuildsTheSameJaeger: `make test-deps` builds the version the
// tests look for, where they look for it.
func TestMakefileBuildsTheSameJaeger(t *testing.T) {
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	want := "JAEGER_MODULE = " + JaegerModule
	if !strings.Contains(string(mk), want+"\n") {
		t.Fatalf("the Makefile lacks %q", want)
	}
	dir := strings.ReplaceAll(strings.TrimPrefix(JaegerModule, "github.com/jaegertracing/"), "@", "-")
	if !strings.Contains(string(mk), "/jetway/"+dir+"/jaeger\n") {
		t.Fatalf("the Makefile's JAEGER_BIN is not .../jetway/%s/jaeger (CachedPath)", dir)
	}
}

// TestStartReceivesAndAnswers: a started Jaeger answers its query API.
func TestStartReceivesAndAnswers(t *testing.T) {
	j := Start(t)
	if got := j.Traces(t, "nobody", "k", "v"); len(got) != 0 {
		t.Fatalf("traces of an unknown service: %v", got)
	}
}
