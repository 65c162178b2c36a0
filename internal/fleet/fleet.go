// Package fleet is what the gateway servers of one deployment know of each
// other: one membership item per server in a shared table (its id, start,
// heartbeat and load, with a TTL), renewed on the server's own schedule.
//
// Liveness is a fact about a process, decided from its membership: a
// server is gone when its heartbeat is older than the stale bound, when its
// item was deleted at a clean stop, or when an item with the same server id
// started later (a restart). Never from one late write of one request.
//
// Without a table (one server, the embedded default) there is one member,
// this server, and nothing is ever gone.
package fleet

import "time"

// Load is a server's load as its membership item carries it.
type Load struct {
	// Sessions is the number of open client sessions (WebSockets).
	Sessions int `json:"sessions"`
	// Streams is the number of requests being answered (model calls in flight).
	Streams int `json:"streams"`
	// InFlight is the number of accepted requests not yet ended.
	InFlight int `json:"in_flight"`
}

// Member is one server as the fleet sees it.
type Member struct {
	// ID is the server's instance id: unique per process (a restarted
	// server is a new member), the owner of its request records and
	// quota leases.
	ID string
	// Started is when the process started.
	Started time.Time
	// Heartbeat is the member's last renewal, by its own clock.
	Heartbeat time.Time
	// Load is the load it reported with that heartbeat.
	Load Load
	// Draining: the member is shutting down or self-draining and takes no
	// new sessions.
	Draining bool
	// Serving: the member has been seen serving: the load balancer checks
	// it, or it has held a session. Only a member seen serving joins the
	// balancer's mean, so a task that heartbeats but gets no traffic (not
	// registered with the load balancer, or an item written by hand) never
	// draws sessions off the others. In a roster it is sticky: once seen
	// serving, a member stays counted.
	Serving bool
}

// Roster is the fleet as this server knows it: every consumer reads it
// through this view (the balancer, the gateway's liveness checks).
type Roster interface {
	// Self is this server's instance id.
	Self() string
	// Members returns the live members, this server included (a copy).
	Members() []Member
}
