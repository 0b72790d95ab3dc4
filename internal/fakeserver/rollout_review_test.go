package fakeserver

import (
	"testing"

	"github.com/holdfast-dev/holdfast/transport"
)

// TestRolloutNonMemberNackOfTheBaseDoesNotRevert: a client outside the
// stage serves the base; its nack of a stage's revision (without the
// rollout's id) says its checks reject the base, which the rollout does not
// change: it is counted, but it is no nack of the change, and must not
// revert it (else a fleet with one client that rejects the base can roll
// out nothing, not even the fix).
func TestRolloutNonMemberNackOfTheBaseDoesNotRevert(t *testing.T) {
	s := start(t)
	f := newFleet(t, s, "app", 100)
	rec := mustStart(t, s, "app", RolloutSpec{Puts: goodChange(), Stages: []float64{10, 100}})
	in, out, rev, st := f.split()
	f.report(rev, transport.AckRejected, "", "b: rejected by this client's schema", out[0])
	f.report(rev, transport.AckApplied, "", "", out[1:]...)
	f.report(rev, transport.AckApplied, st.ID, "", in...)
	waitRollout(t, s, "app", rec.ID, "stage 100", func(r RolloutRecord) bool { return r.State != RolloutRunning || r.Stage == 100 })
	got, _ := s.Rollout("app", rec.ID)
	if got.State != RolloutRunning || got.Nacked != 1 {
		t.Fatalf("after a non-member's nack of the base: %+v", got)
	}
	f.ackStage()
	rec = waitRollout(t, s, "app", rec.ID, "the promotion", func(r RolloutRecord) bool { return r.State != RolloutRunning })
	if rec.State != RolloutPromoted {
		t.Fatalf("ended %+v", rec)
	}
}
