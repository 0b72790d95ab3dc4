package config_test

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/internal/sdksuite"
	"github.com/holdfast-dev/holdfast/transport"
)

// TestStopWaitsForARunningCallbackFromAnotherGoroutine (hole 3): stop
// called from another goroutine while the callback runs must wait for it.
// Before: the "called from the callback itself" check held on any
// goroutine, and stop returned at once.
func TestStopWaitsForARunningCallbackFromAnotherGoroutine(t *testing.T) {
	srv := sdksuite.StartReference(t)
	sdksuite.Publish(t, srv, "cb", map[string]any{"k": 1})
	c := sdksuite.NewClient(t, sdksuite.Endpoint(srv.URL()))
	ns := sdksuite.Open(t, c, "cb")
	entered, release := make(chan struct{}), make(chan struct{})
	var returned atomic.Bool
	stop := ns.OnChange("k", func(config.Change) {
		close(entered)
		<-release
		if returned.Load() {
			t.Error("stop returned while the callback ran")
		}
	})
	sdksuite.Publish(t, srv, "cb", map[string]any{"k": 2})
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
	srv := sdksuite.StartReference(t)
	sdksuite.Publish(t, srv, "cb", map[string]any{"k": 1})
	c := sdksuite.NewClient(t, sdksuite.Endpoint(srv.URL()))
	ns := sdksuite.Open(t, c, "cb")
	done := make(chan struct{})
	var stop func()
	var once sync.Once
	stop = ns.OnChange("k", func(config.Change) {
		once.Do(func() { stop(); close(done) })
	})
	sdksuite.Publish(t, srv, "cb", map[string]any{"k": 2})
	select {
	case <-done:
	case <-time.After(waitLimit):
		t.Fatal("stop from its own callback deadlocked")
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
		sdksuite.WriteCacheFile(t, dir, "fc", "s1", 4, map[string]string{"k": "file"}, time.Now().Add(-time.Hour))
		next := make(chan struct{})
		src := &sdksuite.FuncSource{
			SnapshotFunc: func(_ context.Context, req transport.SnapshotRequest) (*transport.Snapshot, error) {
				return &transport.Snapshot{Namespace: req.Namespace, StoreID: "s1", Revision: 5, Cursor: 5, Values: rawObject(map[string]string{"k": "net5"})}, nil
			},
			WatchFunc: func(ctx context.Context, req transport.WatchRequest, handle func(transport.Event) error) error {
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
		c := sdksuite.NewClient(t, sdksuite.Source(src), config.WithCacheDir(dir))
		ns := sdksuite.Open(t, c, "fc", config.FailClosed(), config.MaxStaleness(time.Minute), config.Defaults(map[string]any{"k": "default"}))
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
