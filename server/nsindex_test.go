package server_test

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/server/store"
	"github.com/holdfast-dev/holdfast/transport/etcd"
)

// TestNamespacesOfAnOlderStore: a store written before the index of
// namespaces (a namespace's keys and meta record alone) lists its
// namespaces once a server starts on it, with their revisions and last
// changes.
func TestNamespacesOfAnOlderStore(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, err := store.Open(ctx, store.Config{Kind: store.KindEmbedded, DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	p := etcd.Prefix("legacy.app")
	meta := `{"prev_revision":0,"committed_at":"2026-01-02T03:04:05Z","actor":"old-server","reason":"before the index","kind":"publish","puts":["a"]}`
	resp, err := st.Client.Txn(ctx).Then(clientv3.OpPut(p+"a", "1"), clientv3.OpPut(p, meta)).Commit()
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	_, base := startServer(t, store.Config{Kind: store.KindEmbedded, DataDir: dir})
	list, err := controlClient(t, base).Namespaces(ctx, controlapi.NamespacesOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Namespaces) != 1 {
		t.Fatalf("namespaces: %+v", list)
	}
	n := list.Namespaces[0]
	if n.Namespace != "legacy.app" || n.Revision != resp.Header.Revision || n.Actor != "old-server" || n.Reason != "before the index" ||
		!n.CommittedAt.Equal(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)) {
		t.Errorf("the namespace of the older store: %+v", n)
	}
}
