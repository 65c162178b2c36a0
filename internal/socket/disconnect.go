package socket

import "fmt"

// Disconnect is a WebSocket close: its code and the reason sent with it.
// Every close the server or the client makes is one of the values below, so
// a code and its reason are written once.
type Disconnect struct {
	Code   int
	Reason string
}

func (d Disconnect) String() string { return fmt.Sprintf("%d %s", d.Code, d.Reason) }

// The closes of every WebSocket door (PROTOCOL.md, "Close codes"; the AI
// SDK door closes as /v1/ws does).
var (
	// DisconnectNormal is a client ending its session.
	DisconnectNormal = Disconnect{Code: 1000}
	// DisconnectShutdown ends a session once a draining server's requests
	// have delivered their terminals (or the drain timeout passed).
	DisconnectShutdown = Disconnect{Code: 1001, Reason: "server shutting down"}
	// DisconnectInvalidData closes a connection that sent a text frame that
	// is not UTF-8 (RFC 6455 8.1).
	DisconnectInvalidData = Disconnect{Code: 1007, Reason: "text frame is not valid UTF-8"}
	// DisconnectFrameTooBig closes a connection that sent a frame over the
	// largest inbound bound (JETWAY_MAX_ATTACHMENT_FRAME_BYTES, or
	// JETWAY_MAX_FRAME_BYTES when it is not larger).
	DisconnectFrameTooBig = Disconnect{Code: 1009, Reason: "frame too big"}
	// DisconnectNoAttachments closes a connection that sent a frame over
	// JETWAY_MAX_FRAME_BYTES that is not a request carrying an image or
	// document block: only those may be larger.
	DisconnectNoAttachments = Disconnect{Code: 1009, Reason: "frame too big: only requests with images or documents may be larger"}
	// DisconnectHeartbeat closes a connection that answered no ping within
	// two heartbeats.
	DisconnectHeartbeat = Disconnect{Code: 1008, Reason: "heartbeat timeout"}
	// DisconnectFrameTimeout closes a connection that did not finish an
	// inbound frame within JETWAY_FRAME_READ_TIMEOUT of its start (pings
	// do not extend it): the frame's bytes are dropped and its share of
	// the attachment budget given back.
	DisconnectFrameTimeout = Disconnect{Code: 1008, Reason: "frame read timeout"}
	// DisconnectInternal closes a session whose handler failed; the client
	// reconnects and resumes.
	DisconnectInternal = Disconnect{Code: 1011, Reason: "internal error"}
	// DisconnectTokenExpired closes a session whose token ran out without an
	// auth refresh.
	DisconnectTokenExpired = Disconnect{Code: 4001, Reason: "token expired"}
	// DisconnectTokenRejected closes a session whose auth frame carried a
	// token that is invalid or for another user.
	DisconnectTokenRejected = Disconnect{Code: 4001, Reason: "token rejected"}
	// DisconnectSlow closes a client that stopped reading (its send queue
	// stayed full for the write timeout); its answers can be resumed.
	DisconnectSlow = Disconnect{Code: 4008, Reason: "slow consumer: resume your requests"}
)
