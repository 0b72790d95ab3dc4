package config_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/internal/cachedir"
	"github.com/holdfast-dev/holdfast/internal/snapshot"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/transport"
)

// funcSource is a Source whose answers a test scripts. A nil watch waits
// for its context.
type funcSource struct {
	snapshot  func(ctx context.Context, req transport.SnapshotRequest) (*transport.Snapshot, error)
	watch     func(ctx context.Context, req transport.WatchRequest, handle func(transport.Event) error) error
	snapshots atomic.Int64
	mu        sync.Mutex
	requests  []transport.SnapshotRequest
}

func (s *funcSource) Snapshot(ctx context.Context, req transport.SnapshotRequest) (*transport.Snapshot, error) {
	s.snapshots.Add(1)
	s.mu.Lock()
	s.requests = append(s.requests, req)
	s.mu.Unlock()
	return s.snapshot(ctx, req)
}

func (s *funcSource) Watch(ctx context.Context, req transport.WatchRequest, handle func(transport.Event) error) error {
	if s.watch == nil {
		<-ctx.Done()
		return ctx.Err()
	}
	return s.watch(ctx, req, handle)
}

func rawValues(kv map[string]string) map[string]json.RawMessage {
	out := make(map[string]json.RawMessage, len(kv))
	for k, v := range kv {
		b, _ := json.Marshal(v)
		out[k] = b
	}
	return out
}

// rawObject is kv as a snapshot's values on the wire.
func rawObject(kv map[string]string) json.RawMessage {
	obj, err := transport.EncodeValues(rawValues(kv))
	if err != nil {
		panic(err)
	}
	return obj
}

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

// openCacheDir opens dir as a cache directory, as another process would.
func openCacheDir(t *testing.T, dir string) *cachedir.Dir {
	t.Helper()
	d, err := cachedir.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// writeCacheFile writes a last-good file for ns at revision rev of store
// "s1", confirmed at confirmedAt.
func writeCacheFile(t *testing.T, dir, ns string, rev int64, kv map[string]string, confirmedAt time.Time) {
	t.Helper()
	writeStoreFile(t, dir, ns, "s1", rev, kv, confirmedAt)
}

// writeStoreFile is writeCacheFile for another store id.
func writeStoreFile(t *testing.T, dir, ns, storeID string, rev int64, kv map[string]string, confirmedAt time.Time) {
	t.Helper()
	snap, err := snapshot.Build(ns, storeID, rev, rawValues(kv))
	if err != nil {
		t.Fatal(err)
	}
	rec := &cachedir.Record{Namespace: ns, StoreID: storeID, Revision: rev, Cursor: rev, ConfirmedAt: confirmedAt, Snapshot: snap}
	if err := openCacheDir(t, dir).Save(rec); err != nil {
		t.Fatal(err)
	}
}

// TestFreshNeedsARecentConfirmation (hole 2): a watch that stays open but
// delivers no event (an intermediary's keepalives with the upstream dead)
// must not keep the namespace Fresh: Fresh needs a confirmation within the
// idle timeout. Before: Fresh until the 10-minute backstop.
func TestFreshNeedsARecentConfirmation(t *testing.T) {
	src := &funcSource{
		snapshot: func(_ context.Context, req transport.SnapshotRequest) (*transport.Snapshot, error) {
			return &transport.Snapshot{Namespace: req.Namespace, StoreID: "s1", Revision: 2, Cursor: 2, Values: rawObject(map[string]string{"k": "v"})}, nil
		},
		// One progress, then silence on a stream that never ends.
		watch: func(ctx context.Context, req transport.WatchRequest, handle func(transport.Event) error) error {
			if err := handle(transport.Event{Progress: &transport.Progress{Namespace: req.Namespace, StoreID: "s1", Revision: 2, Cursor: 2}}); err != nil {
				return err
			}
			<-ctx.Done()
			return ctx.Err()
		},
	}
	const idle = 200 * time.Millisecond
	c := sourceClient(t, src, config.WithStreamIdleTimeout(idle))
	ns := open(t, c, "quiet")
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := ns.WaitForState(ctx, config.StateFresh); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := ns.WaitForState(ctx, config.StateStale); err != nil {
		t.Fatalf("still %v with no event for %v: %v", ns.Status().State, time.Since(start), err)
	}
	if took := time.Since(start); took > idle+time.Second {
		t.Errorf("went Stale %v after the last confirmation; want within the idle timeout %v", took, idle)
	}
	if got := ns.String("k", ""); got != "v" {
		t.Errorf("serves %q; the last good must keep serving", got)
	}
}

// TestStopWaitsForARunningCallbackFromAnotherGoroutine (hole 3): stop
// called from another goroutine while the callback runs must wait for it.
// Before: the "called from the callback itself" check held on any
// goroutine, and stop returned at once.
func TestStopWaitsForARunningCallbackFromAnotherGoroutine(t *testing.T) {
	srv := startServer(t)
	publish(t, srv, "cb", map[string]any{"k": 1})
	c := newClient(t, srv.URL())
	ns := open(t, c, "cb")
	entered, release := make(chan struct{}), make(chan struct{})
	var returned atomic.Bool
	stop := ns.OnChange("k", func(config.Change) {
		close(entered)
		<-release
		if returned.Load() {
			t.Error("stop returned while the callback ran")
		}
	})
	publish(t, srv, "cb", map[string]any{"k": 2})
	<-entered
	stopped := make(chan struct{})
	go func() {
		stop()
		returned.Store(true)
		close(stopped)
	}()
	select {
	case <-stopped:
		close(release) // let the callback end, so Close can
		t.Fatal("stop returned while its callback was running on the dispatcher")
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	select {
	case <-stopped:
	case <-time.After(waitLimit):
		t.Fatal("stop did not return after the callback did")
	}
}

// TestStopFromItsOwnCallbackDoesNotDeadlock keeps the other half of the
// promise: stop called from the callback itself returns at once.
func TestStopFromItsOwnCallbackDoesNotDeadlock(t *testing.T) {
	srv := startServer(t)
	publish(t, srv, "cb", map[string]any{"k": 1})
	c := newClient(t, srv.URL())
	ns := open(t, c, "cb")
	done := make(chan struct{})
	var stop func()
	var once sync.Once
	stop = ns.OnChange("k", func(config.Change) {
		once.Do(func() { stop(); close(done) })
	})
	publish(t, srv, "cb", map[string]any{"k": 2})
	select {
	case <-done:
	case <-time.After(waitLimit):
		t.Fatal("stop from its own callback deadlocked")
	}
}

// TestTooOldFileKeepsItsFloorWhenFailClosed (hole 6): a fail-closed
// namespace does not serve a file older than MaxStaleness, but keeps its
// (store id, revision) as the floor: a lagging replica's older snapshot is
// refused, not served. Before: the file was forgotten and r2 served at once.
func TestTooOldFileKeepsItsFloorWhenFailClosed(t *testing.T) {
	dir := t.TempDir()
	writeCacheFile(t, dir, "fc", 5, map[string]string{"k": "r5"}, time.Now().Add(-time.Hour))
	lagging := &funcSource{snapshot: func(_ context.Context, req transport.SnapshotRequest) (*transport.Snapshot, error) {
		return &transport.Snapshot{Namespace: req.Namespace, StoreID: "s1", Revision: 2, Cursor: 2, Values: rawObject(map[string]string{"k": "r2"})}, nil
	}}
	c := sourceClient(t, lagging, config.WithCacheDir(dir), config.WithHistoryRewriteGrace(time.Minute))
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	ns, err := c.Namespace(ctx, "fc", config.FailClosed(), config.MaxStaleness(time.Minute))
	if err == nil {
		t.Fatalf("opened serving %q at %d; want the lagging snapshot refused and ErrStale", ns.String("k", ""), ns.Revision())
	}
	if !errors.Is(err, config.ErrStale) {
		t.Errorf("open error = %v; want ErrStale", err)
	}
	lagging.mu.Lock()
	first := lagging.requests[0]
	lagging.mu.Unlock()
	if first.KnownStoreID != "s1" || first.KnownRevision != 5 {
		t.Errorf("first snapshot request = %+v; want it conditional on the file's s1@5", first)
	}
}

// TestOlderSnapshotTakenAfterTheRewriteGrace (hole 1, the rule): under
// the same store id, a snapshot behind the floor is refused (Stale, never
// Fresh, the last good serving) until the evidence has lasted the grace;
// then it is new history: the floor resets and it is served.
func TestOlderSnapshotTakenAfterTheRewriteGrace(t *testing.T) {
	dir := t.TempDir()
	writeCacheFile(t, dir, "rw", 5, map[string]string{"k": "r5"}, time.Now())
	restored := &funcSource{snapshot: func(_ context.Context, req transport.SnapshotRequest) (*transport.Snapshot, error) {
		return &transport.Snapshot{Namespace: req.Namespace, StoreID: "s1", Revision: 2, Cursor: 2, Values: rawObject(map[string]string{"k": "r2"})}, nil
	}}
	const grace = 400 * time.Millisecond
	c := sourceClient(t, restored, config.WithCacheDir(dir), config.WithHistoryRewriteGrace(grace))
	start := time.Now()
	ns := open(t, c, "rw")
	var sawFresh atomic.Bool
	stop := ns.OnStatusChange(func(st config.Status) {
		if st.State == config.StateFresh && st.Revision == 5 {
			sawFresh.Store(true)
		}
	})
	defer stop()
	if got := ns.String("k", ""); got != "r5" {
		t.Fatalf("serves %q at open; want the file's r5", got)
	}
	testutil.Eventually(t, waitLimit, func() bool { return ns.Status().LastError.Kind == config.ErrorHistory }, "the refusal in Status")
	if st := ns.Status(); st.State == config.StateFresh || ns.String("k", "") != "r5" {
		t.Errorf("while refusing: %v serving %q; want Stale on r5", st.State, ns.String("k", ""))
	}
	waitRevision2 := func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		for ns.Revision() != 2 {
			if err := ns.WaitForState(ctx, config.StateFresh); err != nil {
				t.Fatalf("never took the rewritten history: %v (status %+v)", err, ns.Status())
			}
		}
	}
	waitRevision2()
	if took := time.Since(start); took < grace {
		t.Errorf("took the older snapshot after %v; the grace is %v", took, grace)
	}
	if ns.String("k", "") != "r2" {
		t.Errorf("serves %q after the reset; want r2", ns.String("k", ""))
	}
	if sawFresh.Load() {
		t.Error("reported Fresh on r5 while the server's history was behind it")
	}
}

// TestLinearizableSnapshotProvesRewrittenHistory (hole 1, etcd's rule): a
// linearizable snapshot behind the floor is new history at once.
func TestLinearizableSnapshotProvesRewrittenHistory(t *testing.T) {
	dir := t.TempDir()
	writeCacheFile(t, dir, "rw", 5, map[string]string{"k": "r5"}, time.Now())
	restored := &funcSource{snapshot: func(_ context.Context, req transport.SnapshotRequest) (*transport.Snapshot, error) {
		return &transport.Snapshot{Namespace: req.Namespace, StoreID: "s1", Revision: 2, Cursor: 2, Linearizable: true,
			Values: rawObject(map[string]string{"k": "r2"})}, nil
	}}
	c := sourceClient(t, restored, config.WithCacheDir(dir), config.WithHistoryRewriteGrace(time.Hour))
	ns := open(t, c, "rw")
	testutil.Eventually(t, waitLimit, func() bool { return ns.Revision() == 2 && ns.String("k", "") == "r2" }, "the restored revision")
	if n := restored.snapshots.Load(); n != 1 {
		t.Errorf("%d snapshots; want the first one taken at once", n)
	}
}

// TestFutureFileHasUnknownAge (hole 7): a file confirmed in the future
// (the clock stepped back) is not age 0: fail-closed does not serve it, and
// Status says why. Before: served as perfectly fresh.
func TestFutureFileHasUnknownAge(t *testing.T) {
	down := &funcSource{snapshot: func(context.Context, transport.SnapshotRequest) (*transport.Snapshot, error) {
		return nil, errors.New("connection refused")
	}}
	t.Run("fail-closed", func(t *testing.T) {
		dir := t.TempDir()
		writeCacheFile(t, dir, "future", 3, map[string]string{"k": "v"}, time.Now().Add(time.Hour))
		c := sourceClient(t, down, config.WithCacheDir(dir))
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		ns, err := c.Namespace(ctx, "future", config.FailClosed(), config.MaxStaleness(time.Minute))
		if err == nil {
			t.Fatalf("opened from a file of unknown age, state %v", ns.Status().State)
		}
		if !errors.Is(err, config.ErrStale) {
			t.Errorf("open error = %v; want ErrStale", err)
		}
	})
	t.Run("fail-open", func(t *testing.T) {
		dir := t.TempDir()
		writeCacheFile(t, dir, "future", 3, map[string]string{"k": "v"}, time.Now().Add(time.Hour))
		c := sourceClient(t, down, config.WithCacheDir(dir))
		ns := open(t, c, "future", config.MaxStaleness(time.Minute))
		st := ns.Status()
		if ns.String("k", "") != "v" || st.State != config.StateBreached {
			t.Errorf("fail-open serves %q, %v; want the file, Breached (age unknown)", ns.String("k", ""), st.State)
		}
		if !st.LastConfirmed.IsZero() || st.Staleness != 0 {
			t.Errorf("LastConfirmed %v, Staleness %v; want both unknown (zero)", st.LastConfirmed, st.Staleness)
		}
		testutil.Eventually(t, waitLimit, func() bool {
			return errors.Is(ns.Status().LastError.Err, config.ErrAgeUnknown) || ns.Status().LastError.Kind == config.ErrorNetwork
		}, "the clock error in Status")
	})
	t.Run("within tolerance", func(t *testing.T) {
		dir := t.TempDir()
		writeCacheFile(t, dir, "future", 3, map[string]string{"k": "v"}, time.Now().Add(time.Second))
		c := sourceClient(t, down, config.WithCacheDir(dir))
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		if _, err := c.Namespace(ctx, "future", config.FailClosed(), config.MaxStaleness(time.Minute)); err != nil {
			t.Errorf("a file a second ahead (within tolerance) was refused: %v", err)
		}
	})
}

// TestNamespaceWithOtherOptionsFails (hole 10): a second open of an open
// name with other options fails, saying which; the same options share it.
func TestNamespaceWithOtherOptionsFails(t *testing.T) {
	srv := startServer(t)
	publish(t, srv, "opts", map[string]any{"k": 1})
	c := newClient(t, srv.URL())
	first := open(t, c, "opts", config.MaxStaleness(time.Minute), config.Defaults(map[string]any{"k": 0}))
	same := open(t, c, "opts", config.MaxStaleness(time.Minute), config.Defaults(map[string]any{"k": 0}))
	if same != first {
		t.Error("the same options gave another Namespace")
	}
	for name, opts := range map[string][]config.NamespaceOption{
		"MaxStaleness": {config.MaxStaleness(time.Hour), config.Defaults(map[string]any{"k": 0})},
		"FailClosed":   {config.MaxStaleness(time.Minute), config.Defaults(map[string]any{"k": 0}), config.FailClosed()},
		"Defaults":     {config.MaxStaleness(time.Minute), config.Defaults(map[string]any{"k": 1})},
		"WithSchema":   {config.MaxStaleness(time.Minute), config.Defaults(map[string]any{"k": 0}), config.Schema([]byte(`{}`))},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		_, err := c.Namespace(ctx, "opts", opts...)
		cancel()
		if !errors.Is(err, config.ErrOptionsDiffer) {
			t.Errorf("%s differs: err = %v; want ErrOptionsDiffer", name, err)
		}
	}
}

// TestServerRestartWithNewStoreConvergesAtOnce (hole 8): after the server
// restarts with a new store, its first answer to the client (400, cursor
// above head) leads to a snapshot at once, not after a backoff grown by the
// outage. Target: converged within 2 s of that first answer. Before: 2.5 to
// 7.5 s here (the 5 s backoff), 41-89 s with the default 30 s maximum.
func TestServerRestartWithNewStoreConvergesAtOnce(t *testing.T) {
	srv := startServer(t)
	for i := range 5 {
		publish(t, srv, "restart", map[string]any{"k": i})
	}
	c := newClient(t, srv.URL(), config.WithReconnectBackoff(5*time.Second, 5*time.Second))
	ns := open(t, c, "restart")
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitLimit, func() bool { return ns.Status().LastError.Kind == config.ErrorNetwork }, "the client to see the outage")
	storeID := srv.ResetStore()
	rev := publish(t, srv, "restart", map[string]any{"k": "new"})
	before := srv.Stats()
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	var first time.Time
	testutil.Eventually(t, waitLimit, func() bool {
		st := srv.Stats()
		if st.Watches+st.Streams+st.StreamPolls+st.Snapshots+st.Events > before.Watches+before.Streams+before.StreamPolls+before.Snapshots+before.Events {
			first = time.Now()
			return true
		}
		return false
	}, "the client's first request after the restart")
	testutil.Eventually(t, waitLimit, func() bool {
		st := ns.Status()
		return st.StoreID == storeID && ns.Revision() == rev
	}, "convergence on the new store")
	if took := time.Since(first); took > 2*time.Second {
		t.Errorf("converged %v after the server's first answer; want within 2s", took)
	}
}

// TestOversizedSnapshotBacksOffToTheMaximum (hole 4, the client's part):
// a snapshot over the size limit is refused with ErrTooLarge in Status,
// the last good keeps serving, and it is not downloaded again on every
// step of a growing backoff: the next try waits the longest backoff.
// Before: 5, 10, 20, 40 ms... eight downloads in the first second and a half.
func TestOversizedSnapshotBacksOffToTheMaximum(t *testing.T) {
	srv := startServer(t)
	publish(t, srv, "big", map[string]any{"k": "small"})
	dir, _ := syncedCacheDir(t, srv, "big")
	publish(t, srv, "big", map[string]any{"k": string(make([]byte, 4096))})
	before := srv.Stats().Snapshots
	c := newClient(t, srv.URL(), config.WithCacheDir(dir), config.WithMaxSnapshotBytes(1024),
		config.WithReconnectBackoff(5*time.Millisecond, time.Second))
	ns := open(t, c, "big")
	testutil.Eventually(t, waitLimit, func() bool { return errors.Is(ns.Status().LastError.Err, transport.ErrTooLarge) }, "ErrTooLarge in Status")
	start := time.Now()
	testutil.Consistently(t, 1500*time.Millisecond, func() error {
		if got := ns.String("k", ""); got != "small" {
			return fmt.Errorf("serves %q", got)
		}
		return nil
	}, "the last good must keep serving")
	if n := srv.Stats().Snapshots - before; n > 3 {
		t.Errorf("%d snapshot downloads in %v; want the longest backoff (1s ± 25%%) between them", n, time.Since(start).Round(time.Millisecond))
	}
	if st := ns.Status(); st.LastError.Kind != config.ErrorInvalidData || !strings.Contains(st.LastError.Message, "1024") {
		t.Errorf("LastError = %v %q; want invalid_data naming the 1024-byte limit", st.LastError.Kind, st.LastError.Message)
	}
}

// TestHistoryRewrittenOverHTTP (hole 1, over HTTP): the server's store is
// restored from a backup (same store id, history rewound to an earlier
// revision). The client refuses the older data and serves its last good,
// Stale and never Fresh, until the evidence has lasted the grace; then it
// resets its floor, serves the restored content, and follows the new
// history. Before: it refused every snapshot "behind the applied" revision
// until the namespace passed the old one, wedged.
func TestHistoryRewrittenOverHTTP(t *testing.T) {
	srv := startServer(t)
	publish(t, srv, "restored", map[string]any{"k": 1})
	publish(t, srv, "restored", map[string]any{"k": 2})
	backup := srv.Head()
	publish(t, srv, "restored", map[string]any{"k": 3})
	last := publish(t, srv, "restored", map[string]any{"k": 4})
	const grace = 500 * time.Millisecond
	dir := t.TempDir()
	c := newClient(t, srv.URL(), config.WithHistoryRewriteGrace(grace), config.WithCacheDir(dir))
	ns := open(t, c, "restored")
	waitRevision(t, ns, last)

	var evidence, freshOnOld atomic.Bool
	stop := ns.OnStatusChange(func(st config.Status) {
		if evidence.Load() && st.State == config.StateFresh && st.Revision == last {
			freshOnOld.Store(true)
		}
	})
	defer stop()
	if err := srv.RestoreTo(backup); err != nil {
		t.Fatal(err)
	}
	restoredAt := time.Now()
	testutil.Eventually(t, waitLimit, func() bool { return ns.Status().LastError.Kind == config.ErrorHistory }, "the refusal of the older history")
	evidence.Store(true)
	if st := ns.Status(); st.State == config.StateFresh || ns.Int("k", 0) != 4 {
		t.Errorf("while refusing: %v serving k=%d; want Stale on the last good k=4", st.State, ns.Int("k", 0))
	}
	testutil.Eventually(t, waitLimit, func() bool { return ns.Revision() == backup }, "the restored history taken")
	if took := time.Since(restoredAt); took < grace {
		t.Errorf("took the restored history %v after the restore; the grace is %v", took, grace)
	}
	if ns.Int("k", 0) != 2 {
		t.Errorf("serves k=%d after the reset; want the backup's 2", ns.Int("k", 0))
	}
	next := publish(t, srv, "restored", map[string]any{"k": "new"})
	waitRevision(t, ns, next)
	if ns.String("k", "") != "new" {
		t.Errorf("serves %v after the next publish; want \"new\"", ns.Int("k", 0))
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := ns.WaitForState(ctx, config.StateFresh); err != nil {
		t.Fatal(err)
	}
	if freshOnOld.Load() {
		t.Error("reported Fresh on the old history after the server showed it was behind")
	}
	// The last-good file follows the new history too, though its revision
	// is below the old one's.
	d := openCacheDir(t, dir)
	testutil.Eventually(t, waitLimit, func() bool {
		rec, err := d.Load("restored")
		return err == nil && rec.Revision == next
	}, "the new history on disk")
}

// TestSharedCacheDirKeepsTheNewest (hole 5): two clients sharing a cache
// directory; the one cut off from the server (serving r1) closes after the
// other wrote r3. Its Close must not put r1 back. Before: the last writer
// won, whatever its revision.
func TestSharedCacheDirKeepsTheNewest(t *testing.T) {
	srv := startServer(t)
	publish(t, srv, "shared", map[string]any{"k": 1})
	dir := t.TempDir()
	// A replica cut off from the origin: it serves r1 and keeps
	// confirming it, so Close has a newer confirmation of r1 to persist.
	partitioned := &funcSource{
		snapshot: func(_ context.Context, req transport.SnapshotRequest) (*transport.Snapshot, error) {
			return &transport.Snapshot{Namespace: req.Namespace, StoreID: srv.StoreID(), Revision: 1, Cursor: 1, Values: rawObject(map[string]string{"k": "1"})}, nil
		},
		watch: func(ctx context.Context, req transport.WatchRequest, handle func(transport.Event) error) error {
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-tick.C:
				}
				if err := handle(transport.Event{Progress: &transport.Progress{Namespace: req.Namespace, StoreID: srv.StoreID(), Revision: 1, Cursor: 1}}); err != nil {
					return err
				}
			}
		},
	}
	old := sourceClient(t, partitioned, config.WithCacheDir(dir))
	oldNS := open(t, old, "shared")
	d := openCacheDir(t, dir)
	testutil.Eventually(t, waitLimit, func() bool { rec, err := d.Load("shared"); return err == nil && rec.Revision == 1 }, "r1 on disk")

	publish(t, srv, "shared", map[string]any{"k": 2})
	last := publish(t, srv, "shared", map[string]any{"k": 3})
	current := newClient(t, srv.URL(), config.WithCacheDir(dir))
	waitRevision(t, open(t, current, "shared"), last)
	testutil.Eventually(t, waitLimit, func() bool { rec, err := d.Load("shared"); return err == nil && rec.Revision == last }, "r3 on disk")

	mark := time.Now()
	testutil.Eventually(t, waitLimit, func() bool { return oldNS.Status().LastConfirmed.After(mark) }, "a confirmation of r1 newer than the r3 file")
	if err := old.Close(); err != nil { // persists its latest confirmation, of r1
		t.Fatal(err)
	}
	rec, err := d.Load("shared")
	if err != nil || rec.Revision != last {
		t.Fatalf("after the cut-off client's Close the file holds %v (err %v); want revision %d", rec, err, last)
	}
	if pe := oldNS.Status().PersistError; pe.Kind != config.ErrorNone {
		t.Errorf("the refused older save shows as a persist error: %+v", pe)
	}
}

// recordingHandler keeps the level and message of every log record.
type recordingHandler struct {
	mu      sync.Mutex
	records []slog.Record
}

func (h *recordingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, r)
	return nil
}
func (h *recordingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordingHandler) WithGroup(string) slog.Handler      { return h }

func (h *recordingHandler) count(level slog.Level, msg string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, r := range h.records {
		if r.Level == level && strings.Contains(r.Message, msg) {
			n++
		}
	}
	return n
}

// TestOpeningFailuresAreToldApartAndLogged (hole 11): a wrong base path
// and an unknown namespace are different errors, and failed attempts
// while opening are logged at Warn, rate-limited. Before: both were
// ErrNotFound, and nothing was logged at any level.
func TestOpeningFailuresAreToldApartAndLogged(t *testing.T) {
	srv := startServer(t)
	publish(t, srv, "known", map[string]any{"k": 1})
	web := httptest.NewServer(http.NotFoundHandler()) // an ordinary web server: 404 text
	t.Cleanup(web.Close)
	for _, tt := range []struct {
		name, url, ns string
		want          error
	}{
		{"wrong base path", srv.URL() + "/not-the-api", "known", transport.ErrNotHoldfast},
		{"not a holdfast server", web.URL, "known", transport.ErrNotHoldfast},
		{"unknown namespace", srv.URL(), "unknown", transport.ErrNotFound},
	} {
		t.Run(tt.name, func(t *testing.T) {
			logs := &recordingHandler{}
			c := newClient(t, tt.url, config.WithLogger(slog.New(logs)))
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			_, err := c.Namespace(ctx, tt.ns)
			var oe *config.OpenError
			if !errors.As(err, &oe) || !errors.Is(err, tt.want) {
				t.Fatalf("open error = %v; want an *OpenError wrapping %v", err, tt.want)
			}
			other := transport.ErrNotFound
			if tt.want == transport.ErrNotFound {
				other = transport.ErrNotHoldfast
			}
			if errors.Is(err, other) {
				t.Errorf("open error %v also matches %v", err, other)
			}
			// At 5-50 ms backoff, dozens of attempts: one Warn, the
			// rest at Debug.
			if n := logs.count(slog.LevelWarn, "snapshot failed"); n != 1 {
				t.Errorf("%d Warn logs of failed attempts; want 1 (rate-limited)", n)
			}
			if n := logs.count(slog.LevelDebug, "snapshot failed"); n == 0 {
				t.Error("repeated failed attempts left no Debug log")
			}
		})
	}
}

// TestSnapshotKeyLimitIsAClientOption (hole 4): the key limit that bounds
// what decoding costs is reachable from config, not only from a hand-built
// transport.HTTPSource: over it, ErrTooLarge in Status naming the limit,
// and the last good keeps serving.
func TestSnapshotKeyLimitIsAClientOption(t *testing.T) {
	srv := startServer(t)
	publish(t, srv, "keys", map[string]any{"a": 1})
	dir, _ := syncedCacheDir(t, srv, "keys")
	publish(t, srv, "keys", map[string]any{"b": 2, "c": 3})
	c := newClient(t, srv.URL(), config.WithCacheDir(dir), config.WithMaxSnapshotKeys(2))
	ns := open(t, c, "keys")
	testutil.Eventually(t, waitLimit, func() bool { return errors.Is(ns.Status().LastError.Err, transport.ErrTooLarge) }, "ErrTooLarge in Status")
	if msg := ns.Status().LastError.Message; !strings.Contains(msg, "2 keys") {
		t.Errorf("LastError %q does not name the 2-key limit", msg)
	}
	if ns.Int("a", 0) != 1 || ns.Revision() != 1 {
		t.Errorf("serves a=%d at %d; want the last good a=1 at 1", ns.Int("a", 0), ns.Revision())
	}
}

// TestOversizedEventResnapshots (hole 4, events): a change over the event
// limit ends the watch; resuming from the cursor would meet it again, so
// the client resnapshots (the snapshot has its own, larger limit) and
// converges. Before: it resumed into the same event forever.
func TestOversizedEventResnapshots(t *testing.T) {
	srv := startServer(t)
	publish(t, srv, "ev", map[string]any{"k": "small"})
	c := newClient(t, srv.URL(), config.WithMaxEventBytes(512))
	ns := open(t, c, "ev")
	big := strings.Repeat("x", 2048)
	rev := publish(t, srv, "ev", map[string]any{"k": big})
	waitRevision(t, ns, rev)
	if ns.String("k", "") != big {
		t.Errorf("serves %d bytes of k; want the 2048 of the oversized change", len(ns.String("k", "")))
	}
}
