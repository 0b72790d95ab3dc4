package presence

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/wire"
	"github.com/holdfast-dev/holdfast/transport"
)

// clock is a table's time, moved by hand.
type clock struct{ t time.Time }

func (c *clock) now() time.Time      { return c.t }
func (c *clock) add(d time.Duration) { c.t = c.t.Add(d) }
func newTestTable(c *clock, max int) *Table {
	t := NewTable(10*time.Second, max, nil)
	t.now = c.now
	return t
}

// shown is each client's state as an operator sees it now.
func shown(t *Table, c *clock) map[string]State {
	out := make(map[string]State)
	for id, e := range t.Entries() {
		out[id] = e.Shown(c.now())
	}
	return out
}

// TestStates walks one table through the states' rules: a stream is live
// while its writes are confirmed within the liveness and stale past it; a
// held long-poll is live while held; a client that left is stale for
// GoneAfter, then gone, then forgotten past Forget; a relay's clients are
// as its reports say while it is heard, stale once it misses two of its
// reports, and forgotten with it.
func TestStates(t *testing.T) {
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	tab := newTestTable(c, 0)
	stream := tab.Open("s", true)
	poll := tab.Open("p", false)
	if err := tab.Report(&wire.PresenceReport{RelayID: "r1", Epoch: "e", Seq: 1, Full: true, EveryMillis: 2000,
		Live: []string{"a", "b"}, Stale: []string{"c"}}); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name  string
		do    func()
		state map[string]State
	}{
		{"at the start", func() {}, map[string]State{"s": Live, "p": Live, "a": Live, "b": Live, "c": Stale}},
		{"unconfirmed past the liveness; a relay heard", func() {
			c.add(11 * time.Second)
			if err := tab.Report(&wire.PresenceReport{RelayID: "r1", Epoch: "e", Seq: 2, EveryMillis: 2000, Gone: []string{"b"}}); err != nil {
				t.Fatal(err)
			}
		}, map[string]State{"s": Stale, "p": Live, "a": Live, "b": Stale, "c": Stale}},
		{"a confirmed stream stays live", func() { stream.Confirm() },
			map[string]State{"s": Live, "p": Live, "a": Live, "b": Stale, "c": Stale}},
		{"a relay unheard for two reports: its clients are stale", func() { c.add(5 * time.Second) },
			map[string]State{"s": Live, "p": Live, "a": Stale, "b": Gone, "c": Stale}},
		{"a stream unconfirmed for the liveness is stale", func() { c.add(6 * time.Second) },
			map[string]State{"s": Stale, "p": Live, "a": Stale, "b": Gone, "c": Stale}},
		{"closed: stale until GoneAfter", func() { stream.Close(); poll.Close(); c.add(GoneAfter - time.Millisecond) },
			map[string]State{"s": Stale, "p": Stale, "a": Stale, "b": Gone, "c": Stale}},
		{"then gone", func() { c.add(time.Millisecond) },
			map[string]State{"s": Gone, "p": Gone, "a": Stale, "b": Gone, "c": Stale}},
		{"reconnected: live again", func() { tab.Open("p", true) },
			map[string]State{"s": Gone, "p": Live, "a": Stale, "b": Gone, "c": Stale}},
		{"forgotten past Forget, the silent relay too", func() { c.add(Forget) },
			map[string]State{"p": Stale}},
	}
	for _, st := range steps {
		st.do()
		got := shown(tab, c)
		if len(got) != len(st.state) {
			t.Errorf("%s: %v, want %v", st.name, got, st.state)
			continue
		}
		for id, want := range st.state {
			if got[id] != want {
				t.Errorf("%s: %s is %s, want %s (all: %v)", st.name, id, got[id], want, got)
			}
		}
	}
	if s := tab.Stats(); s.Entries != 1 {
		t.Errorf("entries %d after forgetting, want 1", s.Entries)
	}
}

// TestReportRuns: a report that continues a run the table does not know is
// refused whole; a full report begins afresh, and what it does not list is
// gone.
func TestReportRuns(t *testing.T) {
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	tab := newTestTable(c, 0)
	rep := func(seq uint64, full bool, live ...string) error {
		return tab.Report(&wire.PresenceReport{RelayID: "r", Epoch: "e1", Seq: seq, Full: full, EveryMillis: 10_000, Live: live})
	}
	if err := rep(1, false, "a"); !errors.Is(err, transport.ErrPresenceUnknown) {
		t.Fatalf("a first report of changes: %v, want ErrPresenceUnknown", err)
	}
	if err := rep(1, true, "a", "b"); err != nil {
		t.Fatal(err)
	}
	if err := rep(3, false, "c"); !errors.Is(err, transport.ErrPresenceUnknown) {
		t.Fatalf("a report after a gap: %v", err)
	}
	if _, ok := tab.Entries()["c"]; ok {
		t.Fatal("a refused report was recorded")
	}
	if err := rep(2, false, "c"); err != nil {
		t.Fatal(err)
	}
	if err := rep(3, true, "c"); err != nil {
		t.Fatal(err)
	}
	c.add(GoneAfter)
	got := shown(tab, c)
	if got["a"] != Gone || got["b"] != Gone || got["c"] != Live {
		t.Fatalf("after a full report of c alone: %v", got)
	}
}

// TestTableBound: past its bound a table keeps no new client, and says so.
func TestTableBound(t *testing.T) {
	c := &clock{t: time.Now()}
	tab := newTestTable(c, 2)
	tab.Open("a", true)
	tab.Open("b", true)
	if h := tab.Open("c", true); !h.untracked {
		t.Fatal("a full table took a new client")
	}
	tab.Open("a", false) // a client it has takes no room
	if err := tab.Report(&wire.PresenceReport{RelayID: "r", Epoch: "e", Seq: 1, Full: true, EveryMillis: 1000, Live: []string{"d", "e"}}); err != nil {
		t.Fatal(err)
	}
	if s := tab.Stats(); s.Entries != 2 || s.Dropped != 3 {
		t.Fatalf("stats %+v, want 2 entries, 3 dropped", s)
	}
}

// TestAnnotateAndCount: clients take their presence (none: gone), gone
// ones past Forget leave the list, and status counts the live ones.
func TestAnnotateAndCount(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	entries := map[string]Entry{
		"live":   {State: Live, At: now},
		"stale":  {State: Stale, At: now.Add(-time.Minute)},
		"left":   {State: Gone, At: now.Add(-time.Second)},
		"gone":   {State: Gone, At: now.Add(-time.Minute)},
		"forgot": {State: Gone, At: now.Add(-Forget - time.Second)},
	}
	clients := []controlapi.ClientState{
		{ClientID: "live", AckedRevision: 5}, {ClientID: "stale", AckedRevision: 5}, {ClientID: "left", AckedRevision: 5},
		{ClientID: "gone", AckedRevision: 5}, {ClientID: "forgot", AckedRevision: 5},
		{ClientID: "never", AckedRevision: 4, UpdatedAt: now.Add(-time.Minute)},
		{ClientID: "never-old", UpdatedAt: now.Add(-Forget - time.Second)},
	}
	got := Annotate(clients, entries, now)
	want := map[string]string{"live": "live", "stale": "stale", "left": "stale", "gone": "gone", "never": "gone"}
	if len(got) != len(want) {
		t.Fatalf("annotated %+v", got)
	}
	for _, c := range got {
		if want[c.ClientID] != c.State {
			t.Errorf("%s: %q, want %q", c.ClientID, c.State, want[c.ClientID])
		}
	}
	st := controlapi.NamespaceStatus{Revision: 5}
	Count(&st, got)
	if st.Clients != 1 || st.Live != 1 || st.Acked != 1 || st.Stale != 2 || st.Behind != 0 {
		t.Errorf("status %+v", st)
	}
}

// upstream is a wire.PresenceReporter that applies reports to a table, as
// a server does.
type upstream struct {
	t       *Table
	refuse  bool
	reports []wire.PresenceReport
}

func (u *upstream) PresenceOffered() bool { return true }
func (u *upstream) ReportPresence(_ context.Context, body json.RawMessage) error {
	if u.refuse {
		return errors.New("down")
	}
	var rep wire.PresenceReport
	if err := json.Unmarshal(body, &rep); err != nil {
		return err
	}
	if err := wire.CheckPresenceReport(&rep); err != nil {
		return err
	}
	u.reports = append(u.reports, rep)
	return u.t.Report(&rep)
}

// TestReporter: a relay's reporter sends its set whole, then its changes
// only, a keepalive when nothing changed, its set whole again after a
// failed send or a server that does not know its run, and a report that
// every client left when it stops.
func TestReporter(t *testing.T) {
	ctx := context.Background()
	relay := NewTable(time.Minute, 0, nil)
	up := &upstream{t: NewTable(time.Minute, 0, nil)}
	r := NewReporter(relay, up, "r1", time.Hour, nil)
	a := relay.Open("a", true)
	relay.Open("b", false)
	tick := func() {
		t.Helper()
		if err := r.Tick(ctx); err != nil {
			t.Fatal(err)
		}
	}
	tick()
	tick() // nothing changed, no keepalive due: nothing sent
	a.Close()
	tick()
	if len(up.reports) != 2 || !up.reports[0].Full || len(up.reports[0].Live) != 2 ||
		up.reports[1].Full || len(up.reports[1].Gone) != 1 || len(up.reports[1].Live) != 0 {
		t.Fatalf("reports %+v", up.reports)
	}
	if e := up.t.Entries(); e["a"].State != Gone || e["b"].State != Live {
		t.Fatalf("upstream's entries %v", e)
	}
	up.refuse = true
	relay.Open("c", true)
	if err := r.Tick(ctx); err == nil {
		t.Fatal("a failed send said nothing")
	}
	up.refuse = false
	up.t = NewTable(time.Minute, 0, nil) // a server that restarted meanwhile
	tick()
	if last := up.reports[len(up.reports)-1]; !last.Full || len(last.Live) != 2 || len(last.Gone) != 1 {
		t.Fatalf("after a failure: %+v", last)
	}
	// A relay that stops says that every client left.
	r.farewell(ctx)
	if last := up.reports[len(up.reports)-1]; !last.Full || len(last.Live)+len(last.Stale)+len(last.Gone) != 0 {
		t.Fatalf("farewell: %+v", last)
	}
	for id, e := range up.t.Entries() {
		if e.State != Gone {
			t.Errorf("after the relay's farewell %s is %s", id, e.State)
		}
	}
}

// TestMerge: the better state wins, of two alike the later; two reports
// through one relay (it moved between servers) are one source, the later.
func TestMerge(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	t1 := t0.Add(time.Second)
	for _, tc := range []struct {
		name      string
		x, y, out Entry
	}{
		{"live beats stale", Entry{State: Stale, At: t1}, Entry{State: Live, At: t0}, Entry{State: Live, At: t0}},
		{"stale beats gone", Entry{State: Gone, At: t1}, Entry{State: Stale, At: t0}, Entry{State: Stale, At: t0}},
		{"of two gone the later", Entry{State: Gone, At: t0}, Entry{State: Gone, At: t1}, Entry{State: Gone, At: t1}},
		{"one relay: the later, whatever its state", Entry{State: Stale, At: t0, Relay: "r"}, Entry{State: Gone, At: t1, Relay: "r"},
			Entry{State: Gone, At: t1, Relay: "r"}},
		{"two relays: the better", Entry{State: Stale, At: t0, Relay: "r1"}, Entry{State: Gone, At: t1, Relay: "r2"},
			Entry{State: Stale, At: t0, Relay: "r1"}},
	} {
		if got := Merge(tc.x, tc.y); got != tc.out {
			t.Errorf("%s: Merge = %+v, want %+v", tc.name, got, tc.out)
		}
		if got := Merge(tc.y, tc.x); got != tc.out {
			t.Errorf("%s: Merge reversed = %+v, want %+v", tc.name, got, tc.out)
		}
	}
}

func TestStateOrder(t *testing.T) {
	for _, tc := range []struct {
		s, o      State
		beats, on bool
	}{
		{Live, Stale, true, true}, {Live, Gone, true, true}, {Stale, Gone, true, true},
		{Stale, Live, false, true}, {Stale, Stale, false, true}, {Gone, Stale, false, false}, {"", Gone, false, false},
	} {
		if got := tc.s.Beats(tc.o); got != tc.beats {
			t.Errorf("%q beats %q: %v, want %v", tc.s, tc.o, got, tc.beats)
		}
		if got := tc.s.Connected(); got != tc.on {
			t.Errorf("%q connected: %v, want %v", tc.s, got, tc.on)
		}
	}
}
