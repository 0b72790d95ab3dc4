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
