package server_test

import (
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/server/store"
)

// TestRolloutConnectedClientsLiveWithoutRepeats: clients of a server that
// keeps reports (reports-kept), some direct, some behind a relay, report
// each stage once and never again while it bakes, for longer than the
// liveness window (two heartbeats, at least 3 s): connected, they are
// live by their presence, and every bake ends with its members reported,
// none gone.
func TestRolloutConnectedClientsLiveWithoutRepeats(t *testing.T) {
	_, base := startServer(t, store.Config{Kind: store.KindMemory})
	publish(t, base, "app", map[string]any{"v": 1})
	direct := sdkClients(t, base, "app", 4)
	rr := startRestartableRelay(t, base)
	relayed := sdkClients(t, rr.url(), "app", 4)
	testutil.Eventually(t, 10*time.Second, func() bool {
		return len(fleetClients(t, base)) == 8
	}, "every client reported")
	id := startRollout(t, base, "app", controlapi.RolloutRequest{Puts: testutil.JSONValues(t, map[string]any{"v": 2}), Stages: []float64{50, 100},
		Bake: "4s", StageTimeout: "60s"})
	rec := waitRolloutEnd(t, base, "app", id, 40*time.Second)
	if rec.State != "promoted" {
		t.Fatalf("record %+v", rec)
	}
	ends := 0
	for _, d := range rec.Decisions {
		if d.What != "bake-end" {
			continue
		}
		ends++
		if d.Counts == nil || d.Counts.Reported != d.Counts.InStage || !strings.Contains(d.Reason, ", 0 gone,") {
			t.Errorf("decision %q: %s; want every member reported, none gone", d.What, d.Reason)
		}
	}
	if ends != 2 {
		t.Fatalf("%d bakes ended, want 2: %+v", ends, rec.Decisions)
	}
	for _, ns := range append(direct, relayed...) {
		testutil.Eventually(t, 10*time.Second, func() bool { return ns.Int("v", 0) == 2 }, "a client serves v=2")
	}
}
