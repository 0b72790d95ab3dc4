package h2cserver

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/holdfast-dev/holdfast/internal/testutil"
)

// serverConn waits for s's one HTTP/2 connection and returns it.
func serverConn(t *testing.T, s *Server) *conn {
	t.Helper()
	var hc *conn
	testutil.Eventually(t, waitLimit, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, c := range s.conns {
			if c != nil {
				hc = c
				return true
			}
		}
		return false
	}, "the HTTP/2 connection")
	return hc
}

// settled reads until the server has acknowledged the client's SETTINGS:
// from then on, its reader writes nothing unless asked.
func (c *rawClient) settled() {
	c.t.Helper()
	c.until("SETTINGS ack", func(f http2.Frame) bool {
		s, ok := f.(*http2.SettingsFrame)
		return ok && s.IsAck()
	})
}

// connWindowUpdates reads until the PING ack of data, and returns the sum
// of the connection's WINDOW_UPDATEs before it.
func (c *rawClient) connWindowUpdates(data [8]byte) int {
	c.t.Helper()
	if err := c.fr.WritePing(false, data); err != nil {
		c.t.Fatal(err)
	}
	sum := 0
	c.until("PING ack", func(f http2.Frame) bool {
		switch f := f.(type) {
		case *http2.WindowUpdateFrame:
			if f.StreamID == 0 {
				sum += int(f.Increment)
			}
		case *http2.PingFrame:
			return f.IsAck() && f.Data == data
		}
		return false
	})
	return sum
}

// stackHas reports whether some goroutine's stack holds every one of subs.
func stackHas(subs ...string) bool {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n") {
		all := true
		for _, s := range subs {
			all = all && strings.Contains(g, s)
		}
		if all {
			return true
		}
	}
	return false
}

var postFields = []string{":method", "POST", ":scheme", "http", ":authority", "x", ":path", "/"}

// A client's RST_STREAM of a stream whose handler had not read its body
// must give that body's bytes back to the connection's window: otherwise
// no stream of the connection can send again once the window is used up.
func TestResetStreamGivesBackItsUnreadBody(t *testing.T) {
	_, base, _ := start(t, &http.Server{
		HTTP2: &http.HTTP2Config{MaxReceiveBufferPerStream: 64 << 10, MaxReceiveBufferPerConnection: 64 << 10},
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			<-r.Context().Done() // reads nothing
		}),
	})
	c := dialRaw(t, base, true)
	c.settled() // and the server's WINDOW_UPDATE of its preface
	c.headers(1, false, postFields...)
	chunk := make([]byte, maxFrameSize)
	for range (64 << 10) / maxFrameSize { // the connection's whole window
		if err := c.fr.WriteData(1, false, chunk); err != nil {
			t.Fatal(err)
		}
	}
	if got := c.connWindowUpdates([8]byte{1}); got != 0 {
		t.Fatalf("WINDOW_UPDATE of %d for bytes nobody read", got)
	}
	if err := c.fr.WriteRSTStream(1, http2.ErrCodeCancel); err != nil {
		t.Fatal(err)
	}
	if got := c.connWindowUpdates([8]byte{2}); got != 64<<10 {
		t.Fatalf("after the reset, the connection's window grew by %d, want %d", got, 64<<10)
	}
}

// A handler that reads its body more slowly than it comes, but never
// falls far behind, must not make the stream's buffer grow for ever.
func TestSlowReaderBufferStaysBounded(t *testing.T) {
	const rounds = 64
	step := make(chan struct{})
	read := make(chan error)
	s, base, _ := start(t, &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		buf := make([]byte, maxFrameSize)
		for range step {
			_, err := io.ReadFull(r.Body, buf)
			read <- err
		}
	})})
	c := dialRaw(t, base, true)
	c.settled()
	c.headers(1, false, postFields...)
	hc := serverConn(t, s)
	buffered := func() (unread, capacity int) {
		hc.mu.Lock()
		defer hc.mu.Unlock()
		st := hc.streams[1]
		if st == nil {
			return -1, 0
		}
		return len(st.rbuf) - st.r, cap(st.rbuf)
	}
	if err := c.fr.WriteData(1, false, []byte{0}); err != nil { // one byte ahead of the reader, always
		t.Fatal(err)
	}
	chunk := make([]byte, maxFrameSize)
	maxCap := 0
	for i := range rounds {
		if err := c.fr.WriteData(1, false, chunk); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, waitLimit, func() bool { u, _ := buffered(); return u == maxFrameSize+1 }, "the chunk buffered")
		step <- struct{}{}
		if err := <-read; err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		_, capacity := buffered()
		maxCap = max(maxCap, capacity)
	}
	close(step)
	if maxCap > 4*maxFrameSize {
		t.Fatalf("the stream's buffer grew to %d bytes holding at most %d unread", maxCap, maxFrameSize+1)
	}
}

// A DATA frame taken from the windows but never sent (its stream failed
// first) gives its bytes back to the connection's window.
func TestWriteDeadlineBeforeAnyByteKeepsTheConnectionWindow(t *testing.T) {
	ready := make(chan *http.ResponseController)
	proceed := make(chan struct{})
	result := make(chan error, 1)
	s, base, _ := start(t, &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		_ = rc.Flush() // the headers
		ready <- rc
		<-proceed
		_, _ = w.Write(make([]byte, 1000))
		result <- rc.Flush()
	})})
	c := dialRaw(t, base, true)
	c.settled()
	c.headers(1, true, getFields...)
	rc := <-ready
	hc := serverConn(t, s)
	window := func() int64 {
		hc.mu.Lock()
		defer hc.mu.Unlock()
		return hc.sendWindow
	}
	hc.wmu.Lock() // another stream's write under way, say
	close(proceed)
	testutil.Eventually(t, waitLimit, func() bool { return window() == initialWindow-1000 }, "the frame's window taken")
	_ = rc.SetWriteDeadline(time.Unix(1, 0)) // passes while the frame waits its turn
	hc.wmu.Unlock()
	if err := <-result; !errors.Is(err, errStreamEnded) && !isTimeout(err) {
		t.Fatalf("flush: %v, want a deadline error", err)
	}
	testutil.Eventually(t, waitLimit, func() bool {
		hc.mu.Lock()
		defer hc.mu.Unlock()
		return len(hc.streams) == 0
	}, "the stream ended")
	if got := window(); got != initialWindow {
		t.Fatalf("connection send window %d after a frame that never went out, want %d", got, initialWindow)
	}
}

// When a stream that took connection window fails before sending, a
// stream waiting for that window must be woken.
func TestWindowGivenBackWakesAWaitingStream(t *testing.T) {
	headersOut, aSent := make(chan string, 2), make(chan struct{})
	go1, go3 := make(chan struct{}), make(chan struct{})
	s, base, _ := start(t, &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.(http.Flusher).Flush()
		headersOut <- r.URL.Path
		if r.URL.Path == "/a" {
			_, _ = w.Write(make([]byte, initialWindow-maxFrameSize))
			w.(http.Flusher).Flush()
			close(aSent)
			<-go1
			_, _ = w.Write(make([]byte, maxFrameSize))
			w.(http.Flusher).Flush()
			return
		}
		<-go3
		_, _ = io.WriteString(w, "b")
	})})
	c := dialRaw(t, base, false)
	if err := c.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	c.settled()
	a := append(append([]string(nil), getFields[:6]...), ":path", "/a")
	b := append(append([]string(nil), getFields[:6]...), ":path", "/b")
	c.headers(1, true, a...)
	c.headers(3, true, b...)
	<-headersOut
	<-headersOut
	<-aSent
	hc := serverConn(t, s)
	window := func() int64 {
		hc.mu.Lock()
		defer hc.mu.Unlock()
		return hc.sendWindow
	}
	hc.wmu.Lock()
	close(go1)
	testutil.Eventually(t, waitLimit, func() bool { return window() == 0 }, "stream 1 took the rest of the connection's window")
	close(go3)
	testutil.Eventually(t, waitLimit, func() bool { return stackHas("(*stream).takeWindow", "sync.(*Cond).Wait") }, "stream 3 waiting for window")
	if err := c.fr.WriteRSTStream(1, http2.ErrCodeCancel); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitLimit, func() bool {
		hc.mu.Lock()
		defer hc.mu.Unlock()
		return hc.streams[1] == nil
	}, "stream 1 reset")
	hc.wmu.Unlock()
	c.until("stream 3's DATA", func(f http2.Frame) bool {
		d, ok := f.(*http2.DataFrame)
		return ok && d.StreamID == 3 && bytes.Equal(d.Data(), []byte("b"))
	})
}

// RFC 9113, section 8.1.1: a request whose DATA add up to other than
// its content-length is malformed; its handler must not read it as whole.
func TestRequestBodyShorterOrLongerThanItsContentLength(t *testing.T) {
	got := make(chan error, 1)
	_, base, _ := start(t, &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := io.ReadAll(r.Body)
		got <- err
	})})
	for _, tc := range []struct {
		name string
		cl   string
		data string
	}{
		{"shorter", "10", "hello"},
		{"longer", "3", "hello"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dialRaw(t, base, true)
			c.headers(1, false, append(append([]string(nil), postFields...), "content-length", tc.cl)...)
			if err := c.fr.WriteData(1, true, []byte(tc.data)); err != nil {
				t.Fatal(err)
			}
			if err := <-got; err == nil {
				t.Fatalf("content-length %s, body %q: read whole", tc.cl, tc.data)
			}
		})
	}
}

// The client's END_STREAM counts though the handler closed the body: a
// whole exchange then needs no RST_STREAM, and the stream is not counted
// against the client's limit once its response has ended.
func TestEndStreamAfterBodyCloseEndsTheStreamWithoutReset(t *testing.T) {
	closed, release := make(chan struct{}), make(chan struct{})
	s, base, _ := start(t, &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.Body.Close()
		close(closed)
		<-release
		_, _ = io.WriteString(w, "ok")
	})})
	c := dialRaw(t, base, true)
	c.headers(1, false, postFields...)
	<-closed
	if err := c.fr.WriteData(1, true, []byte("ignored")); err != nil {
		t.Fatal(err)
	}
	c.connWindowUpdates([8]byte{1}) // the DATA has been read
	close(release)
	hc := serverConn(t, s)
	testutil.Eventually(t, waitLimit, func() bool {
		hc.mu.Lock()
		defer hc.mu.Unlock()
		return len(hc.streams) == 0
	}, "the stream ended")
	if err := c.fr.WritePing(false, [8]byte{2}); err != nil {
		t.Fatal(err)
	}
	c.until("PING ack", func(f http2.Frame) bool {
		if r, ok := f.(*http2.RSTStreamFrame); ok {
			t.Fatalf("RST_STREAM %v of a stream both sides ended", r.ErrCode)
		}
		p, ok := f.(*http2.PingFrame)
		return ok && p.IsAck()
	})
}

// Shutdown returns when its context ends, though a write to a client that
// stopped reading is blocked.
func TestShutdownHonoursItsContextWhileAWriteIsBlocked(t *testing.T) {
	s, base, _ := start(t, &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		chunk := make([]byte, 1<<20)
		for {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})})
	c := dialRaw(t, base, false)
	if err := c.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: maxWindow}); err != nil {
		t.Fatal(err)
	}
	if err := c.fr.WriteWindowUpdate(0, maxWindow-initialWindow); err != nil {
		t.Fatal(err)
	}
	c.headers(1, true, getFields...) // and reads nothing
	testutil.Eventually(t, waitLimit, func() bool {
		return stackHas("h2cserver.(*conn).write(", "waitWrite")
	}, "the server's write blocked")
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(ctx) }()
	select {
	case err := <-shut:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Shutdown: %v, want the context's deadline", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Shutdown outlived its context")
	}
}

// An idle connection whose client has stopped reading still closes at its
// idle timeout.
func TestIdleTimeoutClosesAConnectionBlockedOnWrite(t *testing.T) {
	s, base, _ := start(t, &http.Server{IdleTimeout: time.Hour, Handler: protoHandler()})
	c := dialRaw(t, base, true)
	hc := serverConn(t, s)
	// PINGs, unread: their acks fill the socket's buffers.
	var pings bytes.Buffer
	fr := http2.NewFramer(&pings, nil)
	for range 1 << 14 {
		_ = fr.WritePing(false, [8]byte{})
	}
	go func() {
		for {
			if _, err := c.nc.Write(pings.Bytes()); err != nil {
				return
			}
		}
	}()
	testutil.Eventually(t, waitLimit, func() bool {
		return stackHas("h2cserver.(*conn).write(", "waitWrite")
	}, "the server's write blocked")
	go hc.closeIdle() // as the idle timer does
	testutil.Eventually(t, waitLimit, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.conns) == 0
	}, "the connection closed")
}

// A stream reset for sending past its window or its content-length
// gives the frame's bytes back to the connection's window too.
func TestStreamErrorOnDataKeepsTheConnectionWindow(t *testing.T) {
	_, base, _ := start(t, &http.Server{
		HTTP2: &http.HTTP2Config{MaxReceiveBufferPerStream: 16 << 10},
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			<-r.Context().Done() // reads nothing
		}),
	})
	for _, tc := range []struct {
		name   string
		fields []string
	}{
		{"past the stream's window", postFields},
		{"past the content-length", append(append([]string(nil), postFields...), "content-length", "16384")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dialRaw(t, base, true)
			c.settled()
			c.headers(1, false, tc.fields...)
			if err := c.fr.WriteData(1, false, make([]byte, 16<<10)); err != nil {
				t.Fatal(err)
			}
			if err := c.fr.WriteData(1, false, []byte{0}); err != nil {
				t.Fatal(err)
			}
			if got := c.connWindowUpdates([8]byte{1}); got != 16<<10+1 {
				t.Fatalf("the connection's window grew by %d after the stream's reset, want %d", got, 16<<10+1)
			}
		})
	}
}
