package controlapi

import (
	"encoding/json"
	"time"
)

// ChangeRequest is the body of POST /control/changes: puts and deletes of
// one or several namespaces, each against a base revision.
type ChangeRequest struct {
	Reason string `json:"reason"`
	// Link points at the ticket or discussion behind the change (optional).
	Link       string                     `json:"link,omitempty"`
	Namespaces map[string]NamespaceChange `json:"namespaces"`
	// AllowOldSDK lets the change reach clients below a policy's
	// min_sdk_version; AllowOldSDKReason says why (required with it).
	AllowOldSDK       bool   `json:"allow_old_sdk,omitempty"`
	AllowOldSDKReason string `json:"allow_old_sdk_reason,omitempty"`
}

// NamespaceChange is one namespace's part of a change: its puts and
// deletes against BaseRevision, the namespace's revision the change was
// written against (0 in a request: the namespace's revision now).
type NamespaceChange struct {
	BaseRevision int64                      `json:"base_revision"`
	Puts         map[string]json.RawMessage `json:"puts,omitempty"`
	Deletes      []string                   `json:"deletes,omitempty"`
	// Schema, when set, is the namespace's new JSON Schema, set with the
	// change's values in the same commit (a namespace governed by a
	// policy changes its schema this way); DeleteSchema drops its schema
	// instead. The review checks the content after the change against
	// the new schema.
	Schema       json.RawMessage `json:"schema,omitempty"`
	DeleteSchema bool            `json:"delete_schema,omitempty"`
}

// States of a change. StateStale is derived when the change is read: a
// base revision is behind its namespace.
const (
	ChangeOpen      = "open"
	ChangeApproved  = "approved"
	ChangePublished = "published"
	// ChangePublishing: an approved change of one namespace whose rollout
	// is being started (publish with stages); publishing it again settles
	// it, published with its rollout (started once) or approved again.
	ChangePublishing = "publishing"
	ChangeRejected   = "rejected"
	ChangeWithdrawn  = "withdrawn"
	ChangeStale      = "stale"
)

// Actions on a change (Change.Actions, the routes' last segment).
const (
	ActionApprove  = "approve"
	ActionReject   = "reject"
	ActionWithdraw = "withdraw"
	ActionRebase   = "rebase"
	ActionPublish  = "publish"
)

// Change is a proposed change with its review: the reply of POST
// /control/changes and GET /control/changes/{id}.
type Change struct {
	ID     string `json:"id"`
	State  string `json:"state"`
	Author string `json:"author"`
	Reason string `json:"reason"`
	Link   string `json:"link,omitempty"`
	// Namespaces is the change's content; it never changes once proposed,
	// save the base revisions a rebase moves.
	Namespaces map[string]NamespaceChange `json:"namespaces"`
	// Diff is the semantic diff, sorted by namespace and key.
	Diff []DiffEntry `json:"diff"`
	// Checks are the results of the schema, every lint and the SDK gate.
	Checks []Check `json:"checks"`
	// Reach counts, per namespace, the clients the change would reach.
	Reach     map[string]Reach `json:"reach"`
	Approvals []Approval       `json:"approvals"`
	// Required is how many approvals the policies need (the most any one
	// asks); 0 without a policy.
	Required int `json:"required"`
	// Actions is what the caller may do with the change now.
	Actions           []string `json:"actions"`
	AllowOldSDK       bool     `json:"allow_old_sdk,omitempty"`
	AllowOldSDKReason string   `json:"allow_old_sdk_reason,omitempty"`
	// Hash is the hash an approval is bound to: the content, the base
	// revisions and the checks' results (not the reach).
	Hash      string    `json:"hash"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// Revision and Revisions are, once published, the commit revision and
	// each namespace's new revision.
	Revision  int64            `json:"revision,omitempty"`
	Revisions map[string]int64 `json:"revisions,omitempty"`
	// Staged marks a change published as a rollout; Rollout is its id.
	Staged  bool   `json:"staged,omitempty"`
	Rollout string `json:"rollout,omitempty"`
	// Emergency marks an emergency publish: published without approval,
	// its RetroReview open until a second person approves it.
	Emergency   bool         `json:"emergency,omitempty"`
	RetroReview *RetroReview `json:"retro_review,omitempty"`
	// Events is the change's audit trail: every state change, oldest first.
	Events []ChangeEvent `json:"events"`
}

// DiffEntry is one key of a change's semantic diff. Op is put or delete;
// Kind says what a put does: added, changed or type_changed (OldType and
// NewType are the JSON types then); a delete's Kind is removed.
type DiffEntry struct {
	Namespace string          `json:"ns"`
	Key       string          `json:"key"`
	Op        string          `json:"op"`
	Kind      string          `json:"kind"`
	Old       json.RawMessage `json:"old,omitempty"`
	New       json.RawMessage `json:"new,omitempty"`
	OldType   string          `json:"old_type,omitempty"`
	NewType   string          `json:"new_type,omitempty"`
}

// Ops and kinds of a DiffEntry.
const (
	OpPut    = "put"
	OpDelete = "delete"
	// OpSchema is a change's schema entry (its Key empty, Old and New the
	// schemas; Kind added, changed, unchanged or removed).
	OpSchema = "schema"

	DiffAdded       = "added"
	DiffChanged     = "changed"
	DiffTypeChanged = "type_changed"
	DiffRemoved     = "removed"
	DiffUnchanged   = "unchanged"
)

// Reach is how many clients a change to a namespace would reach now,
// grouped by the SDK version they report ("" when they report none), and
// how many of them are below the namespace's min_sdk_version.
type Reach struct {
	Live          int            `json:"live"`
	BySDKVersion  map[string]int `json:"by_sdk_version"`
	BelowMin      int            `json:"below_min"`
	MinSDKVersion string         `json:"min_sdk_version,omitempty"`
}

// Approval is one approval of a change: by whom and when; Hash is the
// change's hash it was given for.
type Approval struct {
	By   string    `json:"by"`
	At   time.Time `json:"at"`
	Hash string    `json:"hash,omitempty"`
}

// RetroReview is an emergency publish's review after the fact: due by
// Due; Overdue (derived when read) once Due passed without an approval.
type RetroReview struct {
	Due        time.Time `json:"due"`
	ApprovedBy string    `json:"approved_by,omitempty"`
	ApprovedAt time.Time `json:"approved_at,omitzero"`
	Overdue    bool      `json:"overdue"`
}

// ChangeEvent is one entry of a change's audit trail.
type ChangeEvent struct {
	At     time.Time `json:"at"`
	By     string    `json:"by"`
	Action string    `json:"action"`
	Reason string    `json:"reason,omitempty"`
	// Detail says more: the hash approved, the revisions published, the
	// checks an emergency publish passed over.
	Detail string `json:"detail,omitempty"`
}

// ChangeList is the reply of GET /control/changes, newest first.
type ChangeList struct {
	Changes []Change `json:"changes"`
}

// ChangeListOptions filter GET /control/changes: by namespace, by state,
// and AwaitingMe for the changes the caller may approve now.
type ChangeListOptions struct {
	Namespace  string
	State      string
	AwaitingMe bool
}

// ChangeActionRequest is the body of POST /control/changes/{id}/approve,
// reject, withdraw and rebase (optional).
type ChangeActionRequest struct {
	Reason string `json:"reason,omitempty"`
}

// ChangePublishRequest is the optional body of POST
// /control/changes/{id}/publish: with Stages, the change (of one
// namespace) is published as a staged rollout.
type ChangePublishRequest struct {
	Reason string `json:"reason,omitempty"`
	// The rest are a rollout start's (RolloutRequest).
	Stages        []float64         `json:"stages,omitempty"`
	Bake          string            `json:"bake,omitempty"`
	MaxNacks      int               `json:"max_nacks,omitempty"`
	Prevalidate   bool              `json:"prevalidate,omitempty"`
	ReportTimeout string            `json:"report_timeout,omitempty"`
	StageTimeout  string            `json:"stage_timeout,omitempty"`
	OnTimeout     string            `json:"on_timeout,omitempty"`
	OnBreach      string            `json:"on_breach,omitempty"`
	Gates         []json.RawMessage `json:"gates,omitempty"`
}

// ChangePublishReply is the reply of POST /control/changes/{id}/publish: the
// commit revision and each namespace's new revision (with stages: the
// rollout's id and its first revision).
type ChangePublishReply struct {
	Revision  int64            `json:"revision"`
	Revisions map[string]int64 `json:"revisions"`
	Rollout   string           `json:"rollout,omitempty"`
}

// EmergencyReply is the reply of an emergency publish: the new revision
// and the id of the retro review it opened (a change).
type EmergencyReply struct {
	Revision    int64  `json:"revision"`
	RetroReview string `json:"retro_review"`
}

// Policy is a named rule of review, the body of PUT
// /control/policies/{name} (admin scope): for the namespaces its pattern
// matches, how many approvals a change needs and from whom, who may
// publish in an emergency, the window of an emergency's retro review, and
// the oldest SDK a change may reach.
type Policy struct {
	Namespaces string   `json:"namespaces"`
	Approvals  int      `json:"approvals"`
	Approvers  []string `json:"approvers"`
	Emergency  []string `json:"emergency,omitempty"`
	// RetroReview is a duration ("24h", the default).
	RetroReview   string `json:"retro_review,omitempty"`
	MinSDKVersion string `json:"min_sdk_version,omitempty"`
}

// PolicyInfo is a policy with its name.
type PolicyInfo struct {
	Name string `json:"name"`
	Policy
}

// NamespacePolicies is the reply of GET
// /control/namespaces/{ns}/policies: the policies that apply to the
// namespace, by name (readable with control of the namespace; setting
// and reading a policy by its name needs the admin scope).
type NamespacePolicies struct {
	Namespace string       `json:"ns"`
	Policies  []PolicyInfo `json:"policies"`
}

// DefaultRetroReview is a policy's retro review window unless it says.
const DefaultRetroReview = 24 * time.Hour

// Codes of the change workflow's refusals (ErrorBody.Error).
const (
	CodeApprovalRequired = "approval_required" // 403
	CodeNotApprovable    = "not_approvable"    // 409
	CodeStaleBase        = "stale_base"        // 409
	CodeLintBlocked      = "lint_blocked"      // 422
	CodeSelfApproval     = "self_approval"     // 403
	CodeNotApprover      = "not_approver"      // 403
	CodeAlreadyApproved  = "already_approved"  // 409
	CodeBelowMinSDK      = "below_min_sdk"     // 422
)
