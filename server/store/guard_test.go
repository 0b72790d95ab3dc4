package store_test

import (
	"encoding/json"
	"errors"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/holdfast-dev/holdfast/server/store"
	"github.com/holdfast-dev/holdfast/transport"
	"github.com/holdfast-dev/holdfast/transport/etcd"
)

// TestPublishGuard: a publish guarded by a key's revision commits while
// the key is there unchanged (or absent, guarded at 0), and once the key
// moved it writes nothing and says ErrGuardChanged.
func TestPublishGuard(t *testing.T) {
	cl := sharedCluster(t)
	src := newWriter(t, cl.endpoints())
	ctx := auditCtx(t)
	cli := cl.client(t)
	const key = "/holdfast-schema/guarded"
	puts := func(v string) map[string]json.RawMessage { return map[string]json.RawMessage{"v": json.RawMessage(v)} }
	if _, err := src.Publish(ctx, "guarded", puts("1"), nil, store.WithGuard(key, 0)); err != nil {
		t.Fatalf("guarded by an absent key: %v", err)
	}
	put, err := cli.Put(ctx, key, "{}")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := src.Publish(ctx, "guarded", puts("2"), nil, store.WithGuard(key, 0)); !errors.Is(err, store.ErrGuardChanged) {
		t.Fatalf("guarded by a key since written: %v, want ErrGuardChanged", err)
	}
	snap, err := src.Snapshot(ctx, transport.SnapshotRequest{Namespace: "guarded"})
	if err != nil || string(snap.Values) != `{"v":1}` {
		t.Fatalf("after the refused publish: %+v, %v; want v=1", snap, err)
	}
	if _, err := src.Publish(ctx, "guarded", puts("3"), nil, store.WithGuard(key, put.Header.Revision)); err != nil {
		t.Fatalf("guarded by the key's revision: %v", err)
	}
}

// TestPublishConditionAndOps: a publish WithCondition commits its WithOps
// with the change while the condition holds, and writes nothing (change,
// ops, audit) once it does not; WithKind is recorded in the history.
func TestPublishConditionAndOps(t *testing.T) {
	cl := sharedCluster(t)
	src := newWriter(t, cl.endpoints())
	ctx := auditCtx(t)
	cli := cl.client(t)
	const state = "/holdfast-rollouts/test/current/cond"
	puts := func(v string) map[string]json.RawMessage { return map[string]json.RawMessage{"v": json.RawMessage(v)} }
	absent := clientv3.Compare(clientv3.ModRevision(state), "=", 0)
	rev, err := src.Publish(ctx, "cond", puts("1"), nil, store.WithCondition(absent), store.WithOps(clientv3.OpPut(state, "s1")),
		store.WithKind(store.KindRolloutStage))
	if err != nil {
		t.Fatal(err)
	}
	got, err := cli.Get(ctx, state)
	if err != nil || len(got.Kvs) != 1 || got.Kvs[0].ModRevision != rev {
		t.Fatalf("the op did not commit with the change: %+v, %v", got, err)
	}
	if _, err := src.Publish(ctx, "cond", puts("2"), nil, store.WithCondition(absent), store.WithOps(clientv3.OpPut(state, "s2"))); !errors.Is(err, store.ErrConditionFailed) {
		t.Fatalf("condition that does not hold: %v", err)
	}
	snap, err := src.Snapshot(ctx, transport.SnapshotRequest{Namespace: "cond"})
	if err != nil || string(snap.Values) != `{"v":1}` || snap.Revision != rev {
		t.Fatalf("after the refused publish: %+v, %v", snap, err)
	}
	h, err := src.History(ctx, "cond", store.HistoryOptions{})
	if err != nil || len(h.Revisions) != 1 || h.Revisions[0].Kind != store.KindRolloutStage {
		t.Fatalf("history %+v, %v", h, err)
	}
	for _, bad := range []store.PublishOption{store.WithKind("nonsense"), store.WithOps(clientv3.OpPut(etcd.Prefix("cond")+"x", "1"))} {
		if _, err := src.Publish(ctx, "cond", puts("3"), nil, bad); !errors.Is(err, store.ErrInvalidArgument) {
			t.Fatalf("bad option: %v", err)
		}
	}
}
