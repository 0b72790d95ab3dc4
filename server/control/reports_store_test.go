package control

import (
	"context"
	"fmt"
	"log/slog"
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
		out = append(out, &storeServer{reportSync: &reportSync{cli: st.Client, acks: NewAcks(DefaultMaxAckEntries), presence: presence.NewTable(10*time.Second, 0, log),
			presenceSent: make(map[string]presenceValue), active: active, id: id, part: summaryPart, log: log, remote: make(map[string]remoteReports)},
			written: make(map[string]writtenSummary), parts: make(map[string]int)})
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
	// A part whose write did not land: the reports it holds are missing.
	if _, err := s1.cli.Delete(context.Background(), reportsPrefix("app")+keys[2]); err != nil {
		t.Fatal(err)
	}
	s2.forget("app")
	if n, why := s2.missing(context.Background(), "app", time.Time{}); n == 0 || !strings.Contains(why, "1 of the 6 parts of its summary missing") {
		t.Errorf("a part missing: missing %d: %q", n, why)
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
// the reports heard longest ago; its summary says so, and the leader's
// Missing counts them (a rollout started before holds), naming the
// server; a rollout started after them does not.
func TestEvictedReportsAreMissing(t *testing.T) {
	s := newStoreServers(t, "s1", "leader")
	s1, leader := s[0], s[1]
	s1.acks = NewAcks(5)
	start := time.Now()
	s1.hear(t, "app", 3, clientIDs("c", 8)...)
	s1.flush(t)
	leader.forget("app")
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

// TestRunningSummaryIsWrittenForReportsNotTimes: while a rollout runs, a
// summary is written again when a client's report changes, or when a
// client whose connection this server does not confirm is heard again
// (its report's time is its liveness), not when only connected clients'
// times moved.
func TestRunningSummaryIsWrittenForReportsNotTimes(t *testing.T) {
	s1 := newStoreServers(t, "s1")[0]
	testutil.Eventually(t, 20*time.Second, func() bool {
		s1.active.mu.Lock()
		defer s1.active.mu.Unlock()
		return s1.active.known
	}, "the running rollouts read")
	s1.active.set("app", true)
	at := time.Now()
	s1.acks.now = func() time.Time { return at }
	ha, hb := s1.presence.Open("a", false), s1.presence.Open("b", false)
	defer ha.Close()
	s1.hear(t, "app", 3, "a", "b")
	s1.flush(t)
	modRev := func() int64 {
		t.Helper()
		resp, err := s1.cli.Get(context.Background(), summaryKey("app", "s1", 0, 1))
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("the summary: %v, %v", resp, err)
		}
		return resp.Kvs[0].ModRevision
	}
	first := modRev()
	at = at.Add(10 * time.Second)
	s1.hear(t, "app", 3, "a", "b")
	s1.flush(t)
	if modRev() != first {
		t.Error("rewritten when only the connected clients' times moved")
	}
	hb.Close()
	at = at.Add(10 * time.Second)
	s1.hear(t, "app", 3, "b")
	s1.flush(t)
	second := modRev()
	if second == first {
		t.Error("not rewritten when a client with no live presence was heard again")
	}
	s1.hear(t, "app", 4, "a")
	s1.flush(t)
	if modRev() == second {
		t.Error("not rewritten when a client's report changed")
	}
}

// TestMissingRelayReportHoldsTheStage: the clients of a relay the server
// no longer hears (its presence reports stopped: stale) count as heard
// at the leader, so their missing reports hold a stage rather than
// letting it pass with them counted gone; the clients the relay said
// disconnected are not held.
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
}
