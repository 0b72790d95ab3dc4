package controller

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/holdfast-dev/holdfast/internal/rollout"
)

// Partial is one source's count of a running rollout's current stage:
// what the clients of one relay (or those connected to one server
// directly) reported, counted where they are heard. The store carries
// partials rather than the clients' reports, so that what a rollout costs
// it grows with relays and servers, not clients; the leader sums them
// (Config.Partials). Of two partials of one source (a relay that moved
// from one server to another, a server killed while its partials' lease
// lives) the later replaces the earlier, so that its clients count once.
type Partial struct {
	// Source names what was counted: a relay's id, or "server/" and a
	// server's id for its own clients.
	Source string `json:"src"`
	// At is when it was counted.
	At      time.Time `json:"at"`
	Rollout string    `json:"rollout"`
	// StageRev is the revision of the stage it counted: a partial of
	// another rollout or an earlier stage is stale, and a stage holds
	// while one is (the source has not counted it yet).
	StageRev int64 `json:"stage_rev"`

	// What Counts sums: the clients known, and of the stage's members
	// those in it, reported, lagging and gone.
	Clients  int `json:"clients,omitempty"`
	Served   int `json:"served,omitempty"`
	Acked    int `json:"acked,omitempty"`
	Nacked   int `json:"nacked,omitempty"`
	Would    int `json:"would,omitempty"`
	InStage  int `json:"in_stage,omitempty"`
	Reported int `json:"reported,omitempty"`
	Lagging  int `json:"lagging,omitempty"`
	Gone     int `json:"gone,omitempty"`
	// Waiting is the live clients that have not reported the stage's
	// revision (a prevalidating stage waits for those outside it).
	Waiting int `json:"waiting,omitempty"`
	// Unheard is the clients the source knows are connected but whose
	// reports it has not heard yet (a relay that just moved here): a stage
	// holds while any is, rather than pass on the clients heard so far.
	Unheard int `json:"unheard,omitempty"`

	// Live is how many clients a next stage's cut is taken over; Hashes
	// their hashes (as a source ships it, Bounded: when there are at most
	// MaxPartialHashes of them, so that a cut over a small fleet is
	// exact), and Next the least of them above the
	// stage's cut (0: none), so that a cut taken as a share of the hash
	// space over a large fleet still takes in at least one more client.
	Live   int      `json:"live,omitempty"`
	Hashes []uint64 `json:"hashes,omitempty"`
	Next   uint64   `json:"next,string,omitempty"`

	// Nackers are the distinct clients that rejected the rollout's change
	// (their identities, when their reports name one, else their client
	// ids), up to as many as its max_nacks needs to be judged exactly over
	// every source; MoreNackers counts those left out.
	Nackers     []string `json:"nackers,omitempty"`
	MoreNackers int      `json:"more_nackers,omitempty"`
	// Reasons groups every nacker by what it rejected and why, with
	// counts and a few of their client ids (at most maxReasons groups,
	// the rest in the last, its Error empty).
	Reasons []NackReason `json:"reasons,omitempty"`
}

// NackReason is the nackers of one revision that gave one error.
type NackReason struct {
	What     string   `json:"what"` // "nack" or "would_nack"
	Revision int64    `json:"revision"`
	Error    string   `json:"error"`
	Count    int      `json:"count"`
	Sample   []string `json:"sample,omitempty"` // up to maxReasonSample client ids
}

// Bounds of the nack reasons a partial carries.
const (
	maxReasons      = 16
	maxReasonSample = 3
)

// addReason adds r to groups: to its group, or as a new one, or past
// maxReasons to the last (the others).
func addReason(groups []NackReason, r NackReason) []NackReason {
	for i := range groups {
		g := &groups[i]
		if g.What == r.What && g.Revision == r.Revision && g.Error == r.Error {
			g.Count += r.Count
			for _, id := range r.Sample {
				if len(g.Sample) < maxReasonSample && !slices.Contains(g.Sample, id) {
					g.Sample = append(g.Sample, id)
				}
			}
			return groups
		}
	}
	if len(groups) >= maxReasons {
		other := &groups[len(groups)-1]
		if other.Error != "" || other.What != "" {
			// The last group becomes the others'.
			*other = NackReason{Count: other.Count}
		}
		other.Count += r.Count
		return groups
	}
	r.Sample = slices.Clone(r.Sample[:min(len(r.Sample), maxReasonSample)])
	return append(groups, r)
}

// describeReasons says what groups hold, the most common first.
func describeReasons(groups []NackReason) string {
	groups = slices.Clone(groups)
	slices.SortStableFunc(groups, func(a, b NackReason) int { return b.Count - a.Count })
	var parts []string
	for i, g := range groups {
		if i == maxReasonNacks {
			n := 0
			for _, o := range groups[i:] {
				n += o.Count
			}
			parts = append(parts, fmt.Sprintf("%d more for other reasons", n))
			break
		}
		if g.What == "" {
			parts = append(parts, fmt.Sprintf("%d for other reasons", g.Count))
			continue
		}
		parts = append(parts, fmt.Sprintf("%d× %s of revision %d: %s (%s)", g.Count, g.What, g.Revision, g.Error, strings.Join(g.Sample, ", ")))
	}
	return strings.Join(parts, "; ")
}

// MaxPartialHashes bounds Partial.Hashes as a source ships them
// (Bounded): past it a source counts its live clients without naming
// them.
const MaxPartialHashes = 64

// maxPartialNackers bounds Partial.Nackers whatever a spec's max_nacks.
const maxPartialNackers = 256

// ServerSource is the source of a server's own clients (those not behind
// a relay).
func ServerSource(server string) string { return "server/" + server }

// Counter counts a running rollout's reports into partials, remembering
// each client's hash and when it was first counted (a member that joins a
// stage late has the stage's report timeout from then). It is safe for
// concurrent use.
type Counter struct {
	mu    sync.Mutex
	known map[string]map[string]memo // rollout id → client → its hash, when first counted
}

// NewCounter returns an empty counter.
func NewCounter() *Counter {
	return &Counter{known: make(map[string]map[string]memo)}
}

// memo is what a counter remembers of a client of a running rollout.
type memo struct {
	hash  uint64
	since time.Time
}

// Count counts the reports of source's clients of st's namespace, as of
// now, liveness being how long a client may stay silent before it is
// gone (0: never). keep: remember the clients first counted (st is
// running and this count decides); else only use what is remembered.
func (k *Counter) Count(st *State, source string, reports []Report, now time.Time, liveness time.Duration, keep bool) Partial {
	t := k.tally(st, reports, now, keep)
	c := t.counts(st, now, liveness)
	p := Partial{Source: source, At: now.UTC(), Rollout: st.ID, StageRev: st.stageRev(),
		Clients: c.Clients, Served: c.Served, Acked: c.Acked, Nacked: c.Nacked, Would: c.WouldNack,
		InStage: c.InStage, Reported: c.Reported, Lagging: c.Lagging, Gone: c.Gone}
	for i := range t.clients {
		cl := &t.clients[i]
		if t.waiting(st, cl, now, liveness) {
			p.Waiting++
		}
	}
	live := t.liveHashes(st, now, liveness)
	p.Live, p.Hashes = len(live), live
	for _, h := range live {
		if h > st.Cut && (p.Next == 0 || h < p.Next) {
			p.Next = h
		}
	}
	limit := min(st.Spec.MaxNacks+1, maxPartialNackers)
	p.Nackers, p.Reasons = t.nackList, t.reasons
	if len(p.Nackers) > limit {
		p.Nackers, p.MoreNackers = p.Nackers[:limit], len(p.Nackers)-limit
	}
	return p
}

// Bounded returns p as a source ships it: its hashes only when there are
// at most MaxPartialHashes, sorted.
func (p Partial) Bounded() Partial {
	if len(p.Hashes) > MaxPartialHashes {
		p.Hashes = nil
	} else {
		p.Hashes = slices.Sorted(slices.Values(p.Hashes))
	}
	return p
}

func (k *Counter) tally(st *State, reports []Report, now time.Time, keep bool) *tally {
	k.mu.Lock()
	defer k.mu.Unlock()
	known := k.known[st.ID]
	if known == nil && st.State == Running && keep {
		known = make(map[string]memo, len(reports))
		k.known[st.ID] = known
	}
	t := newTally(len(reports))
	of := func(id string) (uint64, time.Time) {
		if m, ok := known[id]; ok {
			return m.hash, m.since
		}
		h := rollout.Hash(st.ID, id)
		if keep && known != nil {
			known[id] = memo{hash: h, since: now}
		}
		return h, now
	}
	for i := range reports {
		t.observe(st, &reports[i], now, of)
	}
	return t
}

// Forget drops what the counter remembers of the rollouts running does
// not name.
func (k *Counter) Forget(running func(id string) bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for id := range k.known {
		if !running(id) {
			delete(k.known, id)
		}
	}
}

// stageSum is the partials of a rollout's current stage summed: what a
// step decides on.
type stageSum struct {
	counts  Counts
	nackers int
	reasons []NackReason
	waiting int
	unheard int
	// stale names the sources whose partial is of another stage.
	stale []string
	// live is how many clients a next cut is taken over; hashes theirs
	// when every source named them (exact).
	live   int
	hashes []uint64
	exact  bool
	next   uint64
}

// sumPartials sums the partials of st's current stage, the later of two
// of one source alone counting.
func sumPartials(st *State, ps []Partial) stageSum {
	latest := make(map[string]*Partial, len(ps))
	for i := range ps {
		p := &ps[i]
		if q, ok := latest[p.Source]; !ok || p.At.After(q.At) {
			latest[p.Source] = p
		}
	}
	sources := slices.Sorted(func(yield func(string) bool) {
		for s := range latest {
			if !yield(s) {
				return
			}
		}
	})
	s := stageSum{exact: true}
	nackers := make(map[string]bool)
	for _, src := range sources {
		p := latest[src]
		if p.Rollout != st.ID {
			s.stale = append(s.stale, src)
			continue
		}
		// A source's nacks of an earlier stage are the rollout's all the
		// same: they count while its partial of this stage comes.
		for _, n := range p.Nackers {
			nackers[n] = true
		}
		s.nackers += p.MoreNackers
		for _, g := range p.Reasons {
			s.reasons = addReason(s.reasons, g)
		}
		if p.StageRev != st.stageRev() {
			s.stale = append(s.stale, src)
			continue
		}
		c := &s.counts
		c.Clients += p.Clients
		c.Served += p.Served
		c.Acked += p.Acked
		c.Nacked += p.Nacked
		c.WouldNack += p.Would
		c.InStage += p.InStage
		c.Reported += p.Reported
		c.Lagging += p.Lagging
		c.Gone += p.Gone
		s.waiting += p.Waiting
		s.unheard += p.Unheard
		s.live += p.Live
		if len(p.Hashes) == p.Live {
			s.hashes = append(s.hashes, p.Hashes...)
		} else {
			s.exact = false
		}
		if p.Next != 0 && (s.next == 0 || p.Next < s.next) {
			s.next = p.Next
		}
	}
	s.nackers += len(nackers)
	if !st.BakeEnd.IsZero() {
		s.counts.Lagging = 0
	}
	return s
}

// cut is the cut of a stage of pct percent over the live clients, never
// below floor: exact when every source named its clients' hashes, else
// the stage's share of the hash space, raised to take in at least the
// next client above floor.
func (s stageSum) cut(pct float64, floor uint64) uint64 {
	if pct >= 100 {
		return math.MaxUint64
	}
	if s.exact {
		return rollout.Cut(s.hashes, pct, floor)
	}
	cut := rollout.Cut(nil, pct, floor)
	if s.next != 0 && cut < s.next {
		// The share held no client above floor: take in the next.
		cut = s.next
	}
	return cut
}

// missing says what the sum lacks of the stage: its stale sources and its
// unheard clients (0: nothing).
func (s stageSum) missing() (n int64, why string) {
	var whys []string
	if len(s.stale) > 0 {
		n += int64(len(s.stale))
		names := s.stale[:min(len(s.stale), 5)]
		w := fmt.Sprintf("%d source(s) have not counted the stage yet (%s", len(s.stale), strings.Join(names, ", "))
		if len(s.stale) > len(names) {
			w += ", …"
		}
		whys = append(whys, w+")")
	}
	if s.unheard > 0 {
		n += int64(s.unheard)
		whys = append(whys, fmt.Sprintf("%d connected client(s) not heard from yet", s.unheard))
	}
	return n, strings.Join(whys, "; ")
}

func (s stageSum) nackReason(st *State) string {
	return fmt.Sprintf("%d client(s) rejected the change at stage %v%% (max_nacks %d): %s",
		s.nackers, st.Spec.Stages[st.Stage], st.Spec.MaxNacks, describeReasons(s.reasons))
}

// Sum is what a step of st counts over ps: its counts, the distinct
// nackers, and the sources whose partials are of another stage (the
// stage waits for them).
func Sum(st *State, ps []Partial) (counts Counts, nackers int, stale []string) {
	s := sumPartials(st, ps)
	return s.counts, s.nackers, s.stale
}
