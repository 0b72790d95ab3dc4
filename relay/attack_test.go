package relay_test

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/holdfasttest"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/relay"
	"github.com/holdfast-dev/holdfast/transport"
)

// The attack suite: each attack runs against a relay served
// as `holdfast relay` serves it (internal/listen's defaults), while
// healthy clients keep measuring: publish → OnChange on SDK clients, and a
// snapshot prober. An attack passes when the healthy p99s stay within
// max(2× the quiet baseline, 100 ms), every healthy snapshot is served
// (no 503), and the relay's heap stays bounded.

// fleet is the relay under attack, a child process (relay/internal/target),
// and its healthy clients, in the test's own process.
type fleet struct {
	t      *testing.T
	origin *holdfasttest.Server
	addr   string
	nss    []*config.Namespace

	mu      sync.Mutex
	changes []time.Duration // publish → OnChange, every client
	snaps   []time.Duration // snapshot latency of the prober
	pubs    []time.Duration // the healthy publishes' own latency (to app)
	failed  []string        // healthy snapshots not served
	sent    atomic.Int64    // the time (UnixNano) of the last publish
	peak    atomic.Uint64   // the relay's peak heap since measure began
	fresh   bool            // the prober opens a connection per probe
	wrong   []string        // what the attack itself saw go wrong (report)
}

// fleetOptions is how an attack's fleet differs from the default one.
type fleetOptions struct {
	targetArgs  []string       // more flags of the relay under attack
	freshProbes bool           // the snapshot prober opens a connection per probe
	settle      time.Duration  // from the attack's start to the measurement (0: 500 ms)
	large       map[string]int // more namespaces, by name: one value of that many bytes
	publishes   bool           // the healthy publishes' own p99 judged too, at 2× quiet
}

type fleetOption func(*fleetOptions)

// withTarget gives the relay under attack more flags.
func withTarget(args ...string) fleetOption {
	return func(o *fleetOptions) { o.targetArgs = append(o.targetArgs, args...) }
}

// withFreshProbes makes each snapshot probe a new connection: a healthy
// client that must be admitted under the attack, not one already in.
func withFreshProbes() fleetOption { return func(o *fleetOptions) { o.freshProbes = true } }

// withLarge publishes a namespace ns of one value of n bytes, which the
// relay follows before the quiet baseline.
func withLarge(ns string, n int) fleetOption {
	return func(o *fleetOptions) {
		if o.large == nil {
			o.large = make(map[string]int)
		}
		o.large[ns] = n
	}
}

// withSettle waits d after the attack's start before the measurement.
func withSettle(d time.Duration) fleetOption { return func(o *fleetOptions) { o.settle = d } }

// withPublishesJudged judges the healthy publishes' own latency too: an
// attack on the origin's control API must not delay another namespace's
// publish by more than 2×.
func withPublishesJudged() fleetOption { return func(o *fleetOptions) { o.publishes = true } }

// report records what an attack saw go wrong (a reply it should not
// have had): a problem of the try, beside the healthy clients'.
func (f *fleet) report(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.wrong = append(f.wrong, fmt.Sprintf(format, args...))
}

func startFleet(t *testing.T, target string, large map[string]int, args ...string) *fleet {
	t.Helper()
	origin := holdfasttest.NewServer(t, holdfasttest.WithHeartbeat(200*time.Millisecond))
	mustPublish(t, origin, "app", map[string]any{"v": 0})
	large = maps.Clone(large)
	if large == nil {
		large = make(map[string]int)
	}
	large["big"] = 1 << 20
	for ns, n := range large {
		mustPublish(t, origin, ns, map[string]any{"blob": strings.Repeat("x", n)})
	}
	proc, first, err := startChild(target, append([]string{"-upstream", origin.URL()}, args...)...)
	if err != nil {
		t.Fatalf("the relay: %v", err)
	}
	t.Cleanup(proc.stop)
	addr, ok := strings.CutPrefix(first, "listening ")
	if !ok {
		t.Fatalf("the relay did not start: %q %s", first, proc.stderr())
	}
	f := &fleet{t: t, origin: origin, addr: addr}
	go proc.each(func(line string) {
		var heap uint64
		if _, err := fmt.Sscanf(line, "heap %d", &heap); err != nil {
			return
		}
		for {
			p := f.peak.Load()
			if heap <= p || f.peak.CompareAndSwap(p, heap) {
				return
			}
		}
	})
	// The relay follows the large namespaces before the attacks: a
	// namespace joining its upstream stream restarts it, which is not
	// what they measure.
	for ns := range large {
		testutil.Eventually(t, waitLimit, func() bool {
			status, _, _ := getSnapshot(t, "http://"+f.addr, ns)
			return status == http.StatusOK
		}, "the relay serving "+ns)
	}
	for range 4 {
		c := newClient(t, "http://"+f.addr)
		ns := openNamespace(t, c, "app")
		ns.OnChange("v", func(config.Change) {
			d := time.Since(time.Unix(0, f.sent.Load()))
			f.mu.Lock()
			f.changes = append(f.changes, d)
			f.mu.Unlock()
		})
		f.nss = append(f.nss, ns)
	}
	return f
}

// measure runs the healthy load for d: a publish every 50 ms, a
// snapshot probe every 20 ms. It returns the p99s and the relay's peak
// heap.
func (f *fleet) measure(d time.Duration) (changeP99, snapP99 time.Duration, failed []string, heap uint64) {
	f.mu.Lock()
	f.changes, f.snaps, f.failed, f.pubs = nil, nil, nil, nil
	f.mu.Unlock()
	f.peak.Store(0)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: f.fresh}, Timeout: 10 * time.Second}
	defer hc.CloseIdleConnections()
	wg.Go(func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			start := time.Now()
			resp, err := hc.Get("http://" + f.addr + transport.PathSnapshot + "?ns=app")
			var msg string
			switch {
			case err != nil:
				msg = err.Error()
			default:
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					msg = resp.Status
				}
			}
			f.mu.Lock()
			f.snaps = append(f.snaps, time.Since(start))
			if msg != "" {
				f.failed = append(f.failed, msg)
			}
			f.mu.Unlock()
		}
	})
	wg.Go(func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		v := 0
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			v++
			sent := time.Now()
			f.sent.Store(sent.UnixNano())
			if _, err := f.origin.Publish("app", map[string]any{"v": v}); err != nil {
				f.t.Error(err)
			}
			f.mu.Lock()
			f.pubs = append(f.pubs, time.Since(sent))
			f.mu.Unlock()
		}
	})
	time.Sleep(d) // the length of the measurement, not a synchronisation
	close(stop)
	wg.Wait()
	time.Sleep(300 * time.Millisecond) // the last publish's callbacks
	f.mu.Lock()
	defer f.mu.Unlock()
	return p99(f.changes), p99(f.snaps), slices.Clone(f.failed), f.peak.Load()
}

func p99(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return time.Hour
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*99/100)]
}

// attackTries bounds how often an attack is measured before it fails: a
// run whose healthy p99 crosses the bound is measured again, baseline
// and all, since on a 2-core machine shared with other test processes a
// stall of the whole machine can cross it by itself; an attack that hurts
// healthy clients does so in every try.
const attackTries = 3

// attack measures the quiet baseline, then the healthy load while run
// attacks (until stop is closed), and checks the healthy clients.
func attack(t *testing.T, target, name string, run func(f *fleet, stop <-chan struct{}), opts ...fleetOption) {
	var o fleetOptions
	for _, opt := range opts {
		opt(&o)
	}
	t.Run(name, func(t *testing.T) {
		var problems []string
		for try := 1; try <= attackTries; try++ {
			// A try of its own: its fleet (origin, relay, clients) stops
			// before the next try starts, not beside it.
			t.Run(fmt.Sprint("try-", try), func(t *testing.T) { problems = attackOnce(t, target, run, o) })
			if len(problems) == 0 {
				return
			}
			t.Logf("try %d of %d: %s", try, attackTries, strings.Join(problems, "; "))
		}
		t.Errorf("in each of %d tries; the last: %s", attackTries, strings.Join(problems, "; "))
	})
}

// attackOnce is one measurement of an attack: what went wrong, if any.
func attackOnce(t *testing.T, target string, run func(f *fleet, stop <-chan struct{}), o fleetOptions) []string {
	f := startFleet(t, target, o.large, o.targetArgs...)
	f.fresh = o.freshProbes
	quietChange, quietSnap, failed, quietHeap := f.measure(3 * time.Second)
	if len(failed) > 0 {
		return []string{fmt.Sprintf("quiet: healthy snapshots failed: %v", failed)}
	}
	f.mu.Lock()
	quietPub := p99(f.pubs)
	f.mu.Unlock()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		run(f, stop)
	}()
	time.Sleep(cmp.Or(o.settle, 500*time.Millisecond)) // the attack under way
	change, snap, failed, heap := f.measure(4 * time.Second)
	close(stop)
	<-done
	f.mu.Lock()
	wrong, probes, pub := slices.Clone(f.wrong), len(f.snaps), p99(f.pubs)
	f.mu.Unlock()
	t.Logf("p99 publish→OnChange %v (quiet %v), snapshot %v (quiet %v), %d of %d served; heap %d MiB (quiet %d MiB)",
		change, quietChange, snap, quietSnap, probes-len(failed), probes, heap>>20, quietHeap>>20)
	bound := func(quiet time.Duration) time.Duration { return max(2*quiet, 100*time.Millisecond) }
	problems := wrong
	if change > bound(quietChange) {
		problems = append(problems, fmt.Sprintf("publish→OnChange p99 %v under attack, quiet %v: want at most %v", change, quietChange, bound(quietChange)))
	}
	if snap > bound(quietSnap) {
		problems = append(problems, fmt.Sprintf("snapshot p99 %v under attack, quiet %v: want at most %v", snap, quietSnap, bound(quietSnap)))
	}
	if len(failed) > 0 {
		problems = append(problems, fmt.Sprintf("%d healthy snapshots not served under attack, e.g. %v", len(failed), failed[0]))
	}
	// An attack on the origin's control API: the healthy publishes' own
	// latency, at most 2× quiet. Its floor, 10 ms, is the scheduling
	// noise of a loaded 2-core machine on a p99 of about 80 publishes of a
	// few milliseconds; the stall judged is of seconds.
	if o.publishes {
		t.Logf("p99 publish to app %v (quiet %v)", pub, quietPub)
		if limit := max(2*quietPub, 10*time.Millisecond); pub > limit {
			problems = append(problems, fmt.Sprintf("publish p99 %v under attack, quiet %v: want at most %v", pub, quietPub, limit))
		}
	}
	// The relay's own heap, 9 MiB quiet and under 50 MiB under any attack
	// here (2,000 idle connections): 200 zero-window streams each holding
	// a copy of the 1 MiB snapshot would cross the bound.
	if heap == 0 || quietHeap == 0 {
		problems = append(problems, "the relay reported no heap")
	} else if heap > quietHeap+128<<20 {
		problems = append(problems, fmt.Sprintf("heap %d MiB under attack, quiet %d MiB", heap>>20, quietHeap>>20))
	}
	return problems
}

// buildChild builds the command pkg (the attacker, the relay under
// attack) without the race detector whatever the test's build: each runs
// as a child process of its own, whose CPU is what production spends,
// not instrumentation.
func buildChild(t *testing.T, pkg string) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool on PATH to build the attack suite's processes with")
	}
	bin := filepath.Join(t.TempDir(), filepath.Base(pkg))
	cmd := exec.Command(goTool, "build", "-o", bin, pkg)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building %s: %v\n%s", pkg, err, out)
	}
	return bin
}

// child is a process of the attack suite's: it runs until its standard
// input closes.
type child struct {
	cmd    *exec.Cmd
	stdin  io.Closer
	out    *bufio.Reader
	errBuf bytes.Buffer
	once   sync.Once
}

// startChild starts bin with args and returns it with the first line it
// printed; past an error the child has ended, and so has one that printed
// no line.
func startChild(bin string, args ...string) (*child, string, error) {
	c := &child{cmd: exec.Command(bin, args...)}
	c.cmd.Stderr = &c.errBuf
	stdin, err := c.cmd.StdinPipe()
	if err != nil {
		return nil, "", err
	}
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		return nil, "", err
	}
	if err := c.cmd.Start(); err != nil {
		return nil, "", err
	}
	c.stdin, c.out = stdin, bufio.NewReader(stdout)
	line, err := c.out.ReadString('\n')
	if err != nil {
		return nil, "", fmt.Errorf("%s printed no line: %w %s", filepath.Base(bin), err, c.stderr())
	}
	return c, strings.TrimSuffix(line, "\n"), nil
}

// each calls fn with every further line the child prints, until it
// closes its standard output; it must run, or the child's writes block.
func (c *child) each(fn func(line string)) {
	for {
		line, err := c.out.ReadString('\n')
		if err != nil {
			return
		}
		fn(strings.TrimSuffix(line, "\n"))
	}
}

// stderr stops the child and returns what it printed on its standard
// error.
func (c *child) stderr() string {
	c.stop()
	return c.errBuf.String()
}

// stop closes the child's standard input and waits for it to end, killing
// it if it lingers past 10 s.
func (c *child) stop() {
	c.once.Do(func() {
		c.stdin.Close()
		done := make(chan struct{})
		go func() { _ = c.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = c.cmd.Process.Kill()
			<-done
		}
	})
}

// runAttacker runs the attack name of bin against addr (with more flags
// of the attacker's, args) until stop is closed, then ends the child.
func runAttacker(t *testing.T, bin, name, addr string, stop <-chan struct{}, args ...string) {
	c, first, err := startChild(bin, append([]string{"-addr", addr, "-attack", name}, args...)...)
	if err != nil {
		t.Errorf("the attacker %s: %v", name, err)
		return
	}
	defer c.stop()
	if first != "attacking" {
		t.Errorf("the attacker %s did not start: %q %s", name, first, c.stderr())
		return
	}
	go c.each(func(string) {})
	<-stop
}

// TestAttacks: each attack of the suite against a relay, healthy clients
// measured alongside (about 110 s). Its bounds are latencies measured on
// the machine that runs it, so an attack is measured again when a try
// fails (attackTries); docs/SECURITY.md has the figures.
//
//	go test -run TestAttacks -v ./relay/
func TestAttacks(t *testing.T) {
	if testing.Short() {
		t.Skip("the attack suite takes about 110 s")
	}
	bin := buildChild(t, "./internal/attacker")
	target := buildChild(t, "./internal/target")
	for _, name := range []string{
		"h2-zero-window-snapshots",    // 200 streams of a 1 MiB snapshot on one connection, zero window
		"http1-slow-snapshot-readers", // 32 connections that never read a 1 MiB snapshot
		"rapid-reset",                 // HEADERS then RST_STREAM of a 1 MiB snapshot, 5,000 a second on each of 2 connections
		"settings-flood",              // SETTINGS of 1,000 duplicate entries, same rate
		"ping-flood",
		"window-update-flood",
		"continuation-flood", // a header block that never ends
		"slowloris-headers",  // 500 connections, a header byte a second
		"idle-connections",   // 2,000 connections that send nothing
	} {
		attack(t, target, name, func(f *fleet, stop <-chan struct{}) { runAttacker(t, bin, name, f.addr, stop) })
	}
	// 300 connections trickling a request body each, a byte every 2 s,
	// opened again when closed, on a relay capped at 300 connections: at
	// the cap a connection whose body is behind the least rate gives its
	// slot to a new one (once half a second behind: the measurement
	// starts a second into the attack). The prober opens a connection per
	// probe: it must be admitted, not ride one it already has.
	attack(t, target, "slow-request-bodies", func(f *fleet, stop <-chan struct{}) {
		runAttacker(t, bin, "slow-request-bodies", f.addr, stop)
	}, withTarget("-max-conns", "300"), withFreshProbes(), withSettle(time.Second))
	// Snapshot readers that never read, from another peer (127.0.0.2)
	// than the healthy clients, opened again every 2 s (each batch fresh
	// requests, not yet stalled): 64 HTTP/1.1 connections asking for
	// 6 MiB, and 4 HTTP/2 connections of 16 zero-window streams asking
	// for 1 MiB. Their replies stop counting against the snapshot slots
	// once stalled a second, and a peer past its share leaves the last
	// quarter to the others: every healthy snapshot is served, and a new
	// SDK client opens within a second.
	attack(t, target, "http1-never-readers", func(f *fleet, stop <-chan struct{}) {
		neverReaders(t, bin, "http1-never-readers", "huge", f, stop)
	}, withLarge("huge", 6<<20))
	attack(t, target, "h2-never-readers", func(f *fleet, stop <-chan struct{}) {
		neverReaders(t, bin, "h2-never-readers", "big", f, stop)
	})
	// 500 HTTP/1.1 readers of the 1 MiB snapshot that never read, from
	// another peer: the host's kernel TCP memory they hold is bounded
	// (1.12 GiB before, each connection's send buffer growing to 4 MiB).
	// The healthy clients are measured once the 500 are open (2 s): what
	// is judged is the replies held, not the burst of connections.
	attack(t, target, "http1-unread-replies", unreadReplies(t, bin), withSettle(2*time.Second))
	// A schema nested 5,000 deep PUT ten times a second, each refused in
	// under 100 ms, while a schema at the bounds is PUT to another
	// namespace and published to twice a second: the healthy publishes to
	// app keep their latency, their own p99 within 2× of quiet.
	attack(t, target, "deep-schemas", deepSchemas, withPublishesJudged())
}

// attackPeer is the address the never-readers connect from: a peer
// other than the healthy clients' 127.0.0.1.
const attackPeer = "127.0.0.2"

// neverReaders runs the attacker's never-readers name on the snapshot of
// ns, renewed every 2 s, while a new SDK client opens app every second:
// each must open within a second.
func neverReaders(t *testing.T, bin, name, ns string, f *fleet, stop <-chan struct{}) {
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { sdkOpens(f, stop) })
	runAttacker(t, bin, name, f.addr, stop, "-path", transport.PathSnapshot+"?ns="+ns, "-from", attackPeer, "-renew", "2s")
}

// sdkOpens opens app on a new SDK client every second until stop, and
// reports each that takes over a second.
func sdkOpens(f *fleet, stop <-chan struct{}) {
	every(time.Second, stop, func() {
		c := newClient(f.t, "http://"+f.addr)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		start := time.Now()
		_, err := c.Namespace(ctx, "app")
		took := time.Since(start)
		cancel()
		_ = c.Close()
		switch {
		case err != nil:
			f.report("a new SDK client: %v after %v", err, took)
		case took > time.Second:
			f.report("a new SDK client opened in %v, want under 1 s", took)
		}
	})
}

// every calls fn every d until stop.
func every(d time.Duration, stop <-chan struct{}, fn func()) {
	tick := time.NewTicker(d)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		fn()
	}
}

// unreadReplies is the attack of 500 HTTP/1.1 connections that ask for
// the 1 MiB snapshot and never read, judged by the host's TCP memory
// (/proc/net/sockstat, both ends on loopback): its rise under attack
// stays under 64 MiB. Off Linux it is judged by the healthy clients
// only.
func unreadReplies(t *testing.T, bin string) func(f *fleet, stop <-chan struct{}) {
	return func(f *fleet, stop <-chan struct{}) {
		quiet, ok := tcpMemory()
		var wg sync.WaitGroup
		var peak int64
		if ok {
			wg.Go(func() {
				every(100*time.Millisecond, stop, func() {
					if m, ok := tcpMemory(); ok && m > peak {
						peak = m
					}
				})
			})
		}
		runAttacker(t, bin, "http1-unread-replies", f.addr, stop, "-from", attackPeer)
		wg.Wait()
		if !ok {
			return
		}
		f.t.Logf("kernel TCP memory %d MiB under attack, %d MiB before", peak>>20, quiet>>20)
		if peak-quiet > 64<<20 {
			f.report("kernel TCP memory rose %d MiB under 500 unread replies (to %d MiB), want under 64 MiB", (peak-quiet)>>20, peak>>20)
		}
	}
}

// tcpMemory is the host's TCP memory in bytes (the pages of
// /proc/net/sockstat's "TCP: ... mem N"), where there is one.
func tcpMemory() (int64, bool) {
	data, err := os.ReadFile("/proc/net/sockstat")
	if err != nil {
		return 0, false
	}
	for line := range strings.Lines(string(data)) {
		fields := strings.Fields(line)
		if len(fields) == 0 || fields[0] != "TCP:" {
			continue
		}
		for i := 1; i+1 < len(fields); i += 2 {
			if fields[i] == "mem" {
				n, err := strconv.ParseInt(fields[i+1], 10, 64)
				return n * int64(os.Getpagesize()), err == nil
			}
		}
	}
	return 0, false
}

// deepSchemas is the attack of a control token with schemas: the deepest
// (refused before compiling) and the costliest that is accepted
// (testutil.CostlySchema).
func deepSchemas(f *fleet, stop <-chan struct{}) {
	const deep = 5000
	deepest, costly := testutil.DeepSchema(deep), testutil.CostlySchema()
	hc := &http.Client{Timeout: 10 * time.Second}
	put := func(ns, body string) (int, time.Duration) {
		req, _ := http.NewRequest(http.MethodPut, f.origin.URL()+"/control/namespaces/"+ns+"/schema", strings.NewReader(body))
		start := time.Now()
		resp, err := hc.Do(req)
		took := time.Since(start)
		if err != nil {
			f.report("PUT %s schema: %v", ns, err)
			return 0, took
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, took
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		if code, took := put("deep", deepest); code != http.StatusBadRequest || took > 100*time.Millisecond {
			f.report("a schema %d deep: %d in %v, want 400 in under 100 ms", deep, code, took)
		}
		if i%5 != 0 {
			continue
		}
		if code, _ := put("costly", costly); code != http.StatusNoContent {
			f.report("a schema at the bounds: %d, want 204", code)
		}
		if _, err := f.origin.Publish("costly", map[string]any{"k0": []any{}}); err != nil {
			f.report("a publish to the namespace of the schema at the bounds: %v", err)
		}
	}
}

// TestSlowReadersReleaseSlots: HTTP/1.1 readers that never read, as many
// as the relay's snapshot slots, hold them only until their replies have
// made no progress for a second: then a healthy snapshot is served again,
// long before their write deadline (42 s for 8 MiB).
func TestSlowReadersReleaseSlots(t *testing.T) {
	origin := holdfasttest.NewServer(t)
	mustPublish(t, origin, "big", map[string]any{"blob": strings.Repeat("x", 8<<20)})
	mustPublish(t, origin, "app", map[string]any{"v": 1})
	_, url := startRelay(t, origin.URL(), relay.WithMaxSnapshotsInFlight(4, time.Second))
	// 8 MiB through the relay: slow under -race.
	testutil.Eventually(t, 6*waitLimit, func() bool {
		status, _, _ := getSnapshot(t, url, "big")
		return status == http.StatusOK
	}, "the relay serving big")
	addr := strings.TrimPrefix(url, "http://")
	for range 4 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, _ = io.WriteString(c, "GET "+transport.PathSnapshot+"?ns=big HTTP/1.1\r\nHost: x\r\n\r\n")
		if _, err := bufio.NewReader(c).Peek(1); err != nil {
			t.Fatal(err)
		}
	}
	held := time.Now()
	testutil.Eventually(t, waitLimit, func() bool {
		status, _, _ := getSnapshot(t, url, "app")
		return status == http.StatusOK
	}, "a slot released by a stalled reply")
	t.Logf("slots held %v", time.Since(held))
}

// TestInvalidBodies: a publish whose body is not UTF-8, or escapes half a
// surrogate pair alone, is refused with a 400 that says so (it would be
// served as JSON that is not, or read back as U+FFFD); one past the size
// limit with 413; neither reaches the store.
func TestInvalidBodies(t *testing.T) {
	origin := holdfasttest.NewServer(t, holdfasttest.WithMaxPublishBytes(64<<10))
	rev := mustPublish(t, origin, "app", map[string]any{"v": 1})
	post := func(body []byte) (int, string) {
		resp, err := http.Post(origin.URL()+"/control/namespaces/app/publish", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, body := range [][]byte{
		[]byte("{\"puts\":{\"k\":\"\xff\xfe\"}}"),
		[]byte("{\"puts\":{\"k\":\"a\xc3\"}}"),        // a truncated sequence
		[]byte("{\"puts\":{\"k\":\"\xed\xa0\x80\"}}"), // a surrogate
		[]byte("{\"puts\":{\"\xff\":1}}"),             // in a key
		[]byte(`{"puts":{"k":"\ud800"}}`),             // an escape of a lone surrogate
		[]byte(`{"puts":{"k":"\udfff\ud800"}}`),       // the halves in the wrong order
	} {
		if code, msg := post(body); code != http.StatusBadRequest || !strings.Contains(msg, "UTF-8") {
			t.Errorf("body %q: %d %s, want 400 naming UTF-8", body, code, msg)
		}
	}
	big := []byte(`{"puts":{"k":"` + strings.Repeat("x", 128<<10) + `"}}`)
	if code, msg := post(big); code != http.StatusRequestEntityTooLarge {
		t.Errorf("a 128 KiB body past a 64 KiB limit: %d %s, want 413", code, msg)
	}
	if head := origin.Head(); head != rev {
		t.Errorf("the store moved from %d to %d", rev, head)
	}
}
