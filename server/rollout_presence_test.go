package server_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/server/store"
)

// TestRolloutConnectedClientStaysLive: while a rollout runs, a connected
// client that has nothing new to report (and does not repeat itself: the
// server lists reports-kept) is live by its presence, confirmed within
// the liveness window (3 s here: two 200 ms heartbeats, at least 3 s), for
// longer than the window, so it counts as live; a client that left stops
// being heard and does not hold the next stage (counted gone, the
// rollout promotes long before its stage timeout).
func TestRolloutConnectedClientStaysLive(t *testing.T) {
	const window = 3 * time.Second
	_, base := startServer(t, store.Config{Kind: store.KindMemory})
	publish(t, base, "app", map[string]any{"v": 1})
	clients := make([]*config.Namespace, 6)
	ids := make([]string, len(clients))
	closers := make([]func() error, len(clients))
	for i := range clients {
		ids[i] = fmt.Sprint("client-", i)
		cl, err := config.New(config.WithEndpoint(base), config.WithClientID(ids[i]), config.WithReconnectBackoff(5*time.Millisecond, 100*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cl.Close() })
		closers[i] = cl.Close
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		clients[i], err = cl.Namespace(ctx, "app")
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, 10*time.Second, func() bool {
		return len(fleetClients(t, base)) == 6
	}, "every client reported")
	id := startRollout(t, base, "app", controlapi.RolloutRequest{Puts: testutil.JSONValues(t, map[string]any{"v": 2}), Stages: []float64{50, 100},
		Bake: "5s", StageTimeout: "60s"})
	testutil.Eventually(t, 10*time.Second, func() bool { return getRollout(t, base, "app", id).Baking }, "the first stage bakes")
	// A client outside the first stage leaves.
	left := -1
	for i, ns := range clients {
		if ns.Int("v", 0) == 1 {
			left = i
			break
		}
	}
	if left < 0 {
		t.Fatal("every client is in the 50% stage")
	}
	leftID := ids[left]
	_ = closers[left]()
	// For longer than the window, every connected client's presence is
	// confirmed within it (those of the stage and the others alike).
	testutil.Consistently(t, window+time.Second, func() error {
		for _, cs := range fleetClients(t, base) {
			if !slices.Contains(ids, cs.ClientID) {
				return fmt.Errorf("unknown client %q", cs.ClientID)
			}
			if cs.ClientID != leftID && (cs.State != controlapi.ClientLive || time.Since(cs.SeenAt) >= window) {
				return fmt.Errorf("connected client %s %s, confirmed %v ago, past the window", cs.ClientID, cs.State, time.Since(cs.SeenAt))
			}
		}
		return nil
	}, "connected clients heard within the window")
	full := waitRolloutEnd(t, base, "app", id, 30*time.Second)
	if full.State != "promoted" {
		t.Fatalf("record %+v", full)
	}
	var bakes []string
	for _, d := range full.Decisions {
		if d.What == "bake" {
			bakes = append(bakes, d.Reason)
		}
	}
	if len(bakes) != 2 || !strings.Contains(bakes[0], "(0 gone)") || !strings.Contains(bakes[1], "(1 gone)") {
		t.Errorf("bake decisions %q: want none gone in the first stage, the client that left gone in the second", bakes)
	}
	for i, ns := range clients {
		if i == left {
			continue
		}
		testutil.Eventually(t, 10*time.Second, func() bool { return ns.Int("v", 0) == 2 }, "a client serves v=2")
	}
}
