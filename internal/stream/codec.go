package stream

import (
	"context"
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
// a lock of the encoder's own, at most once per event, chunks in seq order from 1, so an
// encoder may keep state from one event to the next (a block's index, a
// tool call's number). Its output must depend on the log's events only,
// never on a follower. A nil result is an event the door does not send.
type Encoder interface {
	Accepted(a *Accepted) []byte
	Chunk(seq int, piece string) []byte
	// Terminal encodes the outcome; chunks is the log's chunk count.
	Terminal(t *Terminal, chunks int) []byte
}

// prepared is a log's events in one codec's bytes.
type prepared struct {
	codec Codec
	mu    sync.Mutex
	enc   Encoder

	accepted    []byte
	hasAccepted bool
	chunks      [][]byte // chunks[i] is seq i+1's
	terminal    []byte
	hasTerminal bool
}

func (p *prepared) size() int64 {
	n := int64(len(p.accepted) + len(p.terminal) + 24*cap(p.chunks))
	for _, c := range p.chunks {
		n += int64(len(c))
	}
	return n
}

// prepare returns the log's prepared events for codec c.
func (l *Log) prepare(c Codec) *prepared {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range l.prepared {
		if p.codec == c {
			return p
		}
	}
	p := &prepared{codec: c}
	l.prepared = append(l.prepared, p)
	return p
}

// Batch is what a follower delivers at once: events after its cursor, in
// order, each in the codec's bytes beside the event itself.
type Batch struct {
	// Accepted is set in the first batch after the request was accepted
	// (AcceptedBytes is its encoding, nil when the door sends none).
	Accepted      *Accepted
	AcceptedBytes []byte
	// First is the seq of Chunks[0] and Pieces[0]: Chunks are the encoded
	// chunks, Pieces the same chunks as the core emitted them.
	First  int
	Chunks [][]byte
	Pieces []string
	// Terminal ends the last batch (TerminalBytes is its encoding).
	Terminal      *Terminal
	TerminalBytes []byte
}

// Last is the seq of the batch's last chunk (First-1 when it has none).
func (b *Batch) Last() int { return b.First - 1 + len(b.Pieces) }

// Follow yields the log's events after seq `after` in codec c's bytes, a
// batch whenever something new is there, and ends after the terminal's
// batch, or when ctx ends (then with no batch). Every chunk of the log is
// encoded once for c, however many follow it.
func (l *Log) Follow(ctx context.Context, c Codec, after int) iter.Seq[Batch] {
	return func(yield func(Batch) bool) {
		p := l.prepare(c)
		cursor, sentAccepted := after, false
		for {
			snap := l.Read(cursor)
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
			case <-snap.Changed:
			case <-ctx.Done():
				return
			}
		}
	}
}

// encode fills b's bytes from p, encoding what p does not have yet. The
// producer never waits for it: p has its own lock.
func (l *Log) encode(p *prepared, b *Batch) {
	if grown := p.fill(l, b); grown > 0 {
		l.grew(grown)
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
		}
		b.AcceptedBytes = p.accepted
	}
	if last := b.Last(); len(b.Pieces) > 0 {
		if len(p.chunks) < last {
			// The chunks before the batch are encoded too, in order: the
			// encoder's state runs from seq 1.
			var earlier []string
			if len(p.chunks) < b.First-1 {
				earlier = l.Pieces()[len(p.chunks) : b.First-1]
			}
			for _, piece := range earlier {
				p.chunks = append(p.chunks, p.enc.Chunk(len(p.chunks)+1, piece))
			}
			for _, piece := range b.Pieces[len(p.chunks)-(b.First-1):] {
				p.chunks = append(p.chunks, p.enc.Chunk(len(p.chunks)+1, piece))
			}
		}
		b.Chunks = p.chunks[b.First-1 : last : last]
	}
	if b.Terminal != nil {
		if !p.hasTerminal {
			// A finished log's chunks are final: every follower sees this count.
			p.terminal, p.hasTerminal = p.enc.Terminal(b.Terminal, len(l.Pieces())), true
		}
		b.TerminalBytes = p.terminal
	}
	return p.size() - before
}
