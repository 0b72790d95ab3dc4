package etcd_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/holdfast-dev/holdfast/transport"
	"github.com/holdfast-dev/holdfast/transport/etcd"
)

// TestPublishGuard: a publish guarded by a key's revision commits while
// the key is there unchanged (or absent, guarded at 0), and once the key
// moved it writes nothing and says ErrGuardChanged.
func TestPublishGuard(t *testing.T) {
	cl := sharedCluster(t)
	src := newSource(t, cl.endpoints())
	ctx := auditCtx(t)
	cli := cl.client(t)
	const key = "/holdfast-schema/guarded"
	puts := func(v string) map[string]json.RawMessage { return map[string]json.RawMessage{"v": json.RawMessage(v)} }
	if _, err := src.Publish(ctx, "guarded", puts("1"), nil, etcd.WithGuard(key, 0)); err != nil {
		t.Fatalf("guarded by an absent key: %v", err)
	}
	put, err := cli.Put(ctx, key, "{}")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := src.Publish(ctx, "guarded", puts("2"), nil, etcd.WithGuard(key, 0)); !errors.Is(err, etcd.ErrGuardChanged) {
		t.Fatalf("guarded by a key since written: %v, want ErrGuardChanged", err)
	}
	snap, err := src.Snapshot(ctx, transport.SnapshotRequest{Namespace: "guarded"})
	if err != nil || string(snap.Values) != `{"v":1}` {
		t.Fatalf("after the refused publish: %+v, %v; want v=1", snap, err)
	}
	if _, err := src.Publish(ctx, "guarded", puts("3"), nil, etcd.WithGuard(key, put.Header.Revision)); err != nil {
		t.Fatalf("guarded by the key's revision: %v", err)
	}
}
