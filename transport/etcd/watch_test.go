package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/holdfast-dev/holdfast/internal/sdksuite"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/transport"
	"github.com/holdfast-dev/holdfast/transport/etcd"
)

// gate modes of a gatedWatcher.
const (
	gatePass = iota // every watch response passes
	gateHold        // nothing passes; responses queue, in order, until pass
	gateDrop        // responses with events are dropped: a skipped change
)

// gatedWatcher stands between a Source and the etcd client's watcher, so a
// test can make a watch lag behind the store (hold) or skip a change
// (drop) while the Source's reads go on.
type gatedWatcher struct {
	clientv3.Watcher

	mu   sync.Mutex
	mode int
	wake chan struct{} // closed at every change of mode
}

func newGatedWatcher(w clientv3.Watcher) *gatedWatcher {
	return &gatedWatcher{Watcher: w, wake: make(chan struct{})}
}

func (g *gatedWatcher) set(mode int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.mode = mode
	close(g.wake)
	g.wake = make(chan struct{})
}

func (g *gatedWatcher) state() (int, chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.mode, g.wake
}

func (g *gatedWatcher) Watch(ctx context.Context, key string, opts ...clientv3.OpOption) clientv3.WatchChan {
	in := g.Watcher.Watch(ctx, key, opts...)
	out := make(chan clientv3.WatchResponse)
	go func() {
		defer close(out)
		var queue []clientv3.WatchResponse
		for {
			mode, wake := g.state()
			var send chan clientv3.WatchResponse
			var next clientv3.WatchResponse
			if len(queue) > 0 && mode != gateHold {
				send, next = out, queue[0]
			}
			select {
			case resp, ok := <-in:
				if !ok {
					return
				}
				if mode == gateDrop && len(resp.Events) > 0 {
					continue
				}
				queue = append(queue, resp)
			case send <- next:
				queue = queue[1:]
			case <-wake:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

// countingKV counts the Source's reads.
type countingKV struct {
	clientv3.KV
	gets atomic.Int64
}

func (k *countingKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	k.gets.Add(1)
	return k.KV.Get(ctx, key, opts...)
}

// gatedSource returns a Source whose watches pass through a gatedWatcher
// and whose reads are counted.
func gatedSource(t *testing.T, cl *cluster, opts ...etcd.Option) (*etcd.Source, *gatedWatcher, *countingKV) {
	t.Helper()
	cli := cl.client(t)
	gw, kv := newGatedWatcher(cli.Watcher), &countingKV{KV: cli.KV}
	cli.Watcher, cli.KV = gw, kv
	base := []etcd.Option{
		etcd.WithClient(cli),
		etcd.WithHeartbeat(testHeartbeat),
		etcd.WithIdleTimeout(testIdle),
		etcd.WithRequestTimeout(testRequest),
		etcd.WithLogger(sdksuite.Logger(t)),
	}
	src, err := etcd.New(append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = src.Close() })
	return src, gw, kv
}

// stamped is a watch event and when the handler got it.
type stamped struct {
	transport.Event
	at time.Time
}

// watchInto runs src.Watch in a goroutine, sending its events to the
// returned channel and its result to the other; the watch ends with the
// test.
func watchInto(t *testing.T, src *etcd.Source, req transport.WatchRequest) (<-chan stamped, <-chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	events, done, exited := make(chan stamped, 1000), make(chan error, 1), make(chan struct{})
	go func() {
		defer close(exited)
		done <- src.Watch(ctx, req, func(ev transport.Event) error {
			select {
			case events <- stamped{ev, time.Now()}:
			case <-ctx.Done():
			}
			return nil
		})
	}()
	t.Cleanup(func() { cancel(); <-exited })
	return events, done
}

// nextEvent waits for the next event that match accepts, failing the test
// if the watch ends first or at the deadline.
func nextEvent(t *testing.T, events <-chan stamped, done <-chan error, what string, match func(transport.Event) bool) transport.Event {
	t.Helper()
	deadline := time.After(waitLimit)
	for {
		select {
		case ev := <-events:
			if match(ev.Event) {
				return ev.Event
			}
		case err := <-done:
			t.Fatalf("waiting for %s: the watch ended: %v", what, err)
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func describe(ev transport.Event) string {
	switch {
	case ev.Change != nil:
		return fmt.Sprintf("change %d (prev %d)", ev.Change.Revision, ev.Change.PrevRevision)
	case ev.Progress != nil:
		return fmt.Sprintf("progress: namespace revision %d, cursor %d", ev.Progress.Revision, ev.Progress.Cursor)
	}
	return "empty event"
}

// TestWatchWaitsForALateChange: a watch that lags behind the store (as
// after a dropped connection, while the etcd client resumes it under load)
// neither confirms past what it delivered nor reports the change it has
// not delivered yet as the namespace's revision (which sends the client to
// a needless snapshot): it waits, and the change arrives and chains.
func TestWatchWaitsForALateChange(t *testing.T) {
	cl := sharedCluster(t)
	pub := newSource(t, cl.endpoints())
	src, gw, kv := gatedSource(t, cl)
	r0 := publish(t, pub, "late", map[string]any{"v": 0})
	events, done := watchInto(t, src, transport.WatchRequest{Namespace: "late", Since: r0})
	nextEvent(t, events, done, "a first confirmation", func(ev transport.Event) bool { return ev.Progress != nil })

	gw.set(gateHold)
	r1 := publish(t, pub, "late", map[string]any{"v": 1})
	// Heartbeat reads now find r1 in the store, not in the watch: let
	// several go by (the watch used to give up after two).
	reads := kv.gets.Load()
	testutil.Eventually(t, waitLimit, func() bool { return kv.gets.Load() >= reads+5 }, "five heartbeat reads while the watch lags")
	gw.set(gatePass)

	last := r0
	for {
		ev := nextEvent(t, events, done, "the late change and a confirmation of it", func(transport.Event) bool { return true })
		switch {
		case ev.Change != nil:
			if ev.Change.Revision != r1 || ev.Change.PrevRevision != r0 {
				t.Fatalf("got %s; want change %d after %d", describe(ev), r1, r0)
			}
			last = r1
		case ev.Progress.Revision != last:
			t.Fatalf("got %s while the watch had delivered %d: a confirmation of a change it did not deliver", describe(ev), last)
		case ev.Progress.Cursor < last:
			t.Fatalf("got %s after change %d", describe(ev), last)
		}
		if last == r1 && ev.Progress != nil {
			break
		}
	}
	select {
	case err := <-done:
		t.Fatalf("the watch ended: %v", err)
	default:
	}
}

// TestWatchEndsWhenAChangeIsNeverDelivered: when the store has a change
// that the watch never delivers (the etcd client resumed a broken watch past
// it, see WithProgressRequests), the watch confirms nothing past what it
// delivered and ends with transport.ErrStreamIdle after the idle timeout;
// a new watch from the cursor delivers the change.
func TestWatchEndsWhenAChangeIsNeverDelivered(t *testing.T) {
	cl := sharedCluster(t)
	pub := newSource(t, cl.endpoints())
	const idle = time.Second
	src, gw, _ := gatedSource(t, cl, etcd.WithIdleTimeout(idle))
	r0 := publish(t, pub, "skipped", map[string]any{"v": 0})
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()

	var cursor int64 = r0
	var published time.Time
	var r1 int64
	err := src.Watch(ctx, transport.WatchRequest{Namespace: "skipped", Since: r0}, func(ev transport.Event) error {
		switch {
		case ev.Change != nil:
			return fmt.Errorf("got %s; the gate drops every change", describe(ev))
		case ev.Progress.Revision != r0:
			return fmt.Errorf("got %s: a confirmation of change %d, which the watch never delivered", describe(ev), ev.Progress.Revision)
		}
		cursor = ev.Progress.Cursor
		if r1 == 0 {
			gw.set(gateDrop)
			r1 = publish(t, pub, "skipped", map[string]any{"v": 1})
			published = time.Now()
		}
		return nil
	})
	if !errors.Is(err, transport.ErrStreamIdle) {
		t.Fatalf("Watch = %v; want ErrStreamIdle", err)
	}
	if waited := time.Since(published); waited < idle {
		t.Errorf("the watch ended %v after the publish; want at least the idle timeout %v", waited, idle)
	}
	if cursor >= r1 {
		t.Fatalf("cursor %d confirmed past the undelivered change %d", cursor, r1)
	}

	gw.set(gatePass)
	err = src.Watch(ctx, transport.WatchRequest{Namespace: "skipped", Since: cursor}, func(ev transport.Event) error {
		if ev.Change != nil {
			if ev.Change.Revision != r1 || ev.Change.PrevRevision != r0 {
				return fmt.Errorf("got %s; want change %d after %d", describe(ev), r1, r0)
			}
			return errDone
		}
		return nil
	})
	if !errors.Is(err, errDone) {
		t.Fatalf("the watch from cursor %d: %v; want change %d", cursor, err, r1)
	}
}

// TestWatchCursorAheadAfterRestore restores the cluster from a copy of its
// data directories (same cluster id, lower revisions) under running
// watches: a watch never confirms past the store's head, it ends with
// transport.ErrCursorAhead, and so does a new watch from the old cursor.
// The snapshot after the restore is marked Linearizable, and is behind.
func TestWatchCursorAheadAfterRestore(t *testing.T) {
	cl := startCluster(t)
	pub := newSource(t, cl.endpoints())
	r0 := publish(t, pub, "restored", map[string]any{"v": 0})
	backup := cl.backup(t)
	var last int64
	for i := 1; i <= 3; i++ {
		last = publish(t, pub, "restored", map[string]any{"v": i})
	}
	before, err := pub.Snapshot(context.Background(), transport.SnapshotRequest{Namespace: "restored"})
	if err != nil {
		t.Fatal(err)
	}

	type watch struct {
		name   string
		src    *etcd.Source
		events <-chan stamped
		done   <-chan error
	}
	var watches []watch
	for _, mode := range []struct {
		name string
		opts []etcd.Option
	}{
		{"read", nil},
		{"progress-requests", []etcd.Option{etcd.WithProgressRequests(true)}},
	} {
		// An idle timeout longer than the restore: the watch lives through
		// it, so it is the running watch that must notice.
		src := newSource(t, cl.endpoints(), append(mode.opts, etcd.WithIdleTimeout(time.Minute))...)
		events, done := watchInto(t, src, transport.WatchRequest{Namespace: "restored", Since: last})
		nextEvent(t, events, done, mode.name+": a confirmation", func(ev transport.Event) bool { return ev.Progress != nil })
		watches = append(watches, watch{mode.name, src, events, done})
	}

	cl.killAll()
	cl.putBack(t, backup)
	restarted := time.Now()
	cl.restartAll(t)

	for _, w := range watches {
		deadline := time.After(waitLimit)
	wait:
		for {
			select {
			case ev := <-w.events:
				if ev.Progress != nil && ev.at.After(restarted) {
					t.Fatalf("%s: %s after the restore: a confirmation past the restored store's head", w.name, describe(ev.Event))
				}
			case err := <-w.done:
				if !errors.Is(err, transport.ErrCursorAhead) {
					t.Errorf("%s: Watch = %v; want ErrCursorAhead", w.name, err)
				}
				t.Logf("%s: the watch ended %v after the restart: %v", w.name, time.Since(restarted).Round(time.Millisecond), err)
				break wait
			case <-deadline:
				t.Fatalf("%s: the watch did not end after the restore", w.name)
			}
		}
	}

	// A new watch from the old cursor is refused the same way.
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	err = watches[0].src.Watch(ctx, transport.WatchRequest{Namespace: "restored", Since: last}, func(ev transport.Event) error {
		return fmt.Errorf("got %s from a watch ahead of the store", describe(ev))
	})
	if !errors.Is(err, transport.ErrCursorAhead) {
		t.Errorf("a new watch from the old cursor %d = %v; want ErrCursorAhead", last, err)
	}

	snap, err := watches[0].src.Snapshot(ctx, transport.SnapshotRequest{Namespace: "restored"})
	if err != nil {
		t.Fatal(err)
	}
	if !snap.Linearizable || snap.StoreID != before.StoreID || snap.Revision != r0 || snap.Cursor >= last || string(snap.Values) != `{"v":0}` {
		t.Errorf("snapshot after the restore = %+v; want Linearizable, store %s, revision %d, cursor below %d, v=0", snap, before.StoreID, r0, last)
	}
}
