package etcd_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/internal/sdksuite"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/internal/testutil/nstest"
	"github.com/holdfast-dev/holdfast/transport"
	"github.com/holdfast-dev/holdfast/transport/etcd"
)

// End-to-end tests of a config.Client's one watch stream over the etcd
// source: the same scenarios as config's, where they apply.

// streamSpy wraps an etcd Source, keeping it a transport.StreamSource,
// and counts what the client asks of it: snapshots per namespace,
// per-namespace watches, stream attempts and the last one's namespaces.
// It can hold the first snapshot of one namespace (fetched, not yet
// returned) until released.
type streamSpy struct {
	*etcd.Source

	hold    string
	held    chan struct{}
	release chan struct{}

	mu          sync.Mutex
	snapshots   map[string]int
	watches     int
	streams     int
	lastRequest []string
}

func newSpy(src *etcd.Source) *streamSpy {
	return &streamSpy{Source: src, snapshots: map[string]int{}, held: make(chan struct{}), release: make(chan struct{})}
}

func (s *streamSpy) Snapshot(ctx context.Context, req transport.SnapshotRequest) (*transport.Snapshot, error) {
	s.mu.Lock()
	s.snapshots[req.Namespace]++
	first := s.snapshots[req.Namespace] == 1
	s.mu.Unlock()
	snap, err := s.Source.Snapshot(ctx, req)
	if err == nil && first && req.Namespace == s.hold {
		close(s.held)
		select {
		case <-s.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return snap, err
}

func (s *streamSpy) Watch(ctx context.Context, req transport.WatchRequest, handle func(transport.Event) error) error {
	s.mu.Lock()
	s.watches++
	s.mu.Unlock()
	return s.Source.Watch(ctx, req, handle)
}

func (s *streamSpy) WatchStream(ctx context.Context, req transport.StreamRequest, handle func(transport.StreamEvent) error) error {
	names := make([]string, 0, len(req.Namespaces))
	for _, r := range req.Namespaces {
		names = append(names, r.Namespace)
	}
	slices.Sort(names)
	s.mu.Lock()
	s.streams++
	s.lastRequest = names
	s.mu.Unlock()
	return s.Source.WatchStream(ctx, req, handle)
}

func (s *streamSpy) counts() (snapshots map[string]int, watches, streams int, last []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := make(map[string]int, len(s.snapshots))
	for k, v := range s.snapshots {
		m[k] = v
	}
	return m, s.watches, s.streams, slices.Clone(s.lastRequest)
}

var _ transport.StreamSource = (*streamSpy)(nil)

func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%02d", prefix, i)
	}
	return out
}

// revLog records, per namespace, the revisions its OnAnyChange saw.
type revLog struct {
	mu   sync.Mutex
	seen map[string][]int64
	from map[string]int64
}

func newRevLog() *revLog { return &revLog{seen: map[string][]int64{}, from: map[string]int64{}} }

func (l *revLog) watch(ns *config.Namespace) {
	name := ns.Name()
	ns.OnAnyChange(func(cs config.ChangeSet) {
		l.mu.Lock()
		l.seen[name] = append(l.seen[name], cs.Revision)
		l.mu.Unlock()
	})
	from := ns.Revision() // every change after it must be seen
	l.mu.Lock()
	l.from[name] = from
	l.mu.Unlock()
}

func (l *revLog) get(name string) ([]int64, int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.seen[name]), l.from[name]
}

// check: name's callbacks saw strictly increasing revisions (in order,
// once each), all published to it, and (complete) every revision published
// to it after it was watched.
func (l *revLog) check(t *testing.T, name string, published []int64, complete bool) {
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
		if r > from && !slices.Contains(seen, r) {
			t.Errorf("%s: missed revision %d (watched from %d, saw %v; published %v)", name, r, from, seen, published)
		}
	}
}

// waitCallbacks waits until name's callbacks reached the last revision
// published to it.
func (l *revLog) waitCallbacks(t *testing.T, name string, published []int64) {
	t.Helper()
	if len(published) == 0 {
		return
	}
	want := published[len(published)-1]
	testutil.Eventually(t, waitLimit, func() bool {
		seen, _ := l.get(name)
		return len(seen) > 0 && seen[len(seen)-1] == want
	}, name+"'s last callback")
}

// publisher publishes a round (a new value each) to every namespace until
// stopped, recording each revision.
type publisher struct {
	mu     sync.Mutex
	revs   map[string][]int64
	rounds int
	stop   chan struct{}
	done   chan struct{}
}

func startPublisher(t *testing.T, src *etcd.Source, nss []string, first int) *publisher {
	p := &publisher{revs: map[string][]int64{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for i := first + 1; ; i++ {
			select {
			case <-p.stop:
				return
			default:
			}
			for _, name := range nss {
				ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
				rev, err := write(ctx, src, name, raw(t, map[string]any{"seq": i}), nil)
				cancel()
				if err != nil {
					t.Error(err)
					return
				}
				p.mu.Lock()
				p.revs[name] = append(p.revs[name], rev)
				p.mu.Unlock()
			}
			p.mu.Lock()
			p.rounds++
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

func lastRev(revs []int64) int64 {
	if len(revs) == 0 {
		return 0
	}
	return revs[len(revs)-1]
}

// TestE2EStreamTwentyNamespacesOneWatch: a client with 20 namespaces open
// over the etcd source watches them all on one stream: no per-namespace
// watch, the stream carries all 20, and one gRPC watch stream is open at
// steady state (counted by a stream interceptor).
func TestE2EStreamTwentyNamespacesOneWatch(t *testing.T) {
	cl := sharedCluster(t)
	pub := newSource(t, cl.endpoints())
	src, grpcCounts := countedSource(t, cl)
	spy := newSpy(src)
	c := sdksuite.NewClient(t, sdksuite.Source(spy))
	all := names("e2e-twenty", 20)
	for _, name := range all {
		publish(t, pub, name, map[string]any{"v": 0})
	}
	nss := map[string]*config.Namespace{}
	for _, name := range all {
		nss[name] = sdksuite.Open(t, c, name)
	}
	for _, name := range all {
		nstest.WaitRevision(t, nss[name], publish(t, pub, name, map[string]any{"v": 1}), waitLimit)
	}
	testutil.EventuallyNil(t, waitLimit, func() error {
		if n := grpcCounts.open(); n != 1 {
			return fmt.Errorf("%d open, %d opened, %d clientv3 Watch calls", n, grpcCounts.grpcStreams.Load(), grpcCounts.watches.calls.Load())
		}
		return nil
	}, "one gRPC watch stream open")
	snaps, watches, streams, last := spy.counts()
	if watches != 0 {
		t.Errorf("%d per-namespace watches; want 0 (all on the stream)", watches)
	}
	if !slices.Equal(last, all) {
		t.Errorf("the stream carries %v; want all 20", last)
	}
	for _, name := range all {
		if snaps[name] != 1 {
			t.Errorf("%s: %d snapshots; want 1", name, snaps[name])
		}
	}
	t.Logf("stream attempts %d, clientv3 Watch calls %d, gRPC watch streams opened %d",
		streams, grpcCounts.watches.calls.Load(), grpcCounts.grpcStreams.Load())
	// Still one, after more changes flowed.
	for _, name := range all {
		nstest.WaitRevision(t, nss[name], publish(t, pub, name, map[string]any{"v": 2}), waitLimit)
	}
	if n := grpcCounts.open(); n != 1 {
		t.Errorf("%d gRPC watch streams open; want 1", n)
	}
}

// TestE2EStreamJoinAndLeaveWhilePublishing over etcd: namespaces join and
// leave while publishes flow to all of them; the others miss nothing,
// apply nothing twice, and fetch no snapshot again.
func TestE2EStreamJoinAndLeaveWhilePublishing(t *testing.T) {
	cl := sharedCluster(t)
	pubSrc := newSource(t, cl.endpoints())
	spy := newSpy(newSource(t, cl.endpoints()))
	c := sdksuite.NewClient(t, sdksuite.Source(spy))
	stay, leave, join := names("e2e-stay", 3), names("e2e-leave", 3), names("e2e-join", 3)
	for _, name := range slices.Concat(stay, leave, join) {
		publish(t, pubSrc, name, map[string]any{"seq": 0})
	}
	log := newRevLog()
	nss := map[string]*config.Namespace{}
	opens := map[string]int{}
	openAndWatch := func(name string) {
		nss[name] = sdksuite.Open(t, c, name)
		log.watch(nss[name])
		opens[name]++
	}
	for _, name := range slices.Concat(stay, leave) {
		openAndWatch(name)
	}
	pub := startPublisher(t, pubSrc, slices.Concat(stay, leave, join), 0)
	pub.waitRounds(t, 3)
	for _, name := range join {
		openAndWatch(name)
		pub.waitRounds(t, 1)
	}
	pub.waitRounds(t, 3)
	closedAt := map[string]int64{}
	for _, name := range leave {
		if err := nss[name].Close(); err != nil {
			t.Fatal(err)
		}
		closedAt[name] = nss[name].Revision()
		pub.waitRounds(t, 1)
	}
	back := leave[0]
	openAndWatch(back)
	pub.waitRounds(t, 3)
	pub.halt()

	for _, name := range slices.Concat(stay, join, []string{back}) {
		revs := pub.get(name)
		nstest.WaitRevision(t, nss[name], lastRev(revs), waitLimit)
		log.waitCallbacks(t, name, revs)
		log.check(t, name, revs, true)
	}
	for _, name := range leave[1:] {
		log.check(t, name, pub.get(name), false)
		if got := nss[name].Revision(); got != closedAt[name] {
			t.Errorf("%s applied revision %d after its Close at %d", name, got, closedAt[name])
		}
	}
	snaps, watches, _, _ := spy.counts()
	for name, n := range opens {
		if snaps[name] != n {
			t.Errorf("%s: %d snapshots for %d opens", name, snaps[name], n)
		}
	}
	if watches != 0 {
		t.Errorf("%d per-namespace watches; want 0", watches)
	}
}

// logRecorder keeps every log message with its attributes.
type logRecorder struct {
	mu   *sync.Mutex
	logs *[]string
}

func (h logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (h logRecorder) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool { fmt.Fprintf(&b, " %s=%v", a.Key, a.Value); return true })
	h.mu.Lock()
	*h.logs = append(*h.logs, b.String())
	h.mu.Unlock()
	return nil
}
func (h logRecorder) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h logRecorder) WithGroup(string) slog.Handler      { return h }

// TestE2EStreamOneNamespaceCompacted over etcd: one namespace joins the
// stream at a cursor etcd compacted away meanwhile (its snapshot held
// while publishes and a compaction pass): it alone ends compacted and
// resnapshots; the others go on receiving every change without a
// snapshot.
func TestE2EStreamOneNamespaceCompacted(t *testing.T) {
	cl := sharedCluster(t)
	pubSrc := newSource(t, cl.endpoints())
	spy := newSpy(newSource(t, cl.endpoints()))
	spy.hold = "e2e-victim"
	var logMu sync.Mutex
	var logs []string
	c := sdksuite.NewClient(t, sdksuite.Source(spy), config.WithLogger(slog.New(logRecorder{&logMu, &logs})))
	others := names("e2e-keep", 3)
	for _, name := range append(slices.Clone(others), spy.hold) {
		publish(t, pubSrc, name, map[string]any{"seq": 0})
	}
	log := newRevLog()
	nss := map[string]*config.Namespace{}
	for _, name := range others {
		nss[name] = sdksuite.Open(t, c, name)
		log.watch(nss[name])
	}
	pub1 := startPublisher(t, pubSrc, others, 0)
	opened := make(chan *config.Namespace, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		ns, err := c.Namespace(ctx, spy.hold)
		if err != nil {
			t.Error(err)
		}
		opened <- ns
	}()
	select {
	case <-spy.held:
	case <-time.After(waitLimit):
		t.Fatal("the victim's snapshot never came")
	}
	pub1.waitRounds(t, 2)
	// The compaction must not pass the others' cursors: pause their
	// publishes until the stream has confirmed them at the head.
	pub1.halt()
	var victimLast int64
	for i := 1; i <= 5; i++ {
		victimLast = publish(t, pubSrc, spy.hold, map[string]any{"seq": i})
	}
	testutil.Eventually(t, waitLimit, func() bool {
		for _, name := range others {
			if nss[name].Status().Cursor < victimLast {
				return false
			}
		}
		return true
	}, "the others confirmed at the head")
	compactEverywhere(t, cl, victimLast)
	pub2 := startPublisher(t, pubSrc, others, 1000)
	close(spy.release)
	victim := <-opened
	if victim == nil {
		t.FailNow()
	}
	nstest.WaitRevision(t, victim, victimLast, waitLimit)
	if got := victim.Int("seq", -1); got != 5 {
		t.Errorf("victim seq = %d; want 5", got)
	}
	pub2.waitRounds(t, 3)
	pub2.halt()
	snaps, watches, _, _ := spy.counts()
	for _, name := range others {
		revs := slices.Concat(pub1.get(name), pub2.get(name))
		nstest.WaitRevision(t, nss[name], lastRev(revs), waitLimit)
		log.waitCallbacks(t, name, revs)
		log.check(t, name, revs, true)
		if snaps[name] != 1 {
			t.Errorf("%s: %d snapshots; want 1", name, snaps[name])
		}
	}
	if n := snaps[spy.hold]; n != 2 {
		t.Errorf("victim: %d snapshots; want 2 (the held one, then one after compaction)", n)
	}
	if watches != 0 {
		t.Errorf("%d per-namespace watches; want 0", watches)
	}
	logMu.Lock()
	compacted := slices.ContainsFunc(logs, func(s string) bool {
		return strings.Contains(s, "resnapshot") && strings.Contains(s, "compact")
	})
	logMu.Unlock()
	if !compacted {
		t.Errorf("no resnapshot for compaction logged: %q", logs)
	}
}

// TestE2EWaitForRevisionOfUnwatchedPublish over etcd: with the source's
// heartbeat far longer than a second, a publish to a namespace the client
// does not watch advances Client.Revision within 1s.
func TestE2EWaitForRevisionOfUnwatchedPublish(t *testing.T) {
	cl := sharedCluster(t)
	pub := newSource(t, cl.endpoints())
	spy := newSpy(newSource(t, cl.endpoints(), etcd.WithHeartbeat(time.Minute), etcd.WithIdleTimeout(2*time.Minute)))
	c := sdksuite.NewClient(t, sdksuite.Source(spy))
	publish(t, pub, "e2e-watched", map[string]any{"v": 0})
	ns := sdksuite.Open(t, c, "e2e-watched")
	// The stream is up once a change flows through it.
	nstest.WaitRevision(t, ns, publish(t, pub, "e2e-watched", map[string]any{"v": 1}), waitLimit)
	_, _, streams, _ := spy.counts()
	for i := 1; i <= 5; i++ {
		before, start := c.Revision(), time.Now()
		rev := publish(t, pub, "e2e-unwatched", map[string]any{"v": i})
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
	if _, _, n, _ := spy.counts(); n != streams {
		t.Errorf("%d stream attempts during the waits; want none (the same stream's progress)", n-streams)
	}
}

// TestE2EStreamDropsAndOutageConverge over etcd, through proxies: dropped
// connections and a cut-off path each converge for every namespace of the
// stream; drops resume without a snapshot.
func TestE2EStreamDropsAndOutageConverge(t *testing.T) {
	cl := sharedCluster(t)
	ps := startProxies(t, cl)
	pub := newSource(t, cl.endpoints())
	spy := newSpy(newSource(t, ps.urls()))
	c := sdksuite.NewClient(t, sdksuite.Source(spy))
	all := names("e2e-fault", 5)
	nss := map[string]*config.Namespace{}
	for _, name := range all {
		publish(t, pub, name, map[string]any{"v": 0})
		nss[name] = sdksuite.Open(t, c, name)
	}
	publishAll := func(v int) map[string]int64 {
		revs := map[string]int64{}
		for _, name := range all {
			revs[name] = publish(t, pub, name, map[string]any{"v": v})
		}
		return revs
	}
	converge := func(what string, revs map[string]int64) {
		t.Helper()
		for _, name := range all {
			nstest.WaitRevision(t, nss[name], revs[name], waitLimit)
		}
		testutil.Eventually(t, waitLimit, func() bool {
			for _, name := range all {
				if nss[name].Status().State != config.StateFresh {
					return false
				}
			}
			return true
		}, what+": every namespace fresh")
	}
	snaps, _, _, _ := spy.counts()
	for round := 1; round <= 3; round++ {
		publishAll(round)
		ps.drop()
		converge(fmt.Sprintf("drop %d", round), publishAll(10+round))
	}
	after, watches, _, _ := spy.counts()
	for _, name := range all {
		if after[name] != snaps[name] {
			t.Errorf("%s: dropped connections made %d snapshots; want 0", name, after[name]-snaps[name])
		}
	}
	if watches != 0 {
		t.Errorf("%d per-namespace watches; want 0", watches)
	}

	ps.setDown(true)
	testutil.Eventually(t, waitLimit, func() bool {
		for _, name := range all {
			if nss[name].Status().State != config.StateStale {
				return false
			}
		}
		return true
	}, "every namespace stale while cut off")
	revs := publishAll(20)
	ps.setDown(false)
	converge("outage", revs)
	converge("after the outage", publishAll(21))
	testutil.Eventually(t, waitLimit, func() bool {
		var high int64
		for _, r := range revs {
			high = max(high, r)
		}
		return c.Revision() >= high
	}, "the global revision at the last publish")
}
