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
// h2c failed before it gives h2c up for good: a proxy that speaks only
// HTTP/1.1 but forwards the server's Holdfast-Capabilities must not make
// every other request fail.
const maxH2CFallbacks = 2

// h2cTransport is the source's own transport for an http:// endpoint: it
// speaks HTTP/1.1 until a reply lists CapabilityH2C, then HTTP/2 with
// prior knowledge for every later request, so that the stream, snapshots
// and acks share one TCP connection. The HTTP/1.1 transport's idle
// connections are closed at the switch (and those of its requests still
// running when they end). A request that h2c fails for a reason other
// than dialing (the server stopped speaking it, an HTTP/1.1-only proxy)
// sends the transport back to HTTP/1.1, at most maxH2CFallbacks times.
type h2cTransport struct {
	h1  *http.Transport
	h2  *http.Transport // h1's settings, Protocols: UnencryptedHTTP2 only
	on  atomic.Bool     // requests go to h2
	mu  sync.Mutex
	off int // fallbacks so far; at maxH2CFallbacks h2c is off for good
	// warm is closed once the first request after a switch has its reply
	// (or a second after it got its connection, for a reply that waits,
	// as a long-poll's): requests started together on a fresh transport
	// would each dial their own. Not at GotConn: the connection is in the
	// idle pool for others only a moment later, and requests let go then
	// dialed 10-20 connections, now and then under load.
	warm     chan struct{}
	warmOnce *sync.Once
}

// warmWait bounds how long requests after a switch wait for the first
// one's reply, once it has its connection.
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
	return &h2cTransport{h1: h1, h2: h2}
}

// upgrade switches later requests to h2c, unless h2c was given up.
func (t *h2cTransport) upgrade() {
	if t.on.Load() {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.on.Load() || t.off >= maxH2CFallbacks {
		return
	}
	t.warm, t.warmOnce = make(chan struct{}), new(sync.Once)
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
		t.h2.CloseIdleConnections()
	}
}

func (t *h2cTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !t.on.Load() {
		resp, err := t.h1.RoundTrip(req)
		if err == nil && t.on.Load() {
			// Switched while this one ran: its connection goes idle in
			// a transport no one uses any more.
			resp.Body = &closeIdleBody{ReadCloser: resp.Body, t: t.h1}
		}
		return resp, err
	}
	t.mu.Lock()
	warm, once := t.warm, t.warmOnce
	t.mu.Unlock()
	first := false
	once.Do(func() { first = true })
	if first {
		release := func() { close(warm) }
		var released sync.Once
		trace := &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) {
			time.AfterFunc(warmWait, func() { released.Do(release) })
		}}
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), trace))
		defer released.Do(release)
	} else {
		select {
		case <-warm:
		case <-req.Context().Done():
			return nil, req.Context().Err()
		}
	}
	resp, err := t.h2.RoundTrip(req)
	if err != nil && req.Context().Err() == nil && !isDialError(err) {
		t.downgrade()
	}
	return resp, err
}

func (t *h2cTransport) CloseIdleConnections() {
	t.h1.CloseIdleConnections()
	t.h2.CloseIdleConnections()
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
