package controlplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/holdfast-dev/holdfast/access"
	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/dataplane"
	"github.com/holdfast-dev/holdfast/internal/rollout/controller"
	"github.com/holdfast-dev/holdfast/schema"
)

// Store is what the control API needs of a store, namespace by
// namespace: writes that commit with their audit record only if the
// conditions they carry hold, the reads of the audit, the schemas, the
// clients' reports and the rollouts. Inputs are checked by the handler
// (names, keys, query values, bodies); a store checks what only it can
// (its limits, the schema, the revisions).
type Store interface {
	// Publish commits w to ns as one new revision with its audit record,
	// only if ns's schema accepts the result, w.IfRevision (when set) is
	// ns's revision, and no rollout runs on ns: else nothing is written
	// and it fails with a *SchemaError or *schema.ValidationError, a
	// *ConflictError, or a *RolloutRunningError.
	Publish(ctx context.Context, ns string, w Write) (rev int64, err error)
	// Rollback commits ns's content at store revision to (keys reserved
	// to holdfast left as the store's rollouts need them) as a new
	// revision, under Publish's conditions (w's puts and deletes unused).
	Rollback(ctx context.Context, ns string, to int64, w Write) (rev int64, err error)
	// Check reports whether w would pass ns's schema now, writing nothing
	// (a publish that would fail aborts no rollout, a rollout that would
	// fail does not start); it fails with ErrNotFound (or the data plane's
	// or package transport's not-found error) when ns has no revision.
	Check(ctx context.Context, ns string, w Write) error

	// Schema returns ns's schema as it was set; ErrNoSchema when none.
	Schema(ctx context.Context, ns string) ([]byte, error)
	// SetSchema sets ns's schema (raw, already compiled as sch).
	SetSchema(ctx context.Context, ns string, raw []byte, sch *schema.Schema) error
	// DeleteSchema drops ns's schema; ErrNoSchema when it had none.
	DeleteSchema(ctx context.Context, ns string) error

	// History returns up to limit (0: the store's default) of ns's audit
	// records below revision before (0: from the newest), newest first.
	History(ctx context.Context, ns string, limit int, before int64) (*controlapi.History, error)
	// ValuesAt returns ns's content live at store revision rev (rev >= 1),
	// ValuesAtTime at time t; Diff what changed between two revisions.
	ValuesAt(ctx context.Context, ns string, rev int64) (*controlapi.NamespaceValues, error)
	ValuesAtTime(ctx context.Context, ns string, t time.Time) (*controlapi.NamespaceValues, error)
	Diff(ctx context.Context, ns string, from, to int64) (*controlapi.Diff, error)

	// Status returns ns's status, with the clients' reports counted.
	Status(ctx context.Context, ns string) (controlapi.NamespaceStatus, error)
	// Compact compacts the store's history to revision rev (0: the head;
	// above it: ErrInvalid) and returns the compaction point.
	Compact(ctx context.Context, rev int64) (int64, error)
	// Clients returns the clients' reports, every namespace's.
	Clients(ctx context.Context) (controlapi.Clients, error)
	// Namespaces returns a page of the namespaces q selects, sorted by
	// name, each with its revision, last change and clients, from an
	// index the store keeps (not a read of their values); Next is set
	// when more follow.
	Namespaces(ctx context.Context, q NamespaceQuery) (controlapi.Namespaces, error)

	// Rollouts returns the store's rollouts.
	Rollouts() Rollouts
}

// Rollouts serves the operators' requests on staged rollouts
// (*controller.Controller is one).
type Rollouts interface {
	Start(ctx context.Context, ns string, spec controller.Spec, actor, reason string) (controller.Record, error)
	List(ctx context.Context, ns string) ([]controller.Record, error)
	Get(ctx context.Context, ns, id string) (controller.Record, error)
	Abort(ctx context.Context, ns, id, actor, reason string) (controller.Record, error)
	Promote(ctx context.Context, ns, id, actor, reason string) (controller.Record, error)
}

// TokenStore keeps the access tokens that /control/tokens manages. A
// server without one answers those routes 404.
type TokenStore interface {
	// Create stores rec; ErrExists when the name is taken.
	Create(ctx context.Context, rec access.Record) error
	// List returns every token, sorted by name.
	List(ctx context.Context) ([]controlapi.TokenInfo, error)
	// Revoke drops a token; ErrTokenNotFound when there is none.
	Revoke(ctx context.Context, name string) error
	// NoteUses records that the names were used (a relay's clients).
	NoteUses(names []string, at time.Time)
	// Sync returns the records once the store is past revision after, or
	// after maxWait as they are.
	Sync(ctx context.Context, after int64, maxWait time.Duration) controlapi.TokenSync
}

// NamespaceQuery selects a page of Store.Namespaces.
type NamespaceQuery struct {
	// Prefix keeps the namespaces whose names begin with it; After those
	// whose names sort after it (the previous page's Next).
	Prefix, After string
	// Limit is the most namespaces of the page (at least 1).
	Limit int
	// Match, when set, keeps the namespaces it accepts (the caller's
	// scope).
	Match func(ns string) bool
}

// Write is one publish: its change, its audit record and its condition.
type Write struct {
	Puts    map[string]json.RawMessage
	Deletes []string
	// Actor is who committed it (the authenticated identity, or on an open
	// store the actor the request names); OnBehalfOf whom it acted for.
	Actor, OnBehalfOf, Reason string
	// IfRevision, when set, is the revision ns must be at (0: none).
	IfRevision *int64
	// Kind, when set, is the audit record's kind (KindChange,
	// KindEmergency; default publish); Change the id of the change the
	// commit publishes.
	Kind, Change string
	// Schema, when set, is ns's new schema (raw, compiled as
	// CompiledSchema), committed with the write and checked in its stead;
	// DropSchema drops ns's schema with the write. Only CommitChange takes
	// them (a change's namespace part).
	Schema         []byte
	CompiledSchema *schema.Schema
	DropSchema     bool
}

// Errors a store returns, mapped to their replies by the handler.
var (
	// ErrInvalid: a malformed request or an impossible revision (400):
	// the data plane's, so that a store's errors are one kind for both.
	ErrInvalid = dataplane.ErrInvalid
	// ErrNotFound: no such namespace, revision or record (404).
	ErrNotFound = errors.New("controlplane: not found")
	// ErrNoSchema: the namespace has no schema (404).
	ErrNoSchema = fmt.Errorf("%w: the namespace has no schema", ErrNotFound)
	// ErrExists: a record of that name exists (409).
	ErrExists = errors.New("controlplane: exists")
	// ErrFull: the store holds as many records as it may (507).
	ErrFull = errors.New("controlplane: the store is full")
	// ErrUnavailable: the store did not answer (503).
	ErrUnavailable = errors.New("controlplane: the store did not answer")
)

// ConflictError is a write whose IfRevision is not the namespace's
// revision (409, with the revision). Nothing was committed.
type ConflictError struct {
	Namespace string
	// Revision is the namespace's revision (0: it has none); IfRevision
	// the one the write expected.
	Revision, IfRevision int64
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("namespace %q is at revision %d, not %d", e.Namespace, e.Revision, e.IfRevision)
}

// SchemaError is a write that fails the namespace's schema (422, with the
// failures). Nothing was committed.
type SchemaError struct {
	Namespace string
	// Failures lists every failure, each as "pointer: message".
	Failures []string
}

func (e *SchemaError) Error() string {
	return fmt.Sprintf("namespace %q: content fails its schema: %d failure(s): %v", e.Namespace, len(e.Failures), e.Failures)
}

// RolloutRunningError is a plain write refused because a rollout runs on
// the namespace (409, unless the publish asked to abort it).
type RolloutRunningError struct {
	Namespace, ID string
	// Err, when set, is the store's own error, which it wraps.
	Err error
}

func (e *RolloutRunningError) Error() string {
	return fmt.Sprintf("namespace %q: rollout %q is running; abort it first (or publish with abort_rollout)", e.Namespace, e.ID)
}

func (e *RolloutRunningError) Unwrap() error { return e.Err }

// Mark returns err as one of the kinds above (ErrInvalid, ErrNotFound,
// ErrExists, ...): its message is err's, and errors.Is finds both.
func Mark(kind, err error) error {
	if err == nil {
		return nil
	}
	return &marked{err: err, kind: kind}
}

type marked struct{ err, kind error }

func (m *marked) Error() string   { return m.err.Error() }
func (m *marked) Unwrap() []error { return []error{m.err, m.kind} }

// LintStore keeps the lints that /control/lints manages. A server without
// one answers those routes 404 and runs no lints.
type LintStore interface {
	// PutLint stores l under name, replacing any lint of that name.
	PutLint(ctx context.Context, name string, l controlapi.Lint) error
	// GetLint returns the lint of that name; ErrNotFound when none.
	GetLint(ctx context.Context, name string) (controlapi.Lint, error)
	// DeleteLint drops the lint of that name; ErrNotFound when none.
	DeleteLint(ctx context.Context, name string) error
	// Lints returns every lint by name.
	Lints(ctx context.Context) (map[string]controlapi.Lint, error)
}
