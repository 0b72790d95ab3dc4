package fakeserver

import (
	"context"
	"errors"
	"time"

	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/controlplane"
	"github.com/holdfast-dev/holdfast/internal/rollout/controller"
	"github.com/holdfast-dev/holdfast/schema"
)

// controlStore is the control API's store (controlplane.Store) over the
// server's in-memory store, through its Go API: the server is its only
// writer, always leads, and keeps its clients' reports in memory.
type controlStore struct{ s *Server }

var _ controlplane.Store = controlStore{}

func (c controlStore) Publish(_ context.Context, ns string, w controlplane.Write) (int64, error) {
	puts, deletes, err := checkPublish(ns, w.Puts, w.Deletes)
	if err != nil {
		return 0, err
	}
	// The actor, the reason and IfRevision are the handler's to check.
	return c.s.commit(ns, puts, deletes, PublishOptions{Actor: w.Actor, OnBehalfOf: w.OnBehalfOf, Reason: w.Reason, IfRevision: w.IfRevision, kind: w.Kind, change: w.Change})
}

// Rollback is the Go API's, but for a revision the namespace has no
// content at (above the head, before its first revision): 404, as
// holdfast server answers, where the Go API rolls back to nothing.
func (c controlStore) Rollback(_ context.Context, ns string, to int64, w controlplane.Write) (int64, error) {
	if _, err := c.s.ValuesAt(ns, to); errors.Is(err, ErrNoRevision) {
		return 0, err
	}
	return c.s.rollback(ns, to, commitMeta{Actor: w.Actor, OnBehalfOf: w.OnBehalfOf, Reason: w.Reason}, w.IfRevision)
}

func (c controlStore) Check(_ context.Context, ns string, w controlplane.Write) error {
	_, err := c.s.store.checkStaged(ns, w.Puts, w.Deletes)
	return err
}

func (c controlStore) Schema(_ context.Context, ns string) ([]byte, error) {
	return c.s.store.schemaOf(ns)
}

func (c controlStore) SetSchema(_ context.Context, ns string, raw []byte, sch *schema.Schema) error {
	c.s.setSchema(ns, raw, sch, false) // as holdfast server: the namespace appears at its first publish
	return nil
}

func (c controlStore) DeleteSchema(_ context.Context, ns string) error {
	return c.s.store.deleteSchema(ns)
}

func (c controlStore) History(_ context.Context, ns string, limit int, before int64) (*controlapi.History, error) {
	return c.s.History(ns, limit, before)
}

func (c controlStore) ValuesAt(_ context.Context, ns string, rev int64) (*controlapi.NamespaceValues, error) {
	return c.s.ValuesAt(ns, rev)
}

func (c controlStore) ValuesAtTime(_ context.Context, ns string, t time.Time) (*controlapi.NamespaceValues, error) {
	return c.s.ValuesAtTime(ns, t)
}

func (c controlStore) Diff(_ context.Context, ns string, from, to int64) (*controlapi.Diff, error) {
	return c.s.Diff(ns, from, to)
}

func (c controlStore) Status(_ context.Context, ns string) (controlapi.NamespaceStatus, error) {
	return c.s.Status(ns)
}

func (c controlStore) Compact(_ context.Context, rev int64) (int64, error) { return c.s.Compact(rev) }

func (c controlStore) Clients(context.Context) (controlapi.Clients, error) {
	clients := c.s.Clients()
	for i := range clients {
		clients[i].Server = c.s.id
	}
	return controlapi.Clients{Head: c.s.Head(), Clients: clients, Server: c.s.id, Dropped: c.s.dp.Dropped()}, nil
}

func (c controlStore) Rollouts() controlplane.Rollouts { return controlRollouts(c) }

// controlRollouts is the control API's rollouts: the server's controller,
// with the server's own checks at the start.
type controlRollouts struct{ s *Server }

func (c controlRollouts) Start(ctx context.Context, ns string, spec controller.Spec, actor, reason string) (controller.Record, error) {
	return c.s.startRollout(ctx, ns, spec, actor, reason)
}

func (c controlRollouts) List(ctx context.Context, ns string) ([]controller.Record, error) {
	return c.s.rolloutRecords(ctx, ns)
}

func (c controlRollouts) Get(ctx context.Context, ns, id string) (controller.Record, error) {
	return c.s.rolloutRecord(ctx, ns, id)
}

func (c controlRollouts) Abort(ctx context.Context, ns, id, actor, reason string) (controller.Record, error) {
	return c.s.endRollout(ctx, ns, id, false, actor, reason)
}

func (c controlRollouts) Promote(ctx context.Context, ns, id, actor, reason string) (controller.Record, error) {
	return c.s.endRollout(ctx, ns, id, true, actor, reason)
}
