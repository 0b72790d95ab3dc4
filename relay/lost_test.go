package relay_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/holdfasttest"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/relay"
	"github.com/holdfast-dev/holdfast/transport"
)

// TestDroppedAcksHoldTheRollout: a relay whose ack queue is full drops
// outcomes; its presence reports tell the origin, whose rollout of the
// namespace then holds though every member it knows reported (its bake
// does not end), its reason naming the relay and the bound.
func TestDroppedAcksHoldTheRollout(t *testing.T) {
	origin := holdfasttest.NewServer(t, holdfasttest.WithHeartbeat(200*time.Millisecond))
	rev := mustPublish(t, origin, "app", map[string]any{"k": 1})
	_, url := startRelay(t, origin.URL(), relay.WithID("edge-7"), relay.WithMaxPendingAcks(2))
	post := func(rev int64, rolloutID string, clients ...string) {
		t.Helper()
		var acks []string
		for _, c := range clients {
			acks = append(acks, fmt.Sprintf(`{"client_id":%q,"ns":"app","revision":%d,"status":"ack","rollout":%q}`, c, rev, rolloutID))
		}
		resp, err := http.Post(url+transport.PathAck, "application/json",
			strings.NewReader(`{"client_id":"x","acks":[`+strings.Join(acks, ",")+`]}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			t.Fatalf("acks at the relay: %s", resp.Status)
		}
	}
	known := func(n int) func() bool {
		return func() bool {
			got := 0
			for _, c := range origin.Clients() {
				if c.Namespace == "app" {
					got++
				}
			}
			return got == n
		}
	}
	spec := func(bake, timeout time.Duration) controlapi.RolloutSpec {
		return controlapi.RolloutSpec{Puts: map[string]json.RawMessage{"k": json.RawMessage(`2`)}, Stages: []float64{100},
			Bake: bake, StageTimeout: timeout, OnTimeout: controlapi.OnTimeoutHold}
	}
	// A rollout had on the namespace: the origin counts its clients' plain
	// acks (of cohort reports) for its rollouts from then on.
	first, err := origin.StartRollout("app", spec(time.Hour, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := origin.AbortRollout("app", first.ID); err != nil {
		t.Fatal(err)
	}
	post(rev, "", "c0", "c1") // within the bound: the origin knows both
	testutil.Eventually(t, waitLimit, known(2), "the origin knows c0 and c1")
	rec, err := origin.StartRollout("app", spec(3*time.Second, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if rec.InStage != 2 {
		t.Fatalf("started: %+v", rec)
	}
	// Every member reports, and four clients the origin does not know
	// yet: past the bound, dropped.
	post(rec.StageRevision, rec.ID, "c0", "c1", "c2", "c3", "c4", "c5")
	testutil.Eventually(t, waitLimit, func() bool {
		r, err := origin.Rollout("app", rec.ID)
		if err != nil {
			t.Fatal(err)
		}
		rec = r
		return r.Held
	}, "the stage held")
	if !strings.Contains(rec.Reason, `relay edge-7 dropped 4 outcome(s) of "app" past its full ack queue`) {
		t.Fatalf("held: %q", rec.Reason)
	}
}
