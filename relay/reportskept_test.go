package relay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/holdfasttest"
	"github.com/holdfast-dev/holdfast/internal/fakeserver"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/transport"
)

// TestRelayTellsReportsAgainToARestartedUpstream: the relay's clients
// report once (the relay lists reports-kept); the reference server
// restarts mid-stage, its reports forgotten, and hears every client's
// report again from the relay, none of the clients repeating itself. The
// stage's bake (longer than a liveness window, with no report repeated)
// counts every member, none gone: a connected client is live by its
// presence, and the rollout promotes.
func TestRelayTellsReportsAgainToARestartedUpstream(t *testing.T) {
	origin := holdfasttest.NewServer(t, holdfasttest.WithHeartbeat(200*time.Millisecond))
	if _, err := origin.Publish("app", map[string]any{"a": 1}); err != nil {
		t.Fatal(err)
	}
	r, url := startRelay(t, origin.URL())
	const n = 6
	var nss []*config.Namespace
	for i := range n {
		c := newClient(t, url, config.WithClientID(fmt.Sprintf("client-%d", i)))
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		ns, err := c.Namespace(ctx, "app")
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		nss = append(nss, ns)
	}
	// A first rollout, so that the origin counts the clients' plain
	// reports (which the relay sends as cohorts) by client, and the
	// next one's cut is over the clients it knows, never blind (a blind
	// stage with nobody in it starts over once clients are known).
	first, err := origin.StartRollout("app", fakeserver.RolloutSpec{Puts: map[string]json.RawMessage{"a": json.RawMessage(`1`), "b": json.RawMessage(`1`)},
		Stages: []float64{100}, StageTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if end := waitRolloutEnd(t, origin, first.ID); end.State != fakeserver.RolloutPromoted {
		t.Fatalf("the first rollout %s: %s", end.State, end.Reason)
	}
	testutil.Eventually(t, waitLimit, func() bool { return heardAt(origin, origin.Head()) == n }, "every client's report of the promotion")

	rec, err := origin.StartRollout("app", fakeserver.RolloutSpec{Puts: map[string]json.RawMessage{"a": json.RawMessage(`2`)},
		Stages: []float64{50, 100}, Bake: 5 * time.Second, StageTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	var stageRev int64
	testutil.Eventually(t, waitLimit, func() bool {
		got, err := origin.Rollout("app", rec.ID)
		if err != nil {
			t.Fatal(err)
		}
		stageRev = got.StageRevision
		return got.Baking
	}, "stage 50 baking")
	heardAll := func() bool { return heardAt(origin, stageRev) == n }
	testutil.Eventually(t, waitLimit, heardAll, "every client's report of the stage at the origin")
	defer func() {
		if t.Failed() {
			t.Logf("stage revision %d; at the origin: %+v", stageRev, origin.Clients())
		}
	}()
	before := r.Stats().Acks

	if err := origin.RestartForgettingReports(); err != nil {
		t.Fatal(err)
	}
	if heardAll() {
		t.Fatal("the origin's reports are not forgotten")
	}
	testutil.Eventually(t, waitLimit, heardAll, "every client's report heard again at the restarted origin")
	if got := r.Stats().Acks; got != before {
		t.Fatalf("the relay received %d reports from its clients meanwhile, want none: the relay tells them again", got-before)
	}

	end := waitRolloutEnd(t, origin, rec.ID)
	if end.State != fakeserver.RolloutPromoted {
		t.Fatalf("rollout %s: %s", end.State, end.Reason)
	}
	for _, d := range end.Decisions {
		if d.What == "bake-end" && d.Stage == 50 && (d.Counts == nil || d.Counts.InStage == 0 || d.Counts.Reported != d.Counts.InStage || d.Counts.Gone != 0) {
			t.Fatalf("stage 50's bake ended on %+v: %s; want every member reported, none gone", d.Counts, d.Reason)
		}
	}
	for _, ns := range nss {
		testutil.Eventually(t, waitLimit, func() bool { return ns.Int("a", 0) == 2 }, "a client serves a=2")
	}
}

// heardAt counts the clients of app the origin heard at revision rev.
func heardAt(origin *holdfasttest.Server, rev int64) int {
	at := 0
	for _, c := range origin.Clients() {
		if c.Namespace == "app" && c.AckedRevision == rev {
			at++
		}
	}
	return at
}

// waitRolloutEnd waits for rollout id of app at origin to end.
func waitRolloutEnd(t *testing.T, origin *holdfasttest.Server, id string) fakeserver.RolloutRecord {
	t.Helper()
	var rec fakeserver.RolloutRecord
	testutil.Eventually(t, 30*time.Second, func() bool {
		var err error
		if rec, err = origin.Rollout("app", id); err != nil {
			t.Fatal(err)
		}
		return rec.State != fakeserver.RolloutRunning
	}, "the rollout's end")
	return rec
}

// TestRelayRepeatsReportsToAnOldUpstream: the relay tells its clients
// they need not repeat themselves (reports-kept), and repeats their
// reports itself, while a rollout runs, to an upstream that does not
// keep them (an older server, which counts a silent client gone).
func TestRelayRepeatsReportsToAnOldUpstream(t *testing.T) {
	origin := holdfasttest.NewServer(t, holdfasttest.WithHeartbeat(200*time.Millisecond),
		holdfasttest.WithoutCapability(transport.CapabilityReportsKept))
	if _, err := origin.Publish("app", map[string]any{"a": 1}); err != nil {
		t.Fatal(err)
	}
	r, url := startRelay(t, origin.URL())
	for i := range 3 {
		c := newClient(t, url, config.WithClientID(fmt.Sprintf("client-%d", i)))
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		_, err := c.Namespace(ctx, "app")
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	rec, err := origin.StartRollout("app", fakeserver.RolloutSpec{Puts: map[string]json.RawMessage{"a": json.RawMessage(`2`)},
		Stages: []float64{50, 100}, Bake: time.Minute, StageTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	var stageRev int64
	testutil.Eventually(t, waitLimit, func() bool {
		got, err := origin.Rollout("app", rec.ID)
		if err != nil {
			t.Fatal(err)
		}
		stageRev = got.StageRevision
		return got.Baking && heardAt(origin, stageRev) == 3
	}, "stage 50 baking, every client heard")
	fromClients, atOrigin := r.Stats().Acks, origin.Stats().Acks
	testutil.Eventually(t, waitLimit, func() bool { return origin.Stats().Acks >= atOrigin+3 }, "the relay repeats its clients' reports")
	if got := r.Stats().Acks; got != fromClients {
		t.Fatalf("the relay's clients reported %d times meanwhile, want none", got-fromClients)
	}
}
