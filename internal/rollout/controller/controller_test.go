package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/rollout"
)

// fleet is a set of fake clients that report what they would serve.
type fleet struct {
	mu      sync.Mutex
	now     time.Time
	reports map[string]*Report
}

func newFleet() *fleet {
	return &fleet{now: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC), reports: make(map[string]*Report)}
}

func (f *fleet) clock() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.now }

func (f *fleet) advance(d time.Duration) { f.mu.Lock(); f.now = f.now.Add(d); f.mu.Unlock() }

func (f *fleet) Reports(context.Context, string) ([]Report, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]Report, 0, len(f.reports))
	for _, r := range f.reports {
		out = append(out, *r)
	}
	return out, nil
}

// apply has every client in ids apply the store's current content of ns
// at its revision, nacking when bad(id) and in the stage.
func (f *fleet) apply(m *MemStore, ns string, ids []string, bad func(string) bool) {
	content := m.Content(ns)
	log := m.Log()
	rev := int64(0) // the namespace's content before any rollout (below every commit)
	for i := len(log) - 1; i >= 0; i-- {
		if log[i].Change != nil {
			rev = log[i].Revision
			break
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, id := range ids {
		r := f.reports[id]
		if r == nil {
			r = &Report{ClientID: id}
			f.reports[id] = r
		}
		r.Seen = f.now
		raw, ok := content[rollout.Key]
		if !ok {
			r.Acked = rev
			continue
		}
		s, err := rollout.Decode(raw)
		if err != nil {
			panic(err)
		}
		if s.Member(id) {
			r.Rollout = s.ID
			if bad != nil && bad(id) {
				r.Nacked, r.NackedRollout, r.NackError = rev, true, "bad value"
				continue
			}
			r.Served = rev
		}
		r.Acked = rev
	}
}

func ids(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("c%03d", i)
	}
	return out
}

func newTest(f *fleet, m *MemStore, liveness time.Duration) *Controller {
	return New(Config{Store: m, Reports: f.Reports, Now: f.clock, Liveness: liveness})
}

var spec = Spec{Puts: map[string]json.RawMessage{"a": json.RawMessage(`2`)}, Stages: []float64{10, 50, 100}, Bake: time.Second}

func step(t *testing.T, c *Controller, leading any) {
	t.Helper()
	if err := c.Step(context.Background(), leading); err != nil {
		t.Fatal(err)
	}
}

func TestPromotesStageByStage(t *testing.T) {
	f, m := newFleet(), NewMemStore()
	clients := ids(20)
	f.apply(m, "app", clients, nil) // known before the start
	c := newTest(f, m, 0)
	rec, err := c.Start(context.Background(), "app", spec, "alice", "ticket 1")
	if err != nil {
		t.Fatal(err)
	}
	if rec.InStage != 2 || rec.Stage != 10 {
		t.Fatalf("first stage: %+v", rec)
	}
	for range 20 {
		f.apply(m, "app", clients, nil)
		step(t, c, nil)
		f.advance(600 * time.Millisecond)
	}
	got, err := c.Get(context.Background(), "app", rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != Promoted || len(got.Revisions) != 4 {
		t.Fatalf("record %+v", got)
	}
	if string(m.Content("app")["a"]) != "2" || m.Content("app")[rollout.Key] != nil {
		t.Fatalf("content %v", m.Content("app"))
	}
	// One commit per transition: start, bake, stage, bake, stage, bake, promote.
	var kinds []string
	for _, cm := range m.Log() {
		k := cm.State.Decisions[len(cm.State.Decisions)-1].What
		kinds = append(kinds, k)
	}
	if want := "start bake stage bake stage bake promote"; strings.Join(kinds, " ") != want {
		t.Fatalf("commits %q, want %q", kinds, want)
	}
	if _, err := c.Promote(context.Background(), "app", rec.ID, "bob", ""); !errors.Is(err, ErrEnded) {
		t.Fatalf("promote of an ended rollout: %v", err)
	}
}

func TestNacksRevertOnce(t *testing.T) {
	f, m := newFleet(), NewMemStore()
	clients := ids(20)
	f.apply(m, "app", clients, nil)
	c1, c2 := newTest(f, m, 0), newTest(f, m, 0)
	rec, err := c1.Start(context.Background(), "app", spec, "alice", "")
	if err != nil {
		t.Fatal(err)
	}
	f.apply(m, "app", clients, func(string) bool { return true })
	// Two controllers that both believe they lead: one revert.
	step(t, c1, nil)
	step(t, c2, nil)
	got, _ := c1.Get(context.Background(), "app", rec.ID)
	if got.State != Reverted || !strings.Contains(got.Reason, "rejected the change") {
		t.Fatalf("record %+v", got)
	}
	var reverts int
	for _, cm := range m.Log() {
		if cm.Change != nil && cm.Change.Kind == KindRevert {
			reverts++
		}
	}
	if reverts != 1 {
		t.Fatalf("%d reverts", reverts)
	}
}

func TestConflictingStepsTakeAStageOnce(t *testing.T) {
	f, m := newFleet(), NewMemStore()
	f.apply(m, "app", ids(10), nil)
	c1, c2 := newTest(f, m, 0), newTest(f, m, 0)
	st, err := c1.Start(context.Background(), "app", Spec{Puts: spec.Puts, Stages: []float64{10, 100}}, "", "")
	if err != nil {
		t.Fatal(err)
	}
	f.apply(m, "app", ids(10), nil)
	cur, _ := m.Current(context.Background(), "app")
	// Both read the same state; the second's commit must fail.
	if _, err := c1.step(context.Background(), cur, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c2.step(context.Background(), cur, nil); !errors.Is(err, ErrConflict) {
		t.Fatalf("second step of the same state: %v", err)
	}
	_ = st
}

func TestResumesTimersAfterRestart(t *testing.T) {
	f, m := newFleet(), NewMemStore()
	f.apply(m, "app", ids(5), nil)
	c := newTest(f, m, 0)
	if _, err := c.Start(context.Background(), "app", Spec{Puts: spec.Puts, Stages: []float64{50, 100}, Bake: time.Minute}, "", ""); err != nil {
		t.Fatal(err)
	}
	f.apply(m, "app", ids(5), nil)
	step(t, c, nil) // bakes until +1m
	f.advance(50 * time.Second)
	c2 := newTest(f, m, 0) // a new leader: the bake has 10s left, not a minute
	step(t, c2, nil)
	if cur, _ := m.Current(context.Background(), "app"); cur.Stage != 0 {
		t.Fatalf("moved on early: stage %d", cur.Stage)
	}
	f.advance(11 * time.Second)
	step(t, c2, nil)
	if cur, _ := m.Current(context.Background(), "app"); cur.Stage != 1 {
		t.Fatalf("bake not resumed from the stored time: stage %d", cur.Stage)
	}
}

func TestGoneClientDoesNotHoldTheStage(t *testing.T) {
	for _, tc := range []struct {
		name     string
		liveness time.Duration
		want     string
	}{{"liveness", 10 * time.Second, Promoted}, {"no liveness", 0, Running}} {
		t.Run(tc.name, func(t *testing.T) {
			f, m := newFleet(), NewMemStore()
			clients := ids(10)
			f.apply(m, "app", clients, nil)
			c := newTest(f, m, tc.liveness)
			rec, err := c.Start(context.Background(), "app", Spec{Puts: spec.Puts, Stages: []float64{100}}, "", "")
			if err != nil {
				t.Fatal(err)
			}
			// Every client but c000 reports; c000 restarted as c100.
			f.apply(m, "app", append(clients[1:], "c100"), nil)
			for range 30 {
				step(t, c, nil)
				f.advance(time.Second)
				f.apply(m, "app", append(clients[1:], "c100"), nil)
			}
			got, _ := c.Get(context.Background(), "app", rec.ID)
			if got.State != tc.want {
				t.Fatalf("state %s (%+v)", got.State, got)
			}
		})
	}
}

// TestAllGoneStageWaits: a stage whose every member is gone (silent past
// the liveness window, nobody having reported the stage) does not bake on
// no evidence: it waits, and reverts at its timeout.
func TestAllGoneStageWaits(t *testing.T) {
	f, m := newFleet(), NewMemStore()
	clients := ids(10)
	f.apply(m, "app", clients, nil)
	c := newTest(f, m, 10*time.Second)
	rec, err := c.Start(context.Background(), "app", Spec{Puts: spec.Puts, Stages: []float64{100}, StageTimeout: time.Minute}, "", "")
	if err != nil {
		t.Fatal(err)
	}
	// Nobody reports the stage's revision: every member goes silent.
	for range 30 {
		step(t, c, nil)
		f.advance(time.Second)
	}
	if got, _ := c.Get(context.Background(), "app", rec.ID); got.State != Running || got.Baking {
		t.Fatalf("every member gone: state %s, baking %v; want still waiting", got.State, got.Baking)
	}
	for range 40 {
		step(t, c, nil)
		f.advance(time.Second)
	}
	if got, _ := c.Get(context.Background(), "app", rec.ID); got.State != Reverted || !strings.Contains(got.Reason, "0 of 0 client(s) reported") {
		t.Fatalf("at the timeout: state %s, reason %q; want reverted, none reported", got.State, got.Reason)
	}
}

func TestLeadingCondition(t *testing.T) {
	f, m := newFleet(), NewMemStore()
	f.apply(m, "app", ids(3), nil)
	c := newTest(f, m, 0)
	if _, err := c.Start(context.Background(), "app", Spec{Puts: spec.Puts, Stages: []float64{100}}, "", ""); err != nil {
		t.Fatal(err)
	}
	f.apply(m, "app", ids(3), nil)
	n := len(m.Log())
	step(t, c, func() bool { return false })
	if len(m.Log()) != n {
		t.Fatal("a controller that leads no more committed")
	}
}

func TestBadSpecs(t *testing.T) {
	one := map[string]json.RawMessage{"a": json.RawMessage(`1`)}
	for _, tc := range []struct {
		name string
		spec Spec
	}{
		{"no change", Spec{Stages: []float64{100}}},
		{"no stages", Spec{Puts: one}},
		{"not to 100", Spec{Puts: one, Stages: []float64{10, 50}}},
		{"decreasing", Spec{Puts: one, Stages: []float64{50, 10, 100}}},
		{"reserved", Spec{Puts: map[string]json.RawMessage{rollout.Key: json.RawMessage(`1`)}, Stages: []float64{100}}},
		{"on_breach", Spec{Puts: one, Stages: []float64{100}, OnBreach: "panic"}},
		{"gates without a builder", Spec{Puts: one, Stages: []float64{100}, Gates: []json.RawMessage{json.RawMessage(`{}`)}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, m := newFleet(), NewMemStore()
			c := newTest(f, m, 0)
			if _, err := c.Start(context.Background(), "app", tc.spec, "", ""); !errors.Is(err, ErrInvalid) {
				t.Fatalf("err %v", err)
			}
			if len(m.Log()) != 0 {
				t.Fatal("half applied")
			}
		})
	}
	f, m := newFleet(), NewMemStore()
	c := newTest(f, m, 0)
	if _, err := c.Start(context.Background(), "app", Spec{Puts: one, Stages: []float64{50, 100}}, "", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Start(context.Background(), "app", Spec{Puts: one, Stages: []float64{100}}, "", ""); !errors.Is(err, ErrRunning) {
		t.Fatalf("second start: %v", err)
	}
}

type breachGate struct{ breach bool }

func (g *breachGate) Check(context.Context) (bool, string, error) {
	return g.breach, "error_rate 0.3 > max 0.05 (query rate(errors[1m]))", nil
}

func TestGateBreachReverts(t *testing.T) {
	f, m := newFleet(), NewMemStore()
	f.apply(m, "app", ids(10), nil)
	g := &breachGate{}
	c := New(Config{Store: m, Reports: f.Reports, Now: f.clock,
		Gates: func(json.RawMessage) (Gate, error) { return g, nil }})
	s := Spec{Puts: spec.Puts, Stages: []float64{10, 100}, Bake: time.Minute, Gates: []json.RawMessage{json.RawMessage(`{"x":1}`)}}
	rec, err := c.Start(context.Background(), "app", s, "", "")
	if err != nil {
		t.Fatal(err)
	}
	f.apply(m, "app", ids(10), nil)
	step(t, c, nil) // bakes
	step(t, c, nil)
	if cur, _ := m.Current(context.Background(), "app"); cur.State != Running {
		t.Fatal("reverted without a breach")
	}
	g.breach = true
	step(t, c, nil)
	got, _ := c.Get(context.Background(), "app", rec.ID)
	if got.State != Reverted || !strings.Contains(got.Reason, "error_rate 0.3") {
		t.Fatalf("record %+v", got)
	}
}

// TestSettleDelaysTheBake: a stage whose known members all reported at
// once still waits Settle before it bakes (reports through other servers
// are on their way).
func TestSettleDelaysTheBake(t *testing.T) {
	f, m := newFleet(), NewMemStore()
	f.apply(m, "app", ids(4), nil)
	c := New(Config{Store: m, Reports: f.Reports, Now: f.clock, Settle: 2 * time.Second})
	if _, err := c.Start(context.Background(), "app", Spec{Puts: spec.Puts, Stages: []float64{50, 100}}, "", ""); err != nil {
		t.Fatal(err)
	}
	f.apply(m, "app", ids(4), nil)
	step(t, c, nil)
	if cur, _ := m.Current(context.Background(), "app"); !cur.BakeEnd.IsZero() || cur.Stage != 0 {
		t.Fatalf("baked before Settle: %+v", cur)
	}
	f.advance(2 * time.Second)
	step(t, c, nil)
	if cur, _ := m.Current(context.Background(), "app"); cur.Stage != 1 {
		t.Fatalf("not on after Settle: stage %d", cur.Stage)
	}
}

// TestBakeEndIsADecision: a bake's end is a decision of its own, before
// the stage or the promotion it leads to, with the counts in its reason
// and as Counts; the audit's stage record quotes it.
func TestBakeEndIsADecision(t *testing.T) {
	f, m := newFleet(), NewMemStore()
	clients := ids(10)
	f.apply(m, "app", clients, nil)
	c := newTest(f, m, 0)
	rec, err := c.Start(context.Background(), "app", Spec{Puts: spec.Puts, Stages: []float64{50, 100}, Bake: time.Second}, "alice", "ticket 7")
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		f.apply(m, "app", clients, nil)
		step(t, c, nil)
		f.advance(time.Second)
	}
	got, _ := c.Get(context.Background(), "app", rec.ID)
	var whats []string
	for _, d := range got.Decisions {
		whats = append(whats, d.What)
		if d.Actor == "" || d.Reason == "" {
			t.Errorf("decision without an actor or a reason: %+v", d)
		}
	}
	if want := "start bake bake-end stage bake bake-end promote"; strings.Join(whats, " ") != want {
		t.Fatalf("decisions %q, want %q", whats, want)
	}
	// The counts each was taken on: a stage's members, all reported.
	for i, want := range []int{-1, 5, 5, -1, 10, 10, 10} {
		d := got.Decisions[i]
		switch {
		case want < 0 && d.Counts != nil:
			t.Errorf("%s carries counts %+v", d.What, *d.Counts)
		case want >= 0 && (d.Counts == nil || d.Counts.InStage != want || d.Counts.Reported != want):
			t.Errorf("%s at %v%%: counts %+v, want %d in the stage, all reported", d.What, d.Stage, d.Counts, want)
		}
	}
	if !strings.Contains(got.Decisions[2].Reason, "baked 1s") || got.Decisions[2].Revision != 0 {
		t.Fatalf("bake-end %+v", got.Decisions[2])
	}
	if !strings.Contains(got.Decisions[0].Reason, "ticket 7") || got.Decisions[0].Actor != "alice" {
		t.Fatalf("start %+v", got.Decisions[0])
	}
	var reasons []string
	for _, cm := range m.Log() {
		if cm.Change != nil {
			reasons = append(reasons, cm.Change.Kind+": "+cm.Change.Reason)
		}
	}
	if len(reasons) != 3 || !strings.Contains(reasons[1], "baked 1s") || !strings.Contains(reasons[2], "promoted") {
		t.Fatalf("audit reasons %q", reasons)
	}
}

// stagedIn is the staged rollout app's content carries in m.
func stagedIn(t *testing.T, m *MemStore) *rollout.Staged {
	t.Helper()
	s, err := rollout.Decode(m.Content("app")[rollout.Key])
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A stage started before any client reported is cut over the hash space
// and can hold none of the clients that then report: it is cut again
// over them (upwards), holds its share, and bakes only once they have
// reported; the clients outside the first cut stay outside the stage
// until then. A cut taken over known clients is never recut; with no
// client known at all a stage passes.
func TestEmptyStageIsCutAgainOverTheClientsKnown(t *testing.T) {
	f, m := newFleet(), NewMemStore()
	c := newTest(f, m, 0)
	rec, err := c.Start(context.Background(), "app", Spec{Puts: spec.Puts, Stages: []float64{10, 100}, Bake: time.Second}, "", "")
	if err != nil {
		t.Fatal(err)
	}
	first := stagedIn(t, m)
	// Twenty clients none of which the first cut holds.
	var clients []string
	for i := 0; len(clients) < 20; i++ {
		if id := fmt.Sprintf("c%04d", i); !first.Member(id) {
			clients = append(clients, id)
		}
	}
	f.apply(m, "app", clients, nil)
	step(t, c, nil)
	got, _ := c.Get(context.Background(), "app", rec.ID)
	last := got.Decisions[len(got.Decisions)-1]
	if last.What != "recut" || got.InStage != 2 || got.Reported != 0 || got.Baking || len(got.Revisions) != 1 || got.Revisions[0] == rec.Revisions[0] {
		t.Fatalf("after the clients reported: %+v, last decision %+v; want recut, 2 in the stage, none reported its new revision", got, last)
	}
	recut := stagedIn(t, m)
	members := 0
	for _, id := range clients {
		if recut.Member(id) {
			members++
		}
	}
	if recut.Cut <= first.Cut || members != 2 || recut.ID != first.ID || recut.Stage != 10 {
		t.Fatalf("recut %+v (first cut %d): %d members of 20, want 2", recut, first.Cut, members)
	}
	for range 10 {
		f.apply(m, "app", clients, nil)
		step(t, c, nil)
		f.advance(600 * time.Millisecond)
	}
	got, _ = c.Get(context.Background(), "app", rec.ID)
	var whats []string
	for _, d := range got.Decisions {
		whats = append(whats, d.What)
	}
	if want := "start recut bake bake-end stage bake bake-end promote"; got.State != Promoted || strings.Join(whats, " ") != want {
		t.Fatalf("state %s, decisions %q; want promoted through %q", got.State, whats, want)
	}
	if !strings.Contains(got.Decisions[2].Reason, "2 of 2 client(s) reported") {
		t.Fatalf("the 10%% stage baked on %q, want its 2 members reported", got.Decisions[2].Reason)
	}

	// A cut taken over known clients is not recut when the controller
	// knows none of its members (a new leader before the reports of
	// another server's clients reach it).
	f2, m2 := newFleet(), NewMemStore()
	f2.apply(m2, "app", ids(20), nil)
	c2 := newTest(f2, m2, 0)
	rec2, err := c2.Start(context.Background(), "app", Spec{Puts: spec.Puts, Stages: []float64{10, 100}, Bake: time.Second}, "", "")
	if err != nil {
		t.Fatal(err)
	}
	staged := stagedIn(t, m2)
	f2.mu.Lock()
	for id := range f2.reports {
		if staged.Member(id) {
			delete(f2.reports, id)
		}
	}
	f2.mu.Unlock()
	step(t, c2, nil)
	got, _ = c2.Get(context.Background(), "app", rec2.ID)
	if slices.ContainsFunc(got.Decisions, func(d Decision) bool { return d.What == "recut" }) {
		t.Fatalf("a cut over known clients was recut: %+v", got.Decisions)
	}

	// Nobody known: the stage passes.
	f3, m3 := newFleet(), NewMemStore()
	c3 := newTest(f3, m3, 0)
	rec3, err := c3.Start(context.Background(), "app", Spec{Puts: spec.Puts, Stages: []float64{10, 100}, Bake: time.Second}, "", "")
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		step(t, c3, nil)
		f3.advance(600 * time.Millisecond)
	}
	if got, _ := c3.Get(context.Background(), "app", rec3.ID); got.State != Promoted {
		t.Fatalf("no client known: state %s, want promoted", got.State)
	}
}

// A member silent past the liveness window is not gone before the stage
// has waited its report timeout for it: under load reports come late.
// The stage waits for it; once the timeout passes it counts gone and
// the stage goes on without it.
func TestSlowMemberIsNotGoneBeforeTheReportTimeout(t *testing.T) {
	f, m := newFleet(), NewMemStore()
	clients := ids(10)
	f.apply(m, "app", clients, nil)
	c := newTest(f, m, 3*time.Second)
	rec, err := c.Start(context.Background(), "app", Spec{Puts: spec.Puts, Stages: []float64{100}, ReportTimeout: 10 * time.Second}, "", "")
	if err != nil {
		t.Fatal(err)
	}
	// c000 is silent; the others report every second.
	for range 8 {
		f.apply(m, "app", clients[1:], nil)
		step(t, c, nil)
		f.advance(time.Second)
	}
	got, _ := c.Get(context.Background(), "app", rec.ID)
	if got.State != Running || got.Baking || got.Gone != 0 || got.InStage != 10 || got.Reported != 9 {
		t.Fatalf("8 s into the stage, c000 silent: %+v; want waiting for it, none gone", got.RolloutCounts)
	}
	for range 6 {
		f.apply(m, "app", clients[1:], nil)
		step(t, c, nil)
		f.advance(time.Second)
	}
	got, _ = c.Get(context.Background(), "app", rec.ID)
	if got.State != Promoted || !strings.Contains(got.Decisions[1].Reason, "9 of 9 client(s) reported (1 gone)") {
		t.Fatalf("past the report timeout: state %s, decisions %+v; want promoted without c000, counted gone", got.State, got.Decisions)
	}
}

// TestListReadsReportsOnce: a namespace's list is counted over one read
// of its reports, not one per record (up to 33 records, each read a
// fetch of every server's summary).
func TestListReadsReportsOnce(t *testing.T) {
	f, m := newFleet(), NewMemStore()
	clients := ids(10)
	f.apply(m, "app", clients, nil)
	var reads atomic.Int32
	c := New(Config{Store: m, Now: f.clock, Reports: func(ctx context.Context, ns string) ([]Report, error) {
		reads.Add(1)
		return f.Reports(ctx, ns)
	}})
	ctx := context.Background()
	for i := range 3 {
		rec, err := c.Start(ctx, "app", spec, "alice", fmt.Sprint("ticket ", i))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Abort(ctx, "app", rec.ID, "alice", "not today"); err != nil {
			t.Fatal(err)
		}
	}
	reads.Store(0)
	recs, err := c.List(ctx, "app")
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 || reads.Load() != 1 {
		t.Fatalf("%d records over %d reads of the reports, want 3 over 1", len(recs), reads.Load())
	}
	for _, r := range recs {
		if r.State != Reverted || r.Clients != len(clients) {
			t.Errorf("record %+v: want reverted, counted over %d clients", r, len(clients))
		}
	}
	if recs, err := c.List(ctx, "other"); err != nil || recs == nil || len(recs) != 0 {
		t.Errorf("a namespace without rollouts: %v, %v; want an empty list", recs, err)
	}
}

// TestNacksCountOncePerIdentity: three client ids whose nacks came under
// one token are one nacker, which a rollout allowing 2 nacks outlives;
// three under distinct tokens revert it, and so do three without any
// (a server without tokens counts client ids).
func TestNacksCountOncePerIdentity(t *testing.T) {
	for _, tc := range []struct {
		name   string
		idents []string
		revert bool
	}{
		{"one token, three ids", []string{"reader", "reader", "reader"}, false},
		{"three tokens", []string{"svc-a", "svc-b", "svc-c"}, true},
		{"no tokens", []string{"", "", ""}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, m := newFleet(), NewMemStore()
			clients := ids(3)
			f.apply(m, "app", clients, nil)
			c := newTest(f, m, 0)
			sp := spec
			sp.Stages, sp.MaxNacks, sp.Bake = []float64{100}, 2, time.Hour
			rec, err := c.Start(context.Background(), "app", sp, "alice", "")
			if err != nil {
				t.Fatal(err)
			}
			f.apply(m, "app", clients, func(string) bool { return true })
			f.mu.Lock()
			for i, id := range clients {
				f.reports[id].Identity = tc.idents[i]
			}
			f.mu.Unlock()
			step(t, c, nil)
			got, _ := c.Get(context.Background(), "app", rec.ID)
			if reverted := got.State == Reverted; reverted != tc.revert {
				t.Fatalf("state %s (%s), want reverted: %v", got.State, got.Reason, tc.revert)
			}
		})
	}
}

// TestMissingReportsHoldTheStage: while Missing says reports were dropped
// on the way since the rollout's start, a stage whose known members have
// all reported does not bake, and times out saying how many are missing
// and why; reports missing once a stage bakes hold it at the bake's end.
// None missing, the same fleet promotes.
func TestMissingReportsHoldTheStage(t *testing.T) {
	for _, tc := range []struct {
		name            string
		missingFromBake bool
	}{{"before the bake", false}, {"during the bake", true}} {
		t.Run(tc.name, func(t *testing.T) {
			f, m := newFleet(), NewMemStore()
			clients := ids(10)
			f.apply(m, "app", clients, nil)
			var missing atomic.Int64
			if !tc.missingFromBake {
				missing.Store(4)
			}
			c := New(Config{Store: m, Reports: f.Reports, Now: f.clock,
				Missing: func(context.Context, string, time.Time) (int64, string) {
					return missing.Load(), "a relay's queue was full"
				}})
			sp := Spec{Puts: spec.Puts, Stages: []float64{50, 100}, Bake: time.Second, StageTimeout: 10 * time.Second, OnTimeout: Hold}
			rec, err := c.Start(context.Background(), "app", sp, "", "")
			if err != nil {
				t.Fatal(err)
			}
			for range 30 {
				f.apply(m, "app", clients, nil)
				step(t, c, nil)
				if cur, _ := m.Current(context.Background(), "app"); tc.missingFromBake && !cur.BakeEnd.IsZero() {
					missing.Store(2)
				}
				f.advance(500 * time.Millisecond)
			}
			got, err := c.Get(context.Background(), "app", rec.ID)
			if err != nil {
				t.Fatal(err)
			}
			want := "4 report(s) missing (a relay's queue was full)"
			if tc.missingFromBake {
				want = "2 report(s) are missing (a relay's queue was full); holding"
			}
			if got.State != Running || !got.Held || got.Stage != 50 || !strings.Contains(got.Reason, want) {
				t.Fatalf("record %+v: want held at 50%% with %q", got, want)
			}
			missing.Store(0)
			if _, err := c.Promote(context.Background(), "app", rec.ID, "bob", "the queue was drained"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestStepsDecideOnPartials: a controller fed partials (two servers'
// sources, counted apart) promotes stage by stage, holds while one
// source's partial is of an earlier stage (saying so at the timeout),
// and counts a source that two servers name once (a killed server's
// partial outliving it).
func TestStepsDecideOnPartials(t *testing.T) {
	f, m := newFleet(), NewMemStore()
	clients := ids(40)
	f.apply(m, "app", clients, nil)
	var lagging atomic.Bool
	counters := []*Counter{NewCounter(), NewCounter(), NewCounter()}
	partials := func(ctx context.Context, st *State) ([]Partial, error) {
		reports, _ := f.Reports(ctx, st.Namespace)
		var a, b []Report
		for _, r := range reports {
			if r.ClientID < "c020" {
				a = append(a, r)
			} else {
				b = append(b, r)
			}
		}
		now := f.clock()
		pa := counters[0].Count(st, "relay-a", a, now, 0, true)
		pb := counters[1].Count(st, "relay-b", b, now, 0, true)
		// relay-b's clients as the server it left counted them a moment
		// before (its key lives on): the later partial alone counts.
		old := counters[2].Count(st, "relay-b", b, now.Add(-time.Second), 0, true)
		old.InStage, old.Reported = 99, 0
		if lagging.Load() {
			pb.StageRev-- // relay-b's server has not counted this stage yet
		}
		return []Partial{pa.Bounded(), old.Bounded(), pb.Bounded()}, nil
	}
	c := New(Config{Store: m, Reports: f.Reports, Partials: partials, Now: f.clock})
	sp := Spec{Puts: spec.Puts, Stages: []float64{10, 100}, Bake: time.Second, StageTimeout: 5 * time.Second, OnTimeout: Hold}
	rec, err := c.Start(context.Background(), "app", sp, "", "")
	if err != nil {
		t.Fatal(err)
	}
	lagging.Store(true)
	for range 20 {
		f.apply(m, "app", clients, nil)
		step(t, c, nil)
		f.advance(500 * time.Millisecond)
	}
	got, err := c.Get(context.Background(), "app", rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != Running || !got.Held || got.Stage != 10 || !strings.Contains(got.Reason, "relay-b") {
		t.Fatalf("record %+v: want held at 10%% naming relay-b", got)
	}
	lagging.Store(false)
	if _, err := c.Promote(context.Background(), "app", rec.ID, "bob", ""); err != nil {
		t.Fatal(err)
	}
	rec, err = c.Start(context.Background(), "app", Spec{Puts: map[string]json.RawMessage{"a": json.RawMessage(`3`)}, Stages: []float64{10, 100}, Bake: time.Second}, "", "")
	if err != nil {
		t.Fatal(err)
	}
	var bakes []Counts
	for range 30 {
		f.apply(m, "app", clients, nil)
		step(t, c, nil)
		f.advance(500 * time.Millisecond)
	}
	got, err = c.Get(context.Background(), "app", rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range got.Decisions {
		if d.What == "bake" {
			bakes = append(bakes, *d.Counts)
		}
	}
	if got.State != Promoted || len(bakes) != 2 || bakes[0].InStage != 4 || bakes[1].InStage != 40 || bakes[1].Reported != 40 {
		t.Fatalf("record %+v, bakes %+v: want promoted, 4 then 40 in the stages, each counted once", got, bakes)
	}
}
