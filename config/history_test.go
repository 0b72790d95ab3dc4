package config_test

import (
	"context"
	"encoding/json"
	"flag"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/internal/sdksuite"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/internal/testutil/nstest"
	"github.com/holdfast-dev/holdfast/internal/wire"
	"github.com/holdfast-dev/holdfast/transport"
)

// TestOlderSnapshotTakenAfterTheRewriteGrace (hole 1, the rule): under
// the same store id, a snapshot behind the floor is refused (Stale, never
// Fresh, the last good serving) until the evidence has lasted the grace;
// then it is new history: the floor resets and it is served.
func TestOlderSnapshotTakenAfterTheRewriteGrace(t *testing.T) {
	dir := t.TempDir()
	sdksuite.WriteCacheFile(t, dir, "rw", "s1", 5, map[string]string{"k": "r5"}, time.Now())
	restored := &sdksuite.FuncSource{SnapshotFunc: func(_ context.Context, req transport.SnapshotRequest) (*transport.Snapshot, error) {
		return &transport.Snapshot{Namespace: req.Namespace, StoreID: "s1", Revision: 2, Cursor: 2, Values: rawObject(map[string]string{"k": "r2"})}, nil
	}}
	const grace = 400 * time.Millisecond
	c := sdksuite.NewClient(t, sdksuite.Source(restored), config.WithCacheDir(dir), config.WithHistoryRewriteGrace(grace))
	start := time.Now()
	ns := sdksuite.Open(t, c, "rw")
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
	sdksuite.WriteCacheFile(t, dir, "rw", "s1", 5, map[string]string{"k": "r5"}, time.Now())
	restored := &sdksuite.FuncSource{SnapshotFunc: func(_ context.Context, req transport.SnapshotRequest) (*transport.Snapshot, error) {
		return &transport.Snapshot{Namespace: req.Namespace, StoreID: "s1", Revision: 2, Cursor: 2, Linearizable: true,
			Values: rawObject(map[string]string{"k": "r2"})}, nil
	}}
	c := sdksuite.NewClient(t, sdksuite.Source(restored), config.WithCacheDir(dir), config.WithHistoryRewriteGrace(time.Hour))
	ns := sdksuite.Open(t, c, "rw")
	testutil.Eventually(t, waitLimit, func() bool { return ns.Revision() == 2 && ns.String("k", "") == "r2" }, "the restored revision")
	if n := restored.Snapshots(); n != 1 {
		t.Errorf("%d snapshots; want the first one taken at once", n)
	}
}

// TestServerRestartWithNewStoreConvergesAtOnce (hole 8): after the server
// restarts with a new store, its first answer to the client (400, cursor
// above head) leads to a snapshot at once, not after a backoff grown by the
// outage. Target: converged within 2 s of that first answer. Before: 2.5 to
// 7.5 s here (the 5 s backoff), 41-89 s with the default 30 s maximum.
func TestServerRestartWithNewStoreConvergesAtOnce(t *testing.T) {
	srv := sdksuite.StartReference(t)
	for i := range 5 {
		sdksuite.Publish(t, srv, "restart", map[string]any{"k": i})
	}
	c := sdksuite.NewClient(t, sdksuite.Endpoint(srv.URL()), config.WithReconnectBackoff(5*time.Second, 5*time.Second))
	ns := sdksuite.Open(t, c, "restart")
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitLimit, func() bool { return ns.Status().LastError.Kind == config.ErrorNetwork }, "the client to see the outage")
	storeID := srv.ResetStore()
	rev := sdksuite.Publish(t, srv, "restart", map[string]any{"k": "new"})
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

// TestHistoryRewrittenOverHTTP (hole 1, over HTTP): the server's store is
// restored from a backup (same store id, history rewound to an earlier
// revision). The client refuses the older data and serves its last good,
// Stale and never Fresh, until the evidence has lasted the grace; then it
// resets its floor, serves the restored content, and follows the new
// history. Before: it refused every snapshot "behind the applied" revision
// until the namespace passed the old one, wedged.
func TestHistoryRewrittenOverHTTP(t *testing.T) {
	srv := sdksuite.StartReference(t)
	sdksuite.Publish(t, srv, "restored", map[string]any{"k": 1})
	sdksuite.Publish(t, srv, "restored", map[string]any{"k": 2})
	backup := srv.Head()
	sdksuite.Publish(t, srv, "restored", map[string]any{"k": 3})
	last := sdksuite.Publish(t, srv, "restored", map[string]any{"k": 4})
	const grace = 500 * time.Millisecond
	dir := t.TempDir()
	c := sdksuite.NewClient(t, sdksuite.Endpoint(srv.URL()), config.WithHistoryRewriteGrace(grace), config.WithCacheDir(dir))
	ns := sdksuite.Open(t, c, "restored")
	nstest.WaitRevision(t, ns, last, waitLimit)

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
	next := sdksuite.Publish(t, srv, "restored", map[string]any{"k": "new"})
	nstest.WaitRevision(t, ns, next, waitLimit)
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

var runKnownHoles = flag.Bool("holes", false, "run the tests of known holes of the design, which fail")

// values is kv, each value's JSON text as given, as a snapshot's values on
// the wire.
func values(t *testing.T, kv map[string]string) json.RawMessage {
	t.Helper()
	raw := make(map[string]json.RawMessage, len(kv))
	for k, v := range kv {
		raw[k] = json.RawMessage(v)
	}
	obj, err := wire.EncodeValues(raw)
	if err != nil {
		t.Fatal(err)
	}
	return obj
}

// TestRejectedRewrittenHistoryThenGoodIsPersisted: the server's history is
// rewritten under the same store id (proved at once: a linearizable
// snapshot), and its first snapshot of the new history fails the schema.
// The next good revision of the new history, lower than the old floor,
// must reach the last-good file: otherwise the file keeps the old
// history's higher revision, and every restart serves it again and refuses
// the new history for the grace.
func TestRejectedRewrittenHistoryThenGoodIsPersisted(t *testing.T) {
	dir := t.TempDir()
	sdksuite.WriteCacheFile(t, dir, "rr", "s1", 5, map[string]string{"k": "r5"}, time.Now())
	var snaps atomic.Int64
	src := &sdksuite.FuncSource{
		SnapshotFunc: func(_ context.Context, req transport.SnapshotRequest) (*transport.Snapshot, error) {
			if snaps.Add(1) == 1 { // the restored store's first answer: fails the schema
				return &transport.Snapshot{Namespace: req.Namespace, StoreID: "s1", Revision: 2, Cursor: 2, Linearizable: true,
					Values: values(t, map[string]string{"k": `2`})}, nil
			}
			return &transport.Snapshot{Namespace: req.Namespace, StoreID: "s1", Revision: 3, Cursor: 3, Linearizable: true,
				Values: values(t, map[string]string{"k": `"r3"`})}, nil
		},
	}
	var watches atomic.Int64
	src.WatchFunc = func(ctx context.Context, req transport.WatchRequest, handle func(transport.Event) error) error {
		if watches.Add(1) == 1 {
			// The fix, r3, follows the rejected r2: a gap from nothing
			// applied of the new history, so a resnapshot.
			cs := transport.ChangeSet{Namespace: req.Namespace, StoreID: "s1", Revision: 3, PrevRevision: 2,
				Puts: map[string]json.RawMessage{"k": json.RawMessage(`"r3"`)}}
			if err := handle(transport.Event{Change: &cs}); err != nil {
				return err
			}
		}
		<-ctx.Done()
		return ctx.Err()
	}
	c := sdksuite.NewClient(t, sdksuite.Source(src), config.WithCacheDir(dir), config.WithHistoryRewriteGrace(time.Hour))
	ns := sdksuite.Open(t, c, "rr", config.Schema([]byte(`{"type":"object","properties":{"k":{"type":"string"}}}`)))
	// WaitForRevision cannot tell: the old history's 5 is above 3.
	testutil.Eventually(t, waitLimit, func() bool { return ns.String("k", "") == "r3" }, "the new history's r3 served")
	if ns.Revision() != 3 || ns.Rejected() != 1 {
		t.Fatalf("at revision %d with %d rejections; want 3 after rejecting 2", ns.Revision(), ns.Rejected())
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	d := openCacheDir(t, dir)
	rec, err := d.Load("rr")
	if err != nil {
		t.Fatal(err)
	}
	if rec.Revision != 3 || rec.Snapshot.Len() != 1 {
		v, _ := rec.Snapshot.Get("k")
		t.Errorf("the last-good file holds revision %d (k=%s) after the client applied the new history's r3; want 3", rec.Revision, v.Raw())
	}
}

// TestRewrittenHistoryPastTheCursorIsDetected: a store restored from a
// backup under the same store id, whose new history passes the client's
// cursor before the client reconnects (the client was cut off meanwhile),
// shows none of the evidence the client looks for: no cursor above the
// head, no snapshot behind the floor. The new history's next change
// chains on the old history's revision number, and the client serves a
// mix of both, Fresh; the backstop's conditional snapshot, by store id and
// revision, answers 304. A known hole of the design: the revisions
// need a history epoch or a content check to tell such a history apart.
func TestRewrittenHistoryPastTheCursorIsDetected(t *testing.T) {
	if !*runKnownHoles {
		t.Skip("a known hole of the design; -holes runs it")
	}
	srv := sdksuite.StartReference(t)
	sdksuite.Publish(t, srv, "mix", map[string]any{"base": 1})
	backup := srv.Head()
	sdksuite.Publish(t, srv, "mix", map[string]any{"old-only": 1})
	last := sdksuite.Publish(t, srv, "mix", map[string]any{"old-only-too": 1})
	c := sdksuite.NewClient(t, sdksuite.Endpoint(srv.URL()), config.WithBackstop(200*time.Millisecond))
	ns := sdksuite.Open(t, c, "mix")
	nstest.WaitRevision(t, ns, last, waitLimit)
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := srv.RestoreTo(backup); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		sdksuite.Publish(t, srv, "mix", map[string]any{"new": i})
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	want, err := srv.Snapshot("mix")
	if err != nil {
		t.Fatal(err)
	}
	nstest.WaitRevision(t, ns, want.Revision, waitLimit)
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := ns.WaitForState(ctx, config.StateFresh); err != nil {
		t.Fatal(err)
	}
	// Backstops have confirmed it by now.
	testutil.Eventually(t, waitLimit, func() bool { return srv.Stats().NotModified >= 2 }, "two backstops")
	if _, ok := ns.Get("old-only"); ok {
		t.Errorf("serves %v at revision %d, Fresh: keys of the old history the server no longer has (it holds %s)", ns.Snapshot().Keys(), ns.Revision(), want.Values)
	}
}
