package proxytest

import (
	"context"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/internal/fakeserver"
	"github.com/holdfast-dev/holdfast/internal/sdksuite"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/relay"
	"github.com/holdfast-dev/holdfast/transport"
)

// suiteHeartbeat is the servers' heartbeat in the suite (a client's idle
// timeout is three of them).
const suiteHeartbeat = time.Second

// topology is a client's path to the server: through a proxy (or none),
// plaintext or TLS, straight to the server or to a relay of it.
type topology struct {
	proxy string // "", "nginx", "nginx-sse", "haproxy", "go" (httputil.ReverseProxy)
	tls   bool
	relay bool
}

func (tp topology) String() string {
	name := tp.proxy
	if name == "" {
		name = "direct"
	}
	if tp.tls {
		name += "/tls"
	}
	if tp.relay {
		name += "/relay"
	} else {
		name += "/server"
	}
	return name
}

// env is a topology running: the origin, perhaps a relay, the proxy, and
// a client of the proxy.
type env struct {
	t      testing.TB
	srv    *fakeserver.Server
	proxy  *proc // nil without one (or for "go")
	client *config.Client
	ns     *config.Namespace
	logs   *h2Errors
	id     string // the client's id

	mu      sync.Mutex
	changes map[int64]time.Time // revision → when OnChange ran
	changed chan struct{}
}

// start brings the topology up with extra as the proxy's extra settings,
// and opens namespace "app" through it.
func (tp topology) start(t testing.TB, extra string, serverOpts ...fakeserver.Option) *env {
	t.Helper()
	e := &env{t: t, logs: &h2Errors{}, id: "client-" + tp.String(), changes: map[int64]time.Time{}, changed: make(chan struct{}, 1)}
	e.srv = sdksuite.StartReference(t, append([]fakeserver.Option{fakeserver.WithHeartbeat(suiteHeartbeat)}, serverOpts...)...)
	if _, err := e.srv.Publish("app", map[string]any{"v": 0}); err != nil {
		t.Fatal(err)
	}
	upstream := e.srv.Addr()
	if tp.relay {
		upstream = startRelay(t, e.srv.URL())
	}
	var c *certs
	if tp.tls {
		c = newCerts(t)
	}
	setup := proxySetup{upstream: upstream, tls: c, extra: extra}
	endpoint := "http://" + upstream
	switch tp.proxy {
	case "nginx", "nginx-sse":
		if extra == "" {
			setup.extra = nginxDefaults
			if tp.proxy == "nginx-sse" {
				setup.extra = nginxSSE
			}
		}
		e.proxy = startNginx(t, setup)
		endpoint = e.proxy.url(tp.tls)
	case "haproxy":
		e.proxy = startHAProxy(t, setup)
		endpoint = e.proxy.url(tp.tls)
	case "go":
		endpoint = startGoProxy(t, "http://"+upstream, nil).URL
	}
	opts := []config.Option{config.WithClientID(e.id), config.WithLogger(slogOf(t, e.logs))}
	if c != nil {
		opts = append(opts, config.WithHTTPClient(c.httpClient()))
	}
	e.client = sdksuite.NewDefaultClient(t, sdksuite.Endpoint(endpoint), opts...)
	e.ns = sdksuite.Open(t, e.client, "app")
	e.ns.OnChange("v", func(ch config.Change) {
		e.mu.Lock()
		e.changes[ch.Revision] = time.Now()
		e.mu.Unlock()
		select {
		case e.changed <- struct{}{}:
		default:
		}
	})
	return e
}

// startRelay serves a relay of the server at url on a loopback port and
// returns its address.
func startRelay(t testing.TB, url string) string {
	t.Helper()
	up, err := transport.NewHTTPSource(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = up.Close() })
	r, err := relay.New(up, relay.WithHeartbeat(suiteHeartbeat))
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Serve(ctx, l) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("relay: Serve: %v", err)
		}
	})
	return l.Addr().String()
}

// publishTimed publishes n revisions one after another, each once the
// last reached OnChange, and returns the latencies.
func (e *env) publishTimed(n int) []time.Duration {
	e.t.Helper()
	var lat []time.Duration
	for i := range n {
		start := time.Now()
		rev, err := e.srv.Publish("app", map[string]any{"v": i + 1})
		if err != nil {
			e.t.Fatal(err)
		}
		at, ok := e.waitChange(rev, 20*time.Second)
		if !ok {
			e.t.Fatalf("revision %d did not reach OnChange in 20 s: %+v", rev, e.ns.Status())
		}
		lat = append(lat, at.Sub(start))
	}
	return lat
}

// waitChange waits until OnChange ran for rev.
func (e *env) waitChange(rev int64, d time.Duration) (time.Time, bool) {
	timeout := time.NewTimer(d)
	defer timeout.Stop()
	for {
		e.mu.Lock()
		at, ok := e.changes[rev]
		e.mu.Unlock()
		if ok {
			return at, true
		}
		select {
		case <-e.changed:
		case <-timeout.C:
			return time.Time{}, false
		}
	}
}

// waitAck waits until the server records the client's ack of rev (or a
// later one).
func (e *env) waitAck(rev int64) {
	e.t.Helper()
	acked := func() bool {
		for _, c := range e.srv.Clients() {
			if c.ClientID == e.id && c.Namespace == "app" && c.AckedRevision >= rev {
				return true
			}
		}
		return false
	}
	if !testutil.Wait(20*time.Second, acked) {
		e.t.Fatalf("the server has no ack of revision %d from %s in 20 s: %+v", rev, e.id, e.srv.Clients())
	}
}

func requests(s fakeserver.Stats) int64 {
	return s.Snapshots + s.Events + s.Watches + s.Acks + s.Streams + s.StreamPolls + s.AckStreams + s.Cohorts
}

// restartServer stops the server, resets its store if newStore, publishes
// there, starts it again and returns how long after the restarted
// server's first request the client had converged (the new revision
// applied).
func (e *env) restartServer(newStore bool) time.Duration {
	e.t.Helper()
	if err := e.srv.Stop(); err != nil {
		e.t.Fatal(err)
	}
	store := e.ns.Status().StoreID
	if newStore {
		store = e.srv.ResetStore()
		e.mu.Lock()
		clear(e.changes) // revisions start again
		e.mu.Unlock()
	}
	rev, err := e.srv.Publish("app", map[string]any{"v": "restarted"})
	if err != nil {
		e.t.Fatal(err)
	}
	before := requests(e.srv.Stats())
	if err := e.srv.Restart(); err != nil {
		e.t.Fatal(err)
	}
	var first time.Time
	converged := func() bool {
		if first.IsZero() && requests(e.srv.Stats()) != before {
			first = time.Now()
		}
		st := e.ns.Status()
		return st.StoreID == store && st.Revision >= rev
	}
	if !testutil.Wait(60*time.Second, converged) {
		e.t.Fatalf("not converged 60 s after the restart: %+v", e.ns.Status())
	}
	if first.IsZero() { // converged in the poll that saw the first request
		return 0
	}
	return time.Since(first)
}

// restartProxy restarts the proxy, publishes, and returns how long the
// revision took to reach OnChange.
func (e *env) restartProxy() time.Duration {
	e.t.Helper()
	e.proxy.restart()
	start := time.Now()
	rev, err := e.srv.Publish("app", map[string]any{"v": "proxy restarted"})
	if err != nil {
		e.t.Fatal(err)
	}
	at, ok := e.waitChange(rev, 60*time.Second)
	if !ok {
		e.t.Fatalf("revision %d did not reach OnChange 60 s after the proxy restarted: %+v", rev, e.ns.Status())
	}
	return at.Sub(start)
}

func percentile(d []time.Duration, p float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(p*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// The suite: in every topology, open, 20 publishes → OnChange, acks
// recorded, the server restarted with the same store and with a new one
// (converged within 3 s of its first request), the proxy restarted; no
// request fails for the choice of protocol. It logs the figures of
// docs/PROXIES.md.
func TestProxySuite(t *testing.T) {
	var tops []topology
	for _, p := range []string{"", "go", "nginx", "nginx-sse", "haproxy"} {
		for _, tls := range []bool{false, true} {
			if tls && (p == "" || p == "go") {
				continue
			}
			for _, r := range []bool{false, true} {
				tops = append(tops, topology{proxy: p, tls: tls, relay: r})
			}
		}
	}
	for _, tp := range tops {
		t.Run(tp.String(), func(t *testing.T) {
			t.Parallel()
			e := tp.start(t, "")
			lat := e.publishTimed(20)
			e.waitAck(e.ns.Revision())
			same := e.restartServer(false)
			fresh := e.restartServer(true)
			e.waitAck(e.ns.Revision())
			proxyRestart := time.Duration(0)
			if e.proxy != nil {
				proxyRestart = e.restartProxy()
				e.waitAck(e.ns.Revision())
			}
			for _, d := range []time.Duration{same, fresh} {
				if d > 3*time.Second {
					t.Errorf("converged %v after the restarted server's first request; want <= 3s", d)
				}
			}
			if n := e.logs.count(); n > 0 {
				t.Errorf("%d requests failed over HTTP/2 for the choice of protocol; want 0 (first: %s)", n, e.logs.firstErr())
			}
			t.Logf("%-24s publish→OnChange p50 %v p99 %v; converge after restart: same store %v, new store %v; after proxy restart %v; h2 failures %d; watch mode %s",
				tp, percentile(lat, .5).Round(10*time.Microsecond), percentile(lat, .99).Round(10*time.Microsecond),
				same.Round(time.Millisecond), fresh.Round(time.Millisecond), proxyRestart.Round(time.Millisecond), e.logs.count(), e.ns.Status().WatchMode)
		})
	}
}

// Behind a proxy that buffers streams (nginx told to ignore the server's
// X-Accel-Buffering: no), a client with the defaults (WatchAuto, the
// server's default heartbeat: 15 s idle streams) moves to long-poll
// within 60 s, says so in Status.WatchMode, and then gets publishes and
// has its acks recorded.
func TestBufferingProxyMovesToLongPoll(t *testing.T) {
	for _, tp := range []topology{{proxy: "nginx"}, {proxy: "nginx", tls: true}, {proxy: "nginx", relay: true}} {
		t.Run(tp.String(), func(t *testing.T) {
			t.Parallel()
			e := tp.start(t, nginxBuffering, fakeserver.WithHeartbeat(5*time.Second))
			start := time.Now()
			if !testutil.Wait(60*time.Second, func() bool { return e.ns.Status().WatchMode == "long-poll" }) {
				t.Fatalf("still %q 60 s after open: %+v", e.ns.Status().WatchMode, e.ns.Status())
			}
			t.Logf("%s: long-poll after %v", tp, time.Since(start).Round(time.Millisecond))
			lat := e.publishTimed(5)
			e.waitAck(e.ns.Revision())
			t.Logf("%s: publish→OnChange over long-poll p50 %v max %v", tp, percentile(lat, .5).Round(10*time.Microsecond), percentile(lat, 1).Round(10*time.Microsecond))
		})
	}
}

// A proxy whose read timeout is shorter than the server's heartbeat cuts
// every quiet stream: the client resumes from its cursor, takes no
// snapshot, and stays Fresh throughout (each stream confirms the data as
// it opens; a live stream's cut is not reported as a failure).
func TestProxyReadTimeoutShorterThanHeartbeat(t *testing.T) {
	for _, c := range []struct {
		tp    topology
		extra string
	}{
		{topology{proxy: "nginx-sse"}, `
			proxy_http_version 1.1;
			proxy_set_header Connection "";
			proxy_buffering off;
			proxy_read_timeout 1s;`},
		{topology{proxy: "haproxy"}, `
	timeout connect 5s
	timeout client 50s
	timeout server 1s`},
	} {
		t.Run(c.tp.String(), func(t *testing.T) {
			t.Parallel()
			e := c.tp.start(t, c.extra, fakeserver.WithHeartbeat(3*time.Second))
			var mu sync.Mutex
			var states []config.State
			e.ns.OnStatusChange(func(st config.Status) {
				mu.Lock()
				states = append(states, st.State)
				mu.Unlock()
			})
			before := e.srv.Stats()
			if !testutil.Wait(30*time.Second, func() bool { return e.srv.Stats().Streams >= before.Streams+4 }) {
				t.Fatalf("the stream was not cut and resumed 4 times in 30 s: %+v", e.srv.Stats())
			}
			rev, err := e.srv.Publish("app", map[string]any{"v": "after cuts"})
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := e.waitChange(rev, 20*time.Second); !ok {
				t.Fatalf("revision %d did not arrive: %+v", rev, e.ns.Status())
			}
			e.waitAck(rev)
			after := e.srv.Stats()
			if after.Snapshots != before.Snapshots {
				t.Errorf("%d snapshots while the proxy cut the stream; want 0", after.Snapshots-before.Snapshots)
			}
			testutil.Wait(10*time.Second, func() bool { return e.ns.Status().State == config.StateFresh })
			st := e.ns.Status()
			mu.Lock()
			defer mu.Unlock()
			if st.State != config.StateFresh || slices.ContainsFunc(states, func(s config.State) bool { return s != config.StateFresh }) {
				t.Errorf("state %v, changes %v while the proxy cut the stream; want Fresh throughout", st.State, states)
			}
			t.Logf("%s: %d streams resumed, %d snapshots, states %v, watch mode %s", c.tp, after.Streams-before.Streams, after.Snapshots-before.Snapshots, states, st.WatchMode)
		})
	}
}
