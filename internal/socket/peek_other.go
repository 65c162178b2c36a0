//go:build !(linux || darwin || freebsd)

package socket

// canPeek: where a socket cannot be peeked at, an idle reader waits in
// gorilla's read, as any reader does.
const canPeek = false

func readable(uintptr) bool { return true }
