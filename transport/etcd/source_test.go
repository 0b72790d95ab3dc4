package etcd_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/transport"
	"github.com/holdfast-dev/holdfast/transport/etcd"
)

func TestNewValidatesOptions(t *testing.T) {
	tests := []struct {
		name string
		opts []etcd.Option
	}{
		{"no endpoint", nil},
		{"empty endpoint", []etcd.Option{etcd.WithEndpoints("")}},
		{"nil logger", []etcd.Option{etcd.WithEndpoints("http://127.0.0.1:1"), etcd.WithLogger(nil)}},
		{"heartbeat over idle", []etcd.Option{etcd.WithEndpoints("http://127.0.0.1:1"), etcd.WithHeartbeat(time.Minute)}},
		{"bad timeout", []etcd.Option{etcd.WithEndpoints("http://127.0.0.1:1"), etcd.WithRequestTimeout(0)}},
		{"bad size", []etcd.Option{etcd.WithEndpoints("http://127.0.0.1:1"), etcd.WithMaxValueBytes(0)}},
		{"password alone", []etcd.Option{etcd.WithEndpoints("http://127.0.0.1:1"), etcd.WithAuth("", "pw")}},
	}
	for _, tt := range tests {
		if s, err := etcd.New(tt.opts...); err == nil {
			_ = s.Close()
			t.Errorf("%s: New succeeded", tt.name)
		}
	}
}

func TestSnapshotRevisionCursorAndNotModified(t *testing.T) {
	cl := sharedCluster(t)
	src := newSource(t, cl.endpoints())
	ctx := context.Background()
	rev := publish(t, src, "snap", map[string]any{"a": 1, "b": 2})
	snap, err := src.Snapshot(ctx, transport.SnapshotRequest{Namespace: "snap"})
	if err != nil {
		t.Fatal(err)
	}
	if snap.Revision != rev || snap.Cursor < rev || string(snap.Values) != `{"a":1,"b":2}` || snap.StoreID == "" || !snap.Linearizable {
		t.Fatalf("snapshot = %+v; want revision %d, Linearizable", snap, rev)
	}
	// The store id is the etcd cluster id.
	if resp, err := cl.client(t).Get(ctx, "x"); err != nil || snap.StoreID != etcd.StoreID(resp.Header.ClusterId) {
		t.Fatalf("store id %s; want the cluster id (%v)", snap.StoreID, err)
	}
	// Other namespaces move the cursor, not the revision.
	other := publish(t, src, "snap.other", map[string]any{"x": 1})
	req := transport.SnapshotRequest{Namespace: "snap", KnownStoreID: snap.StoreID, KnownRevision: rev}
	nm, err := src.Snapshot(ctx, req)
	if !errors.Is(err, transport.ErrNotModified) || nm.Values != nil || nm.Cursor < other || nm.Revision != rev || !nm.Linearizable {
		t.Fatalf("conditional snapshot = %+v, %v; want ErrNotModified at cursor >= %d", nm, err, other)
	}
	// A delete-only publish is a change: the namespace's revision moves
	// although no remaining key carries it.
	rev = publish(t, src, "snap", nil, "b")
	full, err := src.Snapshot(ctx, req)
	if err != nil || full.Revision != rev || string(full.Values) != `{"a":1}` {
		t.Fatalf("after a delete: %+v, %v; want revision %d and one value", full, err, rev)
	}
	if _, err := src.Snapshot(ctx, transport.SnapshotRequest{Namespace: "../etc"}); !errors.Is(err, transport.ErrInvalidNamespace) {
		t.Errorf("invalid namespace: %v", err)
	}
}

// TestWatchChainsChangeSets watches directly: one ChangeSet per publish
// with its puts and deletes, PrevRevision chaining on the previous one,
// and progress carrying the namespace's revision.
func TestWatchChainsChangeSets(t *testing.T) {
	t.Run("read", func(t *testing.T) { testWatchChains(t) })
	t.Run("progress-requests", func(t *testing.T) { testWatchChains(t, etcd.WithProgressRequests(true)) })
}

func testWatchChains(t *testing.T, opts ...etcd.Option) {
	cl := sharedCluster(t)
	src := newSource(t, cl.endpoints(), opts...)
	start := publish(t, src, "chain", map[string]any{"a": 0, "b": 0})
	// Concurrent publishers race on the guard and retry: still one chain.
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 10 {
				key := string(rune('a' + w))
				if _, err := write(context.Background(), src, "chain", map[string]json.RawMessage{key: json.RawMessage(`1`), "w": json.RawMessage(`"x"`)}, nil); err != nil {
					t.Error(i, err)
				}
			}
		}()
	}
	wg.Wait()
	last := publish(t, src, "chain", nil, "b")

	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	var changes []*transport.ChangeSet
	var progress *transport.Progress
	err := src.Watch(ctx, transport.WatchRequest{Namespace: "chain", Since: start}, func(ev transport.Event) error {
		if ev.Change != nil {
			changes = append(changes, ev.Change)
		}
		if ev.Progress != nil && len(changes) > 0 && changes[len(changes)-1].Revision == last {
			progress = ev.Progress
			return errDone
		}
		return nil
	})
	if !errors.Is(err, errDone) {
		t.Fatalf("Watch = %v", err)
	}
	if len(changes) != 21 {
		t.Fatalf("%d change sets; want 21", len(changes))
	}
	prev := start
	for _, cs := range changes {
		if cs.PrevRevision != prev || cs.Revision <= prev || cs.CommittedAt.IsZero() || cs.StoreID == "" {
			t.Errorf("change %+v does not chain on %d", cs, prev)
		}
		prev = cs.Revision
	}
	if lc := changes[len(changes)-1]; len(lc.Deletes) != 1 || lc.Deletes[0] != "b" || len(lc.Puts) != 0 {
		t.Errorf("delete-only change = %+v", lc)
	}
	if progress.Revision != last || progress.Cursor < last {
		t.Errorf("progress = %+v; want revision %d", progress, last)
	}
}

var errDone = errors.New("done")

// TestSnapshotRefusesValueOverLimit: a value over the source's limit,
// written past any check of it, makes snapshots fail with ErrTooLarge.
func TestSnapshotRefusesValueOverLimit(t *testing.T) {
	cl := sharedCluster(t)
	src := newSource(t, cl.endpoints(), etcd.WithMaxValueBytes(64))
	ctx := context.Background()
	publish(t, src, "limits", map[string]any{"limit": 10})
	big := `"` + strings.Repeat("x", 100) + `"`
	if _, err := cl.client(t).Put(ctx, etcd.Prefix("limits")+"big", big); err != nil {
		t.Fatal(err)
	}
	if _, err := src.Snapshot(ctx, transport.SnapshotRequest{Namespace: "limits"}); !errors.Is(err, transport.ErrTooLarge) {
		t.Errorf("snapshot with a value over the limit: %v", err)
	}
}

// TestCloseStopsWatchesAndKeepsOwnedClient: Close ends watches in flight,
// is idempotent, refuses later calls, and leaves a WithClient client open.
func TestCloseStopsWatchesAndKeepsOwnedClient(t *testing.T) {
	cl := sharedCluster(t)
	cli := cl.client(t)
	src, err := etcd.New(etcd.WithClient(cli), etcd.WithHeartbeat(testHeartbeat), etcd.WithIdleTimeout(testIdle))
	if err != nil {
		t.Fatal(err)
	}
	rev := publish(t, src, "closing", map[string]any{"v": 1})
	watching := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		var once sync.Once
		done <- src.Watch(context.Background(), transport.WatchRequest{Namespace: "closing", Since: rev}, func(transport.Event) error {
			once.Do(func() { close(watching) })
			return nil
		})
	}()
	select {
	case <-watching:
	case <-time.After(waitLimit):
		t.Fatal("no progress")
	}
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() { defer wg.Done(); _ = src.Close() }()
	}
	wg.Wait()
	if err := <-done; err == nil {
		t.Error("Watch returned nil")
	}
	if _, err := src.Snapshot(context.Background(), transport.SnapshotRequest{Namespace: "closing"}); !errors.Is(err, etcd.ErrClosed) {
		t.Errorf("Snapshot after Close = %v", err)
	}
	if _, err := cli.Get(context.Background(), "x"); err != nil {
		t.Errorf("the caller's client was closed: %v", err)
	}
	if err := src.Close(); err != nil {
		t.Error(err)
	}
}
