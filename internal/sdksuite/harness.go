package sdksuite

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/internal/cachedir"
	"github.com/holdfast-dev/holdfast/internal/fakeserver"
	"github.com/holdfast-dev/holdfast/internal/snapshot"
	"github.com/holdfast-dev/holdfast/transport"
)

// The harness: what every end-to-end test of the SDK does around its
// assertions (start the reference server, make a client of an endpoint or
// a source, open a namespace, publish, log through the test), written
// once for the suite and for the tests of config, the proxies, the
// metrics and the etcd source.

// Timings of the harness's clients: a generous idle timeout, so that a
// machine loaded by -race does not turn slow replies into reconnects, and
// the bound of every wait.
const (
	RelaxedIdle = 5 * time.Second
	WaitLimit   = 20 * time.Second
)

// Target is what a test's clients read from: the base URL of a data plane
// (a server, a relay, a proxy in front of one) or, when Source is set, a
// transport.Source (the etcd source, a scripted one).
type Target struct {
	URL    string
	Source transport.Source
}

// Endpoint is the target of a data plane's base URL.
func Endpoint(url string) Target { return Target{URL: url} }

// Source is the target of a source.
func Source(src transport.Source) Target { return Target{Source: src} }

func (tg Target) option() config.Option {
	if tg.Source != nil {
		return config.WithSource(tg.Source)
	}
	return config.WithEndpoint(tg.URL)
}

// NewClient returns a client of target, tuned for tests, with opts after
// the tuning: it reconnects within 5 to 50 ms; a client of an endpoint
// watches over SSE with the RelaxedIdle timeout, and one of a source logs
// through tb. It is closed when tb ends.
func NewClient(tb testing.TB, target Target, opts ...config.Option) *config.Client {
	tb.Helper()
	base := []config.Option{config.WithReconnectBackoff(5*time.Millisecond, 50*time.Millisecond)}
	if target.Source != nil {
		base = append(base, config.WithLogger(Logger(tb)))
	} else {
		base = append(base, config.WithStreamIdleTimeout(RelaxedIdle), config.WithWatchMode(transport.WatchSSE))
	}
	return NewDefaultClient(tb, target, append(base, opts...)...)
}

// NewDefaultClient returns a client of target as an application makes it,
// with opts and nothing else: for the tests of the defaults. It is closed
// when tb ends.
func NewDefaultClient(tb testing.TB, target Target, opts ...config.Option) *config.Client {
	tb.Helper()
	c, err := config.New(append([]config.Option{target.option()}, opts...)...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// Open opens the namespace name of c, and fails tb (Fatal) if it does
// not open within WaitLimit.
func Open(tb testing.TB, c *config.Client, name string, opts ...config.NamespaceOption) *config.Namespace {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), WaitLimit)
	defer cancel()
	ns, err := c.Namespace(ctx, name, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return ns
}

// Publisher commits changes to a store: the reference server, a Server of
// the suite.
type Publisher interface {
	Publish(ns string, puts map[string]any, deletes ...string) (int64, error)
}

// Publish commits a change through p and returns its revision, or fails
// tb (Fatal).
func Publish(tb testing.TB, p Publisher, ns string, puts map[string]any, deletes ...string) int64 {
	tb.Helper()
	rev, err := p.Publish(ns, puts, deletes...)
	if err != nil {
		tb.Fatal(err)
	}
	return rev
}

// Logger logs through tb.Log, from Debug up, so that a failing test shows
// what the client (or a source) did.
func Logger(tb testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(LogWriter(tb), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// LogWriter writes each line it is given through tb.Log: the writer of a
// test's log handler.
func LogWriter(tb testing.TB) io.Writer { return tWriter{tb} }

type tWriter struct{ tb testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.tb.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// StartReference starts the reference server with the suite's Heartbeat
// and then opts, and closes it when tb ends.
func StartReference(tb testing.TB, opts ...fakeserver.Option) *fakeserver.Server {
	tb.Helper()
	srv, err := fakeserver.Start(append([]fakeserver.Option{fakeserver.WithHeartbeat(Heartbeat)}, opts...)...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = srv.Close() })
	return srv
}

// Reference is a StartFunc: the reference server, which injects every
// fault of the suite itself.
func Reference(tb testing.TB, o Options) Server {
	tb.Helper()
	var opts []fakeserver.Option
	if o.BearerToken != "" {
		opts = append(opts, fakeserver.WithBearerToken(o.BearerToken))
	}
	return referenceServer{StartReference(tb, opts...)}
}

// referenceServer is the reference server as the suite sees it.
type referenceServer struct{ *fakeserver.Server }

func (s referenceServer) Target() Target { return Endpoint(s.URL()) }

func (s referenceServer) Stats() Stats {
	st := s.Server.Stats()
	return Stats{Snapshots: st.Snapshots, Events: st.Events, Watches: st.Watches, Streams: st.Streams, StreamPolls: st.StreamPolls}
}

// FuncSource is a transport.Source whose answers a test scripts: Snapshot
// calls SnapshotFunc, Watch calls WatchFunc, or waits for its context when
// WatchFunc is nil. It counts and keeps the snapshot requests.
type FuncSource struct {
	SnapshotFunc func(ctx context.Context, req transport.SnapshotRequest) (*transport.Snapshot, error)
	WatchFunc    func(ctx context.Context, req transport.WatchRequest, handle func(transport.Event) error) error

	mu       sync.Mutex
	requests []transport.SnapshotRequest
}

// Snapshot records req and answers with SnapshotFunc.
func (s *FuncSource) Snapshot(ctx context.Context, req transport.SnapshotRequest) (*transport.Snapshot, error) {
	s.mu.Lock()
	s.requests = append(s.requests, req)
	s.mu.Unlock()
	return s.SnapshotFunc(ctx, req)
}

// Watch answers with WatchFunc, or waits for ctx without it.
func (s *FuncSource) Watch(ctx context.Context, req transport.WatchRequest, handle func(transport.Event) error) error {
	if s.WatchFunc == nil {
		<-ctx.Done()
		return ctx.Err()
	}
	return s.WatchFunc(ctx, req, handle)
}

// Requests returns the snapshot requests so far, in order.
func (s *FuncSource) Requests() []transport.SnapshotRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

// Snapshots is how many snapshots were requested.
func (s *FuncSource) Snapshots() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return int64(len(s.requests))
}

// WriteCacheFile writes a client's last-good file into the cache directory
// dir, as an earlier run of the client would: namespace ns at revision rev
// of store storeID, with values kv (each a JSON string), confirmed at
// confirmedAt.
func WriteCacheFile(tb testing.TB, dir, ns, storeID string, rev int64, kv map[string]string, confirmedAt time.Time) {
	tb.Helper()
	raw := make(map[string]json.RawMessage, len(kv))
	for k, v := range kv {
		b, err := json.Marshal(v)
		if err != nil {
			tb.Fatal(err)
		}
		raw[k] = b
	}
	snap, err := snapshot.Build(ns, storeID, rev, raw)
	if err != nil {
		tb.Fatal(err)
	}
	d, err := cachedir.OpenDir(dir)
	if err != nil {
		tb.Fatal(err)
	}
	rec := &cachedir.Record{Namespace: ns, StoreID: storeID, Revision: rev, Cursor: rev, ConfirmedAt: confirmedAt, Snapshot: snap}
	if err := d.Save(rec); err != nil {
		tb.Fatal(err)
	}
}
