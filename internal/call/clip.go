package call

import "unicode/utf8"

// MaxEchoBytes bounds every client-sent string the server repeats: in an
// error message, a pong, a log field or a usage report. Longer values are
// cut by Clip.
const MaxEchoBytes = 100

// Clip returns s cut to at most MaxEchoBytes bytes (never inside a UTF-8
// sequence), with "..." appended when it was cut.
func Clip(s string) string {
	if len(s) <= MaxEchoBytes {
		return s
	}
	n := MaxEchoBytes - len("...")
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}
