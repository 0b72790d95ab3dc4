package h2cserver

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/holdfast-dev/holdfast/internal/testutil"
)

// smallWindowClient is an h2c client that lets the server send it at most
// 64 KiB at a time, per stream and in all: a large response then waits on
// its windows.
func smallWindowClient(t *testing.T) *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &p, HTTP2: &http.HTTP2Config{
		MaxReceiveBufferPerStream: 64 << 10, MaxReceiveBufferPerConnection: 64 << 10,
	}}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// pattern is n bytes that a lost, doubled or reordered chunk would change.
func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i/251)
	}
	return b
}

func TestLargeBodiesBothWaysUnderSmallWindows(t *testing.T) {
	const size = 3<<20 + 12345
	want := pattern(size)
	_, base, _ := start(t, &http.Server{
		HTTP2: &http.HTTP2Config{MaxReceiveBufferPerStream: 64 << 10, MaxReceiveBufferPerConnection: 64 << 10},
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPost {
				h := sha256.New()
				n, err := io.Copy(h, r.Body)
				fmt.Fprintf(w, "%d %x %v", n, h.Sum(nil), err)
				return
			}
			// In uneven writes, some larger than a frame.
			for off := 0; off < len(want); {
				n := min(len(want)-off, 1+off%40000)
				if _, err := w.Write(want[off : off+n]); err != nil {
					return
				}
				off += n
			}
		}),
	})
	c := smallWindowClient(t)
	resp, err := c.Get(base + "/")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("response: %d bytes (want %d), equal %v, err %v", len(got), len(want), bytes.Equal(got, want), err)
	}
	if resp.ProtoMajor != 2 {
		t.Fatalf("proto %s", resp.Proto)
	}

	body := post(t, c, base+"/", bytes.NewReader(want))
	if w := fmt.Sprintf("%d %x <nil>", size, sha256.Sum256(want)); body != w {
		t.Fatalf("request body as the server read it: %q, want %q", body, w)
	}
}

func TestManyStreamsShareOneConnection(t *testing.T) {
	// Counted by the requests' remote addresses, not by accepted
	// connections: net/http's client may race a dial of its own for h2c
	// and close it unused.
	var mu sync.Mutex
	peers := map[string]bool{}
	_, base, _ := start(t, &http.Server{
		ErrorLog: log.New(testWriter{t}, "", 0),
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			peers[r.RemoteAddr] = true
			mu.Unlock()
			body, _ := io.ReadAll(r.Body)
			fmt.Fprintf(w, "%s:%s", r.URL.Query().Get("i"), body)
		}),
	})
	_, h2 := clients(t)
	if got := get(t, h2, base+"/?i=warm"); got != "warm:" { // one connection, then many streams on it
		t.Fatalf("got %q", got)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for i := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := h2.Post(fmt.Sprintf("%s/?i=%d", base, i), "text/plain", strings.NewReader(strings.Repeat("x", i)))
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if want := fmt.Sprintf("%d:%s", i, strings.Repeat("x", i)); string(b) != want {
				errs <- fmt.Errorf("stream %d: %q", i, b)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(peers) != 1 {
		t.Errorf("requests came over %d connections, want 1", len(peers))
	}
}

func TestResponseHeadersAsNetHTTPSendsThem(t *testing.T) {
	_, base, _ := start(t, &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/html":
			_, _ = io.WriteString(w, "<html><body>hi</body></html>")
		case "/typed":
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("X-Many", "a")
			w.Header().Add("X-Many", "b")
			w.Header().Set("Connection", "close") // not HTTP/2's: dropped
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, `{}`)
			w.Header().Set("X-Late", "1") // after WriteHeader: not sent
		case "/notmodified":
			w.WriteHeader(http.StatusNotModified)
			if _, err := w.Write([]byte("x")); !errors.Is(err, http.ErrBodyNotAllowed) {
				panic(fmt.Sprintf("write to a 304: %v", err))
			}
		case "/length":
			w.Header().Set("Content-Length", "3")
			if _, err := io.WriteString(w, "abcd"); !errors.Is(err, http.ErrContentLength) {
				panic(fmt.Sprintf("write past Content-Length: %v", err))
			}
			_, _ = io.WriteString(w, "abc")
		case "/flushed":
			_, _ = io.WriteString(w, "a")
			w.(http.Flusher).Flush()
			_, _ = io.WriteString(w, "b")
		}
	})})
	_, h2 := clients(t)
	for _, tc := range []struct {
		path, body, ctype string
		status            int
		length            int64
		check             func(http.Header) string
	}{
		{path: "/html", body: "<html><body>hi</body></html>", ctype: "text/html; charset=utf-8", status: 200, length: 28},
		{path: "/typed", body: "{}", ctype: "application/json", status: 201, length: 2, check: func(h http.Header) string {
			if got := h.Values("X-Many"); len(got) != 2 || got[0] != "a" || got[1] != "b" {
				return fmt.Sprintf("X-Many %q", got)
			}
			if h.Get("Connection") != "" || h.Get("X-Late") != "" {
				return fmt.Sprintf("Connection %q, X-Late %q", h.Get("Connection"), h.Get("X-Late"))
			}
			return ""
		}},
		{path: "/notmodified", status: 304, length: 0},
		{path: "/length", body: "abc", status: 200, length: 3, ctype: "text/plain; charset=utf-8"},
		{path: "/flushed", body: "ab", status: 200, length: -1, ctype: "text/plain; charset=utf-8"},
	} {
		t.Run(tc.path, func(t *testing.T) {
			resp, err := h2.Get(base + tc.path)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if err != nil || string(b) != tc.body || resp.StatusCode != tc.status || resp.ContentLength != tc.length {
				t.Errorf("got %d %q (length %d, %v), want %d %q (length %d)", resp.StatusCode, b, resp.ContentLength, err, tc.status, tc.body, tc.length)
			}
			if got := resp.Header.Get("Content-Type"); got != tc.ctype {
				t.Errorf("Content-Type %q, want %q", got, tc.ctype)
			}
			if _, err := http.ParseTime(resp.Header.Get("Date")); err != nil {
				t.Errorf("Date %q: %v", resp.Header.Get("Date"), err)
			}
			if tc.check != nil {
				if msg := tc.check(resp.Header); msg != "" {
					t.Error(msg)
				}
			}
		})
	}
	resp, err := h2.Head(base + "/html")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if len(b) != 0 || resp.StatusCode != 200 {
		t.Errorf("HEAD: %d %q", resp.StatusCode, b)
	}
}

func TestClientCancelEndsTheHandler(t *testing.T) {
	ended := make(chan error, 1)
	_, base, _ := start(t, &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		for {
			if _, err := io.WriteString(w, "tick\n"); err != nil {
				ended <- err
				return
			}
			if err := rc.Flush(); err != nil {
				ended <- err
				return
			}
			select {
			case <-r.Context().Done():
				ended <- r.Context().Err()
				return
			case <-time.After(time.Millisecond):
			}
		}
	})})
	_, h2 := clients(t)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/", nil)
	resp, err := h2.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(resp.Body, buf); err != nil || string(buf) != "tick\n" {
		t.Fatalf("first tick: %q %v", buf, err)
	}
	cancel()
	resp.Body.Close()
	select {
	case err := <-ended:
		if err == nil {
			t.Fatal("handler ended without an error")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the handler went on after the client cancelled")
	}
}

func TestHandlerPanicResetsOnlyItsStream(t *testing.T) {
	_, base, _ := start(t, &http.Server{
		ErrorLog: discardLog(),
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/panic" {
				_, _ = io.WriteString(w, "partial")
				w.(http.Flusher).Flush()
				panic("boom")
			}
			_, _ = io.WriteString(w, "ok")
		}),
	})
	_, h2 := clients(t)
	if got := get(t, h2, base+"/"); got != "ok" {
		t.Fatalf("got %q", got)
	}
	resp, err := h2.Get(base + "/panic")
	if err == nil {
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	if err == nil {
		t.Fatal("a panicking handler's response read whole")
	}
	if got := get(t, h2, base+"/"); got != "ok" {
		t.Fatalf("after the panic: %q", got)
	}
}

func TestWriteDeadlineBreaksABlockedWrite(t *testing.T) {
	blocked := make(chan *http.ResponseController, 1)
	result := make(chan error, 1)
	_, base, _ := start(t, &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		chunk := pattern(32 << 10)
		var once sync.Once
		for {
			_, err := w.Write(chunk)
			if err == nil {
				err = rc.Flush()
			}
			if err != nil {
				result <- err
				return
			}
			once.Do(func() { blocked <- rc })
		}
	})})
	c := smallWindowClient(t)
	resp, err := c.Get(base + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rc := <-blocked // the client reads nothing more: its window runs out
	if err := rc.SetWriteDeadline(time.Unix(1, 0)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-result:
		if !errors.Is(err, errStreamEnded) && !errors.Is(err, errConnClosed) && !errors.Is(err, errClientReset) && !isTimeout(err) {
			t.Fatalf("write failed with %v, want a deadline error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a write blocked on its window outlived its deadline")
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func TestBodyClosedUnreadLetsTheClientFinish(t *testing.T) {
	_, base, _ := start(t, &http.Server{
		HTTP2: &http.HTTP2Config{MaxReceiveBufferPerStream: 64 << 10, MaxReceiveBufferPerConnection: 64 << 10},
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/close" {
				buf := make([]byte, 10)
				_, _ = io.ReadFull(r.Body, buf)
				_ = r.Body.Close()
				if _, err := r.Body.Read(buf); !errors.Is(err, http.ErrBodyReadAfterClose) {
					panic(fmt.Sprintf("read after close: %v", err))
				}
			}
			_, _ = io.WriteString(w, "done")
		}),
	})
	_, h2 := clients(t)
	for range 3 { // the connection's window must come back each time
		if got := post(t, h2, base+"/close", bytes.NewReader(pattern(1<<20))); got != "done" {
			t.Fatalf("got %q", got)
		}
	}
	if got := get(t, h2, base+"/"); got != "done" {
		t.Fatalf("after: %q", got)
	}
}

func TestRequestTrailersEndTheBody(t *testing.T) {
	_, base, _ := start(t, &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %v", b, err)
	})})
	_, h2 := clients(t)
	pr, pw := io.Pipe()
	req, _ := http.NewRequest(http.MethodPost, base+"/", pr)
	req.Trailer = http.Header{"X-Sum": nil}
	go func() {
		_, _ = io.WriteString(pw, "body")
		req.Trailer.Set("X-Sum", "1")
		_ = pw.Close()
	}()
	resp, err := h2.Do(req)
	if got := readAll(t, resp, err); got != "body <nil>" {
		t.Fatalf("got %q", got)
	}
}

func TestIdleConnectionIsClosed(t *testing.T) {
	var closed atomic.Int32
	_, base, _ := start(t, &http.Server{
		IdleTimeout: 50 * time.Millisecond,
		ConnState: func(_ net.Conn, st http.ConnState) {
			if st == http.StateClosed {
				closed.Add(1)
			}
		},
		Handler: protoHandler(),
	})
	_, h2 := clients(t)
	if got := get(t, h2, base+"/"); got != "HTTP/2.0 GET " {
		t.Fatalf("got %q", got)
	}
	testutil.Eventually(t, waitLimit, func() bool { return closed.Load() == 1 }, "the idle connection is closed")
	if got := get(t, h2, base+"/"); got != "HTTP/2.0 GET " { // the client dials again
		t.Fatalf("after: %q", got)
	}
}

// rawClient is an HTTP/2 client of raw frames: the preface and SETTINGS
// are sent, and the server's SETTINGS read.
type rawClient struct {
	t    *testing.T
	nc   net.Conn
	fr   *http2.Framer
	hbuf bytes.Buffer
	henc *hpack.Encoder
}

func dialRaw(t *testing.T, base string, settings bool) *rawClient {
	t.Helper()
	nc, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	c := &rawClient{t: t, nc: nc, fr: http2.NewFramer(nc, nc)}
	c.henc = hpack.NewEncoder(&c.hbuf)
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if _, err := io.WriteString(nc, preface); err != nil {
		t.Fatal(err)
	}
	if settings {
		if err := c.fr.WriteSettings(); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

func (c *rawClient) headers(id uint32, end bool, fields ...string) {
	c.t.Helper()
	c.hbuf.Reset()
	for i := 0; i+1 < len(fields); i += 2 {
		_ = c.henc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.hbuf.Bytes(), EndStream: end, EndHeaders: true}); err != nil {
		c.t.Fatal(err)
	}
}

var getFields = []string{":method", "GET", ":scheme", "http", ":authority", "x", ":path", "/"}

// until reads frames until match accepts one, and fails the test if the
// connection ends first.
func (c *rawClient) until(what string, match func(http2.Frame) bool) http2.Frame {
	c.t.Helper()
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			c.t.Fatalf("waiting for %s: %v", what, err)
		}
		if match(f) {
			return f
		}
	}
}

// goAway reads until the server's GOAWAY and then the end of the
// connection, and returns the GOAWAY's code.
func (c *rawClient) goAway() http2.ErrCode {
	c.t.Helper()
	ga := c.until("GOAWAY", func(f http2.Frame) bool { _, ok := f.(*http2.GoAwayFrame); return ok }).(*http2.GoAwayFrame)
	code := ga.ErrCode
	for {
		if _, err := c.fr.ReadFrame(); err != nil {
			if isTimeout(err) {
				c.t.Fatal("the connection stayed open after GOAWAY")
			}
			return code
		}
	}
}

func TestProtocolErrors(t *testing.T) {
	_, base, _ := start(t, &http.Server{ErrorLog: discardLog(), Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/noread" {
			<-r.Context().Done() // its body fills the windows
			return
		}
		protoHandler().ServeHTTP(w, r)
	})})
	noread := append(append([]string(nil), getFields[:6]...), ":path", "/noread")
	for _, tc := range []struct {
		name     string
		settings bool
		send     func(c *rawClient)
		want     http2.ErrCode
	}{
		{"first frame not SETTINGS", false, func(c *rawClient) { _ = c.fr.WritePing(false, [8]byte{}) }, http2.ErrCodeProtocol},
		{"even stream", true, func(c *rawClient) { c.headers(2, true, getFields...) }, http2.ErrCodeProtocol},
		{"DATA on an idle stream", true, func(c *rawClient) { _ = c.fr.WriteData(5, true, []byte("x")) }, http2.ErrCodeProtocol},
		{"stream ids going back", true, func(c *rawClient) {
			c.headers(5, true, getFields...)
			c.headers(3, true, getFields...)
		}, http2.ErrCodeStreamClosed},
		{"more than the connection's window", true, func(c *rawClient) {
			// Each stream within its own window, all of them past the
			// connection's.
			chunk := make([]byte, maxFrameSize)
			perStream := defaultStreamWindow / maxFrameSize
			for id := uint32(1); id < 2*(defaultConnWindow/defaultStreamWindow+1); id += 2 {
				c.headers(id, false, noread...)
				for range perStream {
					if c.fr.WriteData(id, false, chunk) != nil {
						return
					}
				}
			}
		}, http2.ErrCodeFlowControl},
		{"more than a stream's window", true, func(c *rawClient) {
			c.headers(1, false, noread...)
			chunk := make([]byte, maxFrameSize)
			for range defaultStreamWindow/maxFrameSize + 1 {
				_ = c.fr.WriteData(1, false, chunk)
			}
			// A stream error: the connection goes on, until this.
			_ = c.fr.WritePushPromise(http2.PushPromiseParam{StreamID: 1, PromiseID: 2, BlockFragment: []byte{0x82}, EndHeaders: true})
		}, http2.ErrCodeProtocol},
		{"a client's PUSH_PROMISE", true, func(c *rawClient) {
			_ = c.fr.WritePushPromise(http2.PushPromiseParam{StreamID: 1, PromiseID: 2, BlockFragment: []byte{0x82}, EndHeaders: true})
		}, http2.ErrCodeProtocol},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dialRaw(t, base, tc.settings)
			tc.send(c)
			if got := c.goAway(); got != tc.want {
				t.Fatalf("GOAWAY %v, want %v", got, tc.want)
			}
		})
	}
}

func TestStreamErrorsKeepTheConnection(t *testing.T) {
	release := make(chan struct{})
	_, base, _ := start(t, &http.Server{
		HTTP2: &http.HTTP2Config{MaxConcurrentStreams: 1},
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/hold" {
				<-release
			}
			_, _ = io.WriteString(w, "ok")
		}),
	})
	c := dialRaw(t, base, true)
	rst := func(id uint32) http2.ErrCode {
		return c.until(fmt.Sprintf("RST_STREAM %d", id), func(f http2.Frame) bool {
			r, ok := f.(*http2.RSTStreamFrame)
			return ok && r.StreamID == id
		}).(*http2.RSTStreamFrame).ErrCode
	}
	c.headers(1, true, ":method", "GET", ":scheme", "http", ":authority", "x") // no :path
	if got := rst(1); got != http2.ErrCodeProtocol {
		t.Fatalf("no :path: %v", got)
	}
	hold := append(append([]string(nil), getFields[:6]...), ":path", "/hold")
	c.headers(3, true, hold...)
	c.headers(5, true, getFields...) // past MaxConcurrentStreams
	if got := rst(5); got != http2.ErrCodeRefusedStream {
		t.Fatalf("past the stream limit: %v", got)
	}
	close(release)
	body := func(id uint32) string {
		var b []byte
		for {
			f := c.until(fmt.Sprintf("DATA of %d", id), func(f http2.Frame) bool { d, ok := f.(*http2.DataFrame); return ok && d.StreamID == id })
			d := f.(*http2.DataFrame)
			b = append(b, d.Data()...)
			if d.StreamEnded() {
				return string(b)
			}
		}
	}
	if got := body(3); got != "ok" {
		t.Fatalf("held stream: %q", got)
	}
	c.headers(7, true, getFields...)
	if got := body(7); got != "ok" {
		t.Fatalf("after the stream errors: %q", got)
	}
}

func TestPingIsAnswered(t *testing.T) {
	_, base, _ := start(t, &http.Server{Handler: protoHandler()})
	c := dialRaw(t, base, true)
	data := [8]byte{1, 2, 3, 4, 5, 6, 7, 8}
	if err := c.fr.WritePing(false, data); err != nil {
		t.Fatal(err)
	}
	p := c.until("PING ack", func(f http2.Frame) bool { p, ok := f.(*http2.PingFrame); return ok && p.IsAck() }).(*http2.PingFrame)
	if p.Data != data {
		t.Fatalf("PING ack %v, want %v", p.Data, data)
	}
}

func discardLog() *log.Logger { return log.New(io.Discard, "", 0) }

// testWriter logs what is written to it in t.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func TestExpectContinueIsAnsweredOnTheFirstRead(t *testing.T) {
	_, base, _ := start(t, &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %v", b, err)
	})})
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	// A client that waits up to a minute for the 100: the test's time
	// limit tells a missing one.
	tr := &http.Transport{Protocols: &p, ExpectContinueTimeout: time.Minute}
	t.Cleanup(tr.CloseIdleConnections)
	req, _ := http.NewRequest(http.MethodPost, base+"/", strings.NewReader("body"))
	req.Header.Set("Expect", "100-continue")
	start := time.Now()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if got := readAll(t, resp, err); got != "body <nil>" {
		t.Fatalf("got %q", got)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("the client waited %v for its 100", d)
	}
}
