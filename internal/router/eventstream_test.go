package router

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/aws/smithy-go/eventstream"
)

// smithyDecode is what smithy-go's decoder reads of a body: per message
// the two headers the adapter uses and the payload, or its error.
func smithyDecode(body []byte) (evs [][3]string, err error) {
	dec, r := eventstream.NewDecoder(), bytes.NewReader(body)
	for {
		msg, err := dec.Decode(r, nil)
		if err != nil {
			return evs, err
		}
		evs = append(evs, [3]string{header(msg.Headers, eventstream.MessageTypeHeader),
			header(msg.Headers, eventstream.EventTypeHeader), string(msg.Payload)})
	}
}

func header(hs eventstream.Headers, name string) string {
	v, _ := hs.Get(name).(eventstream.StringValue)
	return string(v)
}

func ourDecode(body []byte) (evs [][3]string, err error) {
	r := bytes.NewReader(body)
	var buf []byte
	for {
		ev, grown, err := decodeEvent(r, buf)
		buf = grown
		if err != nil {
			return evs, err
		}
		evs = append(evs, [3]string{string(ev.messageType), string(ev.eventType), string(ev.payload)})
	}
}

// sameEnd says whether two decoders' errors end a stream alike: the
// adapter treats io.EOF and io.ErrUnexpectedEOF both as the body's end.
// One difference is allowed: decodeEvent checks the message's CRC before
// it reads the headers, so corrupt headers are its ChecksumError where
// smithy-go, which reads them first, may run out of them (an unexpected
// EOF, which the adapter took for the body's end).
func sameEnd(ours, smithy error) bool {
	end := func(err error) bool { return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) }
	if errors.As(ours, new(eventstream.ChecksumError)) && smithy != nil {
		return true
	}
	a, b := ours, smithy
	if end(a) || end(b) {
		return end(a) && end(b)
	}
	return (a == nil) == (b == nil)
}

// TestDecodeEventMatchesSmithy: the adapter's decoder reads every
// message, header type and fault as smithy-go's does (what it reads, or
// that it fails and whether as the body's end).
func TestDecodeEventMatchesSmithy(t *testing.T) {
	var stream bytes.Buffer
	enc := eventstream.NewEncoder()
	msgs := []eventstream.Message{}
	add := func(m eventstream.Message) { msgs = append(msgs, m) }
	var m eventstream.Message
	m.Headers.Set(":message-type", eventstream.StringValue("event"))
	m.Headers.Set(":event-type", eventstream.StringValue("contentBlockDelta"))
	m.Headers.Set(":content-type", eventstream.StringValue("application/json"))
	m.Payload = []byte(`{"contentBlockIndex":0,"delta":{"text":"Hello"},"p":"abcd"}`)
	add(m)
	m = eventstream.Message{}
	m.Headers.Set("b1", eventstream.BoolValue(true))
	m.Headers.Set("b0", eventstream.BoolValue(false))
	m.Headers.Set("i8", eventstream.Int8Value(-3))
	m.Headers.Set("i16", eventstream.Int16Value(300))
	m.Headers.Set(":event-type", eventstream.StringValue("metadata"))
	m.Headers.Set("i32", eventstream.Int32Value(70000))
	m.Headers.Set("i64", eventstream.Int64Value(1<<40))
	m.Headers.Set("bytes", eventstream.BytesValue([]byte{1, 2, 3}))
	m.Headers.Set("ts", eventstream.TimestampValue(time.Unix(1700000000, 0)))
	m.Headers.Set("uuid", eventstream.UUIDValue{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16})
	m.Headers.Set(":message-type", eventstream.StringValue("event"))
	m.Payload = []byte(`{"usage":{"inputTokens":3,"outputTokens":16}}`)
	add(m)
	m = eventstream.Message{} // no headers, no payload
	add(m)
	m = eventstream.Message{}
	m.Headers.Set(":message-type", eventstream.BytesValue([]byte("event"))) // not a string: reads as ""
	m.Headers.Set(":event-type", eventstream.StringValue("messageStop"))
	m.Payload = bytes.Repeat([]byte("x"), 5000) // past the 2 KiB buffer
	add(m)
	m = eventstream.Message{}
	m.Headers.Set(":message-type", eventstream.StringValue("exception"))
	m.Headers.Set(":exception-type", eventstream.StringValue("throttlingException"))
	m.Payload = []byte(`{"message":"slow down"}`)
	add(m)
	for _, m := range msgs {
		if err := enc.Encode(&stream, m); err != nil {
			t.Fatal(err)
		}
	}
	whole := stream.Bytes()
	check := func(name string, body []byte) {
		t.Helper()
		want, werr := smithyDecode(body)
		got, gerr := ourDecode(body)
		if len(got) != len(want) || !sameEnd(gerr, werr) {
			t.Fatalf("%s: got %d messages, %v; smithy-go %d, %v", name, len(got), gerr, len(want), werr)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("%s: message %d: got %q, smithy-go %q", name, i, got[i], want[i])
			}
		}
	}
	check("whole", whole)
	if got, _ := ourDecode(whole); len(got) != len(msgs) {
		t.Fatalf("read %d of %d messages", len(got), len(msgs))
	}
	// Every truncation, and every single-byte corruption, reads alike.
	for n := range len(whole) {
		check("truncated", whole[:n])
	}
	for i := range len(whole) {
		c := bytes.Clone(whole)
		c[i] ^= 0x5a
		check("corrupt", c)
	}
}

// TestDecodeEventAllocations: a usual message costs no allocation.
func TestDecodeEventAllocations(t *testing.T) {
	var stream bytes.Buffer
	var m eventstream.Message
	m.Headers.Set(":message-type", eventstream.StringValue("event"))
	m.Headers.Set(":event-type", eventstream.StringValue("contentBlockDelta"))
	m.Headers.Set(":content-type", eventstream.StringValue("application/json"))
	m.Payload = []byte(`{"contentBlockIndex":0,"delta":{"text":"Hello"},"p":"abcd"}`)
	if err := eventstream.NewEncoder().Encode(&stream, m); err != nil {
		t.Fatal(err)
	}
	r := bytes.NewReader(stream.Bytes())
	buf := make([]byte, 0, eventPayloadBuffer)
	allocs := testing.AllocsPerRun(100, func() {
		r.Reset(stream.Bytes())
		ev, _, err := decodeEvent(r, buf)
		if err != nil || string(ev.eventType) != "contentBlockDelta" {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per message", allocs)
	}
}

// TestDeltaTextMatchesJSON: whatever deltaText accepts, encoding/json
// reads to the same text (and what it refuses, encoding/json reads).
func TestDeltaTextMatchesJSON(t *testing.T) {
	for _, p := range []string{
		`{"contentBlockIndex":0,"delta":{"text":"Hello"}}`,
		`{"contentBlockIndex":12,"delta":{"text":" world, ünïcode ✈"},"p":"abcdefghijkl"}`,
		`{"contentBlockIndex":0,"delta":{"text":""}}`,
		`{"contentBlockIndex":0,"delta":{"text":"a\nb"}}`,
		`{"contentBlockIndex":0,"delta":{"text":"a\u00e9"}}`,
		`{"contentBlockIndex":0,"delta":{"text":"tab	here"}}`,
		"{\"contentBlockIndex\":0,\"delta\":{\"text\":\"bad \xff utf8\"}}",
		`{"contentBlockIndex":0,"delta":{"text":"x"},"delta":{"text":"y"}}`,
		`{"contentBlockIndex":0,"delta":{"text":"x"},"p":"a\"b"}`,
		`{"contentBlockIndex":0,"delta":{"text":"x","more":1}}`,
		`{"contentBlockIndex":01,"delta":{"text":"x"}}`,
		`{"contentBlockIndex":0,"delta":{"toolUse":{"input":"{}"}}}`,
		`{"contentBlockIndex":0,"delta":{"text":"x"}} `,
		`{"contentBlockIndex":0, "delta":{"text":"x"}}`,
	} {
		checkDeltaText(t, []byte(p))
	}
	// The usual forms take the fast path.
	for _, p := range []string{`{"contentBlockIndex":0,"delta":{"text":"Hello"}}`,
		`{"contentBlockIndex":12,"delta":{"text":" world"},"p":"abcdefghijkl"}`} {
		if _, ok := deltaText([]byte(p)); !ok {
			t.Errorf("%s: not read by deltaText", p)
		}
	}
}

func checkDeltaText(t *testing.T, p []byte) {
	t.Helper()
	text, ok := deltaText(p)
	if !ok {
		return
	}
	var want deltaEvent
	if err := json.Unmarshal(p, &want); err != nil {
		t.Fatalf("%q: deltaText read %q, encoding/json fails: %v", p, text, err)
	}
	if text != want.Delta.Text {
		t.Fatalf("%q: deltaText read %q, encoding/json %q", p, text, want.Delta.Text)
	}
}

func FuzzDeltaText(f *testing.F) {
	f.Add([]byte(`{"contentBlockIndex":0,"delta":{"text":"Hello"},"p":"abc"}`))
	f.Add([]byte(`{"contentBlockIndex":3,"delta":{"text":"a\"b"}}`))
	f.Fuzz(func(t *testing.T, p []byte) { checkDeltaText(t, p) })
}
