package fakeserver

import (
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/holdfast-dev/holdfast/internal/wire"
	"github.com/holdfast-dev/holdfast/transport"
)

// A report whose outcomes name the same slots again and again is
// refused: each would cost a record per slot, and at a relay (or in a
// rollout) an ack per slot, so a small body would stand for as many acks
// as it repeats its runs.
func TestAckCohortRefusesOverlappingOutcomes(t *testing.T) {
	var expanded atomic.Int64
	s := start(t, WithAckSink(func(acks []transport.Ack, _ bool) { expanded.Add(int64(len(acks))) }))
	s.Publish("app", map[string]any{"v": 1})
	c := newClient(t)
	url := s.URL() + transport.PathAckCohort
	members := cohortBody(t, wire.CohortReport{RelayID: "r1", Epoch: "e1", Namespaces: []wire.CohortNamespace{
		{Namespace: "app", Members: []string{"a", "b"}},
	}})
	if resp, body := do(t, c, http.MethodPost, url, members, "Content-Type", "application/json"); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("members: %d %s", resp.StatusCode, body)
	}
	var outs []wire.CohortOutcome
	for range 100 {
		outs = append(outs, wire.CohortOutcome{Revision: 1, Status: transport.AckApplied, Runs: []int{0, 2}})
	}
	rep := cohortBody(t, wire.CohortReport{RelayID: "r1", Epoch: "e1", Namespaces: []wire.CohortNamespace{
		{Namespace: "app", Outcomes: outs},
	}})
	resp, body := do(t, c, http.MethodPost, url, rep, "Content-Type", "application/json")
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a report naming 2 slots 100 times: %d %s, want 400", resp.StatusCode, body)
	}
	if n := expanded.Load(); n > 2 {
		t.Errorf("2 clients' outcomes expanded into %d acks", n)
	}

	// An applied and a rejected outcome of one slot are two facts: kept.
	both := cohortBody(t, wire.CohortReport{RelayID: "r1", Epoch: "e1", Namespaces: []wire.CohortNamespace{
		{Namespace: "app", Outcomes: []wire.CohortOutcome{
			{Revision: 1, Status: transport.AckApplied, Runs: []int{0, 2}},
			{Revision: 1, Status: transport.AckRejected, Error: "no", Runs: []int{1, 1}},
		}},
	}})
	if resp, body := do(t, c, http.MethodPost, url, both, "Content-Type", "application/json"); resp.StatusCode != http.StatusNoContent {
		t.Errorf("an ack and a nack of one slot: %d %s", resp.StatusCode, body)
	}
}

// A cohort report is held to what an ack of each of its clients would
// be: a negative revision or a member id with a control character is
// refused, as that ack would be, not listed.
func TestAckCohortChecksAsAnAckWould(t *testing.T) {
	s := start(t)
	s.Publish("app", map[string]any{"v": 1})
	c := newClient(t)
	url := s.URL() + transport.PathAckCohort
	for name, body := range map[string]string{
		"a negative revision": `{"relay_id":"r1","epoch":"e1","namespaces":[{"ns":"app","members":["a"],"outcomes":[{"revision":-1,"status":"ack","runs":[0,1]}]}]}`,
		"a control character": `{"relay_id":"r1","epoch":"e1","namespaces":[{"ns":"app","members":["a\nb"],"outcomes":[{"revision":1,"status":"ack","runs":[0,1]}]}]}`,
	} {
		resp, b := do(t, c, http.MethodPost, url, body, "Content-Type", "application/json")
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: %d %s, want 400", name, resp.StatusCode, b)
		}
		if got := states(s, "app"); len(got) != 0 {
			t.Errorf("%s: listed %v", name, got)
		}
		s.dp.ResetAcks()
	}
}
