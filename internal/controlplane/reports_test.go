package controlplane

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/holdfast-dev/holdfast/internal/rollout/controller"
	"github.com/holdfast-dev/holdfast/transport"
)

// TestReportTableIsBounded: past its bound the least recently heard
// report goes, whichever namespace it is of; a restore forgets the
// reports of revisions after it.
func TestReportTableIsBounded(t *testing.T) {
	tab := NewReports(3, 256)
	now := time.Now()
	ack := func(ns, client string, rev int64) {
		tab.Observe([]transport.Ack{{ClientID: client, Namespace: ns, Revision: rev, Status: transport.AckApplied}}, now)
	}
	ids := func(ns string) []string {
		reps := tab.Of(ns)
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
	tab.Rewind(5)
	if got := ids("c"); len(got) != 0 || !slices.Equal(ids("b"), []string{"c4"}) {
		t.Fatalf("after the rewind: c %v, b %v", got, ids("b"))
	}
	reps := tab.Of("b")
	if want := (controller.Report{ClientID: "c4", Acked: 5, Seen: now}); len(reps) != 1 || reps[0] != want {
		t.Fatalf("b's report %+v", reps)
	}
}

// TestReportsNackErrorIsCut: a nack's error is kept to the table's bound,
// cut at a rune, and the newest report of a pair wins.
func TestReportsNackErrorIsCut(t *testing.T) {
	tab := NewReports(10, 256)
	now := time.Now()
	tab.Observe([]transport.Ack{{ClientID: "d", Namespace: "ns", Revision: 1, Status: transport.AckApplied}}, now)
	tab.Observe([]transport.Ack{{ClientID: "d", Namespace: "ns", Revision: 2, Status: transport.AckRejected, Error: strings.Repeat("é", 500)}}, now)
	reps := tab.Of("ns")
	if len(reps) != 1 || reps[0].Acked != 1 || reps[0].Nacked != 2 || len(reps[0].NackError) > 256 || !strings.HasPrefix(reps[0].NackError, "é") || !utf8.ValidString(reps[0].NackError) {
		t.Errorf("report %+v", reps)
	}
}

// TestReportsExpire: a pair unheard for longer than the least age is
// dropped when drop says so, and the pairs heard since are not visited.
func TestReportsExpire(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tab := NewReports(10, 256)
	tab.Observe([]transport.Ack{{ClientID: "old", Namespace: "ns", Revision: 1, Status: transport.AckApplied}}, start)
	tab.Observe([]transport.Ack{{ClientID: "old", Namespace: "other", Revision: 1, Status: transport.AckApplied}}, start)
	now := start.Add(time.Hour)
	tab.Observe([]transport.Ack{{ClientID: "new", Namespace: "ns", Revision: 1, Status: transport.AckApplied}}, now)
	var visited []string
	dropped := tab.Expire(now, time.Minute, func(ns, _ string, age time.Duration) bool {
		visited = append(visited, ns)
		return ns == "ns" && age == time.Hour
	})
	slices.Sort(visited)
	if dropped != 1 || !slices.Equal(visited, []string{"ns", "other"}) || len(tab.Of("ns")) != 1 || tab.Of("ns")[0].ClientID != "new" || len(tab.Of("other")) != 1 {
		t.Errorf("dropped %d, visited %v, ns %v, other %v", dropped, visited, tab.Of("ns"), tab.Of("other"))
	}
}

// TestEvictionsAreMissingReports: the pairs a full table drops count
// per namespace, with when the last went, and Missing says so to a
// rollout started before the last (not to one started after it).
func TestEvictionsAreMissingReports(t *testing.T) {
	tab := NewReports(2, 64)
	at := time.Date(2026, 12, 6, 20, 0, 0, 0, time.UTC)
	tab.Observe([]transport.Ack{{ClientID: "a", Namespace: "x", Revision: 1, Status: transport.AckApplied},
		{ClientID: "b", Namespace: "y", Revision: 1, Status: transport.AckApplied}}, at)
	tab.Observe([]transport.Ack{{ClientID: "c", Namespace: "y", Revision: 1, Status: transport.AckApplied}}, at.Add(time.Second))
	if e := tab.EvictedOf("x"); e.N != 1 || !e.Last.Equal(at.Add(time.Second)) {
		t.Errorf("x: %+v, want a's eviction", e)
	}
	if e := tab.EvictedOf("y"); e.N != 0 {
		t.Errorf("y: %+v, want none", e)
	}
	if n, why := tab.Missing(context.Background(), "x", at); n != 1 || !strings.Contains(why, "full report table of 2") {
		t.Errorf("missing %d: %q", n, why)
	}
	if n, _ := tab.Missing(context.Background(), "x", at.Add(2*time.Second)); n != 0 {
		t.Errorf("missing %d for a rollout started after the eviction", n)
	}
}
