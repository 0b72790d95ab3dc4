package config_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/transport"
)

var runKnownHoles = flag.Bool("holes", false, "run the tests of known holes of the design, which fail")

// values is kv, each value's JSON text as given, as a snapshot's values on
// the wire.
func values(t *testing.T, kv map[string]string) json.RawMessage {
	t.Helper()
	raw := make(map[string]json.RawMessage, len(kv))
	for k, v := range kv {
		raw[k] = json.RawMessage(v)
	}
	obj, err := transport.EncodeValues(raw)
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
	writeCacheFile(t, dir, "rr", 5, map[string]string{"k": "r5"}, time.Now())
	var snaps atomic.Int64
	src := &funcSource{
		snapshot: func(_ context.Context, req transport.SnapshotRequest) (*transport.Snapshot, error) {
			if snaps.Add(1) == 1 { // the restored store's first answer: fails the schema
				return &transport.Snapshot{Namespace: req.Namespace, StoreID: "s1", Revision: 2, Cursor: 2, Linearizable: true,
					Values: values(t, map[string]string{"k": `2`})}, nil
			}
			return &transport.Snapshot{Namespace: req.Namespace, StoreID: "s1", Revision: 3, Cursor: 3, Linearizable: true,
				Values: values(t, map[string]string{"k": `"r3"`})}, nil
		},
	}
	var watches atomic.Int64
	src.watch = func(ctx context.Context, req transport.WatchRequest, handle func(transport.Event) error) error {
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
	c := sourceClient(t, src, config.WithCacheDir(dir), config.WithHistoryRewriteGrace(time.Hour))
	ns := open(t, c, "rr", config.WithSchema([]byte(`{"type":"object","properties":{"k":{"type":"string"}}}`)))
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

// TestCloseDoesNotRewriteAnUnconfirmedFile: a namespace that served its
// file and never reached the network has nothing new to persist at Close.
// Writing the file back would put this process's old store over what
// another process sharing the directory wrote since, of a new store (a
// new store id always replaces).
func TestCloseDoesNotRewriteAnUnconfirmedFile(t *testing.T) {
	dir := t.TempDir()
	writeCacheFile(t, dir, "uc", 4, map[string]string{"k": "old store"}, time.Now().Add(-time.Minute))
	down := &funcSource{snapshot: func(context.Context, transport.SnapshotRequest) (*transport.Snapshot, error) {
		return nil, errors.New("connection refused")
	}}
	c := sourceClient(t, down, config.WithCacheDir(dir))
	ns := open(t, c, "uc")
	if ns.String("k", "") != "old store" {
		t.Fatalf("serves %q; want the file", ns.String("k", ""))
	}
	// Another process, in touch with the server, writes the new store's data.
	writeStoreFile(t, dir, "uc", "s2", 1, map[string]string{"k": "new store"}, time.Now())
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

// TestQuietLimitIsNotAskedUnderTheNamespaceLock: the client must not call
// the source's QuietLimit while it handles an event of that source, nor
// while it holds the namespace's lock, which that event handling takes:
// a source that holds its own lock across handle and takes it in
// QuietLimit deadlocks the namespace (and Close).
func TestQuietLimitIsNotAskedUnderTheNamespaceLock(t *testing.T) {
	src := &lockingSource{lock: make(chan struct{}, 1)}
	c := sourceClient(t, src)
	ns := open(t, c, "locking")
	mark := time.Now()
	confirmed := testutil.Wait(5*time.Second, func() bool {
		return ns.Status().LastConfirmed.After(mark.Add(100*time.Millisecond)) || src.deadlock.Load()
	})
	if src.deadlock.Load() {
		t.Fatal("QuietLimit waited 2s for the source's lock, held by the goroutine delivering an event: a deadlock")
	}
	if !confirmed {
		t.Fatalf("no confirmation for 5s: %+v", ns.Status())
	}
}

// TestNoCallbackForWhatHappenedBeforeSubscribing: a fail-closed namespace
// whose file is too old serves its Defaults, unopened, until the network's
// data comes; that data is the first the application sees. A callback
// subscribed right after Client.Namespace returns must not be told of the
// switch from Defaults to that data (nor of the state changes of the
// open), which happened before it subscribed. Each round subscribes, then
// makes one change: the only call must be that change's.
func TestNoCallbackForWhatHappenedBeforeSubscribing(t *testing.T) {
	const rounds = 30
	var early, earlyStatus int
	for i := range rounds {
		dir := t.TempDir()
		writeCacheFile(t, dir, "fc", 4, map[string]string{"k": "file"}, time.Now().Add(-time.Hour))
		next := make(chan struct{})
		src := &funcSource{
			snapshot: func(_ context.Context, req transport.SnapshotRequest) (*transport.Snapshot, error) {
				return &transport.Snapshot{Namespace: req.Namespace, StoreID: "s1", Revision: 5, Cursor: 5, Values: rawObject(map[string]string{"k": "net5"})}, nil
			},
			watch: func(ctx context.Context, req transport.WatchRequest, handle func(transport.Event) error) error {
				select {
				case <-next:
				case <-ctx.Done():
					return ctx.Err()
				}
				cs := transport.ChangeSet{Namespace: req.Namespace, StoreID: "s1", Revision: 6, PrevRevision: 5,
					Puts: map[string]json.RawMessage{"k": json.RawMessage(`"net6"`)}}
				if err := handle(transport.Event{Change: &cs}); err != nil {
					return err
				}
				<-ctx.Done()
				return ctx.Err()
			},
		}
		c := sourceClient(t, src, config.WithCacheDir(dir))
		ns := open(t, c, "fc", config.FailClosed(), config.MaxStaleness(time.Minute), config.Defaults(map[string]any{"k": "default"}))
		calls := make(chan config.Change, 8)
		ns.OnChange("k", func(ch config.Change) { calls <- ch })
		statuses := make(chan config.State, 8)
		ns.OnStatusChange(func(st config.Status) { statuses <- st.State })
		close(next)
		select {
		case ch := <-calls:
			if ch.Revision != 6 {
				early++
				t.Logf("round %d: OnChange of revision %d, %s -> %s, before the namespace was open", i, ch.Revision, ch.Old.Raw(), ch.New.Raw())
			}
		case <-time.After(waitLimit):
			t.Fatal("no OnChange for revision 6")
		}
		select {
		case st := <-statuses:
			earlyStatus++
			t.Logf("round %d: OnStatusChange(%v) for a change of state before subscribing", i, st)
		default:
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if early > 0 || earlyStatus > 0 {
		t.Errorf("in %d rounds: %d OnChange and %d OnStatusChange calls for what happened before the subscription", rounds, early, earlyStatus)
	}
}

// TestResnapshotAtOnceIsNoHotLoop: the at-once resnapshot (a store change,
// a cursor above the head, a gap on a stream that delivered) must not
// make a loop of requests against a server that answers so every time:
// the reconnect backoff still paces it. Each case counts snapshot
// requests over a window, with the backoff fixed at 50 ms (25-75 ms with
// jitter: about 20 a second).
func TestResnapshotAtOnceIsNoHotLoop(t *testing.T) {
	const window = time.Second
	const most = 50 // paced by the backoff; a hot loop makes thousands
	snapshotOf := func(store func() string) func(context.Context, transport.SnapshotRequest) (*transport.Snapshot, error) {
		return func(_ context.Context, req transport.SnapshotRequest) (*transport.Snapshot, error) {
			return &transport.Snapshot{Namespace: req.Namespace, StoreID: store(), Revision: 1, Cursor: 1, Values: rawObject(map[string]string{"k": "v"})}, nil
		}
	}
	same := func() string { return "s1" }
	var n atomic.Int64
	// Two backends behind one balancer, with two store ids: every request
	// may reach either.
	flapping := func() string {
		if n.Add(1)%2 == 0 {
			return "s2"
		}
		return "s1"
	}
	progressThen := func(err error) func(context.Context, transport.WatchRequest, func(transport.Event) error) error {
		return func(_ context.Context, req transport.WatchRequest, handle func(transport.Event) error) error {
			if err := handle(transport.Event{Progress: &transport.Progress{Namespace: req.Namespace, StoreID: "s1", Revision: 1, Cursor: 1}}); err != nil {
				return err
			}
			return err
		}
	}
	for _, tt := range []struct {
		name     string
		snapshot func(context.Context, transport.SnapshotRequest) (*transport.Snapshot, error)
		watch    func(context.Context, transport.WatchRequest, func(transport.Event) error) error
	}{
		{"always 400", snapshotOf(same), func(context.Context, transport.WatchRequest, func(transport.Event) error) error {
			return &transport.StatusError{StatusCode: 400, Message: "bad cursor"}
		}},
		{"always cursor ahead", snapshotOf(same), func(context.Context, transport.WatchRequest, func(transport.Event) error) error {
			return &transport.StatusError{StatusCode: 400, Code: "cursor_ahead", Err: transport.ErrCursorAhead}
		}},
		{"always a new store", snapshotOf(flapping), func(_ context.Context, req transport.WatchRequest, handle func(transport.Event) error) error {
			return handle(transport.Event{Progress: &transport.Progress{Namespace: req.Namespace, StoreID: flapping(), Revision: 1, Cursor: 1}})
		}},
		{"a heartbeat, then a new store", snapshotOf(same), progressThen(transport.ErrStoreChanged)},
		{"a heartbeat, then a gap", snapshotOf(same), func(_ context.Context, req transport.WatchRequest, handle func(transport.Event) error) error {
			if err := handle(transport.Event{Progress: &transport.Progress{Namespace: req.Namespace, StoreID: "s1", Revision: 1, Cursor: 1}}); err != nil {
				return err
			}
			return handle(transport.Event{Progress: &transport.Progress{Namespace: req.Namespace, StoreID: "s1", Revision: 3, Cursor: 3}})
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			src := &funcSource{snapshot: tt.snapshot, watch: tt.watch}
			c, err := config.New(config.WithSource(src), config.WithLogger(testLogger(t)),
				config.WithReconnectBackoff(50*time.Millisecond, 50*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
			defer cancel()
			if _, err := c.Namespace(ctx, "loop"); err != nil {
				t.Fatal(err)
			}
			before := src.snapshots.Load()
			start := time.Now()
			time.Sleep(window) // the loop runs for the window: the time passing is what is measured
			if got := src.snapshots.Load() - before; got > most {
				t.Errorf("%d snapshot requests in %v; want at most %d (the backoff paces them)", got, time.Since(start).Round(time.Millisecond), most)
			}
		})
	}
}

// TestFileFailingTheSchemaKeepsItsFloor: a new build with a stricter
// schema finds its last-good file (r5, applied by the build before)
// failing it. The data is not served, but the file's revision is still
// the floor of its store id: a lagging replica's r2 is older data and is
// refused until the rewrite grace.
func TestFileFailingTheSchemaKeepsItsFloor(t *testing.T) {
	dir := t.TempDir()
	writeCacheFile(t, dir, "strict", 5, map[string]string{"k": "r5"}, time.Now())
	lagging := &funcSource{snapshot: func(_ context.Context, req transport.SnapshotRequest) (*transport.Snapshot, error) {
		return &transport.Snapshot{Namespace: req.Namespace, StoreID: "s1", Revision: 2, Cursor: 2, Values: values(t, map[string]string{"k": `"r2"`, "n": `1`})}, nil
	}}
	c := sourceClient(t, lagging, config.WithCacheDir(dir), config.WithHistoryRewriteGrace(time.Hour))
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	ns, err := c.Namespace(ctx, "strict", config.WithSchema([]byte(`{"type":"object","required":["n"]}`)))
	if err == nil {
		t.Fatalf("opened on the lagging replica's r%d (%q) below the file's r5", ns.Revision(), ns.String("k", ""))
	}
	var oe *config.OpenError
	if !errors.As(err, &oe) || oe.Last == nil || !strings.Contains(oe.Last.Error(), "behind the applied 5") {
		t.Errorf("open error = %v; want the refusal of data behind r5 as the last error", err)
	}
}

// TestSourceAnsweringNothingIsAnError: a source that breaks its contract
// (no snapshot and no error, or a 304 without the snapshot it must carry)
// is an error to retry, not a nil dereference that ends the process.
func TestSourceAnsweringNothingIsAnError(t *testing.T) {
	dir := t.TempDir()
	writeCacheFile(t, dir, "nil", 3, map[string]string{"k": "v"}, time.Now())
	for _, err := range []error{nil, transport.ErrNotModified} {
		src := &funcSource{snapshot: func(context.Context, transport.SnapshotRequest) (*transport.Snapshot, error) { return nil, err }}
		c := sourceClient(t, src, config.WithCacheDir(dir))
		ns := open(t, c, "nil")
		testutil.Eventually(t, waitLimit, func() bool { return errors.Is(ns.Status().LastError.Err, transport.ErrMalformed) }, "the error in Status")
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRewrittenHistoryPastTheCursorIsDetected: a store restored from a
// backup under the same store id, whose new history passes the client's
// cursor before the client reconnects (the client was cut off meanwhile),
// shows none of the evidence the client looks for: no cursor above the
// head, no snapshot behind the floor. The new history's next change
// chains on the old history's revision number, and the client serves a
// mix of both, Fresh; the backstop's conditional snapshot, by store id and
// revision, answers 304. A known hole of the design (see the review
// report): the revisions need a history epoch or a content check.
func TestRewrittenHistoryPastTheCursorIsDetected(t *testing.T) {
	if !*runKnownHoles {
		t.Skip("a known hole of the design; -holes runs it")
	}
	srv := startServer(t)
	publish(t, srv, "mix", map[string]any{"base": 1})
	backup := srv.Head()
	publish(t, srv, "mix", map[string]any{"old-only": 1})
	last := publish(t, srv, "mix", map[string]any{"old-only-too": 1})
	c := newClient(t, srv.URL(), config.WithBackstop(200*time.Millisecond))
	ns := open(t, c, "mix")
	waitRevision(t, ns, last)
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := srv.RestoreTo(backup); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		publish(t, srv, "mix", map[string]any{"new": i})
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	want, err := srv.Snapshot("mix")
	if err != nil {
		t.Fatal(err)
	}
	waitRevision(t, ns, want.Revision)
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
