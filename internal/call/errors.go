package call

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Client errors: what a request got wrong, with the field it names as a
// structured path apart from the problem, so that each door names the
// field in its own terms at its edge.

// ErrInvalid is wrapped by every decoding or validation failure, as a
// *ClientError whose Msg names the problem.
var ErrInvalid = errors.New("invalid request")

// ClientError carries the text a client may see apart from the cause
// (tailscale's HTTPError{Code, Msg, Err} shape; the code comes from the
// gateway's one error table): Err is matched with errors.Is and logged.
// Path is the request field it names (nil when none) and Problem what is
// wrong with it, apart, so that each door names the field in its own
// terms (Message names it in the WebSocket's).
type ClientError struct {
	Err     error
	Path    Path
	Problem string // safe to send; follows the path (" must not be empty", ": ...")
}

func (e *ClientError) Error() string { return e.Err.Error() + ": " + e.Message() }

// Message is the text a client of the WebSocket door sees: the path in
// its names, then the problem.
func (e *ClientError) Message() string { return e.Path.String() + e.Problem }

// Unwrap returns the cause.
func (e *ClientError) Unwrap() error { return e.Err }

// Errorf returns a *ClientError for cause with a formatted safe message.
func Errorf(cause error, format string, args ...any) error {
	return &ClientError{Err: cause, Problem: fmt.Sprintf(format, args...)}
}

// FieldErrorf returns a *ClientError for cause naming field, a path in
// the WebSocket's names ("messages[2].content[1].data"): the formatted
// problem follows it (" must ...", ": ...").
func FieldErrorf(cause error, field, format string, args ...any) error {
	return &ClientError{Err: cause, Path: ParsePath(field), Problem: fmt.Sprintf(format, args...)}
}

// Path is a field of a request: its names and indexes, outermost first
// ({"messages", "2", "content", "1", "data"}). An index is decimal digits.
type Path []string

// ParsePath reads a path in the WebSocket's names ("messages[2].data").
// Text that is not one ("messages[].content: image blocks") is one
// element, which no door knows: its String is the text as it was.
func ParsePath(s string) Path {
	var p Path
	for rest := s; rest != ""; {
		i := strings.IndexAny(rest, ".[]")
		if i < 0 {
			p = append(p, rest)
			break
		}
		if i > 0 {
			p = append(p, rest[:i])
		}
		rest = rest[i+1:]
	}
	if p.String() != s {
		return Path{s}
	}
	return p
}

// String is the path in the WebSocket's names: messages[2].content[1].data.
func (p Path) String() string { return strings.TrimPrefix(p.Rest(0), ".") }

// Rest is p after its first i elements, written to follow them
// ("[1].data" after messages[2].content).
func (p Path) Rest(i int) string {
	var b strings.Builder
	for _, e := range p[i:] {
		if isIndex(e) {
			b.WriteString("[" + e + "]")
		} else {
			b.WriteString("." + e)
		}
	}
	return b.String()
}

// Index is element i as an index; ok is false when it is not one.
func (p Path) Index(i int) (n int, ok bool) {
	if i >= len(p) || !isIndex(p[i]) {
		return 0, false
	}
	n, err := strconv.Atoi(p[i])
	return n, err == nil
}

func isIndex(e string) bool {
	if e == "" {
		return false
	}
	for _, c := range e {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
