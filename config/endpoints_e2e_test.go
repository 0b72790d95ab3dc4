package config_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/internal/fakeserver"
	"github.com/holdfast-dev/holdfast/internal/sdksuite"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/internal/testutil/nstest"
	"github.com/holdfast-dev/holdfast/transport"
)

// End-to-end tests of WithEndpoints, over real HTTP: two endpoints are TCP fronts, each its own listener, of one
// reference server, so that they serve one store as two relays of one
// origin do. A front that goes down refuses connections and cuts those
// it carried; it comes back on the same address.

// tcpFront forwards the connections it accepts to target.
type tcpFront struct {
	t      testing.TB
	target string

	mu    sync.Mutex
	ln    net.Listener // nil while down
	addr  string
	conns map[net.Conn]struct{} // both ends of every forwarded connection
	wg    sync.WaitGroup

	accepted atomic.Int64
	open     atomic.Int64
}

func newTCPFront(t testing.TB, target string) *tcpFront {
	t.Helper()
	f := &tcpFront{t: t, target: target, addr: "127.0.0.1:0", conns: map[net.Conn]struct{}{}}
	f.up()
	t.Cleanup(f.down)
	return f
}

func (f *tcpFront) URL() string { return "http://" + f.addr }

func (f *tcpFront) up() {
	f.t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ln != nil {
		return
	}
	ln, err := net.Listen("tcp", f.addr)
	if err != nil {
		f.t.Fatalf("front: listen %s: %v", f.addr, err)
	}
	f.ln, f.addr = ln, ln.Addr().String()
	f.wg.Add(1)
	go f.accept(ln)
}

// down closes the listener and every connection it carried, and waits for
// its goroutines.
func (f *tcpFront) down() {
	f.mu.Lock()
	ln := f.ln
	f.ln = nil
	if ln != nil {
		_ = ln.Close()
	}
	for c := range f.conns {
		_ = c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}

func (f *tcpFront) accept(ln net.Listener) {
	defer f.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		f.accepted.Add(1)
		up, err := net.Dial("tcp", f.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		f.mu.Lock()
		if f.ln != ln { // went down meanwhile
			f.mu.Unlock()
			_, _ = c.Close(), up.Close()
			continue
		}
		f.conns[c], f.conns[up] = struct{}{}, struct{}{}
		f.open.Add(1)
		f.wg.Add(2)
		f.mu.Unlock()
		var once sync.Once
		closeBoth := func() {
			once.Do(func() {
				f.mu.Lock()
				delete(f.conns, c)
				delete(f.conns, up)
				f.mu.Unlock()
				_, _ = c.Close(), up.Close()
				f.open.Add(-1)
			})
		}
		for _, p := range [][2]net.Conn{{up, c}, {c, up}} {
			go func() {
				defer f.wg.Done()
				_, _ = io.Copy(p[0], p[1])
				closeBoth()
			}()
		}
	}
}

// endpointsClient is a client of the fronts, in order, returning to the
// first after window.
func endpointsClient(t testing.TB, window time.Duration, fronts []*tcpFront, opts ...config.Option) *config.Client {
	t.Helper()
	urls := make([]string, len(fronts))
	for i, f := range fronts {
		urls[i] = f.URL()
	}
	base := []config.Option{
		config.WithEndpoints(urls...),
		config.WithFailbackAfter(window),
		config.WithStreamIdleTimeout(relaxedIdle),
		config.WithReconnectBackoff(5*time.Millisecond, 50*time.Millisecond),
		config.WithLogger(sdksuite.Logger(t)),
	}
	c, err := config.New(append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// stateLog records the states of a namespace's status changes.
type stateLog struct {
	mu     sync.Mutex
	states []config.State
}

func (l *stateLog) watch(ns *config.Namespace) {
	ns.OnStatusChange(func(st config.Status) {
		l.mu.Lock()
		l.states = append(l.states, st.State)
		l.mu.Unlock()
	})
}

func (l *stateLog) reset() {
	l.mu.Lock()
	l.states = nil
	l.mu.Unlock()
}

func (l *stateLog) get() []config.State {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.states)
}

func endpointOf(nss ...*config.Namespace) func() string {
	return func() string {
		e := nss[0].Status().Endpoint
		for _, ns := range nss[1:] {
			if ns.Status().Endpoint != e {
				return ""
			}
		}
		return e
	}
}

// TestE2EEndpointsFailoverAndBack: the first endpoint dies; the client
// moves to the second and every namespace resumes from its cursor (no
// snapshot fetched again), publishes arriving in order, each once, acks
// reaching the server, Status naming the second. The first comes back:
// after the window, not before, the client returns to it, again without a
// snapshot and without going Stale, and lets the second go. Over the one
// stream (h2c: one connection to the endpoint serving), and over a watch
// per namespace against a server without the stream.
func TestE2EEndpointsFailoverAndBack(t *testing.T) {
	t.Run("stream", func(t *testing.T) { testFailoverAndBack(t, true) })
	t.Run("watch per namespace", func(t *testing.T) {
		testFailoverAndBack(t, false, fakeserver.WithoutCapability(transport.CapabilityStream))
	})
}

func testFailoverAndBack(t *testing.T, stream bool, opts ...fakeserver.Option) {
	const window = time.Second
	srv := sdksuite.StartReference(t, opts...)
	names := []string{"payments", "search"}
	for _, name := range names {
		sdksuite.Publish(t, srv, name, map[string]any{"seq": 0})
	}
	a, b := newTCPFront(t, srv.Addr()), newTCPFront(t, srv.Addr())
	c := endpointsClient(t, window, []*tcpFront{a, b})
	revs, states := newRevLog(), &stateLog{}
	var nss []*config.Namespace
	for _, name := range names {
		ns := sdksuite.Open(t, c, name)
		revs.watch(ns)
		states.watch(ns)
		nss = append(nss, ns)
	}
	endpoint := endpointOf(nss...)
	if got := endpoint(); got != a.URL() {
		t.Fatalf("serving endpoint %q, want the first, %s", got, a.URL())
	}
	snapshots := srv.Stats().Snapshots
	pub := startPublisher(t, srv, names, 20*time.Millisecond, 0)
	pub.waitRounds(t, 3)

	a.down()
	testutil.Eventually(t, waitLimit, func() bool { return endpoint() == b.URL() }, "the move to the second endpoint")
	pub.waitRounds(t, 5)
	caughtUp := func(what string) {
		t.Helper()
		for i, ns := range nss {
			published := pub.get(names[i])
			nstest.WaitRevision(t, ns, published[len(published)-1], waitLimit)
			if st := ns.Status(); st.Endpoint == "" || !strings.Contains(st.String(), "endpoint "+st.Endpoint) {
				t.Errorf("%s: Status.String() %q does not name the endpoint %q", what, st, st.Endpoint)
			}
		}
		testutil.Eventually(t, waitLimit, func() bool {
			for _, ns := range nss {
				if ns.Status().State != config.StateFresh {
					return false
				}
			}
			return true
		}, what+": every namespace Fresh")
	}
	caughtUp("on the second")
	if stream {
		testutil.Eventually(t, waitLimit, func() bool { return b.open.Load() == 1 }, "one connection to the second endpoint")
	}
	if n := srv.Stats().Snapshots - snapshots; n != 0 {
		t.Errorf("%d snapshots fetched when moving to the second endpoint, want 0", n)
	}

	states.reset()
	a.up()
	upAt := time.Now()
	testutil.Eventually(t, waitLimit, func() bool { return endpoint() == a.URL() }, "the return to the first endpoint")
	if took := time.Since(upAt); took < window {
		t.Errorf("returned to the first endpoint %v after it came back, before the %v window", took, window)
	}
	pub.waitRounds(t, 5)
	pub.halt()
	caughtUp("back on the first")
	if n := srv.Stats().Snapshots - snapshots; n != 0 {
		t.Errorf("%d snapshots fetched in all, want 0", n)
	}
	for i, ns := range nss {
		published := pub.get(names[i])
		testutil.Eventually(t, waitLimit, func() bool {
			seen, _ := revs.get(names[i])
			return last(seen) == last(published)
		}, names[i]+"'s last callback")
		revs.check(t, names[i], published, last(published), true)
		if st := states.get(); slices.Contains(st, config.StateStale) {
			t.Errorf("%s went Stale on the planned return (states %v)", ns.Name(), st)
		}
	}
	// Acks of the last revisions reached the server, whichever endpoint
	// carried them.
	testutil.Eventually(t, waitLimit, func() bool {
		acked := 0
		for _, cs := range srv.Clients() {
			if cs.ClientID == c.ClientID() && !cs.Behind {
				acked++
			}
		}
		return acked == len(names)
	}, "acks of the last revisions")
	testutil.Eventually(t, waitLimit, func() bool { return b.open.Load() == 0 }, "the second endpoint let go")
	if stream {
		// One connection (h2c) carries the stream, snapshots and acks.
		testutil.Eventually(t, waitLimit, func() bool { return a.open.Load() == 1 }, "one connection to the first endpoint")
		if n := srv.OpenStreams(); n != 1 {
			t.Errorf("%d streams open on the server, want 1", n)
		}
	}
}

// TestE2EEndpointsBlipDoesNotMoveBack: the first endpoint back for a
// fraction of the window, then down again, several times: the client stays
// on the second throughout.
func TestE2EEndpointsBlipDoesNotMoveBack(t *testing.T) {
	const window = 1500 * time.Millisecond
	srv := sdksuite.StartReference(t)
	sdksuite.Publish(t, srv, "payments", map[string]any{"seq": 0})
	a, b := newTCPFront(t, srv.Addr()), newTCPFront(t, srv.Addr())
	c := endpointsClient(t, window, []*tcpFront{a, b})
	ns := sdksuite.Open(t, c, "payments")
	a.down()
	rev := sdksuite.Publish(t, srv, "payments", map[string]any{"seq": 1})
	nstest.WaitRevision(t, ns, rev, waitLimit)
	testutil.Eventually(t, waitLimit, func() bool { return ns.Status().Endpoint == b.URL() }, "the move to the second endpoint")
	probed := a.accepted.Load()
	for range 3 {
		a.up()
		time.Sleep(window / 4)
		a.down()
		if got := ns.Status().Endpoint; got != b.URL() {
			t.Fatalf("moved to %s after a blip of %v (window %v)", got, window/4, window)
		}
		time.Sleep(window / 4)
	}
	if a.accepted.Load() == probed {
		t.Error("the first endpoint was never probed during its blips")
	}
	if got := ns.Status().Endpoint; got != b.URL() {
		t.Fatalf("moved to %s after blips", got)
	}
	rev = sdksuite.Publish(t, srv, "payments", map[string]any{"seq": 2})
	nstest.WaitRevision(t, ns, rev, waitLimit)
}

// TestE2EEndpointsAllDown: with every endpoint down the namespace goes
// Stale, as with one; when any comes back (here the second) it recovers
// there, from its cursor; then the first comes back and the client
// returns to it.
func TestE2EEndpointsAllDown(t *testing.T) {
	const window = 500 * time.Millisecond
	srv := sdksuite.StartReference(t)
	sdksuite.Publish(t, srv, "payments", map[string]any{"seq": 0})
	a, b := newTCPFront(t, srv.Addr()), newTCPFront(t, srv.Addr())
	c := endpointsClient(t, window, []*tcpFront{a, b})
	ns := sdksuite.Open(t, c, "payments")
	snapshots := srv.Stats().Snapshots

	a.down()
	b.down()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := ns.WaitForState(ctx, config.StateStale); err != nil {
		t.Fatalf("not Stale with every endpoint down: %v (status %v)", err, ns.Status())
	}
	if le := ns.Status().LastError; le.Kind != config.ErrorNetwork {
		t.Errorf("last error %v, want a network error", le)
	}
	rev := sdksuite.Publish(t, srv, "payments", map[string]any{"seq": 1})
	b.up()
	nstest.WaitRevision(t, ns, rev, waitLimit)
	if err := ns.WaitForState(ctx, config.StateFresh); err != nil {
		t.Fatalf("not Fresh once the second is back: %v (status %v)", err, ns.Status())
	}
	if got := ns.Status().Endpoint; got != b.URL() {
		t.Errorf("recovered on %s, want the second, %s", got, b.URL())
	}
	a.up()
	testutil.Eventually(t, waitLimit, func() bool { return ns.Status().Endpoint == a.URL() }, "the return to the first endpoint")
	rev = sdksuite.Publish(t, srv, "payments", map[string]any{"seq": 2})
	nstest.WaitRevision(t, ns, rev, waitLimit)
	if n := srv.Stats().Snapshots - snapshots; n != 0 {
		t.Errorf("%d snapshots fetched, want 0", n)
	}
}

// TestWithEndpointsValidates: a list New cannot use fails it, saying why.
func TestWithEndpointsValidates(t *testing.T) {
	for name, tc := range map[string]struct {
		opts []config.Option
		want string
	}{
		"none given":  {nil, "no endpoint"},
		"empty one":   {[]config.Option{config.WithEndpoint("")}, "no endpoint"},
		"empty list":  {[]config.Option{config.WithEndpoints()}, "WithEndpoints: no URL"},
		"scheme":      {[]config.Option{config.WithEndpoints("http://127.0.0.1:1", "ftp://127.0.0.1:2")}, `endpoint 2 of 2: transport: base URL "ftp://127.0.0.1:2": scheme must be http or https`},
		"malformed":   {[]config.Option{config.WithEndpoints("http://[::1", "http://127.0.0.1:2")}, "endpoint 1 of 2: transport: invalid base URL"},
		"no host":     {[]config.Option{config.WithEndpoints("http://127.0.0.1:1", "http://")}, "endpoint 2 of 2: transport: base URL \"http://\" has no host"},
		"query":       {[]config.Option{config.WithEndpoints("http://127.0.0.1:1", "http://127.0.0.1:2/?x=1")}, "must not have a query"},
		"twice":       {[]config.Option{config.WithEndpoints("http://127.0.0.1:1", "http://127.0.0.1:1")}, "named twice"},
		"twice, /":    {[]config.Option{config.WithEndpoints("http://127.0.0.1:1", "http://127.0.0.1:1/")}, "named twice"},
		"one bad":     {[]config.Option{config.WithEndpoints("ftp://x")}, "scheme must be http or https"},
		"no failback": {[]config.Option{config.WithEndpoints("http://127.0.0.1:1", "http://127.0.0.1:2"), config.WithFailbackAfter(0)}, "failback window 0s is not positive"},
	} {
		c, err := config.New(tc.opts...)
		if err == nil {
			_ = c.Close()
			t.Errorf("%s: New succeeded", name)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "config: ") {
			t.Errorf("%s: %q, want a config error saying %q", name, err, tc.want)
		}
	}
	// The last list wins; one URL is WithEndpoint.
	c, err := config.New(config.WithEndpoints("ftp://x"), config.WithEndpoint("http://127.0.0.1:1"))
	if err != nil {
		t.Fatalf("WithEndpoint after WithEndpoints: %v", err)
	}
	_ = c.Close()
}

// TestWithEndpointStatusNamesIt: the one-endpoint client names its
// endpoint in Status too (password redacted); a source of one's own that
// names none leaves it empty.
func TestWithEndpointStatusNamesIt(t *testing.T) {
	srv := sdksuite.StartReference(t)
	sdksuite.Publish(t, srv, "payments", map[string]any{"seq": 0})
	url := "http://user:secret@" + srv.Addr()
	c := sdksuite.NewClient(t, sdksuite.Endpoint(url))
	ns := sdksuite.Open(t, c, "payments")
	if got, want := ns.Status().Endpoint, "http://user:xxxxx@"+srv.Addr(); got != want {
		t.Errorf("Status.Endpoint %q, want %q", got, want)
	}
	if s := ns.Status().String(); strings.Contains(s, "secret") {
		t.Errorf("Status.String() shows the password: %q", s)
	}

	hs, err := transport.NewHTTPSource(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer hs.Close()
	c2, err := config.New(config.WithSource(sourceOnly{hs}))
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	ns2 := sdksuite.Open(t, c2, "payments")
	if got := ns2.Status().Endpoint; got != "" {
		t.Errorf("Status.Endpoint %q with a source that names none, want empty", got)
	}
}

// sourceOnly hides every method of its source but those of Source.
type sourceOnly struct{ s transport.Source }

func (s sourceOnly) Snapshot(ctx context.Context, req transport.SnapshotRequest) (*transport.Snapshot, error) {
	return s.s.Snapshot(ctx, req)
}

func (s sourceOnly) Watch(ctx context.Context, req transport.WatchRequest, handle func(transport.Event) error) error {
	return s.s.Watch(ctx, req, handle)
}

// TestWithSourceNamesTheClient: an HTTP source of WithSource sends the
// client's id (a server with tokens takes acks from the identity a
// client connected as), unless it was given one of its own.
func TestWithSourceNamesTheClient(t *testing.T) {
	srv := sdksuite.StartReference(t)
	sdksuite.Publish(t, srv, "payments", map[string]any{"seq": 0})
	var mu sync.Mutex
	seen := map[string]bool{}
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.Header.Get(transport.HeaderClientID)] = true
		mu.Unlock()
		srv.Handler().ServeHTTP(w, r)
	}))
	defer front.Close()
	for _, tc := range []struct {
		name string
		opts []transport.HTTPOption
		want string
	}{
		{"the client's id", nil, "config-client-1"},
		{"the source's own", []transport.HTTPOption{transport.WithClientID("source-own")}, "source-own"},
	} {
		hs, err := transport.NewHTTPSource(front.URL, tc.opts...)
		if err != nil {
			t.Fatal(err)
		}
		c, err := config.New(config.WithSource(hs), config.WithClientID("config-client-1"))
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		clear(seen)
		mu.Unlock()
		sdksuite.Open(t, c, "payments")
		mu.Lock()
		if !seen[tc.want] || len(seen) != 1 {
			t.Errorf("%s: the requests named client ids %v, want %q", tc.name, seen, tc.want)
		}
		mu.Unlock()
		c.Close()
		hs.Close()
	}
}
