package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/holdfast-dev/holdfast/server/store"
	"github.com/holdfast-dev/holdfast/transport"
)

// TestPublishMany: several namespaces commit at one revision, each with
// its audit record (its kind and change id), or none of them when one's
// if-revision does not hold, or the shared condition does not.
func TestPublishMany(t *testing.T) {
	cl := sharedCluster(t)
	src := newWriter(t, cl.endpoints())
	ctx := context.Background()
	one := map[string]json.RawMessage{"v": json.RawMessage("1")}
	two := map[string]json.RawMessage{"v": json.RawMessage("2")}
	revs := map[string]int64{}
	for _, ns := range []string{"many.a", "many.b", "many.c"} {
		rev, err := src.Publish(ctx, ns, one, nil)
		if err != nil {
			t.Fatal(err)
		}
		revs[ns] = rev
	}
	write := func(ns string, ifRev int64) store.NamespaceWrite {
		return store.NamespaceWrite{Namespace: ns, Puts: two, Options: []store.PublishOption{
			store.WithIfRevision(ifRev), store.WithKind(store.KindChange), store.WithChange("c1"), store.WithActor("alice")}}
	}
	// One base that moved: nothing written.
	_, err := src.PublishMany(ctx, []store.NamespaceWrite{write("many.a", revs["many.a"]), write("many.b", revs["many.b"]), write("many.c", revs["many.c"]-1)})
	var ce *store.ConflictError
	if !errors.As(err, &ce) || ce.Namespace != "many.c" {
		t.Fatalf("a moved base: %v", err)
	}
	// The shared condition fails: nothing written either.
	_, err = src.PublishMany(ctx, []store.NamespaceWrite{write("many.a", revs["many.a"])},
		store.WithCondition(clientv3.Compare(clientv3.Value("/no-such-key"), "=", "x")))
	if !errors.Is(err, store.ErrConditionFailed) {
		t.Fatalf("a failed condition: %v", err)
	}
	for ns, rev := range revs {
		snap, err := src.Snapshot(ctx, transport.SnapshotRequest{Namespace: ns})
		if err != nil || snap.Revision != rev {
			t.Fatalf("%s after refused writes: %+v, %v; want revision %d", ns, snap, err, rev)
		}
	}
	rev, err := src.PublishMany(ctx, []store.NamespaceWrite{write("many.a", revs["many.a"]), write("many.b", revs["many.b"]), write("many.c", revs["many.c"])},
		store.WithOps(clientv3.OpPut("/holdfast-test/record", "published")))
	if err != nil {
		t.Fatal(err)
	}
	for ns := range revs {
		h, err := src.History(ctx, ns, store.HistoryOptions{Limit: 1})
		if err != nil || len(h.Revisions) != 1 {
			t.Fatalf("%s: history %+v, %v", ns, h, err)
		}
		r := h.Revisions[0]
		if r.Revision != rev || r.Kind != store.KindChange || r.Change != "c1" || r.Actor != "alice" || r.PrevRevision != revs[ns] {
			t.Errorf("%s: record %+v; want revision %d of change c1", ns, r, rev)
		}
	}
	got, err := cl.client(t).Get(ctx, "/holdfast-test/record")
	if err != nil || len(got.Kvs) != 1 || got.Kvs[0].ModRevision != rev {
		t.Errorf("the op written with them: %+v, %v", got, err)
	}
	if _, err := src.PublishMany(ctx, []store.NamespaceWrite{write("many.a", rev), write("many.a", rev)}); !errors.Is(err, store.ErrInvalidArgument) {
		t.Errorf("a namespace twice: %v", err)
	}
}
