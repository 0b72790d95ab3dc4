package h2cserver

import (
	"bytes"
	"net/http"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// responseWriter is a stream's http.ResponseWriter. Only the handler's
// goroutine uses it (SetWriteDeadline excepted). Writes are buffered up
// to a frame and go out on Flush, when the buffer is full, or when the
// handler returns.
type responseWriter struct {
	st          *stream
	header      http.Header // the handler's
	sent        http.Header // the header as WriteHeader found it
	status      int
	wroteHeader bool
	sentHeader  bool
	sentEnd     bool
	done        bool
	head        bool  // a HEAD request: the body is not sent
	declared    int64 // the handler's Content-Length, or -1
	written     int64
	// buf is frameHeaderLen bytes kept for a DATA frame's header, then
	// the body not yet sent.
	buf []byte
	err error // the first write error: every later write fails with it
}

func (w *responseWriter) Header() http.Header {
	if w.header == nil {
		w.header = make(http.Header)
	}
	return w.header
}

func (w *responseWriter) WriteHeader(code int) {
	if code < 100 || code > 999 {
		panic("h2cserver: invalid WriteHeader code " + strconv.Itoa(code))
	}
	if w.wroteHeader || w.done {
		return
	}
	if code < 200 { // informational: out at once, the final one to come
		if w.err == nil {
			w.err = w.st.c.writeHeaders(w.st, code, w.header, nil, false)
		}
		return
	}
	w.wroteHeader = true
	w.status = code
	w.sent = w.header.Clone()
	if cl := w.sent.Get("Content-Length"); cl != "" {
		if n, err := strconv.ParseInt(cl, 10, 64); err == nil && n >= 0 {
			w.declared = n
		}
	}
}

func (w *responseWriter) bodyAllowed() bool {
	return w.status != http.StatusNoContent && w.status != http.StatusNotModified
}

func (w *responseWriter) Write(p []byte) (int, error) { return write(w, p) }

// WriteString is Write without the copy of s into a []byte.
func (w *responseWriter) WriteString(s string) (int, error) { return write(w, s) }

// write is Write's and WriteString's: p is buffered up to a frame, and a
// full frame goes out.
func write[T string | []byte](w *responseWriter, p T) (int, error) {
	if w.done {
		return 0, errStreamEnded
	}
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !w.bodyAllowed() {
		return 0, http.ErrBodyNotAllowed
	}
	if w.err != nil {
		return 0, w.err
	}
	if w.declared >= 0 && w.written+int64(len(p)) > w.declared {
		return 0, http.ErrContentLength
	}
	w.written += int64(len(p))
	if w.head {
		return len(p), nil
	}
	n := len(p)
	for len(p) > 0 {
		if len(w.buf) == 0 {
			w.buf = append(w.buf, make([]byte, frameHeaderLen)...)
		}
		room := maxFrameSize - (len(w.buf) - frameHeaderLen)
		k := min(room, len(p))
		w.buf = append(w.buf, p[:k]...)
		p = p[k:]
		if len(w.buf)-frameHeaderLen == maxFrameSize {
			if err := w.flush(false); err != nil {
				return n - len(p) - k, err
			}
		}
	}
	return n, nil
}

// Flush sends the headers and what is buffered.
func (w *responseWriter) Flush() { _ = w.FlushError() }

// FlushError is Flush for http.ResponseController: it reports why a
// flush failed.
func (w *responseWriter) FlushError() error {
	if w.done {
		return errStreamEnded
	}
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	return w.flush(false)
}

// SetWriteDeadline is for http.ResponseController: a write past t fails,
// and so does one blocked at t. It may be called from any goroutine.
func (w *responseWriter) SetWriteDeadline(t time.Time) error {
	w.st.setWriteDeadline(t)
	return nil
}

// EnableFullDuplex is for http.ResponseController: HTTP/2 is always
// full duplex.
func (w *responseWriter) EnableFullDuplex() error { return nil }

// finish sends what is left and ends the response.
func (w *responseWriter) finish() error {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	err := w.flush(true)
	w.done = true
	w.buf = nil
	return err
}

// flush sends the headers, unless sent, and the buffered body; with end,
// the stream's end too.
func (w *responseWriter) flush(end bool) error {
	if w.err != nil {
		return w.err
	}
	if w.sentEnd {
		return nil
	}
	st := w.st
	data := 0
	if len(w.buf) > 0 {
		data = len(w.buf) - frameHeaderLen
	}
	if !w.sentHeader {
		endNow := end && data == 0
		if err := st.c.writeHeaders(st, w.status, w.sent, w.defaultHeaders(end, data), endNow); err != nil {
			w.err = err
			return err
		}
		w.sentHeader, w.sent = true, nil
		if endNow {
			w.sentEnd = true
			return nil
		}
	}
	if data == 0 && !end {
		return nil
	}
	if len(w.buf) == 0 {
		w.buf = append(w.buf, make([]byte, frameHeaderLen)...)
	}
	err := st.c.writeData(st, w.buf, end)
	w.buf = w.buf[:0]
	if cap(w.buf) > keptBuffer {
		w.buf = nil
	}
	if err != nil {
		w.err = err
		return err
	}
	w.sentEnd = end
	return nil
}

// defaultHeaders returns the fields net/http adds to a response when
// its handler did not set them: Date, a sniffed Content-Type and, for a
// body sent whole with the headers, Content-Length.
func (w *responseWriter) defaultHeaders(end bool, data int) []hpack.HeaderField {
	var f []hpack.HeaderField
	if _, ok := w.sent["Date"]; !ok {
		f = append(f, hpack.HeaderField{Name: "date", Value: time.Now().UTC().Format(http.TimeFormat)})
	}
	if !w.bodyAllowed() {
		return f
	}
	_, ct := w.sent["Content-Type"]
	_, ce := w.sent["Content-Encoding"]
	if !ct && !ce && data > 0 {
		f = append(f, hpack.HeaderField{Name: "content-type", Value: http.DetectContentType(w.buf[frameHeaderLen:])})
	}
	if _, ok := w.sent["Content-Length"]; !ok && end && !w.head {
		f = append(f, hpack.HeaderField{Name: "content-length", Value: strconv.Itoa(data)})
	}
	return f
}

// writeHeaders sends st's response headers (a HEADERS frame, and
// CONTINUATION frames for a block longer than a frame).
func (c *conn) writeHeaders(st *stream, status int, h http.Header, extra []hpack.HeaderField, end bool) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.mu.Lock()
	err, frameSize := st.err, c.peerFrame
	c.mu.Unlock()
	if err != nil {
		return err
	}
	if status < 200 && st.finalSent {
		return nil // an informational answer after the final one is none
	}
	if status >= 200 {
		st.finalSent = true
		st.expectContinue.Store(false) // the answer comes first: no 100 now
	}
	c.hbuf.Reset()
	_ = c.henc.WriteField(hpack.HeaderField{Name: ":status", Value: strconv.Itoa(status)})
	for k, vv := range h {
		name, ok := c.s.lowerHeader(k)
		if !ok {
			continue
		}
		for _, v := range vv {
			if httpguts.ValidHeaderFieldValue(v) {
				_ = c.henc.WriteField(hpack.HeaderField{Name: name, Value: v})
			}
		}
	}
	for _, f := range extra {
		_ = c.henc.WriteField(f)
	}
	block := c.hbuf.Bytes()
	b := c.frame[:0]
	typ := http2.FrameHeaders
	for first := true; first || len(block) > 0; first = false {
		n := min(len(block), frameSize)
		var flags http2.Flags
		if n == len(block) {
			flags |= http2.FlagHeadersEndHeaders
		}
		if first && end {
			flags |= http2.FlagHeadersEndStream
		}
		b = appendFrameHeader(b, n, typ, flags, st.id)
		b = append(b, block[:n]...)
		block = block[n:]
		typ = http2.FrameContinuation
	}
	c.frame = b
	if end {
		err = c.writeLast(st, b)
	} else {
		err = c.write(st, b)
	}
	if cap(c.frame) > keptBuffer {
		c.frame = nil
	}
	if c.hbuf.Cap() > keptBuffer {
		c.hbuf = bytes.Buffer{}
	}
	return err
}

// writeData sends buf[frameHeaderLen:] as st's DATA frames, as the
// windows allow, writing each frame's header over the bytes before its
// payload (kept for the first, already sent for the others); with end,
// the last frame ends the stream.
func (c *conn) writeData(st *stream, buf []byte, end bool) error {
	off := frameHeaderLen
	for {
		n := 0
		if off < len(buf) {
			var err error
			if n, err = st.takeWindow(len(buf) - off); err != nil {
				return err
			}
		}
		last := off+n == len(buf)
		var flags http2.Flags
		if end && last {
			flags = http2.FlagDataEndStream
		}
		putFrameHeader(buf[off-frameHeaderLen:off], n, http2.FrameData, flags, st.id)
		c.wmu.Lock()
		c.mu.Lock()
		err := st.err
		c.mu.Unlock()
		switch {
		case err != nil:
		case end && last:
			err = c.writeLast(st, buf[off-frameHeaderLen:off+n])
		default:
			err = c.write(st, buf[off-frameHeaderLen:off+n])
		}
		if err != nil && !c.broken && n > 0 {
			// Not sent (the stream ended, or its deadline passed
			// before any byte went out): the windows stay, and a
			// stream waiting for them may go on.
			c.mu.Lock()
			c.sendWindow += int64(n)
			st.sendWindow += int64(n)
			c.cond.Broadcast()
			c.mu.Unlock()
		}
		c.wmu.Unlock()
		if err != nil || last {
			return err
		}
		off += n
	}
}

// lowerHeader returns the HTTP/2 field name of header key k, and false
// for one a response must not carry (RFC 9113, section 8.2.2). Names are
// kept once computed: a server's handlers use a few.
func (s *Server) lowerHeader(k string) (string, bool) {
	if v, ok := s.lower.Load(k); ok {
		name := v.(string)
		return name, name != ""
	}
	name := strings.ToLower(k)
	switch name {
	case "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "te":
		name = ""
	default:
		if !httpguts.ValidHeaderFieldName(name) {
			name = ""
		}
	}
	if s.lowerCount.Add(1) <= maxLowerHeaders {
		s.lower.Store(k, name)
	}
	return name, name != ""
}

// maxLowerHeaders bounds lowerHeader's cache: a handler that copies its
// clients' header names must not grow it for ever.
const maxLowerHeaders = 1000
