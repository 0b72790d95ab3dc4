package h2cserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

const (
	frameHeaderLen = 9
	// maxFrameSize is the largest frame read or written: RFC 9113's
	// default SETTINGS_MAX_FRAME_SIZE, which this server never raises.
	maxFrameSize = 16 << 10
	// defaultStreamWindow and defaultConnWindow bound what a client may
	// send that its handlers have not read: per stream, and in all.
	defaultStreamWindow = 256 << 10
	defaultConnWindow   = 1 << 20
	// windowRefresh is how many read bytes make a WINDOW_UPDATE worth
	// sending before the client's window runs low.
	windowRefresh     = 4 << 10
	defaultMaxStreams = 250
	maxWindow         = 1<<31 - 1
	// initialWindow is RFC 9113's for both sides until SETTINGS say else.
	initialWindow = 65535
	// readBufferSize holds a typical client frame (an ack, a request's
	// headers) and its header in one read.
	readBufferSize = 512
	// keptBuffer is the largest buffer a stream keeps between uses; a
	// larger one (a snapshot's) goes back to the garbage collector.
	keptBuffer = 4 << 10
	// goAwayTimeout is how long an idle connection's GOAWAY may wait
	// for the write under way before the connection closes without it.
	goAwayTimeout = time.Second
	// controlWriteTimeout bounds the write of a frame that is not a
	// stream's; past it the connection closes.
	controlWriteTimeout = 30 * time.Second
)

var (
	errClientReset = errors.New("h2cserver: stream reset by the client")
	errConnClosed  = errors.New("h2cserver: connection closed")
	errStreamEnded = errors.New("h2cserver: stream ended")
	errBodyLength  = errors.New("h2cserver: request body not as long as its content-length")
)

// conn serves one HTTP/2 connection. Its reader (serve) reads every
// frame; each request's handler runs on a goroutine of its own and writes
// its frames to the socket itself, under wmu. No goroutine sits between a
// handler and its client, as one does in x/net/http2's server (a serve
// loop, and a goroutine per flush): at thousands of long-lived streams,
// those hand-offs were most of a publish's server CPU.
type conn struct {
	s          *Server
	nc         net.Conn
	ctx        context.Context // every request's parent
	cancel     context.CancelFunc
	fr         *http2.Framer // reads, on serve's goroutine only
	handler    http.Handler
	remoteAddr string
	maxStreams uint32
	recvWindow int32 // per stream, as advertised
	idleAfter  time.Duration
	writeFor   time.Duration // the server's WriteTimeout per request
	sawFrame   bool          // the client's SETTINGS came (the first frame must be); serve's

	wmu    sync.Mutex // one writer on nc at a time, whole frames
	henc   *hpack.Encoder
	hbuf   bytes.Buffer
	frame  []byte // the frames being written under wmu
	broken bool   // a write failed partway: nothing more may go out

	mu         sync.Mutex
	cond       sync.Cond // a window grew, data came, a stream or c ended
	streams    map[uint32]*stream
	maxID      uint32 // the highest stream the client opened
	handlers   uint32 // running, also those of streams already reset
	sendWindow int64  // the client's connection window
	peerWindow int32  // the client's SETTINGS_INITIAL_WINDOW_SIZE
	peerFrame  int    // the client's SETTINGS_MAX_FRAME_SIZE, up to maxFrameSize
	in         inflow // the connection's receive window
	writing    *stream
	wdeadline  time.Time // nc's write deadline now
	goingAway  bool
	lastID     uint32 // with goingAway: the last stream served
	drained    bool   // going away, and the last stream has ended: close after the write under way
	done       bool   // serve has returned: every stream has ended
	idle       *time.Timer
}

func newConn(s *Server, nc net.Conn, ctx context.Context) *conn {
	srv := s.srv
	c := &conn{
		s:          s,
		nc:         nc,
		handler:    srv.Handler,
		remoteAddr: nc.RemoteAddr().String(),
		maxStreams: defaultMaxStreams,
		recvWindow: defaultStreamWindow,
		in:         inflow{avail: defaultConnWindow},
		writeFor:   srv.WriteTimeout,
		idleAfter:  srv.IdleTimeout,
		streams:    make(map[uint32]*stream),
		sendWindow: initialWindow,
		peerWindow: initialWindow,
		peerFrame:  maxFrameSize,
	}
	if c.handler == nil {
		c.handler = http.DefaultServeMux
	}
	if c.idleAfter == 0 {
		c.idleAfter = srv.ReadTimeout // as net/http does
	}
	if h := srv.HTTP2; h != nil {
		if h.MaxConcurrentStreams > 0 {
			c.maxStreams = uint32(h.MaxConcurrentStreams)
		}
		if h.MaxReceiveBufferPerStream > 0 {
			c.recvWindow = int32(min(h.MaxReceiveBufferPerStream, maxWindow))
		}
		if h.MaxReceiveBufferPerConnection > 0 {
			c.in.avail = int32(min(max(h.MaxReceiveBufferPerConnection, initialWindow), maxWindow))
		}
	}
	c.cond.L = &c.mu
	ctx = context.WithValue(ctx, http.ServerContextKey, srv)
	ctx = context.WithValue(ctx, http.LocalAddrContextKey, nc.LocalAddr())
	c.ctx, c.cancel = context.WithCancel(ctx)
	c.fr = http2.NewFramer(nil, bufio.NewReaderSize(nc, readBufferSize))
	c.fr.SetReuseFrames()
	c.fr.SetMaxReadFrameSize(maxFrameSize)
	maxHeader := srv.MaxHeaderBytes
	if maxHeader <= 0 {
		maxHeader = http.DefaultMaxHeaderBytes
	}
	c.fr.MaxHeaderListSize = uint32(maxHeader)
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.henc = hpack.NewEncoder(&c.hbuf)
	// No HPACK table of the server's own: what it would index (the
	// response headers of a connection's few, long-lived streams) is
	// rarely sent twice, and the table costs memory per connection.
	c.henc.SetMaxDynamicTableSizeLimit(0)
	return c
}

// start writes the server's connection preface: its SETTINGS and the
// connection's receive window.
func (c *conn) start() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	b := appendFrameHeader(c.frame[:0], 3*6, http2.FrameSettings, 0, 0)
	b = appendSetting(b, http2.SettingMaxConcurrentStreams, c.maxStreams)
	b = appendSetting(b, http2.SettingInitialWindowSize, uint32(c.recvWindow))
	b = appendSetting(b, http2.SettingMaxHeaderListSize, c.fr.MaxHeaderListSize)
	if inc := c.in.avail - initialWindow; inc > 0 {
		b = appendWindowUpdate(b, 0, uint32(inc))
	}
	c.frame = b
	if err := c.write(nil, b); err != nil {
		return err
	}
	if c.idleAfter > 0 {
		c.mu.Lock()
		c.idle = time.AfterFunc(c.idleAfter, c.closeIdle)
		c.mu.Unlock()
	}
	return nil
}

// serve reads frames until the connection ends, then ends every stream.
func (c *conn) serve() {
	defer c.teardown()
	for {
		f, err := c.fr.ReadFrame()
		if err == nil {
			err = c.process(f)
		}
		if err == nil {
			continue
		}
		var se http2.StreamError
		if errors.As(err, &se) {
			c.resetID(se.StreamID, se.Code, err)
			continue
		}
		var ce http2.ConnectionError
		if errors.As(err, &ce) {
			c.s.logf("h2cserver: %s: %v (%v)", c.remoteAddr, err, c.fr.ErrorDetail())
			c.goAway(http2.ErrCode(ce))
		}
		return
	}
}

func (c *conn) process(f http2.Frame) error {
	first := !c.sawFrame
	c.sawFrame = true
	if sf, ok := f.(*http2.SettingsFrame); first && (!ok || sf.IsAck()) {
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	switch f := f.(type) {
	case *http2.SettingsFrame:
		if f.IsAck() {
			return nil
		}
		if err := f.ForeachSetting(c.applySetting); err != nil {
			return err
		}
		return c.writeControl(appendFrameHeader(nil, 0, http2.FrameSettings, http2.FlagSettingsAck, 0))
	case *http2.MetaHeadersFrame:
		return c.processHeaders(f)
	case *http2.DataFrame:
		return c.processData(f)
	case *http2.WindowUpdateFrame:
		return c.processWindowUpdate(f)
	case *http2.PingFrame:
		if f.IsAck() {
			return nil
		}
		b := appendFrameHeader(nil, 8, http2.FramePing, http2.FlagPingAck, 0)
		return c.writeControl(append(b, f.Data[:]...))
	case *http2.RSTStreamFrame:
		c.mu.Lock()
		if f.StreamID > c.maxID {
			c.mu.Unlock()
			return http2.ConnectionError(http2.ErrCodeProtocol) // an idle stream
		}
		var connInc int32
		if st := c.streams[f.StreamID]; st != nil {
			c.endLocked(st, errClientReset)
			// What it had not read goes back to the connection's
			// window now: its handler's end sends nothing more.
			connInc = c.in.refund(0)
		}
		drained := c.drained
		c.mu.Unlock()
		if err := c.writeWindowUpdates(0, 0, connInc); err != nil {
			return err
		}
		if drained {
			c.wmu.Lock()
			c.closeIfDrained()
			c.wmu.Unlock()
		}
		return nil
	case *http2.GoAwayFrame:
		return nil // the client opens no more streams; those open go on
	case *http2.PushPromiseFrame:
		return http2.ConnectionError(http2.ErrCodeProtocol) // a client must not push
	default:
		return nil // PRIORITY, and frame types this server does not know
	}
}

func (c *conn) applySetting(s http2.Setting) error {
	if err := s.Valid(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch s.ID {
	case http2.SettingInitialWindowSize:
		delta := int64(s.Val) - int64(c.peerWindow)
		c.peerWindow = int32(s.Val)
		for _, st := range c.streams {
			st.sendWindow += delta
			if st.sendWindow > maxWindow {
				return http2.ConnectionError(http2.ErrCodeFlowControl)
			}
		}
		c.cond.Broadcast()
	case http2.SettingMaxFrameSize:
		c.peerFrame = int(min(s.Val, maxFrameSize))
	}
	return nil
}

func (c *conn) processWindowUpdate(f *http2.WindowUpdateFrame) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f.StreamID == 0 {
		c.sendWindow += int64(f.Increment)
		if c.sendWindow > maxWindow {
			return http2.ConnectionError(http2.ErrCodeFlowControl)
		}
		c.cond.Broadcast()
		return nil
	}
	if f.StreamID > c.maxID {
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	st := c.streams[f.StreamID]
	if st == nil {
		return nil // ended: the update was on its way
	}
	st.sendWindow += int64(f.Increment)
	if st.sendWindow > maxWindow {
		return http2.StreamError{StreamID: f.StreamID, Code: http2.ErrCodeFlowControl}
	}
	c.cond.Broadcast()
	return nil
}

func (c *conn) processHeaders(f *http2.MetaHeadersFrame) error {
	id := f.StreamID
	if id%2 == 0 {
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	c.mu.Lock()
	if st := c.streams[id]; st != nil {
		// Trailers: the request body ends (their fields are not kept).
		defer c.mu.Unlock()
		if st.remoteClosed {
			return http2.StreamError{StreamID: id, Code: http2.ErrCodeStreamClosed}
		}
		if !f.StreamEnded() {
			return http2.StreamError{StreamID: id, Code: http2.ErrCodeProtocol}
		}
		st.endBodyLocked()
		c.cond.Broadcast()
		return nil
	}
	if id <= c.maxID {
		c.mu.Unlock()
		return http2.ConnectionError(http2.ErrCodeStreamClosed)
	}
	c.mu.Unlock()

	st := &stream{c: c, id: id, in: inflow{avail: c.recvWindow}}
	handler := c.handler
	req, err := st.request(f)
	// The stream counts as opened (maxID) only together with its entry
	// in c.streams, under one lock: a GOAWAY sent between the two would
	// promise the stream and find nothing to wait for. Only serve's
	// goroutine moves maxID, so no other stream comes between.
	c.mu.Lock()
	c.maxID = id
	refuse := func(err error) error {
		c.mu.Unlock()
		if st.cancel != nil {
			st.cancel()
		}
		return err
	}
	switch {
	case err != nil:
		return refuse(http2.StreamError{StreamID: id, Code: http2.ErrCodeProtocol, Cause: err})
	case c.goingAway:
		return refuse(nil) // past the GOAWAY's last stream: ignored, the client retries it
	case uint32(len(c.streams)) >= c.maxStreams || c.handlers >= c.maxStreams:
		// Handlers still running count too: a client that opens and
		// resets streams at once must not start handlers without bound.
		return refuse(http2.StreamError{StreamID: id, Code: http2.ErrCodeRefusedStream})
	}
	if f.Truncated {
		handler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "request headers too large", http.StatusRequestHeaderFieldsTooLarge)
		})
	}
	st.sendWindow = int64(c.peerWindow)
	if f.StreamEnded() {
		st.remoteClosed = true
		st.bodyErr = io.EOF
	}
	c.streams[id] = st
	c.handlers++
	if c.idle != nil {
		c.idle.Stop()
	}
	c.mu.Unlock()
	go st.run(handler, req)
	return nil
}

func (c *conn) processData(f *http2.DataFrame) error {
	id := f.StreamID
	n := int32(f.Length) // padding counts against the windows too
	c.mu.Lock()
	if n > c.in.avail {
		c.mu.Unlock()
		return http2.ConnectionError(http2.ErrCodeFlowControl)
	}
	c.in.avail -= n
	st := c.streams[id]
	if st == nil || st.remoteClosed || st.bodyClosed {
		// Nobody reads it: give it back to the client at once.
		connInc := c.in.refund(n)
		var streamInc int32
		var err error
		switch {
		case st == nil && id > c.maxID:
			err = http2.ConnectionError(http2.ErrCodeProtocol) // an idle stream
		case st == nil:
			// Ended on this side (reset, or answered): data already sent
			// is ignored.
		case st.remoteClosed:
			err = http2.StreamError{StreamID: id, Code: http2.ErrCodeStreamClosed}
		default: // the handler closed the body: the client may go on sending
			streamInc = n
			if n > st.in.avail {
				err = http2.StreamError{StreamID: id, Code: http2.ErrCodeFlowControl}
				streamInc = 0
			} else if f.StreamEnded() {
				// The client has sent all: the response's end closes
				// the stream, with no RST_STREAM.
				st.remoteClosed = true
				streamInc = 0
			}
		}
		c.mu.Unlock()
		if err != nil {
			return err
		}
		return c.writeWindowUpdates(id, streamInc, connInc)
	}
	if n > st.in.avail {
		c.in.unsent += n // the stream is reset: the connection's window stays
		c.mu.Unlock()
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeFlowControl}
	}
	data := f.Data()
	if st.declared >= 0 && st.received+int64(len(data)) > st.declared {
		// Malformed (RFC 9113, section 8.1.1): the stream is reset.
		c.in.unsent += n
		c.mu.Unlock()
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeProtocol, Cause: errBodyLength}
	}
	st.in.avail -= n
	st.received += int64(len(data))
	if st.r == len(st.rbuf) {
		st.rbuf, st.r = st.rbuf[:0], 0
	} else if st.r > 0 && len(st.rbuf)+len(data) > cap(st.rbuf) {
		// What was read goes before the buffer grows: a reader that
		// never quite catches up must not make it grow for ever.
		st.rbuf, st.r = st.rbuf[:copy(st.rbuf, st.rbuf[st.r:])], 0
	}
	st.rbuf = append(st.rbuf, data...)
	// Padding goes back at once; and with the windows now lower, read
	// bytes not yet given back may be due.
	pad := n - int32(len(data))
	streamInc, connInc := st.in.refund(pad), c.in.refund(pad)
	if f.StreamEnded() {
		st.endBodyLocked()
	}
	c.cond.Broadcast()
	c.mu.Unlock()
	return c.writeWindowUpdates(id, streamInc, connInc)
}

// endBodyLocked notes the END_STREAM of st's request: its body ends with
// io.EOF, or an error if it was not as long as its content-length said
// (RFC 9113, section 8.1.1).
func (st *stream) endBodyLocked() {
	st.remoteClosed = true
	st.bodyErr = io.EOF
	if st.declared >= 0 && st.received != st.declared {
		st.bodyErr = errBodyLength
	}
}

// inflow is a receive window: what the client may still send (avail),
// and what it sent that was read since the last WINDOW_UPDATE (unsent).
type inflow struct{ avail, unsent int32 }

// refund gives n read bytes back and returns the WINDOW_UPDATE increment
// to send now: none until enough is owed, or the client runs short.
func (f *inflow) refund(n int32) int32 {
	f.unsent += n
	if f.unsent < windowRefresh && f.unsent < f.avail {
		return 0
	}
	inc := f.unsent
	f.avail += inc
	f.unsent = 0
	return inc
}

// endLocked ends st for good (reset either way, answered, or the
// connection gone): its writes and reads fail with err from now on, its
// context is cancelled and what it had not read goes back to the
// connection's window.
func (c *conn) endLocked(st *stream, err error) {
	if st.closed {
		return
	}
	st.closed = true
	st.err = err
	st.remoteClosed = true
	if st.bodyErr == nil || st.bodyErr == io.EOF && st.r < len(st.rbuf) {
		st.bodyErr = err
	}
	if unread := int32(len(st.rbuf) - st.r); unread > 0 {
		c.in.unsent += unread // sent with the next update
	}
	st.rbuf, st.r = nil, 0
	delete(c.streams, st.id)
	if st.cancel != nil {
		st.cancel()
	}
	c.cond.Broadcast()
	if len(c.streams) > 0 || c.done {
		return
	}
	if c.goingAway {
		c.drained = true // closed under wmu, once what is being written is out
	} else if c.idleAfter > 0 {
		if c.idle == nil {
			c.idle = time.AfterFunc(c.idleAfter, c.closeIdle)
		} else {
			c.idle.Reset(c.idleAfter)
		}
	}
}

func (c *conn) closeIdle() {
	if !c.isIdle() {
		return
	}
	// The GOAWAY waits for the write under way, which a client that
	// stopped reading may hold for ever: an idle connection closes
	// anyway.
	t := time.AfterFunc(goAwayTimeout, func() {
		if c.isIdle() {
			_ = c.nc.Close()
		}
	})
	c.shutdown()
	t.Stop()
}

func (c *conn) isIdle() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.streams) == 0 && !c.done
}

// shutdown sends GOAWAY: the streams open go on, new ones are refused,
// and the connection closes once the last has ended.
func (c *conn) shutdown() {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.mu.Lock()
	if c.goingAway || c.done {
		c.mu.Unlock()
		return
	}
	c.goingAway, c.lastID = true, c.maxID
	c.drained = len(c.streams) == 0
	last := c.lastID
	c.mu.Unlock()
	c.frame = appendGoAway(c.frame[:0], last, http2.ErrCodeNo)
	_ = c.write(nil, c.frame) // closes c if drained
}

// closeIfDrained closes c if it is going away and its last stream has
// ended. The caller holds wmu: no write is cut short.
func (c *conn) closeIfDrained() {
	c.mu.Lock()
	drained := c.drained
	c.mu.Unlock()
	if drained {
		_ = c.nc.Close() // serve ends
	}
}

// goAway tells the client why the connection ends; serve then closes it.
func (c *conn) goAway(code http2.ErrCode) {
	c.mu.Lock()
	last := c.maxID
	c.mu.Unlock()
	_ = c.writeControl(appendGoAway(nil, last, code))
}

func (c *conn) teardown() {
	c.mu.Lock()
	c.done = true
	for _, st := range c.streams {
		c.endLocked(st, errConnClosed)
	}
	if c.idle != nil {
		c.idle.Stop()
	}
	c.mu.Unlock()
	c.cancel()
	_ = c.nc.Close()
}

// resetID resets stream id with code (a stream error of the client's).
func (c *conn) resetID(id uint32, code http2.ErrCode, err error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.mu.Lock()
	if st := c.streams[id]; st != nil {
		c.endLocked(st, err)
	}
	connInc := c.in.refund(0)
	c.mu.Unlock()
	b := appendRSTStream(c.frame[:0], id, code)
	if connInc > 0 {
		b = appendWindowUpdate(b, 0, uint32(connInc))
	}
	c.frame = b
	_ = c.write(nil, b)
}

// writeControl writes the frames b, which are not a stream's.
func (c *conn) writeControl(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.write(nil, b)
}

// writeWindowUpdates gives the client back streamInc bytes of stream
// id's window and connInc of the connection's.
func (c *conn) writeWindowUpdates(id uint32, streamInc, connInc int32) error {
	if streamInc <= 0 && connInc <= 0 {
		return nil
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	b := c.frame[:0]
	if streamInc > 0 {
		b = appendWindowUpdate(b, id, uint32(streamInc))
	}
	if connInc > 0 {
		b = appendWindowUpdate(b, 0, uint32(connInc))
	}
	c.frame = b
	return c.write(nil, b)
}

// writeLast writes b, whose last frame ends st's response, for st. If
// the client has ended its side, st is closed before the write (a
// client may open its next stream as soon as it reads this one's end,
// and must not find it counted); and if the write then fails with
// nothing sent, the client learns of the end by an RST_STREAM. The
// caller holds wmu.
func (c *conn) writeLast(st *stream, b []byte) error {
	c.mu.Lock()
	closing := st.remoteClosed && !st.closed
	if closing {
		c.endLocked(st, errStreamEnded)
	}
	c.mu.Unlock()
	err := c.write(st, b)
	if err != nil && closing && !c.broken {
		c.frame = appendRSTStream(c.frame[:0], st.id, http2.ErrCodeCancel)
		_ = c.write(nil, c.frame)
	}
	return err
}

// write writes whole frames b to the socket, for st (under its write
// deadline) or, with st nil, for the connection. The caller holds wmu.
// A write that fails before any byte went out (st's deadline had
// passed) fails st only; one that fails partway breaks the connection.
func (c *conn) write(st *stream, b []byte) error {
	if c.broken {
		return errConnClosed
	}
	c.mu.Lock()
	// A control frame (an ack, a window update) waits at most
	// controlWriteTimeout for a client that reads nothing: the reader
	// that writes it must not wait for ever.
	d := time.Now().Add(controlWriteTimeout)
	if st != nil {
		d = st.deadline
	}
	c.writing = st
	if !d.Equal(c.wdeadline) {
		_ = c.nc.SetWriteDeadline(d)
		c.wdeadline = d
	}
	c.mu.Unlock()
	n, err := c.nc.Write(b)
	c.mu.Lock()
	c.writing = nil
	drained := c.drained
	c.mu.Unlock()
	if drained {
		_ = c.nc.Close() // the last stream's last frames are out
	}
	if err == nil {
		return nil
	}
	if n > 0 || st == nil || !errors.Is(err, os.ErrDeadlineExceeded) {
		c.broken = true
		_ = c.nc.Close() // serve ends, and with it every stream
	}
	return err
}

// stream is one request and its response.
type stream struct {
	c      *conn
	id     uint32
	cancel context.CancelFunc
	rw     responseWriter
	body   requestBody
	// expectContinue: the client waits for a 100 before it sends its
	// body; the first Read of the body sends it.
	expectContinue atomic.Bool
	finalSent      bool // under c.wmu: the final response headers went out

	// Under c.mu:
	sendWindow   int64
	in           inflow // its receive window
	rbuf         []byte // the request body received; rbuf[r:] is unread
	declared     int64  // the request's content-length, or -1
	received     int64  // the body's bytes received
	r            int
	bodyErr      error // once rbuf is read: io.EOF after END_STREAM, or why it ended
	bodyClosed   bool  // the handler closed the body: what comes is discarded
	remoteClosed bool  // no more DATA: END_STREAM came, or the stream ended
	closed       bool  // ended, and out of c.streams
	err          error // why it ended
	deadline     time.Time
}

// request builds the http.Request of the HEADERS f.
func (st *stream) request(f *http2.MetaHeadersFrame) (*http.Request, error) {
	method, path := f.PseudoValue("method"), f.PseudoValue("path")
	scheme, authority := f.PseudoValue("scheme"), f.PseudoValue("authority")
	if method == "" || path == "" || scheme == "" || method == "CONNECT" || f.PseudoValue("protocol") != "" {
		return nil, errors.New("missing or unsupported pseudo-header")
	}
	fields := f.RegularFields()
	header := make(http.Header, len(fields))
	for _, hf := range fields {
		switch hf.Name {
		case "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade":
			return nil, fmt.Errorf("connection-specific header %q", hf.Name)
		case "te":
			if hf.Value != "trailers" {
				return nil, errors.New(`"te" other than "trailers"`)
			}
		}
		k := http.CanonicalHeaderKey(hf.Name)
		header[k] = append(header[k], hf.Value)
	}
	if cookies := header["Cookie"]; len(cookies) > 1 {
		header["Cookie"] = []string{joinCookies(cookies)}
	}
	if authority == "" {
		authority = header.Get("Host")
	}
	delete(header, "Host")
	// As net/http's server parses a request's target ("//x" is a path).
	u := &url.URL{Path: "*"}
	if path != "*" {
		var err error
		if u, err = url.ParseRequestURI(path); err != nil {
			return nil, err
		}
	}
	var cl int64 = -1
	if v := header.Get("Content-Length"); v != "" {
		var err error
		if cl, err = strconv.ParseInt(v, 10, 64); err != nil || cl < 0 {
			return nil, errors.New("bad content-length")
		}
	}
	ctx, cancel := context.WithCancel(st.c.ctx)
	req, err := http.NewRequestWithContext(ctx, method, "/", nil)
	if err != nil {
		cancel()
		return nil, err
	}
	req.URL = u
	st.cancel = cancel
	req.Proto, req.ProtoMajor, req.ProtoMinor = "HTTP/2.0", 2, 0
	req.Header, req.Host, req.RequestURI, req.RemoteAddr = header, authority, path, st.c.remoteAddr
	req.ContentLength = 0
	req.Body = http.NoBody
	st.declared = -1
	if !f.StreamEnded() {
		req.ContentLength = cl
		st.declared = cl
		st.body.st = st
		req.Body = &st.body
		st.expectContinue.Store(strings.EqualFold(header.Get("Expect"), "100-continue"))
	}
	st.rw = responseWriter{st: st, head: method == http.MethodHead, declared: -1}
	if d := st.c.writeFor; d > 0 {
		st.deadline = time.Now().Add(d)
	}
	return req, nil
}

func joinCookies(cookies []string) string {
	n := 0
	for _, c := range cookies {
		n += len(c) + 2
	}
	b := make([]byte, 0, n)
	for i, c := range cookies {
		if i > 0 {
			b = append(b, "; "...)
		}
		b = append(b, c...)
	}
	return string(b)
}

// run serves the request on its own goroutine, then ends the stream.
func (st *stream) run(h http.Handler, req *http.Request) {
	c := st.c
	ok := false
	defer func() {
		c.mu.Lock()
		c.handlers--
		c.mu.Unlock()
		code := http2.ErrCodeNo
		if !ok {
			code = http2.ErrCodeInternal
			if p := recover(); p != nil && p != http.ErrAbortHandler { // nil: runtime.Goexit
				buf := make([]byte, 64<<10)
				buf = buf[:runtime.Stack(buf, false)]
				c.s.logf("h2cserver: panic serving %v: %v\n%s", c.remoteAddr, p, buf)
			}
		} else if st.rw.finish() != nil {
			code = http2.ErrCodeCancel
		}
		st.end(code)
	}()
	h.ServeHTTP(&st.rw, req)
	ok = true
}

// end ends st after its handler: an RST_STREAM of code unless its
// response went out whole and the client had sent all of its request.
func (st *stream) end(code http2.ErrCode) {
	c := st.c
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.mu.Lock()
	if st.closed {
		c.mu.Unlock()
		return
	}
	// NO_ERROR: the response is whole, and the rest of the request is
	// not wanted (RFC 9113, section 8.1).
	reset := code != http2.ErrCodeNo || !st.remoteClosed
	c.endLocked(st, errStreamEnded)
	connInc := c.in.refund(0)
	c.mu.Unlock()
	b := c.frame[:0]
	if reset {
		b = appendRSTStream(b, st.id, code)
	}
	if connInc > 0 {
		b = appendWindowUpdate(b, 0, uint32(connInc))
	}
	c.frame = b
	if len(b) > 0 {
		_ = c.write(nil, b)
	}
	c.closeIfDrained()
}

// setWriteDeadline sets the deadline of st's writes, and of the one it
// is making now.
func (st *stream) setWriteDeadline(t time.Time) {
	c := st.c
	c.mu.Lock()
	defer c.mu.Unlock()
	st.deadline = t
	if c.writing == st {
		_ = c.nc.SetWriteDeadline(t)
		c.wdeadline = t
	}
	c.cond.Broadcast() // a writer waiting for window looks at the time again
}

// takeWindow waits until st may send some of want bytes and returns how
// many (at most a frame's worth).
func (st *stream) takeWindow(want int) (int, error) {
	c := st.c
	c.mu.Lock()
	defer c.mu.Unlock()
	var timer *time.Timer
	var timerFor time.Time
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		if st.err != nil {
			return 0, st.err
		}
		d := st.deadline
		if !d.IsZero() && !time.Now().Before(d) {
			return 0, os.ErrDeadlineExceeded
		}
		if n := min(int64(want), int64(c.peerFrame), c.sendWindow, st.sendWindow); n > 0 {
			c.sendWindow -= n
			st.sendWindow -= n
			return int(n), nil
		}
		if !d.IsZero() && !d.Equal(timerFor) {
			if timer != nil {
				timer.Stop()
			}
			timer, timerFor = time.AfterFunc(time.Until(d), func() {
				c.mu.Lock()
				c.cond.Broadcast()
				c.mu.Unlock()
			}), d
		}
		c.cond.Wait()
	}
}

// requestBody is a request's body: what the client's DATA frames carry.
type requestBody struct{ st *stream }

func (b *requestBody) Read(p []byte) (int, error) {
	st := b.st
	c := st.c
	if st.expectContinue.CompareAndSwap(true, false) {
		_ = c.writeHeaders(st, http.StatusContinue, nil, nil, false)
	}
	c.mu.Lock()
	for st.r == len(st.rbuf) && st.bodyErr == nil && !st.bodyClosed {
		c.cond.Wait()
	}
	if st.bodyClosed {
		c.mu.Unlock()
		return 0, http.ErrBodyReadAfterClose
	}
	if st.r == len(st.rbuf) {
		err := st.bodyErr
		c.mu.Unlock()
		return 0, err
	}
	n := copy(p, st.rbuf[st.r:])
	st.r += n
	if st.r == len(st.rbuf) {
		st.rbuf, st.r = st.rbuf[:0], 0
		if cap(st.rbuf) > keptBuffer {
			st.rbuf = nil
		}
	}
	var streamInc int32
	if !st.remoteClosed {
		streamInc = st.in.refund(int32(n))
	}
	connInc := c.in.refund(int32(n))
	c.mu.Unlock()
	_ = c.writeWindowUpdates(st.id, streamInc, connInc)
	return n, nil
}

// Close discards the rest of the body: what the client still sends is
// given back to its windows as it comes.
func (b *requestBody) Close() error {
	st := b.st
	c := st.c
	c.mu.Lock()
	if st.bodyClosed {
		c.mu.Unlock()
		return nil
	}
	st.bodyClosed = true
	unread := int32(len(st.rbuf) - st.r)
	st.rbuf, st.r = nil, 0
	var streamInc int32
	if !st.remoteClosed {
		streamInc = st.in.refund(unread)
	}
	connInc := c.in.refund(unread)
	c.cond.Broadcast()
	c.mu.Unlock()
	_ = c.writeWindowUpdates(st.id, streamInc, connInc)
	return nil
}

func appendFrameHeader(b []byte, length int, typ http2.FrameType, flags http2.Flags, id uint32) []byte {
	return append(b, byte(length>>16), byte(length>>8), byte(length), byte(typ), byte(flags),
		byte(id>>24)&0x7f, byte(id>>16), byte(id>>8), byte(id))
}

func putFrameHeader(b []byte, length int, typ http2.FrameType, flags http2.Flags, id uint32) {
	appendFrameHeader(b[:0], length, typ, flags, id)
}

func appendSetting(b []byte, id http2.SettingID, v uint32) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(id))
	return binary.BigEndian.AppendUint32(b, v)
}

func appendWindowUpdate(b []byte, id, inc uint32) []byte {
	b = appendFrameHeader(b, 4, http2.FrameWindowUpdate, 0, id)
	return binary.BigEndian.AppendUint32(b, inc&0x7fffffff)
}

func appendRSTStream(b []byte, id uint32, code http2.ErrCode) []byte {
	b = appendFrameHeader(b, 4, http2.FrameRSTStream, 0, id)
	return binary.BigEndian.AppendUint32(b, uint32(code))
}

func appendGoAway(b []byte, last uint32, code http2.ErrCode) []byte {
	b = appendFrameHeader(b, 8, http2.FrameGoAway, 0, 0)
	b = binary.BigEndian.AppendUint32(b, last&0x7fffffff)
	return binary.BigEndian.AppendUint32(b, uint32(code))
}
