package protocol

import (
	"encoding/json"
	"strconv"
	"strings"
)

// # Pieces
//
// A piece is one chunk of an answer as the gateway keeps it: in the stream
// log, the request record and the response cache, which all hold plain
// strings. A text chunk of the answer's first block is its text, as it
// always was, so a text-only answer costs nothing more. Any other chunk
// (reasoning, a tool call, text of a later block) is pieceMark followed by
// the chunk frame's fields after seq, exactly as the wire carries them
// (`"text":"","block":1,"kind":"tool_use","input":"{\"q\""`): every server
// replays the same bytes, and writing the frame needs no decoding.

// pieceMark starts a piece that is not plain text. A text that starts with
// it is kept in the marked form too, so reading a piece is never ambiguous.
const pieceMark = '\x00'

// TextPiece is the piece of a text chunk of block 0.
func TextPiece(text string) string {
	if len(text) > 0 && text[0] == pieceMark {
		return BlockPiece(Chunk{Text: text})
	}
	return text
}

// BlockPiece is the piece of chunk c (its Type, RequestID and Seq are not
// kept: the frame that carries it sets them).
func BlockPiece(c Chunk) string {
	if c.Block == 0 && c.Kind == "" && c.ID == "" && c.Name == "" && c.Input == "" && c.Reasoning == "" &&
		c.Signature == "" && (c.Text == "" || c.Text[0] != pieceMark) {
		return c.Text
	}
	dst := append(make([]byte, 0, 32+len(c.Text)+len(c.Input)+len(c.Reasoning)), pieceMark)
	dst = append(dst, `"text":`...)
	dst = appendJSONString(dst, c.Text)
	if c.Block != 0 {
		dst = append(dst, `,"block":`...)
		dst = strconv.AppendInt(dst, int64(c.Block), 10)
	}
	for _, f := range [...]struct{ name, value string }{{`,"kind":`, c.Kind}, {`,"id":`, c.ID},
		{`,"name":`, c.Name}, {`,"input":`, c.Input}, {`,"reasoning":`, c.Reasoning}, {`,"signature":`, c.Signature}} {
		if f.value != "" {
			dst = append(dst, f.name...)
			dst = appendJSONString(dst, f.value)
		}
	}
	return string(dst)
}

// DecodePiece returns the chunk a piece holds (Type, RequestID and Seq unset).
// A marked piece that does not decode (never written by BlockPiece) reads
// as empty text.
func DecodePiece(p string) Chunk {
	if len(p) == 0 || p[0] != pieceMark {
		return Chunk{Text: p}
	}
	var c Chunk
	if err := json.Unmarshal([]byte("{"+p[1:]+"}"), &c); err != nil {
		return Chunk{}
	}
	return c
}

// PieceText is the text a piece adds to done.text.
func PieceText(p string) string {
	if len(p) == 0 || p[0] != pieceMark {
		return p
	}
	return DecodePiece(p).Text
}

// Answer is an answer assembled from its pieces, in order.
type Answer struct {
	// Text is the concatenated text of the text chunks: done.text.
	Text string
	// Blocks are the answer's content blocks in order: text, reasoning
	// (with its signature), tool_use (with its input parsed).
	Blocks []Block
	// Plain is true when every piece is text of block 0.
	Plain bool
	// Generated is the bytes the model produced: text, reasoning and tool
	// input (what a broken stream is charged on).
	Generated int
	// ToolCalls is the number of tool_use blocks.
	ToolCalls int
}

// Assemble builds the answer its pieces make. A tool call's input is its
// fragments joined; an empty input reads as {}, and an input that is not
// valid JSON (a stream cut inside it) is kept as a JSON string.
func Assemble(pieces []string) Answer {
	a := Answer{Plain: true}
	var text strings.Builder
	var parts []*strings.Builder // per block: text, reasoning or tool input
	index := map[int]int{}       // answer block index -> position in a.Blocks
	for _, p := range pieces {
		c := DecodePiece(p)
		if p != "" && p[0] == pieceMark {
			a.Plain = false
		}
		text.WriteString(c.Text)
		a.Generated += len(c.Text) + len(c.Reasoning) + len(c.Input)
		kind := c.Kind
		if kind == "" {
			kind = BlockText
		}
		i, ok := index[c.Block]
		if !ok {
			i = len(a.Blocks)
			index[c.Block] = i
			a.Blocks = append(a.Blocks, Block{Type: kind})
			parts = append(parts, &strings.Builder{})
			if kind == BlockToolUse {
				a.ToolCalls++
			}
		}
		b := &a.Blocks[i]
		parts[i].WriteString(c.Text + c.Reasoning + c.Input)
		if c.ID != "" {
			b.ID = c.ID
		}
		if c.Name != "" {
			b.Name = c.Name
		}
		if c.Signature != "" {
			b.Signature = c.Signature
		}
	}
	a.Text = text.String()
	for i := range a.Blocks {
		b := &a.Blocks[i]
		switch s := parts[i].String(); b.Type {
		case BlockToolUse:
			b.Input = toolInput(s)
		default:
			b.Text = s
		}
	}
	return a
}

// toolInput is a tool call's input JSON from its joined fragments.
func toolInput(s string) json.RawMessage {
	switch {
	case strings.TrimSpace(s) == "":
		return json.RawMessage(`{}`)
	case json.Valid([]byte(s)):
		return json.RawMessage(s)
	default:
		quoted, _ := json.Marshal(s)
		return quoted
	}
}
