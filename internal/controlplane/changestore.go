package controlplane

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/holdfast-dev/holdfast/controlapi"
)

// ChangeStore keeps the change workflow's records, durably: the policies
// and the changes, each change with a version that moves on every write
// of it (a write names the version it read, so that of two racing
// actions one wins). A server without one answers /control/changes and
// /control/policies 404 and needs no approvals.
type ChangeStore interface {
	// PutPolicy stores p under name, replacing any policy of that name.
	PutPolicy(ctx context.Context, name string, p controlapi.Policy) error
	// GetPolicy returns the policy of that name; ErrNotFound when none.
	GetPolicy(ctx context.Context, name string) (controlapi.Policy, error)
	// DeletePolicy drops the policy of that name; ErrNotFound when none.
	DeletePolicy(ctx context.Context, name string) error
	// Policies returns every policy by name.
	Policies(ctx context.Context) (map[string]controlapi.Policy, error)

	// Current returns namespace ns's content now (keys reserved to
	// holdfast left out) and its revision; ErrNotFound (or the data
	// plane's or package transport's not-found error) when it has none.
	Current(ctx context.Context, ns string) (map[string]json.RawMessage, int64, error)

	// CreateChange stores a new change; ErrExists when its id is taken.
	CreateChange(ctx context.Context, c controlapi.Change) error
	// GetChange returns the change of that id and its version;
	// ErrNotFound when none.
	GetChange(ctx context.Context, id string) (controlapi.Change, int64, error)
	// Changes returns every change, in no order.
	Changes(ctx context.Context) ([]controlapi.Change, error)
	// UpdateChange replaces change c.ID if it is still at version, else
	// ErrChangeMoved.
	UpdateChange(ctx context.Context, c controlapi.Change, version int64) error
	// CommitChange commits writes (by namespace, each only if the
	// namespace is at its IfRevision, passes its schema and has no
	// rollout running) and replaces change c.ID, if still at version, with
	// c: all in one transaction, the namespaces sharing one commit
	// revision, which it returns with each namespace's; or nothing at all
	// (a *ConflictError, a *SchemaError or *schema.ValidationError, a
	// *RolloutRunningError, ErrChangeMoved). The change as GetChange reads
	// it then has its Revision and Revisions (the record written in the
	// transaction knew them not: a store may fill them in when read).
	CommitChange(ctx context.Context, c controlapi.Change, version int64, writes map[string]Write) (rev int64, revs map[string]int64, err error)
	// OpenRetroReviews returns the due times of the emergency publishes
	// whose retro review is open, from an index the store keeps (an entry
	// written with the change's record by CommitChange, removed by the
	// UpdateChange that records the review), so that a metric's scrape
	// reads no change.
	OpenRetroReviews(ctx context.Context) ([]time.Time, error)
}

// RetroOpen reports whether c is an emergency publish whose retro review
// is open: what a store's retro review index holds.
func RetroOpen(c *controlapi.Change) bool {
	return c.Emergency && c.RetroReview != nil && c.RetroReview.ApprovedBy == ""
}

// ErrChangeMoved: the change was written by another request since it was
// read (409); nothing was written.
var ErrChangeMoved = errors.New("controlplane: the change was written meanwhile")

// Kinds of the audit record of a commit of the change workflow
// (Write.Kind).
const (
	KindChange    = "change"
	KindEmergency = "emergency"
)

// OverdueReviews counts the emergency publishes of cs whose retro review
// is still open past its due time at now (holdfast server's
// holdfast_changes_overdue_review).
func OverdueReviews(ctx context.Context, cs ChangeStore, now time.Time) (int, error) {
	due, err := cs.OpenRetroReviews(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, d := range due {
		if now.After(d) {
			n++
		}
	}
	return n, nil
}
