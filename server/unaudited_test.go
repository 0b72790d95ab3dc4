package server_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/transport/etcd"
)

// TestWritesPastTheServerAreUnaudited: a key written straight into etcd
// (as etcdctl would) is not passed off as audited: the leader records it,
// and history lists it as kind "unaudited", with its keys, between the
// publishes around it; values at its revision include it.
func TestWritesPastTheServerAreUnaudited(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	etcdStore, s, url := startOverOwnEtcd(t, 0)
	testutil.Eventually(t, 20*time.Second, func() bool { return s.Status(ctx).Leader }, "the lone server leads")
	r1 := publish(t, url, "app", map[string]any{"a": 1})
	put, err := etcdStore.Client.Put(ctx, etcd.Prefix("app")+"x", "9")
	if err != nil {
		t.Fatal(err)
	}
	past := put.Header.Revision
	r3 := publish(t, url, "app", map[string]any{"a": 2})

	type record = controlapi.AuditRecord
	c := controlClient(t, url)
	var h *controlapi.History
	testutil.Eventually(t, 20*time.Second, func() bool {
		var err error
		if h, err = c.History(t.Context(), "app", controlapi.HistoryOptions{}); err != nil {
			t.Fatalf("history: %v", err)
		}
		return len(h.Revisions) == 3
	}, "the history to list the write past the server")
	want := []record{
		{Revision: r3, PrevRevision: past, Kind: "publish", Puts: []string{"a"}},
		{Revision: past, PrevRevision: r1, Kind: "unaudited", Puts: []string{"x"}},
		{Revision: r1, Kind: "publish", Puts: []string{"a"}},
	}
	for i := range want {
		got := h.Revisions[i]
		if got.Revision != want[i].Revision || got.Kind != want[i].Kind || got.Actor != "" && got.Kind == "unaudited" ||
			fmt.Sprint(got.Puts) != fmt.Sprint(want[i].Puts) || i == 1 && got.PrevRevision != r1 {
			t.Errorf("history[%d] = %+v, want %+v", i, got, want[i])
		}
	}
	if v, err := c.ValuesAt(t.Context(), "app", past); err != nil || string(v.Values["x"]) != "9" {
		t.Errorf("values at the unaudited revision: %v %+v", err, v)
	}

	// The index of namespaces: the unaudited change, recorded after the
	// publish that followed it, leaves that publish's entry; a namespace
	// written past the server alone is listed, as unaudited.
	only, err := etcdStore.Client.Put(ctx, etcd.Prefix("etcdctl.only")+"k", "1")
	if err != nil {
		t.Fatal(err)
	}
	var list *controlapi.Namespaces
	testutil.Eventually(t, 20*time.Second, func() bool {
		var err error
		if list, err = c.Namespaces(t.Context(), controlapi.NamespacesOptions{}); err != nil {
			t.Fatalf("namespaces: %v", err)
		}
		return len(list.Namespaces) == 2
	}, "the namespace written past the server to be listed")
	if a, e := list.Namespaces[0], list.Namespaces[1]; a.Namespace != "app" || a.Revision != r3 || a.Kind != "publish" ||
		e.Namespace != "etcdctl.only" || e.Revision != only.Header.Revision || e.Kind != "unaudited" {
		t.Errorf("namespaces: %+v", list.Namespaces)
	}
}
