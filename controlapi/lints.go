package controlapi

import "encoding/json"

// Lint is a named check of a namespace's change, the body of
// PUT /control/lints/{name}: a CEL expression over old and new (the
// namespace's values before and after, as maps) and change (the keys put
// and deleted) that must hold for the change to pass.
type Lint struct {
	// Namespaces is the pattern of the namespaces it applies to
	// ("payments.*").
	Namespaces string `json:"namespaces"`
	Expr       string `json:"expr"`
	Message    string `json:"message"`
	// Severity is LintBlock or LintWarn.
	Severity string `json:"severity"`
	// Link points at the incident the lint came from (optional).
	Link     string       `json:"link,omitempty"`
	Examples LintExamples `json:"examples,omitempty"`
}

// Severities of a lint.
const (
	LintBlock = "block"
	LintWarn  = "warn"
)

// LintExamples are changes a lint must pass and changes it must fail,
// checked when it is saved.
type LintExamples struct {
	Pass []LintExample `json:"pass,omitempty"`
	Fail []LintExample `json:"fail,omitempty"`
}

// LintExample is one change: the namespace's values before (nil: none)
// and after.
type LintExample struct {
	Old map[string]json.RawMessage `json:"old,omitempty"`
	New map[string]json.RawMessage `json:"new"`
}

// Check is one check's result on a change: the schema's, a lint's, or the
// SDK-version gate's.
type Check struct {
	Name string `json:"name"`
	// Namespace is the namespace checked.
	Namespace string `json:"ns,omitempty"`
	// Kind is CheckSchema, CheckLint or CheckMinSDK.
	Kind string `json:"kind"`
	// Result is CheckPass, CheckWarn or CheckBlock.
	Result  string `json:"result"`
	Message string `json:"message,omitempty"`
	// Link is a lint's incident link.
	Link string `json:"link,omitempty"`
}

// Kinds and results of a Check.
const (
	CheckSchema = "schema"
	CheckLint   = "lint"
	CheckMinSDK = "min_sdk"

	CheckPass  = "pass"
	CheckWarn  = "warn"
	CheckBlock = "block"
)

// Error codes of the lint routes (ErrorBody.Error): a lint whose examples
// do not come out as they say (422, Details lists which) and one whose
// estimated cost is over the limit (422). A malformed expression is a
// bad_request (400).
const (
	CodeLintExamplesFailed = "lint_examples_failed"
	CodeLintTooCostly      = "lint_too_costly"
)

// LintInfo is a lint with its name: GET /control/lints/{name}'s reply and
// an entry of LintList.
type LintInfo struct {
	Name string `json:"name"`
	Lint
}

// LintList is the reply of GET /control/lints: every lint, sorted by
// name.
type LintList struct {
	Lints []LintInfo `json:"lints"`
}

// LintTestResult is the reply of POST /control/lints/{name}/test: the
// revisions of the namespace's history (newest first) whose change the
// lint blocks, and those it warns of (a warn lint's); Checked is how many
// revisions it ran over.
type LintTestResult struct {
	Namespace  string  `json:"ns"`
	WouldBlock []int64 `json:"would_block"`
	WouldWarn  []int64 `json:"would_warn"`
	Checked    int     `json:"checked"`
	// Truncated says the store's history ended (compacted) before the
	// limit.
	Truncated bool `json:"truncated,omitempty"`
	// Results are the checks of the revisions that did not pass, newest
	// first, each with its message.
	Results []LintTestRevision `json:"results,omitempty"`
}

// LintTestRevision is a lint's check of one revision's change.
type LintTestRevision struct {
	Revision int64 `json:"revision"`
	Check
}
