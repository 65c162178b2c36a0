package gateway

import (
	"encoding/json"
	"time"

	"github.com/jetway-gateway/jetway/internal/stream"
	"github.com/jetway-gateway/jetway/internal/tracing"
)

// facts are a request's facts, built once on the server that admits it
// (flight.facts) and persisted in its record, so that whichever server
// ends it (its owner, or a survivor: interrupt) writes the same usage
// record and settles the same reservation: who sent it, when, through
// which door, with what attachments, and what its settlement needs. The
// record keeps them as JSON under the names earlier releases wrote (the
// record's reservation attribute), and reads them back with readFacts.
type facts struct {
	// Known from the record's key and this server, not kept in it.
	Owner      string    `json:"-"` // auth.Principal.Owner: the key of logs and records
	RequestID  string    `json:"-"`
	ReceivedAt time.Time `json:"-"` // kept as ReceivedAtMs
	TraceID    string    `json:"-"` // the trace of this server's part ("" when none)

	// The settlement's: the quota reservation (quota.Reservation's binary
	// form), the input estimate it was reserved on, the model asked for
	// and the tokens reserved. Set once a reservation was made.
	Quota         []byte `json:"quota"`
	InputEstimate int64  `json:"input_estimate"`
	Model         string `json:"model"`
	// The usage record's.
	Tenant       string `json:"tenant"`
	App          string `json:"app"`
	User         string `json:"user"` // the sub (the record's owner key is tenant/app/sub)
	ClientID     string `json:"client_id"`
	SessionID    string `json:"session_id"`
	ReceivedAtMs int64  `json:"received_at_ms"`
	Reserved     int64  `json:"reserved_tokens"`
	Door         string `json:"door,omitempty"` // the door it came through ("" in records from before it was kept)
	Images       int    `json:"images,omitempty"`
	Documents    int    `json:"documents,omitempty"`
}

// facts are the flight's request's facts; with its reservation when it
// has one.
func (f *flight) facts() facts {
	p := f.caller.Principal
	fs := facts{Owner: p.Owner(), RequestID: f.req.RequestID, ReceivedAt: f.req.ReceivedAt, TraceID: tracing.TraceID(f.root.SpanContext()),
		Tenant: p.Tenant, App: p.App, User: p.Subject, ClientID: p.ClientID, SessionID: f.caller.SessionID,
		ReceivedAtMs: f.req.ReceivedAt.UnixMilli(), Door: f.req.door(), Images: f.feats.Images, Documents: f.feats.Documents}
	if f.reservation != nil {
		fs.Reserved = f.reservation.Amount().Tokens
	}
	return fs
}

// stored is the facts' persisted form.
func (fs facts) stored() []byte {
	b, _ := json.Marshal(fs) // of strings, numbers and bytes: always marshals
	return b
}

// readFacts are the facts a record keeps; an error says they are
// unreadable (then only its key is known).
func readFacts(rec *stream.Record) (facts, error) {
	fs := facts{Owner: rec.Owner, RequestID: rec.RequestID}
	err := json.Unmarshal(rec.Reservation, &fs)
	fs.Owner, fs.RequestID = rec.Owner, rec.RequestID
	if fs.ReceivedAtMs > 0 {
		fs.ReceivedAt = time.UnixMilli(fs.ReceivedAtMs).UTC()
	}
	return fs, err
}
