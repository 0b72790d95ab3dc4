package server_test

import (
	"context"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/server"
	"github.com/holdfast-dev/holdfast/server/store"
)

// twoServers starts two servers over one etcd of their own (200ms
// heartbeats) and returns them and their base URLs.
func twoServers(t *testing.T) (s1 *server.Server, base1 string, s2 *server.Server, base2 string) {
	t.Helper()
	etcdStore, s1, base1 := startOverOwnEtcd(t, 200*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s2, err := server.New(ctx, server.Config{Store: store.Config{Kind: store.KindExternal, Endpoints: etcdStore.Endpoints}, Heartbeat: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	base2 = serve(t, s2)
	t.Cleanup(func() { _ = s2.Close() })
	return s1, base1, s2, base2
}

// TestFleetMonitorAndFirstCut: two servers over one etcd, clients on
// each. Any server's clients and status show the whole fleet (its own
// table and the other's summary, with whose and how old, and each
// client's SDK version), with no rollout
// running; and a rollout started on one server takes its first cut over
// the clients of both, and counts them all.
func TestFleetMonitorAndFirstCut(t *testing.T) {
	_, base1, _, base2 := twoServers(t)
	publish(t, base1, "app", map[string]any{"v": 1})
	sdkClients(t, base1, "app", 3)
	sdkClients(t, base2, "app", 4)

	for _, base := range []string{base1, base2} {
		cc := controlClient(t, base)
		var c *controlapi.Clients
		testutil.Eventually(t, 20*time.Second, func() bool {
			var err error
			if c, err = cc.Clients(t.Context()); err != nil {
				c = &controlapi.Clients{}
			}
			return len(c.Clients) == 7 && len(c.Servers) == 1
		}, "clients shows the fleet's 7 clients")
		servers := map[string]int{}
		for _, cl := range c.Clients {
			servers[cl.Server]++
			if cl.UpdatedAt.IsZero() || cl.AckedRevision == 0 || cl.SDKVersion != config.Version {
				t.Errorf("client %+v, want its acked revision, when and its SDK version %s", cl, config.Version)
			}
		}
		if len(servers) != 2 || servers[c.Server] == 0 || c.Servers[0].Server == c.Server || c.Servers[0].At.IsZero() {
			t.Fatalf("clients by server %v; this server %q, summaries %+v", servers, c.Server, c.Servers)
		}
		st, err := cc.Status(t.Context(), "app")
		if err != nil || st.Clients != 7 || st.Acked != 7 || st.Servers != 2 {
			t.Fatalf("status %+v %v", st, err)
		}
	}

	id := startRollout(t, base1, "app", controlapi.RolloutRequest{Puts: testutil.JSONValues(t, map[string]any{"v": 2}), Stages: []float64{50, 100}, Bake: "1m"})
	// Its record sums the servers' partial counts, each written within a
	// second: the first stage holds exactly half of the 7 (its cut taken
	// over them all at the start), not half of the 3 this server knows.
	var rec controlapi.RolloutRecord
	testutil.Eventually(t, 20*time.Second, func() bool {
		rec = getRollout(t, base1, "app", id)
		return rec.Clients == 7
	}, "the rollout counts the fleet's 7 clients")
	if rec.InStage != 4 {
		t.Fatalf("the first stage holds %d of the 7 clients, want 4: %+v", rec.InStage, rec)
	}
}
