package fakeserver

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/rollout/controller"
	"github.com/holdfast-dev/holdfast/transport"
)

// TestReportTableIsBounded: past its bound the least recently heard
// report goes, whichever namespace it is of; a restore forgets the
// reports of revisions after it.
func TestReportTableIsBounded(t *testing.T) {
	var tab reportTable
	tab.init(3)
	now := time.Now()
	ack := func(ns, client string, rev int64) {
		tab.observe([]transport.Ack{{ClientID: client, Namespace: ns, Revision: rev, Status: transport.AckApplied}}, now)
	}
	ids := func(ns string) []string {
		reps, _ := tab.list(context.Background(), ns)
		out := make([]string, 0, len(reps))
		for _, r := range reps {
			out = append(out, r.ClientID)
		}
		slices.Sort(out)
		return out
	}
	ack("a", "c1", 1)
	ack("b", "c2", 2)
	ack("a", "c3", 3)
	ack("a", "c1", 4) // heard again: the newest
	ack("b", "c4", 5) // evicts c2, the oldest heard: b keeps c4 alone
	if got := ids("a"); !slices.Equal(got, []string{"c1", "c3"}) {
		t.Fatalf("a: %v", got)
	}
	if got := ids("b"); !slices.Equal(got, []string{"c4"}) {
		t.Fatalf("b: %v", got)
	}
	ack("c", "c5", 6) // evicts c3
	ack("c", "c6", 7) // evicts c1: a is gone
	if got := ids("a"); len(got) != 0 || len(tab.byNS) != 2 || tab.order.Len() != 3 {
		t.Fatalf("a: %v, namespaces %d, entries %d", got, len(tab.byNS), tab.order.Len())
	}
	tab.rewind(5)
	if got := ids("c"); len(got) != 0 || !slices.Equal(ids("b"), []string{"c4"}) {
		t.Fatalf("after the rewind: c %v, b %v", got, ids("b"))
	}
	reps, _ := tab.list(context.Background(), "b")
	if want := (controller.Report{ClientID: "c4", Acked: 5, Seen: now}); len(reps) != 1 || reps[0] != want {
		t.Fatalf("b's report %+v", reps)
	}
}
