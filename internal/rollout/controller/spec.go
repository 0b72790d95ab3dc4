package controller

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/rollout"
	"github.com/holdfast-dev/holdfast/transport"
)

// Defaults of a Spec.
const (
	DefaultReportTimeout = 10 * time.Second
	DefaultStageTimeout  = 5 * time.Minute
)

// What a rollout does when a stage times out (Spec.OnTimeout) or a gate
// is breached (Spec.OnBreach).
const (
	Revert = controlapi.OnTimeoutRevert
	Hold   = controlapi.OnTimeoutHold
)

// The states of a rollout (State.State, Record.State).
const (
	Running  = controlapi.RolloutRunning
	Promoted = controlapi.RolloutPromoted
	Reverted = controlapi.RolloutReverted
)

// Kinds of the revisions a rollout commits (the audit record's kind).
const (
	KindStage   = "rollout-stage"
	KindPromote = "rollout-promote"
	KindRevert  = "rollout-revert"
)

// Limits.
const (
	MaxStages      = 20
	MaxKept        = 32 // ended rollouts kept per namespace
	MaxReasonBytes = controlapi.MaxReasonBytes
	maxReasonNacks = 5
	maxReasonErr   = 200
	maxDecisions   = 64
)

// Errors.
var (
	// ErrInvalid: a bad spec or request (HTTP 400).
	ErrInvalid = errors.New("rollout: invalid")
	// ErrRunning: a rollout runs on the namespace already (HTTP 409).
	ErrRunning = errors.New("rollout: a rollout is running")
	// ErrEnded: the rollout has ended (HTTP 409).
	ErrEnded = errors.New("rollout: the rollout has ended")
	// ErrUnknown: no such rollout (HTTP 404).
	ErrUnknown = errors.New("rollout: unknown rollout")
	// ErrGate: a gate's first check at the start failed (no answer,
	// several series, a query Prometheus refuses); nothing was written
	// (HTTP 400). It wraps ErrInvalid.
	ErrGate = fmt.Errorf("%w: a gate's first check failed", ErrInvalid)
	// ErrConflict: the state changed since it was read (another server
	// moved it, or this one leads no more): nothing was written.
	ErrConflict = errors.New("rollout: the rollout's state changed")
)

// The rollout types are the control API's: a Spec is kept in a
// rollout's state, a Request is its form on the wire.
type (
	Spec          = controlapi.RolloutSpec
	Request       = controlapi.RolloutRequest
	ActionRequest = controlapi.RolloutActionRequest
)

// SpecOf is the request's spec, its durations parsed (CheckSpec checks
// the rest).
func SpecOf(r *Request) (Spec, error) {
	s, err := r.Spec()
	if err != nil {
		return s, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return s, nil
}

// CheckSpec validates spec for namespace ns and returns it normalised
// (defaults filled, stages cloned).
func CheckSpec(ns string, spec Spec) (Spec, error) {
	if err := transport.ValidateNamespace(ns); err != nil {
		return spec, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if len(spec.Puts) == 0 && len(spec.Deletes) == 0 {
		return spec, fmt.Errorf("%w: a rollout needs puts or deletes", ErrInvalid)
	}
	for k, v := range spec.Puts {
		if err := rollout.CheckKey(k); err != nil {
			return spec, fmt.Errorf("%w: %v", ErrInvalid, err)
		}
		if !json.Valid(v) {
			return spec, fmt.Errorf("%w: put of %q: not JSON", ErrInvalid, k)
		}
	}
	seen := make(map[string]bool)
	deletes := spec.Deletes[:0:0]
	for _, k := range spec.Deletes {
		if err := rollout.CheckKey(k); err != nil {
			return spec, fmt.Errorf("%w: %v", ErrInvalid, err)
		}
		if _, ok := spec.Puts[k]; ok {
			return spec, fmt.Errorf("%w: %q both put and deleted", ErrInvalid, k)
		}
		if !seen[k] {
			seen[k] = true
			deletes = append(deletes, k)
		}
	}
	if len(deletes) == 0 {
		deletes = nil
	}
	spec.Deletes = deletes
	if len(spec.Stages) == 0 || len(spec.Stages) > MaxStages {
		return spec, fmt.Errorf("%w: stages: want 1..%d percentages", ErrInvalid, MaxStages)
	}
	for i, p := range spec.Stages {
		if !(p > 0 && p <= 100) || math.IsNaN(p) {
			return spec, fmt.Errorf("%w: stage %v: want a percentage in (0, 100]", ErrInvalid, p)
		}
		if i > 0 && p <= spec.Stages[i-1] {
			return spec, fmt.Errorf("%w: stages %v: want them strictly increasing", ErrInvalid, spec.Stages)
		}
	}
	if last := spec.Stages[len(spec.Stages)-1]; last != 100 {
		// A documented decision: a rollout that stops short of 100% is
		// promoted to everyone after its last stage's bake anyway, which
		// the plan should say.
		return spec, fmt.Errorf("%w: stages %v: the last stage must be 100 (the promotion reaches every client)", ErrInvalid, spec.Stages)
	}
	spec.Stages = slices.Clone(spec.Stages)
	switch {
	case spec.Bake < 0 || spec.ReportTimeout < 0 || spec.StageTimeout < 0:
		return spec, fmt.Errorf("%w: bake, report_timeout and stage_timeout must not be negative", ErrInvalid)
	case spec.MaxNacks < 0:
		return spec, fmt.Errorf("%w: max_nacks %d must not be negative", ErrInvalid, spec.MaxNacks)
	}
	if spec.ReportTimeout == 0 {
		spec.ReportTimeout = DefaultReportTimeout
	}
	if spec.StageTimeout == 0 {
		spec.StageTimeout = DefaultStageTimeout
	}
	for _, f := range []struct {
		name string
		v    *string
	}{{"on_timeout", &spec.OnTimeout}, {"on_breach", &spec.OnBreach}} {
		switch *f.v {
		case "":
			*f.v = Revert
		case Revert, Hold:
		default:
			return spec, fmt.Errorf("%w: %s %q: want %q or %q", ErrInvalid, f.name, *f.v, Revert, Hold)
		}
	}
	return spec, nil
}
