package controller

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/rollout"
)

func TestSumPartials(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	st := &State{ID: "r-1", State: Running, Cut: 100, Cuts: []uint64{100}, Revisions: []int64{7}, StageAt: t0,
		Spec: Spec{Stages: []float64{10, 100}, MaxNacks: 1}}
	p := func(src string, at time.Duration, in, reported int, nackers ...string) Partial {
		return Partial{Source: src, At: t0.Add(at), Rollout: "r-1", StageRev: 7, InStage: in, Reported: reported, Clients: in, Live: in, Nackers: nackers}
	}
	for _, tc := range []struct {
		name         string
		ps           []Partial
		in, reported int
		nackers      int
		stale        []string
		pastMaxNacks bool
	}{
		{"sources add up", []Partial{p("relay-a", 0, 3, 2), p("relay-b", 0, 4, 4)}, 7, 6, 0, nil, false},
		{"the later of one source alone counts", []Partial{p("relay-a", time.Second, 5, 5), p("relay-a", 0, 5, 1), p("relay-b", 0, 1, 0)}, 6, 5, 0, nil, false},
		{"a partial of an earlier stage is stale", []Partial{{Source: "relay-a", At: t0, Rollout: "r-1", StageRev: 3, InStage: 9}, p("relay-b", 0, 1, 1)}, 1, 1, 0, []string{"relay-a"}, false},
		{"a partial of another rollout is stale", []Partial{{Source: "server/s2", At: t0, Rollout: "r-0", StageRev: 7, InStage: 9}}, 0, 0, 0, []string{"server/s2"}, false},
		{"a nacker named by two sources counts once", []Partial{p("relay-a", 0, 1, 1, "c1"), p("relay-b", time.Second, 1, 1, "c1")}, 2, 2, 1, nil, false},
		{"nackers over sources add up", []Partial{p("relay-a", 0, 1, 1, "c1"), p("relay-b", 0, 1, 1, "c2")}, 2, 2, 2, nil, true},
		{"an earlier stage's nacks still count", []Partial{{Source: "relay-a", At: t0, Rollout: "r-1", StageRev: 3, Nackers: []string{"c1", "c2"}}}, 0, 0, 2, []string{"relay-a"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := sumPartials(st, tc.ps)
			if s.counts.InStage != tc.in || s.counts.Reported != tc.reported || s.nackers != tc.nackers || !slices.Equal(s.stale, tc.stale) {
				t.Errorf("in %d reported %d nackers %d stale %q; want %d %d %d %q", s.counts.InStage, s.counts.Reported, s.nackers, s.stale,
					tc.in, tc.reported, tc.nackers, tc.stale)
			}
			if over := s.nackers > st.Spec.MaxNacks; over != tc.pastMaxNacks {
				t.Errorf("past max_nacks: %v, want %v", over, tc.pastMaxNacks)
			}
			if n, why := s.missing(); (n > 0) != (len(tc.stale) > 0) {
				t.Errorf("missing %d (%s) with stale %q", n, why, tc.stale)
			}
		})
	}
}

// TestPartialNackersJudgeMaxNacksExactly: however a fleet's nackers are
// spread over sources, each naming at most max_nacks+1 of its own, the
// sum says exactly whether more than max_nacks rejected the change.
func TestPartialNackersJudgeMaxNacksExactly(t *testing.T) {
	t0 := time.Now()
	st := &State{ID: "r-1", State: Running, Cut: math.MaxUint64, Cuts: []uint64{math.MaxUint64}, Revisions: []int64{7}, StageAt: t0,
		Spec: Spec{Stages: []float64{100}, MaxNacks: 6}}
	for _, spread := range [][]int{{7}, {6}, {3, 3}, {3, 4}, {1, 1, 1, 1, 1, 1, 1}, {20, 0}, {0, 6}} {
		var ps []Partial
		total, n := 0, 0
		for i, k := range spread {
			var reports []Report
			for range k {
				reports = append(reports, Report{ClientID: fmt.Sprint("c", n), Nacked: 7, NackedRollout: true, Rollout: "r-1", Seen: t0})
				n++
			}
			total += k
			ps = append(ps, NewCounter().Count(st, fmt.Sprint("relay-", i), reports, t0, 0, false).Bounded())
		}
		if got := sumPartials(st, ps).nackers > st.Spec.MaxNacks; got != (total > st.Spec.MaxNacks) {
			t.Errorf("spread %v: past max_nacks %v, want %v", spread, got, total > st.Spec.MaxNacks)
		}
	}
}

func TestPartialCut(t *testing.T) {
	small := stageSum{exact: true, live: 4, hashes: []uint64{10, 20, 30, 40}}
	if got := small.cut(50, 0); got != 20 {
		t.Errorf("exact cut of 50%% of four: %d, want 20", got)
	}
	if got := small.cut(100, 0); got != math.MaxUint64 {
		t.Errorf("100%%: %d", got)
	}
	share := rollout.Cut(nil, 10, 0)
	large := stageSum{live: 100_000, next: share / 2}
	if got := large.cut(10, 0); got != share {
		t.Errorf("large fleet: cut %d, want the share %d", got, share)
	}
	// The share holds nobody above the floor: the next client comes in.
	sparse := stageSum{live: 1000, next: share * 2}
	if got := sparse.cut(10, 0); got != share*2 {
		t.Errorf("sparse: cut %d, want the next client's %d", got, share*2)
	}
	if got := large.cut(10, share*3); got != share*3 {
		t.Errorf("below the floor: cut %d, want the floor %d", got, share*3)
	}
}

// TestCounterCountsWhatATallyDoes: a source's partial counts what the
// controller counts of the same reports, and ships at most
// MaxPartialHashes hashes.
func TestCounterCountsWhatATallyDoes(t *testing.T) {
	t0 := time.Now()
	st := &State{ID: "r-1", State: Running, Cut: math.MaxUint64 / 2, Cuts: []uint64{math.MaxUint64 / 2}, Revisions: []int64{7}, StageAt: t0,
		Spec: Spec{Stages: []float64{50, 100}, ReportTimeout: time.Minute}}
	var reports []Report
	for i := range 200 {
		rev := int64(3)
		if i%2 == 0 {
			rev = 7
		}
		reports = append(reports, Report{ClientID: fmt.Sprint("c", i), Acked: rev, Seen: t0})
	}
	p := NewCounter().Count(st, "relay-a", reports, t0, 0, false)
	in := 0
	for _, r := range reports {
		if rollout.Hash(st.ID, r.ClientID) <= st.Cut {
			in++
		}
	}
	if p.InStage != in || p.Clients != 200 || p.Live != 200 || len(p.Hashes) != 200 || p.Waiting != 100 {
		t.Errorf("partial %+v: want %d in the stage, 200 clients, 200 live, 100 waiting", p, in)
	}
	if b := p.Bounded(); b.Hashes != nil || b.Live != 200 {
		t.Errorf("bounded: %d hashes of %d live, want none past %d", len(b.Hashes), b.Live, MaxPartialHashes)
	}
}

// TestNackReasonsGroup: the nackers of two sources are grouped by what
// they rejected and why, with counts and a few client ids, the most
// common first; past maxReasons groups the rest are counted as others.
func TestNackReasonsGroup(t *testing.T) {
	t0 := time.Now()
	st := &State{ID: "r-1", State: Running, Cut: math.MaxUint64, Cuts: []uint64{math.MaxUint64}, Revisions: []int64{7}, StageAt: t0,
		Spec: Spec{Stages: []float64{100}}}
	nack := func(id, err string) Report {
		return Report{ClientID: id, Nacked: 7, NackedRollout: true, Rollout: "r-1", NackError: err, Seen: t0}
	}
	a := NewCounter().Count(st, "relay-a", []Report{nack("c1", "bad value"), nack("c2", "bad value"), nack("c3", "too big")}, t0, 0, false)
	b := NewCounter().Count(st, "relay-b", []Report{nack("c4", "bad value"), nack("c5", "bad value")}, t0, 0, false)
	s := sumPartials(st, []Partial{a, b})
	want := "5 client(s) rejected the change at stage 100% (max_nacks 0): 4× nack of revision 7: bad value (c1, c2, c4); 1× nack of revision 7: too big (c3)"
	if got := s.nackReason(st); got != want {
		t.Errorf("reason\n%s\nwant\n%s", got, want)
	}
	var many []Report
	for i := range 40 {
		many = append(many, nack(fmt.Sprint("d", i), fmt.Sprint("error ", i%20)))
	}
	p := NewCounter().Count(st, "relay-c", many, t0, 0, false)
	total := 0
	for _, g := range p.Reasons {
		total += g.Count
	}
	if len(p.Reasons) != maxReasons || total != 40 || p.Reasons[maxReasons-1].Error != "" {
		t.Errorf("%d groups of %d nackers, the last %+v: want %d, all 40, the last the others'", len(p.Reasons), total, p.Reasons[maxReasons-1], maxReasons)
	}
}
