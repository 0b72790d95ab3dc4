package fakeserver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/holdfast-dev/holdfast/internal/rollout"
	"github.com/holdfast-dev/holdfast/transport"
)

// Defaults of a RolloutSpec.
const (
	DefaultRolloutReportTimeout = 10 * time.Second
	DefaultRolloutStageTimeout  = 5 * time.Minute
)

// What a rollout does when a stage times out (RolloutSpec.OnTimeout).
const (
	OnTimeoutRevert = "revert"
	OnTimeoutHold   = "hold"
)

// The states of a rollout (RolloutRecord.State).
const (
	RolloutRunning  = "running"
	RolloutPromoted = "promoted"
	RolloutReverted = "reverted"
)

// Limits of a rollout.
const (
	maxRolloutStages = 20
	maxKeptRollouts  = 32 // ended rollouts kept per namespace, newest
	maxReasonNacks   = 5  // nack errors quoted in a reason
	maxReasonErr     = 200
	maxStepsAtOnce   = 4
)

// Errors of rollouts.
var (
	// ErrRolloutRunning: a rollout is running on the namespace; a plain
	// publish or rollback, or a second rollout, is refused (HTTP 409).
	ErrRolloutRunning = errors.New("fakeserver: a rollout is running")
	// ErrRolloutEnded: the rollout has ended; it can be neither aborted nor
	// promoted (HTTP 409).
	ErrRolloutEnded = errors.New("fakeserver: the rollout has ended")
	// ErrUnknownRollout: no rollout of that id on the namespace (HTTP 404).
	ErrUnknownRollout = errors.New("fakeserver: unknown rollout")
	// errStoreChanged: the store was reset or restored under a rollout.
	errStoreChanged = errors.New("fakeserver: the store was reset or restored")
)

// RolloutSpec is a staged rollout of a change to one namespace.
type RolloutSpec struct {
	// Puts and Deletes are the change (one of them not empty; keys valid
	// and not reserved; no key both put and deleted).
	Puts    map[string]json.RawMessage
	Deletes []string
	// Stages are the percentages of the namespace's clients each stage
	// covers: strictly increasing, each in (0, 100].
	Stages []float64
	// Bake is how long each stage holds once every client in it reported,
	// before the next (0: none).
	Bake time.Duration
	// MaxNacks is how many clients may reject the change (nack or
	// would-nack) before the rollout reverts.
	MaxNacks int
	// Prevalidate asks every client to check the staged change against
	// its own checks as soon as it learns of it and report a would-nack.
	// A stage then waits for the reports of the clients outside it too,
	// up to ReportTimeout (or StageTimeout, if shorter) from its start.
	Prevalidate bool
	// ReportTimeout is how long a client of a stage may stay silent
	// before it is counted as lagging (0: DefaultRolloutReportTimeout).
	ReportTimeout time.Duration
	// StageTimeout is how long a stage waits for its clients' reports
	// (0: DefaultRolloutStageTimeout); then OnTimeout decides.
	StageTimeout time.Duration
	// OnTimeout is OnTimeoutRevert (the default, "") or OnTimeoutHold:
	// stay at the stage until an operator promotes or aborts, or the
	// missing reports come.
	OnTimeout string
}

// RolloutRecord is the state of a rollout: the reply of GET
// /control/namespaces/{ns}/rollouts/{id}. Counts are of distinct clients.
type RolloutRecord struct {
	ID        string `json:"id"`
	Namespace string `json:"ns"`
	// State is RolloutRunning, RolloutPromoted or RolloutReverted.
	State string `json:"state"`
	// Stage is the percentage of the stage it is in, or was in when it
	// ended; Stages the plan.
	Stage  float64   `json:"stage"`
	Stages []float64 `json:"stages"`
	// Clients counts the clients the rollout knows: those the server
	// knew for the namespace when a stage began, and those that reported
	// since.
	Clients int `json:"clients"`
	// InStage counts the known clients of the current stage, Reported
	// those of them that reported its revision.
	InStage  int `json:"in_stage"`
	Reported int `json:"reported"`
	// Served counts clients that served the staged change: acked it in a
	// stage, or acked the promotion.
	Served int `json:"served"`
	// Acked and Nacked count clients that acked (nacked) a revision of
	// the rollout; WouldNack those whose checks reject the change
	// (prevalidation). Nacks and would-nacks past MaxNacks revert it.
	Acked     int `json:"acked"`
	Nacked    int `json:"nacked"`
	WouldNack int `json:"would_nack"`
	// Lagging counts clients of the current stage silent for longer than
	// the report timeout (when it ended: then).
	Lagging int `json:"lagging"`
	// Reason says why it reverted (the nacks' errors, bounded), that it
	// holds, or who promoted it early.
	Reason string `json:"reason"`
	// Revisions are those it committed: one per stage, then the promotion
	// or the revert.
	Revisions []int64 `json:"revisions"`
	// StageRevision is the revision of the current (or last) stage.
	StageRevision int64 `json:"stage_revision"`
	MaxNacks      int   `json:"max_nacks"`
	Prevalidate   bool  `json:"prevalidate,omitempty"`
	// Baking: every client of the stage reported; it bakes. Held: a stage
	// timed out with OnTimeoutHold.
	Baking    bool       `json:"baking,omitempty"`
	Held      bool       `json:"held,omitempty"`
	StartedAt time.Time  `json:"started_at"`
	EndedAt   *time.Time `json:"ended_at,omitempty"`
}

// rollouts is the origin's rollout controller: every rollout's state, and
// the goroutine that moves running ones along. Acks update the state under
// mu and wake the goroutine, which decides and commits; a commit is made
// under the namespace's stripe lock, never under mu.
type rollouts struct {
	// stripes serialise what changes a namespace's rollout or base:
	// rollout actions and plain publishes, by namespace hash.
	stripes [64]sync.Mutex
	seed    maphash.Seed

	any atomic.Bool // a rollout was ever started: acks have work here

	mu      sync.Mutex
	gen     uint64                   // the store generation the runs of which count reports
	byNS    map[string][]*rolloutRun // oldest first, at most maxKeptRollouts
	running map[string]*rolloutRun
	now     func() time.Time

	wake      chan struct{} // cap 1: something to look at
	quit      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

// rolloutRun is one rollout; every field is guarded by rollouts.mu.
type rolloutRun struct {
	id, ns string
	spec   RolloutSpec // normalised
	gen    uint64

	state    string
	stage    int    // index in spec.Stages
	cut      uint64 // the current stage's
	firstRev int64  // the first stage's revision; 0 until committed
	stageRev int64
	endRev   int64 // the promotion's or revert's; 0 while running
	stageAt  time.Time
	bakeEnd  time.Time // zero: not baking
	held     bool

	revisions []int64
	clients   map[string]*rolloutClient
	// inStage counts the known clients of the current stage, reported
	// those of them that reported its revision: kept as reports come, so
	// that a report costs the controller no walk over every client.
	inStage, reported int
	acked             int
	nacked            int
	would             int
	served            int
	nackers           int
	nackErrs          []string
	reason            string
	lagging           int // frozen when it ends
	started           time.Time
	ended             time.Time

	// heard counts the known clients, in the stage or not, that reported
	// the current stage's revision: with prevalidation, a stage waits for
	// them too (their would-nacks come with their acks), up to the report
	// timeout.
	heard int

	// stageEnded is when its last stage ended: for measurements.
	stageEnded time.Time
	done       chan struct{} // closed when it ends
}

// rolloutClient is what a rollout knows of one client.
type rolloutClient struct {
	hash                                 uint64
	since                                time.Time // when the rollout first knew it
	rev                                  int64     // the highest revision of the rollout it acked or nacked
	acked, nacked, would, served, nacker bool
}

func newRollouts(gen uint64) *rollouts {
	r := &rollouts{
		seed:    maphash.MakeSeed(),
		gen:     gen,
		byNS:    make(map[string][]*rolloutRun),
		running: make(map[string]*rolloutRun),
		now:     time.Now,
		wake:    make(chan struct{}, 1),
		quit:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	return r
}

// lock takes ns's stripe lock and returns its unlock.
func (r *rollouts) lock(ns string) func() {
	m := &r.stripes[maphash.String(r.seed, ns)%uint64(len(r.stripes))]
	m.Lock()
	return m.Unlock
}

func (r *rollouts) signal() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// runningIn returns the rollout running on ns, or nil.
func (r *rollouts) runningIn(ns string) *rolloutRun {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.running[ns]
}

// wants reports whether a rollout of ns would count a report of rev: a
// running one counts every report, an ended one those of its revisions.
func (r *rollouts) wants(ns string, rev int64) bool {
	if r == nil || !r.any.Load() {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, run := range r.byNS[ns] {
		inRange := run.firstRev > 0 && rev >= run.firstRev && (run.endRev == 0 || rev <= run.endRev)
		if run.gen >= r.gen && (run.state == RolloutRunning || inRange) {
			return true
		}
	}
	return false
}

// observe counts reports into the rollouts of their namespaces, and wakes
// the controller when a running one may move.
func (r *rollouts) observe(acks []transport.Ack) {
	if r == nil || !r.any.Load() {
		return
	}
	r.mu.Lock()
	now := r.now()
	wake := false
	for i := range acks {
		for _, run := range r.byNS[acks[i].Namespace] {
			if run.gen >= r.gen && run.observe(&acks[i], now) && run.state == RolloutRunning {
				wake = true
			}
		}
	}
	r.mu.Unlock()
	if wake {
		r.signal()
	}
}

// observe counts one report; it reports whether the report touched run.
func (run *rolloutRun) observe(a *transport.Ack, now time.Time) bool {
	explicit := a.Rollout == run.id
	inRange := run.firstRev > 0 && a.Revision >= run.firstRev && (run.endRev == 0 || a.Revision <= run.endRev)
	c := run.clients[a.ClientID]
	if c == nil {
		// A running rollout knows every client that reports on its
		// namespace; an ended one only those that report on it.
		if run.state != RolloutRunning && !explicit && !inRange {
			return false
		}
		c = run.know(a.ClientID, now)
	}
	switch a.Status {
	case transport.AckApplied:
		if inRange {
			run.reportRev(c, a.Revision)
			if !c.acked {
				c.acked = true
				run.acked++
			}
		}
		if (explicit || run.state == RolloutPromoted && a.Revision == run.endRev) && !c.served {
			c.served = true
			run.served++
		}
	case transport.AckRejected:
		if !inRange && !explicit {
			return true
		}
		run.reportRev(c, a.Revision)
		if !c.nacked {
			c.nacked = true
			run.nacked++
		}
		// A nack rejects the change when it names the rollout, or comes
		// from a client in the stage that could not (the key did not
		// decode). One outside the stage without the id rejects the base,
		// which the rollout does not change: counted, but no revert.
		if explicit || c.hash <= run.cut {
			run.nack(a, c)
		}
	case transport.AckWouldReject:
		if !explicit {
			return true
		}
		if !c.would {
			c.would = true
			run.would++
		}
		run.nack(a, c)
	}
	return true
}

// know adds a client to run.
func (run *rolloutRun) know(client string, now time.Time) *rolloutClient {
	c := &rolloutClient{hash: rollout.Hash(run.id, client), since: now}
	run.clients[client] = c
	if c.hash <= run.cut && run.stageRev > 0 {
		run.inStage++
	}
	return c
}

// reportRev records that c reported revision rev of the rollout.
func (run *rolloutRun) reportRev(c *rolloutClient, rev int64) {
	if run.stageRev > 0 && c.rev < run.stageRev && rev >= run.stageRev {
		run.heard++
		if c.hash <= run.cut {
			run.reported++
		}
	}
	c.rev = max(c.rev, rev)
}

// nack counts a client's first rejection of the change and keeps its
// error for the reason (bounded).
func (run *rolloutRun) nack(a *transport.Ack, c *rolloutClient) {
	if c.nacker {
		return
	}
	c.nacker = true
	run.nackers++
	if len(run.nackErrs) < maxReasonNacks {
		e := a.Error
		if len(e) > maxReasonErr {
			e = e[:maxReasonErr]
		}
		what := "nack"
		if a.Status == transport.AckWouldReject {
			what = "would_nack"
		}
		run.nackErrs = append(run.nackErrs, fmt.Sprintf("%s %s of revision %d: %s", a.ClientID, what, a.Revision, e))
	}
}

// members counts the known clients of the current stage, and those of
// them that reported its revision and those lagging.
func (run *rolloutRun) members(now time.Time) (in, reported, lagging int) {
	timeout := run.spec.ReportTimeout
	for _, c := range run.clients {
		if c.hash > run.cut {
			continue
		}
		in++
		switch {
		case c.rev >= run.stageRev:
			reported++
		case now.Sub(maxTime(c.since, run.stageAt)) >= timeout:
			lagging++
		}
	}
	return in, reported, lagging
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// record returns run's record.
func (run *rolloutRun) record(now time.Time) RolloutRecord {
	rec := RolloutRecord{
		ID: run.id, Namespace: run.ns, State: run.state,
		Stage: run.spec.Stages[run.stage], Stages: slices.Clone(run.spec.Stages),
		Clients: len(run.clients), Served: run.served, Acked: run.acked, Nacked: run.nacked,
		WouldNack: run.would, Reason: run.reason, Revisions: slices.Clone(run.revisions),
		StageRevision: run.stageRev, MaxNacks: run.spec.MaxNacks, Prevalidate: run.spec.Prevalidate,
		Held: run.held, StartedAt: run.started,
	}
	if rec.Revisions == nil {
		rec.Revisions = []int64{}
	}
	var lag int
	rec.InStage, rec.Reported, lag = run.members(now)
	if run.state == RolloutRunning {
		if run.bakeEnd.IsZero() {
			rec.Lagging = lag
		}
		rec.Baking = !run.bakeEnd.IsZero()
	} else {
		rec.Lagging = run.lagging
		end := run.ended
		rec.EndedAt = &end
	}
	return rec
}

// action is what the controller does next with a running rollout.
type action int

const (
	actNone action = iota
	actNext
	actPromote
	actRevert
)

// decide looks at a running rollout at now and says what to do; it
// starts a bake or a hold itself (no commit). Called under mu.
func (run *rolloutRun) decide(now time.Time) (action, string) {
	if run.state != RolloutRunning || run.firstRev == 0 {
		return actNone, ""
	}
	if run.nackers > run.spec.MaxNacks {
		return actRevert, fmt.Sprintf("%d client(s) rejected the change at stage %v%% (max_nacks %d): %s",
			run.nackers, run.spec.Stages[run.stage], run.spec.MaxNacks, strings.Join(run.nackErrs, "; "))
	}
	if run.bakeEnd.IsZero() {
		if run.reported < run.inStage {
			if now.Sub(run.stageAt) < run.spec.StageTimeout || run.held {
				return actNone, ""
			}
			in, reported, lagging := run.members(now)
			why := fmt.Sprintf("stage %v%% timed out after %v: %d of %d client(s) reported, %d lagging",
				run.spec.Stages[run.stage], run.spec.StageTimeout, reported, in, lagging)
			if run.spec.OnTimeout == OnTimeoutHold {
				run.held = true
				run.reason = why + "; holding (promote or abort it)"
				return actNone, ""
			}
			return actRevert, why
		}
		if run.waitsForOthers(now) {
			return actNone, ""
		}
		run.held, run.reason = false, ""
		run.bakeEnd = now.Add(run.spec.Bake)
	}
	if now.Before(run.bakeEnd) {
		return actNone, ""
	}
	if run.stage+1 < len(run.spec.Stages) {
		return actNext, ""
	}
	return actPromote, ""
}

// waitsForOthers reports whether a stage whose members have all reported
// still waits for the clients outside it: with prevalidation their
// would-nacks travel with their acks of the stage's revision, and a stage
// that ended on its members' reports alone would let the change past the
// would-nacks on their way. A client silent for the report timeout is not
// waited for.
func (run *rolloutRun) waitsForOthers(now time.Time) bool {
	return run.spec.Prevalidate && run.heard < len(run.clients) && now.Before(run.othersDeadline())
}

// othersDeadline is how long a stage waits for the clients outside it.
func (run *rolloutRun) othersDeadline() time.Time {
	return run.stageAt.Add(min(run.spec.ReportTimeout, run.spec.StageTimeout))
}

// deadline is when run must be looked at again without a report (zero:
// only on a report).
func (run *rolloutRun) deadline() time.Time {
	switch {
	case run.state != RolloutRunning || run.firstRev == 0:
		return time.Time{}
	case !run.bakeEnd.IsZero():
		return run.bakeEnd
	case run.held:
		return time.Time{}
	case run.reported >= run.inStage && run.spec.Prevalidate:
		return run.othersDeadline()
	}
	return run.stageAt.Add(run.spec.StageTimeout)
}

// loop is the controller: it looks at running rollouts on every report
// and deadline, until close.
func (s *Server) rolloutLoop() {
	r := s.rollouts
	defer close(r.done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		select {
		case <-r.quit:
			return
		case <-r.wake:
		case <-timer.C:
		}
		next := s.stepRollouts()
		timer.Stop()
		if !next.IsZero() {
			timer.Reset(max(time.Until(next), 0))
		}
	}
}

// stepRollouts moves every running rollout along and returns the earliest
// deadline left.
func (s *Server) stepRollouts() time.Time {
	r := s.rollouts
	r.mu.Lock()
	names := slices.Collect(maps.Keys(r.running))
	r.mu.Unlock()
	var next time.Time
	for _, ns := range names {
		if d := s.stepRollout(ns); !d.IsZero() && (next.IsZero() || d.Before(next)) {
			next = d
		}
	}
	return next
}

// stepRollout moves ns's running rollout along, if any, and returns its
// deadline.
func (s *Server) stepRollout(ns string) time.Time {
	r := s.rollouts
	unlock := r.lock(ns)
	defer unlock()
	// A stage may end as it begins (no client to wait for, no bake):
	// take a few steps at once, then let the other namespaces have a turn.
	for range maxStepsAtOnce {
		r.mu.Lock()
		run := r.running[ns]
		var act action
		var reason string
		var deadline time.Time
		if run != nil {
			act, reason = run.decide(r.now())
			deadline = run.deadline()
		}
		r.mu.Unlock()
		var err error
		switch act {
		case actNone:
			return deadline
		case actNext:
			err = s.nextStageLocked(run)
		case actPromote:
			err = s.promoteLocked(run, "")
		case actRevert:
			err = s.revertLocked(run, reason)
		}
		if err != nil {
			s.log.Warn("fakeserver: rollout step failed", "ns", ns, "rollout", run.id, "err", err)
			return time.Time{}
		}
	}
	return r.now() // more to do: look again at once
}

// stageCut returns the cut of a stage of pct percent over the clients
// the server knows for run's namespace, never below the current cut. At
// the first stage it adds those known before to run; from then on every
// client that reports on the namespace is run's already (observe).
func (s *Server) stageCut(run *rolloutRun, pct float64, first bool) uint64 {
	var known []string
	if first {
		known = s.acks.knownClients(run.ns)
	}
	r := s.rollouts
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	for _, c := range known {
		if run.clients[c] == nil {
			run.know(c, now)
		}
	}
	if pct >= 100 {
		return math.MaxUint64
	}
	hashes := make([]uint64, 0, len(run.clients))
	for _, c := range run.clients {
		hashes = append(hashes, c.hash)
	}
	return rollout.Cut(hashes, pct, run.cut)
}

// commitRollout commits a revision of run's (kind KindRollout*) under its
// stripe lock; then, under the store's lock, before any client can see
// it, calls then with the revision.
func (s *Server) commitRollout(run *rolloutRun, kind string, puts map[string]json.RawMessage, deletes []string, then func(rev int64, now time.Time)) error {
	// Only a promotion changes what a client serves beyond what was
	// checked and served before: a stage changes the rollout key alone,
	// which schemas do not see, and a revert returns to the base.
	check := kind == KindRolloutPromote
	meta := commitMeta{Kind: kind, Reason: "rollout " + run.id}
	c, err := s.store.publishStaged(run.ns, run.gen, puts, deletes, check, meta, func(rev int64) {
		s.rollouts.mu.Lock()
		defer s.rollouts.mu.Unlock()
		run.revisions = append(run.revisions, rev)
		then(rev, s.rollouts.now())
	})
	if err != nil {
		return err
	}
	s.stats.publishes.Add(1)
	s.log.Debug("fakeserver: rollout committed", "ns", run.ns, "rollout", run.id, "kind", kind, "revision", c.CS.Revision)
	return nil
}

// stagedValue is the value of rollout.Key for run's stage i with cut.
func stagedValue(run *rolloutRun, i int, cut uint64) (json.RawMessage, error) {
	return rollout.Encode(&rollout.Staged{ID: run.id, Stage: run.spec.Stages[i], Cut: cut,
		Puts: run.spec.Puts, Deletes: run.spec.Deletes, Prevalidate: run.spec.Prevalidate})
}

// nextStageLocked commits run's next stage (the first when it has none);
// the stripe lock is held.
func (s *Server) nextStageLocked(run *rolloutRun) error {
	s.rollouts.mu.Lock()
	first := run.firstRev == 0
	i := run.stage + 1
	if first {
		i = 0
	}
	s.rollouts.mu.Unlock()
	cut := s.stageCut(run, run.spec.Stages[i], first)
	val, err := stagedValue(run, i, cut)
	if err == nil {
		err = s.commitRollout(run, KindRolloutStage, map[string]json.RawMessage{rollout.Key: val}, nil, func(rev int64, now time.Time) {
			if run.firstRev == 0 {
				run.firstRev = rev
			} else {
				run.stageEnded = now
			}
			run.stage, run.cut, run.stageRev, run.stageAt = i, cut, rev, now
			run.bakeEnd, run.held = time.Time{}, false
			run.inStage, run.reported, _ = run.members(now)
			run.heard = 0
			for _, c := range run.clients {
				if c.rev >= rev {
					run.heard++
				}
			}
		})
	}
	if err != nil && run.firstRev > 0 {
		return s.failLocked(run, fmt.Sprintf("stage %v%% could not be committed: %v", run.spec.Stages[i], err))
	}
	return err
}

// promoteLocked commits run's change to the base, dropping the rollout
// key; a promotion the schema refuses reverts. The stripe lock is held.
func (s *Server) promoteLocked(run *rolloutRun, reason string) error {
	deletes := append(slices.Clone(run.spec.Deletes), rollout.Key)
	err := s.commitRollout(run, KindRolloutPromote, run.spec.Puts, deletes, func(rev int64, now time.Time) {
		run.stageEnded = now
		s.rollouts.finishLocked(run, RolloutPromoted, rev, reason, now)
	})
	if err != nil {
		return s.failLocked(run, fmt.Sprintf("promotion refused: %v", err))
	}
	return nil
}

// revertLocked commits the revert of run: the rollout key dropped, the
// base as it was. The stripe lock is held.
func (s *Server) revertLocked(run *rolloutRun, reason string) error {
	err := s.commitRollout(run, KindRolloutRevert, nil, []string{rollout.Key}, func(rev int64, now time.Time) {
		s.rollouts.finishLocked(run, RolloutReverted, rev, reason, now)
	})
	if err != nil {
		s.rollouts.endRun(run, fmt.Sprintf("%s; the revert could not be committed: %v", reason, err))
	}
	return err
}

// failLocked reverts run after a commit of it failed (when the store was
// reset under it, the reset ended it).
func (s *Server) failLocked(run *rolloutRun, reason string) error {
	if err := s.revertLocked(run, reason); err != nil && !errors.Is(err, errStoreChanged) {
		return err
	}
	return nil
}

// finishLocked ends run at revision rev and drops it from the running
// ones (under mu).
func (r *rollouts) finishLocked(run *rolloutRun, state string, rev int64, reason string, now time.Time) {
	run.end(state, rev, reason, now)
	if r.running[run.ns] == run {
		delete(r.running, run.ns)
	}
}

// end ends run at revision rev (under mu).
func (run *rolloutRun) end(state string, rev int64, reason string, now time.Time) {
	if run.state != RolloutRunning {
		return
	}
	_, _, run.lagging = run.members(now)
	if !run.bakeEnd.IsZero() {
		run.lagging = 0
	}
	run.state, run.endRev, run.reason, run.ended = state, rev, reason, now
	run.bakeEnd = time.Time{}
	close(run.done)
}

// endRun ends run without a commit and drops it from the running ones.
func (r *rollouts) endRun(run *rolloutRun, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.finishLocked(run, RolloutReverted, run.stageRev, reason, r.now())
}

// endAll ends, without a commit, every running rollout of a store
// generation before gen, and stops counting reports for them.
func (r *rollouts) endAll(gen uint64, reason string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.gen = max(r.gen, gen)
	for ns, run := range r.running {
		if run.gen < gen {
			run.end(RolloutReverted, run.stageRev, reason, r.now())
			delete(r.running, ns)
		}
	}
}

// close stops the controller and waits for it; it is idempotent.
func (r *rollouts) close() {
	r.closeOnce.Do(func() { close(r.quit) })
	<-r.done
}

func newRolloutID() string {
	var b [6]byte
	_, _ = rand.Read(b[:]) // never fails on supported platforms
	return "r-" + hex.EncodeToString(b[:])
}

// checkRolloutSpec validates spec and returns it normalised: compact
// values, de-duplicated deletes, defaults filled.
func checkRolloutSpec(ns string, spec RolloutSpec) (RolloutSpec, error) {
	puts, deletes, err := checkPublish(ns, spec.Puts, spec.Deletes)
	if err != nil {
		return spec, err
	}
	if len(puts) == 0 && len(deletes) == 0 {
		return spec, fmt.Errorf("%w: a rollout needs puts or deletes", ErrInvalid)
	}
	spec.Puts, spec.Deletes = puts, deletes
	if len(spec.Deletes) == 0 {
		spec.Deletes = nil
	}
	if len(spec.Stages) == 0 || len(spec.Stages) > maxRolloutStages {
		return spec, fmt.Errorf("%w: stages: want 1..%d percentages", ErrInvalid, maxRolloutStages)
	}
	for i, p := range spec.Stages {
		if !(p > 0 && p <= 100) {
			return spec, fmt.Errorf("%w: stage %v: want a percentage in (0, 100]", ErrInvalid, p)
		}
		if i > 0 && p <= spec.Stages[i-1] {
			return spec, fmt.Errorf("%w: stages %v: want them strictly increasing", ErrInvalid, spec.Stages)
		}
	}
	spec.Stages = slices.Clone(spec.Stages)
	switch {
	case spec.Bake < 0 || spec.ReportTimeout < 0 || spec.StageTimeout < 0:
		return spec, fmt.Errorf("%w: bake, report_timeout and stage_timeout must not be negative", ErrInvalid)
	case spec.MaxNacks < 0:
		return spec, fmt.Errorf("%w: max_nacks %d must not be negative", ErrInvalid, spec.MaxNacks)
	}
	if spec.ReportTimeout == 0 {
		spec.ReportTimeout = DefaultRolloutReportTimeout
	}
	if spec.StageTimeout == 0 {
		spec.StageTimeout = DefaultRolloutStageTimeout
	}
	switch spec.OnTimeout {
	case "":
		spec.OnTimeout = OnTimeoutRevert
	case OnTimeoutRevert, OnTimeoutHold:
	default:
		return spec, fmt.Errorf("%w: on_timeout %q: want %q or %q", ErrInvalid, spec.OnTimeout, OnTimeoutRevert, OnTimeoutHold)
	}
	return spec, nil
}

// errNoRollouts: a relay's server runs no rollouts (its origin does).
var errNoRollouts = fmt.Errorf("%w: rollouts run at the origin, not at a relay", ErrInvalid)

// StartRollout starts a staged rollout of spec's change to namespace ns
// and returns its record: the first stage committed as a new revision
// (Revisions[0]). It fails with ErrInvalid (a bad spec), ErrUnknownNamespace,
// a *SchemaError (the change fails ns's schema), or ErrRolloutRunning (one
// rollout per namespace at a time), or ErrClosed.
func (s *Server) StartRollout(ns string, spec RolloutSpec) (RolloutRecord, error) {
	r := s.rollouts
	if r == nil {
		return RolloutRecord{}, errNoRollouts
	}
	if s.life.Err() != nil {
		return RolloutRecord{}, ErrClosed // no controller would move it along
	}
	spec, err := checkRolloutSpec(ns, spec)
	if err != nil {
		return RolloutRecord{}, err
	}
	unlock := r.lock(ns)
	defer unlock()
	if run := r.runningIn(ns); run != nil {
		return RolloutRecord{}, fmt.Errorf("%w: namespace %q: rollout %q", ErrRolloutRunning, ns, run.id)
	}
	gen, err := s.store.checkStaged(ns, spec.Puts, spec.Deletes)
	if err != nil {
		return RolloutRecord{}, err
	}
	now := r.now()
	run := &rolloutRun{id: newRolloutID(), ns: ns, spec: spec, gen: gen, state: RolloutRunning,
		clients: make(map[string]*rolloutClient), started: now, done: make(chan struct{})}
	r.mu.Lock()
	if gen < r.gen { // a reset between the check and now
		r.mu.Unlock()
		return RolloutRecord{}, fmt.Errorf("%w: try again", errStoreChanged)
	}
	r.running[ns] = run
	kept := append(r.byNS[ns], run)
	if len(kept) > maxKeptRollouts {
		kept = slices.Delete(kept, 0, len(kept)-maxKeptRollouts)
	}
	r.byNS[ns] = kept
	r.mu.Unlock()
	r.any.Store(true)
	if err := s.nextStageLocked(run); err != nil {
		r.mu.Lock()
		delete(r.running, ns)
		r.byNS[ns] = slices.DeleteFunc(r.byNS[ns], func(x *rolloutRun) bool { return x == run })
		r.mu.Unlock()
		return RolloutRecord{}, err
	}
	r.signal() // with no client to wait for, it moves on at once
	r.mu.Lock()
	defer r.mu.Unlock()
	return run.record(r.now()), nil
}

// find returns ns's rollout id.
func (r *rollouts) find(ns, id string) (*rolloutRun, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, run := range r.byNS[ns] {
		if run.id == id {
			return run, nil
		}
	}
	return nil, fmt.Errorf("%w: %q in namespace %q", ErrUnknownRollout, id, ns)
}

// Rollout returns the record of rollout id of namespace ns, running or
// ended. It fails with ErrUnknownRollout.
func (s *Server) Rollout(ns, id string) (RolloutRecord, error) {
	if s.rollouts == nil {
		return RolloutRecord{}, errNoRollouts
	}
	run, err := s.rollouts.find(ns, id)
	if err != nil {
		return RolloutRecord{}, err
	}
	s.rollouts.mu.Lock()
	defer s.rollouts.mu.Unlock()
	return run.record(s.rollouts.now()), nil
}

// WaitRollout waits until rollout id of namespace ns has ended (promoted
// or reverted) and returns its record; or until ctx is done, returning
// its record then and ctx's error. It fails at once with
// ErrUnknownRollout, and with ErrClosed when the server closes.
func (s *Server) WaitRollout(ctx context.Context, ns, id string) (RolloutRecord, error) {
	if s.rollouts == nil {
		return RolloutRecord{}, errNoRollouts
	}
	run, err := s.rollouts.find(ns, id)
	if err != nil {
		return RolloutRecord{}, err
	}
	select {
	case <-run.done:
	case <-ctx.Done():
		err = ctx.Err()
	case <-s.closing:
		err = ErrClosed
	}
	rec, _ := s.Rollout(ns, id)
	return rec, err
}

// Rollouts returns the records of namespace ns's rollouts, newest first
// (the last few ended ones and the running one).
func (s *Server) Rollouts(ns string) ([]RolloutRecord, error) {
	if s.rollouts == nil {
		return nil, errNoRollouts
	}
	if err := transport.ValidateNamespace(ns); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	r := s.rollouts
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	runs := r.byNS[ns]
	out := make([]RolloutRecord, 0, len(runs))
	for i := len(runs) - 1; i >= 0; i-- {
		out = append(out, runs[i].record(now))
	}
	return out, nil
}

// AbortRollout reverts the running rollout id of namespace ns now: one new
// revision without the staged change. It returns the ended record, or
// fails with ErrUnknownRollout or ErrRolloutEnded.
func (s *Server) AbortRollout(ns, id string) (RolloutRecord, error) {
	return s.endRollout(ns, id, func(run *rolloutRun, stage float64) error {
		return s.revertLocked(run, fmt.Sprintf("aborted by the operator at stage %v%%", stage))
	})
}

// PromoteRollout skips the running rollout id of namespace ns to its
// promotion now: one new revision that makes the change the base for
// every client. It returns the ended record, or fails with
// ErrUnknownRollout or ErrRolloutEnded; a promotion that ns's schema
// refuses (changed since the start) reverts it instead.
func (s *Server) PromoteRollout(ns, id string) (RolloutRecord, error) {
	return s.endRollout(ns, id, func(run *rolloutRun, stage float64) error {
		return s.promoteLocked(run, fmt.Sprintf("promoted by the operator at stage %v%%", stage))
	})
}

func (s *Server) endRollout(ns, id string, end func(run *rolloutRun, stage float64) error) (RolloutRecord, error) {
	r := s.rollouts
	if r == nil {
		return RolloutRecord{}, errNoRollouts
	}
	run, err := r.find(ns, id)
	if err != nil {
		return RolloutRecord{}, err
	}
	unlock := r.lock(ns)
	defer unlock()
	r.mu.Lock()
	state, stage := run.state, run.spec.Stages[run.stage]
	r.mu.Unlock()
	if state != RolloutRunning {
		return RolloutRecord{}, fmt.Errorf("%w: rollout %q of namespace %q is %s", ErrRolloutEnded, id, ns, state)
	}
	if err := end(run, stage); err != nil {
		return RolloutRecord{}, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return run.record(r.now()), nil
}

// guardPublish is taken by a plain publish or rollback of ns: it holds
// ns's stripe lock (release it after the commit) and refuses while a
// rollout runs, unless abort, which reverts it first, if precheck (the
// publish's own checks) passes.
func (s *Server) guardPublish(ns string, abort bool, precheck func() error) (release func(), err error) {
	r := s.rollouts
	if r == nil {
		return func() {}, nil
	}
	unlock := r.lock(ns)
	run := r.runningIn(ns)
	if run == nil {
		return unlock, nil
	}
	if !abort {
		unlock()
		return nil, fmt.Errorf("%w: namespace %q: rollout %q; abort it first (or publish with abort_rollout)", ErrRolloutRunning, ns, run.id)
	}
	if precheck != nil {
		if err := precheck(); err != nil { // a publish that would fail aborts nothing
			unlock()
			return nil, err
		}
	}
	r.mu.Lock()
	stage := run.spec.Stages[run.stage]
	r.mu.Unlock()
	if err := s.revertLocked(run, fmt.Sprintf("aborted by a publish at stage %v%%", stage)); err != nil {
		unlock()
		return nil, err
	}
	return unlock, nil
}

// PublishStaged commits, as one revision, puts and staged as the value of
// rollout.Key (nil staged: the key deleted), past the rollout controller:
// for tests of how clients evaluate a rollout whose cut they choose (the
// controller picks cuts from the clients it knows). Refused while the
// controller runs a rollout on ns. Not part of holdfasttest.
func (s *Server) PublishStaged(ns string, staged *rollout.Staged, puts map[string]json.RawMessage) (int64, error) {
	clean, _, err := checkPublish(ns, puts, nil)
	if err != nil {
		return 0, err
	}
	deletes := []string{rollout.Key}
	if staged != nil {
		raw, err := rollout.Encode(staged)
		if err != nil {
			return 0, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		clean[rollout.Key], deletes = raw, nil
	}
	release, err := s.guardPublish(ns, false, nil)
	if err != nil {
		return 0, err
	}
	defer release()
	c, err := s.store.publishIf(ns, clean, deletes, commitMeta{Kind: KindRolloutStage, Reason: "staged by hand"}, nil)
	if err != nil {
		return 0, err
	}
	s.stats.publishes.Add(1)
	return c.CS.Revision, nil
}
