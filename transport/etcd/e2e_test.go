package etcd_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/internal/sdksuite"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/internal/testutil/nstest"
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
	if os.Getenv(relayEnv+"_ETCD") != "" || os.Getenv(relayEnv+"_HTTP") != "" {
		os.Exit(relayMain()) // the propagation benchmark's relay
	}
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
		etcd.WithLogger(sdksuite.Logger(t)),
	}
	src, err := etcd.New(append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = src.Close() })
	return src
}

// raw is a publish's puts, written as Go values.
func raw(t testing.TB, values map[string]any) map[string]json.RawMessage {
	t.Helper()
	return testutil.JSONValues(t, values)
}

// sourcePublisher publishes through an etcd source, as the harness's
// sdksuite.Publisher.
type sourcePublisher struct{ src *etcd.Source }

func (p sourcePublisher) Publish(ns string, puts map[string]any, deletes ...string) (int64, error) {
	values := make(map[string]json.RawMessage, len(puts))
	for k, v := range puts {
		b, err := json.Marshal(v)
		if err != nil {
			return 0, err
		}
		values[k] = b
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	return write(ctx, p.src, ns, values, deletes)
}

// write is a writer such as holdfast server, for the source to read: it
// puts and deletes keys of namespace ns in one transaction with the
// namespace's meta key (an etcd.Meta chained on the revision it read),
// which commits only if nothing of the namespace changed since that read,
// and retries otherwise. Deletes of absent keys are dropped. It returns
// the change's revision.
func write(ctx context.Context, src *etcd.Source, ns string, puts map[string]json.RawMessage, deletes []string) (int64, error) {
	cli, p := src.Client(), etcd.Prefix(ns)
	for {
		resp, err := cli.Get(ctx, p, clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			return 0, err
		}
		var prev int64
		exists := make(map[string]bool, len(resp.Kvs))
		for _, kv := range resp.Kvs {
			prev = max(prev, kv.ModRevision)
			exists[string(kv.Key)] = true
		}
		ops := make([]clientv3.Op, 0, len(puts)+len(deletes)+1)
		for k, v := range puts {
			ops = append(ops, clientv3.OpPut(p+k, string(v)))
		}
		for _, k := range deletes {
			if exists[p+k] {
				ops = append(ops, clientv3.OpDelete(p+k))
			}
		}
		m, err := json.Marshal(etcd.Meta{PrevRevision: prev, CommittedAt: time.Now().UTC()})
		if err != nil {
			return 0, err
		}
		ops = append(ops, clientv3.OpPut(p, string(m)))
		tr, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(p).WithPrefix(), "<", resp.Header.Revision+1)).Then(ops...).Commit()
		if err != nil {
			return 0, err
		}
		if tr.Succeeded {
			return tr.Header.Revision, nil
		}
	}
}

func publish(t testing.TB, src *etcd.Source, ns string, puts map[string]any, deletes ...string) int64 {
	t.Helper()
	return sdksuite.Publish(t, sourcePublisher{src}, ns, puts, deletes...)
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
	c := sdksuite.NewClient(t, sdksuite.Source(newSource(t, ps.urls())))
	const maxStale = 500 * time.Millisecond
	strict := sdksuite.Open(t, c, "strict", config.MaxStaleness(maxStale), config.FailClosed(), config.Defaults(map[string]any{"limit": 1}))
	lenient := sdksuite.Open(t, c, "lenient", config.MaxStaleness(maxStale), config.FailOpen())

	ps.setDown(true)
	testutil.Eventually(t, waitLimit, func() bool { return strict.Status().State == config.StateFailedClosed }, "fail-closed")
	if got := strict.Int("limit", 0); got != 1 {
		t.Errorf("fail-closed serves limit=%d; want the default 1", got)
	}
	testutil.Eventually(t, waitLimit, func() bool { return lenient.Status().State == config.StateBreached }, "breached")
	if got := lenient.Int("limit", 0); got != 10 {
		t.Errorf("fail-open serves limit=%d; want the last good 10", got)
	}
	if st := lenient.Status(); st.Staleness < maxStale {
		t.Errorf("breached status = %+v", st)
	}

	// A fresh client cannot open a fail-closed namespace while cut off.
	c2 := sdksuite.NewClient(t, sdksuite.Source(newSource(t, ps.urls())))
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	_, err := c2.Namespace(ctx, "strict", config.MaxStaleness(maxStale), config.FailClosed())
	cancel()
	if err == nil {
		t.Error("a fail-closed namespace opened without fresh data")
	}

	ps.setDown(false)
	testutil.Eventually(t, waitLimit, func() bool {
		return strict.Status().State == config.StateFresh && lenient.Status().State == config.StateFresh
	}, "fresh again")
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

	first := sdksuite.NewClient(t, sdksuite.Source(newSource(t, cl.endpoints())), config.WithCacheDir(dir))
	ns := sdksuite.Open(t, first, "disk")
	if ns.Int("v", 0) != 1 {
		t.Fatal("first client did not read")
	}
	testutil.Eventually(t, waitLimit, func() bool {
		entries, err := os.ReadDir(dir)
		return err == nil && len(entries) > 0 && ns.Status().PersistError.Kind == config.ErrorNone
	}, "the last good file")
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}

	for i := range cl.members {
		cl.kill(i)
	}
	second := sdksuite.NewClient(t, sdksuite.Source(newSource(t, cl.endpoints())), config.WithCacheDir(dir))
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
	nstest.WaitRevision(t, ns2, rev, waitLimit)
	testutil.Eventually(t, waitLimit, func() bool {
		st := ns2.Status()
		return st.State == config.StateFresh && st.Origin == config.OriginNetwork
	}, "fresh from the network")
}
