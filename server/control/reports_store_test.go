package control

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/holdfast-dev/holdfast/internal/presence"
	"github.com/holdfast-dev/holdfast/internal/rollout/controller"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/internal/wire"
	"github.com/holdfast-dev/holdfast/server/store"
	"github.com/holdfast-dev/holdfast/transport"
)

// storeServer is one server's report pipeline over a shared etcd,
// driven by hand: its write is called by the test, not by a ticker.
type storeServer struct {
	*reportSync
	lease   clientv3.LeaseID
	written map[string]writtenSummary
	parts   map[string]int
}

func newStoreServers(t *testing.T, ids ...string) []*storeServer {
	return newStoreServersTB(t, ids...)
}

func newStoreServersTB(t testing.TB, ids ...string) []*storeServer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, err := store.Open(ctx, store.Config{Kind: store.KindEmbedded, DataDir: t.TempDir(), StartTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	log := slog.New(slog.DiscardHandler)
	active := newActiveRollouts(st.Client, log)
	t.Cleanup(active.close)
	var out []*storeServer
	for _, id := range ids {
		r := makeReportSync(st.Client, NewAcks(DefaultMaxAckEntries), presence.NewTable(10*time.Second, 0, log), active, id, 10*time.Second, log)
		out = append(out, &storeServer{reportSync: r, written: make(map[string]writtenSummary), parts: make(map[string]int)})
	}
	return out
}

// hear records applied acks of rev from clients on s.
func (s *storeServer) hear(t *testing.T, ns string, rev int64, clients ...string) {
	t.Helper()
	var acks []transport.Ack
	for _, c := range clients {
		acks = append(acks, transport.Ack{ClientID: c, Namespace: ns, Revision: rev, Status: transport.AckApplied})
	}
	if err := s.acks.AckBatch(context.Background(), acks); err != nil {
		t.Fatal(err)
	}
}

func (s *storeServer) flush(t *testing.T) {
	t.Helper()
	if err := s.write(context.Background(), &s.lease, s.written, s.parts); err != nil {
		t.Fatal(err)
	}
}

// read is what s counts of ns: its table and the others' summaries, read
// from the store now.
func (s *storeServer) read(t *testing.T, ns string) map[string]controller.Report {
	t.Helper()
	s.forget(ns)
	reps, err := s.reports(context.Background(), ns)
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]controller.Report)
	for _, r := range reps {
		if _, dup := out[r.ClientID]; dup {
			t.Errorf("client %s counted twice", r.ClientID)
		}
		out[r.ClientID] = r
	}
	return out
}

func clientIDs(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprint(prefix, i)
	}
	return out
}

// TestSummaryPartsLeaveNoClientOut: a server with more clients than one
// part of a summary holds writes its summary in parts, and another
// server reads every client, none left out and none missing; as the
// clients grow the parts grow, and the old parts' keys go.
func TestSummaryPartsLeaveNoClientOut(t *testing.T) {
	s := newStoreServers(t, "s1", "s2")
	s1, s2 := s[0], s[1]
	s1.part = 10
	s1.hear(t, "app", 3, clientIDs("c", 35)...)
	s1.flush(t)
	if got := s2.read(t, "app"); len(got) != 35 {
		t.Fatalf("s2 reads %d clients of s1's 35", len(got))
	}
	if n, why := s2.missing(context.Background(), "app", time.Time{}); n != 0 {
		t.Errorf("missing %d: %s", n, why)
	}
	s1.hear(t, "app", 3, clientIDs("d", 20)...)
	s1.flush(t)
	if got := s2.read(t, "app"); len(got) != 55 {
		t.Fatalf("s2 reads %d clients of s1's 55", len(got))
	}
	resp, err := s1.cli.Get(context.Background(), reportsPrefix("app"), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, kv := range resp.Kvs {
		keys = append(keys, strings.TrimPrefix(string(kv.Key), reportsPrefix("app")))
	}
	if len(keys) != 6 || !strings.HasPrefix(keys[0], "s1#") || !strings.HasSuffix(keys[0], ".6") {
		t.Errorf("keys %q: want six parts of s1's summary, the four-part keys gone", keys)
	}
	// Parts are bounded in bytes too: reports with long errors take more.
	long := make([]controller.Report, 1000)
	for i := range long {
		long[i] = controller.Report{ClientID: fmt.Sprint("c", i), NackError: strings.Repeat("x", 2000)}
	}
	if n := summaryParts(long, summaryPart); n < 2 {
		t.Errorf("1,000 reports of 2 KB errors in %d part(s)", n)
	}
}

// TestClientThatMovesCountsOnce: a client heard through one server (one
// relay's) and then through another (it moved, or its relay failed over)
// counts once, with its later report; the server it left keeps its
// summary alive (killed, its lease not yet expired) and still counts
// none twice.
func TestClientThatMovesCountsOnce(t *testing.T) {
	s := newStoreServers(t, "s1", "s2", "leader")
	s1, s2, leader := s[0], s[1], s[2]
	s1.hear(t, "app", 3, clientIDs("a", 10)...)
	s2.hear(t, "app", 3, clientIDs("b", 10)...)
	s1.flush(t)
	s2.flush(t)
	// Mid-stage: a0..a4 move to s2 and report the stage's revision there;
	// s1 is killed without revoking its lease (its summary stays).
	s2.hear(t, "app", 7, clientIDs("a", 5)...)
	s2.flush(t)
	got := leader.read(t, "app")
	if len(got) != 20 {
		t.Fatalf("the leader counts %d clients, want 20", len(got))
	}
	for _, id := range clientIDs("a", 5) {
		if got[id].Acked != 7 {
			t.Errorf("client %s moved: acked %d, want its later report's 7", id, got[id].Acked)
		}
	}
}

// TestEvictedReportsAreMissing: a server whose ack table is full drops
// the reports heard longest ago; its partials of a running rollout say
// so, and the leader's Missing counts them (a rollout started before
// holds), naming the server; a rollout started after them does not.
func TestEvictedReportsAreMissing(t *testing.T) {
	s := newStoreServers(t, "s1", "leader")
	s1, leader := s[0], s[1]
	s1.acks = NewAcks(5)
	start := time.Now()
	running(t, s1, stageOf("app", 7, math.MaxUint64))
	s1.hear(t, "app", 3, clientIDs("c", 8)...)
	s1.flush(t)
	n, why := leader.missing(context.Background(), "app", start)
	if n != 3 || !strings.Contains(why, "server s1") || !strings.Contains(why, "3 client report(s)") {
		t.Errorf("missing %d: %q; want 3 of server s1", n, why)
	}
	if n, why := leader.missing(context.Background(), "app", time.Now().Add(time.Minute)); n != 0 {
		t.Errorf("missing %d since a later start: %q", n, why)
	}
}

// TestCutCoversClientsFirstHeardOnAnotherServer: a client first heard on
// one server goes into its summary at its next write, not at the idle
// refresh, and a rollout's start on another server reads the summaries
// afresh: its first cut counts the client.
func TestCutCoversClientsFirstHeardOnAnotherServer(t *testing.T) {
	s := newStoreServers(t, "s1", "s2")
	s1, s2 := s[0], s[1]
	s1.hear(t, "app", 3, "a", "b")
	s1.flush(t)
	if got := s2.read(t, "app"); len(got) != 2 {
		t.Fatalf("s2 reads %d clients", len(got))
	}
	// Within the idle interval of the last write: the newcomer goes at
	// once.
	s1.hear(t, "app", 3, "c")
	s1.flush(t)
	if got := s2.read(t, "app"); len(got) != 3 {
		t.Errorf("s2 reads %d clients, want the newcomer too", len(got))
	}
}

// BenchmarkSummaryWrite: one server's summary of a namespace written to
// a real (embedded) etcd after each of its clients reported a new
// revision (what a stage of 100% costs a server, once), at 10,000 and
// 100,000 clients: the bytes written (summary_bytes) and the parts.
//
//	go test -run '^$' -bench SummaryWrite -benchtime 3x ./server/control/
func BenchmarkSummaryWrite(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			s := newStoreServersTB(b, "s1")[0]
			ids := clientIDs("client-", n)
			var bytes, parts int
			for i := range b.N {
				b.StopTimer()
				var acks []transport.Ack
				for _, c := range ids {
					acks = append(acks, transport.Ack{ClientID: c, Namespace: "app", Revision: int64(i + 1), Status: transport.AckApplied, SDKVersion: "0.1.0"})
				}
				_ = s.acks.AckBatch(context.Background(), acks)
				b.StartTimer()
				if err := s.write(context.Background(), &s.lease, s.written, s.parts); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			resp, err := s.cli.Get(context.Background(), reportsPrefix("app"), clientv3.WithPrefix())
			if err != nil {
				b.Fatal(err)
			}
			for _, kv := range resp.Kvs {
				bytes += len(kv.Value)
				parts++
			}
			b.ReportMetric(float64(bytes), "summary_bytes")
			b.ReportMetric(float64(parts), "parts")
		})
	}
}

// TestPresenceIsLiveness: a client whose connection a server confirms
// (its presence live) counts as heard now at the leader, however long
// ago it last reported; one with no presence keeps its report's time
// (an older relay's client: its repeated reports are its liveness).
func TestPresenceIsLiveness(t *testing.T) {
	s := newStoreServers(t, "s1", "leader")
	s1, leader := s[0], s[1]
	long := time.Now().Add(-time.Hour)
	s1.acks.now = func() time.Time { return long }
	s1.hear(t, "app", 3, "connected", "silent")
	h := s1.presence.Open("connected", false) // a held long-poll: live while held
	defer h.Close()
	s1.flush(t)
	heldByPresence(t, leader, "connected", "silent", long)
}

// heldByPresence checks what the leader reads: held heard now (its
// presence), notHeld at its report's time, long.
func heldByPresence(t *testing.T, leader *storeServer, held, notHeld string, long time.Time) {
	t.Helper()
	leader.presenceRead = remotePresence{}
	got := leader.read(t, "app")
	if time.Since(got[held].Seen) > time.Minute {
		t.Errorf("client %s held by its presence last heard %v", held, got[held].Seen)
	}
	if !got[notHeld].Seen.Equal(long) {
		t.Errorf("client %s heard %v, want its report's %v", notHeld, got[notHeld].Seen, long)
	}
}

// running makes st the running rollout s's watch of the store knows.
func running(t *testing.T, s *storeServer, st *controller.State) {
	t.Helper()
	testutil.Eventually(t, 20*time.Second, func() bool {
		s.active.mu.Lock()
		defer s.active.mu.Unlock()
		return s.active.known
	}, "the running rollouts read")
	s.active.set(st.Namespace, st)
}

// stageOf is a running rollout of ns at its first stage, committed at
// revision rev with cut.
func stageOf(ns string, rev int64, cut uint64) *controller.State {
	return &controller.State{ID: "r-1", Namespace: ns, State: controller.Running, Cut: cut, Cuts: []uint64{cut}, Revisions: []int64{rev},
		StageAt: time.Now(), Started: time.Now(),
		Spec: controller.Spec{Stages: []float64{100}, ReportTimeout: time.Minute, StageTimeout: time.Hour}}
}

// counted is what the leader counts of st now: the others' partials as
// written, and its own.
func counted(t *testing.T, leader *storeServer, st *controller.State) (controller.Counts, []string) {
	t.Helper()
	leader.partialsRead = make(map[string]readPartials)
	leader.presenceRead = remotePresence{}
	ps, err := leader.partials(context.Background(), st)
	if err != nil {
		t.Fatal(err)
	}
	c, _, stale := controller.Sum(st, ps)
	return c, stale
}

// threeServersMidStage is servers s1, s2 and leader over one store, a
// rollout of "app" running at its first stage (of revision 7, every
// client in it) on each.
func threeServersMidStage(t *testing.T) (s1, s2, leader *storeServer, st *controller.State) {
	t.Helper()
	s := newStoreServers(t, "s1", "s2", "leader")
	st = stageOf("app", 7, math.MaxUint64)
	for _, srv := range s {
		running(t, srv, st)
	}
	return s[0], s[1], s[2], st
}

// relayReport has s hear relay's presence report of live clients (its
// seq'th of epoch).
func relayReport(t *testing.T, s *storeServer, relay, epoch string, seq uint64, live ...string) {
	t.Helper()
	if err := s.presence.Report(&wire.PresenceReport{RelayID: relay, Epoch: epoch, Seq: seq, Full: true, EveryMillis: 60_000, Live: live}); err != nil {
		t.Fatal(err)
	}
}

// TestRunningRolloutWritesPartialsNotReports: while a rollout runs in a
// namespace, a server writes its partials of the stage (one per source)
// and not its clients' reports; the partials are written again when a
// count changes, not when only the clients' times moved.
func TestRunningRolloutWritesPartialsNotReports(t *testing.T) {
	s1 := newStoreServers(t, "s1")[0]
	st := stageOf("app", 7, math.MaxUint64)
	at := time.Now()
	s1.acks.now = func() time.Time { return at }
	relayReport(t, s1, "relay-1", "e1", 1, "a", "b")
	s1.hear(t, "app", 3, "a", "b")
	s1.flush(t)
	summary := modRev(t, s1, summaryKey("app", "s1", 0, 1))
	running(t, s1, st)
	s1.flush(t)
	first := modRev(t, s1, partialsPrefix("app")+"s1")
	at = at.Add(10 * time.Second)
	s1.hear(t, "app", 3, "a", "b")
	s1.flush(t)
	if modRev(t, s1, partialsPrefix("app")+"s1") != first {
		t.Error("partials rewritten when only the clients' times moved")
	}
	s1.hear(t, "app", 7, "a")
	s1.flush(t)
	if modRev(t, s1, partialsPrefix("app")+"s1") == first {
		t.Error("partials not rewritten when a client reported the stage")
	}
	if modRev(t, s1, summaryKey("app", "s1", 0, 1)) != summary {
		t.Error("the clients' summary rewritten while a rollout runs")
	}
	var rec partialRecord
	resp, err := s1.cli.Get(context.Background(), partialsPrefix("app")+"s1")
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("the partials: %v, %v", resp, err)
	}
	if err := json.Unmarshal(resp.Kvs[0].Value, &rec); err != nil {
		t.Fatal(err)
	}
	if len(rec.Partials) != 1 || rec.Partials[0].Source != "relay-1@e1" || rec.Partials[0].InStage != 2 || rec.Partials[0].Reported != 1 {
		t.Errorf("partials %+v: want relay-1@e1's, 2 in the stage, 1 reported", rec.Partials)
	}
}

func modRev(t *testing.T, s *storeServer, key string) int64 {
	t.Helper()
	resp, err := s.cli.Get(context.Background(), key)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("%s: %v, %v", key, resp, err)
	}
	return resp.Kvs[0].ModRevision
}

// TestServerKilledMidStageCountsItsRelaysOnce: a server killed mid-stage
// leaves its partials in the store until its lease expires; its relay
// fails over to another server, which counts the relay's clients too.
// The leader counts each once: the later partial of the relay alone.
func TestServerKilledMidStageCountsItsRelaysOnce(t *testing.T) {
	s1, s2, leader, st := threeServersMidStage(t)
	ids := clientIDs("c", 10)
	relayReport(t, s1, "relay-1", "e1", 1, ids...)
	s1.hear(t, "app", 7, ids[:4]...)
	s1.hear(t, "app", 3, ids[4:]...)
	s1.flush(t)
	if c, stale := counted(t, leader, st); c.InStage != 10 || c.Reported != 4 || len(stale) != 0 {
		t.Fatalf("through s1: %+v, stale %q; want 10 in the stage, 4 reported", c, stale)
	}
	// s1 is killed (its partials stay); relay-1 moves to s2 and hands on
	// its clients' reports there.
	relayReport(t, s2, "relay-1", "e1", 2, ids...)
	s2.hear(t, "app", 7, ids[:6]...)
	s2.hear(t, "app", 3, ids[6:]...)
	s2.flush(t)
	c, stale := counted(t, leader, st)
	if c.InStage != 10 || c.Reported != 6 || len(stale) != 0 {
		t.Errorf("after the failover: %+v, stale %q; want 10 in the stage (not 20), 6 reported", c, stale)
	}
}

// TestClientThatMovesBetweenRelaysCountsOnce: a client that moves from
// one relay to another mid-stage (each behind its own server) counts
// once: the server it left no longer counts it, once it is live on the
// other.
func TestClientThatMovesBetweenRelaysCountsOnce(t *testing.T) {
	s1, s2, leader, st := threeServersMidStage(t)
	relayReport(t, s1, "relay-1", "e1", 1, "mover", "stays")
	s1.hear(t, "app", 3, "mover", "stays")
	s1.flush(t)
	// The mover leaves relay-1 for relay-2 (behind s2), and reports the
	// stage there.
	if err := s1.presence.Report(&wire.PresenceReport{RelayID: "relay-1", Epoch: "e1", Seq: 2, Gone: []string{"mover"}}); err != nil {
		t.Fatal(err)
	}
	relayReport(t, s2, "relay-2", "e2", 1, "mover")
	s2.hear(t, "app", 7, "mover")
	s2.flush(t)
	s1.presenceRead = remotePresence{} // its next read of the others' presence (at most half a second old)
	s1.flush(t)
	c, stale := counted(t, leader, st)
	if c.InStage != 2 || c.Reported != 1 || len(stale) != 0 {
		t.Errorf("%+v, stale %q; want 2 in the stage (the mover once), 1 reported", c, stale)
	}
}

// TestServerNotYetCountedHoldsTheStage: a server that holds reports of
// the namespace (its summary says so) but has written no partials of the
// running rollout is a stale source: the stage waits for it.
func TestServerNotYetCountedHoldsTheStage(t *testing.T) {
	s := newStoreServers(t, "s1", "leader")
	s1, leader := s[0], s[1]
	s1.hear(t, "app", 3, "a")
	s1.flush(t) // its summary, no rollout yet
	st := stageOf("app", 7, math.MaxUint64)
	running(t, leader, st)
	if _, stale := counted(t, leader, st); len(stale) != 1 || stale[0] != controller.ServerSource("s1") {
		t.Errorf("stale %q: want s1's", stale)
	}
	running(t, s1, st)
	s1.flush(t)
	if c, stale := counted(t, leader, st); len(stale) != 0 || c.InStage != 1 {
		t.Errorf("%+v, stale %q: want s1's client, none stale", c, stale)
	}
}

// TestMissingRelayReportHoldsTheStage: the clients of a relay the server
// no longer hears (its presence reports stopped: stale) count as heard
// at the leader, so their missing reports hold a stage rather than
// letting it pass with them counted gone; the clients the relay said
// disconnected are not held. Counted in partials alike: the stale
// relay's client is in the stage, unreported, not gone.
func TestMissingRelayReportHoldsTheStage(t *testing.T) {
	s := newStoreServers(t, "s1", "leader")
	s1, leader := s[0], s[1]
	long := time.Now().Add(-time.Hour)
	s1.acks.now = func() time.Time { return long }
	s1.hear(t, "app", 3, "behind", "left")
	if err := s1.presence.Report(&wire.PresenceReport{RelayID: "relay-1", Epoch: "e1", Seq: 1, Full: true, EveryMillis: 1,
		Live: []string{"behind"}, Gone: []string{"left"}}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, func() bool {
		return s1.presence.Entries()["behind"].State == presence.Stale
	}, "the relay unheard past two of its intervals")
	s1.flush(t)
	heldByPresence(t, leader, "behind", "left", long)
	st := stageOf("app", 7, math.MaxUint64)
	st.StageAt = time.Now().Add(-time.Hour) // past its report timeout: a silent member is gone
	running(t, s1, st)
	s1.flush(t)
	if c, _ := counted(t, leader, st); c.InStage != 1 || c.Reported != 0 || c.Gone != 1 {
		t.Errorf("%+v: want the stale relay's client in the stage, unreported; the one that left gone", c)
	}
}

// TestTwoRelaysOfOneIDCountApart: two relays that give one id (a
// configuration mistake), each behind its own server, are two sources:
// the later partial of one does not hide the other's clients.
func TestTwoRelaysOfOneIDCountApart(t *testing.T) {
	s1, s2, leader, st := threeServersMidStage(t)
	relayReport(t, s1, "edge", "run-a", 1, "a1", "a2")
	s1.hear(t, "app", 3, "a1", "a2")
	relayReport(t, s2, "edge", "run-b", 1, "b1")
	s2.hear(t, "app", 7, "b1")
	s1.flush(t)
	s2.flush(t)
	if c, stale := counted(t, leader, st); c.InStage != 3 || c.Reported != 1 || len(stale) != 0 {
		t.Errorf("%+v, stale %q: want both relays' 3 clients, 1 reported", c, stale)
	}
}

// TestRestartedRelayCountsWhereItIsLive: a relay that restarts (a new
// run) behind another server counts its clients there alone: stale on
// the server it left (unheard), live on the other.
func TestRestartedRelayCountsWhereItIsLive(t *testing.T) {
	s1, s2, leader, st := threeServersMidStage(t)
	if err := s1.presence.Report(&wire.PresenceReport{RelayID: "edge", Epoch: "run-a", Seq: 1, Full: true, EveryMillis: 1, Live: []string{"a1", "a2"}}); err != nil {
		t.Fatal(err)
	}
	s1.hear(t, "app", 3, "a1", "a2")
	testutil.Eventually(t, 10*time.Second, func() bool {
		return s1.presence.Entries()["a1"].State == presence.Stale
	}, "the relay unheard on s1")
	relayReport(t, s2, "edge", "run-b", 1, "a1", "a2")
	s2.hear(t, "app", 7, "a1", "a2")
	s2.flush(t)
	s1.presenceRead = remotePresence{} // its next read of the others' presence
	s1.flush(t)
	if c, stale := counted(t, leader, st); c.InStage != 2 || c.Reported != 2 || len(stale) != 0 {
		t.Errorf("%+v, stale %q: want the 2 clients once, reported through s2", c, stale)
	}
}
