//go:build scale

package scale

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/testutil"
)

// BenchmarkRelayRollout stages one change over 1%, 10% and 100% of a fleet
// behind one relay: HOLDFAST_SCALE_CLIENTS (default 10000) clients in
// HOLDFAST_SCALE_PROCS (2) processes, one namespace of HOLDFAST_SCALE_KEYS
// (1000) keys, no bake. Each stage waits for every client in it to report
// the stage's revision (acks travel through the relay, coalesced), so
// stageP-s is the time from the stage's start to the next one's (the last:
// to the promotion), the stage's propagation and report round trip;
// total-s from the start to the promotion, done-s until every client
// serves the change.
//
//	go test -tags scale -run '^$' -bench RelayRollout -benchtime 1x -timeout 60m ./internal/scale/
func BenchmarkRelayRollout(b *testing.B) {
	clients := envInt("HOLDFAST_SCALE_CLIENTS", 10000)
	procs := envInt("HOLDFAST_SCALE_PROCS", 2)
	keys := envInt("HOLDFAST_SCALE_KEYS", 1000)
	for range b.N {
		runRollout(b, clients, procs, keys)
	}
}

func runRollout(b *testing.B, clients, procs, keys int) {
	srv := startOrigin(b, keys-1)
	rl := startRelay(b, srv.URL(), "127.0.0.1:0", "")
	kids := startClients(b, rl.url, clients, procs)
	testutil.Eventually(b, 5*time.Minute, func() bool {
		st, err := srv.Status(namespace)
		return err == nil && st.Clients >= clients && st.Acked >= clients
	}, "every client known to the origin")

	stages := []float64{1, 10, 100}
	value := fmt.Sprintf("1:%d", time.Now().UnixNano())
	c := control(b, srv.URL())
	start := time.Now()
	started, err := c.StartRollout(context.Background(), namespace, controlapi.RolloutRequest{
		Puts: map[string]json.RawMessage{key: json.RawMessage(strconv.Quote(value))}, Stages: stages, Bake: "0s", ReportTimeout: "1m", StageTimeout: "5m",
	})
	if err != nil {
		b.Fatalf("start rollout: %v", err)
	}

	// Poll the record; a stage's time runs until the next stage shows.
	read := func() *controlapi.RolloutRecord {
		r, err := c.GetRollout(context.Background(), namespace, started.ID)
		if err != nil {
			b.Fatal(err)
		}
		return r
	}
	seen := map[float64]time.Duration{}
	var r *controlapi.RolloutRecord
	for r = read(); r.State == "running"; r = read() {
		if _, ok := seen[r.Stage]; !ok {
			seen[r.Stage] = time.Since(start)
		}
		if time.Since(start) > 10*time.Minute {
			b.Fatalf("rollout still at stage %v after 10 minutes", r.Stage)
		}
		time.Sleep(10 * time.Millisecond)
	}
	total := time.Since(start)
	if r.State != "promoted" {
		b.Fatalf("rollout ended %q at stage %v", r.State, r.Stage)
	}
	for _, k := range kids {
		expect(b, k, "done 1", 5*time.Minute)
	}
	done := time.Since(start)

	var parts []string
	for i, p := range stages {
		from, ok := seen[p]
		if !ok {
			continue // passed between two polls
		}
		until := total
		if i+1 < len(stages) {
			if next, ok := seen[stages[i+1]]; ok {
				until = next
			}
		}
		b.ReportMetric((until - from).Seconds(), fmt.Sprintf("stage%g-s", p))
		parts = append(parts, fmt.Sprintf("%g%%: %v", p, (until-from).Round(time.Millisecond)))
	}
	b.ReportMetric(total.Seconds(), "total-s")
	b.ReportMetric(done.Seconds(), "done-s")
	b.Logf("rollout of %d clients behind one relay: %s; promoted after %v, every client serving it after %v",
		clients, strings.Join(parts, ", "), total.Round(time.Millisecond), done.Round(time.Millisecond))
}
