package listen

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// refusalLogEvery is how often a listener at its cap logs its refusals
// (with their count since the last line).
const refusalLogEvery = 10 * time.Second

// refusal is what a plaintext listener at its cap writes before it
// closes a connection: an HTTP/1.1 client reads why.
const refusal = "HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Type: text/plain; charset=utf-8\r\nRetry-After: 5\r\nContent-Length: 38\r\n\r\ntoo many connections to this listener\n"

// Limited is a listener capped at a number of open connections (see
// Limit).
type Limited struct {
	net.Listener
	slots   chan struct{}
	text    bool // plaintext: refuse with an HTTP/1.1 503
	log     *slog.Logger
	refused atomic.Int64 // since the last log line
	total   atomic.Int64
	mu      sync.Mutex
	logged  time.Time
	// reclaim is the least body rate under which a connection may be
	// closed to admit a new one at the cap (0: never); conns are the open
	// connections, under mu, when it is set.
	reclaim   int64
	conns     map[*limitedConn]struct{}
	reading   atomic.Int64 // connections reading a body: with none, no scan
	reclaimed atomic.Int64
}

// Limit caps l at n open connections: a connection accepted past them is
// refused at once (over plaintext, text, with an HTTP/1.1 503 first; a
// *tls.Conn from a tls.Listener is closed without a handshake, which
// would stall Accept on a silent peer) and the refusal logged, at most
// once per refusalLogEvery with the count.
// Accept never blocks on the cap: a listener at its cap keeps draining
// its backlog, so that a client is told rather than left to time out.
// A connection's send buffer grows as its peer reads (InitialSendBuffer).
// Served by NewServer, a connection whose request body is behind
// DefaultMinBodyRate gives its slot to a new one at the cap (Listen: the
// Config's MinBodyRate).
func Limit(l net.Listener, n int, text bool, log *slog.Logger) *Limited {
	return &Limited{Listener: l, slots: make(chan struct{}, n), text: text, log: log, reclaim: DefaultMinBodyRate}
}

// Refused is how many connections were refused at the cap.
func (l *Limited) Refused() int64 { return l.total.Load() }

// Reclaimed is how many connections were closed at the cap to admit a
// new one: each was reading a request body below the least rate.
func (l *Limited) Reclaimed() int64 { return l.reclaimed.Load() }

// Reading is how many connections are reading a request body (HTTP/1.1,
// on a listener that reclaims them: Listen's).
func (l *Limited) Reading() int64 { return l.reading.Load() }

// Open is how many connections are open.
func (l *Limited) Open() int { return len(l.slots) }

func (l *Limited) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if lc := l.admit(c); lc != nil {
			return lc, nil
		}
		if l.reclaimOne() {
			if lc := l.admit(c); lc != nil {
				return lc, nil
			}
		}
		l.refuse(c)
	}
}

// admit takes a slot for c, if one is free.
func (l *Limited) admit(c net.Conn) *limitedConn {
	select {
	case l.slots <- struct{}{}:
	default:
		return nil
	}
	lc := &limitedConn{Conn: c, pacer: newSendPacer(c)}
	lc.release = func() { l.release(lc) }
	lc.reading = &l.reading
	if l.reclaim > 0 {
		l.mu.Lock()
		if l.conns == nil {
			l.conns = make(map[*limitedConn]struct{})
		}
		l.conns[lc] = struct{}{}
		l.mu.Unlock()
	}
	return lc
}

func (l *Limited) release(lc *limitedConn) {
	lc.bodyEnded()
	if l.reclaim > 0 {
		l.mu.Lock()
		delete(l.conns, lc)
		l.mu.Unlock()
	}
	<-l.slots
}

// reclaimOne closes the connection whose request body is furthest
// behind the least rate, if one is (limitedConn.behind): at the cap, a
// connection trickling a body gives its slot to a new one. It reports
// whether it closed one.
func (l *Limited) reclaimOne() bool {
	if l.reclaim <= 0 || l.reading.Load() == 0 {
		return false
	}
	now := time.Now()
	var victim *limitedConn
	var oldest int64
	l.mu.Lock()
	for lc := range l.conns {
		if !lc.behind(now, l.reclaim) {
			continue
		}
		if s := lc.bodyStart.Load(); victim == nil || s < oldest {
			victim, oldest = lc, s
		}
	}
	l.mu.Unlock()
	if victim == nil {
		return false
	}
	l.reclaimed.Add(1)
	_ = victim.Close() // gives its slot back before it returns
	return true
}

func (l *Limited) refuse(c net.Conn) {
	l.total.Add(1)
	n := l.refused.Add(1)
	if _, isTLS := c.(*tls.Conn); l.text && !isTLS {
		// Bounded: a client that does not read gets nothing more. Never
		// over a *tls.Conn: its Write would run the handshake in Accept.
		_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
		_, _ = c.Write([]byte(refusal))
	}
	_ = c.Close()
	l.mu.Lock()
	now := time.Now()
	due := now.Sub(l.logged) >= refusalLogEvery
	if due {
		l.logged = now
		n = l.refused.Swap(0)
	}
	l.mu.Unlock()
	if due {
		l.log.Warn("connection refused: the listener is at its connection cap", "addr", l.Addr().String(),
			"max_conns", cap(l.slots), "refused", n)
	}
}

// limitedConn gives its slot back once, at its first Close, and paces
// its send buffer (sendPacer).
type limitedConn struct {
	net.Conn
	once    sync.Once
	release func()
	pacer   *sendPacer
	bodyProgress
}

func (c *limitedConn) Write(b []byte) (int, error) { return c.pacer.write(c.Conn, b) }

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// CloseWrite half-closes the connection, as net/http does before it
// closes an HTTP/1.1 connection whose request body it did not read.
func (c *limitedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// connState is what a listener keeps of one connection, on the context of
// its requests (http.Server.ConnContext).
type connState struct {
	inFlight atomic.Int64 // ConnLimit's
	conn     *limitedConn // under a connection cap; else nil
	tcp      *net.TCPConn // the TCP connection under it all, if it is one
}

type connKey struct{}

func connContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, &connState{conn: limitedOf(c), tcp: tcpOf(c)})
}

// ConnLimit takes one of n places of the request's connection (one per
// connection: an HTTP/2 connection carries many requests), so that one
// connection cannot take all of a server-wide budget (the snapshots in
// flight): ok false when its n are taken. Outside a listener's server
// (no connection known) it always admits.
func ConnLimit(ctx context.Context, n int) (release func(), ok bool) {
	c, _ := ctx.Value(connKey{}).(*connState)
	if c == nil {
		return func() {}, true
	}
	if c.inFlight.Add(1) > int64(n) {
		c.inFlight.Add(-1)
		return nil, false
	}
	return func() { c.inFlight.Add(-1) }, true
}

// tcpOf returns the TCP connection under c (TLS, a connection cap, send
// pacing), if it is one.
func tcpOf(c net.Conn) *net.TCPConn {
	for {
		switch cc := c.(type) {
		case *net.TCPConn:
			return cc
		case *tls.Conn:
			c = cc.NetConn()
		case *limitedConn:
			c = cc.Conn
		case *pacedConn:
			c = cc.Conn
		default:
			return nil
		}
	}
}

// ResetOnClose makes the connection of an HTTP/1.1 request drop, when it
// closes, what it has not sent (SO_LINGER 0: a reset), rather than keep
// it in the kernel for a peer that does not read: for a reply cut for
// not being read. Over HTTP/2 (a connection shared by other requests),
// or outside a listener's server, it does nothing.
func ResetOnClose(r *http.Request) {
	if r.ProtoMajor != 1 {
		return
	}
	if c, _ := r.Context().Value(connKey{}).(*connState); c != nil && c.tcp != nil {
		_ = c.tcp.SetLinger(0)
	}
}
