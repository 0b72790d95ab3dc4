package presence

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/wire"
)

// TestLostMissing: clients a full table does not track, and the outcomes
// a relay behind it says it dropped, are reports missing for a rollout
// (of any namespace for the first, of theirs for the second), each named
// in the reason: an untracked connection while it lasts, whenever the
// rollout started; a loss over, for a rollout started before its last. A
// count the relay says again keeps its time, a grown one takes the
// table's now.
func TestLostMissing(t *testing.T) {
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	tab := newTestTable(c, 1)
	start := c.now()
	c.add(time.Second)
	tab.Open("a", true)
	b := tab.Open("b", true) // past the bound
	c.add(time.Minute)
	if n, why := tab.Missing("ns1", c.now(), "this server"); n != 1 || !strings.Contains(why, "this server holds up to 1 client(s) connected that its full presence table does not track") {
		t.Fatalf("while an untracked client is connected: %d, %q", n, why)
	}
	b.Close()
	if n, why := tab.Missing("ns1", start, "this server"); n != 1 || !strings.Contains(why, "this server did not track 1 client(s)") {
		t.Fatalf("after a client not tracked: %d, %q", n, why)
	}
	if n, _ := tab.Missing("ns1", c.now(), "this server"); n != 0 {
		t.Fatalf("a rollout started after the untracked client left counts %d missing", n)
	}
	report := func(seq uint64, n int64) {
		t.Helper()
		rep := wire.PresenceReport{RelayID: "r1", Epoch: "e", Seq: seq, Full: seq == 1, EveryMillis: 1000,
			Lost: []wire.LostReports{{Relay: "r1", Kind: wire.LostAcks, Namespace: "ns1", N: n, Last: c.now().Add(-time.Hour)}}}
		if err := wire.CheckPresenceReport(&rep); err != nil {
			t.Fatal(err)
		}
		if err := tab.Report(&rep); err != nil {
			t.Fatal(err)
		}
	}
	c.add(time.Second)
	report(1, 5) // new to the table: as of the relay's time
	since := start
	if n, why := tab.Missing("ns1", since, "this server"); n != 6 || !strings.Contains(why, `relay r1 dropped 5 outcome(s) of "ns1"`) {
		t.Fatalf("after r1's report: %d, %q", n, why)
	}
	if n, _ := tab.Missing("ns2", since, "this server"); n != 1 {
		t.Fatalf("ns2 counts %d missing, want the untracked client alone", n)
	}
	since = c.now()
	c.add(time.Second)
	report(2, 5) // said again: as it was
	if n, _ := tab.Missing("ns1", since.Add(time.Millisecond), "this server"); n != 0 {
		t.Fatalf("a count said again counts as new: %d", n)
	}
	c.add(time.Second)
	report(3, 7)
	if n, last := tab.LostOf("ns1"); n != 8 || !last.Equal(c.now()) {
		t.Fatalf("LostOf: %d at %v, want 8 at %v", n, last, c.now())
	}
	if n, why := tab.Missing("ns1", since, "this server"); n != 8 || !strings.Contains(why, "7 outcome(s)") {
		t.Fatalf("after r1's count grew: %d, %q", n, why)
	}
	// A relay forgotten says nothing more.
	c.add(Forget + time.Second)
	tab.Entries()
	if n, _ := tab.LostOf("ns1"); n != 1 {
		t.Fatalf("after r1 was forgotten: %d", n)
	}
}

// TestRelaysUntrackedClientsAreCurrent: the clients a relay's report
// names that a full table cannot keep count for every rollout while the
// relay's run of reports holds them connected, upstream too (a relay
// reports them as lasting); once they left, as of their last drop.
func TestRelaysUntrackedClientsAreCurrent(t *testing.T) {
	ctx := context.Background()
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	relay := newTestTable(c, 1)
	up := &upstream{t: NewTable(time.Minute, 0, nil)}
	r := NewReporter(relay, up, "r1", time.Hour, nil)
	if err := relay.Report(&wire.PresenceReport{RelayID: "r0", Epoch: "e", Seq: 1, Full: true, EveryMillis: 1000,
		Live: []string{"x", "y", "z"}}); err != nil {
		t.Fatal(err)
	}
	c.add(time.Minute)
	if n, why := relay.Missing("app", c.now(), "this relay"); n != 2 || !strings.Contains(why, "holds up to 2 client(s)") {
		t.Fatalf("two of r0's clients untracked: %d, %q", n, why)
	}
	if err := r.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	if n, why := up.t.Missing("app", time.Now().Add(-time.Second), "the server"); n != 2 || !strings.Contains(why, "relay r1 holds up to 2 client(s)") {
		t.Fatalf("upstream: %d, %q", n, why)
	}
	if err := relay.Report(&wire.PresenceReport{RelayID: "r0", Epoch: "e", Seq: 2, EveryMillis: 1000, Gone: []string{"y", "z"}}); err != nil {
		t.Fatal(err)
	}
	if n, why := relay.Missing("app", c.now(), "this relay"); n != 0 {
		t.Fatalf("after they left, a rollout started since counts %d: %q", n, why)
	}
}

// TestReporterCarriesLost: a relay's reporter sends what its process and
// the relays behind it lost, its own named after it, at once when it
// grows (no keepalive due); its upstream then knows both.
func TestReporterCarriesLost(t *testing.T) {
	ctx := context.Background()
	relay := NewTable(time.Minute, 0, nil)
	up := &upstream{t: NewTable(time.Minute, 0, nil)}
	r := NewReporter(relay, up, "r1", time.Hour, nil)
	relay.Open("a", true)
	if err := r.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	start := time.Now().Add(-time.Second)
	relay.NoteLost(wire.LostAcks, "ns", 2)
	if err := relay.Report(&wire.PresenceReport{RelayID: "r0", Epoch: "e", Seq: 1, Full: true, EveryMillis: 1000,
		Lost: []wire.LostReports{{Relay: "r0", Kind: wire.LostAcks, Namespace: "ns", N: 3, Last: time.Now()}}}); err != nil {
		t.Fatal(err)
	}
	if err := r.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	if len(up.reports) != 2 {
		t.Fatalf("a new loss sent no report: %+v", up.reports)
	}
	n, why := up.t.Missing("ns", start, "this server")
	if n != 5 || !strings.Contains(why, "relay r0 dropped 3") || !strings.Contains(why, "relay r1 dropped 2") {
		t.Fatalf("upstream: %d, %q", n, why)
	}
}

// TestReportLostBound: past wire.MaxPresenceLost entries, the oldest are
// summed into one of the relay's own, of every namespace: nothing lost
// is left out.
func TestReportLostBound(t *testing.T) {
	now := time.Now()
	var lost []wire.LostReports
	for i := range wire.MaxPresenceLost + 10 {
		lost = append(lost, wire.LostReports{Relay: "r0", Kind: wire.LostAcks, Namespace: fmt.Sprintf("ns%d", i), N: 1,
			Last: now.Add(time.Duration(i) * time.Second)})
	}
	got := reportLost(lost, "r1")
	if len(got) != wire.MaxPresenceLost {
		t.Fatalf("%d entries", len(got))
	}
	if rest := got[len(got)-1]; rest.Relay != "r1" || rest.Kind != wire.LostPresence || rest.N != 11 {
		t.Fatalf("the rest: %+v", rest)
	}
	if err := wire.CheckPresenceReport(&wire.PresenceReport{RelayID: "r1", Epoch: "e", Seq: 1, EveryMillis: 1, Lost: got}); err != nil {
		t.Fatal(err)
	}
}
