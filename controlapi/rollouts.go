package controlapi

import (
	"encoding/json"
	"fmt"
	"time"
)

// The states of a rollout (RolloutRecord.State).
const (
	RolloutRunning  = "running"
	RolloutPromoted = "promoted"
	RolloutReverted = "reverted"
)

// What a rollout does when a stage times out (RolloutSpec.OnTimeout) or
// a gate is breached (RolloutSpec.OnBreach).
const (
	OnTimeoutRevert = "revert"
	OnTimeoutHold   = "hold"
)

// RolloutSpec is a staged rollout of one change to one namespace, as a
// server keeps it in its rollout's state (durations as integer
// nanoseconds). RolloutRequest is its form on the wire.
type RolloutSpec struct {
	// Puts and Deletes are the change (one of them not empty; keys valid
	// and not reserved; no key both put and deleted).
	Puts    map[string]json.RawMessage `json:"puts,omitempty"`
	Deletes []string                   `json:"deletes,omitempty"`
	// Stages are the percentages of the namespace's clients each stage
	// covers: strictly increasing, each in (0, 100], the last 100.
	Stages []float64 `json:"stages"`
	// Bake is how long each stage holds once every client in it
	// reported, before the next (0: none).
	Bake time.Duration `json:"bake"`
	// MaxNacks is how many clients may reject the change (nack or
	// would-nack) before the rollout reverts.
	MaxNacks int `json:"max_nacks"`
	// Prevalidate asks every client to check the staged change against
	// its own checks as soon as it learns of it and report a would-nack.
	// A stage then waits for the reports of the clients outside it too,
	// up to ReportTimeout (or StageTimeout, if shorter) from its start.
	Prevalidate bool `json:"prevalidate,omitempty"`
	// ReportTimeout is how long a client of a stage may stay silent
	// before it is counted as lagging (0: the server's default, 10s).
	ReportTimeout time.Duration `json:"report_timeout"`
	// StageTimeout is how long a stage waits for its clients' reports
	// (0: the server's default, 5m); then OnTimeout decides.
	StageTimeout time.Duration `json:"stage_timeout"`
	// OnTimeout is OnTimeoutRevert (the default, "") or OnTimeoutHold:
	// stay at the stage until an operator promotes or aborts, or the
	// missing reports come.
	OnTimeout string `json:"on_timeout"`
	// OnBreach is what a gate's breach does: OnTimeoutRevert (default)
	// or OnTimeoutHold.
	OnBreach string `json:"on_breach"`
	// Gates are the metric gates, as their JSON (the server builds them).
	Gates []json.RawMessage `json:"gates,omitempty"`
}

// RolloutRequest is the body of POST /control/namespaces/{ns}/rollouts:
// a RolloutSpec with durations as Go duration text ("30s"); what is not
// given is left to the server's defaults.
type RolloutRequest struct {
	Puts          map[string]json.RawMessage `json:"puts,omitempty"`
	Deletes       []string                   `json:"deletes,omitempty"`
	Stages        []float64                  `json:"stages"`
	Bake          string                     `json:"bake,omitempty"`
	MaxNacks      int                        `json:"max_nacks"`
	Prevalidate   bool                       `json:"prevalidate,omitempty"`
	ReportTimeout string                     `json:"report_timeout,omitempty"`
	StageTimeout  string                     `json:"stage_timeout,omitempty"`
	OnTimeout     string                     `json:"on_timeout,omitempty"`
	OnBreach      string                     `json:"on_breach,omitempty"`
	Gates         []json.RawMessage          `json:"gates,omitempty"`
	Actor         string                     `json:"actor,omitempty"`
	Reason        string                     `json:"reason,omitempty"`
}

// NewRolloutRequest is spec as a request body, with the actor and reason
// of its start.
func NewRolloutRequest(spec RolloutSpec, actor, reason string) RolloutRequest {
	return RolloutRequest{Puts: spec.Puts, Deletes: spec.Deletes, Stages: spec.Stages, Bake: durationText(spec.Bake),
		MaxNacks: spec.MaxNacks, Prevalidate: spec.Prevalidate, ReportTimeout: durationText(spec.ReportTimeout),
		StageTimeout: durationText(spec.StageTimeout), OnTimeout: spec.OnTimeout, OnBreach: spec.OnBreach, Gates: spec.Gates,
		Actor: actor, Reason: reason}
}

// durationText is d as a request carries it: "" (the default) for 0.
func durationText(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return d.String()
}

// Spec is the request's spec, its durations parsed; a server checks the
// rest.
func (r *RolloutRequest) Spec() (RolloutSpec, error) {
	s := RolloutSpec{Puts: r.Puts, Deletes: r.Deletes, Stages: r.Stages, MaxNacks: r.MaxNacks, Prevalidate: r.Prevalidate,
		OnTimeout: r.OnTimeout, OnBreach: r.OnBreach, Gates: r.Gates}
	for _, d := range []struct {
		name, text string
		to         *time.Duration
	}{{"bake", r.Bake, &s.Bake}, {"report_timeout", r.ReportTimeout, &s.ReportTimeout}, {"stage_timeout", r.StageTimeout, &s.StageTimeout}} {
		if d.text == "" {
			continue
		}
		v, err := time.ParseDuration(d.text)
		if err != nil {
			return s, fmt.Errorf("%s: %v", d.name, err)
		}
		*d.to = v
	}
	return s, nil
}

// RolloutStarted is the reply of POST /control/namespaces/{ns}/rollouts:
// the rollout's id and its first stage's revision.
type RolloutStarted struct {
	ID       string `json:"id"`
	Revision int64  `json:"revision"`
}

// RolloutActionRequest is the (optional) body of
// POST .../rollouts/{id}/abort and .../promote.
type RolloutActionRequest struct {
	Actor  string `json:"actor,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// RolloutList is the reply of GET /control/namespaces/{ns}/rollouts: the
// running rollout and those kept after they ended.
type RolloutList struct {
	Rollouts []RolloutRecord `json:"rollouts"`
}

// RolloutCounts are the clients' reports on a rollout. Counts are of
// distinct clients.
type RolloutCounts struct {
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
	// Gone counts the clients of the stage that left: silent past the
	// liveness window, so they do not hold it.
	Gone int `json:"gone"`
}

// RolloutDecision is one transition of a rollout, as its record and the
// audit keep it.
type RolloutDecision struct {
	At time.Time `json:"at"`
	// What: start, bake, bake-end, stage, recut, hold, promote, revert,
	// abort.
	What     string  `json:"what"`
	Stage    float64 `json:"stage"`
	Revision int64   `json:"revision,omitempty"` // the revision it committed, if any
	Actor    string  `json:"actor,omitempty"`
	Reason   string  `json:"reason,omitempty"`
	// Counts are the stage's counts the decision was taken on, on those
	// the clients' reports take: bake, bake-end, hold, promote, revert (an
	// operator's promote and abort, and a revert of a store replaced
	// under the rollout, included).
	Counts *RolloutCounts `json:"counts,omitempty"`
}

// RolloutRecord is the state of a rollout: the reply of GET
// /control/namespaces/{ns}/rollouts/{id}, of an abort and of a promote.
type RolloutRecord struct {
	ID        string `json:"id"`
	Namespace string `json:"ns"`
	// State is RolloutRunning, RolloutPromoted or RolloutReverted.
	State string `json:"state"`
	// Stage is the percentage of the stage it is in, or was in when it
	// ended; Stages the plan.
	Stage  float64   `json:"stage"`
	Stages []float64 `json:"stages"`
	RolloutCounts
	// Reason says why it reverted (the nacks' errors, bounded), that it
	// holds, or who promoted it early.
	Reason string `json:"reason"`
	// Revisions are those it committed: one per stage, then the promotion
	// or the revert.
	Revisions []int64 `json:"revisions"`
	// StageRevision is the revision of the current (or last) stage.
	StageRevision int64  `json:"stage_revision"`
	MaxNacks      int    `json:"max_nacks"`
	Prevalidate   bool   `json:"prevalidate,omitempty"`
	OnBreach      string `json:"on_breach,omitempty"`
	// Baking: every client of the stage reported; it bakes. Held: a stage
	// timed out, or a gate was breached, with OnTimeoutHold.
	Baking  bool       `json:"baking,omitempty"`
	Held    bool       `json:"held,omitempty"`
	StageAt time.Time  `json:"stage_started_at"`
	BakeEnd *time.Time `json:"bake_ends_at,omitempty"`
	Actor   string     `json:"actor,omitempty"` // who started it
	// GateFailing is, per gate, since when its query has failed without a
	// break (zero: it has not); GateResults each gate's last check (its
	// JSON: value, series, error and reason).
	GateFailing []time.Time       `json:"gate_failing,omitempty"`
	GateResults []json.RawMessage `json:"gate_results,omitempty"`
	Decisions   []RolloutDecision `json:"decisions"`
	StartedAt   time.Time         `json:"started_at"`
	EndedAt     *time.Time        `json:"ended_at,omitempty"`
}
