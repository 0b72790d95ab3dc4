package server_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	ctl "github.com/holdfast-dev/holdfast/server/control"
	"github.com/holdfast-dev/holdfast/server/store"
)

// TestPointsFindsTheCompactionPoint: Points tells the head and etcd's
// compaction point (0 before any), by reads at revisions, not by a scan of
// the history.
func TestPointsFindsTheCompactionPoint(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, err := store.Open(ctx, store.Config{Kind: store.KindMemory})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var mid int64
	for i := range 300 {
		resp, err := st.Client.Put(ctx, fmt.Sprintf("/holdfast/ns/k%d", i%10), "1")
		if err != nil {
			t.Fatal(err)
		}
		if i == 150 {
			mid = resp.Header.Revision
		}
	}
	head, compact, err := ctl.Points(ctx, st.Client)
	if err != nil || compact != 0 || head < mid+149 {
		t.Fatalf("before compaction: head %d, compact %d, %v; want a head past %d and no compaction", head, compact, err, mid+149)
	}
	if _, err := st.Client.Compact(ctx, mid); err != nil {
		t.Fatal(err)
	}
	if h, compact, err := ctl.Points(ctx, st.Client); err != nil || compact != mid || h != head {
		t.Fatalf("after compaction at %d: head %d, compact %d, %v; want %d, %d", mid, h, compact, err, head, mid)
	}
	if k, err := ctl.Compact(ctx, st.Client, 0); err != nil || k != head {
		t.Fatalf("Compact(0) = %d, %v; want the head %d", k, err, head)
	}
	if _, compact, err := ctl.Points(ctx, st.Client); err != nil || compact != head {
		t.Fatalf("after compaction at the head: compact %d, %v; want %d", compact, err, head)
	}
}
