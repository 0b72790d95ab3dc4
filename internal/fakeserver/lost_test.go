package fakeserver

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/wire"
	"github.com/holdfast-dev/holdfast/transport"
)

// TestRolloutHoldsOnReportsARelayLost: a relay's presence report saying
// that its full ack queue dropped outcomes of the namespace holds the
// rollout's stage though every member it knows reported: at the stage's
// timeout it holds, and its reason names the relay and the bound.
func TestRolloutHoldsOnReportsARelayLost(t *testing.T) {
	s := start(t)
	f := newFleet(t, s, "app", 20)
	rec := mustStart(t, s, "app", RolloutSpec{Puts: goodChange(), Stages: []float64{50, 100}, Bake: 5 * time.Millisecond,
		StageTimeout: 300 * time.Millisecond, OnTimeout: OnTimeoutHold})
	body, err := json.Marshal(wire.PresenceReport{RelayID: "edge-7", Epoch: "e", Seq: 1, Full: true, EveryMillis: 60_000,
		Lost: []wire.LostReports{{Relay: "edge-7", Kind: wire.LostAcks, Namespace: "app", N: 3, Last: time.Now()}}})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := newClient(t).Post(s.URL()+transport.PathPresence, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("presence report: %s", resp.Status)
	}
	f.ackStage()
	rec = waitRollout(t, s, "app", rec.ID, "held, naming the relay", func(r RolloutRecord) bool { return r.Held })
	if rec.Stage != 50 || !strings.Contains(rec.Reason, "3 report(s) missing") ||
		!strings.Contains(rec.Reason, `relay edge-7 dropped 3 outcome(s) of "app" past its full ack queue`) {
		t.Fatalf("held: stage %v, reason %q", rec.Stage, rec.Reason)
	}
}
