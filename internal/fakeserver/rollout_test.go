package fakeserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/rollout"
	"github.com/holdfast-dev/holdfast/internal/rollout/controller"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/internal/wire"
	"github.com/holdfast-dev/holdfast/transport"
)

// fleet is a set of fake clients of one namespace that report by calling
// the server's ack handling directly.
type fleet struct {
	t   testing.TB
	s   *Server
	ns  string
	ids []string
}

// newFleet publishes ns's base and has n clients ack it, so that the
// server knows them.
func newFleet(t testing.TB, s *Server, ns string, n int) *fleet {
	t.Helper()
	f := &fleet{t: t, s: s, ns: ns}
	for i := range n {
		f.ids = append(f.ids, fmt.Sprintf("%s-client-%d", ns, i))
	}
	rev, err := s.Publish(ns, map[string]any{"a": 1, "b": "x"})
	if err != nil {
		t.Fatal(err)
	}
	f.report(rev, transport.AckApplied, "", "", f.ids...)
	return f
}

// report records one report of each client as one batch.
func (f *fleet) report(rev int64, status, rolloutID, errText string, clients ...string) {
	acks := make([]transport.Ack, 0, len(clients))
	for _, c := range clients {
		acks = append(acks, transport.Ack{ClientID: c, Namespace: f.ns, Revision: rev, Status: status, Error: errText, Rollout: rolloutID})
	}
	f.s.recordAcks(acks)
}

// staged returns the staged rollout the namespace's content carries now
// and its revision (nil when none).
func (f *fleet) staged() (*rollout.Staged, int64) {
	f.t.Helper()
	snap, err := f.s.store.Snapshot(f.ns)
	if err != nil {
		f.t.Fatal(err)
	}
	raw, ok := snap.Values[rollout.Key]
	if !ok {
		return nil, snap.Rev
	}
	st, err := rollout.Decode(raw)
	if err != nil {
		f.t.Fatal(err)
	}
	return st, snap.Rev
}

// split returns the clients in and out of the current stage.
func (f *fleet) split() (in, out []string, rev int64, st *rollout.Staged) {
	f.t.Helper()
	st, rev = f.staged()
	if st == nil {
		f.t.Fatal("no rollout in the content")
	}
	for _, c := range f.ids {
		if st.Member(c) {
			in = append(in, c)
		} else {
			out = append(out, c)
		}
	}
	return in, out, rev, st
}

// ackStage has every client ack the current stage's revision, the
// members naming the rollout.
func (f *fleet) ackStage() *rollout.Staged {
	in, out, rev, st := f.split()
	f.report(rev, transport.AckApplied, "", "", out...)
	f.report(rev, transport.AckApplied, st.ID, "", in...)
	return st
}

func waitRollout(t testing.TB, s *Server, ns, id, what string, cond func(RolloutRecord) bool) RolloutRecord {
	t.Helper()
	var rec RolloutRecord
	testutil.Eventually(t, waitLimit, func() bool {
		var err error
		if rec, err = s.Rollout(ns, id); err != nil {
			t.Fatal(err)
		}
		return cond(rec)
	}, what)
	return rec
}

// stageEnded is when rollout id's last stage ended (its last bake-end, or
// promote), from the control API's record of its decisions.
func stageEnded(t testing.TB, s *Server, ns, id string) time.Time {
	t.Helper()
	rec, err := s.rolloutRecord(context.Background(), ns, id)
	if err != nil {
		t.Fatal(err)
	}
	for i := len(rec.Decisions) - 1; i >= 0; i-- {
		if d := rec.Decisions[i]; d.What == "bake-end" || d.What == "promote" {
			return d.At
		}
	}
	t.Fatalf("no stage ended: %+v", rec.Decisions)
	return time.Time{}
}

// stepRollouts has the controller look at the running rollouts at once
// (what it does on a report), so that a test sees a decision not taken.
func (s *Server) stepRollouts() {
	_ = s.rollouts.ctl.Step(context.Background(), nil)
}

func atStage(pct float64) func(RolloutRecord) bool {
	return func(r RolloutRecord) bool { return r.State == RolloutRunning && r.Stage == pct && !r.Baking }
}

func inState(state string) func(RolloutRecord) bool {
	return func(r RolloutRecord) bool { return r.State == state }
}

func mustStart(t testing.TB, s *Server, ns string, spec RolloutSpec) RolloutRecord {
	t.Helper()
	rec, err := s.StartRollout(ns, spec)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func goodChange() map[string]json.RawMessage {
	return map[string]json.RawMessage{"a": json.RawMessage(`2`), "new": json.RawMessage(`"n"`)}
}

// content returns ns's content without the rollout key, and whether it
// had one.
func content(t testing.TB, s *Server, ns string) (map[string]string, bool) {
	t.Helper()
	snap, err := s.store.Snapshot(ns)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	_, staged := snap.Values[rollout.Key]
	for k, v := range snap.Values {
		if k != rollout.Key {
			out[k] = string(v)
		}
	}
	return out, staged
}

func TestRolloutPromotes(t *testing.T) {
	s := start(t)
	f := newFleet(t, s, "app", 100)
	rec := mustStart(t, s, "app", RolloutSpec{Puts: goodChange(), Deletes: []string{"b"}, Stages: []float64{1, 10, 100}, Bake: 5 * time.Millisecond})
	if rec.State != RolloutRunning || rec.Stage != 1 || len(rec.Revisions) != 1 || rec.Clients != 100 || rec.InStage != 1 {
		t.Fatalf("started: %+v", rec)
	}
	var cuts []uint64
	for _, pct := range []float64{1, 10, 100} {
		waitRollout(t, s, "app", rec.ID, fmt.Sprintf("stage %v", pct), atStage(pct))
		in, _, rev, st := f.split()
		if len(in) != rollout.Count(100, pct) || st.Stage != pct || st.ID != rec.ID || string(st.Puts["a"]) != "2" {
			t.Fatalf("stage %v: %d members, staged %+v", pct, len(in), st)
		}
		if got, _ := s.Rollout("app", rec.ID); got.StageRevision != rev || got.InStage != len(in) || got.Reported != 0 {
			t.Fatalf("stage %v: record %+v, content at %d", pct, got, rev)
		}
		cuts = append(cuts, st.Cut)
		f.ackStage()
	}
	rec = waitRollout(t, s, "app", rec.ID, "promotion", inState(RolloutPromoted))
	if cuts[0] > cuts[1] || cuts[2] != math.MaxUint64 {
		t.Errorf("cuts %x", cuts)
	}
	if len(rec.Revisions) != 4 || rec.Revisions[3] != s.Head() || rec.Served != 100 || rec.Acked != 100 || rec.Nacked != 0 || rec.Stage != 100 || rec.EndedAt == nil {
		t.Fatalf("promoted: %+v", rec)
	}
	got, staged := content(t, s, "app")
	if staged || got["a"] != "2" || got["new"] != `"n"` || len(got) != 2 {
		t.Fatalf("content after promotion %v (rollout key %v)", got, staged)
	}
}

func TestRolloutNackAtFirstStageReverts(t *testing.T) {
	s := start(t)
	f := newFleet(t, s, "app", 100)
	rec := mustStart(t, s, "app", RolloutSpec{Puts: map[string]json.RawMessage{"a": json.RawMessage(`"BAD"`)}, Stages: []float64{1, 10, 100}})
	in, out, rev, st := f.split()
	if len(in) != 1 {
		t.Fatalf("%d members at 1%%", len(in))
	}
	f.report(rev, transport.AckApplied, "", "", out...) // the others see no change
	f.report(rev, transport.AckRejected, st.ID, "a: value contains BAD", in...)
	rec = waitRollout(t, s, "app", rec.ID, "the revert", inState(RolloutReverted))
	if rec.Stage != 1 || rec.Nacked != 1 || rec.Served != 0 || len(rec.Revisions) != 2 || !strings.Contains(rec.Reason, "contains BAD") || !strings.Contains(rec.Reason, in[0]) {
		t.Fatalf("reverted: %+v", rec)
	}
	if got, staged := content(t, s, "app"); staged || got["a"] != "1" || got["b"] != `"x"` {
		t.Fatalf("content after the revert %v (rollout key %v)", got, staged)
	}
	// The nack is the client's as any nack is.
	for _, c := range s.Clients() {
		if c.ClientID == in[0] && c.NackedRevision != rev {
			t.Errorf("client state %+v", c)
		}
	}
}

// TestRolloutMaxNacks: nacks up to max_nacks pass; one more reverts.
func TestRolloutMaxNacks(t *testing.T) {
	s := start(t)
	f := newFleet(t, s, "app", 100)
	rec := mustStart(t, s, "app", RolloutSpec{Puts: goodChange(), Stages: []float64{10, 50, 100}, MaxNacks: 2})
	in, out, rev, st := f.split()
	nackers := in[:2]
	f.report(rev, transport.AckRejected, st.ID, "no", nackers...)
	f.report(rev, transport.AckApplied, st.ID, "", in[2:]...)
	f.report(rev, transport.AckApplied, "", "", out...)
	waitRollout(t, s, "app", rec.ID, "stage 50", atStage(50))
	in, _, rev, st = f.split()
	f.report(rev, transport.AckRejected, st.ID, "no again", nackers...) // the same two: still two
	s.stepRollouts()
	if got, _ := s.Rollout("app", rec.ID); got.State != RolloutRunning || got.Nacked != 2 {
		t.Fatalf("the same nackers again: %+v", got)
	}
	for _, c := range in {
		if !slices.Contains(nackers, c) { // a third client
			f.report(rev, transport.AckRejected, st.ID, "no", c)
			break
		}
	}
	rec = waitRollout(t, s, "app", rec.ID, "the revert", inState(RolloutReverted))
	if rec.Nacked != 3 || rec.Stage != 50 || !strings.Contains(rec.Reason, "3 client(s)") {
		t.Fatalf("reverted: %+v", rec)
	}
}

// TestRolloutStageWaitsForEveryMember: a stage ends only when each of its
// clients reported, those known at its start and those that report later.
func TestRolloutStageWaitsForEveryMember(t *testing.T) {
	s := start(t)
	f := newFleet(t, s, "app", 100)
	rec := mustStart(t, s, "app", RolloutSpec{Puts: goodChange(), Stages: []float64{10, 100}})
	in, out, rev, st := f.split()
	f.report(rev, transport.AckApplied, st.ID, "", in[1:]...)
	f.report(rev, transport.AckApplied, "", "", out...)
	// A client the server did not know, in the stage by the same rule,
	// reporting an older revision: the stage waits for it too.
	late := ""
	for i := 0; late == ""; i++ {
		if c := fmt.Sprintf("late-%d", i); st.Member(c) {
			late = c
		}
	}
	f.report(rev-1, transport.AckApplied, "", "", late)
	s.stepRollouts() // what the controller does on a report, done here to look at once
	got, _ := s.Rollout("app", rec.ID)
	if got.Stage != 10 || got.InStage != len(in)+1 || got.Reported != len(in)-1 || got.Clients != 101 {
		t.Fatalf("with two members missing: %+v", got)
	}
	f.report(rev, transport.AckApplied, st.ID, "", in[0])
	s.stepRollouts()
	if got, _ = s.Rollout("app", rec.ID); got.Stage != 10 || got.Reported != len(in) {
		t.Fatalf("with the late member missing: %+v", got)
	}
	f.report(rev, transport.AckRejected, st.ID, "", late) // a report, if a nack: max_nacks 0 reverts
	rec = waitRollout(t, s, "app", rec.ID, "the revert", inState(RolloutReverted))
	if rec.Stage != 10 || !strings.Contains(rec.Reason, late) {
		t.Fatalf("%+v", rec)
	}
}

func TestRolloutLagAndStageTimeout(t *testing.T) {
	for _, tc := range []struct {
		onTimeout string
		state     string
	}{{OnTimeoutRevert, RolloutReverted}, {OnTimeoutHold, RolloutRunning}} {
		t.Run(tc.onTimeout, func(t *testing.T) {
			s := start(t)
			f := newFleet(t, s, "app", 20)
			rec := mustStart(t, s, "app", RolloutSpec{Puts: goodChange(), Stages: []float64{50, 100},
				ReportTimeout: 20 * time.Millisecond, StageTimeout: 150 * time.Millisecond, OnTimeout: tc.onTimeout})
			in, out, rev, st := f.split()
			f.report(rev, transport.AckApplied, st.ID, "", in[2:]...)
			f.report(rev, transport.AckApplied, "", "", out...)
			lag := waitRollout(t, s, "app", rec.ID, "two lagging", func(r RolloutRecord) bool { return r.Lagging == 2 })
			if lag.State != RolloutRunning || lag.Stage != 50 {
				t.Fatalf("lagging: %+v", lag)
			}
			rec = waitRollout(t, s, "app", rec.ID, "the timeout", func(r RolloutRecord) bool { return r.State == tc.state && strings.Contains(r.Reason, "timed out") })
			if rec.Lagging != 2 || rec.Stage != 50 {
				t.Fatalf("timed out: %+v", rec)
			}
			if tc.onTimeout == OnTimeoutRevert {
				if _, staged := content(t, s, "app"); staged {
					t.Fatal("still staged after the revert")
				}
				return
			}
			if !rec.Held || !strings.Contains(rec.Reason, "holding") {
				t.Fatalf("held: %+v", rec)
			}
			// Held, it waits on: the missing reports move it along.
			f.report(rev, transport.AckApplied, st.ID, "", in[:2]...)
			waitRollout(t, s, "app", rec.ID, "stage 100", atStage(100))
			if got, _ := s.Rollout("app", rec.ID); got.Held || got.Reason != "" {
				t.Fatalf("after the hold: %+v", got)
			}
		})
	}
}

func TestRolloutHeldThenPromoted(t *testing.T) {
	s := start(t)
	f := newFleet(t, s, "app", 10)
	rec := mustStart(t, s, "app", RolloutSpec{Puts: goodChange(), Stages: []float64{50, 100}, StageTimeout: 30 * time.Millisecond, OnTimeout: OnTimeoutHold})
	_ = f
	waitRollout(t, s, "app", rec.ID, "the hold", func(r RolloutRecord) bool { return r.Held })
	rec, err := s.PromoteRollout("app", rec.ID)
	if err != nil || rec.State != RolloutPromoted || !strings.Contains(rec.Reason, "promoted by the operator at stage 50%") {
		t.Fatalf("PromoteRollout = %+v, %v", rec, err)
	}
	if got, staged := content(t, s, "app"); staged || got["new"] != `"n"` {
		t.Fatalf("content %v", got)
	}
	if _, err := s.PromoteRollout("app", rec.ID); !errors.Is(err, ErrRolloutEnded) {
		t.Fatalf("second promotion: %v", err)
	}
	if _, err := s.AbortRollout("app", rec.ID); !errors.Is(err, ErrRolloutEnded) {
		t.Fatalf("abort after the promotion: %v", err)
	}
}

func TestRolloutAbortDuringBake(t *testing.T) {
	s := start(t)
	f := newFleet(t, s, "app", 100)
	rec := mustStart(t, s, "app", RolloutSpec{Puts: goodChange(), Stages: []float64{10, 100}, Bake: time.Hour})
	f.ackStage()
	waitRollout(t, s, "app", rec.ID, "the bake", func(r RolloutRecord) bool { return r.Baking })
	rec, err := s.AbortRollout("app", rec.ID)
	if err != nil || rec.State != RolloutReverted || rec.Baking || rec.Lagging != 0 || !strings.Contains(rec.Reason, "aborted by the operator at stage 10%") || rec.Served != 10 {
		t.Fatalf("AbortRollout = %+v, %v", rec, err)
	}
	if got, staged := content(t, s, "app"); staged || got["a"] != "1" {
		t.Fatalf("content after the abort %v", got)
	}
}

// TestRolloutPrevalidate: a would-nack of a client outside the stage
// counts as a nack, and is the rollout's alone (not the client's state).
func TestRolloutPrevalidate(t *testing.T) {
	s := start(t)
	f := newFleet(t, s, "app", 100)
	rec := mustStart(t, s, "app", RolloutSpec{Puts: goodChange(), Stages: []float64{1, 100}, Prevalidate: true})
	in, out, rev, st := f.split()
	if !st.Prevalidate {
		t.Fatal("the staged change does not ask for prevalidation")
	}
	f.report(rev, transport.AckApplied, st.ID, "", in...)
	f.report(rev, transport.AckWouldReject, st.ID, "new: not allowed", out[:3]...)
	f.report(rev, transport.AckWouldReject, "another-rollout", "ignored", out[3])
	rec = waitRollout(t, s, "app", rec.ID, "the revert", inState(RolloutReverted))
	if rec.WouldNack != 3 || rec.Nacked != 0 || rec.Stage != 1 || !strings.Contains(rec.Reason, "would_nack") {
		t.Fatalf("reverted: %+v", rec)
	}
	for _, c := range s.Clients() {
		if c.NackedRevision != 0 || c.AckedRevision < rev-1 {
			t.Errorf("a would-nack in the client's state: %+v", c)
		}
	}
}

func TestRolloutTwoNamespacesAtOnce(t *testing.T) {
	s := start(t)
	fa, fb := newFleet(t, s, "a", 50), newFleet(t, s, "b", 50)
	ra := mustStart(t, s, "a", RolloutSpec{Puts: goodChange(), Stages: []float64{10, 100}})
	rb := mustStart(t, s, "b", RolloutSpec{Puts: goodChange(), Stages: []float64{10, 100}})
	fa.ackStage()
	in, out, rev, st := fb.split()
	fb.report(rev, transport.AckRejected, st.ID, "b says no", in[0])
	fb.report(rev, transport.AckApplied, "", "", out...)
	waitRollout(t, s, "a", ra.ID, "a at 100", atStage(100))
	waitRollout(t, s, "b", rb.ID, "b reverted", inState(RolloutReverted))
	fa.ackStage()
	waitRollout(t, s, "a", ra.ID, "a promoted", inState(RolloutPromoted))
	list, err := s.Rollouts("b")
	if err != nil || len(list) != 1 || list[0].ID != rb.ID || list[0].Namespace != "b" {
		t.Fatalf("Rollouts(b) = %+v, %v", list, err)
	}
}

// TestRolloutEndedKeepsCounting: reports of its revisions that arrive
// after it ended still count, so that its record tells the whole story.
func TestRolloutEndedKeepsCounting(t *testing.T) {
	s := start(t)
	f := newFleet(t, s, "app", 100)
	rec := mustStart(t, s, "app", RolloutSpec{Puts: goodChange(), Stages: []float64{10, 100}, Prevalidate: true})
	in, out, rev, st := f.split()
	f.report(rev, transport.AckRejected, st.ID, "first", in[0])
	rec = waitRollout(t, s, "app", rec.ID, "the revert", inState(RolloutReverted))
	revert := rec.Revisions[len(rec.Revisions)-1]
	f.report(rev, transport.AckApplied, st.ID, "", in[1:]...) // late: they had served it
	f.report(rev, transport.AckRejected, st.ID, "second", in[1])
	f.report(rev, transport.AckWouldReject, st.ID, "strict", out[:4]...)
	f.report(revert, transport.AckApplied, "", "", f.ids...)
	got, _ := s.Rollout("app", rec.ID)
	if got.State != RolloutReverted || got.Served != len(in)-1 || got.Nacked != 2 || got.WouldNack != 4 || got.Acked != 100 || got.Reason != rec.Reason {
		t.Fatalf("after the end: %+v (in the stage: %d)", got, len(in))
	}
	// A later publish's reports are no longer its.
	next, err := s.Publish("app", map[string]any{"z": 1})
	if err != nil {
		t.Fatal(err)
	}
	f.report(next, transport.AckRejected, "", "later", f.ids...)
	f.report(next, transport.AckApplied, "", "", "stranger")
	if again, _ := s.Rollout("app", rec.ID); again.Nacked != 2 || again.Clients != got.Clients {
		t.Fatalf("a later revision counted: %+v", again)
	}
}

func TestRolloutWithNoClientsPromotes(t *testing.T) {
	s := start(t)
	if _, err := s.Publish("app", map[string]any{"a": 1}); err != nil {
		t.Fatal(err)
	}
	rec := mustStart(t, s, "app", RolloutSpec{Puts: goodChange(), Stages: []float64{1, 10, 100}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rec, err := s.WaitRollout(ctx, "app", rec.ID)
	if err != nil || rec.State != RolloutPromoted || len(rec.Revisions) != 4 || rec.Clients != 0 {
		t.Fatalf("WaitRollout = %+v, %v", rec, err)
	}
	if _, err := s.WaitRollout(ctx, "app", "r-nope"); !errors.Is(err, ErrUnknownRollout) {
		t.Fatalf("WaitRollout of an unknown id: %v", err)
	}
	// One that waits for a client, until the context ends.
	s.recordAcks([]transport.Ack{{ClientID: "c", Namespace: "app", Revision: s.Head(), Status: transport.AckApplied}})
	rec = mustStart(t, s, "app", RolloutSpec{Puts: goodChange(), Stages: []float64{100}})
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if got, err := s.WaitRollout(short, "app", rec.ID); !errors.Is(err, context.DeadlineExceeded) || got.State != RolloutRunning || got.InStage != 1 {
		t.Fatalf("WaitRollout of a waiting rollout = %+v, %v", got, err)
	}
}

func TestRolloutConflicts(t *testing.T) {
	s := start(t)
	f := newFleet(t, s, "app", 10)
	rec := mustStart(t, s, "app", RolloutSpec{Puts: goodChange(), Stages: []float64{50, 100}})
	if _, err := s.StartRollout("app", RolloutSpec{Puts: goodChange(), Stages: []float64{100}}); !errors.Is(err, ErrRolloutRunning) {
		t.Fatalf("second rollout: %v", err)
	}
	if _, err := s.Publish("app", map[string]any{"a": 3}); !errors.Is(err, ErrRolloutRunning) || !strings.Contains(err.Error(), rec.ID) {
		t.Fatalf("plain publish during a rollout: %v", err)
	}
	if _, err := s.Rollback("app", 1); !errors.Is(err, ErrRolloutRunning) {
		t.Fatalf("rollback during a rollout: %v", err)
	}
	if _, err := s.Publish("other", map[string]any{"a": 3}); err != nil {
		t.Fatalf("another namespace: %v", err)
	}
	c := newClient(t)
	resp, body := do(t, c, http.MethodPost, s.URL()+"/control/namespaces/app/publish", `{"puts":{"a":3}}`)
	if eb := decode[transport.ErrorBody](t, body); resp.StatusCode != http.StatusConflict || eb.Error != transport.CodeConflict || !strings.Contains(eb.Message, rec.ID) {
		t.Fatalf("publish: %d %s", resp.StatusCode, body)
	}
	resp, body = do(t, c, http.MethodPost, s.URL()+"/control/namespaces/app/rollback", `{"to_revision":1}`)
	if resp.StatusCode != http.StatusConflict {
		t.Fatalf("rollback: %d %s", resp.StatusCode, body)
	}
	// A publish that fails its own checks aborts nothing.
	if err := s.SetSchema("app", []byte(`{"type":"object","properties":{"a":{"type":"integer"}}}`)); err != nil {
		t.Fatal(err)
	}
	resp, body = do(t, c, http.MethodPost, s.URL()+"/control/namespaces/app/publish", `{"puts":{"a":"three"},"abort_rollout":true}`)
	if got, _ := s.Rollout("app", rec.ID); resp.StatusCode != http.StatusUnprocessableEntity || got.State != RolloutRunning {
		t.Fatalf("a publish failing the schema, aborting: %d %s; rollout %s", resp.StatusCode, body, got.State)
	}
	resp, body = do(t, c, http.MethodPost, s.URL()+"/control/namespaces/app/publish", `{"puts":{"a":3},"abort_rollout":true}`)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("publish aborting: %d %s", resp.StatusCode, body)
	}
	got, _ := s.Rollout("app", rec.ID)
	if got.State != RolloutReverted || !strings.Contains(got.Reason, "aborted by a publish") || len(got.Revisions) != 2 {
		t.Fatalf("after the aborting publish: %+v", got)
	}
	if rev := decode[controlapi.RevisionReply](t, body).Revision; rev != got.Revisions[1]+1 {
		t.Fatalf("the publish is revision %d, the revert %d", rev, got.Revisions[1])
	}
	if got, staged := content(t, s, "app"); staged || got["a"] != "3" || got["new"] != "" {
		t.Fatalf("content %v", got)
	}
	_ = f
	// Reserved keys are holdfast's.
	for _, body := range []string{`{"puts":{"$holdfast/rollout":{}}}`, `{"deletes":["$holdfast/x"]}`} {
		resp, data := do(t, c, http.MethodPost, s.URL()+"/control/namespaces/app/publish", body)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(data), "reserved") {
			t.Errorf("publish %s: %d %s", body, resp.StatusCode, data)
		}
	}
	if _, err := s.Publish("app", map[string]any{rollout.Key: 1}); !errors.Is(err, ErrInvalid) {
		t.Errorf("Publish of the rollout key: %v", err)
	}
	if _, err := s.StartRollout("app", RolloutSpec{Puts: map[string]json.RawMessage{"$holdfast/x": json.RawMessage(`1`)}, Stages: []float64{100}}); !errors.Is(err, ErrInvalid) {
		t.Errorf("rollout of a reserved key: %v", err)
	}
}

func TestRolloutSpecErrors(t *testing.T) {
	s := start(t)
	if _, err := s.Publish("app", map[string]any{"a": 1}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetSchema("strict", []byte(`{"type":"object","properties":{"a":{"type":"integer"}}}`)); err != nil {
		t.Fatal(err)
	}
	one := map[string]json.RawMessage{"a": json.RawMessage(`2`)}
	for _, tc := range []struct {
		name string
		ns   string
		spec RolloutSpec
		want error
	}{
		{"no change", "app", RolloutSpec{Stages: []float64{100}}, ErrInvalid},
		{"no stages", "app", RolloutSpec{Puts: one}, ErrInvalid},
		{"stage 0", "app", RolloutSpec{Puts: one, Stages: []float64{0, 100}}, ErrInvalid},
		{"stage 101", "app", RolloutSpec{Puts: one, Stages: []float64{101}}, ErrInvalid},
		{"not increasing", "app", RolloutSpec{Puts: one, Stages: []float64{10, 10}}, ErrInvalid},
		{"decreasing", "app", RolloutSpec{Puts: one, Stages: []float64{50, 10}}, ErrInvalid},
		{"NaN", "app", RolloutSpec{Puts: one, Stages: []float64{math.NaN()}}, ErrInvalid},
		{"not to 100", "app", RolloutSpec{Puts: one, Stages: []float64{10, 50}}, ErrInvalid},
		{"negative bake", "app", RolloutSpec{Puts: one, Stages: []float64{100}, Bake: -1}, ErrInvalid},
		{"negative max_nacks", "app", RolloutSpec{Puts: one, Stages: []float64{100}, MaxNacks: -1}, ErrInvalid},
		{"on_timeout", "app", RolloutSpec{Puts: one, Stages: []float64{100}, OnTimeout: "panic"}, ErrInvalid},
		{"bad key", "app", RolloutSpec{Puts: map[string]json.RawMessage{"a b": json.RawMessage(`1`)}, Stages: []float64{100}}, ErrInvalid},
		{"bad value", "app", RolloutSpec{Puts: map[string]json.RawMessage{"a": json.RawMessage(`{`)}, Stages: []float64{100}}, ErrInvalid},
		{"put and deleted", "app", RolloutSpec{Puts: one, Deletes: []string{"a"}, Stages: []float64{100}}, ErrInvalid},
		{"reserved delete", "app", RolloutSpec{Deletes: []string{rollout.Key}, Stages: []float64{100}}, ErrInvalid},
		{"bad namespace", "A!", RolloutSpec{Puts: one, Stages: []float64{100}}, ErrInvalid},
		{"unknown namespace", "nope", RolloutSpec{Puts: one, Stages: []float64{100}}, ErrUnknownNamespace},
		{"too many stages", "app", RolloutSpec{Puts: one, Stages: make([]float64, maxRolloutStages+1)}, ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := s.StartRollout(tc.ns, tc.spec); !errors.Is(err, tc.want) {
				t.Fatalf("StartRollout = %v, want %v", err, tc.want)
			}
		})
	}
	var se *SchemaError
	if _, err := s.StartRollout("strict", RolloutSpec{Puts: map[string]json.RawMessage{"a": json.RawMessage(`"x"`)}, Stages: []float64{100}}); !errors.As(err, &se) {
		t.Fatalf("a change failing the schema: %v", err)
	}
	if list, _ := s.Rollouts("app"); len(list) != 0 {
		t.Fatalf("refused rollouts recorded: %+v", list)
	}
	if _, err := s.Rollout("app", "r-nope"); !errors.Is(err, ErrUnknownRollout) {
		t.Fatalf("Rollout of an unknown id: %v", err)
	}
	for _, call := range []func(string, string) (RolloutRecord, error){s.AbortRollout, s.PromoteRollout} {
		if _, err := call("app", "r-nope"); !errors.Is(err, ErrUnknownRollout) {
			t.Fatalf("an action on an unknown id: %v", err)
		}
	}
}

// deadURL is an http URL nothing answers at (a port kept for t).
func deadURL(t *testing.T) string {
	return fmt.Sprintf("http://127.0.0.1:%d", testutil.LoopbackPort(t))
}

func TestRolloutHTTP(t *testing.T) {
	s := start(t)
	f := newFleet(t, s, "app", 20)
	c := newClient(t)
	base := s.URL() + "/control/namespaces/app/rollouts"
	before := s.Head()
	for _, tc := range []struct {
		body, code, msg string
		status          int
	}{
		{``, transport.CodeBadRequest, "empty body", 400},
		{`{"puts":{"a":2}}`, transport.CodeBadRequest, "stages", 400},
		{`{"puts":{"a":2},"stages":[10,5]}`, transport.CodeBadRequest, "increasing", 400},
		{`{"puts":{"a":2},"stages":[100],"bake":"soon"}`, transport.CodeBadRequest, "bake", 400},
		{`{"puts":{"a":2},"stages":[100],"report_timeout":"-1s"}`, transport.CodeBadRequest, "report_timeout", 400},
		{`{"puts":{"a":2},"stages":[100],"stage_timeout":true}`, transport.CodeBadRequest, "stage_timeout", 400},
		{`{"puts":{"a":2},"stages":[100],"on_timeout":"wait"}`, transport.CodeBadRequest, "on_timeout", 400},
		{`{"puts":{"a":2},"stages":[100],"typo":1}`, transport.CodeBadRequest, "typo", 400},
		{`{"puts":{"$holdfast/rollout":2},"stages":[100]}`, transport.CodeBadRequest, "reserved", 400},
		{`{"puts":{"a":2},"stages":[10,50]}`, transport.CodeBadRequest, "must be 100", 400},
		{`{"puts":{"a":2},"stages":[100],"on_breach":"wait"}`, transport.CodeBadRequest, "on_breach", 400},
		{`{"puts":{"a":2},"stages":[100],"gates":[{"prometheus":"http://127.0.0.1:1","query":"up"}]}`, transport.CodeBadRequest, "gate", 400},
		{`{"puts":{"a":2},"stages":[100],"gates":[{"prometheus":"` + deadURL(t) + `","query":"up","max":1}]}`, transport.CodeBadRequest, "first check failed", 400},
	} {
		resp, data := do(t, c, http.MethodPost, base, tc.body)
		if eb := decode[transport.ErrorBody](t, data); resp.StatusCode != tc.status || eb.Error != tc.code || !strings.Contains(eb.Message, tc.msg) {
			t.Errorf("POST %s: %d %s", tc.body, resp.StatusCode, data)
		}
	}
	resp, data := do(t, c, http.MethodPost, s.URL()+"/control/namespaces/nope/rollouts", `{"puts":{"a":2},"stages":[100]}`)
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("unknown namespace: %d %s", resp.StatusCode, data)
	}
	if head := s.Head(); head != before {
		t.Fatalf("refused starts committed: head %d, was %d", head, before)
	}
	resp, data = do(t, c, http.MethodPost, base, `{"puts":{"a":2},"deletes":["b"],"stages":[10,100],"bake":"1h","max_nacks":1,"prevalidate":true,"report_timeout":"10s","stage_timeout":"5m","on_timeout":"hold",
		"on_breach":"hold","actor":"alice","reason":"ticket 9"}`)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST: %d %s", resp.StatusCode, data)
	}
	var started map[string]any
	if err := json.Unmarshal(data, &started); err != nil || len(started) != 2 {
		t.Fatalf("reply %s: want id and revision only", data)
	}
	sr := decode[controlapi.RolloutStarted](t, data)
	if sr.ID == "" || sr.Revision != s.Head() {
		t.Fatalf("reply %s, head %d", data, s.Head())
	}
	resp, data = do(t, c, http.MethodPost, base, `{"puts":{"a":3},"stages":[100]}`)
	if eb := decode[transport.ErrorBody](t, data); resp.StatusCode != http.StatusConflict || eb.Error != transport.CodeConflict {
		t.Errorf("second rollout: %d %s", resp.StatusCode, data)
	}
	f.ackStage()
	waitRollout(t, s, "app", sr.ID, "the bake", func(r RolloutRecord) bool { return r.Baking })
	resp, data = do(t, c, http.MethodGet, base+"/"+sr.ID, "")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET: %d %s", resp.StatusCode, data)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"id", "state", "stage", "stages", "clients", "served", "acked", "nacked", "would_nack", "lagging", "reason", "revisions"} {
		if _, ok := fields[k]; !ok {
			t.Errorf("record %s lacks %q", data, k)
		}
	}
	full := decode[controller.Record](t, data)
	if len(full.Decisions) == 0 || full.Decisions[0].Actor != "alice" || !strings.Contains(full.Decisions[0].Reason, "ticket 9") || full.OnBreach != "hold" {
		t.Errorf("the start's actor, reason and on_breach: %s", data)
	}
	rec := decode[RolloutRecord](t, data)
	if rec.ID != sr.ID || rec.State != "running" || rec.Stage != 10 || len(rec.Stages) != 2 || rec.Clients != 20 || rec.Served != 2 || rec.Acked != 20 || rec.MaxNacks != 1 || !rec.Prevalidate || rec.Revisions[0] != sr.Revision {
		t.Errorf("record %s", data)
	}
	resp, data = do(t, c, http.MethodGet, base, "")
	if list := decode[struct{ Rollouts []RolloutRecord }](t, data); resp.StatusCode != http.StatusOK || len(list.Rollouts) != 1 || list.Rollouts[0].ID != sr.ID {
		t.Errorf("list: %d %s", resp.StatusCode, data)
	}
	resp, data = do(t, c, http.MethodPost, base+"/"+sr.ID+"/promote", "")
	if rec := decode[RolloutRecord](t, data); resp.StatusCode != http.StatusOK || rec.State != "promoted" {
		t.Fatalf("promote: %d %s", resp.StatusCode, data)
	}
	resp, data = do(t, c, http.MethodPost, base+"/"+sr.ID+"/abort", "")
	if eb := decode[transport.ErrorBody](t, data); resp.StatusCode != http.StatusConflict || eb.Error != transport.CodeConflict || !strings.Contains(eb.Message, "promoted") {
		t.Errorf("abort after the promotion: %d %s", resp.StatusCode, data)
	}
	// A second rollout, aborted; the list is newest first.
	resp, data = do(t, c, http.MethodPost, base, `{"deletes":["new"],"stages":[100]}`)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("a second rollout: %d %s", resp.StatusCode, data)
	}
	second := decode[controlapi.RolloutStarted](t, data)
	resp, data = do(t, c, http.MethodPost, base+"/"+second.ID+"/abort", "")
	if rec := decode[RolloutRecord](t, data); resp.StatusCode != http.StatusOK || rec.State != "reverted" || rec.Reason == "" {
		t.Fatalf("abort: %d %s", resp.StatusCode, data)
	}
	_, data = do(t, c, http.MethodGet, base, "")
	if list := decode[struct{ Rollouts []RolloutRecord }](t, data); len(list.Rollouts) != 2 || list.Rollouts[0].ID != second.ID {
		t.Errorf("list: %s", data)
	}
	for _, tc := range []struct {
		method, url string
		status      int
	}{
		{http.MethodGet, base + "/r-nope", 404},
		{http.MethodPost, base + "/r-nope/abort", 404},
		{http.MethodPost, base + "/r-nope/promote", 404},
		{http.MethodGet, s.URL() + "/control/namespaces/A!/rollouts", 400},
		{http.MethodDelete, base, 405},
		{http.MethodGet, base + "/" + sr.ID + "/abort", 405},
	} {
		if resp, data := do(t, c, tc.method, tc.url, ""); resp.StatusCode != tc.status {
			t.Errorf("%s %s: %d %s, want %d", tc.method, tc.url, resp.StatusCode, data, tc.status)
		}
	}
}

// TestRolloutAcksOverHTTP: the reports that count come through POST
// /sdk/ack, single, batched, and as a relay forwards them (each ack its
// own client's).
func TestRolloutAcksOverHTTP(t *testing.T) {
	s := start(t)
	f := newFleet(t, s, "app", 30)
	rec := mustStart(t, s, "app", RolloutSpec{Puts: goodChange(), Stages: []float64{50, 100}, Prevalidate: true, MaxNacks: 5})
	in, out, rev, st := f.split()
	c := newClient(t)
	post := func(body string) {
		t.Helper()
		if resp, data := do(t, c, http.MethodPost, s.URL()+transport.PathAck, body); resp.StatusCode != http.StatusNoContent {
			t.Fatalf("ack %s: %d %s", body, resp.StatusCode, data)
		}
	}
	post(fmt.Sprintf(`{"client_id":%q,"ns":"app","revision":%d,"status":"ack","rollout":%q}`, in[0], rev, st.ID))
	post(fmt.Sprintf(`{"client_id":%q,"acks":[{"ns":"app","revision":%d,"status":"ack","rollout":%q}]}`, in[1], rev, st.ID))
	var relayed []string
	for _, id := range in[2:] {
		relayed = append(relayed, fmt.Sprintf(`{"client_id":%q,"ns":"app","revision":%d,"status":"ack","rollout":%q}`, id, rev, st.ID))
	}
	relayed = append(relayed, fmt.Sprintf(`{"client_id":%q,"ns":"app","revision":%d,"status":"would_nack","error":"strict","rollout":%q}`, out[0], rev, st.ID))
	for _, id := range out { // with prevalidation, the stage waits for the others' reports too
		relayed = append(relayed, fmt.Sprintf(`{"client_id":%q,"ns":"app","revision":%d,"status":"ack"}`, id, rev))
	}
	post(`{"client_id":"relay-1","acks":[` + strings.Join(relayed, ",") + `]}`)
	got := waitRollout(t, s, "app", rec.ID, "stage 100", atStage(100))
	if got.Served != len(in) || got.WouldNack != 1 {
		t.Fatalf("%+v", got)
	}
	resp, data := do(t, c, http.MethodPost, s.URL()+transport.PathAck, fmt.Sprintf(`{"client_id":"c","ns":"app","revision":1,"status":"ack","rollout":%q}`, strings.Repeat("r", 65)))
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("a long rollout id: %d %s", resp.StatusCode, data)
	}
}

// TestRolloutSchemaSeesTheBase: a server's schema checks the content
// without reserved keys, on a rollout's stages, publishes and rollbacks;
// a rollback does not bring an old rollout back.
func TestRolloutSchemaSeesTheBase(t *testing.T) {
	s := start(t)
	if err := s.SetSchema("app", []byte(`{"type":"object","properties":{"a":{"type":"integer"}},"additionalProperties":false}`)); err != nil {
		t.Fatal(err)
	}
	base, err := s.Publish("app", map[string]any{"a": 1})
	if err != nil {
		t.Fatal(err)
	}
	rec := mustStart(t, s, "app", RolloutSpec{Puts: map[string]json.RawMessage{"a": json.RawMessage(`2`)}, Stages: []float64{50, 100}, Bake: time.Hour})
	rec, err = s.AbortRollout("app", rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Rollback("app", rec.Revisions[0]); err != nil { // the content then held the rollout key
		t.Fatalf("rollback to a stage's revision: %v", err)
	}
	if got, staged := content(t, s, "app"); staged || got["a"] != "1" {
		t.Fatalf("after the rollback: %v (rollout key %v)", got, staged)
	}
	if _, err := s.Publish("app", map[string]any{"a": 3}); err != nil {
		t.Fatal(err)
	}
	_ = base
}

func TestRolloutEndsOnResetAndRestore(t *testing.T) {
	s := start(t)
	newFleet(t, s, "app", 10)
	rec := mustStart(t, s, "app", RolloutSpec{Puts: goodChange(), Stages: []float64{50, 100}})
	head := s.Head()
	if err := s.RestoreTo(head); err != nil {
		t.Fatal(err)
	}
	got, _ := s.Rollout("app", rec.ID)
	if got.State != RolloutReverted || !strings.Contains(got.Reason, "restored") || s.Head() != head || len(got.Revisions) != 1 {
		t.Fatalf("after RestoreTo: %+v, head %d", got, s.Head())
	}
	// The restored content keeps the key until the next publish drops it.
	if _, staged := content(t, s, "app"); !staged {
		t.Fatal("the restore dropped the key")
	}
	if _, err := s.Publish("app", map[string]any{"a": 5}); err != nil {
		t.Fatalf("publish after the restore: %v", err)
	}
	if got, staged := content(t, s, "app"); staged || got["a"] != "5" {
		t.Fatalf("after the publish: %v (rollout key %v)", got, staged)
	}
	rec = mustStart(t, s, "app", RolloutSpec{Puts: goodChange(), Stages: []float64{50, 100}})
	s.ResetStore()
	if got, _ = s.Rollout("app", rec.ID); got.State != RolloutReverted || !strings.Contains(got.Reason, "reset") {
		t.Fatalf("after ResetStore: %+v", got)
	}
	if s.Head() != 0 {
		t.Fatalf("a commit after the reset: head %d", s.Head())
	}
	// The new store's revisions are not the old rollout's.
	rev, _ := s.Publish("app", map[string]any{"a": 1})
	s.recordAcks([]transport.Ack{{ClientID: "x", Namespace: "app", Revision: rev, Status: transport.AckRejected}})
	if again, _ := s.Rollout("app", rec.ID); again.Nacked != 0 {
		t.Fatalf("a report of the new store counted: %+v", again)
	}
}

// TestRolloutReasonIsBounded: many long nack errors make a short reason.
func TestRolloutReasonIsBounded(t *testing.T) {
	s := start(t)
	f := newFleet(t, s, "app", 100)
	rec := mustStart(t, s, "app", RolloutSpec{Puts: goodChange(), Stages: []float64{100}, MaxNacks: 99})
	_, _, rev, st := f.split()
	f.report(rev, transport.AckRejected, st.ID, strings.Repeat("e", 4000), f.ids...)
	rec = waitRollout(t, s, "app", rec.ID, "the revert", inState(RolloutReverted))
	if rec.Nacked != 100 || len(rec.Reason) > controller.MaxReasonBytes || !strings.Contains(rec.Reason, "100 client(s)") {
		t.Fatalf("reason of %d bytes: %.300s", len(rec.Reason), rec.Reason)
	}
}

// TestRolloutStageEndLatency measures the time from the last report of a
// stage to the commit of the next stage: the controller wakes on the
// report, so it is far below any poll interval.
func TestRolloutStageEndLatency(t *testing.T) {
	s := start(t)
	f := newFleet(t, s, "app", 1000)
	rec := mustStart(t, s, "app", RolloutSpec{Puts: goodChange(), Stages: []float64{1, 10, 50, 100}})
	var worst time.Duration
	for _, pct := range []float64{1, 10, 50} {
		waitRollout(t, s, "app", rec.ID, fmt.Sprintf("stage %v", pct), atStage(pct))
		in, out, rev, st := f.split()
		f.report(rev, transport.AckApplied, "", "", out...)
		last := time.Now()
		f.report(rev, transport.AckApplied, st.ID, "", in...) // the last reports: the stage's members
		waitRollout(t, s, "app", rec.ID, "the stage's end", func(r RolloutRecord) bool { return r.Stage > pct || r.State != RolloutRunning })
		d := stageEnded(t, s, "app", rec.ID).Sub(last)
		t.Logf("stage %v%% of 1000 clients: last report (%d members, one batch) to the next stage's commit: %v", pct, len(in), d)
		worst = max(worst, d)
	}
	if worst > 500*time.Millisecond {
		t.Errorf("a stage ended %v after its last report", worst)
	}
}

// BenchmarkRolloutStageEnd: with 10,000 clients known, the time from the
// report that completes a 1% stage (its 100 members, one batch) to the
// commit of the next stage, reported as stage-end-µs.
func BenchmarkRolloutStageEnd(b *testing.B) {
	s := start(b)
	f := newFleet(b, s, "app", 10000)
	var total time.Duration
	for b.Loop() {
		rec := mustStart(b, s, "app", RolloutSpec{Puts: goodChange(), Stages: []float64{1, 100}})
		in, _, rev, st := f.split()
		t0 := time.Now()
		f.report(rev, transport.AckApplied, st.ID, "", in...)
		waitRollout(b, s, "app", rec.ID, "stage 100", atStage(100))
		total += stageEnded(b, s, "app", rec.ID).Sub(t0)
		if _, err := s.AbortRollout("app", rec.ID); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(total.Microseconds())/float64(b.N), "stage-end-µs")
}

func TestRolloutAfterClose(t *testing.T) {
	s, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Publish("app", map[string]any{"a": 1}); err != nil {
		t.Fatal(err)
	}
	s.recordAcks([]transport.Ack{{ClientID: "c", Namespace: "app", Revision: 1, Status: transport.AckApplied}})
	rec := mustStart(t, s, "app", RolloutSpec{Puts: goodChange(), Stages: []float64{100}})
	done := make(chan error, 1)
	go func() {
		_, err := s.WaitRollout(context.Background(), "app", rec.ID)
		done <- err
	}()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Fatalf("WaitRollout across Close: %v", err)
	}
	if _, err := s.StartRollout("other", RolloutSpec{Puts: goodChange(), Stages: []float64{100}}); !errors.Is(err, ErrClosed) {
		t.Fatalf("StartRollout after Close: %v", err)
	}
}

// TestRolloutThroughARelay: reports a relay's data plane takes, forwarded
// as a relay forwards them (one batch, each ack its client's), count at
// the origin as the origin's own.
func TestRolloutThroughARelay(t *testing.T) {
	origin := start(t)
	fl := newFleet(t, origin, "app", 20)
	rec := mustStart(t, origin, "app", RolloutSpec{Puts: goodChange(), Stages: []float64{50, 100}, Prevalidate: true, MaxNacks: 3})
	in, out, rev, st := fl.split()
	forwarded := make(chan error, 1)
	relay := startRelayPlane(t, origin, func(acks []transport.Ack, _ bool) {
		body, err := json.Marshal(wire.AckBatch{ClientID: "relay-1", Acks: acks})
		if err == nil {
			var got wire.AckBatch
			if err = json.Unmarshal(body, &got); err == nil {
				origin.recordAcks(origin.store.Known(got.Acks))
			}
		}
		forwarded <- err
	})
	var acks []string
	for _, c := range in {
		acks = append(acks, fmt.Sprintf(`{"client_id":%q,"ns":"app","revision":%d,"status":"ack","rollout":%q}`, c, rev, st.ID))
	}
	for _, c := range out[:2] {
		acks = append(acks, fmt.Sprintf(`{"client_id":%q,"ns":"app","revision":%d,"status":"would_nack","error":"strict","rollout":%q}`, c, rev, st.ID))
	}
	for _, c := range out { // with prevalidation, the stage waits for the others' reports too
		acks = append(acks, fmt.Sprintf(`{"client_id":%q,"ns":"app","revision":%d,"status":"ack"}`, c, rev))
	}
	c := newClient(t)
	if resp, data := do(t, c, http.MethodPost, relay.URL()+transport.PathAck, `{"client_id":"x","acks":[`+strings.Join(acks, ",")+`]}`); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("ack at the relay: %d %s", resp.StatusCode, data)
	}
	if err := <-forwarded; err != nil {
		t.Fatalf("forwarding: %v", err)
	}
	got := waitRollout(t, origin, "app", rec.ID, "stage 100", atStage(100))
	if got.Served != len(in) || got.WouldNack != 2 {
		t.Fatalf("at the origin: %+v", got)
	}
}
