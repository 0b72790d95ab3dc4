package h2cserver

import (
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/net/http2"
)

// serverConn waits for s's one HTTP/2 connection and returns it.
func serverConn(t *testing.T, s *Server) *conn {
	t.Helper()
	var hc *conn
	waitFor(t, "the HTTP/2 connection", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, c := range s.conns {
			if c != nil {
				hc = c
				return true
			}
		}
		return false
	})
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
		waitFor(t, "the chunk buffered", func() bool { u, _ := buffered(); return u == maxFrameSize+1 })
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
