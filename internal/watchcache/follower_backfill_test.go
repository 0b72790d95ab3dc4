package watchcache

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/dataplane"
	"github.com/holdfast-dev/holdfast/transport"
)

// TestFollowerBackfill: with a backfill, a request whose cursor is older
// than the window is served from the upstream's history: the window grows
// back to its cursor. Two such requests at once, the nearer one filling
// first, both get their changes (the second fill keeps what the first
// added and adds what lies below it); a request the history cannot serve
// (an error) is compacted as without a backfill.
func TestFollowerBackfill(t *testing.T) {
	history := []transport.ChangeSet{ // the upstream's changes of "app"
		{Namespace: "app", StoreID: "s", Revision: 4, PrevRevision: 2, Puts: map[string]json.RawMessage{"v": json.RawMessage("4")}},
		{Namespace: "app", StoreID: "s", Revision: 7, PrevRevision: 4, Puts: map[string]json.RawMessage{"v": json.RawMessage("7")}},
	}
	farther := make(chan struct{}) // the farther request's read waits for the nearer's fill
	f := newFollower(100, 0, func(string) error { return nil })
	f.SetBackfill(func(_ context.Context, ns string, since, until int64, _ int) ([]transport.ChangeSet, error) {
		if since < 0 {
			return nil, transport.ErrCompacted
		}
		if since < 4 {
			<-farther
		}
		var out []transport.ChangeSet
		for _, cs := range history {
			if cs.Revision > since && cs.Revision <= until {
				out = append(out, cs)
			}
		}
		return out, nil
	})
	f.Apply("app", "s", 7, 10, map[string]json.RawMessage{"v": json.RawMessage("7")}, nil, 0, false) // the window starts at 10

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); f.Demand(ctx, []dataplane.SinceReq{{Name: "app", Since: 3}}) }()
	f.Demand(ctx, []dataplane.SinceReq{{Name: "app", Since: 5}})
	close(farther)
	wg.Wait()

	for _, tc := range []struct {
		since int64
		want  []int64
	}{
		{5, []int64{7}},
		{3, []int64{4, 7}},
		{8, nil},
	} {
		sub, err := f.Subscribe("app", tc.since, nil)
		if err != nil {
			t.Fatalf("subscribe from %d: %v", tc.since, err)
		}
		var got []int64
		for _, c := range sub.Backlog {
			got = append(got, c.CS.Revision)
		}
		if len(got) != len(tc.want) || len(got) > 0 && (got[0] != tc.want[0] || got[len(got)-1] != tc.want[len(tc.want)-1]) {
			t.Errorf("from %d: backlog %v, want %v", tc.since, got, tc.want)
		}
	}
	if _, err := f.Subscribe("app", 1, nil); err == nil {
		t.Errorf("subscribe from 1, below every fill: no error, want compacted")
	}
}
