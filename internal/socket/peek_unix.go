//go:build linux || darwin || freebsd

package socket

import "syscall"

// canPeek: readable can tell a readable socket without reading it.
const canPeek = true

// readable is a RawConn.Read callback: true once the socket has a byte to
// read, or a read would not block for another reason (an error, the
// peer's close), peeked at and left for the next read; false: wait.
func readable(fd uintptr) bool {
	var b [1]byte
	_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	return err != syscall.EAGAIN && err != syscall.EWOULDBLOCK
}
