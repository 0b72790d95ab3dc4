// Package lint compiles and runs the control plane's lints: CEL
// expressions over a namespace's values before and after a change.
package lint

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/holdfast-dev/holdfast/controlapi"
)

// Errors of Compile, mapped by the control API to their codes.
var (
	// ErrInvalid: a malformed expression, severity or pattern (bad_request).
	ErrInvalid = errors.New("lint: invalid")
	// ErrTooCostly: the expression's estimated cost is over the limit
	// (lint_too_costly).
	ErrTooCostly = errors.New("lint: too costly")
)

// ExamplesError is a lint whose examples do not come out as they say
// (lint_examples_failed).
type ExamplesError struct {
	Failures []string
}

func (e *ExamplesError) Error() string { return "lint: examples failed" }

// Input is one change of one namespace.
type Input struct {
	Namespace string
	// Old and New are the namespace's values before and after.
	Old, New map[string]json.RawMessage
	// Puts and Deletes are the keys the change puts and deletes.
	Puts, Deletes []string
}

// Lint is a compiled lint, safe for concurrent use.
type Lint struct {
	name string
	spec controlapi.Lint
}

// Compile checks spec (its expression type-checked, its cost bounded,
// its examples run) and compiles it.
func Compile(name string, spec controlapi.Lint) (*Lint, error) {
	return nil, errors.New("lint: not built yet")
}

// Name returns the lint's name; Spec its definition.
func (l *Lint) Name() string { return l.name }

// Spec returns the lint's definition.
func (l *Lint) Spec() controlapi.Lint { return l.spec }

// Applies reports whether the lint applies to namespace ns.
func (l *Lint) Applies(ns string) bool { return false }

// Eval runs the lint over in: a Check of kind lint, pass, or the lint's
// severity with its message (an evaluation that fails, or runs over the
// cost limit, counts at the lint's severity with an "error: " message).
func (l *Lint) Eval(ctx context.Context, in Input) controlapi.Check {
	return controlapi.Check{Name: l.name, Namespace: in.Namespace, Kind: controlapi.CheckLint, Result: controlapi.CheckBlock, Message: "error: not built yet"}
}
