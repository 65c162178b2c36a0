package protocol

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"hash/crc32"
	"strings"
	"testing"
)

// pngHeader is a PNG's signature and IHDR chunk claiming w x h: all that
// image.DecodeConfig reads.
func pngHeader(w, h uint32) []byte {
	var b bytes.Buffer
	b.WriteString("\x89PNG\r\n\x1a\n")
	ihdr := make([]byte, 13)
	binary.BigEndian.PutUint32(ihdr[0:], w)
	binary.BigEndian.PutUint32(ihdr[4:], h)
	ihdr[8], ihdr[9] = 8, 6 // 8-bit RGBA
	_ = binary.Write(&b, binary.BigEndian, uint32(len(ihdr)))
	chunk := append([]byte("IHDR"), ihdr...)
	b.Write(chunk)
	_ = binary.Write(&b, binary.BigEndian, crc32.ChecksumIEEE(chunk))
	return b.Bytes()
}

// An image's header dimensions past Bedrock's 8,000 px per side are
// refused before any reservation, naming the field (issue 30: 2^31 x 2^31
// was accepted).
func TestImageDimensionsAreBounded(t *testing.T) {
	for _, c := range []struct {
		w, h uint32
		ok   bool
	}{{8000, 8000, true}, {100, 20, true}, {8001, 10, false}, {10, 1 << 31, false}, {1 << 31, 1 << 31, false}} {
		data := base64.StdEncoding.EncodeToString(pngHeader(c.w, c.h))
		frame := `{"type":"request","request_id":"image-size-1","messages":[{"role":"user","content":[{"type":"text","text":"what?"},` +
			`{"type":"image","format":"png","data":"` + data + `"}]}]}`
		_, err := Decode([]byte(frame))
		switch {
		case c.ok && err != nil:
			t.Errorf("%dx%d: %v", c.w, c.h, err)
		case !c.ok && (err == nil || !strings.Contains(err.Error(), "messages[0].content[1].data") || !strings.Contains(err.Error(), "at most 8000")):
			t.Errorf("%dx%d: %v, want a refusal naming messages[0].content[1].data", c.w, c.h, err)
		}
	}
}

// webpHeader is an extended WebP file's header (RIFF, VP8X) of a w x h
// canvas: what image.DecodeConfig reads the size from.
func webpHeader(w, h uint32) []byte {
	b := []byte("RIFF\x00\x00\x00\x00WEBPVP8X\x0a\x00\x00\x00\x00\x00\x00\x00")
	for _, v := range []uint32{w - 1, h - 1} {
		b = append(b, byte(v), byte(v>>8), byte(v>>16))
	}
	n := len(b) - 8 // the RIFF size: what follows it
	b[4], b[5], b[6], b[7] = byte(n), byte(n>>8), byte(n>>16), byte(n>>24)
	return b
}

func TestWebPDimensionsAreBounded(t *testing.T) {
	for _, c := range []struct {
		w, h uint32
		ok   bool
	}{{8000, 8000, true}, {100, 20, true}, {8001, 10, false}, {10, 1 << 24, false}} {
		data := base64.StdEncoding.EncodeToString(webpHeader(c.w, c.h))
		frame := `{"type":"request","request_id":"image-size-2","messages":[{"role":"user","content":[{"type":"text","text":"what?"},` +
			`{"type":"image","format":"webp","data":"` + data + `"}]}]}`
		_, err := Decode([]byte(frame))
		switch {
		case c.ok && err != nil:
			t.Errorf("%dx%d: %v", c.w, c.h, err)
		case !c.ok && (err == nil || !strings.Contains(err.Error(), "messages[0].content[1].data") || !strings.Contains(err.Error(), "at most 8000")):
			t.Errorf("%dx%d: %v, want a refusal naming messages[0].content[1].data", c.w, c.h, err)
		}
	}
}
