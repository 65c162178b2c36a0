package call

import (
	"encoding/binary"
	"encoding/json"
	"strings"
)

// Block and piece kinds. A piece of kind "" is text.
const (
	BlockText      = "text"
	BlockReasoning = "reasoning"
	BlockToolUse   = "tool_use"

	KindReasoning = "reasoning"
	KindToolUse   = "tool_use"
)

// Piece is one chunk of an answer: text, reasoning (or its signature) or
// a fragment of a tool call, in answer block Block.
type Piece struct {
	Block     int
	Kind      string // "" (text), KindReasoning or KindToolUse
	Text      string
	ID        string // a tool call's id, on its first piece
	Name      string // a tool call's name, on its first piece
	Input     string // a fragment of a tool call's input JSON
	Reasoning string
	Signature string
}

// # The piece codec (format v2)
//
// The core keeps a piece as a string: in the stream log, the request
// record and the response cache. A text piece of block 0 is its text, so
// a text-only answer costs nothing more. Any other piece is pieceMark, a
// byte saying which fields follow, then the fields: the block and each
// string as a uvarint (a string's length) and its bytes. Decode returns
// substrings of the piece: reading a piece allocates nothing.

// pieceMark starts a piece that is not plain text. A text that starts with
// it is kept in the marked form too, so reading a piece is never ambiguous.
const pieceMark = '\x00'

// Field bits of a marked piece, in the order its fields follow.
const (
	hasBlock = 1 << iota
	hasKind
	hasText
	hasID
	hasName
	hasInput
	hasReasoning
	hasSignature
)

// TextPiece is the piece of a text chunk of block 0.
func TextPiece(text string) string {
	if len(text) > 0 && text[0] == pieceMark {
		return Encode(Piece{Text: text})
	}
	return text
}

// plain reports whether p is kept as its text alone.
func (p Piece) plain() bool {
	return p.Block == 0 && p.Kind == "" && p.ID == "" && p.Name == "" && p.Input == "" && p.Reasoning == "" &&
		p.Signature == "" && (p.Text == "" || p.Text[0] != pieceMark)
}

// strings is p's string fields in codec order, with their bits.
func (p *Piece) fields() [7]struct {
	bit int
	s   *string
} {
	return [7]struct {
		bit int
		s   *string
	}{{hasKind, &p.Kind}, {hasText, &p.Text}, {hasID, &p.ID}, {hasName, &p.Name}, {hasInput, &p.Input},
		{hasReasoning, &p.Reasoning}, {hasSignature, &p.Signature}}
}

// Encode is p's piece.
func Encode(p Piece) string {
	if p.plain() {
		return p.Text
	}
	size := 2 + binary.MaxVarintLen64
	mask := byte(0)
	if p.Block != 0 {
		mask |= hasBlock
	}
	for _, f := range p.fields() {
		if *f.s != "" {
			mask |= byte(f.bit)
			size += binary.MaxVarintLen32 + len(*f.s)
		}
	}
	dst := append(make([]byte, 0, size), pieceMark, mask)
	if p.Block != 0 {
		dst = binary.AppendUvarint(dst, uint64(p.Block))
	}
	for _, f := range p.fields() {
		if *f.s != "" {
			dst = binary.AppendUvarint(dst, uint64(len(*f.s)))
			dst = append(dst, *f.s...)
		}
	}
	return string(dst)
}

// Decode is the piece s holds. A marked piece that does not decode (never
// written by Encode) reads as empty text.
func Decode(s string) Piece {
	if len(s) == 0 || s[0] != pieceMark {
		return Piece{Text: s}
	}
	if len(s) < 2 {
		return Piece{}
	}
	var p Piece
	mask, rest := s[1], s[2:]
	if mask&hasBlock != 0 {
		n, w := uvarint(rest)
		if w <= 0 || n > 1<<30 {
			return Piece{}
		}
		p.Block, rest = int(n), rest[w:]
	}
	for _, f := range p.fields() {
		if mask&byte(f.bit) == 0 {
			continue
		}
		n, w := uvarint(rest)
		if w <= 0 || n > uint64(len(rest)-w) {
			return Piece{}
		}
		*f.s, rest = rest[w:w+int(n)], rest[w+int(n):]
	}
	if rest != "" {
		return Piece{}
	}
	return p
}

// uvarint is binary.Uvarint over a string, without copying it.
func uvarint(s string) (uint64, int) {
	var x uint64
	var shift uint
	for i := 0; i < len(s) && i < binary.MaxVarintLen64; i++ {
		b := s[i]
		if b < 0x80 {
			return x | uint64(b)<<shift, i + 1
		}
		x |= uint64(b&0x7f) << shift
		shift += 7
	}
	return 0, 0
}

// Text is the text a piece adds to the answer's text (Done.Text).
func Text(s string) string {
	if len(s) == 0 || s[0] != pieceMark {
		return s
	}
	return Decode(s).Text
}

// Answer is an answer assembled from its pieces, in order.
type Answer struct {
	// Text is the concatenated text of the text pieces: Done.Text.
	Text string
	// Blocks are the answer's blocks in order: text, reasoning (with its
	// signature), tool_use (with its input parsed).
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
	for _, s := range pieces {
		c := Decode(s)
		if s != "" && s[0] == pieceMark {
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
