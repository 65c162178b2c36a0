package mockmodel

import "strings"

// vocabulary is the word list answers are drawn from. It is fixed so that the
// server can encode every possible delta event once, when it starts.
var vocabulary = [...]string{
	"lorem", "ipsum", "dolor", "sit", "amet", "consectetur", "adipiscing", "elit",
	"sed", "do", "eiusmod", "tempor", "incididunt", "ut", "labore", "et",
	"dolore", "magna", "aliqua", "enim", "ad", "minim", "veniam", "quis",
	"nostrud", "exercitation", "ullamco", "laboris", "nisi", "aliquip", "ex", "ea",
	"commodo", "consequat", "duis", "aute", "irure", "in", "reprehenderit", "voluptate",
	"velit", "esse", "cillum", "fugiat", "nulla", "pariatur", "excepteur", "sint",
	"occaecat", "cupidatat", "non", "proident", "sunt", "culpa", "qui", "officia",
	"deserunt", "mollit", "anim", "id", "est", "laborum", "gate", "boarding",
	"bridge", "jetway", "runway", "tower", "cabin", "crew", "flight", "wing",
	"engine", "cargo", "ticket", "window", "aisle", "seat", "pilot", "route",
}

// piece returns the text of word w at position i of an answer: the first
// piece is the capitalised word, every later piece is a space and the word.
func piece(i, w int) string {
	if i == 0 {
		return capitalised[w]
	}
	return spaced[w]
}

var (
	capitalised = func() (out [len(vocabulary)]string) {
		for i, w := range vocabulary {
			out[i] = strings.ToUpper(w[:1]) + w[1:]
		}
		return out
	}()
	spaced = func() (out [len(vocabulary)]string) {
		for i, w := range vocabulary {
			out[i] = " " + w
		}
		return out
	}()
)

// wordSource picks the words of one answer: a splitmix64 sequence seeded with
// an FNV-1a hash of the model id and the prompt.
type wordSource struct{ state uint64 }

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func newWordSource(modelID, system string, messages []string) wordSource {
	h := uint64(fnvOffset)
	mix := func(s string) {
		// The length goes in first so that ("ab","c") and ("a","bc") differ.
		n := uint64(len(s))
		for range 8 {
			h ^= n & 0xff
			h *= fnvPrime
			n >>= 8
		}
		for i := 0; i < len(s); i++ {
			h ^= uint64(s[i])
			h *= fnvPrime
		}
	}
	mix(modelID)
	mix(system)
	for _, m := range messages {
		mix(m)
	}
	return wordSource{state: h}
}

// next returns the index in vocabulary of the next word.
func (g *wordSource) next() int {
	g.state += 0x9e3779b97f4a7c15
	z := g.state
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	z ^= z >> 31
	return int(z % uint64(len(vocabulary)))
}

// Tokens returns the first n text pieces the server streams for a request to
// modelID with this prompt, one piece per contentBlockDelta event. The answer
// is a pure function of its arguments, so tests can compute what they must
// receive. system is the request's system text blocks joined with "\n";
// messages[i] is the text blocks of the request's message i joined with "\n"
// (roles do not matter). The first piece is a capitalised word ("Lorem"),
// every later piece a space and a word (" ipsum"). For mock-markdown they
// are the pieces of its one answer, at most n of them.
func Tokens(modelID string, system string, messages []string, n int) []string {
	if n <= 0 {
		return nil
	}
	if BaseModelID(modelID) == modelMarkdown {
		md := markdownPieces()
		return append([]string(nil), md[:min(n, len(md))]...)
	}
	g := newWordSource(modelID, system, messages)
	out := make([]string, n)
	for i := range out {
		out[i] = piece(i, g.next())
	}
	return out
}

// InputTokens is the inputTokens the server reports for a prompt (same
// arguments as Tokens): one token per started group of four bytes of every
// text, a crude but deterministic stand-in for a tokenizer.
func InputTokens(system string, messages []string) int {
	n := (len(system) + 3) / 4
	for _, m := range messages {
		n += (len(m) + 3) / 4
	}
	return n
}
