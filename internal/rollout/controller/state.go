package controller

import (
	"encoding/json"
	"slices"
	"time"

	"github.com/holdfast-dev/holdfast/controlapi"
)

// State is a rollout's durable state: what a Store keeps.
type State struct {
	ID        string `json:"id"`
	Namespace string `json:"ns"`
	Spec      Spec   `json:"spec"`
	// State is Running, Promoted or Reverted.
	State string `json:"state"`
	// Stage indexes Spec.Stages: the stage it is in (or ended in).
	Stage int `json:"stage"`
	// Cut is the current stage's (rollout.Staged.Cut); Cuts every
	// stage's so far, as Revisions: a nack is judged by the cut of the
	// stage whose revision it nacked.
	Cut  uint64   `json:"cut,string"`
	Cuts []uint64 `json:"cuts,omitempty"`
	// Blind says the current stage's cut was taken with no client known:
	// its share of the hash space, which may hold none of the clients
	// that report (see Controller.recut).
	Blind bool `json:"blind,omitempty"`
	// StageAt is when the current stage was committed; BakeEnd when its
	// bake ends (zero: not baking). A controller that takes over keeps
	// both: timers resume, they do not restart.
	StageAt time.Time `json:"stage_at"`
	BakeEnd time.Time `json:"bake_end,omitzero"`
	Held    bool      `json:"held,omitempty"`
	// GateFailing is, per gate of the spec, since when its query has
	// failed without a break (zero: it has not): kept here so that a gate's
	// grace survives a failover (Config.Gates builds a new gate, which
	// resumes from it).
	GateFailing []time.Time `json:"gate_failing,omitempty"`
	// GateResults are, per gate, the result of its last check as of the
	// last transition (the gate's JSON: its value, series, error and
	// reason whole): kept with every transition of a bake, not at every
	// check.
	GateResults []json.RawMessage `json:"gate_results,omitempty"`
	// Revisions are the revisions it committed: one per stage, then the
	// promotion or the revert. A 0 in a commit's state stands for the
	// commit's own revision: the store fills it in.
	Revisions []int64 `json:"revisions"`
	// Reason says why it ended, or that it holds.
	Reason    string     `json:"reason,omitempty"`
	Decisions []Decision `json:"decisions"`
	Actor     string     `json:"actor,omitempty"` // who started it
	Started   time.Time  `json:"started_at"`
	Ended     time.Time  `json:"ended_at,omitzero"`
	// Final counts, frozen when it ends (its record keeps them).
	Final *Counts `json:"final,omitempty"`

	// Version is the store's version of this state (etcd: the record's
	// ModRevision); a Commit is conditional on it. Not stored.
	Version int64 `json:"-"`
}

// A rollout's decisions, counts and record are the control API's.
type (
	Decision = controlapi.RolloutDecision
	Counts   = controlapi.RolloutCounts
	Record   = controlapi.RolloutRecord
)

// stageRev is the current stage's revision (0: none yet).
func (s *State) stageRev() int64 {
	if s.Stage < len(s.Revisions) {
		return s.Revisions[s.Stage]
	}
	return 0
}

// cutAt is the cut of the stage whose revision rev is of: the last stage
// committed at or below rev (the current cut when unknown).
func (s *State) cutAt(rev int64) uint64 {
	if len(s.Cuts) == 0 {
		return s.Cut
	}
	for i := min(len(s.Cuts), s.Stage+1) - 1; i >= 0; i-- {
		if i < len(s.Revisions) && s.Revisions[i] > 0 && s.Revisions[i] <= rev {
			return s.Cuts[i]
		}
	}
	return s.Cuts[0]
}

// firstRev is the first stage's revision.
func (s *State) firstRev() int64 {
	if len(s.Revisions) > 0 {
		return s.Revisions[0]
	}
	return 0
}

// endRev is the promotion's or revert's revision (0: running). A revert
// that committed nothing (the stage's commit failed) ends at the stage's.
func (s *State) endRev() int64 {
	if s.State == Running || len(s.Revisions) == 0 {
		return 0
	}
	return s.Revisions[len(s.Revisions)-1]
}

// clone returns a deep copy of s.
func (s *State) clone() *State {
	c := *s
	c.Revisions = slices.Clone(s.Revisions)
	c.Decisions = slices.Clone(s.Decisions)
	c.GateFailing = slices.Clone(s.GateFailing)
	c.GateResults = slices.Clone(s.GateResults)
	c.Cuts = slices.Clone(s.Cuts)
	c.Spec.Stages = slices.Clone(s.Spec.Stages)
	if s.Final != nil {
		f := *s.Final
		c.Final = &f
	}
	return &c
}

// decide appends a decision, keeping the first and the newest ones when
// there are too many (a held rollout that flaps).
func (s *State) decide(d Decision) {
	d.Reason = clip(d.Reason, MaxReasonBytes)
	if d.Counts != nil {
		counts := *d.Counts // its own: clone shares what decisions point at
		d.Counts = &counts
	}
	s.Decisions = append(s.Decisions, d)
	if len(s.Decisions) > maxDecisions {
		s.Decisions = slices.Delete(s.Decisions, 1, len(s.Decisions)-maxDecisions+1)
	}
}

// FillRevision replaces the 0s of a committed state (see Revisions) with
// rev, the revision of the commit that wrote it. Stores call it.
func (s *State) FillRevision(rev int64) {
	for i, r := range s.Revisions {
		if r == 0 {
			s.Revisions[i] = rev
		}
	}
	for i := range s.Decisions {
		if s.Decisions[i].Revision == 0 && commits(s.Decisions[i].What) {
			s.Decisions[i].Revision = rev
		}
	}
}

// record returns s's record with counts.
func (s *State) record(c Counts) Record {
	r := Record{ID: s.ID, Namespace: s.Namespace, State: s.State, Stage: s.Spec.Stages[s.Stage], Stages: slices.Clone(s.Spec.Stages),
		RolloutCounts: c, Reason: s.Reason, Revisions: slices.Clone(s.Revisions), StageRevision: s.stageRev(), MaxNacks: s.Spec.MaxNacks,
		Prevalidate: s.Spec.Prevalidate, OnBreach: s.Spec.OnBreach, Held: s.Held, StageAt: s.StageAt, Actor: s.Actor,
		Decisions: slices.Clone(s.Decisions), StartedAt: s.Started, GateFailing: slices.Clone(s.GateFailing),
		GateResults: slices.Clone(s.GateResults)}
	if r.Revisions == nil {
		r.Revisions = []int64{}
	}
	if r.Decisions == nil {
		r.Decisions = []Decision{}
	}
	if s.State == Running && !s.BakeEnd.IsZero() {
		r.Baking = true
		end := s.BakeEnd
		r.BakeEnd = &end
	}
	if s.State != Running {
		end := s.Ended
		r.EndedAt = &end
		if s.Final != nil {
			r.RolloutCounts = *s.Final
		}
	}
	return r
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xc0 == 0x80 {
		n--
	}
	return s[:n]
}

// commits reports whether a decision commits a revision.
func commits(what string) bool {
	switch what {
	case "start", "stage", "recut", "promote", "revert", "abort":
		return true
	}
	return false
}
