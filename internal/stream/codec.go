package stream

import (
	"context"
	"slices"

	"github.com/jetway-gateway/jetway/internal/call"
	"iter"
	"sync"
)

// A door is a codec. The core (gateway, stream, quota, router, telemetry)
// emits a request's events into its Log and knows no door; each door turns
// the events into its wire format with a Codec and delivers them with
// Log.Follow. A log encodes each event at most once per codec and keeps
// the bytes beside the event, so every follower and every replay of that
// door writes the same prepared bytes (centrifuge's prepared replies are
// the model), and a resume is byte-identical per door. Adding a door is a
// codec and its routes.

// Codec is one door's wire format.
type Codec interface {
	// NewEncoder returns the encoder of one log's events.
	NewEncoder(l *Log) Encoder
}

// Encoder encodes one log's events for one door. The log calls it under
// a lock of the encoder's own, at most once per event, chunks in seq
// order from 1, so an encoder may keep state from one event to the next
// (a block's index, a tool call's number). Its output must depend on the
// log's events only, never on a follower. A nil (or, for a chunk, empty)
// result is an event the door does not send.
type Encoder interface {
	Accepted(a *Accepted) []byte
	// AppendChunk appends the chunk's encoding to dst: the chunks a
	// follower finds waiting are encoded into one buffer. The piece's
	// strings share the log's memory and must not be kept.
	AppendChunk(dst []byte, seq int, piece call.Piece) []byte
	// Terminal encodes the outcome; chunks is the log's chunk count.
	Terminal(t *Terminal, chunks int) []byte
}

// chunkRoom is the room a run of chunks' buffer gives each chunk beyond
// its piece and request id until the codec's own overhead is known: a
// WebSocket chunk frame's keys and seq fit. From the first chunk on, a
// codec's runs are sized by the most its chunks took beyond their pieces
// (an SSE event of an HTTP door is several times a WebSocket frame).
const chunkRoom = 56

// maxRunGrowth bounds the room a new run of chunks takes beyond the
// chunks it is made for (see appendChunks).
const maxRunGrowth = 4 << 10

// prepared is a log's events in one codec's bytes.
type prepared struct {
	codec Codec
	users int // followers using it, under the log's mu (see Follow)
	mu    sync.Mutex
	enc   Encoder

	accepted    []byte
	hasAccepted bool
	chunks      encoded
	terminal    []byte
	hasTerminal bool
	bytes       int64 // of the encodings (their buffers' capacity)
	chunkBytes  int64 // of that, the chunks' run buffers
	room        int   // bytes a chunk took beyond its piece, at most so far (0: none encoded yet)
	silent      bool  // the codec sends no chunks
}

// encoded is a log's chunks in a codec's bytes: runs of chunks encoded
// into one buffer each, and each chunk's end in its run (4 bytes a chunk,
// where a slice header would be 24). Runs and ends are only appended, and
// a run's buffer is stored at its full length and never replaced, so a
// copy of the headers is a stable view while later chunks are written.
type encoded struct {
	runs []run
	ends []uint32 // ends[i] is the end of chunk i (seq i+1) in its run
}

type run struct {
	buf   []byte
	first int // the index of its first chunk
}

func (e *encoded) len() int { return len(e.ends) }

// view is the chunks from index i to j.
func (e *encoded) view(i, j int) Chunks {
	return Chunks{runs: e.runs[:len(e.runs):len(e.runs)], ends: e.ends[:j:j], from: i}
}

// Chunks are encoded chunks (a Batch's), in seq order.
type Chunks struct {
	runs []run
	ends []uint32
	from int
}

// Len is the number of chunks.
func (c Chunks) Len() int { return len(c.ends) - c.from }

// At is the i-th chunk's encoding (empty when the door sends none). It
// must not be modified.
func (c Chunks) At(i int) []byte {
	i += c.from
	r := len(c.runs) - 1
	for c.runs[r].first > i {
		r--
	}
	start := uint32(0)
	if i > c.runs[r].first {
		start = c.ends[i-1]
	}
	return c.runs[r].buf[start:c.ends[i]:c.ends[i]]
}

// Slice is the chunks i to j-1.
func (c Chunks) Slice(i, j int) Chunks {
	return Chunks{runs: c.runs, ends: c.ends[: c.from+j : c.from+j], from: c.from + i}
}

// Bytes is the size of the chunks' encodings.
func (c Chunks) Bytes() int {
	n := 0
	for i := range c.Len() {
		n += len(c.At(i))
	}
	return n
}

// prepare returns the log's prepared events for codec c, counting the
// follower that uses them until it calls release.
func (l *Log) prepare(c Codec) *prepared {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range l.prepared {
		if p.codec == c {
			p.users++
			return p
		}
	}
	p := &prepared{codec: c, users: 1}
	l.prepared = append(l.prepared, p)
	return p
}

// shared reports whether p has followers other than the caller.
func (l *Log) shared(p *prepared) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return p.users > 1
}

// release ends a follower's use of p. The last follower of a finished
// log lets p go: the answer is kept for its resume window as pieces
// (about a byte per byte of text), and a later resume encodes them again,
// to the same bytes (an encoding is a function of the pieces, as another
// server's from the request record is), instead of every codec's frames
// (tens of bytes per chunk) staying for ten minutes.
func (l *Log) release(p *prepared) {
	l.mu.Lock()
	p.users--
	drop := p.users == 0 && l.terminal != nil
	if drop {
		i := slices.Index(l.prepared, p)
		l.prepared = slices.Delete(l.prepared, i, i+1)
	}
	l.mu.Unlock()
	if drop {
		p.mu.Lock()
		size := p.size()
		p.mu.Unlock()
		l.grew(-size)
	}
}

// Batch is what a follower delivers at once: events after its cursor, in
// order, each in the codec's bytes beside the event itself.
type Batch struct {
	// Accepted is set in the first batch after the request was accepted
	// (AcceptedBytes is its encoding, nil when the door sends none).
	Accepted      *Accepted
	AcceptedBytes []byte
	// First is the seq of Pieces[0] and Chunks.At(0): Pieces are the
	// chunks as the core emitted them, Chunks their encodings.
	First  int
	Pieces []string
	Chunks Chunks
	// Terminal ends the last batch (TerminalBytes is its encoding).
	Terminal      *Terminal
	TerminalBytes []byte
}

// Last is the seq of the batch's last chunk (First-1 when it has none).
func (b *Batch) Last() int { return b.First - 1 + len(b.Pieces) }

// Follow yields the log's events after seq `after` in codec c's bytes, a
// batch whenever something new is there, and ends after the terminal's
// batch, or when ctx ends (then with no batch). Every chunk of the log is
// encoded once for c, however many follow it at once; a finished log's
// encodings go with its last follower (see release).
func (l *Log) Follow(ctx context.Context, c Codec, after int) iter.Seq[Batch] {
	return func(yield func(Batch) bool) {
		p := l.prepare(c)
		defer l.release(p)
		changed := make(chan struct{}, 1)
		cursor, sentAccepted := after, false
		for {
			snap := l.readFor(cursor, changed)
			b := Batch{First: snap.First, Pieces: snap.Chunks, Terminal: snap.Terminal}
			if !sentAccepted && snap.Accepted != nil {
				b.Accepted = snap.Accepted
				sentAccepted = true
			}
			if b.Accepted != nil || len(snap.Chunks) > 0 || snap.Terminal != nil {
				l.encode(p, &b)
				if !yield(b) {
					return
				}
			}
			cursor += len(snap.Chunks)
			if snap.Terminal != nil {
				return
			}
			select {
			case <-changed:
			case <-ctx.Done():
				return
			}
		}
	}
}

// encode fills b's bytes from p, encoding what p does not have yet. The
// producer never waits for it: p has its own lock.
func (l *Log) encode(p *prepared, b *Batch) {
	if grown := p.fill(l, b); grown != 0 {
		l.grew(grown) // negative after compaction
	}
}

// fill is encode under p's lock; it returns how many bytes p grew.
func (p *prepared) fill(l *Log, b *Batch) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	before := p.size()
	if p.enc == nil {
		p.enc = p.codec.NewEncoder(l)
	}
	if b.Accepted != nil {
		if !p.hasAccepted {
			p.accepted, p.hasAccepted = p.enc.Accepted(b.Accepted), true
			p.bytes += int64(len(p.accepted))
		}
		b.AcceptedBytes = p.accepted
	}
	if last := b.Last(); len(b.Pieces) > 0 {
		if p.chunks.len() < last {
			// The chunks before the batch are encoded too, in order: the
			// encoder's state runs from seq 1.
			var earlier []string
			if p.chunks.len() < b.First-1 {
				earlier = l.Pieces()[p.chunks.len() : b.First-1]
			}
			p.appendChunks(earlier, len(l.RequestID))
			p.appendChunks(b.Pieces[p.chunks.len()-(b.First-1):], len(l.RequestID))
		}
		b.Chunks = p.chunks.view(b.First-1, last)
	}
	if b.Terminal != nil {
		if !p.hasTerminal {
			// The encoder's state runs from seq 1 to the terminal (a block
			// still open is closed there): a follower that joined after
			// the last chunk has the chunks encoded first.
			if n := p.chunks.len(); n < len(l.Pieces()) {
				p.appendChunks(l.Pieces()[n:], len(l.RequestID))
			}
			// A finished log's chunks are final: every follower sees this count.
			p.terminal, p.hasTerminal = p.enc.Terminal(b.Terminal, len(l.Pieces())), true
			p.bytes += int64(len(p.terminal))
			if p.chunks.len() == len(l.Pieces()) && l.shared(p) {
				// Kept while another follower delivers it (the last one
				// lets it go, see release): in one buffer of its exact
				// size, not the runs live following made. A follower alone
				// lets it go next, so copying it would be waste.
				p.compact()
				if len(b.Pieces) > 0 {
					b.Chunks = p.chunks.view(b.First-1, b.Last())
				}
			}
		}
		b.TerminalBytes = p.terminal
	}
	return p.size() - before
}

func (p *prepared) size() int64 {
	return p.bytes + int64(4*cap(p.chunks.ends)+32*cap(p.chunks.runs))
}

// compact copies the chunks' runs into one buffer of their exact size,
// with new runs and ends: views already handed out keep the old ones,
// which are never changed.
func (p *prepared) compact() {
	c := &p.chunks
	n := c.len()
	if len(c.runs) <= 1 && cap(c.ends) == n && (len(c.runs) == 0 || int(c.ends[n-1]) == len(c.runs[0].buf)) {
		return
	}
	all := c.view(0, n)
	buf := make([]byte, 0, all.Bytes())
	ends := make([]uint32, n)
	for i := range n {
		buf = append(buf, all.At(i)...)
		ends[i] = uint32(len(buf))
	}
	p.bytes += int64(len(buf)) - p.chunkBytes
	p.chunkBytes = int64(len(buf))
	c.runs, c.ends = nil, ends
	if n > 0 {
		c.runs = []run{{buf: buf[:len(buf):len(buf)]}}
	}
}

// learn notes how much a chunk's encoding took beyond its piece.
func (p *prepared) learn(encoded, piece int) {
	p.room = max(p.room, encoded-piece)
}

// appendChunks encodes pieces, the chunks after p's last, into one
// buffer. A codec whose first chunk encodes to nothing sends no chunks
// (a whole answer's): it is asked for no more.
func (p *prepared) appendChunks(pieces []string, idLen int) {
	if len(pieces) == 0 {
		return
	}
	c := &p.chunks
	if c.len() == 0 {
		first := p.enc.AppendChunk(nil, 1, call.Decode(pieces[0]))
		p.silent = len(first) == 0
		c.runs = append(c.runs, run{buf: first[:cap(first)]})
		c.ends = append(c.ends, uint32(len(first)))
		p.addChunkBytes(cap(first))
		p.learn(len(first), len(pieces[0]))
		pieces = pieces[1:]
	}
	if p.silent {
		for range pieces {
			c.ends = append(c.ends, 0)
		}
		return
	}
	room := p.room
	if room <= 0 {
		room = idLen + chunkRoom
	}
	size := 0
	for _, piece := range pieces {
		size += len(piece) + room
	}
	// The chunks go on in the last run while its buffer has room for
	// them: a follower of a paced answer encodes one chunk a batch, and
	// those share buffers instead of a buffer each. Bytes past the last
	// chunk's end are in no view, so writing them changes none.
	last := &c.runs[len(c.runs)-1]
	used := 0
	if c.len() > last.first {
		used = int(c.ends[c.len()-1])
	}
	tail, base := last.buf[:used], 0
	if len(last.buf)-used < size {
		// A new run, twice the last one (up to maxRunGrowth) when that
		// holds more than these chunks.
		size = max(size, min(2*len(last.buf), maxRunGrowth))
		c.runs = append(c.runs, run{buf: make([]byte, size), first: c.len()})
		p.addChunkBytes(size)
		tail = c.runs[len(c.runs)-1].buf[:0]
	}
	for _, piece := range pieces {
		start, room := len(tail), cap(tail)
		tail = p.enc.AppendChunk(tail, c.len()+1, call.Decode(piece))
		if cap(tail) != room {
			// Outgrown: the earlier chunks keep the old buffer; this one
			// starts a run in the new one.
			c.runs = append(c.runs, run{buf: tail[start:cap(tail)], first: c.len()})
			p.addChunkBytes(cap(tail))
			base = start
		}
		p.learn(len(tail)-start, len(piece))
		c.ends = append(c.ends, uint32(len(tail)-base))
	}
}

func (p *prepared) addChunkBytes(n int) {
	p.bytes += int64(n)
	p.chunkBytes += int64(n)
}
