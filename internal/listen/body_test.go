package listen_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/listen"
	"github.com/holdfast-dev/holdfast/transport"
)

// bodyConfig is a listener with short body bounds: a grace of 300 ms, at
// least 1 KiB/s past it, 3 s in all.
func bodyConfig() listen.Config {
	return listen.Config{BodyGrace: 300 * time.Millisecond, MinBodyRate: 1024, BodyTimeout: 3 * time.Second}
}

// readBody answers with how many bytes of the body it read, and the
// error that ended it.
func readBody(w http.ResponseWriter, r *http.Request) {
	n, err := io.Copy(io.Discard, r.Body)
	fmt.Fprintf(w, "%d %v", n, err)
}

// trickle sends a POST with a 100,000-byte body on c, then a byte every
// every until the connection fails or for; it returns how long the
// connection lasted.
func trickle(c net.Conn, path string, every, limit time.Duration) time.Duration {
	start := time.Now()
	_, _ = io.WriteString(c, "POST "+path+" HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n")
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		_, _ = io.Copy(io.Discard, c)
	}()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for time.Since(start) < limit {
		select {
		case <-closed:
			return time.Since(start)
		case <-tick.C:
		}
		if _, err := io.WriteString(c, " "); err != nil {
			return time.Since(start)
		}
	}
	return time.Since(start)
}

// TestBodyTrickleCut: a body trickled a byte every 100 ms is cut once
// its grace has passed, over HTTP/1.1 (its connection closed) and HTTP/2
// (its stream ended, the connection kept).
func TestBodyTrickleCut(t *testing.T) {
	addr := serve(t, bodyConfig(), http.HandlerFunc(readBody))
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if d := trickle(c, "/publish", 100*time.Millisecond, 10*time.Second); d > 2*time.Second {
		t.Errorf("HTTP/1.1: a trickled body held its connection %v, want cut after its 300 ms grace", d)
	}

	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	defer tr.CloseIdleConnections()
	pr, pw := io.Pipe()
	go func() {
		for range 100 {
			if _, err := pw.Write([]byte(" ")); err != nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		pw.Close()
	}()
	defer pw.Close()
	start := time.Now()
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/publish", pr)
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(b), "timeout") {
			t.Errorf("HTTP/2: the handler read %q, want a timeout", b)
		}
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("HTTP/2: a trickled body lasted %v, want cut after its 300 ms grace", d)
	}
}

// TestBodyUnreadCut: a trickled body its handler never reads (a 404)
// holds its connection no longer than one that is read: net/http reads
// the rest to keep the connection, under the same bound.
func TestBodyUnreadCut(t *testing.T) {
	addr := serve(t, bodyConfig(), http.NotFoundHandler())
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if d := trickle(c, "/nowhere", 100*time.Millisecond, 10*time.Second); d > 2*time.Second {
		t.Errorf("a trickled body never read held its connection %v, want cut after its 300 ms grace", d)
	}
}

// TestBodyAtRateNotCut: a body that keeps the least rate is read whole,
// past its grace; once read, neither the reply nor the connection's next
// request is bound by its deadline. The ack stream is exempt.
func TestBodyAtRateNotCut(t *testing.T) {
	addr := serve(t, bodyConfig(), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow-reply" {
			time.Sleep(time.Second) // past the body's deadline
		}
		readBody(w, r)
	}))
	for _, h2 := range []bool{false, true} {
		tr := &http.Transport{Protocols: new(http.Protocols)}
		if h2 {
			tr.Protocols.SetUnencryptedHTTP2(true)
		} else {
			tr.Protocols.SetHTTP1(true)
		}
		hc := &http.Client{Transport: tr}
		post := func(path string, chunks int, every time.Duration) string {
			pr, pw := io.Pipe()
			go func() {
				defer pw.Close()
				for range chunks {
					if _, err := pw.Write(make([]byte, 512)); err != nil {
						return
					}
					time.Sleep(every)
				}
			}()
			req, _ := http.NewRequest(http.MethodPost, "http://"+addr+path, pr)
			resp, err := hc.Do(req)
			if err != nil {
				return err.Error()
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return string(b)
		}
		// 512 bytes every 100 ms (5 KiB/s) for 1.2 s, four times the grace.
		if got := post("/publish", 12, 100*time.Millisecond); got != "6144 <nil>" {
			t.Errorf("h2=%v: a body at 5 KiB/s: %q, want it read whole", h2, got)
		}
		if got := post("/slow-reply", 1, 0); got != "512 <nil>" {
			t.Errorf("h2=%v: a reply past the body's deadline: %q", h2, got)
		}
		time.Sleep(500 * time.Millisecond) // the kept connection, past a deadline
		if got := post("/publish", 1, 0); got != "512 <nil>" {
			t.Errorf("h2=%v: the next request: %q", h2, got)
		}
		tr.CloseIdleConnections()
	}
	// The ack stream (HTTP/2 only): a line now and then, as seldom as
	// publishes, is not cut.
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	defer tr.CloseIdleConnections()
	pr, pw := io.Pipe()
	go func() {
		defer pw.Close()
		for range 8 { // a byte every 200 ms for 1.6 s: past the grace, under the rate
			if _, err := pw.Write([]byte{' '}); err != nil {
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
	}()
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+transport.PathAckStream, pr)
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if b, _ := io.ReadAll(resp.Body); string(b) != "8 <nil>" {
		t.Errorf("the ack stream over HTTP/2: %q, want its 8 bytes read whole", b)
	}
	// Over HTTP/1.1 the path is no stream (the data plane refuses it
	// there): its trickled body is cut like any other.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if d := trickle(c, transport.PathAckStream, 100*time.Millisecond, 10*time.Second); d > 2*time.Second {
		t.Errorf("an HTTP/1.1 trickle to the ack stream's path held its connection %v, want cut after its 300 ms grace", d)
	}
}

// TestLimitReclaimsTricklers: at the connection cap, a connection whose
// body is behind the least rate gives its slot to a new connection; one
// serving a request without a body never does.
func TestLimitReclaimsTricklers(t *testing.T) {
	c := bodyConfig()
	c.BodyGrace = time.Minute // only the reclaim at the cap cuts them
	c.MaxConns = 3
	c.Addr = "127.0.0.1:0"
	ln, err := listen.Listen(c)
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	srv := listen.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			w.WriteHeader(http.StatusOK)
			http.NewResponseController(w).Flush()
			<-release
			return
		}
		readBody(w, r)
	}), c)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	defer func() {
		close(release)
		_ = srv.Close()
		<-done
	}()
	addr := ln.Addr().String()

	// One connection holds a request without a body; two trickle bodies.
	hold, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Close()
	_, _ = io.WriteString(hold, "GET /hold HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp, err := http.ReadResponse(bufio.NewReader(hold), nil); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("the held request: %v %v", resp, err)
	}
	lasted := make(chan time.Duration, 2)
	for range 2 {
		tc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer tc.Close()
		go func() { lasted <- trickle(tc, "/publish", 200*time.Millisecond, 20*time.Second) }()
	}
	time.Sleep(1500 * time.Millisecond) // past reclaimAfter
	holdOne := func() error {
		oc, err := net.Dial("tcp", addr)
		if err != nil {
			return err
		}
		t.Cleanup(func() { oc.Close() })
		_, _ = io.WriteString(oc, "GET /hold HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(oc), nil)
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s", resp.Status)
		}
		return nil
	}
	for i := range 2 {
		if err := holdOne(); err != nil {
			t.Fatalf("new connection %d at the cap: %v, want a trickler's slot", i, err)
		}
		if d := <-lasted; d > 5*time.Second {
			t.Errorf("a trickler lasted %v", d)
		}
	}
	if n := ln.(*listen.Limited).Reclaimed(); n != 2 {
		t.Errorf("reclaimed %d connections, want 2", n)
	}
	if n := ln.(*listen.Limited).Reading(); n != 0 {
		t.Errorf("%d connections reading a body, want none", n)
	}
	// No trickler left: the held requests keep their slots, and a new
	// connection past the cap is refused.
	past, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer past.Close()
	_ = past.SetReadDeadline(time.Now().Add(10 * time.Second))
	if resp, err := http.ReadResponse(bufio.NewReader(past), nil); err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("past the cap with no trickler: %v %v, want 503", resp, err)
	}
	if _, err := hold.Write([]byte("x")); err != nil {
		t.Errorf("the held connection was closed: %v", err)
	}
}

// TestBodyClosedEarlyNotReused: a handler that closes a large body
// unread leaves a connection that serves no further request: the rest of
// the body is never read as one.
func TestBodyClosedEarlyNotReused(t *testing.T) {
	var smuggled atomic.Int64
	addr := serve(t, bodyConfig(), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/smuggled" {
			smuggled.Add(1)
			return
		}
		_, _ = io.ReadFull(r.Body, make([]byte, 10))
		r.Body.Close()
	}))
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	inner := "GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"
	// What the handler leaves unread starts with a request.
	body := "0123456789" + inner + strings.Repeat("x", 300000-10-len(inner))
	go func() {
		_, _ = io.WriteString(c, "POST /publish HTTP/1.1\r\nHost: x\r\nContent-Length: 300000\r\n\r\n"+body)
	}()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, _ = io.Copy(io.Discard, c)
	if n := smuggled.Load(); n != 0 {
		t.Errorf("the end of a body was served as %d requests", n)
	}
}
