package main

import (
	"mime"
	"net/http"
	"strings"
)

// drainHandler is the admin listener's POST /drain: an operator's drain,
// refused to a cross-site request (see crossSite).
func drainHandler(requestDrain func(reason string)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if status, msg := crossSite(r); status != 0 {
			writeJSON(w, status, map[string]any{"error": map[string]string{"code": "forbidden", "message": msg}})
			return
		}
		requestDrain("admin")
		writeJSON(w, http.StatusAccepted, map[string]any{"status": "draining"})
	}
}

// crossSite refuses what a page on another site can make a browser send
// without a CORS preflight (a form post, or fetch with a "simple" body),
// so no web page can drain a server through an operator's browser: an
// Origin other than the listener's own, a Sec-Fetch-Site other than
// same-origin or none, or a body type other than application/json (none
// is fine: `curl -X POST`). It returns the status and message of the
// refusal, or 0.
func crossSite(r *http.Request) (int, string) {
	if o := r.Header.Get("Origin"); o != "" && o != "http://"+r.Host && o != "https://"+r.Host {
		return http.StatusForbidden, "cross-site request refused: origin " + o + " is not this listener's"
	}
	if s := r.Header.Get("Sec-Fetch-Site"); s != "" && s != "same-origin" && s != "none" {
		return http.StatusForbidden, "cross-site request refused (Sec-Fetch-Site: " + s + ")"
	}
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || !strings.EqualFold(mt, "application/json") {
			return http.StatusUnsupportedMediaType, "send no body, or Content-Type: application/json"
		}
	}
	return 0, ""
}
