package transport

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync"
	"sync/atomic"
	"time"
)

// maxH2CFallbacks is how many times a source goes back to HTTP/1.1 after
// h2c failed for a reason that does not show the peer cannot speak it
// (a connection lost mid-request) before it gives h2c up for good.
const maxH2CFallbacks = 2

// h2cRefusedFor is how long a source keeps to HTTP/1.1 after its endpoint
// answered HTTP/2's preface with something other than HTTP/2 (an
// HTTP/1.1-only proxy in front of a server that lists h2c): the capability
// is the origin's, not the hop's, and the hop may change (a proxy
// reconfigured, replaced).
const h2cRefusedFor = 10 * time.Minute

// h2cTransport is the source's own transport for an http:// endpoint: it
// speaks HTTP/1.1 until a reply lists CapabilityH2C, then HTTP/2 with
// prior knowledge for every later request, so that the stream, snapshots
// and acks share one TCP connection. The HTTP/1.1 transport's idle
// connections are closed at the switch (and those of its requests still
// running when they end). A request that h2c fails for a reason other
// than dialing (the server stopped speaking it, an HTTP/1.1-only proxy)
// sends the transport back to HTTP/1.1, at most maxH2CFallbacks times.
//
// Over plaintext the only proof that the hop speaks h2c is trying it: a
// connection whose peer answers the preface with anything but an HTTP/2
// SETTINGS frame (an HTTP/1.1 reply), or a request that fails before any
// connection's peer sent one (the hop closed the connection on the
// preface, a write failed before its reply was read), refuses h2c for
// that endpoint for h2cRefusedFor, and the requests it failed are sent
// again over HTTP/1.1 at once, so that the caller sees no error.
type h2cTransport struct {
	h1  *http.Transport
	h2  *http.Transport // h1's settings, Protocols: UnencryptedHTTP2 only
	on  atomic.Bool     // requests go to h2
	mu  sync.Mutex
	off int // fallbacks so far; at maxH2CFallbacks h2c is off for good
	// refusedUntil: the endpoint answered HTTP/2 with HTTP/1.x; no
	// upgrade before then. refusals counts such answers.
	refusedUntil time.Time
	refusals     atomic.Int64
	now          func() time.Time
	// proven: a connection since the last switch to h2c began with the
	// peer's SETTINGS frame, so the hop speaks HTTP/2.
	proven atomic.Bool
	// warm follows the switch's connection into h2's idle pool (see
	// h2cWarmup); nil once a request got a connection out of the pool.
	warm atomic.Pointer[h2cWarmup]
	dial func(ctx context.Context, network, addr string) (net.Conn, error) // h1's
}

// warmWait bounds how long a dial after a switch waits for another
// request's new connection to reach h2's idle pool (net/http puts it there
// a moment after it handed it to that request), counted from the start of
// that connection's dial: a dial that hangs, or a server that refuses the
// connection to the requests queued for it (GOAWAY while the first stream
// stays open), costs a second at most; and a connection dialed longer ago
// (one that died since, say) gates no dial.
const warmWait = time.Second

func newH2CTransport(h1 *http.Transport) *h2cTransport {
	h2 := h1.Clone()
	h2.Protocols = new(http.Protocols)
	h2.Protocols.SetUnencryptedHTTP2(true)
	// Index no request header in HPACK: a connection carries a few
	// long-lived requests, and every entry would be held in the server's
	// table (a server's memory per client) for nothing.
	var conf http.HTTP2Config
	if h1.HTTP2 != nil {
		conf = *h1.HTTP2
	}
	if conf.MaxEncoderHeaderTableSize == 0 {
		conf.MaxEncoderHeaderTableSize = 1
	}
	h2.HTTP2 = &conf
	t := &h2cTransport{h1: h1, h2: h2, dial: h1.DialContext, now: time.Now}
	if t.dial == nil {
		t.dial = (&net.Dialer{}).DialContext
	}
	h2.DialContext = t.dialH2C
	return t
}

// upgrade switches later requests to h2c, unless h2c was given up.
func (t *h2cTransport) upgrade() {
	if t.on.Load() {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.on.Load() || t.off >= maxH2CFallbacks || t.now().Before(t.refusedUntil) {
		return
	}
	if !t.h2.DisableKeepAlives && t.h2.MaxIdleConnsPerHost >= 0 {
		// (Without an idle pool no connection is shared: nothing to wait for.)
		t.warm.Store(&h2cWarmup{t: t})
	}
	t.proven.Store(false)
	t.on.Store(true)
	t.h1.CloseIdleConnections()
}

// downgrade sends later requests back to HTTP/1.1.
func (t *h2cTransport) downgrade() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.on.Load() {
		t.on.Store(false)
		t.off++
		t.closeH2Idle()
	}
}

// refuse records that the endpoint does not speak h2c: HTTP/1.1 for
// h2cRefusedFor, not counted as a fallback.
func (t *h2cTransport) refuse() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.refusals.Add(1)
	t.refusedUntil = t.now().Add(h2cRefusedFor)
	if t.on.Load() {
		t.on.Store(false)
		t.closeH2Idle()
	}
}

func (t *h2cTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !t.on.Load() {
		return t.roundTripH1(req)
	}
	orig := req
	if w := t.warm.Load(); w != nil {
		r := w.track(req.Context())
		defer r.finish()
		req = req.WithContext(r.ctx)
	}
	refusals := t.refusals.Load()
	resp, err := t.h2.RoundTrip(req)
	switch {
	case err == nil || orig.Context().Err() != nil || isDialError(err):
	case t.refusals.Load() != refusals || !t.proven.Load():
		// The hop answered in HTTP/1.x, or has not shown it speaks
		// HTTP/2: the same request again over HTTP/1.1, when its body
		// can be sent again.
		if t.refusals.Load() == refusals {
			t.refuse()
		}
		if retry, ok := rewound(orig); ok {
			return t.roundTripH1(retry)
		}
	default:
		t.downgrade()
	}
	return resp, err
}

func (t *h2cTransport) roundTripH1(req *http.Request) (*http.Response, error) {
	resp, err := t.h1.RoundTrip(req)
	if err == nil && t.on.Load() {
		// Switched while this one ran: its connection goes idle in
		// a transport no one uses any more.
		resp.Body = &closeIdleBody{ReadCloser: resp.Body, t: t.h1}
	}
	return resp, err
}

// rewound returns req ready to be sent again: with a new copy of its body,
// if it has one; ok is false when its body cannot be had again.
func rewound(req *http.Request) (*http.Request, bool) {
	if req.Body == nil || req.Body == http.NoBody {
		return req, true
	}
	if req.GetBody == nil {
		return nil, false
	}
	body, err := req.GetBody()
	if err != nil {
		return nil, false
	}
	r := req.Clone(req.Context())
	r.Body = body
	return r, true
}

func (t *h2cTransport) CloseIdleConnections() {
	t.h1.CloseIdleConnections()
	t.closeH2Idle()
}

// closeH2Idle closes h2's idle connections: a connection on its way into
// the idle pool may be dropped from it, so dials waiting for it go ahead.
func (t *h2cTransport) closeH2Idle() {
	t.h2.CloseIdleConnections()
	if w := t.warm.Load(); w != nil {
		w.failGate()
	}
}

// h2cWarmup makes requests started together after a switch share one
// connection. net/http's Transport hands a new HTTP/2 connection to the
// request whose dial made it and only then, in the dialing goroutine, puts
// it in the idle pool (Transport.dialConnFor: tryDeliver, then
// putOrCloseIdleConn). A request that asks for a connection in between
// finds none and dials (every request after the first did, when that
// goroutine ran late: the first one's reply was no sign that its
// connection was in the pool). So until a request got a connection out of
// the pool, each request carries an h2cReq, and a dial made for one while
// another dial's connection is on its way waits: the pool delivers that
// connection to every request queued for one (Transport.getConn queues for
// an idle connection before it dials), and the waiting dial is given up
// once its request got a connection. Only if that connection fails, is
// dropped (CloseIdleConnections), closed, or has not reached the request
// warmWait after its dial began does the waiting dial go ahead.
type h2cWarmup struct {
	t    *h2cTransport
	mu   sync.Mutex
	gate *h2cGate // the last connection dialed
}

// h2cGate is a connection dialed during the warm-up.
type h2cGate struct {
	expires time.Time     // warmWait after its dial began
	failed  chan struct{} // closed when it will not reach waiting requests
	once    sync.Once
}

func (g *h2cGate) fail() { g.once.Do(func() { close(g.failed) }) }

func (g *h2cGate) hasFailed() bool {
	select {
	case <-g.failed:
		return true
	default:
		return false
	}
}

func (w *h2cWarmup) failGate() {
	w.mu.Lock()
	g := w.gate
	w.mu.Unlock()
	if g != nil {
		g.fail()
	}
}

// gateFor returns the connection a dial waits for, or a gate of its own
// (mine) when there is none to wait for: it dials. A connection that
// reached the pool still gates the dials of requests that asked before
// (net/http handed it to them with the put, their dials run late), until
// it expires.
func (w *h2cWarmup) gateFor() (g *h2cGate, mine bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	if w.gate != nil && !w.gate.hasFailed() && now.Before(w.gate.expires) {
		return w.gate, false
	}
	w.gate = &h2cGate{expires: now.Add(warmWait), failed: make(chan struct{})}
	return w.gate, true
}

// h2cReqKey is the context key of a request's h2cReq (net/http dials
// with a context that keeps the request's values).
type h2cReqKey struct{}

// h2cReq is a request during the warm-up, as its trace sees it.
type h2cReq struct {
	w       *h2cWarmup
	ctx     context.Context // the request's, with the trace and the h2cReq
	mu      sync.Mutex
	got     int           // GotConn calls
	asked   int           // got at the last GetConn
	done    bool          // RoundTrip returned
	dialed  bool          // a dial of its own went ahead
	changed chan struct{} // closed (and replaced) at GotConn and when done
}

func (w *h2cWarmup) track(ctx context.Context) *h2cReq {
	r := &h2cReq{w: w, changed: make(chan struct{})}
	trace := &httptrace.ClientTrace{GetConn: r.getConn, GotConn: r.gotConn}
	r.ctx = context.WithValue(httptrace.WithClientTrace(ctx, trace), h2cReqKey{}, r)
	return r
}

// getConn: net/http's, once per attempt (and HTTP/2's again just before
// its GotConn).
func (r *h2cReq) getConn(string) {
	r.mu.Lock()
	r.asked = r.got
	r.mu.Unlock()
}

func (r *h2cReq) gotConn(httptrace.GotConnInfo) {
	r.mu.Lock()
	r.got++
	close(r.changed)
	r.changed = make(chan struct{})
	fromPool := !r.dialed
	r.mu.Unlock()
	if fromPool {
		// Its connection came out of the pool: later requests find
		// it there (or dial because it can take no more).
		r.w.t.warm.CompareAndSwap(r.w, nil)
	}
}

func (r *h2cReq) finish() {
	r.mu.Lock()
	r.done = true
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
}

// errDialNotNeeded ends a dial whose request got a connection meanwhile;
// net/http delivers it to no one (and were it delivered, it is a dial's
// error: no reason to fall back to HTTP/1.1).
var errDialNotNeeded = errors.New("transport: h2c dial not needed, the request got a connection")

// dialH2C is h2's dial: during the warm-up, a dial for a request waits for
// a connection already on its way into the pool (see h2cWarmup).
func (t *h2cTransport) dialH2C(ctx context.Context, network, addr string) (net.Conn, error) {
	r, _ := ctx.Value(h2cReqKey{}).(*h2cReq)
	if r == nil {
		return t.sniffDial(ctx, network, addr)
	}
	r.mu.Lock()
	asked := r.asked
	r.mu.Unlock()
	for {
		g, mine := r.w.gateFor()
		if mine {
			r.mu.Lock()
			r.dialed = true
			r.mu.Unlock()
			c, err := t.sniffDial(ctx, network, addr)
			if err != nil {
				g.fail()
				return nil, err
			}
			return &gatedConn{Conn: c, g: g}, nil
		}
		if err := r.waitFor(g, asked); err != nil {
			return nil, &net.OpError{Op: "dial", Net: network, Err: err}
		}
	}
}

// gatedConn is a connection dialed during the warm-up: once closed (it
// died, or h2 dropped it) it gates no dial.
type gatedConn struct {
	net.Conn
	g *h2cGate
}

func (c *gatedConn) Close() error {
	c.g.fail()
	return c.Conn.Close()
}

// waitFor waits until r got a connection or ended since its GetConn (an
// error: give the dial up) or g will not bring one (nil: dial).
func (r *h2cReq) waitFor(g *h2cGate, asked int) error {
	timeout := time.NewTimer(time.Until(g.expires))
	defer timeout.Stop()
	for {
		r.mu.Lock()
		over := r.got > asked || r.done
		changed := r.changed
		r.mu.Unlock()
		if over {
			return errDialNotNeeded
		}
		select {
		case <-changed:
		case <-timeout.C:
			g.fail()
			return nil
		case <-g.failed:
			return nil
		case <-r.ctx.Done():
			return r.ctx.Err()
		}
	}
}

// sniffDial dials a connection for h2 that tells the transport when its
// peer answers in something other than HTTP/2.
func (t *h2cTransport) sniffDial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := t.dial(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &sniffConn{Conn: c, t: t}, nil
}

// sniffConn looks at the first bytes its peer sends: an HTTP/2 server
// starts with a SETTINGS frame (a 9-byte header whose fourth byte, the
// frame type, is 0x4); an HTTP/1.x one with "HTTP/1." (whose fourth byte
// is 'P'). SETTINGS proves the hop speaks HTTP/2; anything else refuses
// h2c, before the read returns, so that the request it fails knows why.
type sniffConn struct {
	net.Conn
	t    *h2cTransport
	seen int // bytes of the peer's first 4 seen (a single reader: h2's read loop)
	head [4]byte
}

func (c *sniffConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if c.seen < len(c.head) && n > 0 {
		c.seen += copy(c.head[c.seen:], p[:n])
		if c.seen == len(c.head) {
			if c.head[3] == 0x4 {
				c.t.proven.Store(true)
			} else {
				c.t.refuse()
			}
		}
	}
	return n, err
}

// isDialError reports whether err is a failure to connect at all (the
// server down, restarting): no sign that it stopped speaking h2c.
func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial" || errors.Is(err, context.DeadlineExceeded)
}

// closeIdleBody closes its transport's idle connections once the body is
// closed.
type closeIdleBody struct {
	io.ReadCloser
	t *http.Transport
}

func (b *closeIdleBody) Close() error {
	err := b.ReadCloser.Close()
	b.t.CloseIdleConnections()
	return err
}
