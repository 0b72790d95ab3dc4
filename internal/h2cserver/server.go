package h2cserver

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// preface is what an HTTP/2 client with prior knowledge sends first
// (RFC 9113, section 3.4).
const preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// Server serves HTTP/1.1 and h2c with the settings of an http.Server:
// its Handler, ReadHeaderTimeout (or, without one, ReadTimeout: either
// also bounds the wait for the preface), ConnState, BaseContext,
// ConnContext, ErrorLog, IdleTimeout and HTTP2. It serves no TLS.
type Server struct {
	srv *http.Server
	h1  *connListener // connections for srv, once known not to be HTTP/2

	lower      sync.Map // header keys and their HTTP/2 names (lowerHeader)
	lowerCount atomic.Int64

	mu     sync.Mutex
	ln     net.Listener
	conns  map[net.Conn]*conn // reading the preface (nil) or serving HTTP/2
	closed bool
	wg     sync.WaitGroup // the accept loop, sniffers and HTTP/2 connections
	h1done chan struct{}  // closed when srv.Serve has returned
}

// New returns a Server that serves with srv's settings. It sets srv's
// Protocols, TLSConfig and TLSNextProto for its own use; srv must not be
// served by anything else.
func New(srv *http.Server) *Server {
	var protos http.Protocols
	protos.SetHTTP1(true)
	srv.Protocols = &protos
	srv.TLSConfig = nil
	return &Server{srv: srv, conns: make(map[net.Conn]*conn), h1done: make(chan struct{})}
}

// Serve accepts connections on ln until Close or Shutdown, which make it
// return http.ErrServerClosed; it returns any other accept error at once.
// Call it once.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = ln.Close()
		return http.ErrServerClosed
	}
	s.ln = ln
	s.h1 = newConnListener(ln.Addr())
	s.wg.Add(1)
	s.mu.Unlock()
	defer s.wg.Done()
	go func() {
		defer close(s.h1done)
		_ = s.srv.Serve(s.h1) // returns when Close or Shutdown closes h1
	}()

	ctx := context.Background()
	if s.srv.BaseContext != nil {
		ctx = s.srv.BaseContext(ln)
	}
	var delay time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if s.isClosed() {
				return http.ErrServerClosed
			}
			// As net/http does: out of descriptors, say, is worth
			// waiting out rather than ending the server.
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || isTemporary(err) {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				s.logf("h2cserver: accept error: %v; retrying in %v", err, delay)
				time.Sleep(delay)
				continue
			}
			s.stop() // the open connections go on until Close
			return err
		}
		delay = 0
		if !s.track(c) {
			_ = c.Close()
			return http.ErrServerClosed
		}
		go s.serveConn(ctx, c)
	}
}

func isTemporary(err error) bool {
	var t interface{ Temporary() bool }
	return errors.As(err, &t) && t.Temporary()
}

// serveConn reads as much of the preface as c sends and serves c as
// HTTP/2 if it is all there, or hands c to the HTTP/1 server.
func (s *Server) serveConn(ctx context.Context, c net.Conn) {
	defer s.wg.Done()
	// As net/http bounds the wait for a request's headers.
	d := s.srv.ReadHeaderTimeout
	if d <= 0 {
		d = s.srv.ReadTimeout
	}
	if d > 0 {
		_ = c.SetReadDeadline(time.Now().Add(d))
	}
	var buf [len(preface)]byte
	n, h2, err := readPrefix(c, buf[:])
	_ = c.SetReadDeadline(time.Time{})
	if err != nil {
		s.drop(c)
		return
	}
	if !h2 {
		s.untrack(c)
		s.h1.deliver(&prefixConn{Conn: c, prefix: buf[:n]})
		return
	}
	if s.srv.ConnContext != nil {
		ctx = s.srv.ConnContext(ctx, c)
	}
	hc := newConn(s, c, ctx)
	if hc.start() != nil || !s.serving(c, hc) {
		hc.teardown()
		s.drop(c)
		return
	}
	s.connState(c, http.StateNew)
	hc.serve()
	s.connState(c, http.StateClosed)
	s.untrack(c)
}

// drop closes c, which never reached a server, and reports it to
// ConnState as net/http does a connection that sent no request.
func (s *Server) drop(c net.Conn) {
	_ = c.Close()
	s.connState(c, http.StateNew)
	s.connState(c, http.StateClosed)
	s.untrack(c) // last: a connection no longer tracked has been reported
}

// readPrefix reads into buf, as long as the preface, while what c sends
// matches it, and returns how much it read and whether that was all of
// the preface.
func readPrefix(c net.Conn, buf []byte) (n int, h2 bool, err error) {
	for n < len(buf) {
		m, err := c.Read(buf[n:])
		n += m
		if !bytes.HasPrefix([]byte(preface), buf[:n]) {
			return n, false, nil
		}
		if err != nil {
			if errors.Is(err, io.EOF) && n > 0 {
				return n, false, nil // the HTTP/1 server answers what came
			}
			return n, false, err
		}
	}
	return n, true, nil
}

func (s *Server) connState(c net.Conn, st http.ConnState) {
	if s.srv.ConnState != nil {
		s.srv.ConnState(c, st)
	}
}

func (s *Server) logf(format string, args ...any) {
	if s.srv.ErrorLog != nil {
		s.srv.ErrorLog.Printf(format, args...)
	}
}

func (s *Server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// track counts c as one of s's connections, unless s is closed.
func (s *Server) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.conns[c] = nil
	s.wg.Add(1)
	return true
}

// serving marks c as served by hc, unless s is closing.
func (s *Server) serving(c net.Conn, hc *conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.conns[c] = hc
	return true
}

func (s *Server) untrack(c net.Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// stop marks s closed, closes its listeners and returns the connections
// that are not the HTTP/1 server's.
func (s *Server) stop() []net.Conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed && s.ln != nil {
		_ = s.ln.Close()
		s.h1.Close()
	}
	s.closed = true
	conns := make([]net.Conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	return conns
}

// started reports whether Serve has begun, and so whether srv.Serve runs.
func (s *Server) started() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ln != nil
}

// Close closes the listener and every connection at once, as
// http.Server.Close does, and waits for every goroutine of s to return
// (handlers excepted, as with net/http). It is idempotent.
func (s *Server) Close() error {
	for _, c := range s.stop() {
		_ = c.Close()
	}
	err := s.srv.Close()
	s.wait()
	return err
}

// Shutdown closes the listener, asks every HTTP/2 connection to finish
// with GOAWAY, and waits until every connection has ended or ctx does,
// as http.Server.Shutdown does; connections still sniffing are closed.
func (s *Server) Shutdown(ctx context.Context) error {
	s.stop()
	// The connections still reading their preface are closed, as
	// net/http closes new idle ones; an HTTP/2 one gets GOAWAY and ends
	// once its streams have.
	// Each GOAWAY waits for the write under way on its connection, which
	// a client that stopped reading may hold until Close: Shutdown does
	// not wait for it past ctx.
	s.mu.Lock()
	for c, hc := range s.conns {
		if hc == nil {
			_ = c.Close()
			continue
		}
		s.wg.Add(1) // while c's own goroutine is counted
		go func() {
			defer s.wg.Done()
			hc.shutdown()
		}()
	}
	s.mu.Unlock()
	err := s.srv.Shutdown(ctx)
	done := make(chan struct{})
	go func() {
		s.wait()
		close(done)
	}()
	select {
	case <-done:
		return err
	case <-ctx.Done():
		return errors.Join(err, ctx.Err())
	}
}

func (s *Server) wait() {
	s.wg.Wait()
	if s.started() {
		<-s.h1done
	}
}

// prefixConn is a connection whose first bytes were read already.
type prefixConn struct {
	net.Conn
	prefix []byte
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if len(c.prefix) == 0 {
		return c.Conn.Read(p)
	}
	n := copy(p, c.prefix)
	c.prefix = c.prefix[n:]
	return n, nil
}

// ReadFrom lets net/http use sendfile or splice for a response, as it
// does on a *net.TCPConn.
func (c *prefixConn) ReadFrom(r io.Reader) (int64, error) {
	return io.Copy(c.Conn, r)
}

// CloseWrite lets net/http half-close as it does a *net.TCPConn.
func (c *prefixConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// connListener is the HTTP/1 server's listener: the connections Serve
// found not to be HTTP/2.
type connListener struct {
	addr  net.Addr
	conns chan net.Conn
	once  sync.Once
	done  chan struct{}
}

func newConnListener(addr net.Addr) *connListener {
	return &connListener{addr: addr, conns: make(chan net.Conn), done: make(chan struct{})}
}

// deliver hands c to Accept, or closes it if the listener is closed.
func (l *connListener) deliver(c net.Conn) {
	select {
	case l.conns <- c:
	case <-l.done:
		_ = c.Close()
	}
}

func (l *connListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *connListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *connListener) Addr() net.Addr { return l.addr }
