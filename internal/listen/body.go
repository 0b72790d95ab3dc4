package listen

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/holdfast-dev/holdfast/transport"
)

// The bounds of a request body (docs/SECURITY.md, "Request bodies").
const (
	// DefaultBodyGrace is how long a request body may take before its
	// rate counts: the order of DefaultReadHeaderTimeout.
	DefaultBodyGrace = 10 * time.Second
	// DefaultMinBodyRate is the least average rate, in bytes a second, of
	// a request body past its grace: a body that has sent n bytes is cut
	// at grace + n/rate from its start. A body trickled a byte every few
	// seconds is cut once its grace has passed.
	DefaultMinBodyRate = 1024
	// DefaultBodyTimeout bounds a whole request body, however fast it
	// comes (at most 120 s for a body of 120 KiB or more at the least
	// rate).
	DefaultBodyTimeout = 2 * time.Minute
)

// reclaimAfter is how long an HTTP/1.1 body must have been below its
// least rate (counted from its start, without its grace) before a
// listener at its connection cap closes its connection to admit a new
// one: a trickled body holds a slot that a client with a request could
// use. Half a second leaves a body that waits for its 100 Continue a
// round trip; the new connections refused at the cap before it (a trickle
// that took every slot at once) are that long's.
const reclaimAfter = 500 * time.Millisecond

// bodyBounds is a listener's bounds on request bodies.
type bodyBounds struct {
	grace   time.Duration
	rate    int64 // bytes a second
	timeout time.Duration
}

func (c *Config) bodyBounds() bodyBounds {
	b := bodyBounds{grace: c.BodyGrace, rate: c.MinBodyRate, timeout: c.BodyTimeout}
	if b.grace <= 0 {
		b.grace = DefaultBodyGrace
	}
	if b.rate <= 0 {
		b.rate = DefaultMinBodyRate
	}
	if b.timeout <= 0 {
		b.timeout = DefaultBodyTimeout
	}
	return b
}

// deadline is when a body that started at start and has sent n bytes is
// cut.
func (b bodyBounds) deadline(start time.Time, n int64) time.Time {
	if n/b.rate >= int64(b.timeout/time.Second) {
		return start.Add(b.timeout) // and no overflow below
	}
	d := b.grace + time.Duration(n)*time.Second/time.Duration(b.rate)
	return start.Add(min(d, b.timeout))
}

// streamingBody reports whether r's body is meant to live as long as its
// stream: the ack stream (transport.PathAckStream, HTTP/2 only), whose
// lines come as seldom as publishes and whose reader bounds it.
func streamingBody(r *http.Request) bool {
	return r.ProtoMajor >= 2 && r.URL.Path == transport.PathAckStream
}

// hasBody reports whether r comes with a body to read.
func hasBody(r *http.Request) bool {
	return r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0
}

// bound wraps h so that every request body is read within b: a read
// deadline on the request (its connection's for HTTP/1.1, its stream's
// for HTTP/2) at grace + bytes read / rate from the body's start, at
// most timeout, moved on as the body comes and cleared once it has
// ended. Past it a read fails, the handler answers with its error for a
// body that cannot be read, and an HTTP/1.1 connection is closed.
//
// The body starts when the handler first reads it, so that a handler
// slow to start (a busy server) does not count against its client; or,
// for a body the handler never read, when the handler returns: what
// net/http then reads of it, to keep the connection, is bounded alike.
func (b bodyBounds) bound(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cs, _ := r.Context().Value(connKey{}).(*connState)
		var lc *limitedConn
		if cs != nil && r.ProtoMajor == 1 {
			lc = cs.conn
		}
		if lc != nil {
			lc.bodyEnded()
		}
		if !hasBody(r) || streamingBody(r) {
			h.ServeHTTP(w, r)
			return
		}
		body := &boundBody{ReadCloser: r.Body, b: b, rc: http.NewResponseController(w), conn: lc}
		// On a copy of the request: net/http judges whether the connection
		// may serve another request by the type and state of the original's
		// body (read to its end, closed early), which a wrapper would hide.
		r = r.WithContext(r.Context())
		r.Body = body
		h.ServeHTTP(w, r)
		if !body.started {
			body.begin()
		}
	})
}

// boundBody moves its request's read deadline on as its body comes.
type boundBody struct {
	io.ReadCloser
	b       bodyBounds
	rc      *http.ResponseController
	conn    *limitedConn // HTTP/1.1 under a connection cap; else nil
	started bool
	start   time.Time
	n       int64
	ended   bool
}

// begin starts the body's clock: its first deadline.
func (r *boundBody) begin() {
	r.started, r.start = true, time.Now()
	_ = r.rc.SetReadDeadline(r.b.deadline(r.start, 0))
	if r.conn != nil {
		r.conn.bodyRead.Store(0)
		r.conn.bodyBegan(r.start.UnixNano())
	}
}

func (r *boundBody) Read(p []byte) (int, error) {
	if !r.started {
		r.begin()
	}
	n, err := r.ReadCloser.Read(p)
	if r.ended {
		return n, err
	}
	r.n += int64(n)
	if r.conn != nil {
		r.conn.bodyRead.Store(r.n)
	}
	switch {
	case errors.Is(err, io.EOF):
		r.end()
	case n > 0:
		_ = r.rc.SetReadDeadline(r.b.deadline(r.start, r.n))
	}
	return n, err
}

// end clears the deadline of a body read to its end: what the connection
// reads next (HTTP/1.1's next request, its close) is bounded by the
// server's other timeouts.
func (r *boundBody) end() {
	r.ended = true
	_ = r.rc.SetReadDeadline(time.Time{})
	if r.conn != nil {
		r.conn.bodyEnded()
	}
}

// behind reports whether c is reading a request body that has been
// below rate since its start for reclaimAfter or more.
func (c *limitedConn) behind(now time.Time, rate int64) bool {
	s := c.bodyStart.Load()
	if s == 0 {
		return false
	}
	elapsed := now.Sub(time.Unix(0, s))
	return elapsed >= reclaimAfter && c.bodyRead.Load() < rate*int64(elapsed/time.Millisecond)/1000
}

// limitedOf returns the *limitedConn under c, if any.
func limitedOf(c net.Conn) *limitedConn {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	lc, _ := c.(*limitedConn)
	return lc
}

// bodyState counts a connection as reading no body once it has gone
// idle, been taken over (hijacked) or closed, whatever its handler left.
func bodyState(next func(net.Conn, http.ConnState)) func(net.Conn, http.ConnState) {
	return func(c net.Conn, s http.ConnState) {
		if s == http.StateIdle || s == http.StateHijacked || s == http.StateClosed {
			if lc := limitedOf(c); lc != nil {
				lc.bodyEnded()
			}
		}
		if next != nil {
			next(c, s)
		}
	}
}

// bodyProgress is what a connection's current HTTP/1.1 request body has
// done, for a listener at its cap to find the connections it may reclaim.
type bodyProgress struct {
	bodyStart atomic.Int64  // UnixNano of the body's start; 0: none being read
	bodyRead  atomic.Int64  // its bytes read so far
	reading   *atomic.Int64 // the listener's count of connections reading a body
}

// bodyBegan marks the connection reading a body since start.
func (p *bodyProgress) bodyBegan(start int64) {
	if p.bodyStart.Swap(start) == 0 && p.reading != nil {
		p.reading.Add(1)
	}
}

// bodyEnded marks the connection reading no body.
func (p *bodyProgress) bodyEnded() {
	if p.bodyStart.Swap(0) != 0 && p.reading != nil {
		p.reading.Add(-1)
	}
}
