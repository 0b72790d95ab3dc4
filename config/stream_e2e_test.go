package config_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/internal/fakeserver"
	"github.com/holdfast-dev/holdfast/internal/sdksuite"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/internal/testutil/nstest"
	"github.com/holdfast-dev/holdfast/transport"
)

// End-to-end tests of the one watch stream per client, over real HTTP
// against the reference server.

func serverPort(t testing.TB, srv *fakeserver.Server) int {
	t.Helper()
	_, p, err := net.SplitHostPort(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// tcpEstablished counts, from the kernel's socket table, the ESTABLISHED
// TCP sockets whose remote port is port (clients' ends of connections to a
// server listening on it) and whose local port is port (the server's ends).
func tcpEstablished(t testing.TB, port int) (clientEnds, serverEnds int) {
	t.Helper()
	for _, file := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(file)
		if err != nil {
			if os.IsNotExist(err) && file == "/proc/net/tcp6" {
				continue
			}
			t.Skipf("no socket table: %v", err)
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // the header
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 4 || fields[3] != "01" { // 01: ESTABLISHED
				continue
			}
			if hexPort(fields[2]) == port {
				clientEnds++
			}
			if hexPort(fields[1]) == port {
				serverEnds++
			}
		}
		_ = f.Close()
	}
	return clientEnds, serverEnds
}

// hexPort is the port of a socket table address ("0100007F:1F90").
func hexPort(addr string) int {
	i := strings.LastIndexByte(addr, ':')
	if i < 0 {
		return -1
	}
	p, err := strconv.ParseInt(addr[i+1:], 16, 32)
	if err != nil {
		return -1
	}
	return int(p)
}

func nsNames(prefix string, n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s%02d", prefix, i)
	}
	return names
}

// TestE2EStreamTwentyNamespacesOneConnection: a default client with 20
// namespaces open, each having applied a publish and acked it, holds
// exactly one TCP connection to the reference server (h2c: the stream,
// snapshots and acks share it), counted from the socket table on both
// ends. Against a server without h2c (HTTP/1.1), at most one kept-alive
// connection sits beside the stream: two.
func TestE2EStreamTwentyNamespacesOneConnection(t *testing.T) {
	t.Run("h2c", func(t *testing.T) { testConnections(t, 1) })
	t.Run("http1", func(t *testing.T) {
		testConnections(t, 2, fakeserver.WithoutCapability(transport.CapabilityH2C))
	})
}

func testConnections(t *testing.T, want int, opts ...fakeserver.Option) {
	srv := sdksuite.StartReference(t, opts...)
	port := serverPort(t, srv)
	names := nsNames("conn", 20)
	for _, name := range names {
		sdksuite.Publish(t, srv, name, map[string]any{"v": 0})
	}
	c := sdksuite.NewDefaultClient(t, sdksuite.Endpoint(srv.URL()), config.WithReconnectBackoff(5*time.Millisecond, 50*time.Millisecond))
	nss := make(map[string]*config.Namespace)
	for _, name := range names {
		nss[name] = sdksuite.Open(t, c, name)
	}
	steady := func(round int) {
		t.Helper()
		for _, name := range names {
			rev := sdksuite.Publish(t, srv, name, map[string]any{"v": round})
			nstest.WaitRevision(t, nss[name], rev, waitLimit)
		}
		// Count once every namespace's ack is in (over HTTP/1.1 an ack
		// keeps a connection of its own beside the stream).
		testutil.Eventually(t, waitLimit, func() bool {
			for _, name := range names {
				if st, err := srv.Status(name); err != nil || st.Acked != 1 {
					return false
				}
			}
			return true
		}, "every namespace acked")
		// Connections made before the switch to h2c close asynchronously;
		// wait for them to go, then the count must be exactly want on
		// each side.
		var cl, sv int
		testutil.Wait(5*time.Second, func() bool {
			cl, sv = tcpEstablished(t, port)
			return cl <= want && sv <= want
		})
		if cl != want || sv != want {
			t.Errorf("round %d: %d client ends and %d server ends of connections to the server; want %d and %d", round, cl, sv, want, want)
		}
	}
	steady(1)
	steady(2) // and it stays so (acks and changes flowed meanwhile)
	if n := srv.OpenStreams(); n != 1 {
		t.Errorf("%d open streams on the server; want 1", n)
	}
	if st := srv.Stats(); st.Watches != 0 || st.Events != 0 || st.Snapshots != int64(len(names)) {
		t.Errorf("server stats %+v; want no single-namespace watch and one snapshot per namespace", st)
	}
}

// revLog records, per namespace, the revisions its OnAnyChange saw.
type revLog struct {
	mu   sync.Mutex
	seen map[string][]int64
	from map[string]int64 // the namespace's revision once its callback was registered
}

func newRevLog() *revLog {
	return &revLog{seen: map[string][]int64{}, from: map[string]int64{}}
}

func (l *revLog) watch(ns *config.Namespace) {
	name := ns.Name()
	ns.OnAnyChange(func(cs config.ChangeSet) {
		l.mu.Lock()
		l.seen[name] = append(l.seen[name], cs.Revision)
		l.mu.Unlock()
	})
	// A change applied between the registration and this read may or may
	// not be seen; every change after it must be.
	from := ns.Revision()
	l.mu.Lock()
	l.from[name] = from
	l.mu.Unlock()
}

func (l *revLog) get(name string) (seen []int64, from int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.seen[name]), l.from[name]
}

// check: what name's callbacks saw is strictly increasing (in order, each
// once), published to it, and, if complete, holds every revision
// published to it after it was watched, up to upTo.
func (l *revLog) check(t *testing.T, name string, published []int64, upTo int64, complete bool) {
	t.Helper()
	seen, from := l.get(name)
	for i := 1; i < len(seen); i++ {
		if seen[i] <= seen[i-1] {
			t.Errorf("%s: revision %d seen after %d (applied twice or out of order)", name, seen[i], seen[i-1])
		}
	}
	for _, r := range seen {
		if !slices.Contains(published, r) {
			t.Errorf("%s: saw revision %d, never published to it", name, r)
		}
	}
	if !complete {
		return
	}
	for _, r := range published {
		if r > from && r <= upTo && !slices.Contains(seen, r) {
			t.Errorf("%s: missed revision %d (watched from %d, saw %v; published %v)", name, r, from, seen, published)
		}
	}
}

// publisher publishes a round to every namespace of names every interval
// until stopped, recording each revision.
type publisher struct {
	mu     sync.Mutex
	revs   map[string][]int64
	rounds int
	stop   chan struct{}
	done   chan struct{}
}

// Its values start after first, so that no publish repeats a value of an
// earlier publisher's (a publish that changes nothing fires no callback).
func startPublisher(t *testing.T, srv *fakeserver.Server, names []string, interval time.Duration, first int) *publisher {
	p := &publisher{revs: map[string][]int64{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for i := 1; ; i++ {
			select {
			case <-p.stop:
				return
			case <-time.After(interval):
			}
			for _, name := range names {
				rev, err := srv.Publish(name, map[string]any{"seq": first + i})
				if err != nil {
					t.Error(err)
					return
				}
				p.mu.Lock()
				p.revs[name] = append(p.revs[name], rev)
				p.mu.Unlock()
			}
			p.mu.Lock()
			p.rounds = i
			p.mu.Unlock()
		}
	}()
	t.Cleanup(p.halt)
	return p
}

func (p *publisher) halt() {
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	<-p.done
}

func (p *publisher) get(name string) []int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.revs[name])
}

// waitRounds waits for n more rounds of publishes.
func (p *publisher) waitRounds(t *testing.T, n int) {
	t.Helper()
	p.mu.Lock()
	target := p.rounds + n
	p.mu.Unlock()
	testutil.Eventually(t, waitLimit, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.rounds >= target
	}, fmt.Sprintf("publish round %d", target))
}

func last(revs []int64) int64 {
	if len(revs) == 0 {
		return 0
	}
	return revs[len(revs)-1]
}

// TestE2EStreamJoinAndLeaveWhilePublishing: namespaces join and leave the
// client's stream while publishes flow to all of them: the others miss
// nothing, apply nothing twice, and fetch no snapshot again (the server
// served exactly one per open).
func TestE2EStreamJoinAndLeaveWhilePublishing(t *testing.T) {
	srv := sdksuite.StartReference(t)
	stay, leave, join := nsNames("stay", 5), nsNames("leave", 5), nsNames("join", 5)
	all := slices.Concat(stay, leave, join)
	for _, name := range all {
		sdksuite.Publish(t, srv, name, map[string]any{"seq": 0})
	}
	c := sdksuite.NewDefaultClient(t, sdksuite.Endpoint(srv.URL()), config.WithReconnectBackoff(5*time.Millisecond, 50*time.Millisecond))
	log := newRevLog()
	nss := map[string]*config.Namespace{}
	opens := 0
	openAndWatch := func(name string) {
		nss[name] = sdksuite.Open(t, c, name)
		log.watch(nss[name])
		opens++
	}
	for _, name := range slices.Concat(stay, leave) {
		openAndWatch(name)
	}
	pub := startPublisher(t, srv, all, 2*time.Millisecond, 0)
	pub.waitRounds(t, 10)
	for _, name := range join {
		openAndWatch(name)
		pub.waitRounds(t, 1) // one by one, each a membership change
	}
	pub.waitRounds(t, 10)
	closedAt := map[string]int64{}
	for _, name := range leave {
		if err := nss[name].Close(); err != nil {
			t.Fatal(err)
		}
		closedAt[name] = nss[name].Revision()
		pub.waitRounds(t, 1)
	}
	pub.waitRounds(t, 10)
	// One left namespace comes back: a new open, a new snapshot.
	back := leave[0]
	openAndWatch(back)
	pub.waitRounds(t, 10)
	pub.halt()

	for _, name := range slices.Concat(stay, join) {
		revs := pub.get(name)
		nstest.WaitRevision(t, nss[name], last(revs), waitLimit)
		testutil.Eventually(t, waitLimit, func() bool {
			seen, _ := log.get(name)
			return last(seen) == last(revs)
		}, name+"'s last callback")
		log.check(t, name, revs, last(revs), true)
	}
	for _, name := range leave[1:] {
		log.check(t, name, pub.get(name), closedAt[name], false)
		if got := nss[name].Revision(); got != closedAt[name] {
			t.Errorf("%s applied revision %d after its Close at %d", name, got, closedAt[name])
		}
	}
	revs := pub.get(back)
	nstest.WaitRevision(t, nss[back], last(revs), waitLimit)
	testutil.Eventually(t, waitLimit, func() bool {
		seen, _ := log.get(back)
		return last(seen) == last(revs)
	}, back+"'s last callback")
	log.check(t, back, revs, last(revs), true)

	st := srv.Stats()
	if st.Snapshots != int64(opens) || st.NotModified != 0 {
		t.Errorf("%d snapshot requests (%d not modified) for %d opens; want one each", st.Snapshots, st.NotModified, opens)
	}
	if st.Watches != 0 || st.Events != 0 {
		t.Errorf("single-namespace watches: %+v", st)
	}
}

// holdingTransport passes requests to the network, counting snapshots per
// namespace, and holds the reply of the first snapshot of one namespace
// (read whole from the server first) until released.
type holdingTransport struct {
	base    http.RoundTripper
	hold    string
	held    chan struct{} // closed once the held reply is in
	release chan struct{}

	mu        sync.Mutex
	snapshots map[string]int
}

func (h *holdingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Path != "/sdk/snapshot" {
		return h.base.RoundTrip(r)
	}
	ns := r.URL.Query().Get("ns")
	h.mu.Lock()
	h.snapshots[ns]++
	first := h.snapshots[ns] == 1
	h.mu.Unlock()
	resp, err := h.base.RoundTrip(r)
	if err != nil || ns != h.hold || !first {
		return resp, err
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	close(h.held)
	select {
	case <-h.release:
	case <-r.Context().Done():
		return nil, r.Context().Err()
	}
	return resp, nil
}

func (h *holdingTransport) count(ns string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.snapshots[ns]
}

// attrRecorder keeps the messages and attributes the client logs.
type attrRecorder struct {
	mu   *sync.Mutex
	logs *[]string
}

func (h attrRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (h attrRecorder) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool { fmt.Fprintf(&b, " %s=%v", a.Key, a.Value); return true })
	h.mu.Lock()
	*h.logs = append(*h.logs, b.String())
	h.mu.Unlock()
	return nil
}
func (h attrRecorder) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h attrRecorder) WithGroup(string) slog.Handler      { return h }

// TestE2EStreamOneNamespaceCompacted: one namespace joins the stream at a
// cursor the server compacted away meanwhile (its snapshot's reply held
// while publishes and a compaction pass): the server ends it alone
// (compacted), it resnapshots alone, and the others go on receiving every
// change without a snapshot.
func TestE2EStreamOneNamespaceCompacted(t *testing.T) {
	srv := sdksuite.StartReference(t)
	others := nsNames("keep", 5)
	const victim = "victim"
	for _, name := range append(slices.Clone(others), victim) {
		sdksuite.Publish(t, srv, name, map[string]any{"seq": 0})
	}
	ht := &holdingTransport{base: http.DefaultTransport.(*http.Transport).Clone(), hold: victim,
		held: make(chan struct{}), release: make(chan struct{}), snapshots: map[string]int{}}
	t.Cleanup(ht.base.(*http.Transport).CloseIdleConnections)
	var logMu sync.Mutex
	var logs []string
	c := sdksuite.NewClient(t, sdksuite.Endpoint(srv.URL()), config.WithHTTPClient(&http.Client{Transport: ht}),
		config.WithLogger(slog.New(attrRecorder{&logMu, &logs})))

	log := newRevLog()
	nss := map[string]*config.Namespace{}
	for _, name := range others {
		nss[name] = sdksuite.Open(t, c, name)
		log.watch(nss[name])
	}
	pub := startPublisher(t, srv, others, 2*time.Millisecond, 0)

	opened := make(chan *config.Namespace, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		ns, err := c.Namespace(ctx, victim)
		if err != nil {
			t.Error(err)
		}
		opened <- ns
	}()
	select {
	case <-ht.held:
	case <-time.After(waitLimit):
		t.Fatal("the victim's snapshot never came")
	}
	// The compaction must not pass the others' cursors (they would rightly
	// resnapshot too): pause their publishes until they are at the head.
	pub.halt()
	for _, name := range others {
		nstest.WaitRevision(t, nss[name], last(pub.get(name)), waitLimit)
	}
	var victimLast int64
	for i := 1; i <= 5; i++ {
		victimLast = sdksuite.Publish(t, srv, victim, map[string]any{"seq": i})
	}
	// The stream restarts with every cursor when the victim joins: the
	// others' cursors must be past the compaction point by then (the
	// stream's prompt progress moves them).
	testutil.Eventually(t, waitLimit, func() bool {
		for _, name := range others {
			if nss[name].Status().Cursor < victimLast {
				return false
			}
		}
		return true
	}, "the others confirmed at the head")
	if _, err := srv.Compact(victimLast); err != nil {
		t.Fatal(err)
	}
	pub1 := pub
	pub = startPublisher(t, srv, others, 2*time.Millisecond, 1000)
	close(ht.release)
	vns := <-opened
	if vns == nil {
		t.FailNow()
	}
	nstest.WaitRevision(t, vns, victimLast, waitLimit)
	if got := vns.Int("seq", -1); got != 5 {
		t.Errorf("victim seq = %d; want 5", got)
	}
	pub.waitRounds(t, 10)
	pub.halt()
	for _, name := range others {
		revs := slices.Concat(pub1.get(name), pub.get(name))
		nstest.WaitRevision(t, nss[name], last(revs), waitLimit)
		testutil.Eventually(t, waitLimit, func() bool {
			seen, _ := log.get(name)
			return last(seen) == last(revs)
		}, name+"'s last callback")
		log.check(t, name, revs, last(revs), true)
		if n := ht.count(name); n != 1 {
			logMu.Lock()
			t.Errorf("%s: %d snapshots; want 1; client log: %q", name, n, logs)
			logMu.Unlock()
		}
	}
	if n := ht.count(victim); n != 2 {
		t.Errorf("victim: %d snapshots; want 2 (the held one, then one after compaction)", n)
	}
	logMu.Lock()
	compacted := slices.ContainsFunc(logs, func(s string) bool {
		return strings.Contains(s, "resnapshot") && strings.Contains(s, "compact")
	})
	logMu.Unlock()
	if !compacted {
		t.Errorf("no resnapshot for compaction logged: %q", logs)
	}
	if st := srv.Stats(); st.Watches != 0 {
		t.Errorf("%d single-namespace watches; want all on the stream", st.Watches)
	}
}

// TestE2EWaitForRevisionOfUnwatchedPublish: with the server's heartbeat at
// its default (5s), a publish to a namespace the client does not watch
// advances Client.Revision within 1s, by the stream's prompt progress, on
// the same stream (no reconnect).
func TestE2EWaitForRevisionOfUnwatchedPublish(t *testing.T) {
	srv, err := fakeserver.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	sdksuite.Publish(t, srv, "watched", map[string]any{"v": 0})
	sdksuite.Publish(t, srv, "unwatched", map[string]any{"v": 0})
	c := sdksuite.NewDefaultClient(t, sdksuite.Endpoint(srv.URL()), config.WithReconnectBackoff(5*time.Millisecond, 50*time.Millisecond))
	ns := sdksuite.Open(t, c, "watched")
	testutil.Eventually(t, waitLimit, func() bool {
		return srv.OpenStreams() == 1 && c.Revision() >= ns.Revision()
	}, "the stream open and the client confirmed")
	streams := srv.Stats().Streams
	for i := 1; i <= 5; i++ {
		before, start := c.Revision(), time.Now()
		rev := sdksuite.Publish(t, srv, "unwatched", map[string]any{"v": i})
		if before >= rev {
			t.Fatalf("Revision %d before the publish of %d", before, rev)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := c.WaitForRevision(ctx, rev)
		cancel()
		took := time.Since(start)
		if err != nil {
			t.Fatalf("WaitForRevision(%d): %v after %v (Revision %d)", rev, err, took, c.Revision())
		}
		if took >= time.Second {
			t.Errorf("WaitForRevision(%d) took %v; want < 1s", rev, took)
		}
	}
	if got := srv.Stats().Streams; got != streams {
		t.Errorf("%d stream requests during the waits; want none (the same stream's progress)", got-streams)
	}
	// A deadline bounds a wait for a revision that never comes.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := c.WaitForRevision(ctx, srv.Head()+1000); err != context.DeadlineExceeded {
		t.Errorf("WaitForRevision beyond the head = %v; want DeadlineExceeded", err)
	}
}

// TestE2EStreamFaultsConvergeEveryNamespace: dropped streams, a black hole
// and a store reset each converge for every namespace of the stream.
func TestE2EStreamFaultsConvergeEveryNamespace(t *testing.T) {
	srv := sdksuite.StartReference(t)
	names := nsNames("fault", 6)
	for _, name := range names {
		sdksuite.Publish(t, srv, name, map[string]any{"v": 0, "old": true})
	}
	c := sdksuite.NewDefaultClient(t, sdksuite.Endpoint(srv.URL()), config.WithReconnectBackoff(5*time.Millisecond, 50*time.Millisecond), config.WithStreamIdleTimeout(testIdle))
	nss := map[string]*config.Namespace{}
	for _, name := range names {
		nss[name] = sdksuite.Open(t, c, name)
	}
	publishAll := func(v int) map[string]int64 {
		revs := map[string]int64{}
		for _, name := range names {
			revs[name] = sdksuite.Publish(t, srv, name, map[string]any{"v": v})
		}
		return revs
	}
	converge := func(what string, revs map[string]int64) {
		t.Helper()
		for _, name := range names {
			nstest.WaitRevision(t, nss[name], revs[name], waitLimit)
		}
		testutil.Eventually(t, waitLimit, func() bool {
			for _, name := range names {
				if nss[name].Status().State != config.StateFresh {
					return false
				}
			}
			return true
		}, what+": every namespace fresh")
		testutil.Eventually(t, waitLimit, func() bool { return c.Revision() >= srv.Head() }, what+": the global revision")
	}

	// Dropped streams: resume from the cursors, no snapshot.
	snapshots := srv.Stats().Snapshots
	for round := 1; round <= 3; round++ {
		publishAll(round)
		srv.DropStreams()
		converge(fmt.Sprintf("drop %d", round), publishAll(10+round))
	}
	if got := srv.Stats().Snapshots; got != snapshots {
		t.Errorf("dropped streams made %d snapshot requests; want 0", got-snapshots)
	}

	// A black hole: every namespace goes stale, then converges once healed.
	srv.SetBlackhole(true)
	testutil.Eventually(t, waitLimit, func() bool {
		for _, name := range names {
			if nss[name].Status().State != config.StateStale {
				return false
			}
		}
		return true
	}, "every namespace stale in the black hole")
	revs := publishAll(20)
	srv.SetBlackhole(false)
	converge("black hole", revs)

	// A store reset: every namespace takes the new store's data.
	oldStore := nss[names[0]].Status().StoreID
	srv.ResetStore()
	revs = publishAll(30)
	testutil.Eventually(t, waitLimit, func() bool {
		for _, name := range names {
			if nss[name].Int("v", -1) != 30 {
				return false
			}
		}
		return true
	}, "the new store's data everywhere")
	for _, name := range names {
		st := nss[name].Status()
		if st.StoreID == oldStore || st.Revision != revs[name] {
			t.Errorf("%s after the reset: %+v", name, st)
		}
		if _, ok := nss[name].Get("old"); ok {
			t.Errorf("%s still serves a key of the old store", name)
		}
	}
	converge("after the reset", publishAll(31))
}
