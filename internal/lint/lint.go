// Package lint compiles and runs the control plane's lints: CEL
// expressions over a namespace's values before and after a change.
//
// An expression sees three variables: old and new, the namespace's values
// before and after (maps of key to its JSON value; a number that is
// integral is an int, another a double, so new["x"] < 100 holds either
// way), and change, {"puts": [...], "deletes": [...]}, the keys the change
// puts and deletes. It must come out a bool: true passes. A key that is
// missing makes the evaluation fail, which counts at the lint's severity.
//
// A lint's cost is bounded twice: when it is compiled, by CEL's estimate
// of its worst case over a namespace of up to MaxKeys keys (of up to
// transport.MaxKeyLen bytes) of values of up to MaxValueBytes
// (ErrTooCostly above CostLimit); when it runs, by CEL's
// cost limit (the same CostLimit), checked with the context every
// interruptEvery steps of a comprehension.
package lint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strings"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/cost"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"

	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/transport"
)

// Bounds of a lint.
const (
	// CostLimit bounds a lint's estimated cost when it is compiled and its
	// actual cost when it runs, in CEL's cost units (about one per
	// operation, or per byte a string function reads): Kubernetes' limit
	// of one expression, about 0.1 s of work where it is reached.
	CostLimit = 1_000_000
	// MaxKeys and MaxValueBytes are the size hints of the estimate: the
	// namespace's keys and one value's bytes (a string's length).
	MaxKeys       = 10_000
	MaxValueBytes = 64 << 10
	// MaxExprBytes bounds an expression's text, MaxMessageBytes a
	// message's and a link's.
	MaxExprBytes    = 8 << 10
	MaxMessageBytes = 1 << 10
	// interruptEvery is how many comprehension steps pass between two
	// looks at the context.
	interruptEvery = 100
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

func (e *ExamplesError) Error() string {
	return "lint: examples failed: " + strings.Join(e.Failures, "; ")
}

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
	prg  cel.Program
	// message is the message of a failing check.
	message string
}

// Compile checks spec (its expression type-checked, its cost bounded,
// its examples run) and compiles it. Its errors are ErrInvalid,
// ErrTooCostly (both wrapped with the reason) and *ExamplesError.
func Compile(name string, spec controlapi.Lint) (*Lint, error) {
	return compile(name, spec, CostLimit, CostLimit)
}

// compile is Compile with the limits of the estimate and of a run.
func compile(name string, spec controlapi.Lint, estimateLimit, runLimit uint64) (*Lint, error) {
	if err := checkSpec(spec); err != nil {
		return nil, err
	}
	env, err := newEnv()
	if err != nil {
		return nil, err
	}
	ast, iss := env.Compile(spec.Expr)
	if iss.Err() != nil {
		return nil, fmt.Errorf("%w: expr: %v", ErrInvalid, iss.Err())
	}
	if t := ast.OutputType(); !t.IsExactType(types.BoolType) && !t.IsExactType(types.DynType) {
		return nil, fmt.Errorf("%w: expr: it is a %s, want a bool", ErrInvalid, t)
	}
	est, err := env.EstimateCost(ast, sizeHints{})
	if err != nil {
		return nil, fmt.Errorf("%w: expr: estimating its cost: %v", ErrTooCostly, err)
	}
	if est.Max > estimateLimit {
		return nil, fmt.Errorf("%w: expr: its cost may reach %s over a namespace of %d keys, over the limit of %d", ErrTooCostly, costString(est.Max), MaxKeys, estimateLimit)
	}
	prg, err := env.Program(ast, cel.CostLimit(runLimit), cel.InterruptCheckFrequency(interruptEvery), cel.EvalOptions(cel.OptOptimize))
	if err != nil {
		return nil, fmt.Errorf("%w: expr: %v", ErrInvalid, err)
	}
	l := &Lint{name: name, spec: spec, prg: prg, message: failMessage(name, spec.Message, keysOf(ast.NativeRep()))}
	if err := l.runExamples(); err != nil {
		return nil, err
	}
	return l, nil
}

func costString(c uint64) string {
	if c == ^uint64(0) {
		return "no bound"
	}
	return fmt.Sprint(c)
}

// checkSpec checks what a lint's spec says beside its expression.
func checkSpec(spec controlapi.Lint) error {
	switch {
	case spec.Namespaces == "":
		return fmt.Errorf("%w: namespaces: a pattern is required (\"*\" for every namespace)", ErrInvalid)
	case spec.Expr == "":
		return fmt.Errorf("%w: expr is required", ErrInvalid)
	case len(spec.Expr) > MaxExprBytes:
		return fmt.Errorf("%w: expr is longer than %d bytes", ErrInvalid, MaxExprBytes)
	case len(spec.Message) > MaxMessageBytes || len(spec.Link) > MaxMessageBytes:
		return fmt.Errorf("%w: message and link: at most %d bytes each", ErrInvalid, MaxMessageBytes)
	case spec.Severity != controlapi.LintBlock && spec.Severity != controlapi.LintWarn:
		return fmt.Errorf("%w: severity %q: want %q or %q", ErrInvalid, spec.Severity, controlapi.LintBlock, controlapi.LintWarn)
	}
	if _, err := path.Match(spec.Namespaces, ""); err != nil {
		return fmt.Errorf("%w: namespaces %q: %v", ErrInvalid, spec.Namespaces, err)
	}
	return nil
}

// newEnv returns the environment of an expression: old, new and change.
func newEnv() (*cel.Env, error) {
	values := cel.MapType(cel.StringType, cel.DynType)
	return cel.NewEnv(
		cel.Variable("old", values),
		cel.Variable("new", values),
		cel.Variable("change", cel.MapType(cel.StringType, cel.ListType(cel.StringType))),
		cel.CrossTypeNumericComparisons(true),
	)
}

// sizeHints bounds the sizes of the variables for the cost estimate.
type sizeHints struct{}

func (sizeHints) EstimateSize(n cost.AstNode) *cost.SizeEstimate {
	p := n.Path()
	if len(p) == 0 {
		return nil
	}
	size := func(max uint64) *cost.SizeEstimate { return &cost.SizeEstimate{Min: 0, Max: max} }
	switch p[0] {
	case "old", "new":
		switch {
		case len(p) == 1:
			return size(MaxKeys)
		case p[1] == "@keys":
			return size(transport.MaxKeyLen)
		}
		return size(MaxValueBytes) // a value, or one within it
	case "change":
		switch {
		case len(p) == 1:
			return size(2) // puts and deletes
		case p[1] == "@keys":
			return size(uint64(len("deletes")))
		case p[len(p)-1] == "@items":
			return size(transport.MaxKeyLen) // a key put or deleted
		}
		return size(MaxKeys) // the keys put or deleted
	}
	return nil
}

func (sizeHints) EstimateCallCost(function, overloadID string, target *cost.AstNode, args []cost.AstNode) *cost.CallEstimate {
	return nil
}

// runExamples runs the spec's examples: each pass one must evaluate to
// true, each fail one to false (an evaluation that fails is neither).
func (l *Lint) runExamples() error {
	var failures []string
	run := func(kind string, i int, ex controlapi.LintExample, want bool) {
		in := exampleInput(ex)
		got, err := l.eval(context.Background(), in)
		switch {
		case err != nil:
			failures = append(failures, fmt.Sprintf("%s example %d: %v", kind, i+1, err))
		case got != want:
			failures = append(failures, fmt.Sprintf("%s example %d: the lint %s it", kind, i+1, map[bool]string{true: "passes", false: "fails"}[got]))
		}
	}
	for i, ex := range l.spec.Examples.Pass {
		run("pass", i, ex, true)
	}
	for i, ex := range l.spec.Examples.Fail {
		run("fail", i, ex, false)
	}
	if len(failures) > 0 {
		return &ExamplesError{Failures: failures}
	}
	return nil
}

// exampleInput is an example's change: the keys whose values differ are
// put, the keys gone are deleted.
func exampleInput(ex controlapi.LintExample) Input {
	in := Input{Old: ex.Old, New: ex.New}
	for k, v := range ex.New {
		if old, ok := ex.Old[k]; !ok || !jsonEqual(old, v) {
			in.Puts = append(in.Puts, k)
		}
	}
	for k := range ex.Old {
		if _, ok := ex.New[k]; !ok {
			in.Deletes = append(in.Deletes, k)
		}
	}
	return in
}

func jsonEqual(a, b json.RawMessage) bool {
	va, erra := decodeValue(a)
	vb, errb := decodeValue(b)
	if erra != nil || errb != nil {
		return string(a) == string(b)
	}
	return va.Equal(vb) == types.True
}

// Name returns the lint's name; Spec its definition.
func (l *Lint) Name() string { return l.name }

// Spec returns the lint's definition.
func (l *Lint) Spec() controlapi.Lint { return l.spec }

// Applies reports whether the lint applies to namespace ns.
func (l *Lint) Applies(ns string) bool {
	ok, _ := path.Match(l.spec.Namespaces, ns)
	return ok
}

// Eval runs the lint over in: a Check of kind lint, pass, or the lint's
// severity with its message (an evaluation that fails, or runs over the
// cost limit, counts at the lint's severity with an "error: " message).
func (l *Lint) Eval(ctx context.Context, in Input) controlapi.Check {
	c := controlapi.Check{Name: l.name, Namespace: in.Namespace, Kind: controlapi.CheckLint, Result: controlapi.CheckPass, Link: l.spec.Link}
	ok, err := l.eval(ctx, in)
	switch {
	case err != nil:
		c.Result, c.Message = l.spec.Severity, "error: "+err.Error()
	case !ok:
		c.Result, c.Message = l.spec.Severity, l.message
	}
	return c
}

// eval runs the expression over in.
func (l *Lint) eval(ctx context.Context, in Input) (bool, error) {
	puts, deletes := in.Puts, in.Deletes
	if puts == nil {
		puts = []string{}
	}
	if deletes == nil {
		deletes = []string{}
	}
	vars := map[string]any{
		"old": newValues(in.Old),
		"new": newValues(in.New),
		"change": types.NewRefValMap(types.DefaultTypeAdapter, map[ref.Val]ref.Val{
			types.String("puts"):    types.NewStringList(types.DefaultTypeAdapter, puts),
			types.String("deletes"): types.NewStringList(types.DefaultTypeAdapter, deletes),
		}),
	}
	out, _, err := l.prg.ContextEval(ctx, vars)
	if err != nil {
		return false, err
	}
	b, ok := out.(types.Bool)
	if !ok {
		return false, fmt.Errorf("the expression came out %s, not a bool", out.Type().TypeName())
	}
	return bool(b), nil
}

// ValidateName checks a lint's name: 1..128 bytes of [A-Za-z0-9._@-], not
// beginning with '.' (it is a path segment and a store key).
func ValidateName(name string) error {
	ok := name != "" && len(name) <= 128 && name[0] != '.'
	for i := 0; ok && i < len(name); i++ {
		c := name[i]
		ok = 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("._@-", c) >= 0
	}
	if !ok {
		return fmt.Errorf("%w: lint name %q: want 1..128 bytes of [A-Za-z0-9._@-], not beginning with '.'", ErrInvalid, name)
	}
	return nil
}
