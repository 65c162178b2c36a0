package socket

import (
	"bufio"
	"net"
	"net/http"
	"sync"
	"time"
)

// maxBatchBytes bounds the bytes a batch collects before they are written:
// past it the batch goes out and collecting starts again.
const maxBatchBytes = 64 << 10

// batchBuffers holds the buffers of open batches; an idle session holds none.
var batchBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 16<<10); return &b }}

// batchConn is a session's network connection under gorilla. While the
// writer holds a batch open (begin ... flush), gorilla's frame writes
// collect in one buffer and go out in one write(2) at flush: the frames
// queued together for one connection share a system call. Outside a batch
// every write goes straight through, so a lone frame (a paced token) is
// not copied, and control frames written beside the writer (pings, close)
// are not delayed past the batch's end.
type batchConn struct {
	net.Conn

	mu       sync.Mutex
	open     bool
	buf      *[]byte
	deadline time.Time // the last deadline gorilla set during the batch
}

// begin opens a batch. Only the session's writer calls begin and flush.
func (c *batchConn) begin() {
	c.mu.Lock()
	c.open = true
	c.mu.Unlock()
}

// flush writes what the batch collected and closes it.
func (c *batchConn) flush() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.open = false
	return c.flushLocked()
}

func (c *batchConn) flushLocked() error {
	if c.buf == nil {
		return nil
	}
	b := c.buf
	c.buf = nil
	defer func() {
		*b = (*b)[:0]
		batchBuffers.Put(b)
	}()
	if len(*b) == 0 {
		return nil
	}
	if err := c.Conn.SetWriteDeadline(c.deadline); err != nil {
		return err
	}
	_, err := c.Conn.Write(*b)
	return err
}

func (c *batchConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.open {
		return c.Conn.Write(p)
	}
	if c.buf == nil {
		c.buf = batchBuffers.Get().(*[]byte)
	}
	*c.buf = append(*c.buf, p...)
	if len(*c.buf) >= maxBatchBytes {
		if err := c.flushLocked(); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

func (c *batchConn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.open {
		c.deadline = t
		return nil
	}
	return c.Conn.SetWriteDeadline(t)
}

func (c *batchConn) SetDeadline(t time.Time) error {
	if err := c.SetWriteDeadline(t); err != nil {
		return err
	}
	return c.Conn.SetReadDeadline(t)
}

// batchingWriter hands gorilla's Upgrade a batchConn when it hijacks the
// connection.
type batchingWriter struct {
	http.ResponseWriter
}

func (w batchingWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	return &batchConn{Conn: conn}, brw, nil
}

// tcpConn is the TCP connection under conn, if any.
func tcpConn(conn net.Conn) (*net.TCPConn, bool) {
	if bc, ok := conn.(*batchConn); ok {
		conn = bc.Conn
	}
	tc, ok := conn.(*net.TCPConn)
	return tc, ok
}
