package dataplane

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/wire"
	"github.com/holdfast-dev/holdfast/transport"
)

// states lists what s says of ns's clients, "id=acked/nacked".
func states(s *Server, ns string) []string {
	var out []string
	for _, c := range s.Clients() {
		if c.Namespace == ns {
			out = append(out, fmt.Sprintf("%s=%d/%d", c.ClientID, c.AckedRevision, c.NackedRevision))
		}
	}
	return out
}

// A cohort's outcomes become acks of each client only where expand asks
// (an origin: a rollout that counts them; internal/fakeserver's
// TestAckCohortCountsInARollout).
func TestAckCohortExpandsWhatIsAsked(t *testing.T) {
	be := newMemBackend()
	s := be.start(t)
	be.publish("app", map[string]any{"v": 1})
	rep := func(rev int64, members ...string) *wire.CohortReport {
		return &wire.CohortReport{RelayID: "r1", Epoch: "e1", Namespaces: []wire.CohortNamespace{
			{Namespace: "app", Members: members, Outcomes: []wire.CohortOutcome{{Revision: rev, Status: transport.AckApplied, Runs: []int{0, 2}}}}}}
	}
	expand := func(string, int64) bool { return false }
	if acks, err := s.acks.recordCohort(rep(1, "a", "b"), time.Now(), expand); err != nil || len(acks) != 0 {
		t.Fatalf("nothing asked: %v, %v", acks, err)
	}
	expand = func(string, int64) bool { return true }
	acks, err := s.acks.recordCohort(rep(1), time.Now(), expand)
	if err != nil {
		t.Fatal(err)
	}
	if len(acks) != 2 || acks[0].ClientID != "a" || acks[1].ClientID != "b" || acks[0].Status != transport.AckApplied {
		t.Errorf("expanded %+v", acks)
	}
}

// FuzzAckCohort: any body gets a reply, never a panic; what is accepted
// is listed as its members.
func FuzzAckCohort(f *testing.F) {
	f.Add(`{"relay_id":"r1","epoch":"e1","namespaces":[{"ns":"app","members":["a","b"],"outcomes":[{"revision":1,"status":"ack","runs":[0,2]}]}]}`)
	f.Add(`{"relay_id":"r1","epoch":"e1","namespaces":[{"ns":"app","from":1,"members":["b"],"outcomes":[{"revision":1,"status":"nack","error":"x","runs":[0,1,1,1]}]}]}`)
	f.Add(`{"relay_id":"r1","epoch":"e1","namespaces":[{"ns":"app","outcomes":[{"revision":1,"status":"ack","runs":[3,1]}]}]}`)
	f.Add(`{"relay_id":"","namespaces":null}`)
	f.Add(`[1,2]`)
	f.Fuzz(func(t *testing.T, body string) {
		var a acks
		var rep wire.CohortReport
		if err := decodeCohortReport([]byte(body), &rep); err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("decode error %v is not ErrInvalid", err)
			}
			return
		}
		_, err := a.recordCohort(&rep, time.Now(), func(string, int64) bool { return true })
		if err != nil && !errors.Is(err, transport.ErrCohortUnknown) {
			t.Fatalf("record error %v", err)
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		a.eachLocked(func(k ackKey, st ackState) {
			if k.client == "" || st.at.IsZero() {
				t.Fatalf("listed %+v %+v", k, st)
			}
		})
	})
}

// Two relays of one id (each of its own epoch) do not undo each other's
// cohorts; past maxRelayEpochs the oldest folds into per-client records,
// still listed.
func TestAckCohortEpochsOfOneRelayID(t *testing.T) {
	be := newMemBackend()
	s := be.start(t)
	rev := be.publish("app", map[string]any{"v": 1})
	report := func(epoch string, members ...string) error {
		_, err := s.acks.recordCohort(&wire.CohortReport{RelayID: "r1", Epoch: epoch, Namespaces: []wire.CohortNamespace{
			{Namespace: "app", Members: members, Outcomes: []wire.CohortOutcome{{Revision: rev, Status: transport.AckApplied, Runs: []int{0, len(members)}}}}}},
			time.Now(), func(string, int64) bool { return false })
		return err
	}
	for i := range 3 {
		if err := report("a", "a1"); err != nil {
			t.Fatalf("round %d, relay a: %v", i, err)
		}
		if err := report("b", "b1", "b2"); err != nil {
			t.Fatalf("round %d, relay b: %v", i, err)
		}
	}
	for _, e := range []string{"c", "d", "e"} {
		if err := report(e, e+"1"); err != nil {
			t.Fatal(err)
		}
	}
	s.acks.mu.Lock()
	_, kept := s.acks.cohorts[cohortKey{"r1", "a"}]
	epochs := slices.Clone(s.acks.epochs["r1"])
	s.acks.mu.Unlock()
	if kept || !slices.Equal(epochs, []string{"b", "c", "d", "e"}) {
		t.Errorf("epochs %v (a kept: %v), want the oldest folded", epochs, kept)
	}
	want := []string{"a1=1/0", "b1=1/0", "b2=1/0", "c1=1/0", "d1=1/0", "e1=1/0"}
	if got := states(s, "app"); !slices.Equal(got, want) {
		t.Errorf("clients %v, want %v", got, want)
	}
}

// TestAckTablesAreBounded: the per-client records keep at most maxPairs
// pairs, dropping the one written longest ago; past maxRelays relays, the
// relay that reported longest ago is folded into them and forgotten (a
// report of it later names slots the server does not know).
func TestAckTablesAreBounded(t *testing.T) {
	a := acks{maxPairs: 3}
	now := time.Now()
	ack := func(client string, rev int64) transport.Ack {
		return transport.Ack{ClientID: client, Namespace: "app", Revision: rev, Status: transport.AckApplied}
	}
	a.record([]transport.Ack{ack("a", 1), ack("b", 1), ack("c", 1)}, now)
	a.record([]transport.Ack{ack("a", 2), ack("d", 2)}, now) // a the most recent; b, the oldest, makes room
	list := func() []string {
		var out []string
		a.eachLocked(func(k ackKey, st ackState) { out = append(out, fmt.Sprintf("%s=%d", k.client, st.acked)) })
		slices.Sort(out)
		return out
	}
	if got := fmt.Sprint(list()); got != "[a=2 c=1 d=2]" {
		t.Errorf("records %s, want [a=2 c=1 d=2] (b dropped)", got)
	}

	a = acks{maxPairs: maxRelays + 10}
	never := func(string, int64) bool { return false }
	for i := range maxRelays + 1 {
		rep := &wire.CohortReport{RelayID: fmt.Sprint("r", i), Epoch: "e1", Namespaces: []wire.CohortNamespace{
			{Namespace: "app", Members: []string{fmt.Sprint("c", i)}, Outcomes: []wire.CohortOutcome{{Revision: 1, Status: transport.AckApplied, Runs: []int{0, 1}}}}}}
		if _, err := a.recordCohort(rep, now.Add(time.Duration(i)*time.Millisecond), never); err != nil {
			t.Fatal(err)
		}
	}
	if len(a.epochs) != maxRelays || a.epochs["r0"] != nil || len(a.relayAt) != maxRelays {
		t.Errorf("%d relays kept (r0 among them: %v), want %d, r0 forgotten", len(a.epochs), a.epochs["r0"] != nil, maxRelays)
	}
	if n := len(list()); n != maxRelays+1 {
		t.Errorf("%d clients listed, want %d (r0's folded into the records)", n, maxRelays+1)
	}
	again := &wire.CohortReport{RelayID: "r0", Epoch: "e1", Namespaces: []wire.CohortNamespace{
		{Namespace: "app", Outcomes: []wire.CohortOutcome{{Revision: 2, Status: transport.AckApplied, Runs: []int{0, 1}}}}}}
	if _, err := a.recordCohort(again, now, never); !errors.Is(err, transport.ErrCohortUnknown) {
		t.Errorf("a forgotten relay's slot: %v, want ErrCohortUnknown", err)
	}
}

// TestFoldedRelayLosesNoOutcome: past the bound on relays, the relay
// that reported longest ago is folded; every outcome of its clients
// still reaches what counts them (the acks expand hands on: a rollout's
// table): those it reported before went when they came, and its next
// report, refused for the slots the server forgot, comes again naming
// its members and is handed on whole.
func TestFoldedRelayLosesNoOutcome(t *testing.T) {
	a := acks{maxRelayCount: 2}
	always := func(string, int64) bool { return true }
	got := make(map[string]int64) // client → the revision handed on
	record := func(rep *wire.CohortReport) error {
		t.Helper()
		acks, err := a.recordCohort(rep, time.Now(), always)
		for _, ack := range acks {
			got[ack.ClientID] = max(got[ack.ClientID], ack.Revision)
		}
		return err
	}
	report := func(relay string, rev int64, members ...string) *wire.CohortReport {
		return &wire.CohortReport{RelayID: relay, Epoch: "e1", Namespaces: []wire.CohortNamespace{{Namespace: "app", Members: members,
			Outcomes: []wire.CohortOutcome{{Revision: rev, Status: transport.AckApplied, Runs: []int{0, 2}}}}}}
	}
	for _, r := range []string{"r0", "r1", "r2"} { // r0 folded at r2
		if err := record(report(r, 1, r+"-a", r+"-b")); err != nil {
			t.Fatal(err)
		}
	}
	if a.epochs["r0"] != nil {
		t.Fatal("r0 not folded")
	}
	// r0's clients report revision 2: by slot, which the server forgot.
	if err := record(report("r0", 2)); !errors.Is(err, transport.ErrCohortUnknown) {
		t.Fatalf("r0's report by slot: %v, want ErrCohortUnknown", err)
	}
	// The relay names its members again (internal/acks: cohorts.send).
	if err := record(report("r0", 2, "r0-a", "r0-b")); err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"r0-a": 2, "r0-b": 2, "r1-a": 1, "r1-b": 1, "r2-a": 1, "r2-b": 1}
	if !maps.Equal(got, want) {
		t.Errorf("handed on %v, want %v", got, want)
	}
}
