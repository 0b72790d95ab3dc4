package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/holdfasttest"
	"github.com/holdfast-dev/holdfast/internal/testutil"
)

// The edge tier with real processes and real sockets: an in-process
// origin (the reference server, which the test can stop,
// restart and reset), relays as `holdfast relay` processes, SDK clients.

// relayProc is one `holdfast relay` process (or `holdfast server`, see
// startServerProc).
type relayProc struct {
	t     testing.TB
	bin   string
	args  []string
	addr  string // fixed by the first start, reused by restarts
	ready string // the log message that says it serves (default "relay serving")

	cmd    *exec.Cmd
	copied chan struct{}
	wait   func() error
	logs   *logRecorder
}

// startRelayProc starts `holdfast relay -upstream upstream` on a port
// kept for the test (the same port on restarts), with a short heartbeat.
func startRelayProc(t testing.TB, bin, upstream string, extra ...string) *relayProc {
	t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", testutil.LoopbackPort(t))
	p := &relayProc{t: t, bin: bin, addr: addr,
		args: append([]string{"relay", "-addr", addr, "-upstream", upstream, "-heartbeat", "200ms", "-log-format", "json"}, extra...)}
	p.start()
	t.Cleanup(p.kill)
	return p
}

func (p *relayProc) url() string { return "http://" + p.addr }

func (p *relayProc) start() {
	t := p.t
	t.Helper()
	p.cmd = exec.Command(p.bin, p.args...)
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // if the test binary dies, so does it
	p.logs = newLogRecorder()
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.copied = make(chan struct{})
	go func(copied chan struct{}, logs *logRecorder) {
		defer close(copied)
		_, _ = io.Copy(logs, stderr)
	}(p.copied, p.logs)
	p.wait = sync.OnceValue(p.cmd.Wait)
	ready := p.ready
	if ready == "" {
		ready = "relay serving"
	}
	p.logs.waitFor(t, ready, p.copied)
}

// kill ends the process at once (SIGKILL: no drain, no flush).
func (p *relayProc) kill() {
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.copied
	_ = p.wait()
	p.cmd = nil
}

// stop ends it with SIGTERM and checks it exits 0.
func (p *relayProc) stop() {
	t := p.t
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.copied:
	case <-time.After(15 * time.Second):
		t.Fatalf("relay: no exit within 15s of SIGTERM\n%s", p.logs.String())
	}
	if code := exitCode(t, p.wait()); code != exitOK {
		t.Fatalf("relay: exit status %d after SIGTERM\n%s", code, p.logs.String())
	}
	p.cmd = nil
}

// countingTransport counts the snapshot requests a client makes.
type countingTransport struct {
	base      http.RoundTripper
	snapshots atomic.Int64
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Path == "/sdk/snapshot" {
		c.snapshots.Add(1)
	}
	return c.base.RoundTrip(r)
}

// fleetClient is an SDK client of endpoints, counting its snapshots.
func fleetClient(t testing.TB, endpoints []string, opts ...config.Option) (*config.Client, *countingTransport) {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	ct := &countingTransport{base: tr}
	c, err := config.New(append([]config.Option{
		config.WithEndpoints(endpoints...),
		config.WithHTTPClient(&http.Client{Transport: ct}),
		config.WithReconnectBackoff(5*time.Millisecond, 100*time.Millisecond),
	}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, ct
}

func openNS(t testing.TB, c *config.Client, name string, opts ...config.NamespaceOption) *config.Namespace {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	ns, err := c.Namespace(ctx, name, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

// waitLimit bounds every wait of these tests on a condition.
const waitLimit = 20 * time.Second

// recorder records every revision a namespace applied, in order.
type recorder struct {
	mu   sync.Mutex
	revs []int64
}

func record(ns *config.Namespace) *recorder {
	r := &recorder{}
	ns.OnChange("v", func(ch config.Change) {
		r.mu.Lock()
		r.revs = append(r.revs, ch.Revision)
		r.mu.Unlock()
	})
	return r
}

// checkOnce waits for the callback of revision last, then fails unless
// the revisions seen are every one from the first seen to last, once and
// in order (the tests publish to one namespace: its revisions are
// consecutive).
func (r *recorder) checkOnce(t *testing.T, who string, last int64) {
	t.Helper()
	r.check(t, who, last, true)
}

// checkIncreasing is checkOnce where revisions may be skipped (history
// compacted away comes as one change).
func (r *recorder) checkIncreasing(t *testing.T, who string, last int64) {
	t.Helper()
	r.check(t, who, last, false)
}

func (r *recorder) check(t *testing.T, who string, last int64, consecutive bool) {
	t.Helper()
	testutil.Eventually(t, waitLimit, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.revs) > 0 && r.revs[len(r.revs)-1] >= last
	}, who+"'s callback of the last revision")
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := 1; i < len(r.revs); i++ {
		if r.revs[i] <= r.revs[i-1] || consecutive && r.revs[i] != r.revs[i-1]+1 {
			t.Fatalf("%s applied %v: revision %d after %d (want each once, in order)", who, r.revs, r.revs[i], r.revs[i-1])
		}
	}
}

func publishV(t *testing.T, origin *holdfasttest.Server, ns string, v int) int64 {
	t.Helper()
	rev, err := origin.Publish(ns, map[string]any{"v": v})
	if err != nil {
		t.Fatal(err)
	}
	return rev
}

// TestFleetFailoverBetweenRelays: origin → two relay processes → clients
// that list both; kill the first relay and its clients resume on the
// second with the same cursor: no snapshot fetched, nothing missed or
// applied twice.
func TestFleetFailoverBetweenRelays(t *testing.T) {
	bin := buildBinary(t)
	origin := holdfasttest.NewServer(t, holdfasttest.WithHeartbeat(200*time.Millisecond))
	publishV(t, origin, "app", 0)
	a := startRelayProc(t, bin, origin.URL())
	b := startRelayProc(t, bin, origin.URL())

	type client struct {
		ns  *config.Namespace
		rec *recorder
		ct  *countingTransport
	}
	var cs []client
	for i := range 4 {
		eps := []string{a.url(), b.url()}
		if i%2 == 1 {
			eps = []string{b.url(), a.url()}
		}
		c, ct := fleetClient(t, eps)
		ns := openNS(t, c, "app")
		cs = append(cs, client{ns: ns, rec: record(ns), ct: ct})
	}
	var last int64
	for v := 1; v <= 3; v++ {
		last = publishV(t, origin, "app", v)
	}
	for i, c := range cs {
		testutil.Eventually(t, waitLimit, func() bool { return c.ns.Status().Revision == last }, "client "+strconv.Itoa(i)+" converges")
	}
	before := make([]int64, len(cs))
	for i, c := range cs {
		before[i] = c.ct.snapshots.Load()
	}

	a.kill()
	for v := 4; v <= 8; v++ {
		last = publishV(t, origin, "app", v)
	}
	for i, c := range cs {
		testutil.Eventually(t, waitLimit, func() bool { return c.ns.Status().Revision == last }, "client "+strconv.Itoa(i)+" converges after the relay died")
		if st := c.ns.Status(); st.Endpoint != b.url() {
			t.Errorf("client %d served by %q, want the surviving relay %q", i, st.Endpoint, b.url())
		}
		if got := c.ct.snapshots.Load() - before[i]; got != 0 {
			t.Errorf("client %d fetched %d snapshots on failover, want 0 (a cursor resume)", i, got)
		}
		c.rec.checkOnce(t, "client "+strconv.Itoa(i), last)
	}
}

// TestFleetOriginDown: kill the origin and every client behind a relay
// reports Stale (its relay still reachable, still sending heartbeats),
// then Breached past MaxStaleness; a relay restarted meanwhile serves its
// cache, and a new client that opens through it is Stale from its first
// answer with the outage's age. The origin back, everyone is Fresh.
func TestFleetOriginDown(t *testing.T) {
	bin := buildBinary(t)
	origin := holdfasttest.NewServer(t, holdfasttest.WithHeartbeat(200*time.Millisecond))
	rev := publishV(t, origin, "app", 1)
	r := startRelayProc(t, bin, origin.URL(), "-cache-dir", t.TempDir())
	const maxStale = 2 * time.Second
	c, _ := fleetClient(t, []string{r.url()}, config.WithStreamIdleTimeout(600*time.Millisecond))
	ns := openNS(t, c, "app", config.MaxStaleness(maxStale))
	testutil.Eventually(t, waitLimit, func() bool { return ns.Status().State == config.StateFresh && ns.Status().Revision == rev }, "Fresh")

	if err := origin.Stop(); err != nil {
		t.Fatal(err)
	}
	down := time.Now()
	testutil.Eventually(t, waitLimit, func() bool { return ns.Status().State == config.StateStale }, "Stale behind a relay cut off")
	if d := time.Since(down); d > 2*time.Second {
		t.Errorf("Stale %v after the origin went down; want within the idle timeout", d)
	}
	testutil.Eventually(t, waitLimit, func() bool { return ns.Status().State == config.StateBreached }, "Breached past MaxStaleness")

	// Restart the relay with the origin still down (SIGTERM: it flushes).
	r.stop()
	r.start()
	late, _ := fleetClient(t, []string{r.url()})
	lateNS := openNS(t, late, "app")
	st := lateNS.Status()
	if st.State == config.StateFresh || st.Revision != rev {
		t.Errorf("a client opening through the restarted relay: %v; want Stale at revision %d", st, rev)
	}
	if age := time.Since(down); st.Staleness < age-time.Second {
		t.Errorf("staleness %v from the relay's cache, want the outage's age (about %v)", st.Staleness, age)
	}

	if err := origin.Restart(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitLimit, func() bool {
		return ns.Status().State == config.StateFresh && lateNS.Status().State == config.StateFresh
	}, "Fresh again")
	rev = publishV(t, origin, "app", 2)
	testutil.Eventually(t, waitLimit, func() bool { return ns.Status().Revision == rev && lateNS.Status().Revision == rev }, "the new revision")
}

// TestFleetChainAndNewStore: origin → relay → relay → client; the origin
// restarts (same store), then gets a new store: the client converges
// each time; a compaction at the origin while the first relay cannot
// reach it converges too.
func TestFleetChainAndNewStore(t *testing.T) {
	bin := buildBinary(t)
	origin := holdfasttest.NewServer(t, holdfasttest.WithHeartbeat(200*time.Millisecond))
	publishV(t, origin, "app", 0)
	first := startRelayProc(t, bin, origin.URL())
	second := startRelayProc(t, bin, first.url())
	c, _ := fleetClient(t, []string{second.url()})
	ns := openNS(t, c, "app")
	rec := record(ns)

	rev := publishV(t, origin, "app", 1)
	testutil.Eventually(t, waitLimit, func() bool { return ns.Status().Revision == rev }, "through two relays")

	if err := origin.Restart(); err != nil {
		t.Fatal(err)
	}
	rev = publishV(t, origin, "app", 2)
	testutil.Eventually(t, waitLimit, func() bool { return ns.Status().Revision == rev }, "after the origin restarted")

	// Compaction during the first relay's outage.
	first.kill()
	for v := 3; v <= 6; v++ {
		rev = publishV(t, origin, "app", v)
	}
	if _, err := origin.Compact(0); err != nil {
		t.Fatal(err)
	}
	first.start()
	testutil.Eventually(t, waitLimit, func() bool { return ns.Status().Revision == rev }, "after a compaction during the relay's outage")
	rec.checkIncreasing(t, "the client", rev)

	id := origin.ResetStore()
	rev = publishV(t, origin, "app", 7)
	testutil.Eventually(t, waitLimit, func() bool { st := ns.Status(); return st.StoreID == id && st.Revision == rev }, "on the new store")
	if v, _ := ns.Get("v"); v.String() != "7" {
		t.Fatalf("v = %s", v)
	}
}
