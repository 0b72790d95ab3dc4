package h2cserver

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/testutil"
)

// start serves h on a loopback port with an h2cserver.Server and returns
// it with its base URL; the test closes it.
func start(t *testing.T, hs *http.Server) (*Server, string, <-chan error) {
	t.Helper()
	s := New(hs)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	t.Cleanup(func() { _ = s.Close() })
	return s, "http://" + ln.Addr().String(), served
}

// clients returns an HTTP/1.1 client and an h2c (prior knowledge) one.
func clients(t *testing.T) (h1, h2 *http.Client) {
	var p1, p2 http.Protocols
	p1.SetHTTP1(true)
	p2.SetUnencryptedHTTP2(true)
	t1 := &http.Transport{Protocols: &p1}
	t2 := &http.Transport{Protocols: &p2}
	t.Cleanup(t1.CloseIdleConnections)
	t.Cleanup(t2.CloseIdleConnections)
	return &http.Client{Transport: t1}, &http.Client{Transport: t2}
}

func protoHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		_, _ = io.WriteString(w, r.Proto+" "+r.Method+" "+string(body))
	})
}

func get(t *testing.T, c *http.Client, url string) string {
	t.Helper()
	resp, err := c.Get(url)
	return readAll(t, resp, err)
}

func post(t *testing.T, c *http.Client, url string, body io.Reader) string {
	t.Helper()
	resp, err := c.Post(url, "application/octet-stream", body)
	return readAll(t, resp, err)
}

// readAll returns the body of a response that must have come.
func readAll(t *testing.T, resp *http.Response, err error) string {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestServesBothProtocolsOnOneListener(t *testing.T) {
	var mu sync.Mutex
	states := map[http.ConnState]int{}
	_, base, _ := start(t, &http.Server{Handler: protoHandler(), ConnState: func(_ net.Conn, st http.ConnState) {
		mu.Lock()
		states[st]++
		mu.Unlock()
	}})
	h1, h2 := clients(t)
	if got := get(t, h1, base+"/"); got != "HTTP/1.1 GET " {
		t.Errorf("over HTTP/1.1: %q", got)
	}
	if got := get(t, h2, base+"/"); got != "HTTP/2.0 GET " {
		t.Errorf("over h2c: %q", got)
	}
	if got := post(t, h2, base+"/", strings.NewReader("a body")); got != "HTTP/2.0 POST a body" {
		t.Errorf("POST over h2c: %q", got)
	}
	// A request shorter than the preface, then EOF, still gets its answer.
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET / HTTP/1.0\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = c.(*net.TCPConn).CloseWrite()
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.0 200") {
		t.Errorf("short HTTP/1.0 request: %q, %v", line, err)
	}
	h1.CloseIdleConnections()
	h2.CloseIdleConnections()
	testutil.Eventually(t, waitLimit, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return states[http.StateClosed] >= 3
	}, "the three connections closed")
	mu.Lock()
	defer mu.Unlock()
	if states[http.StateNew] < 3 || states[http.StateNew] != states[http.StateClosed] {
		t.Errorf("connection states %v: want a StateNew and a StateClosed for each of the three", states)
	}
}

func TestCloseEndsEveryConnection(t *testing.T) {
	entered := make(chan struct{}, 2)
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		entered <- struct{}{}
		<-r.Context().Done()
	})}
	s, base, served := start(t, hs)
	h1, h2 := clients(t)
	errs := make(chan error, 2)
	for _, c := range []*http.Client{h1, h2} {
		go func() {
			resp, err := c.Get(base + "/")
			if err == nil {
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			errs <- err
		}()
	}
	<-entered
	<-entered
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := <-errs; err == nil {
			t.Error("a held response ended cleanly; want the connection cut")
		}
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		t.Errorf("Serve: %v, want ErrServerClosed", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestShutdownLetsRequestsFinish(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-release
		_, _ = io.WriteString(w, "done")
	})}
	s, base, served := start(t, hs)
	_, h2 := clients(t)
	got := make(chan string, 1)
	go func() {
		resp, err := h2.Get(base + "/")
		if err != nil {
			got <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		got <- string(b)
	}()
	<-entered
	// A connection that never sends its preface does not hold Shutdown.
	idle, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	testutil.Eventually(t, waitLimit, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.conns) == 2
	}, "the idle connection accepted")
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		shut <- s.Shutdown(ctx)
	}()
	testutil.Eventually(t, waitLimit, func() bool {
		c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
		if err == nil {
			c.Close()
		}
		return err != nil
	}, "the listener closed")
	close(release)
	if b := <-got; b != "done" {
		t.Errorf("the request in flight: %q, want done", b)
	}
	if err := <-shut; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		t.Errorf("Serve: %v, want ErrServerClosed", err)
	}
}

func TestPrefaceTimeout(t *testing.T) {
	for _, tc := range []struct {
		name string
		hs   *http.Server
	}{
		{"ReadHeaderTimeout", &http.Server{ReadHeaderTimeout: 50 * time.Millisecond}},
		{"ReadTimeout alone", &http.Server{ReadTimeout: 50 * time.Millisecond}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			states := map[http.ConnState]int{}
			tc.hs.Handler = protoHandler()
			tc.hs.ConnState = func(_ net.Conn, st http.ConnState) {
				mu.Lock()
				states[st]++
				mu.Unlock()
			}
			s, base, _ := start(t, tc.hs)
			c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := io.WriteString(c, "PRI * HTTP/2.0\r\n"); err != nil { // and no more
				t.Fatal(err)
			}
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
				t.Errorf("read after half a preface: %v, want EOF (closed by the server)", err)
			}
			testutil.Eventually(t, waitLimit, func() bool {
				s.mu.Lock()
				defer s.mu.Unlock()
				return len(s.conns) == 0
			}, "no connection left")
			mu.Lock()
			defer mu.Unlock()
			if states[http.StateNew] != 1 || states[http.StateClosed] != 1 {
				t.Errorf("connection states %v: want one StateNew and one StateClosed, as net/http reports a connection that sent no request", states)
			}
		})
	}
}

func TestReadPrefix(t *testing.T) {
	for _, tc := range []struct {
		name  string
		in    []string // what each Read returns
		n     int
		h2    bool
		fails bool
	}{
		{"HTTP/2 at once", []string{preface + "rest"}, len(preface), true, false},
		{"HTTP/2 a byte at a time", strings.Split(preface, ""), len(preface), true, false},
		{"HTTP/1 request", []string{"GET / HTTP/1.1\r\nHost: a\r\n\r\n"}, len(preface), false, false},
		{"PUT differs at its second byte", []string{"P", "UT / HTTP/1.1\r\n"}, 16, false, false},
		{"short request then EOF", []string{"GET / HTTP/1.0\r\n\r\n", ""}, 18, false, false},
		{"part of the preface then EOF", []string{"PRI * HTTP/2.0", ""}, 14, false, false},
		{"nothing then EOF", []string{""}, 0, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &scriptConn{reads: tc.in}
			var buf [len(preface)]byte
			n, h2, err := readPrefix(c, buf[:])
			if n != tc.n || h2 != tc.h2 || (err != nil) != tc.fails {
				t.Errorf("readPrefix = %d, %v, %v; want %d, %v, fails %v", n, h2, err, tc.n, tc.h2, tc.fails)
			}
		})
	}
}

// scriptConn returns its reads one by one, then EOF; an empty one is EOF.
type scriptConn struct {
	net.Conn
	reads []string
}

func (c *scriptConn) Read(p []byte) (int, error) {
	if len(c.reads) == 0 || c.reads[0] == "" {
		return 0, io.EOF
	}
	n := copy(p, c.reads[0])
	if c.reads[0] = c.reads[0][n:]; c.reads[0] == "" {
		c.reads = c.reads[1:]
	}
	return n, nil
}

// waitLimit bounds every wait of these tests on a condition.
const waitLimit = 10 * time.Second
