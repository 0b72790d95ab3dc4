package etcd_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/transport"
	"github.com/holdfast-dev/holdfast/transport/etcd"
)

// Timings for tests: a fast heartbeat, and an idle timeout that a loaded
// machine does not trip by itself.
const (
	testHeartbeat = 100 * time.Millisecond
	testIdle      = 2 * time.Second
	testRequest   = 3 * time.Second
	waitLimit     = 30 * time.Second
)

var shared struct {
	once sync.Once
	c    *cluster
	dir  string
	err  error
}

// sharedCluster is one cluster for the tests that fault no member. Tests
// on it use namespaces of their own.
func sharedCluster(t testing.TB) *cluster {
	t.Helper()
	etcdBinary(t) // skips (or fails in CI) here, not inside once.Do
	shared.once.Do(func() {
		shared.dir, shared.err = os.MkdirTemp("", "holdfast-etcd-")
		if shared.err != nil {
			return
		}
		shared.c = newCluster(t, shared.dir)
		for _, m := range shared.c.members {
			if shared.err = shared.c.run(m); shared.err != nil {
				return
			}
		}
		shared.c.waitHealthy(t)
		shared.c.t = nil
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	if shared.c == nil {
		t.Fatal("the shared etcd cluster did not start")
	}
	// Each test starts from no namespace at all (and -count=N reruns too).
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if _, err := shared.c.client(t).Delete(ctx, etcd.KeyRoot, clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	return shared.c
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.c != nil {
		shared.c.stop()
	}
	if shared.dir != "" {
		_ = os.RemoveAll(shared.dir)
	}
	if code == 0 {
		if err := goleak.Find(leakIgnores()...); err != nil {
			fmt.Fprintln(os.Stderr, "goleak: leaked goroutines:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// leakIgnores names goroutines that outlive a closed etcd client by design:
// none so far (Source.Close waits for its watches and closes its client).
func leakIgnores() []goleak.Option { return nil }

func newSource(t testing.TB, endpoints []string, opts ...etcd.Option) *etcd.Source {
	t.Helper()
	base := []etcd.Option{
		etcd.WithEndpoints(endpoints...),
		etcd.WithHeartbeat(testHeartbeat),
		etcd.WithIdleTimeout(testIdle),
		etcd.WithRequestTimeout(testRequest),
		etcd.WithDialTimeout(time.Second),
		etcd.WithLogger(testLogger(t)),
	}
	src, err := etcd.New(append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = src.Close() })
	return src
}

func newClient(t testing.TB, src transport.Source, opts ...config.Option) *config.Client {
	t.Helper()
	base := []config.Option{
		config.WithSource(src),
		config.WithReconnectBackoff(5*time.Millisecond, 100*time.Millisecond),
		config.WithLogger(testLogger(t)),
	}
	c, err := config.New(append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func raw(t testing.TB, values map[string]any) map[string]json.RawMessage {
	t.Helper()
	out := make(map[string]json.RawMessage, len(values))
	for k, v := range values {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		out[k] = b
	}
	return out
}

func publish(t testing.TB, src *etcd.Source, ns string, puts map[string]any, deletes ...string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	rev, err := src.Publish(ctx, ns, raw(t, puts), deletes)
	if err != nil {
		t.Fatal(err)
	}
	return rev
}

func open(t testing.TB, c *config.Client, name string, opts ...config.NamespaceOption) *config.Namespace {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	ns, err := c.Namespace(ctx, name, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

func waitRevision(t testing.TB, ns *config.Namespace, rev int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := ns.WaitForRevision(ctx, rev); err != nil {
		t.Fatalf("revision %d not reached (at %d, status %+v): %v", rev, ns.Revision(), ns.Status(), err)
	}
}

// eventually waits for cond with a deadline, polling.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// countingSource counts snapshots and remembers watch errors.
type countingSource struct {
	transport.Source
	snapshots atomic.Int64
	mu        sync.Mutex
	watchErrs []error
}

func (c *countingSource) Snapshot(ctx context.Context, req transport.SnapshotRequest) (*transport.Snapshot, error) {
	c.snapshots.Add(1)
	return c.Source.Snapshot(ctx, req)
}

func (c *countingSource) Watch(ctx context.Context, req transport.WatchRequest, handle func(transport.Event) error) error {
	err := c.Source.Watch(ctx, req, handle)
	c.mu.Lock()
	c.watchErrs = append(c.watchErrs, err)
	c.mu.Unlock()
	return err
}

func (c *countingSource) sawError(target error) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, err := range c.watchErrs {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

func TestOpenGetTypedGetters(t *testing.T) {
	cl := sharedCluster(t)
	src := newSource(t, cl.endpoints())
	rev := publish(t, src, "payments.prod", map[string]any{
		"retry-timeout-ms": 50, "name": "checkout", "ratio": 0.25, "enabled": true,
		"poll": "250ms", "hosts": []string{"a", "b"}, "db/primary/host": "10.0.0.1",
	})
	c := newClient(t, src)
	ns := open(t, c, "payments.prod")

	if ns.Revision() != rev {
		t.Errorf("Revision = %d; want %d", ns.Revision(), rev)
	}
	if got := ns.Int("retry-timeout-ms", 200); got != 50 {
		t.Errorf("Int = %d", got)
	}
	if got := ns.String("name", ""); got != "checkout" {
		t.Errorf("String = %q", got)
	}
	if got := ns.Float("ratio", 0); got != 0.25 {
		t.Errorf("Float = %v", got)
	}
	if !ns.Bool("enabled", false) {
		t.Error("Bool = false")
	}
	if got := ns.Duration("poll", 0); got != 250*time.Millisecond {
		t.Errorf("Duration = %v", got)
	}
	if got := ns.String("db/primary/host", ""); got != "10.0.0.1" {
		t.Errorf("path-like key = %q", got)
	}
	var hosts []string
	if v, _ := ns.Get("hosts"); v.Decode(&hosts) != nil || len(hosts) != 2 {
		t.Errorf("Decode = %v", hosts)
	}
	if snap := ns.Snapshot(); snap.Len() != 7 {
		t.Errorf("Snapshot has %d keys (%v); want 7 (the meta key is not a value)", snap.Len(), snap.Keys())
	}
	// The store id is the etcd cluster id.
	resp, err := cl.client(t).Get(context.Background(), "x")
	if err != nil {
		t.Fatal(err)
	}
	st := ns.Status()
	if st.State != config.StateFresh || st.StoreID != etcd.StoreID(resp.Header.ClusterId) {
		t.Errorf("Status = %+v; want fresh, store %s", st, etcd.StoreID(resp.Header.ClusterId))
	}
	// Progress keeps the cursor moving while the namespace is quiet.
	other := publish(t, src, "payments.other", map[string]any{"x": 1})
	eventually(t, "the cursor past another namespace's publish", func() bool { return ns.Status().Cursor >= other })
	if ns.Revision() != rev {
		t.Errorf("another namespace's publish changed the revision to %d", ns.Revision())
	}
}

func TestUnknownNamespaceReportsNotFound(t *testing.T) {
	cl := sharedCluster(t)
	c := newClient(t, newSource(t, cl.endpoints()))
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err := c.Namespace(ctx, "nope")
	if !errors.Is(err, transport.ErrNotFound) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Namespace = %v; want NotFound and DeadlineExceeded", err)
	}
}

func TestOnChangeAndDeletes(t *testing.T) {
	cl := sharedCluster(t)
	src := newSource(t, cl.endpoints())
	publish(t, src, "app", map[string]any{"a": 1, "b": 2})
	c := newClient(t, src)
	ns := open(t, c, "app")

	changes := make(chan config.Change, 10)
	sets := make(chan config.ChangeSet, 10)
	stop := ns.OnChange("a", func(ch config.Change) { changes <- ch })
	ns.OnAnyChange(func(cs config.ChangeSet) { sets <- cs })

	rev := publish(t, src, "app", map[string]any{"a": 10, "c": "x"}, "b")
	select {
	case ch := <-changes:
		if ch.Key != "a" || ch.Old.String() != "1" || ch.New.String() != "10" || ch.Revision != rev {
			t.Errorf("Change = %+v", ch)
		}
	case <-time.After(waitLimit):
		t.Fatal("no OnChange")
	}
	select {
	case cs := <-sets:
		if cs.Revision != rev || len(cs.Changes) != 3 {
			t.Errorf("ChangeSet = %+v", cs)
		}
	case <-time.After(waitLimit):
		t.Fatal("no OnAnyChange")
	}
	if _, ok := ns.Get("b"); ok {
		t.Error("deleted key b still served")
	}
	// A publish of only deletes is a revision of its own.
	rev = publish(t, src, "app", nil, "c")
	waitRevision(t, ns, rev)
	if _, ok := ns.Get("c"); ok {
		t.Error("deleted key c still served")
	}
	<-sets
	stop()
	rev = publish(t, src, "app", map[string]any{"a": 11})
	waitRevision(t, ns, rev)
	<-sets
	select {
	case ch := <-changes:
		t.Errorf("stopped OnChange got %+v", ch)
	default:
	}
}

// TestNoTornReads republishes a 30-key bundle, every key holding the
// round's number, while readers check that each Snapshot holds 30 values of
// one revision.
func TestNoTornReads(t *testing.T) {
	cl := sharedCluster(t)
	src := newSource(t, cl.endpoints())
	const keys, rounds, readers = 30, 100, 2
	bundle := func(i int) map[string]any {
		m := make(map[string]any, keys)
		for k := range keys {
			m["k"+strconv.Itoa(k)] = i
		}
		return m
	}
	publish(t, src, "bundle", bundle(0))
	c := newClient(t, src)
	ns := open(t, c, "bundle")

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var checked atomic.Int64
	errs := make(chan error, readers)
	for range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				snap := ns.Snapshot()
				if snap.Len() != keys {
					errs <- fmt.Errorf("snapshot of %d keys", snap.Len())
					return
				}
				first := snap.Int("k0", -1)
				for k := 1; k < keys; k++ {
					if v := snap.Int("k"+strconv.Itoa(k), -2); v != first {
						errs <- fmt.Errorf("torn read at revision %d: k0=%d k%d=%d", snap.Revision(), first, k, v)
						return
					}
				}
				checked.Add(1)
			}
		}()
	}
	var last int64
	for i := 1; i <= rounds; i++ {
		last = publish(t, src, "bundle", bundle(i))
	}
	waitRevision(t, ns, last)
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if ns.Int("k29", 0) != rounds || checked.Load() == 0 {
		t.Errorf("final k29 = %d after %d checks", ns.Int("k29", 0), checked.Load())
	}
}

// TestCallbacksOrderedExactlyOnce publishes quickly: callbacks arrive in
// revision order, one per revision, each after its revision is served.
func TestCallbacksOrderedExactlyOnce(t *testing.T) {
	cl := sharedCluster(t)
	src := newSource(t, cl.endpoints())
	publish(t, src, "ordered", map[string]any{"n": 0})
	c := newClient(t, src)
	ns := open(t, c, "ordered")

	const n = 300
	var mu sync.Mutex
	var revs []int64
	var violations []string
	ns.OnChange("n", func(config.Change) { panic("a bad callback") })
	ns.OnChange("n", func(ch config.Change) {
		mu.Lock()
		defer mu.Unlock()
		if served := ns.Revision(); served < ch.Revision {
			violations = append(violations, fmt.Sprintf("callback for %d ran while %d was served", ch.Revision, served))
		}
		if len(revs) > 0 && ch.Revision <= revs[len(revs)-1] {
			violations = append(violations, fmt.Sprintf("revision %d after %d", ch.Revision, revs[len(revs)-1]))
		}
		revs = append(revs, ch.Revision)
	})
	var want []int64
	for i := 1; i <= n; i++ {
		want = append(want, publish(t, src, "ordered", map[string]any{"n": i}))
	}
	eventually(t, "every callback", func() bool { mu.Lock(); defer mu.Unlock(); return len(revs) >= n })
	mu.Lock()
	defer mu.Unlock()
	for _, v := range violations {
		t.Error(v)
	}
	if fmt.Sprint(revs) != fmt.Sprint(want) {
		t.Errorf("callbacks for revisions %v; want %v", revs, want)
	}
	if p := ns.CallbackPanics(); p != n {
		t.Errorf("CallbackPanics = %d; want %d", p, n)
	}
}

// TestResumeAfterDroppedConnection drops the client's connections while
// publishing: it resumes from its cursor, sees every revision once, and
// takes no new snapshot.
func TestResumeAfterDroppedConnection(t *testing.T) {
	cl := sharedCluster(t)
	ps := startProxies(t, cl)
	pub := newSource(t, cl.endpoints())
	publish(t, pub, "resume", map[string]any{"v": 0})
	src := &countingSource{Source: newSource(t, ps.urls())}
	c := newClient(t, src)
	ns := open(t, c, "resume")

	var mu sync.Mutex
	var seen []int64
	ns.OnAnyChange(func(cs config.ChangeSet) {
		mu.Lock()
		seen = append(seen, cs.Revision)
		mu.Unlock()
	})
	snapshots := src.snapshots.Load()
	var want []int64
	for i := 1; i <= 30; i++ {
		want = append(want, publish(t, pub, "resume", map[string]any{"v": i}))
		if i%10 == 0 {
			ps.drop()
		}
	}
	waitRevision(t, ns, want[len(want)-1])
	eventually(t, "every callback", func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) == len(want) })
	if got := src.snapshots.Load(); got != snapshots {
		t.Errorf("resume made %d new snapshots; want 0", got-snapshots)
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Fatalf("revisions seen %v; want %v", seen, want)
	}
}

// TestCompactionWhileCutOffResnapshots cuts the client off, publishes and
// compacts to the head: the client's watch is refused as compacted, it
// resnapshots and converges, deleted keys included.
func TestCompactionWhileCutOffResnapshots(t *testing.T) {
	cl := sharedCluster(t)
	ps := startProxies(t, cl)
	pub := newSource(t, cl.endpoints())
	publish(t, pub, "compact", map[string]any{"v": 0, "gone": true})
	src := &countingSource{Source: newSource(t, ps.urls())}
	c := newClient(t, src)
	ns := open(t, c, "compact")

	ps.setDown(true)
	eventually(t, "stale while cut off", func() bool { return ns.Status().State == config.StateStale })
	var last int64
	for i := 1; i <= 20; i++ {
		last = publish(t, pub, "compact", map[string]any{"v": i}, "gone")
	}
	if _, err := cl.client(t).Compact(context.Background(), last); err != nil {
		t.Fatal(err)
	}
	snapshots := src.snapshots.Load()
	ps.setDown(false)
	waitRevision(t, ns, last)
	if ns.Int("v", -1) != 20 {
		t.Errorf("v = %d after converging", ns.Int("v", -1))
	}
	if _, ok := ns.Get("gone"); ok {
		t.Error("a key deleted during the outage is still served")
	}
	if src.snapshots.Load() == snapshots {
		t.Error("converged past compaction without a new snapshot")
	}
	if !src.sawError(transport.ErrCompacted) {
		t.Error("no watch ended with ErrCompacted")
	}
	eventually(t, "fresh again", func() bool { return ns.Status().State == config.StateFresh })
	// And it follows on from there.
	rev := publish(t, pub, "compact", map[string]any{"v": 21})
	waitRevision(t, ns, rev)
}

// TestFailClosedPastMaxStaleness cuts the client off: past MaxStaleness a
// fail-closed namespace serves its defaults; a fail-open one serves its
// data and reports the breach; both come back when the path heals. A
// fail-closed namespace does not open without fresh data.
func TestFailClosedPastMaxStaleness(t *testing.T) {
	cl := sharedCluster(t)
	ps := startProxies(t, cl)
	pub := newSource(t, cl.endpoints())
	publish(t, pub, "strict", map[string]any{"limit": 10})
	publish(t, pub, "lenient", map[string]any{"limit": 10})
	c := newClient(t, newSource(t, ps.urls()))
	const maxStale = 500 * time.Millisecond
	strict := open(t, c, "strict", config.MaxStaleness(maxStale), config.FailClosed(), config.Defaults(map[string]any{"limit": 1}))
	lenient := open(t, c, "lenient", config.MaxStaleness(maxStale), config.FailOpen())

	ps.setDown(true)
	eventually(t, "fail-closed", func() bool { return strict.Status().State == config.StateFailedClosed })
	if got := strict.Int("limit", 0); got != 1 {
		t.Errorf("fail-closed serves limit=%d; want the default 1", got)
	}
	eventually(t, "breached", func() bool { return lenient.Status().State == config.StateBreached })
	if got := lenient.Int("limit", 0); got != 10 {
		t.Errorf("fail-open serves limit=%d; want the last good 10", got)
	}
	if st := lenient.Status(); st.Staleness < maxStale {
		t.Errorf("breached status = %+v", st)
	}

	// A fresh client cannot open a fail-closed namespace while cut off.
	c2 := newClient(t, newSource(t, ps.urls()))
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	_, err := c2.Namespace(ctx, "strict", config.MaxStaleness(maxStale), config.FailClosed())
	cancel()
	if err == nil {
		t.Error("a fail-closed namespace opened without fresh data")
	}

	ps.setDown(false)
	eventually(t, "fresh again", func() bool {
		return strict.Status().State == config.StateFresh && lenient.Status().State == config.StateFresh
	})
	if got := strict.Int("limit", 0); got != 10 {
		t.Errorf("after healing, limit=%d", got)
	}
}

// TestLastGoodFromDiskWhileClusterDown: a client that restarts while every
// member is down serves its last good data from the cache directory,
// marked stale, and converges when the cluster returns.
func TestLastGoodFromDiskWhileClusterDown(t *testing.T) {
	cl := startCluster(t)
	pub := newSource(t, cl.endpoints())
	rev := publish(t, pub, "disk", map[string]any{"v": 1, "name": "kept"})
	dir := t.TempDir()

	first := newClient(t, newSource(t, cl.endpoints()), config.WithCacheDir(dir))
	ns := open(t, first, "disk")
	if ns.Int("v", 0) != 1 {
		t.Fatal("first client did not read")
	}
	eventually(t, "the last good file", func() bool {
		entries, err := os.ReadDir(dir)
		return err == nil && len(entries) > 0 && ns.Status().PersistError.Kind == config.ErrorNone
	})
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}

	for i := range cl.members {
		cl.kill(i)
	}
	second := newClient(t, newSource(t, cl.endpoints()), config.WithCacheDir(dir))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	ns2, err := second.Namespace(ctx, "disk")
	cancel()
	if err != nil {
		t.Fatalf("open from disk with the cluster down: %v", err)
	}
	if ns2.Int("v", 0) != 1 || ns2.String("name", "") != "kept" || ns2.Revision() != rev {
		t.Errorf("from disk: v=%d name=%q rev=%d", ns2.Int("v", 0), ns2.String("name", ""), ns2.Revision())
	}
	if st := ns2.Status(); st.Origin != config.OriginDisk || st.State != config.StateStale {
		t.Errorf("status from disk = %+v", st)
	}

	for i := range cl.members {
		cl.restart(t, i)
	}
	cl.waitHealthy(t)
	rev = publish(t, pub, "disk", map[string]any{"v": 2})
	waitRevision(t, ns2, rev)
	eventually(t, "fresh from the network", func() bool {
		st := ns2.Status()
		return st.State == config.StateFresh && st.Origin == config.OriginNetwork
	})
}
