// Package doortest pins an HTTP door's whole answers (status, headers
// and body) in a golden file, so that a change to a door's code can be
// shown to leave its wire bytes as they were.
package doortest

import (
	"io"
	"net/http"
	"os"
	"sort"
	"strings"
	"testing"
)

// Case is one request. A Header value "" removes that header from the
// defaults.
type Case struct {
	Name, Method, Path, Body string
	Header                   map[string]string
}

// Check sends each case to base (with the headers of defaults, then its
// own) and compares the answers, every header but Date included, with
// the golden file; update rewrites the file instead.
func Check(t *testing.T, base string, defaults map[string]string, cases []Case, golden string, update bool) {
	t.Helper()
	var out strings.Builder
	for _, c := range cases {
		req, err := http.NewRequest(c.Method, base+c.Path, strings.NewReader(c.Body))
		if err != nil {
			t.Fatal(err)
		}
		for _, hdr := range []map[string]string{defaults, c.Header} {
			for k, v := range hdr {
				if v == "" {
					req.Header.Del(k)
				} else {
					req.Header.Set(k, v)
				}
			}
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		out.WriteString("== " + c.Name + "\n" + resp.Status + "\n")
		var names []string
		for k := range resp.Header {
			if k != "Date" {
				names = append(names, k)
			}
		}
		sort.Strings(names)
		for _, k := range names {
			out.WriteString(k + ": " + strings.Join(resp.Header[k], ", ") + "\n")
		}
		out.Write(b)
		out.WriteString("\n")
	}
	if update {
		if err := os.WriteFile(golden, []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	gl, wl := strings.Split(out.String(), "\n"), strings.Split(string(want), "\n")
	for i := 0; i < len(gl) || i < len(wl); i++ {
		var g, w string
		if i < len(gl) {
			g = gl[i]
		}
		if i < len(wl) {
			w = wl[i]
		}
		if g != w {
			t.Errorf("%s line %d:\n got %s\nwant %s", golden, i+1, g, w)
		}
	}
}
