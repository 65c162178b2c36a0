package mockmodel

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
)

// Header names and values of the AWS event stream encoding as Bedrock uses it.
const (
	contentTypeEventStream = "application/vnd.amazon.eventstream"
	contentTypeJSON        = "application/json"

	// errorTypeSuffix is what Bedrock appends to X-Amzn-ErrorType; the SDK
	// strips it, so sending it proves the mock's errors parse like the real ones.
	errorTypeSuffix = ":http://internal.amazon.com/coral/com.amazon.bedrock/"
)

// Stop reasons the mock produces (values of types.StopReason).
const (
	stopEndTurn   = "end_turn"
	stopMaxTokens = "max_tokens"
	stopGuardrail = "guardrail_intervened"
	stopToolUse   = "tool_use"
)

// frames holds every event message that does not depend on the request,
// encoded once: streaming a token is then one Write of a ready byte slice.
type frames struct {
	messageStart []byte
	blockStop    []byte
	stop         map[string][]byte // by stop reason
	first        [len(vocabulary)][]byte
	rest         [len(vocabulary)][]byte
	markdown     [][]byte // mock-markdown's deltas, in order
}

func newFrames() *frames {
	enc := eventstream.NewEncoder()
	f := &frames{
		messageStart: eventMessage(enc, "messageStart", []byte(`{"role":"assistant"}`)),
		blockStop:    eventMessage(enc, "contentBlockStop", []byte(`{"contentBlockIndex":0}`)),
		stop:         make(map[string][]byte),
	}
	for _, reason := range []string{stopEndTurn, stopMaxTokens, stopGuardrail, stopToolUse} {
		f.stop[reason] = eventMessage(enc, "messageStop", mustJSON(map[string]string{"stopReason": reason}))
	}
	for w := range vocabulary {
		f.first[w] = deltaMessage(enc, piece(0, w))
		f.rest[w] = deltaMessage(enc, piece(1, w))
	}
	for _, p := range markdownPieces() {
		f.markdown = append(f.markdown, deltaMessage(enc, p))
	}
	return f
}

// delta returns the contentBlockDelta message of word w at answer position i.
func (f *frames) delta(i, w int) []byte {
	if i == 0 {
		return f.first[w]
	}
	return f.rest[w]
}

func deltaMessage(enc *eventstream.Encoder, text string) []byte {
	type delta struct {
		Text string `json:"text"`
	}
	payload := mustJSON(struct {
		ContentBlockIndex int   `json:"contentBlockIndex"`
		Delta             delta `json:"delta"`
	}{0, delta{text}})
	return eventMessage(enc, "contentBlockDelta", payload)
}

// eventMessage encodes one event message (:message-type event).
func eventMessage(enc *eventstream.Encoder, eventType string, payload []byte) []byte {
	var buf bytes.Buffer
	if err := writeEvent(enc, &buf, eventType, payload); err != nil {
		// Encoding into memory fails only for oversized headers or
		// payloads, which these fixed messages never are.
		panic("mockmodel: encode " + eventType + ": " + err.Error())
	}
	return buf.Bytes()
}

func writeEvent(enc *eventstream.Encoder, w io.Writer, eventType string, payload []byte) error {
	var msg eventstream.Message
	msg.Headers.Set(":message-type", eventstream.StringValue("event"))
	msg.Headers.Set(":event-type", eventstream.StringValue(eventType))
	msg.Headers.Set(":content-type", eventstream.StringValue(contentTypeJSON))
	msg.Payload = payload
	return enc.Encode(w, msg)
}

// writeException writes an exception message (:message-type exception), which
// the SDK turns into the stream's error, e.g. *types.ModelStreamErrorException
// for exceptionType "modelStreamErrorException".
func writeException(enc *eventstream.Encoder, w io.Writer, exceptionType string, payload []byte) error {
	var msg eventstream.Message
	msg.Headers.Set(":message-type", eventstream.StringValue("exception"))
	msg.Headers.Set(":exception-type", eventstream.StringValue(exceptionType))
	msg.Headers.Set(":content-type", eventstream.StringValue(contentTypeJSON))
	msg.Payload = payload
	return enc.Encode(w, msg)
}

// tokenUsage is a request's input tokens as the metadata event reports
// them: input are those neither read from nor written to the cache (the
// cache fields are reported when the request carried cache points).
type tokenUsage struct {
	input, cacheRead, cacheWrite int
	cache                        bool
}

// metadataPayload is the metadata event's JSON, built without reflection.
// tier is the service tier echoed ("" for none: the request named none).
func metadataPayload(buf []byte, u tokenUsage, outputTokens int, latency time.Duration, tier string) []byte {
	buf = append(buf, `{"usage":{"inputTokens":`...)
	buf = strconv.AppendInt(buf, int64(u.input), 10)
	buf = append(buf, `,"outputTokens":`...)
	buf = strconv.AppendInt(buf, int64(outputTokens), 10)
	if u.cache {
		buf = append(buf, `,"cacheReadInputTokens":`...)
		buf = strconv.AppendInt(buf, int64(u.cacheRead), 10)
		buf = append(buf, `,"cacheWriteInputTokens":`...)
		buf = strconv.AppendInt(buf, int64(u.cacheWrite), 10)
	}
	buf = append(buf, `,"totalTokens":`...)
	buf = strconv.AppendInt(buf, int64(u.input+u.cacheRead+u.cacheWrite+outputTokens), 10)
	buf = append(buf, `},"metrics":{"latencyMs":`...)
	buf = strconv.AppendInt(buf, latency.Milliseconds(), 10)
	buf = append(buf, '}')
	if tier != "" {
		// tier is one of the known tier types: no escaping needed.
		buf = append(buf, `,"serviceTier":{"type":"`...)
		buf = append(buf, tier...)
		buf = append(buf, `"}`...)
	}
	buf = append(buf, '}')
	return buf
}

// writeError answers before the stream starts, the way Bedrock does: status,
// X-Amzn-ErrorType and a JSON body with the message. The SDK turns it into
// the matching typed error (types.ThrottlingException and so on).
func writeError(w http.ResponseWriter, status int, errorType, message string) {
	h := w.Header()
	h.Set("Content-Type", contentTypeJSON)
	h.Set("X-Amzn-ErrorType", errorType+errorTypeSuffix)
	w.WriteHeader(status)
	_, _ = w.Write(mustJSON(map[string]string{"message": message}))
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic("mockmodel: marshal: " + err.Error())
	}
	return b
}
