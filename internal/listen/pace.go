package listen

import (
	"net"
	"sync"
)

// The send buffer of a connection (docs/SECURITY.md, "Snapshot
// admission"): what the kernel holds of replies its peer has not read.
// Left to the kernel's autotuning it grows to 4 MiB, and 500 HTTP/1.1
// clients that asked for a 1 MiB snapshot and never read it held 1.12 GiB
// of the host's TCP memory (2.5 times the bytes queued). So it starts at
// InitialSendBuffer and doubles each time the peer has read twice what it
// holds, up to MaxSendBuffer: a reader that reads gets the room its link
// needs within a few round trips; one that never reads holds
// InitialSendBuffer's worth of kernel memory (about 136 KiB measured).
const (
	InitialSendBuffer = 64 << 10
	MaxSendBuffer     = 4 << 20
)

// sendPacer sizes a TCP connection's send buffer (SO_SNDBUF) by what its
// peer has read. The kernel doubles the size it is given and holds up to
// that many bytes queued, so of n bytes written at least n - 2*buf have
// been read.
type sendPacer struct {
	tcp     *net.TCPConn
	mu      sync.Mutex
	buf     int
	written int64
}

// newSendPacer returns the pacer of c, or nil when c is not TCP or its
// buffer cannot be set.
func newSendPacer(c net.Conn) *sendPacer {
	tcp, ok := c.(*net.TCPConn)
	if !ok || tcp.SetWriteBuffer(InitialSendBuffer) != nil {
		return nil
	}
	return &sendPacer{tcp: tcp, buf: InitialSendBuffer}
}

// write writes b to c in pieces of the buffer's size at most, so that
// the buffer grows as the peer reads within a long write.
func (p *sendPacer) write(c net.Conn, b []byte) (int, error) {
	if p == nil {
		return c.Write(b)
	}
	n := 0
	for len(b) > 0 {
		p.mu.Lock()
		size := p.buf
		p.mu.Unlock()
		m, err := c.Write(b[:min(len(b), size)])
		n += m
		p.wrote(m)
		if err != nil {
			return n, err
		}
		b = b[m:]
	}
	return n, nil
}

// wrote counts n bytes written and doubles the buffer once the peer has
// read twice what it may hold.
func (p *sendPacer) wrote(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.written += int64(n)
	if p.buf < MaxSendBuffer && p.written >= 4*int64(p.buf) {
		p.buf *= 2
		_ = p.tcp.SetWriteBuffer(p.buf)
	}
}

// pacedListener paces its connections' send buffers (a listener without
// a connection cap: Limited paces its own).
type pacedListener struct{ net.Listener }

func (l pacedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &pacedConn{Conn: c, pacer: newSendPacer(c)}, nil
}

type pacedConn struct {
	net.Conn
	pacer *sendPacer
}

func (c *pacedConn) Write(b []byte) (int, error) { return c.pacer.write(c.Conn, b) }

// CloseWrite half-closes the connection (as limitedConn's).
func (c *pacedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
