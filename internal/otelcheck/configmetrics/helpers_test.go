package configmetrics_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/internal/cachedir"
	"github.com/holdfast-dev/holdfast/internal/fakeserver"
	"github.com/holdfast-dev/holdfast/internal/snapshot"
	"github.com/holdfast-dev/holdfast/transport"
)

// The helpers of config's own tests, as far as the tests here need them.

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	testHeartbeat = 50 * time.Millisecond
	relaxedIdle   = 5 * time.Second
	waitLimit     = 20 * time.Second
)

func startServer(t testing.TB, opts ...fakeserver.Option) *fakeserver.Server {
	t.Helper()
	srv, err := fakeserver.Start(append([]fakeserver.Option{fakeserver.WithHeartbeat(testHeartbeat)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return srv
}

func newClient(t testing.TB, url string, opts ...config.Option) *config.Client {
	t.Helper()
	base := []config.Option{
		config.WithEndpoint(url),
		config.WithStreamIdleTimeout(relaxedIdle),
		config.WithReconnectBackoff(5*time.Millisecond, 50*time.Millisecond),
		config.WithWatchMode(transport.WatchSSE),
	}
	c, err := config.New(append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// sourceClient is a client of src.
func sourceClient(t *testing.T, src transport.Source, opts ...config.Option) *config.Client {
	t.Helper()
	base := []config.Option{
		config.WithSource(src),
		config.WithLogger(testLogger(t)),
		config.WithReconnectBackoff(5*time.Millisecond, 50*time.Millisecond),
	}
	c, err := config.New(append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// testLogger logs through t.Log, so a failing test shows what the client did.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func publish(t testing.TB, srv *fakeserver.Server, ns string, puts map[string]any, deletes ...string) int64 {
	t.Helper()
	rev, err := srv.Publish(ns, puts, deletes...)
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

// funcSource is a Source whose answers a test scripts. A nil watch waits
// for its context.
type funcSource struct {
	snapshot func(ctx context.Context, req transport.SnapshotRequest) (*transport.Snapshot, error)
	watch    func(ctx context.Context, req transport.WatchRequest, handle func(transport.Event) error) error
}

func (s *funcSource) Snapshot(ctx context.Context, req transport.SnapshotRequest) (*transport.Snapshot, error) {
	return s.snapshot(ctx, req)
}

func (s *funcSource) Watch(ctx context.Context, req transport.WatchRequest, handle func(transport.Event) error) error {
	if s.watch == nil {
		<-ctx.Done()
		return ctx.Err()
	}
	return s.watch(ctx, req, handle)
}

// writeCacheFile writes a last-good file for ns at revision rev of store
// "s1", confirmed at confirmedAt, as an earlier run of the client would.
func writeCacheFile(t *testing.T, dir, ns string, rev int64, kv map[string]string, confirmedAt time.Time) {
	t.Helper()
	raw := make(map[string]json.RawMessage, len(kv))
	for k, v := range kv {
		b, _ := json.Marshal(v)
		raw[k] = b
	}
	snap, err := snapshot.Build(ns, "s1", rev, raw)
	if err != nil {
		t.Fatal(err)
	}
	d, err := cachedir.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	rec := &cachedir.Record{Namespace: ns, StoreID: "s1", Revision: rev, Cursor: rev, ConfirmedAt: confirmedAt, Snapshot: snap}
	if err := d.Save(rec); err != nil {
		t.Fatal(err)
	}
}
