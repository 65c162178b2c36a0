package socket

import (
	"bufio"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"

	"github.com/gorilla/websocket"
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

	// br is gorilla's reader of the connection (see batchingWriter): only
	// the session's reader uses it, so its buffer can be given back while
	// the session is idle (see await).
	br  *bufio.Reader
	raw syscall.RawConn // the TCP connection's, for await; nil: await reads

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
	c := &batchConn{Conn: conn}
	if brw.Reader.Buffered() > 0 {
		return c, brw, nil // gorilla refuses it: the client sent data before the handshake's end
	}
	// Gorilla reads through this reader (its ReadBufferSize is 0, and the
	// reader's buffer is past 256 bytes): the session knows then whether a
	// frame is buffered, and can let the buffer go while idle.
	c.br = new(bufio.Reader)
	c.lend()
	if sc, ok := conn.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil && canPeek {
			c.raw = raw
		}
	}
	return c, bufio.NewReadWriter(c.br, brw.Writer), nil
}

// Read buffers go from session to session as the contents of a
// bufio.Reader (gorilla keeps a pointer to the session's reader, whose
// struct is swapped with a pooled one): readBuffers holds readers with a
// buffer that idle sessions gave back, emptyReaders the structs those
// swaps left empty. A session opening or waking takes a buffer an idle
// one gave back, and a heartbeat's wake allocates nothing.
var readBuffers, emptyReaders sync.Pool

// lend gives the session's reader a buffer, reading from c.
func (c *batchConn) lend() {
	full, _ := readBuffers.Get().(*bufio.Reader)
	if full == nil {
		full = bufio.NewReaderSize(c, idleReadBuffer)
	}
	full.Reset(c)
	*c.br, *full = *full, bufio.Reader{}
	emptyReaders.Put(full)
}

// giveBack takes the buffer from the session's reader, which holds none
// then: only when it is empty (idle), and nothing reads it until lend.
func (c *batchConn) giveBack() {
	e, _ := emptyReaders.Get().(*bufio.Reader)
	if e == nil {
		e = new(bufio.Reader)
	}
	*e, *c.br = *c.br, bufio.Reader{}
	e.Reset(nil) // the pooled buffer does not hold the connection
	readBuffers.Put(e)
}

// idle reports whether every byte read from the connection was consumed
// and await can wait for the next: the session's reader may then park.
func (c *batchConn) idle() bool { return c.raw != nil && c.br.Buffered() == 0 }

// await waits until the connection has bytes to read, or a read would
// fail (its deadline passed, it closed, the peer closed), without reading
// them: the reads that follow, gorilla's, find them. Meanwhile the read
// buffer is given back. It is the idle session's reader's only frame, on
// a goroutine of its own: its stack stays at the smallest size, where a
// reader parked inside gorilla's read holds several KB. Only when idle.
// Then it reads what arrived into the buffer, and reports whether that
// read went through (false: the read failed, and the next one, gorilla's,
// reports why).
func (c *batchConn) await() (filled bool) {
	c.giveBack()
	_ = c.raw.Read(readable) // its error is the next read's too
	c.lend()
	_, err := c.br.Peek(1)
	return err == nil
}

// takePong consumes a pong frame buffered whole at the buffer's start, as
// gorilla reads one from a client (final, no reserved bits, masked, at
// most 125 bytes of payload, which the session's pong handler ignores),
// and reports whether it did. Only between messages, at a frame's start.
func (c *batchConn) takePong() bool {
	if c.br == nil || c.br.Buffered() < 6 {
		return false
	}
	h, _ := c.br.Peek(2)
	if h[0] != 0x80|websocket.PongMessage || h[1]&0x80 == 0 || h[1]&0x7f > 125 {
		return false
	}
	n := 6 + int(h[1]&0x7f)
	if c.br.Buffered() < n {
		return false
	}
	_, _ = c.br.Discard(n)
	return true
}

// tcpConn is the TCP connection under conn, if any.
func tcpConn(conn net.Conn) (*net.TCPConn, bool) {
	if bc, ok := conn.(*batchConn); ok {
		conn = bc.Conn
	}
	tc, ok := conn.(*net.TCPConn)
	return tc, ok
}
