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
// stage's bake ends counting every member reported, none gone, and the
// rollout promotes.
func TestRelayTellsReportsAgainToARestartedUpstream(t *testing.T) {
	origin := holdfasttest.NewServer(t, holdfasttest.WithHeartbeat(200*time.Millisecond))
	if _, err := origin.Publish("app", map[string]any{"a": 1}); err != nil {
		t.Fatal(err)
	}
	r, url := startRelay(t, origin.URL())
	const n = 6
	nss := relayedClients(t, url, n)
	warmUp(t, origin, n)

	rec, err := origin.StartRollout("app", fakeserver.RolloutSpec{Puts: map[string]json.RawMessage{"a": json.RawMessage(`2`)},
		Stages: []float64{50, 100}, Bake: 5 * time.Second, StageTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	stageRev := baking(t, origin, rec.ID, n)
	heardAll := func() bool { return heardAt(origin, stageRev) == n }
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

// relayedClients opens app in n clients of the relay at url, client-0
// and on.
func relayedClients(t *testing.T, url string, n int) []*config.Namespace {
	t.Helper()
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
	return nss
}

// warmUp runs a first rollout of app at origin to its end, so that the
// origin counts its n clients' plain reports (which their relay sends as
// cohorts) by client, and the next rollout's cut is over the clients it
// knows, never blind (a blind stage bakes at once, on nobody, and is cut
// again, its clients reporting anew, once they are known).
func warmUp(t *testing.T, origin *holdfasttest.Server, n int) {
	t.Helper()
	first, err := origin.StartRollout("app", fakeserver.RolloutSpec{Puts: map[string]json.RawMessage{"a": json.RawMessage(`1`), "b": json.RawMessage(`1`)},
		Stages: []float64{100}, StageTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if end := waitRolloutEnd(t, origin, first.ID); end.State != fakeserver.RolloutPromoted {
		t.Fatalf("the first rollout %s: %s", end.State, end.Reason)
	}
	testutil.Eventually(t, waitLimit, func() bool { return heardAt(origin, origin.Head()) == n }, "every client's report of the promotion")
}

// baking waits for rollout id of app at origin to bake its stage with
// its n clients' reports of it heard, and returns the stage's revision.
func baking(t *testing.T, origin *holdfasttest.Server, id string, n int) int64 {
	t.Helper()
	var rev int64
	testutil.Eventually(t, waitLimit, func() bool {
		got, err := origin.Rollout("app", id)
		if err != nil {
			t.Fatal(err)
		}
		rev = got.StageRevision
		return got.Baking && heardAt(origin, rev) == n
	}, "the stage baking, every client's report of it heard")
	return rev
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
	relayedClients(t, url, 3)
	warmUp(t, origin, 3)
	rec, err := origin.StartRollout("app", fakeserver.RolloutSpec{Puts: map[string]json.RawMessage{"a": json.RawMessage(`2`)},
		Stages: []float64{50, 100}, Bake: time.Minute, StageTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	baking(t, origin, rec.ID, 3)
	fromClients, atOrigin := r.Stats().Acks, origin.Stats().Acks
	testutil.Eventually(t, waitLimit, func() bool { return origin.Stats().Acks >= atOrigin+3 }, "the relay repeats its clients' reports")
	if got := r.Stats().Acks; got != fromClients {
		t.Fatalf("the relay's clients reported %d times meanwhile, want none", got-fromClients)
	}
}
