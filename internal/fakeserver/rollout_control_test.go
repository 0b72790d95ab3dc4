package fakeserver

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

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

// TestRolloutControlUnderConcurrentStoreChangesEndsEveryRolloutByClose: rollouts started, aborted, promoted and
// reported on while plain publishes, compactions, resets, restores and
// finally Close run at once; run with -race. Nothing may deadlock, and
// every rollout left must have ended by Close.
func TestRolloutControlUnderConcurrentStoreChangesEndsEveryRolloutByClose(t *testing.T) {
	s := start(t)
	newFleet(t, s, "app", 20)
	newFleet(t, s, "other", 20)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	loop := func(f func(i int)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				f(i)
			}
		}()
	}
	for _, ns := range []string{"app", "other"} {
		loop(func(i int) {
			rec, err := s.StartRollout(ns, RolloutSpec{Puts: goodChange(), Stages: []float64{10, 50, 100}, Bake: time.Millisecond})
			if err != nil {
				return
			}
			switch i % 3 {
			case 0:
				_, _ = s.AbortRollout(ns, rec.ID)
			case 1:
				_, _ = s.PromoteRollout(ns, rec.ID)
			}
		})
		loop(func(i int) {
			recs, _ := s.Rollouts(ns)
			rev := s.Head()
			acks := make([]transport.Ack, 0, 20)
			for c := range 20 {
				a := transport.Ack{ClientID: fmt.Sprintf("%s-client-%d", ns, c), Namespace: ns, Revision: rev, Status: transport.AckApplied}
				if len(recs) > 0 && c%2 == 0 {
					a.Rollout = recs[0].ID
				}
				if c == 3 && i%7 == 0 {
					a.Status = transport.AckWouldReject
				}
				acks = append(acks, a)
			}
			s.recordAcks(acks)
		})
	}
	loop(func(i int) {
		_, _ = s.PublishWith("app", map[string]any{"p": i}, nil, PublishOptions{AbortRollout: i%2 == 0})
	})
	loop(func(i int) {
		switch i % 4 {
		case 0:
			_, _ = s.Compact(s.Head())
		case 1:
			_ = s.RestoreTo(max(s.CompactRevision(), s.Head()-1))
		case 2:
			if i%40 == 2 {
				s.ResetStore()
			}
		}
		time.Sleep(time.Millisecond) // pacing, not synchronisation
	})
	time.Sleep(300 * time.Millisecond) // how long to stress, not synchronisation
	done := make(chan error, 1)
	go func() { done <- s.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close deadlocked")
	}
	close(stop)
	wg.Wait()
	for _, ns := range []string{"app", "other"} {
		recs, _ := s.Rollouts(ns)
		for _, r := range recs {
			if r.State == RolloutRunning {
				_, err := s.WaitRollout(context.Background(), ns, r.ID)
				if !errors.Is(err, ErrClosed) {
					t.Errorf("WaitRollout of %s after Close: %v", r.ID, err)
				}
			}
		}
	}
}

// TestRolloutPrevalidateWaitsForTheOthers: with prevalidation, the
// clients outside a stage report their would-nacks with their acks of the
// stage's revision; a stage whose members have all reported must not end
// before the others have too (or the report timeout passed), else a bake
// shorter than the fleet's report latency lets the change past the stage
// whose would-nacks were on their way.
func TestRolloutPrevalidateWaitsForTheOthers(t *testing.T) {
	s := start(t)
	f := newFleet(t, s, "app", 100)
	rec := mustStart(t, s, "app", RolloutSpec{Puts: goodChange(), Stages: []float64{10, 100}, Prevalidate: true, ReportTimeout: time.Hour})
	in, out, rev, st := f.split()
	f.report(rev, transport.AckApplied, st.ID, "", in...)
	s.stepRollouts() // serialised with the controller's own step
	if got, _ := s.Rollout("app", rec.ID); got.State != RolloutRunning || got.Stage != 10 {
		t.Fatalf("the members reported, the others not yet: %+v", got)
	}
	// The others, in one batch: one of them would reject the change.
	acks := []transport.Ack{{ClientID: out[0], Namespace: "app", Revision: rev, Status: transport.AckWouldReject, Rollout: st.ID, Error: "strict"}}
	for _, c := range out {
		acks = append(acks, transport.Ack{ClientID: c, Namespace: "app", Revision: rev, Status: transport.AckApplied})
	}
	s.recordAcks(acks)
	rec = waitRollout(t, s, "app", rec.ID, "the end", func(r RolloutRecord) bool { return r.State != RolloutRunning })
	if rec.State != RolloutReverted || rec.Stage != 10 || rec.WouldNack != 1 {
		t.Fatalf("ended %+v, want reverted at stage 10", rec)
	}
}

// TestRolloutPrevalidateSilentOthersWaitTheReportTimeout: clients outside
// the stage that do not report hold it for the report timeout only.
func TestRolloutPrevalidateSilentOthersWaitTheReportTimeout(t *testing.T) {
	s := start(t)
	f := newFleet(t, s, "app", 100)
	rec := mustStart(t, s, "app", RolloutSpec{Puts: goodChange(), Stages: []float64{10, 100}, Prevalidate: true, ReportTimeout: 50 * time.Millisecond})
	in, _, rev, st := f.split()
	f.report(rev, transport.AckApplied, st.ID, "", in...)
	waitRollout(t, s, "app", rec.ID, "stage 100", atStage(100))
}

// TestRolloutPrevalidateWaitsForOutsidersNoLongerThanTheStageTimeout: the clients
// outside the stage are waited for no longer than the stage timeout.
func TestRolloutPrevalidateWaitsForOutsidersNoLongerThanTheStageTimeout(t *testing.T) {
	s := start(t)
	f := newFleet(t, s, "app", 100)
	rec := mustStart(t, s, "app", RolloutSpec{Puts: goodChange(), Stages: []float64{10, 100}, Prevalidate: true,
		ReportTimeout: time.Hour, StageTimeout: 50 * time.Millisecond})
	in, _, rev, st := f.split()
	f.report(rev, transport.AckApplied, st.ID, "", in...)
	waitRollout(t, s, "app", rec.ID, "stage 100", atStage(100))
}
