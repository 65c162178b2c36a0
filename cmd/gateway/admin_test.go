package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// POST /drain refuses what a page on another site can make an operator's
// browser send (issue 23: a text/plain form post from evil.example
// drained the server); an operator's curl, with no body or JSON, drains.
func TestAdminDrainRefusesCrossSiteRequests(t *testing.T) {
	drains := 0
	r := http.NewServeMux()
	r.Handle("POST /drain", drainHandler(func(reason string) {
		if reason != "admin" {
			t.Errorf("reason %q", reason)
		}
		drains++
	}))
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	for _, c := range []struct {
		name   string
		hdr    map[string]string
		body   string
		status int
	}{
		{"form post from another site", map[string]string{"Origin": "http://evil.example", "Content-Type": "text/plain"}, "x=1", 403},
		{"foreign origin with JSON", map[string]string{"Origin": "http://evil.example", "Content-Type": "application/json"}, "{}", 403},
		{"opaque origin", map[string]string{"Origin": "null"}, "", 403},
		{"text/plain without origin", map[string]string{"Content-Type": "text/plain"}, "x", 415},
		{"urlencoded form", map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, "a=b", 415},
		{"multipart form", map[string]string{"Content-Type": "multipart/form-data; boundary=x"}, "", 415},
		{"cross-site fetch metadata", map[string]string{"Sec-Fetch-Site": "cross-site"}, "", 403},
		{"same-site fetch metadata", map[string]string{"Sec-Fetch-Site": "same-site"}, "", 403},
		{"curl -X POST", nil, "", 202},
		{"JSON", map[string]string{"Content-Type": "application/json; charset=utf-8"}, "{}", 202},
		{"own origin", map[string]string{"Origin": "http://" + host, "Content-Type": "application/json", "Sec-Fetch-Site": "same-origin"}, "{}", 202},
	} {
		before := drains
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/drain", strings.NewReader(c.body))
		for k, v := range c.hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		drained := drains > before
		if resp.StatusCode != c.status || drained != (c.status == 202) {
			t.Errorf("%s: %d (drained %v), want %d", c.name, resp.StatusCode, drained, c.status)
		}
	}
}
