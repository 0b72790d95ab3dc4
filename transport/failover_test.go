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
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/testutil"
)

// Tests of the failover source: endpoints are fronts, each its own
// listener, of one StandIn, so that they serve the same store as relays
// of one origin do.

const failoverCaps = CapabilityStream + "," + CapabilityAckBatch + "," + CapabilityH2C

// cutConnection, as a front's fault, aborts every reply: the connection
// (HTTP/1.1) or the stream (HTTP/2) is cut.
const cutConnection = -1

// front serves a StandIn at an address of its own: down refuses
// connections, up listens again on the same address, and fault makes
// every request fail with a status (or cutConnection).
type front struct {
	t  *testing.T
	in *StandIn

	mu   sync.Mutex
	srv  *httptest.Server
	addr string
	url  string

	fault     atomic.Int32
	open      atomic.Int64 // connections not yet closed
	streams   atomic.Int64 // stream requests served
	snapshots atomic.Int64 // snapshot requests served
	probes    atomic.Int64 // GET /sdk/events served
}

func newFront(t *testing.T, in *StandIn) *front {
	t.Helper()
	f := &front{t: t, in: in, addr: "127.0.0.1:0"}
	f.up()
	t.Cleanup(f.down)
	return f
}

func (f *front) up() {
	f.t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.srv != nil {
		return
	}
	ln, err := net.Listen("tcp", f.addr)
	if err != nil {
		f.t.Fatalf("front: listen %s: %v", f.addr, err)
	}
	srv := httptest.NewUnstartedServer(f)
	_ = srv.Listener.Close()
	srv.Listener = ln
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			f.open.Add(1)
		case http.StateClosed, http.StateHijacked:
			f.open.Add(-1)
		}
	}
	srv.Start()
	f.srv, f.addr, f.url = srv, ln.Addr().String(), srv.URL
}

func (f *front) down() {
	f.mu.Lock()
	srv := f.srv
	f.srv = nil
	f.mu.Unlock()
	if srv != nil {
		srv.CloseClientConnections()
		srv.Close()
	}
}

func (f *front) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch code := int(f.fault.Load()); {
	case code == cutConnection:
		panic(http.ErrAbortHandler)
	case code != 0:
		w.Header().Set("Retry-After", "1")
		standInJSON(w, code, ErrorBody{Error: CodeUnavailable, Message: "fault"})
		return
	}
	switch r.URL.Path {
	case PathStream, PathStreamEvents:
		f.streams.Add(1)
	case PathSnapshot:
		f.snapshots.Add(1)
	case PathEvents:
		f.probes.Add(1)
		f.in.events(w, r)
		return
	}
	f.in.srv.Config.Handler.ServeHTTP(w, r)
}

// events answers GET /sdk/events without waiting: the changes of ns after
// since, or 409 when since is above the head.
func (s *StandIn) events(w http.ResponseWriter, r *http.Request) {
	s.headers(w, r)
	q := r.URL.Query()
	ns := q.Get("ns")
	since, err := strconv.ParseInt(q.Get("since"), 10, 64)
	if err != nil {
		standInJSON(w, http.StatusBadRequest, ErrorBody{Error: CodeBadRequest})
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.nsRev[ns]; !ok {
		standInJSON(w, http.StatusNotFound, ErrorBody{Error: CodeNotFound, StoreID: s.storeID})
		return
	}
	if since > s.head {
		standInJSON(w, http.StatusConflict, ErrorBody{Error: CodeCursorAhead, StoreID: s.storeID})
		return
	}
	resp := EventsResponse{Namespace: ns, StoreID: s.storeID, Cursor: s.head, Revision: s.nsRev[ns], Changes: []ChangeSet{}}
	for _, cs := range s.log {
		if cs.Namespace == ns && cs.Revision > since {
			resp.Changes = append(resp.Changes, cs)
		}
	}
	standInJSON(w, http.StatusOK, resp)
}

func newFailover(t *testing.T, fronts []*front, opts ...FailoverOption) *FailoverSource {
	t.Helper()
	srcs := make([]*HTTPSource, len(fronts))
	for i, fr := range fronts {
		s, err := NewHTTPSource(fr.url, WithIdleTimeout(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		srcs[i] = s
	}
	f, err := NewFailoverSource(srcs, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return f
}

func TestFailsOver(t *testing.T) {
	status := func(code int, sentinel error) error {
		return fmt.Errorf("transport: snapshot %q: %w", "ns", &StatusError{StatusCode: code, Err: sentinel})
	}
	moves := map[string]error{
		"refused":      &net.OpError{Op: "dial", Err: errors.New("connection refused")},
		"eof":          fmt.Errorf("transport: stream: %w", io.ErrUnexpectedEOF),
		"idle":         fmt.Errorf("transport: stream: %w", ErrStreamIdle),
		"malformed":    fmt.Errorf("%w: bad event", ErrMalformed),
		"500":          status(500, nil),
		"502":          status(502, nil),
		"503":          status(503, nil),
		"429":          status(429, nil),
		"not holdfast": status(404, ErrNotHoldfast),
		"200 not ours": fmt.Errorf("transport: snapshot: %w", ErrNotHoldfast),
		"joined":       errors.Join(status(400, ErrBadRequest), status(503, nil)),
	}
	for name, err := range moves {
		if !failsOver(err) {
			t.Errorf("%s (%v): does not fail over, want it to", name, err)
		}
	}
	stays := map[string]error{
		"not modified":   ErrNotModified,
		"not found":      status(404, ErrNotFound),
		"unauthorized":   status(401, ErrUnauthorized),
		"forbidden":      status(403, ErrUnauthorized),
		"compacted":      status(410, &CompactedError{CompactRevision: 3}),
		"cursor ahead":   status(409, ErrCursorAhead),
		"bad request":    status(400, ErrBadRequest),
		"too large":      fmt.Errorf("transport: snapshot: %w", ErrTooLarge),
		"store changed":  fmt.Errorf("%w: a, watching b", ErrStoreChanged),
		"no stream":      ErrStreamUnsupported,
		"invalid name":   fmt.Errorf("transport: %w", ErrInvalidNamespace),
		"request 413":    status(413, ErrTooLarge),
		"request 400 v0": status(400, nil),
	}
	for name, err := range stays {
		if failsOver(err) {
			t.Errorf("%s (%v): fails over, want it not to", name, err)
		}
	}
}

func TestNewFailoverSourceValidates(t *testing.T) {
	leakCheck(t)
	a := newSource(t, "http://127.0.0.1:1")
	a2 := newSource(t, "http://127.0.0.1:1/")
	b := newSource(t, "http://127.0.0.1:2")
	for name, tc := range map[string]struct {
		srcs []*HTTPSource
		opts []FailoverOption
		want string
	}{
		"none":       {nil, nil, "no endpoint"},
		"nil":        {[]*HTTPSource{a, nil}, nil, "source 1 is nil"},
		"twice":      {[]*HTTPSource{a, b, a2}, nil, "named twice"},
		"window":     {[]*HTTPSource{a, b}, []FailoverOption{WithFailbackAfter(0)}, "not positive"},
		"negative":   {[]*HTTPSource{a, b}, []FailoverOption{WithFailbackAfter(-time.Second)}, "not positive"},
		"nil option": {[]*HTTPSource{a, b}, []FailoverOption{nil}, ""},
	} {
		f, err := NewFailoverSource(tc.srcs, tc.opts...)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: error %v, want one saying %q", name, err, tc.want)
		}
		if f != nil {
			_ = f.Close()
		}
	}
}

// TestFailoverMovesOnEndpointFailure: a request failing for the endpoint's
// sake makes the next endpoint current, with the error returned as it is
// (a Retry-After in it, for the caller to wait); one failing for its own
// sake or the data's moves nothing.
func TestFailoverMovesOnEndpointFailure(t *testing.T) {
	leakCheck(t)
	in := StartStandIn(t, failoverCaps, 50*time.Millisecond)
	in.Publish(testNS, map[string]json.RawMessage{"k": json.RawMessage(`1`)}, nil)
	for _, tc := range []struct {
		name  string
		fault func(*front)
		moves bool
	}{
		{"refused", (*front).down, true},
		{"cut", func(f *front) { f.fault.Store(cutConnection) }, true},
		{"500", func(f *front) { f.fault.Store(500) }, true},
		{"503", func(f *front) { f.fault.Store(503) }, true},
		{"429", func(f *front) { f.fault.Store(429) }, true},
		{"404 not holdfast", func(f *front) { f.fault.Store(404) }, true},
		{"401", func(f *front) { f.fault.Store(401) }, false},
		{"410", func(f *front) { f.fault.Store(410) }, false},
		{"healthy", func(*front) {}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := newFront(t, in), newFront(t, in)
			f := newFailover(t, []*front{a, b})
			tc.fault(a)
			_, err := f.Snapshot(context.Background(), SnapshotRequest{Namespace: testNS})
			want := a.url
			if tc.moves {
				want = b.url
			}
			if got := f.Endpoint(); got != want {
				t.Fatalf("after %v: endpoint %s, want %s", err, got, want)
			}
			var se *StatusError
			if errors.As(err, &se) && se.StatusCode >= 429 && se.RetryAfter != time.Second {
				t.Errorf("error %v: Retry-After %v, want the server's 1s for the caller", err, se.RetryAfter)
			}
			if !tc.moves {
				return
			}
			if err == nil {
				t.Fatal("the failing request succeeded")
			}
			if _, err := f.Snapshot(context.Background(), SnapshotRequest{Namespace: testNS}); err != nil {
				t.Fatalf("on the next endpoint: %v", err)
			}
			if n := b.snapshots.Load(); n != 1 {
				t.Errorf("second endpoint served %d snapshots, want 1", n)
			}
		})
	}
}

// TestFailoverCallersContextMovesNothing: a request the caller's own
// context ends moves nothing, whatever error the source saw.
func TestFailoverCallersContextMovesNothing(t *testing.T) {
	leakCheck(t)
	in := StartStandIn(t, failoverCaps, 50*time.Millisecond)
	a, b := newFront(t, in), newFront(t, in)
	f := newFailover(t, []*front{a, b})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := f.Snapshot(ctx, SnapshotRequest{Namespace: testNS}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Snapshot: %v, want context.Canceled", err)
	}
	if err := f.Ack(ctx, Ack{Namespace: testNS, Revision: 1, Status: AckApplied}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Ack: %v, want context.Canceled", err)
	}
	if got := f.Endpoint(); got != a.url {
		t.Errorf("endpoint %s, want %s", got, a.url)
	}
	// A request refused before it is sent moves nothing either.
	if err := f.Ack(context.Background(), Ack{Namespace: testNS, Status: "maybe"}); err == nil {
		t.Error("Ack with a bad status succeeded")
	}
	if got := f.Endpoint(); got != a.url {
		t.Errorf("endpoint %s after a refused ack, want %s", got, a.url)
	}
}

// TestFailoverConcurrentFailuresMoveOnce: many requests failing together
// on the current endpoint move once, not once each.
func TestFailoverConcurrentFailuresMoveOnce(t *testing.T) {
	leakCheck(t)
	in := StartStandIn(t, failoverCaps, 50*time.Millisecond)
	a, b, c := newFront(t, in), newFront(t, in), newFront(t, in)
	f := newFailover(t, []*front{a, b, c})
	a.fault.Store(503)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, _ = f.Snapshot(context.Background(), SnapshotRequest{Namespace: testNS})
		}()
	}
	close(start)
	wg.Wait()
	if got := f.Endpoint(); got != b.url {
		t.Errorf("endpoint %s, want the second, %s", got, b.url)
	}
	// A late failure of an endpoint that is no longer current (a request
	// that ran there while the switch happened) moves nothing either.
	c.fault.Store(503)
	_, err := f.srcs[2].Snapshot(context.Background(), SnapshotRequest{Namespace: testNS})
	f.after(context.Background(), 2, err)
	if got := f.Endpoint(); got != b.url {
		t.Errorf("endpoint %s after a failure of the third, want still the second, %s", got, b.url)
	}
}

// streamCollector runs a WatchStream of testNS on f and records what it
// delivers.
type streamCollector struct {
	mu      sync.Mutex
	revs    []int64
	changed chan struct{}
	done    chan struct{}
	err     error
}

func collectStream(t *testing.T, ctx context.Context, f *FailoverSource, since int64) *streamCollector {
	c := &streamCollector{changed: make(chan struct{}, 1), done: make(chan struct{})}
	go func() {
		defer close(c.done)
		c.err = f.WatchStream(ctx, StreamRequest{Namespaces: []WatchRequest{{Namespace: testNS, Since: since}}},
			func(ev StreamEvent) error {
				if ev.Change != nil {
					c.mu.Lock()
					c.revs = append(c.revs, ev.Change.Revision)
					c.mu.Unlock()
					select {
					case c.changed <- struct{}{}:
					default:
					}
				}
				return nil
			})
	}()
	t.Cleanup(func() { <-c.done })
	return c
}

func (c *streamCollector) got() []int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.revs)
}

func (c *streamCollector) returned() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// TestFailoverStreamReturnsToPreferred: a client that failed over to the
// second endpoint returns to the first once it has been healthy for the
// window, not before: the running stream moves with it without returning
// to its caller, from the cursor it delivered (every change once, in
// order), and the second endpoint is let go (no connection left).
func TestFailoverStreamReturnsToPreferred(t *testing.T) {
	leakCheck(t)
	const window = 400 * time.Millisecond
	in := StartStandIn(t, failoverCaps, 50*time.Millisecond)
	put := func(v int) int64 {
		return in.Publish(testNS, map[string]json.RawMessage{"k": json.RawMessage(strconv.Itoa(v))}, nil)
	}
	put(0)
	a, b := newFront(t, in), newFront(t, in)
	f := newFailover(t, []*front{a, b}, WithFailbackAfter(window))
	a.down()
	if _, err := f.Snapshot(context.Background(), SnapshotRequest{Namespace: testNS}); err == nil {
		t.Fatal("snapshot from a refusing endpoint succeeded")
	}
	snap, err := f.Snapshot(context.Background(), SnapshotRequest{Namespace: testNS})
	if err != nil {
		t.Fatalf("snapshot from the second endpoint: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := collectStream(t, ctx, f, snap.Cursor)
	var want []int64
	for i := 1; i <= 3; i++ {
		want = append(want, put(i))
	}
	testutil.Eventually(t, 10*time.Second, func() bool { return len(c.got()) == len(want) }, "the changes on the second endpoint")

	a.up()
	upAt := time.Now()
	testutil.Eventually(t, 10*time.Second, func() bool { return f.Endpoint() == a.url }, "the return to the first endpoint")
	if took := time.Since(upAt); took < window {
		t.Errorf("returned %v after the first endpoint came back, before the %v window", took, window)
	}
	for i := 4; i <= 6; i++ {
		want = append(want, put(i))
	}
	testutil.Eventually(t, 10*time.Second, func() bool { return len(c.got()) == len(want) }, "the changes on the first endpoint")
	if got := c.got(); !slices.Equal(got, want) {
		t.Errorf("delivered %v, want %v", got, want)
	}
	if c.returned() {
		t.Fatalf("the stream returned to its caller: %v", c.err)
	}
	if n := a.streams.Load(); n != 1 {
		t.Errorf("first endpoint served %d streams, want 1 (the one moved)", n)
	}
	if n := a.snapshots.Load() + b.snapshots.Load(); n != 1 {
		t.Errorf("%d snapshots served, want 1", n)
	}
	testutil.Eventually(t, 10*time.Second, func() bool { return b.open.Load() == 0 }, "the second endpoint let go")
	if n := a.open.Load(); n != 1 {
		t.Errorf("%d connections to the first endpoint, want 1 (h2c)", n)
	}
	cancel()
	<-c.done
	if !errors.Is(c.err, context.Canceled) {
		t.Errorf("stream ended with %v, want context.Canceled", c.err)
	}
}

// TestFailoverBlipDoesNotMoveBack: the first endpoint back for less than
// the window, then down again, does not take the client back.
func TestFailoverBlipDoesNotMoveBack(t *testing.T) {
	leakCheck(t)
	const window = 600 * time.Millisecond
	in := StartStandIn(t, failoverCaps, 50*time.Millisecond)
	in.Publish(testNS, map[string]json.RawMessage{"k": json.RawMessage(`1`)}, nil)
	a, b := newFront(t, in), newFront(t, in)
	f := newFailover(t, []*front{a, b}, WithFailbackAfter(window))
	a.fault.Store(503)
	_, _ = f.Snapshot(context.Background(), SnapshotRequest{Namespace: testNS})
	if _, err := f.Snapshot(context.Background(), SnapshotRequest{Namespace: testNS}); err != nil || f.Endpoint() != b.url {
		t.Fatalf("not on the second endpoint (%s): %v", f.Endpoint(), err)
	}
	for range 3 {
		// Healthy for a third of the window: at most two good probes in a
		// row, spanning less than it.
		probes := a.probes.Load()
		a.fault.Store(0)
		time.Sleep(window / 3)
		a.fault.Store(503)
		if f.Endpoint() != b.url {
			t.Fatalf("moved back after a blip of %v (window %v)", window/3, window)
		}
		if a.probes.Load() == probes {
			t.Log("no probe during the blip")
		}
		time.Sleep(window / 2)
	}
	if f.Endpoint() != b.url {
		t.Fatal("moved back after blips")
	}
	if a.probes.Load() == 0 {
		t.Fatal("the first endpoint was never probed")
	}
	a.fault.Store(0)
	testutil.Eventually(t, 10*time.Second, func() bool { return f.Endpoint() == a.url }, "the return to the first endpoint")
}

// TestFailoverProbeRefusesBehind: a first endpoint behind the cursor the
// client holds (409 to the probe) is not returned to.
func TestFailoverProbeRefusesBehind(t *testing.T) {
	leakCheck(t)
	const window = 200 * time.Millisecond
	in := StartStandIn(t, failoverCaps, 50*time.Millisecond)
	in.Publish(testNS, map[string]json.RawMessage{"k": json.RawMessage(`1`)}, nil)
	a, b := newFront(t, in), newFront(t, in)
	f := newFailover(t, []*front{a, b}, WithFailbackAfter(window))
	a.fault.Store(503)
	_, _ = f.Snapshot(context.Background(), SnapshotRequest{Namespace: testNS})
	if _, err := f.Snapshot(context.Background(), SnapshotRequest{Namespace: testNS}); err != nil {
		t.Fatal(err)
	}
	f.note(testNS, 1000, "standin-1") // the client is ahead of the store's head
	a.fault.Store(0)
	testutil.Eventually(t, 10*time.Second, func() bool { return a.probes.Load() >= 10 }, "probes")
	if f.Endpoint() != b.url {
		t.Fatalf("returned to an endpoint behind the client's cursor")
	}
	f.note(testNS, 1, "another-store")
	before := a.probes.Load()
	testutil.Eventually(t, 10*time.Second, func() bool { return a.probes.Load() >= before+10 }, "probes")
	if f.Endpoint() != b.url {
		t.Fatalf("returned to an endpoint of another store")
	}
}

// TestFailoverProbesANamespaceOfTheStream: the prober asks for a
// namespace the stream still carries, not for the first one named (here
// invalid, or unknown to the server and ended): the client returns to
// the first endpoint.
func TestFailoverProbesANamespaceOfTheStream(t *testing.T) {
	leakCheck(t)
	const window = 200 * time.Millisecond
	in := StartStandIn(t, failoverCaps, 20*time.Millisecond)
	in.Publish(testNS, map[string]json.RawMessage{"k": json.RawMessage(`1`)}, nil)
	a, b := newFront(t, in), newFront(t, in)
	f := newFailover(t, []*front{a, b}, WithFailbackAfter(window))
	a.down()
	_, _ = f.Snapshot(context.Background(), SnapshotRequest{Namespace: testNS})
	snap, err := f.Snapshot(context.Background(), SnapshotRequest{Namespace: testNS})
	if err != nil || f.Endpoint() != b.url {
		t.Fatalf("not on the second endpoint (%s): %v", f.Endpoint(), err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ended := make(chan string, 2)
	done := make(chan error, 1)
	go func() {
		done <- f.WatchStream(ctx, StreamRequest{Namespaces: []WatchRequest{
			{Namespace: ".bad"}, {Namespace: "ghost"}, {Namespace: testNS, Since: snap.Cursor},
		}}, func(ev StreamEvent) error {
			if ev.Ended != nil {
				ended <- ev.Ended.Namespace
			}
			return nil
		})
	}()
	for range 2 {
		select {
		case <-ended:
		case err := <-done:
			t.Fatalf("stream ended: %v", err)
		case <-time.After(10 * time.Second):
			t.Fatal("no ended event")
		}
	}
	a.up()
	testutil.Eventually(t, 10*time.Second, func() bool { return f.Endpoint() == a.url }, "the return to the first endpoint")
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("stream ended with %v, want context.Canceled", err)
	}
}
