package transport

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/testutil"
)

// connScenario opens a stream of 20 namespaces after a first snapshot,
// then makes 20 snapshots at once and a batch of acks while the stream
// runs, and returns the connections the server accepted after the first
// snapshot and those open at the end.
func connScenario(t *testing.T, caps string, together bool) (after, open int64, s *HTTPSource, srv *StandIn) {
	srv = StartStandIn(t, caps, 100*time.Millisecond)
	var nss []WatchRequest
	for i := range 20 {
		ns := fmt.Sprintf("ns-%02d", i)
		srv.Publish(ns, rawKV("v", "1"), nil)
		nss = append(nss, WatchRequest{Namespace: ns})
	}
	s = newSource(t, srv.URL, WithIdleTimeout(5*time.Second)) // a loaded machine must not idle the stream out
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	snap, err := s.Snapshot(ctx, SnapshotRequest{Namespace: "ns-00"})
	if err != nil {
		t.Fatal(err)
	}
	before := srv.accepted.Load()
	for i := range nss {
		nss[i].Since = snap.Cursor
	}
	progress := make(chan struct{})
	var once sync.Once
	done := make(chan error, 1)
	go func() {
		done <- s.WatchStream(ctx, StreamRequest{Namespaces: nss}, func(e StreamEvent) error {
			if e.Progress != nil {
				once.Do(func() { close(progress) })
			}
			return nil
		})
	}()
	select {
	case <-progress:
	case err := <-done:
		t.Fatalf("WatchStream = %v before its first progress", err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for i := range 20 {
		get := func() {
			defer wg.Done()
			if _, err := s.Snapshot(ctx, SnapshotRequest{Namespace: nss[i].Namespace}); err != nil {
				errs <- err
			}
		}
		wg.Add(1)
		if together {
			go get()
		} else {
			get()
		}
	}
	wg.Wait()
	var acks []Ack
	for _, r := range nss {
		acks = append(acks, Ack{ClientID: "c", Namespace: r.Namespace, Revision: 1, Status: AckApplied})
	}
	if err := s.AckBatch(ctx, acks); err != nil {
		t.Fatal(err)
	}
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	after = srv.accepted.Load() - before
	open = srv.open.Load()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("WatchStream = %v; want context.Canceled", err)
	}
	return after, open, s, srv
}

// Against a server that speaks h2c, the source switches after its first
// reply: the stream, 20 snapshots made at once and the acks then share
// one TCP connection, and the HTTP/1.1 one is closed.
func TestOneConnectionOverH2C(t *testing.T) {
	leakCheck(t)
	after, _, s, srv := connScenario(t, allCaps, true)
	if after != 1 {
		t.Errorf("%d connections accepted after the switch; want 1", after)
	}
	if !s.h2c.on.Load() || srv.h2Reqs.Load() < 22 {
		t.Errorf("h2c on %v, %d requests over HTTP/2; want on, >= 22", s.h2c.on.Load(), srv.h2Reqs.Load())
	}
	testutil.Eventually(t, 10*time.Second, func() bool { return srv.open.Load() == 1 }, "one open connection")
}

// Over HTTP/1.1: the stream's connection and at most one other, whether
// the snapshots come one after another (then on one reused connection) or
// at once (extra connections closed as they go idle).
func TestHTTP1ConnectionsBesideTheStream(t *testing.T) {
	leakCheck(t)
	after, _, s, srv := connScenario(t, "stream,ack-batch", false)
	if after > 1 || s.h2c.on.Load() {
		t.Errorf("%d connections accepted for the stream and 20 snapshots one after another (h2c %v); want at most 1 more", after, s.h2c.on.Load())
	}
	if n := srv.accepted.Load(); n > 2 {
		t.Errorf("%d connections in all; want at most 2", n)
	}
	_, _, _, srv = connScenario(t, "stream,ack-batch", true)
	testutil.Eventually(t, 10*time.Second, func() bool { return srv.open.Load() <= 2 }, "at most 2 open connections")
}

// switchedToH2C returns a stand-in and a source of it whose first request
// (over HTTP/1.1) switched it to h2c.
func switchedToH2C(t *testing.T) (*StandIn, *HTTPSource, context.Context) {
	t.Helper()
	srv := StartStandIn(t, allCaps, time.Second)
	srv.Publish("a", rawKV("v", "1"), nil)
	s := newSource(t, srv.URL)
	ctx := streamCtx(t)
	if _, err := s.Snapshot(ctx, SnapshotRequest{Namespace: "a"}); err != nil {
		t.Fatal(err)
	}
	return srv, s, ctx
}

// Requests started together right after the switch still share one
// connection: the first dials, the others wait for its connection.
func TestH2CSwitchWarmsOneConnection(t *testing.T) {
	leakCheck(t)
	srv, s, ctx := switchedToH2C(t)
	before := srv.accepted.Load()
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			if _, err := s.Snapshot(ctx, SnapshotRequest{Namespace: "a"}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if n := srv.accepted.Load() - before; n != 1 {
		t.Errorf("20 snapshots at once after the switch: %d connections; want 1", n)
	}
	testutil.Eventually(t, 10*time.Second, func() bool { return srv.open.Load() == 1 }, "the HTTP/1.1 connection closed")
}

// A server (or a proxy in front of it) that lists h2c but speaks only
// HTTP/1.1 answers HTTP/2's preface in HTTP/1.1: the request goes again
// over HTTP/1.1 at once (no request fails, acks' bodies included), and the
// source keeps to HTTP/1.1 for h2cRefusedFor, then tries h2c again.
func TestH2CFallsBackToHTTP1(t *testing.T) {
	leakCheck(t)
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(HeaderStoreID, "s")
		w.Header().Set(HeaderCapabilities, allCaps)
		if r.Method == http.MethodPost {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		writeJSON(t, w, http.StatusOK, Snapshot{Namespace: "a", StoreID: "s", Revision: 1, Cursor: 1, Values: json.RawMessage(`{}`)})
	})
	s := newSource(t, srv.URL)
	var mu sync.Mutex
	now := time.Now()
	s.h2c.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	ack := []Ack{{ClientID: "c", Namespace: "a", Revision: 1, Status: AckApplied}}
	var last int64
	for round, more := range []bool{true, false, true} { // refused again after h2cRefusedFor only
		for range 10 {
			if _, err := s.Snapshot(streamCtx(t), SnapshotRequest{Namespace: "a"}); err != nil {
				t.Errorf("round %d: snapshot: %v", round, err)
			}
			if err := s.AckBatch(streamCtx(t), ack); err != nil {
				t.Errorf("round %d: ack: %v", round, err)
			}
		}
		// (A request's connection may be dialed twice: a refusal each.)
		n := s.h2c.refusals.Load()
		if n > last != more || s.h2c.on.Load() {
			t.Errorf("round %d: refusals %d after %d, h2c on %v; want more %v, off", round, n, last, s.h2c.on.Load(), more)
		}
		last = n
		mu.Lock()
		now = now.Add(h2cRefusedFor / 2)
		mu.Unlock()
	}
}

// closeNotifyConn closes closed when the client closes the connection.
type closeNotifyConn struct {
	net.Conn
	once   sync.Once
	closed chan struct{}
}

func (c *closeNotifyConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

// After the switch, a source whose h2c connection dies before a second
// request took it from the pool (a server restart, its idle timeout, a
// lone stream that reconnects) dials again at once: the warm-up's gate of
// that old connection gates no later dial.
func TestH2CRedialAfterTheConnectionDiedDoesNotWait(t *testing.T) {
	leakCheck(t)
	srv, s, ctx := switchedToH2C(t)
	conns := make(chan *closeNotifyConn, 10)
	dial := s.h2c.dial
	s.h2c.dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		cc := &closeNotifyConn{Conn: c, closed: make(chan struct{})}
		conns <- cc
		return cc, nil
	}
	for i := range 3 {
		start := time.Now()
		if _, err := s.Snapshot(ctx, SnapshotRequest{Namespace: "a"}); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d >= warmWait {
			t.Errorf("request %d after the connection died took %v: it waited out warmWait (%v)", i, d, warmWait)
		}
		c := <-conns
		srv.srv.CloseClientConnections()
		<-c.closed // the client saw it go
	}
}

// A dial that hangs holds the requests that wait for its connection
// warmWait at most from its start; then they dial their own.
func TestH2CWaitForASlowDialIsBounded(t *testing.T) {
	leakCheck(t)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}))
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	defer srv.Close()

	entered, release := make(chan struct{}), make(chan struct{})
	var first sync.Once
	d := &net.Dialer{}
	tr := newH2CTransport(&http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		slow := false
		first.Do(func() { slow = true })
		if slow {
			close(entered)
			<-release
		}
		return d.DialContext(ctx, network, addr)
	}})
	defer tr.CloseIdleConnections()
	tr.upgrade()
	c := &http.Client{Transport: tr}
	get := func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		if err != nil {
			return err
		}
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.Body.Close()
	}
	firstDone := make(chan error, 1)
	go func() { firstDone <- get(context.Background()) }()
	<-entered
	ctx, cancel := context.WithTimeout(context.Background(), 5*warmWait)
	defer cancel()
	start := time.Now()
	if err := get(ctx); err != nil {
		t.Errorf("a request whose own dial is instant, behind a hanging one: failed after %v: %v", time.Since(start), err)
	}
	close(release)
	if err := <-firstDone; err != nil {
		t.Error(err)
	}
}
