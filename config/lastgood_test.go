package config_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/internal/sdksuite"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/internal/testutil/nstest"
	"github.com/holdfast-dev/holdfast/transport"
)

// TestTooOldFileKeepsItsFloorWhenFailClosed (hole 6): a fail-closed
// namespace does not serve a file older than MaxStaleness, but keeps its
// (store id, revision) as the floor: a lagging replica's older snapshot is
// refused, not served. Before: the file was forgotten and r2 served at once.
func TestTooOldFileKeepsItsFloorWhenFailClosed(t *testing.T) {
	dir := t.TempDir()
	sdksuite.WriteCacheFile(t, dir, "fc", "s1", 5, map[string]string{"k": "r5"}, time.Now().Add(-time.Hour))
	lagging := &sdksuite.FuncSource{SnapshotFunc: func(_ context.Context, req transport.SnapshotRequest) (*transport.Snapshot, error) {
		return &transport.Snapshot{Namespace: req.Namespace, StoreID: "s1", Revision: 2, Cursor: 2, Values: rawObject(map[string]string{"k": "r2"})}, nil
	}}
	c := sdksuite.NewClient(t, sdksuite.Source(lagging), config.WithCacheDir(dir), config.WithHistoryRewriteGrace(time.Minute))
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	ns, err := c.Namespace(ctx, "fc", config.FailClosed(), config.MaxStaleness(time.Minute))
	if err == nil {
		t.Fatalf("opened serving %q at %d; want the lagging snapshot refused and ErrStale", ns.String("k", ""), ns.Revision())
	}
	if !errors.Is(err, config.ErrStale) {
		t.Errorf("open error = %v; want ErrStale", err)
	}
	first := lagging.Requests()[0]
	if first.KnownStoreID != "s1" || first.KnownRevision != 5 {
		t.Errorf("first snapshot request = %+v; want it conditional on the file's s1@5", first)
	}
}

// TestFutureFileHasUnknownAge (hole 7): a file confirmed in the future
// (the clock stepped back) is not age 0: fail-closed does not serve it, and
// Status says why. Before: served as perfectly fresh.
func TestFutureFileHasUnknownAge(t *testing.T) {
	down := &sdksuite.FuncSource{SnapshotFunc: func(context.Context, transport.SnapshotRequest) (*transport.Snapshot, error) {
		return nil, errors.New("connection refused")
	}}
	t.Run("fail-closed", func(t *testing.T) {
		dir := t.TempDir()
		sdksuite.WriteCacheFile(t, dir, "future", "s1", 3, map[string]string{"k": "v"}, time.Now().Add(time.Hour))
		c := sdksuite.NewClient(t, sdksuite.Source(down), config.WithCacheDir(dir))
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
		sdksuite.WriteCacheFile(t, dir, "future", "s1", 3, map[string]string{"k": "v"}, time.Now().Add(time.Hour))
		c := sdksuite.NewClient(t, sdksuite.Source(down), config.WithCacheDir(dir))
		ns := sdksuite.Open(t, c, "future", config.MaxStaleness(time.Minute))
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
		sdksuite.WriteCacheFile(t, dir, "future", "s1", 3, map[string]string{"k": "v"}, time.Now().Add(time.Second))
		c := sdksuite.NewClient(t, sdksuite.Source(down), config.WithCacheDir(dir))
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		if _, err := c.Namespace(ctx, "future", config.FailClosed(), config.MaxStaleness(time.Minute)); err != nil {
			t.Errorf("a file a second ahead (within tolerance) was refused: %v", err)
		}
	})
}

// TestSharedCacheDirKeepsTheNewest (hole 5): two clients sharing a cache
// directory; the one cut off from the server (serving r1) closes after the
// other wrote r3. Its Close must not put r1 back. Before: the last writer
// won, whatever its revision.
func TestSharedCacheDirKeepsTheNewest(t *testing.T) {
	srv := sdksuite.StartReference(t)
	sdksuite.Publish(t, srv, "shared", map[string]any{"k": 1})
	dir := t.TempDir()
	// A replica cut off from the origin: it serves r1 and keeps
	// confirming it, so Close has a newer confirmation of r1 to persist.
	partitioned := &sdksuite.FuncSource{
		SnapshotFunc: func(_ context.Context, req transport.SnapshotRequest) (*transport.Snapshot, error) {
			return &transport.Snapshot{Namespace: req.Namespace, StoreID: srv.StoreID(), Revision: 1, Cursor: 1, Values: rawObject(map[string]string{"k": "1"})}, nil
		},
		WatchFunc: func(ctx context.Context, req transport.WatchRequest, handle func(transport.Event) error) error {
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
	old := sdksuite.NewClient(t, sdksuite.Source(partitioned), config.WithCacheDir(dir))
	oldNS := sdksuite.Open(t, old, "shared")
	d := openCacheDir(t, dir)
	testutil.Eventually(t, waitLimit, func() bool { rec, err := d.Load("shared"); return err == nil && rec.Revision == 1 }, "r1 on disk")

	sdksuite.Publish(t, srv, "shared", map[string]any{"k": 2})
	last := sdksuite.Publish(t, srv, "shared", map[string]any{"k": 3})
	current := sdksuite.NewClient(t, sdksuite.Endpoint(srv.URL()), config.WithCacheDir(dir))
	nstest.WaitRevision(t, sdksuite.Open(t, current, "shared"), last, waitLimit)
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

func (h *recordingHandler) WithGroup(string) slog.Handler { return h }

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

// TestCloseDoesNotRewriteAnUnconfirmedFile: a namespace that served its
// file and never reached the network has nothing new to persist at Close.
// Writing the file back would put this process's old store over what
// another process sharing the directory wrote since, of a new store (a
// new store id always replaces).
func TestCloseDoesNotRewriteAnUnconfirmedFile(t *testing.T) {
	dir := t.TempDir()
	sdksuite.WriteCacheFile(t, dir, "uc", "s1", 4, map[string]string{"k": "old store"}, time.Now().Add(-time.Minute))
	down := &sdksuite.FuncSource{SnapshotFunc: func(context.Context, transport.SnapshotRequest) (*transport.Snapshot, error) {
		return nil, errors.New("connection refused")
	}}
	c := sdksuite.NewClient(t, sdksuite.Source(down), config.WithCacheDir(dir))
	ns := sdksuite.Open(t, c, "uc")
	if ns.String("k", "") != "old store" {
		t.Fatalf("serves %q; want the file", ns.String("k", ""))
	}
	// Another process, in touch with the server, writes the new store's data.
	sdksuite.WriteCacheFile(t, dir, "uc", "s2", 1, map[string]string{"k": "new store"}, time.Now())
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	rec, err := openCacheDir(t, dir).Load("uc")
	if err != nil {
		t.Fatal(err)
	}
	if rec.StoreID != "s2" {
		t.Errorf("after Close the file holds store %s revision %d; the other process's s2 was overwritten with what this one read at start", rec.StoreID, rec.Revision)
	}
}

// lockingSource holds its own lock while it hands an event to the client,
// and takes it again in QuietLimit: a source whose quiet limit depends on
// the state of its watch (as the HTTP source's does on its mode).
type lockingSource struct {
	lock     chan struct{} // a mutex that can give up: cap 1, full while held
	deadlock atomic.Bool   // QuietLimit could not take the lock for a long time
}

func (s *lockingSource) Snapshot(_ context.Context, req transport.SnapshotRequest) (*transport.Snapshot, error) {
	return &transport.Snapshot{Namespace: req.Namespace, StoreID: "s1", Revision: 1, Cursor: 1,
		Values: rawObject(map[string]string{"k": "v"})}, nil
}

func (s *lockingSource) Watch(ctx context.Context, req transport.WatchRequest, handle func(transport.Event) error) error {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		s.lock <- struct{}{}
		err := handle(transport.Event{Progress: &transport.Progress{Namespace: req.Namespace, StoreID: "s1", Revision: 1, Cursor: 1}})
		<-s.lock
		if err != nil {
			return err
		}
	}
}

func (s *lockingSource) QuietLimit() time.Duration {
	select {
	case s.lock <- struct{}{}:
		<-s.lock
	case <-time.After(2 * time.Second): // a detector, not synchronisation: nothing holds the lock that long but a deadlock
		s.deadlock.Store(true)
	}
	return time.Second
}

// TestFileFailingTheSchemaKeepsItsFloor: a new build with a stricter
// schema finds its last-good file (r5, applied by the build before)
// failing it. The data is not served, but the file's revision is still
// the floor of its store id: a lagging replica's r2 is older data and is
// refused until the rewrite grace.
func TestFileFailingTheSchemaKeepsItsFloor(t *testing.T) {
	dir := t.TempDir()
	sdksuite.WriteCacheFile(t, dir, "strict", "s1", 5, map[string]string{"k": "r5"}, time.Now())
	lagging := &sdksuite.FuncSource{SnapshotFunc: func(_ context.Context, req transport.SnapshotRequest) (*transport.Snapshot, error) {
		return &transport.Snapshot{Namespace: req.Namespace, StoreID: "s1", Revision: 2, Cursor: 2, Values: values(t, map[string]string{"k": `"r2"`, "n": `1`})}, nil
	}}
	c := sdksuite.NewClient(t, sdksuite.Source(lagging), config.WithCacheDir(dir), config.WithHistoryRewriteGrace(time.Hour))
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	ns, err := c.Namespace(ctx, "strict", config.Schema([]byte(`{"type":"object","required":["n"]}`)))
	if err == nil {
		t.Fatalf("opened on the lagging replica's r%d (%q) below the file's r5", ns.Revision(), ns.String("k", ""))
	}
	var oe *config.OpenError
	if !errors.As(err, &oe) || oe.Last == nil || !strings.Contains(oe.Last.Error(), "behind the applied 5") {
		t.Errorf("open error = %v; want the refusal of data behind r5 as the last error", err)
	}
}
