package config_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/internal/cachedir"
	"github.com/holdfast-dev/holdfast/internal/sdksuite"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/internal/wire"
	"github.com/holdfast-dev/holdfast/transport"
)

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
	obj, err := wire.EncodeValues(rawValues(kv))
	if err != nil {
		panic(err)
	}
	return obj
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

// TestFreshNeedsARecentConfirmation (hole 2): a watch that stays open but
// delivers no event (an intermediary's keepalives with the upstream dead)
// must not keep the namespace Fresh: Fresh needs a confirmation within the
// idle timeout. Before: Fresh until the 10-minute backstop.
func TestFreshNeedsARecentConfirmation(t *testing.T) {
	src := &sdksuite.FuncSource{
		SnapshotFunc: func(_ context.Context, req transport.SnapshotRequest) (*transport.Snapshot, error) {
			return &transport.Snapshot{Namespace: req.Namespace, StoreID: "s1", Revision: 2, Cursor: 2, Values: rawObject(map[string]string{"k": "v"})}, nil
		},
		// One progress, then silence on a stream that never ends.
		WatchFunc: func(ctx context.Context, req transport.WatchRequest, handle func(transport.Event) error) error {
			if err := handle(transport.Event{Progress: &transport.Progress{Namespace: req.Namespace, StoreID: "s1", Revision: 2, Cursor: 2}}); err != nil {
				return err
			}
			<-ctx.Done()
			return ctx.Err()
		},
	}
	const idle = 200 * time.Millisecond
	c := sdksuite.NewClient(t, sdksuite.Source(src), config.WithStreamIdleTimeout(idle))
	ns := sdksuite.Open(t, c, "quiet")
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

// TestQuietLimitIsNotAskedUnderTheNamespaceLock: the client must not call
// the source's QuietLimit while it handles an event of that source, nor
// while it holds the namespace's lock, which that event handling takes:
// a source that holds its own lock across handle and takes it in
// QuietLimit deadlocks the namespace (and Close).
func TestQuietLimitIsNotAskedUnderTheNamespaceLock(t *testing.T) {
	src := &lockingSource{lock: make(chan struct{}, 1)}
	c := sdksuite.NewClient(t, sdksuite.Source(src))
	ns := sdksuite.Open(t, c, "locking")
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
			src := &sdksuite.FuncSource{SnapshotFunc: tt.snapshot, WatchFunc: tt.watch}
			c, err := config.New(config.WithSource(src), config.WithLogger(sdksuite.Logger(t)),
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
			before := src.Snapshots()
			start := time.Now()
			time.Sleep(window) // the loop runs for the window: the time passing is what is measured
			if got := src.Snapshots() - before; got > most {
				t.Errorf("%d snapshot requests in %v; want at most %d (the backoff paces them)", got, time.Since(start).Round(time.Millisecond), most)
			}
		})
	}
}

// TestSourceAnsweringNothingIsAnError: a source that breaks its contract
// (no snapshot and no error, or a 304 without the snapshot it must carry)
// is an error to retry, not a nil dereference that ends the process.
func TestSourceAnsweringNothingIsAnError(t *testing.T) {
	dir := t.TempDir()
	sdksuite.WriteCacheFile(t, dir, "nil", "s1", 3, map[string]string{"k": "v"}, time.Now())
	for _, err := range []error{nil, transport.ErrNotModified} {
		src := &sdksuite.FuncSource{SnapshotFunc: func(context.Context, transport.SnapshotRequest) (*transport.Snapshot, error) { return nil, err }}
		c := sdksuite.NewClient(t, sdksuite.Source(src), config.WithCacheDir(dir))
		ns := sdksuite.Open(t, c, "nil")
		testutil.Eventually(t, waitLimit, func() bool { return errors.Is(ns.Status().LastError.Err, transport.ErrMalformed) }, "the error in Status")
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
