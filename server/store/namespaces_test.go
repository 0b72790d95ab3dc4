package store_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/server/store"
	"github.com/holdfast-dev/holdfast/transport/etcd"
)

// Timings for tests: a request timeout and a bound on waits that a
// loaded machine does not trip by itself.
const (
	testRequest = 3 * time.Second
	waitLimit   = 30 * time.Second
)

// cluster is a memory store for the write path's tests.
type cluster struct{ st *store.Store }

func (c *cluster) endpoints() []string { return c.st.Endpoints }

// client is the store's own client (no user).
func (c *cluster) client(testing.TB) *clientv3.Client { return c.st.Client }

var shared struct {
	once sync.Once
	c    *cluster
	err  error
}

// sharedCluster is one memory store for the tests that need no store of
// their own; TestMain closes it. Tests on it use namespaces of their own.
func sharedCluster(t testing.TB) *cluster {
	t.Helper()
	shared.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		var st *store.Store
		st, shared.err = store.Open(ctx, store.Config{Kind: store.KindMemory})
		shared.c = &cluster{st}
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	// Each test starts from no namespace and no audit log (and -count=N
	// reruns too).
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	for _, root := range []string{etcd.KeyRoot, store.AuditRoot, store.AuditBaseRoot} {
		if _, err := shared.c.st.Client.Delete(ctx, root, clientv3.WithPrefix()); err != nil {
			t.Fatal(err)
		}
	}
	return shared.c
}

// closeShared closes the shared store, if a test opened it.
func closeShared() {
	if shared.c != nil && shared.c.st != nil {
		_ = shared.c.st.Close()
	}
}

// startCluster is a memory store of the test's own.
func startCluster(t testing.TB) *cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	st, err := store.Open(ctx, store.Config{Kind: store.KindMemory})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return &cluster{st}
}

// writer is the write path and the etcd source over one client of its
// own: what a test publishes, it reads back as a client would.
type writer struct {
	*store.Namespaces
	*etcd.Source
}

type writerOption func(*store.NamespacesConfig, *store.Security)

func withMaxValueBytes(n int) writerOption {
	return func(c *store.NamespacesConfig, _ *store.Security) { c.MaxValueBytes = n }
}

func withAuth(user, password string) writerOption {
	return func(_ *store.NamespacesConfig, sec *store.Security) { sec.Username, sec.Password = user, password }
}

func newWriter(t testing.TB, endpoints []string, opts ...writerOption) writer {
	t.Helper()
	cfg := store.NamespacesConfig{RequestTimeout: testRequest}
	var sec store.Security
	for _, o := range opts {
		o(&cfg, &sec)
	}
	cli, err := store.Dial(endpoints, sec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	cfg.Client = cli
	ns, err := store.NewNamespaces(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ns.Close() })
	src, err := etcd.New(etcd.WithClient(cli), etcd.WithRequestTimeout(testRequest))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = src.Close() })
	return writer{ns, src}
}

// raw is a publish's puts, written as Go values.
func raw(t testing.TB, values map[string]any) map[string]json.RawMessage {
	t.Helper()
	return testutil.JSONValues(t, values)
}

func publish(t testing.TB, w writer, ns string, puts map[string]any, deletes ...string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	rev, err := w.Publish(ctx, ns, raw(t, puts), deletes)
	if err != nil {
		t.Fatal(err)
	}
	return rev
}
