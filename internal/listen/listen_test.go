package listen_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/holdfast-dev/holdfast/internal/listen"
	"github.com/holdfast-dev/holdfast/internal/peer"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/internal/testutil/certtest"
)

// TestMain checks for leaked goroutines, but for net/http's wait before it
// closes a connection whose request body it did not read (half a second,
// past a server's Close): the body tests' connections end so.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("net/http.(*conn).closeWriteAndWait"))
}

// syncBuffer is a log sink that tests read while servers write.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// serve serves h with c on 127.0.0.1:0 until the test ends; it returns
// the listener's address.
func serve(t *testing.T, c listen.Config, h http.Handler) string {
	t.Helper()
	if c.Addr == "" {
		c.Addr = "127.0.0.1:0"
	}
	ln, err := listen.Listen(c)
	if err != nil {
		t.Fatal(err)
	}
	srv := listen.NewServer(h, c)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() {
		_ = srv.Close()
		<-done
	})
	return ln.Addr().String()
}

func TestIsLoopbackAddr(t *testing.T) {
	for _, tc := range []struct {
		addr string
		want bool
	}{
		{"127.0.0.1:8080", true},
		{"127.1.2.3:80", true},
		{"[::1]:8080", true},
		{"localhost:8080", true},
		{":8080", false},
		{"0.0.0.0:8080", false},
		{"[::]:8080", false},
		{"10.0.0.1:8080", false},
		{"example.com:8080", false},
		{"garbage", false},
	} {
		if got := listen.IsLoopbackAddr(tc.addr); got != tc.want {
			t.Errorf("IsLoopbackAddr(%q) = %v, want %v", tc.addr, got, tc.want)
		}
	}
}

// TestListenPlaintextNeedsFlag: without TLS, an address other than
// loopback needs Plaintext, and then a warning says so.
func TestListenPlaintextNeedsFlag(t *testing.T) {
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	if _, err := listen.Listen(listen.Config{Name: "data", Addr: "0.0.0.0:0", Logger: log}); !errors.Is(err, listen.ErrPlaintext) {
		t.Fatalf("plaintext on 0.0.0.0 without -plaintext: %v, want ErrPlaintext", err)
	}
	ln, err := listen.Listen(listen.Config{Name: "data", Addr: "0.0.0.0:0", Plaintext: true, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "PLAINTEXT") {
		t.Errorf("no loud warning: %q", logs.String())
	}
	ln, err = listen.Listen(listen.Config{Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatalf("loopback: %v", err)
	}
	ln.Close()
}

func TestParseCIDRs(t *testing.T) {
	got, err := listen.ParseCIDRs(" 10.0.0.0/8, 192.168.1.7 ,::1/128")
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.168.1.7/32"), netip.MustParsePrefix("::1/128")}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if _, err := listen.ParseCIDRs("10.0.0.0/33"); err == nil {
		t.Error("10.0.0.0/33: no error")
	}
}

// TestGuardPlaintextTokens: a token over plaintext is refused from a peer
// other than loopback and the trusted proxies, whatever the token.
func TestGuardPlaintextTokens(t *testing.T) {
	trusted := []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}
	h := listen.Guard(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }), trusted)
	for _, tc := range []struct {
		remote string
		token  bool
		tls    bool
		want   int
	}{
		{"127.0.0.1:5000", true, false, http.StatusNoContent},
		{"[::1]:5000", true, false, http.StatusNoContent},
		{"[::ffff:127.0.0.1]:5000", true, false, http.StatusNoContent},
		{"10.1.2.3:5000", true, false, http.StatusNoContent},    // the proxy
		{"10.2.2.3:5000", true, false, http.StatusForbidden},    // not it
		{"203.0.113.9:5000", true, false, http.StatusForbidden}, // anyone
		{"203.0.113.9:5000", false, false, http.StatusNoContent},
		{"203.0.113.9:5000", true, true, http.StatusNoContent},
		{"garbage", true, false, http.StatusForbidden},
	} {
		r := httptest.NewRequest(http.MethodGet, "/sdk/snapshot?ns=a", nil)
		r.RemoteAddr = tc.remote
		if tc.token {
			r.Header.Set("Authorization", "Bearer 0123456789abcdef0123")
		}
		if tc.tls {
			r.TLS = &tls.ConnectionState{}
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != tc.want {
			t.Errorf("%s token=%v tls=%v: %d, want %d (%s)", tc.remote, tc.token, tc.tls, w.Code, tc.want, w.Body)
		}
		if w.Code == http.StatusForbidden && (!strings.Contains(w.Body.String(), `"error":"forbidden"`) || !strings.Contains(w.Body.String(), "plaintext")) {
			t.Errorf("%s: refusal body %s", tc.remote, w.Body)
		}
	}
}

// TestGuardForwardedClient: a request from a trusted proxy is counted by
// the client it forwards (the last address of X-Forwarded-For); from any
// other peer, loopback included, the header names no one.
func TestGuardForwardedClient(t *testing.T) {
	trusted := []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}
	var got netip.Addr
	var named bool
	h := listen.Guard(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, named = peer.AddrFromContext(r.Context())
	}), trusted)
	for _, tc := range []struct {
		remote string
		xff    []string
		want   string // "": none named
	}{
		{"10.1.2.3:5000", []string{"203.0.113.5, 198.51.100.7"}, "198.51.100.7"},
		{"10.1.2.3:5000", []string{"203.0.113.5", "2001:db8::7"}, "2001:db8::7"},
		{"10.1.2.3:5000", []string{"::ffff:198.51.100.7"}, "198.51.100.7"},
		{"10.1.2.3:5000", []string{"not an address"}, ""},
		{"10.1.2.3:5000", nil, ""},
		{"10.2.2.3:5000", []string{"198.51.100.7"}, ""},  // not the proxy
		{"127.0.0.1:5000", []string{"198.51.100.7"}, ""}, // loopback is not a proxy
	} {
		r := httptest.NewRequest(http.MethodGet, "/sdk/snapshot?ns=a", nil)
		r.RemoteAddr = tc.remote
		for _, v := range tc.xff {
			r.Header.Add("X-Forwarded-For", v)
		}
		got, named = netip.Addr{}, false
		h.ServeHTTP(httptest.NewRecorder(), r)
		switch {
		case tc.want == "" && named:
			t.Errorf("%s %q: named %v, want none", tc.remote, tc.xff, got)
		case tc.want != "" && (!named || got != netip.MustParseAddr(tc.want)):
			t.Errorf("%s %q: named %v (%v), want %s", tc.remote, tc.xff, got, named, tc.want)
		}
	}
}

// TestLimitRefusesPastCap: past the cap a connection is refused at once,
// with a 503 an HTTP/1.1 client reads and a log line; a slot freed by a
// closed connection is taken again.
func TestLimitRefusesPastCap(t *testing.T) {
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	addr := serve(t, listen.Config{MaxConns: 2, Logger: log}, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }))
	var held []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held = append(held, c)
		// A request answered: the server has accepted it.
		if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("held connection: %v %v", resp, err)
		}
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("past the cap: %v %v, want 503", resp, err)
	}
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Error("the refused connection is still open")
	}
	testutil.Eventually(t, 10*time.Second, func() bool {
		return strings.Contains(logs.String(), "connection cap") && strings.Contains(logs.String(), "max_conns=2")
	}, "a log line of the refusal")
	held[0].Close()
	testutil.EventuallyNil(t, 10*time.Second, func() error {
		resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Get("http://" + addr + "/")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	}, "a connection once a slot is free")
}

// TestH2C: a plaintext listener speaks HTTP/1.1 and HTTP/2 with prior
// knowledge.
func TestH2C(t *testing.T) {
	addr := serve(t, listen.Config{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, r.Proto) }))
	for _, h2 := range []bool{false, true} {
		tr := &http.Transport{Protocols: new(http.Protocols)}
		if h2 {
			tr.Protocols.SetUnencryptedHTTP2(true)
		} else {
			tr.Protocols.SetHTTP1(true)
		}
		resp, err := (&http.Client{Transport: tr}).Get("http://" + addr + "/")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		tr.CloseIdleConnections()
		if want := map[bool]string{false: "HTTP/1.1", true: "HTTP/2.0"}[h2]; string(b) != want {
			t.Errorf("h2=%v: served %q, want %q", h2, b, want)
		}
	}
}

// TestIdleTimeout: a connection with nothing in flight is closed after
// the idle timeout, over HTTP/1.1 and h2c; one that never sends a
// request after ReadHeaderTimeout.
func TestIdleTimeout(t *testing.T) {
	addr := serve(t, listen.Config{IdleTimeout: 200 * time.Millisecond, ReadHeaderTimeout: 200 * time.Millisecond},
		http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }))
	closed := func(c net.Conn) error {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err := io.Copy(io.Discard, c)
		if err != nil {
			return fmt.Errorf("not closed by the server: %v", err)
		}
		return nil
	}
	// Silent from the start.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := closed(c); err != nil {
		t.Errorf("a silent connection: %v", err)
	}
	// After one request.
	c2, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	_, _ = io.WriteString(c2, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	if err := closed(c2); err != nil {
		t.Errorf("an HTTP/1.1 connection after a request: %v", err)
	}
	// h2c, after the preface and SETTINGS.
	c3, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	_, _ = io.WriteString(c3, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
	if err := closed(c3); err != nil {
		t.Errorf("an idle h2c connection: %v", err)
	}
}

// TestTLSAndMutualTLS: TLS with HTTP/2 through ALPN; with client CAs a
// client certificate is required and its subject is the caller's
// identity.
func TestTLSAndMutualTLS(t *testing.T) {
	ca := certtest.NewCA(t, "test CA")
	srvPair := ca.Server(t, "server")
	echo := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, ok := peer.FromContext(r.Context())
		fmt.Fprintf(w, "%s %v %s", r.Proto, ok, p.Subject)
	})
	get := func(addr string, certs ...tls.Certificate) (string, error) {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), Certificates: certs}, ForceAttemptHTTP2: true}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get("https://" + addr + "/")
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}

	tlsOnly, err := listen.NewTLS(srvPair.CertFile, srvPair.KeyFile, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, listen.Config{TLS: tlsOnly}, echo)
	if got, err := get(addr); err != nil || got != "HTTP/2.0 false " {
		t.Errorf("TLS: %q %v, want HTTP/2.0 and no peer", got, err)
	}

	mutual, err := listen.NewTLS(srvPair.CertFile, srvPair.KeyFile, ca.File, nil)
	if err != nil {
		t.Fatal(err)
	}
	addr = serve(t, listen.Config{TLS: mutual}, echo)
	if _, err := get(addr); err == nil {
		t.Error("mTLS: a client without a certificate was served")
	}
	other := certtest.NewCA(t, "other CA")
	if _, err := get(addr, other.Client(t, "intruder").TLS); err == nil {
		t.Error("mTLS: a certificate of another CA was accepted")
	}
	got, err := get(addr, ca.Client(t, "deploy-bot").TLS)
	if want := "HTTP/2.0 true CN=deploy-bot,O=holdfast tests"; err != nil || got != want {
		t.Errorf("mTLS: %q %v, want %q", got, err, want)
	}
}

// TestTLSReload: a new pair is served once its files change; a pair that
// does not match (a half-done rotation) keeps the old one.
func TestTLSReload(t *testing.T) {
	ca := certtest.NewCA(t, "test CA")
	dir := t.TempDir()
	certFile, keyFile := dir+"/tls.crt", dir+"/tls.key"
	first := ca.Server(t, "first")
	first.Install(t, certFile, keyFile)
	var logs syncBuffer
	tl, err := listen.NewTLS(certFile, keyFile, "", slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, listen.Config{TLS: tl}, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	served := func() string {
		c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.Pool()})
		if err != nil {
			return "error: " + err.Error()
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].Subject.CommonName
	}
	if got := served(); got != "first" {
		t.Fatalf("served %q, want first", got)
	}
	second := ca.Server(t, "second")
	second.Install(t, certFile, keyFile)
	testutil.Eventually(t, 10*time.Second, func() bool { return served() == "second" }, "the rotated certificate served")

	// Half a rotation: the key of a third pair beside the second's
	// certificate. The second stays.
	third := ca.Server(t, "third")
	third.Install(t, dir+"/third.crt", keyFile)
	if err := tl.Reload(); err == nil {
		t.Error("Reload of a mismatched pair: no error")
	}
	if got := served(); got != "second" {
		t.Errorf("after a mismatched pair: served %q, want second", got)
	}
	if !strings.Contains(logs.String(), "keeping the one in use") {
		t.Errorf("the failed reload is not logged: %s", logs.String())
	}
	third.Install(t, certFile, keyFile)
	if err := tl.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := served(); got != "third" {
		t.Errorf("served %q, want third", got)
	}
}

// TestSessionResumption: a client that comes back resumes its TLS
// session (a reconnect storm costs no full handshakes).
func TestSessionResumption(t *testing.T) {
	ca := certtest.NewCA(t, "test CA")
	p := ca.Server(t, "server")
	tl, err := listen.NewTLS(p.CertFile, p.KeyFile, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, listen.Config{TLS: tl}, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	conf := &tls.Config{RootCAs: ca.Pool(), ClientSessionCache: tls.NewLRUClientSessionCache(8)}
	resumed := false
	for range 3 {
		c, err := tls.Dial("tcp", addr, conf)
		if err != nil {
			t.Fatal(err)
		}
		// TLS 1.3 tickets come after the handshake: read to get them.
		_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		_, _ = c.Read(make([]byte, 1))
		resumed = resumed || c.ConnectionState().DidResume
		c.Close()
	}
	if !resumed {
		t.Error("no session was resumed")
	}
}

// TestServeStopsCleanly: Shutdown returns with connections open over
// TLS and h2c.
func TestServeStopsCleanly(t *testing.T) {
	ln, err := listen.Listen(listen.Config{Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	srv := listen.NewServer(http.NotFoundHandler(), listen.Config{})
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Error(err)
	}
	if err := <-done; !errors.Is(err, http.ErrServerClosed) {
		t.Error(err)
	}
}

// TestSessionsResumeAcrossARestart: a client's TLS session from one
// server resumes at another started with the same pair (a restarted
// relay, a replica): the ticket key is derived from the pair's key. One
// with another pair makes a full handshake.
func TestSessionsResumeAcrossARestart(t *testing.T) {
	ca := certtest.NewCA(t, "test CA")
	pair := ca.Server(t, "relay")
	serve := func(p certtest.Pair) (addr string, stop func()) {
		tt, err := listen.NewTLS(p.CertFile, p.KeyFile, "", slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		ln, err := tls.Listen("tcp", "127.0.0.1:0", tt.ServerConfig())
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() {
					defer c.Close()
					_, _ = io.Copy(io.Discard, c) // the handshake, then until the client closes
				}()
			}
		}()
		return ln.Addr().String(), func() { ln.Close(); <-done }
	}
	cache := tls.NewLRUClientSessionCache(4)
	dial := func(addr string) bool {
		c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost", ClientSessionCache: cache})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		// TLS 1.3 tickets come after the handshake: a read gives the
		// client the chance to take them.
		_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		_, _ = c.Read(make([]byte, 1))
		return c.ConnectionState().DidResume
	}
	a, stopA := serve(pair)
	if dial(a) {
		t.Fatal("the first connection resumed")
	}
	stopA()
	b, stopB := serve(pair)
	defer stopB()
	if !dial(b) {
		t.Error("a server with the same pair did not resume the session")
	}
	c, stopC := serve(ca.Server(t, "relay"))
	defer stopC()
	if dial(c) {
		t.Error("a server with another key resumed the session")
	}
}

// TestLimitOverATLSListener: Limit around a tls.Listener (a library user
// of relay.Serve passes one) refuses without a handshake: a silent
// client past the cap does not stall Accept.
func TestLimitOverATLSListener(t *testing.T) {
	ca := certtest.NewCA(t, "test CA")
	p := ca.Server(t, "server")
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := listen.Limit(tls.NewListener(tcp, &tls.Config{Certificates: []tls.Certificate{p.TLS}}), 1, true, slog.New(slog.DiscardHandler))
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close(); <-done })
	addr := tcp.Addr().String()
	conf := &tls.Config{RootCAs: ca.Pool()}
	get := func(c *tls.Conn) error {
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			return err
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	}
	held, err := tls.Dial("tcp", addr, conf)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := get(held); err != nil {
		t.Fatal(err)
	}
	// Past the cap, and silent: a handshake with it would wait forever.
	silent, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	_ = silent.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := silent.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("the connection past the cap read %d bytes, %v; want it closed with nothing written", n, err)
	}
	held.Close()
	testutil.EventuallyNil(t, 10*time.Second, func() error {
		c, err := tls.Dial("tcp", addr, conf)
		if err != nil {
			return err
		}
		defer c.Close()
		return get(c)
	}, "a TLS connection once the slot is free")
}
