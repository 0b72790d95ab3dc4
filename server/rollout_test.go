package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/rollout"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/server"
	servercontrol "github.com/holdfast-dev/holdfast/server/control"
	"github.com/holdfast-dev/holdfast/server/store"
)

// rolloutRecord is a rollout's record, as the control API answers it.
type rolloutRecord = controlapi.RolloutRecord

// waitRolloutEnd waits up to limit for rollout id to end and returns its
// record.
func waitRolloutEnd(t *testing.T, base, ns, id string, limit time.Duration) rolloutRecord {
	t.Helper()
	var rec rolloutRecord
	testutil.Eventually(t, limit, func() bool {
		rec = getRollout(t, base, ns, id)
		return rec.State != "running"
	}, "the rollout ends")
	return rec
}

func getRollout(t *testing.T, base, ns, id string) rolloutRecord {
	t.Helper()
	rec, err := controlClient(t, base).GetRollout(t.Context(), ns, id)
	if err != nil {
		t.Fatalf("rollout %s: %v", id, err)
	}
	return *rec
}

func startRollout(t *testing.T, base, ns string, req controlapi.RolloutRequest) string {
	t.Helper()
	started, err := controlClient(t, base).StartRollout(t.Context(), ns, req)
	if err != nil {
		t.Fatalf("rollout start: %v", err)
	}
	return started.ID
}

// fleetClients returns the clients base's GET /control/clients lists
// (none when it fails: the callers wait for them).
func fleetClients(t *testing.T, base string) []controlapi.ClientState {
	t.Helper()
	c, err := controlClient(t, base).Clients(t.Context())
	if err != nil {
		return nil
	}
	return c.Clients
}

// sdkClients opens n SDK clients of ns at base, each its own client id.
func sdkClients(t *testing.T, base, ns string, n int, opts ...config.NamespaceOption) []*config.Namespace {
	t.Helper()
	out := make([]*config.Namespace, n)
	for i := range out {
		cl, err := config.New(config.WithEndpoint(base), config.WithReconnectBackoff(5*time.Millisecond, 100*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cl.Close() })
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		out[i], err = cl.Namespace(ctx, ns, opts...)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func historyKinds(t *testing.T, base, ns string) []string {
	t.Helper()
	h, err := controlClient(t, base).History(t.Context(), ns, controlapi.HistoryOptions{})
	if err != nil {
		t.Fatalf("history: %v", err)
	}
	var kinds []string
	for i := len(h.Revisions) - 1; i >= 0; i-- {
		if strings.HasPrefix(h.Revisions[i].Kind, "rollout-") && (h.Revisions[i].Reason == "" || h.Revisions[i].Actor == "") {
			t.Errorf("history record %+v without an actor or a reason", h.Revisions[i])
		}
		kinds = append(kinds, h.Revisions[i].Kind)
	}
	return kinds
}

// TestRolloutCompletesOnSDKAcks: a rollout over holdfast server (embedded
// etcd) walks its stages on real SDK clients' acks and promotes; every
// client serves the change; the history holds one record per transition,
// with actor and reason.
func TestRolloutCompletesOnSDKAcks(t *testing.T) {
	_, base := startServer(t, store.Config{Kind: store.KindMemory})
	publish(t, base, "app", map[string]any{"v": 1})
	clients := sdkClients(t, base, "app", 10)
	testutil.Eventually(t, 10*time.Second, func() bool {
		return len(fleetClients(t, base)) == 10
	}, "every client reported")
	id := startRollout(t, base, "app", controlapi.RolloutRequest{Puts: testutil.JSONValues(t, map[string]any{"v": 2}), Stages: []float64{10, 50, 100},
		Bake: "100ms", Actor: "alice", Reason: "ticket 7"})
	c := controlClient(t, base)
	if _, err := c.Publish(t.Context(), "app", controlapi.PublishRequest{Puts: testutil.JSONValues(t, map[string]any{"v": 3})}); statusOf(err) != http.StatusConflict {
		t.Fatalf("a publish during a rollout: %v, want 409", err)
	}
	var rec rolloutRecord
	testutil.Eventually(t, 20*time.Second, func() bool {
		rec = getRollout(t, base, "app", id)
		return rec.State != "running"
	}, "the rollout ends")
	if rec.State != "promoted" || len(rec.Revisions) != 4 {
		t.Fatalf("record %+v", rec)
	}
	for i, ns := range clients {
		testutil.Eventually(t, 10*time.Second, func() bool { return ns.Int("v", 0) == 2 }, fmt.Sprintf("client %d serves v=2", i))
	}
	kinds := historyKinds(t, base, "app")
	if want := "publish rollout-stage rollout-stage rollout-stage rollout-promote"; strings.Join(kinds, " ") != want {
		t.Fatalf("history kinds %q, want %q", kinds, want)
	}
	if _, err := c.PromoteRollout(t.Context(), "app", id, controlapi.RolloutActionRequest{}); statusOf(err) != http.StatusConflict {
		t.Fatalf("a promote of an ended rollout: %v, want 409", err)
	}
}

// TestRolloutRevertsOnNacks: clients whose schema refuses the change
// nack it; the rollout reverts at the first stage, and every client
// serves the old content.
func TestRolloutRevertsOnNacks(t *testing.T) {
	_, base := startServer(t, store.Config{Kind: store.KindMemory})
	publish(t, base, "app", map[string]any{"v": 1})
	schema := []byte(`{"type":"object","properties":{"v":{"type":"integer","maximum":5}}}`)
	clients := sdkClients(t, base, "app", 10, config.Schema(schema))
	testutil.Eventually(t, 10*time.Second, func() bool {
		return len(fleetClients(t, base)) == 10
	}, "every client reported")
	id := startRollout(t, base, "app", controlapi.RolloutRequest{Puts: testutil.JSONValues(t, map[string]any{"v": 9}), Stages: []float64{20, 100}, Bake: "5s"})
	var rec rolloutRecord
	testutil.Eventually(t, 20*time.Second, func() bool {
		rec = getRollout(t, base, "app", id)
		return rec.State != "running"
	}, "the rollout ends")
	if rec.State != "reverted" || rec.Stage != 20 || !strings.Contains(rec.Reason, "rejected") {
		t.Fatalf("record %+v", rec)
	}
	for _, ns := range clients {
		if ns.Int("v", 0) != 1 {
			t.Fatalf("a client serves v=%d after the revert", ns.Int("v", 0))
		}
	}
}

// TestRolloutResumesAfterRestart: a server closed mid-bake and started
// again over the same etcd continues the rollout where it was: the bake
// ends at the stored time, not a new one.
func TestRolloutResumesAfterRestart(t *testing.T) {
	etcdStore, s, base := startOverOwnEtcd(t, 200*time.Millisecond)
	publish(t, base, "app", map[string]any{"v": 1})
	id := startRollout(t, base, "app", controlapi.RolloutRequest{Puts: testutil.JSONValues(t, map[string]any{"v": 2}), Stages: []float64{50, 100}, Bake: "3s"})
	rec := getRollout(t, base, "app", id)
	testutil.Eventually(t, 10*time.Second, func() bool {
		rec = getRollout(t, base, "app", id)
		return rec.Baking
	}, "the first stage bakes")
	// Let half the bake pass before the restart (not a synchronisation:
	// the time a restarted bake would add).
	time.Sleep(1500 * time.Millisecond)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s2, err := server.New(ctx, server.Config{Store: store.Config{Kind: store.KindExternal, Endpoints: etcdStore.Endpoints}, Heartbeat: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	base2 := serve(t, s2)
	testutil.Eventually(t, 20*time.Second, func() bool {
		rec = getRollout(t, base2, "app", id)
		return rec.State != "running"
	}, "the rollout ends after the restart")
	if rec.State != "promoted" {
		t.Fatalf("record %+v", rec)
	}
	var whats []string
	for _, d := range rec.Decisions {
		whats = append(whats, d.What)
	}
	if want := "start bake bake-end stage bake bake-end promote"; strings.Join(whats, " ") != want {
		t.Fatalf("decisions %q, want %q", whats, want)
	}
	// The bake began before the restart: it ended 3s after it began, not
	// 3s after the restart.
	bake, next := rec.Decisions[1].At, rec.Decisions[2].At
	if d := next.Sub(bake); d < 3*time.Second || d > 4*time.Second {
		t.Errorf("the bake of the first stage lasted %v, want 3s (a bake restarted would last 4.5s)", d)
	}
	if !next.Before(restarted.Add(2500 * time.Millisecond)) {
		t.Errorf("the second stage began %v after the restart: the bake restarted", next.Sub(restarted))
	}
}

// TestRolloutBlindStageIsCutAgain: a rollout started before any client
// reported cuts its first stage blind (its share of the hash space); the
// clients that then report, all outside that cut, have the stage cut
// again over them, committed through the store as a stage revision of
// its own, which the new member serves and reports before the stage
// bakes.
func TestRolloutBlindStageIsCutAgain(t *testing.T) {
	_, base := startServer(t, store.Config{Kind: store.KindMemory})
	publish(t, base, "app", map[string]any{"v": 1})
	// A long bake: the blind stage, with nobody in it, must not pass
	// before the clients report (it is promoted by hand below).
	id := startRollout(t, base, "app", controlapi.RolloutRequest{Puts: testutil.JSONValues(t, map[string]any{"v": 2}), Stages: []float64{10, 100},
		Bake: "60s", Actor: "alice", Reason: "ticket 9"})
	blind := rollout.Cut(nil, 10, 0)
	var clients []*config.Namespace
	for i := 0; len(clients) < 10; i++ {
		cid := fmt.Sprintf("client-%d", i)
		if rollout.Hash(id, cid) <= blind {
			continue // in the blind cut: not the case under test
		}
		cl, err := config.New(config.WithEndpoint(base), config.WithClientID(cid), config.WithReconnectBackoff(5*time.Millisecond, 100*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cl.Close() })
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		ns, err := cl.Namespace(ctx, "app")
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, ns)
	}
	var rec rolloutRecord
	testutil.Eventually(t, 20*time.Second, func() bool {
		rec = getRollout(t, base, "app", id)
		last := rec.Decisions[len(rec.Decisions)-1]
		return last.What == "bake" && len(rec.Decisions) > 2 || rec.State != "running"
	}, "a recut stage baking")
	var whats []string
	for _, d := range rec.Decisions {
		whats = append(whats, d.What)
	}
	// The blind stage, nobody in it, may have begun to bake before the
	// clients reported (past the controller's settle time).
	if got := strings.Join(whats, " "); rec.State != "running" || got != "start recut bake" && got != "start bake recut bake" {
		t.Fatalf("%s, decisions %q, want start, recut, bake (a bake before the recut allowed)", rec.State, whats)
	}
	if c := rec.Decisions[len(rec.Decisions)-1].Counts; c == nil || c.InStage < 1 || c.Reported != c.InStage {
		t.Fatalf("the recut stage baked on %+v: want its members, all reported", c)
	}
	// Clients that report after the recut may fall in its cut too: the
	// stage's members now, whoever they are, serve the change.
	testutil.Eventually(t, 10*time.Second, func() bool {
		serving := 0
		for _, ns := range clients {
			if ns.Int("v", 0) == 2 {
				serving++
			}
		}
		return serving == getRollout(t, base, "app", id).InStage
	}, "the stage's members, and only they, serve the change")
	if want := "publish rollout-stage rollout-stage"; strings.Join(historyKinds(t, base, "app"), " ") != want {
		t.Fatalf("history kinds %q, want %q", historyKinds(t, base, "app"), want)
	}
	if _, err := controlClient(t, base).PromoteRollout(t.Context(), "app", id, controlapi.RolloutActionRequest{Actor: "alice", Reason: "seen"}); err != nil {
		t.Fatalf("promote: %v", err)
	}
	for i, ns := range clients {
		testutil.Eventually(t, 10*time.Second, func() bool { return ns.Int("v", 0) == 2 }, fmt.Sprintf("client %d serves v=2", i))
	}
}

// serve serves s on a loopback port until the test ends.
func serve(t *testing.T, s *server.Server) string {
	t.Helper()
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
	})
	return hs.URL
}

// TestRolloutRestartedClientDoesNotHoldTheStage: a client known to the
// server that restarts with a new id just as a stage begins never reports
// the stage under its old id; past the liveness window (here its 3s
// floor) the old id counts as gone and the stage completes on the others'
// acks, well before its 60s timeout. The new id is placed like any other.
func TestRolloutRestartedClientDoesNotHoldTheStage(t *testing.T) {
	_, base := startServer(t, store.Config{Kind: store.KindMemory})
	publish(t, base, "app", map[string]any{"v": 1})
	cl, err := config.New(config.WithEndpoint(base), config.WithReconnectBackoff(5*time.Millisecond, 100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cl.Namespace(ctx, "app"); err != nil {
		t.Fatal(err)
	}
	others := sdkClients(t, base, "app", 4)
	testutil.Eventually(t, 10*time.Second, func() bool {
		return len(fleetClients(t, base)) == 5
	}, "every client reported")
	_ = cl.Close() // restarts: its old id goes silent
	restarted := sdkClients(t, base, "app", 1)
	id := startRollout(t, base, "app", controlapi.RolloutRequest{Puts: testutil.JSONValues(t, map[string]any{"v": 2}), Stages: []float64{100}, StageTimeout: "60s"})
	gone := waitRolloutEnd(t, base, "app", id, 20*time.Second)
	if gone.State != "promoted" {
		t.Fatalf("record %+v", gone)
	}
	if d := gone.Decisions[1]; d.What != "bake" || !strings.Contains(d.Reason, "(1 gone)") {
		t.Errorf("the bake's decision %+v: want the old id gone", d)
	}
	for _, ns := range append(others, restarted...) {
		testutil.Eventually(t, 10*time.Second, func() bool { return ns.Int("v", 0) == 2 }, "a client serves v=2")
	}
}

// TestRolloutCountsReportsThroughAFollower: two servers over one etcd;
// the clients are all on the server that does not lead, so their acks
// and nacks reach the leader's controller only through the follower's
// summaries in the store: a change they reject reverts, one they take is
// promoted with every client counted as having served it.
func TestRolloutCountsReportsThroughAFollower(t *testing.T) {
	s1, base1, s2, base2 := twoServers(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var leaderBase, followerBase string
	testutil.Eventually(t, 20*time.Second, func() bool {
		l1, l2 := s1.Status(ctx).Leader, s2.Status(ctx).Leader
		switch {
		case l1 && !l2:
			leaderBase, followerBase = base1, base2
		case l2 && !l1:
			leaderBase, followerBase = base2, base1
		default:
			return false
		}
		return true
	}, "one leader")
	publish(t, leaderBase, "app", map[string]any{"v": 1})
	schema := []byte(`{"type":"object","properties":{"v":{"type":"integer","maximum":5}}}`)
	clients := sdkClients(t, followerBase, "app", 6, config.Schema(schema))
	testutil.Eventually(t, 10*time.Second, func() bool {
		return len(fleetClients(t, followerBase)) == 6
	}, "every client reported to the follower")

	bad := startRollout(t, leaderBase, "app", controlapi.RolloutRequest{Puts: testutil.JSONValues(t, map[string]any{"v": 9}), Stages: []float64{50, 100}, Bake: "1s"})
	var rec rolloutRecord
	testutil.Eventually(t, 20*time.Second, func() bool {
		rec = getRollout(t, leaderBase, "app", bad)
		return rec.State != "running"
	}, "the bad rollout ends")
	if rec.State != "reverted" || rec.Stage != 50 || !strings.Contains(rec.Reason, "rejected") {
		t.Fatalf("bad rollout: %+v", rec)
	}
	good := startRollout(t, followerBase, "app", controlapi.RolloutRequest{Puts: testutil.JSONValues(t, map[string]any{"v": 3}), Stages: []float64{50, 100}, Bake: "500ms"})
	testutil.Eventually(t, 20*time.Second, func() bool {
		rec = getRollout(t, leaderBase, "app", good)
		return rec.State != "running"
	}, "the good rollout ends")
	if rec.State != "promoted" || rec.Served != 6 {
		t.Fatalf("good rollout: %+v", rec)
	}
	for _, ns := range clients {
		testutil.Eventually(t, 10*time.Second, func() bool { return ns.Int("v", 0) == 3 }, "a client serves v=3")
	}
}

// TestRolloutAbortReachesEveryClient: an abort mid-bake, with every client
// serving the change, has every client back on the old content within
// the 10 s emergency budget; the time is logged.
func TestRolloutAbortReachesEveryClient(t *testing.T) {
	_, base := startServer(t, store.Config{Kind: store.KindMemory})
	publish(t, base, "app", map[string]any{"v": 1})
	clients := sdkClients(t, base, "app", 20)
	id := startRollout(t, base, "app", controlapi.RolloutRequest{Puts: testutil.JSONValues(t, map[string]any{"v": 2}), Stages: []float64{100}, Bake: "1m"})
	for _, ns := range clients {
		testutil.Eventually(t, 10*time.Second, func() bool { return ns.Int("v", 0) == 2 }, "a client serves v=2")
	}
	aborted := time.Now()
	rec, err := controlClient(t, base).AbortRollout(t.Context(), "app", id, controlapi.RolloutActionRequest{Reason: "error rate up"})
	if err != nil || rec.State != "reverted" {
		t.Fatalf("abort: %v %+v", err, rec)
	}
	for _, ns := range clients {
		testutil.Eventually(t, 10*time.Second, func() bool { return ns.Int("v", 0) == 1 }, "a client serves v=1 again")
	}
	took := time.Since(aborted)
	t.Logf("every one of %d clients on the old content %v after the abort was asked", len(clients), took.Round(time.Millisecond))
	if took > 10*time.Second {
		t.Errorf("the revert took %v, above the 10s budget", took)
	}
	if !strings.Contains(rec.Reason, "error rate up") {
		t.Errorf("reason %q", rec.Reason)
	}
}

// flagGate is a gate the test breaches by hand.
type flagGate struct{ breach *atomic.Bool }

func (g flagGate) Check(context.Context) (bool, string, error) {
	return g.breach.Load(), "error_rate 0.31 > max 0.05 (query: sum(rate(errors[1m]))/sum(rate(requests[1m])))", nil
}

// TestRolloutGateBreachReverts: a gate (server.Config.Gates) breached
// while a stage bakes reverts the rollout at that stage, with the gate's
// figures in the rollout's reason and in the revert's audit record.
func TestRolloutGateBreachReverts(t *testing.T) {
	var breach atomic.Bool
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := server.New(ctx, server.Config{Store: store.Config{Kind: store.KindMemory}, Heartbeat: 200 * time.Millisecond,
		Gates: func(json.RawMessage) (servercontrol.Gate, error) { return flagGate{&breach}, nil }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	base := serve(t, s)
	publish(t, base, "app", map[string]any{"v": 1})
	clients := sdkClients(t, base, "app", 4)
	id := startRollout(t, base, "app", controlapi.RolloutRequest{Puts: testutil.JSONValues(t, map[string]any{"v": 2}), Stages: []float64{50, 100}, Bake: "1m",
		Gates: []json.RawMessage{json.RawMessage(`{"prometheus":"http://127.0.0.1:9090","query":"x","max":0.05}`)}})
	testutil.Eventually(t, 20*time.Second, func() bool { return getRollout(t, base, "app", id).Baking }, "the first stage bakes")
	breach.Store(true)
	var rec rolloutRecord
	testutil.Eventually(t, 10*time.Second, func() bool {
		rec = getRollout(t, base, "app", id)
		return rec.State != "running"
	}, "the rollout ends on the breach")
	if rec.State != "reverted" || rec.Stage != 50 || !strings.Contains(rec.Reason, "error_rate 0.31") {
		t.Fatalf("record %+v", rec)
	}
	h, err := controlClient(t, base).History(t.Context(), "app", controlapi.HistoryOptions{Limit: 1})
	if err != nil || len(h.Revisions) != 1 || h.Revisions[0].Kind != "rollout-revert" || !strings.Contains(h.Revisions[0].Reason, "sum(rate(errors[1m]))") {
		t.Fatalf("the revert's audit record %+v", h.Revisions)
	}
	for _, ns := range clients {
		testutil.Eventually(t, 10*time.Second, func() bool { return ns.Int("v", 0) == 1 }, "a client serves v=1")
	}
}

// TestPublishAbortRollout: a publish during a rollout is refused (409)
// unless abort_rollout, which reverts the rollout first: the history then
// holds the revert (the publisher as its actor) and the publish.
func TestPublishAbortRollout(t *testing.T) {
	_, base := startServer(t, store.Config{Kind: store.KindMemory})
	publish(t, base, "app", map[string]any{"v": 1})
	id := startRollout(t, base, "app", controlapi.RolloutRequest{Puts: testutil.JSONValues(t, map[string]any{"v": 2}), Stages: []float64{50, 100}, Bake: "1m"})
	c := controlClient(t, base)
	to := int64(1)
	if _, err := c.Rollback(t.Context(), "app", controlapi.RollbackRequest{To: &to}); statusOf(err) != http.StatusConflict {
		t.Fatalf("a rollback during a rollout: %v, want 409", err)
	}
	rev, err := c.Publish(t.Context(), "app", controlapi.PublishRequest{Puts: testutil.JSONValues(t, map[string]any{"v": 3}), AbortRollout: true, Actor: "bob", Reason: "hotfix"})
	if err != nil {
		t.Fatalf("a publish with abort_rollout: %v", err)
	}
	rec := getRollout(t, base, "app", id)
	if rec.State != "reverted" || !strings.Contains(rec.Reason, "aborted by bob") {
		t.Fatalf("record %+v", rec)
	}
	h, err := c.History(t.Context(), "app", controlapi.HistoryOptions{Limit: 2})
	if err != nil || len(h.Revisions) != 2 || h.Revisions[0].Kind != "publish" || h.Revisions[0].Revision != rev ||
		h.Revisions[1].Kind != "rollout-revert" || h.Revisions[1].Actor != "bob" {
		t.Fatalf("history %+v", h.Revisions)
	}
}
