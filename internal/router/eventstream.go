package router

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"unicode/utf8"

	"github.com/aws/smithy-go/eventstream"
)

// The event-stream framing (application/vnd.amazon.eventstream), as
// smithy-go/eventstream reads it: a prelude (total length, headers
// length, both uint32 big-endian, and the prelude's CRC-32), the headers,
// the payload and the message's CRC-32 (IEEE, of everything before it).
const (
	preludeLen = 12 // total length, headers length, prelude CRC
	msgCRCLen  = 4
	minMsgLen  = preludeLen + msgCRCLen
	// maxMessageLen bounds one message: Bedrock's event payloads are far
	// smaller (the service's limit is 16 MiB of payload plus 128 KiB of
	// headers); a longer prelude is a corrupt stream, refused before its
	// buffer is made.
	maxMessageLen = 16<<20 + 128<<10 + minMsgLen
)

// rawEvent is one decoded message: its two headers the adapter reads
// and its payload, every slice into the message's own bytes (raw), which
// the next decode overwrites.
type rawEvent struct {
	messageType, eventType []byte
	payload                []byte
	raw                    []byte // the whole message, prelude to CRC
}

// decodeEvent reads one message from r into buf (grown when too small;
// the grown buffer is returned to be reused). It checks what
// smithy-go's decoder checks (both CRCs, the lengths, the header value
// types) without allocating per message: headers are walked in place and
// only :message-type and :event-type are kept, as byte slices. Like
// smithy-go's decoder it returns io.EOF when the body ends before a
// message starts and io.ErrUnexpectedEOF when it ends inside one;
// checksum and length faults are smithy-go's ChecksumError and LengthError.
// It checks the message's CRC before it reads the headers, so corrupt
// headers are a ChecksumError (a failed stream), where smithy-go, reading
// them first, could run out of them and report an unexpected EOF (which
// the adapter takes for the body's end).
func decodeEvent(r io.Reader, buf []byte) (rawEvent, []byte, error) {
	if cap(buf) < preludeLen {
		buf = make([]byte, 0, eventPayloadBuffer)
	}
	buf = buf[:preludeLen]
	if _, err := io.ReadFull(r, buf); err != nil {
		return rawEvent{}, buf, err
	}
	total := binary.BigEndian.Uint32(buf[0:4])
	headersLen := binary.BigEndian.Uint32(buf[4:8])
	if crc32.ChecksumIEEE(buf[0:8]) != binary.BigEndian.Uint32(buf[8:12]) {
		return rawEvent{}, buf, eventstream.ChecksumError{}
	}
	if total < minMsgLen || total > maxMessageLen {
		return rawEvent{}, buf, eventstream.LengthError{Part: "message prelude", Want: minMsgLen, Have: int(total)}
	}
	if headersLen > total-minMsgLen {
		return rawEvent{}, buf, eventstream.LengthError{Part: "message headers", Want: int(total - minMsgLen), Have: int(headersLen)}
	}
	if cap(buf) < int(total) {
		grown := make([]byte, total, max(int(total), 2*cap(buf)))
		copy(grown, buf)
		buf = grown
	}
	buf = buf[:total]
	if _, err := io.ReadFull(r, buf[preludeLen:]); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return rawEvent{}, buf, err
	}
	body := buf[:total-msgCRCLen]
	if crc32.ChecksumIEEE(body) != binary.BigEndian.Uint32(buf[total-msgCRCLen:]) {
		return rawEvent{}, buf, eventstream.ChecksumError{}
	}
	ev := rawEvent{raw: buf, payload: body[preludeLen+headersLen:]}
	if err := ev.readHeaders(body[preludeLen : preludeLen+headersLen]); err != nil {
		return rawEvent{}, buf, err
	}
	return ev, buf, nil
}

// errHeaders is the error of headers that run past their length.
var errHeaders = fmt.Errorf("event headers: %w", io.ErrUnexpectedEOF)

// readHeaders walks the headers (name length, name, value type, value)
// and keeps the two the adapter reads when they are strings.
func (ev *rawEvent) readHeaders(hs []byte) error {
	for len(hs) > 0 {
		n := int(hs[0])
		if len(hs) < 1+n+1 {
			return errHeaders
		}
		name, typ := hs[1:1+n], hs[1+n]
		hs = hs[2+n:]
		var size int
		switch typ {
		case 0, 1: // true, false
		case 2: // int8
			size = 1
		case 3: // int16
			size = 2
		case 4: // int32
			size = 4
		case 5, 8: // int64, timestamp
			size = 8
		case 9: // uuid
			size = 16
		case 6, 7: // bytes, string: a uint16 length first
			if len(hs) < 2 {
				return errHeaders
			}
			size = 2 + int(binary.BigEndian.Uint16(hs))
		default:
			return errors.New("event headers: unknown value type " + fmt.Sprint(typ))
		}
		if len(hs) < size {
			return errHeaders
		}
		var v []byte // a header of another type reads as "", as with smithy-go's
		if typ == 7 {
			v = hs[2:size]
		}
		switch string(name) {
		case eventstream.MessageTypeHeader:
			ev.messageType = v
		case eventstream.EventTypeHeader:
			ev.eventType = v
		}
		hs = hs[size:]
	}
	return nil
}

// deltaText reads the text of a contentBlockDelta payload in the form
// Bedrock and the mock send: {"contentBlockIndex":N,"delta":{"text":"..."}}
// with, optionally, a "p" padding string last. ok is false for any other
// form, or a text with an escape, a control character or invalid UTF-8
// (which encoding/json would unescape, refuse or replace): the caller then
// reads the payload with encoding/json, which gives the same text for
// every payload this accepts. The text is a copy (one allocation).
func deltaText(p []byte) (text string, ok bool) {
	const head = `{"contentBlockIndex":`
	if !bytes.HasPrefix(p, []byte(head)) {
		return "", false
	}
	p = p[len(head):]
	n := 0
	for n < len(p) && p[n] >= '0' && p[n] <= '9' {
		n++
	}
	if n == 0 || n > 9 || (n > 1 && p[0] == '0') {
		return "", false
	}
	p = p[n:]
	const delta = `,"delta":{"text":"`
	if !bytes.HasPrefix(p, []byte(delta)) {
		return "", false
	}
	p = p[len(delta):]
	s, rest, ok := plainString(p)
	if !ok {
		return "", false
	}
	switch {
	case string(rest) == `}}`:
	case bytes.HasPrefix(rest, []byte(`},"p":"`)):
		_, rest, ok = plainString(rest[len(`},"p":"`):])
		if !ok || string(rest) != `}` {
			return "", false
		}
	default:
		return "", false
	}
	return string(s), true
}

// plainString splits p, just past a string's opening quote, at its
// closing quote: ok only when the string has no escape or control
// character and is valid UTF-8, so that its bytes are its value.
func plainString(p []byte) (s, rest []byte, ok bool) {
	i := bytes.IndexByte(p, '"')
	if i < 0 {
		return nil, nil, false
	}
	s = p[:i]
	for _, c := range s {
		if c < 0x20 || c == '\\' {
			return nil, nil, false
		}
	}
	if !utf8.Valid(s) {
		return nil, nil, false
	}
	return s, p[i+1:], true
}
