package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

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

	type record struct {
		Revision     int64    `json:"revision"`
		PrevRevision int64    `json:"prev_revision"`
		Kind         string   `json:"kind"`
		Actor        string   `json:"actor"`
		Puts         []string `json:"puts"`
	}
	var h struct{ Revisions []record }
	testutil.Eventually(t, 20*time.Second, func() bool {
		h.Revisions = nil
		if st := control(t, "GET", url+"/control/namespaces/app/history", nil, &h); st != http.StatusOK {
			t.Fatalf("history: %d", st)
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
	var v struct{ Values map[string]json.RawMessage }
	if st := control(t, "GET", fmt.Sprintf("%s/control/namespaces/app/values?revision=%d", url, past), nil, &v); st != http.StatusOK || string(v.Values["x"]) != "9" {
		t.Errorf("values at the unaudited revision: %d %s", st, v.Values)
	}
}
