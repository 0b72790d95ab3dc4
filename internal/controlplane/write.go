package controlplane

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/rollout/controller"
	"github.com/holdfast-dev/holdfast/schema"
	"github.com/holdfast-dev/holdfast/transport"
)

// maxAbortAttempts bounds how often a publish with abort_rollout aborts a
// rollout and tries again (another rollout may start in between).
const maxAbortAttempts = 5

func (h *Handler) publish(w http.ResponseWriter, r *http.Request) error {
	var body controlapi.PublishRequest
	ns, err := namespaceBody(w, r, h.cfg.MaxPublishBytes, &body, false)
	if err != nil {
		return err
	}
	if err := checkChange(body.Puts, body.Deletes); err != nil {
		return err
	}
	if err := checkAudit(body.Actor, body.Reason); err != nil {
		return err
	}
	if body.IfRevision != nil && *body.IfRevision < 0 {
		return badRequest("if_revision %d is negative", *body.IfRevision)
	}
	wr := Write{Puts: body.Puts, Deletes: body.Deletes, Reason: body.Reason, IfRevision: body.IfRevision}
	wr.Actor, wr.OnBehalfOf = actors(r, body.Actor)
	if body.Emergency {
		return h.emergencyPublish(w, r, ns, wr, body.AbortRollout)
	}
	if err := h.guarded(r.Context(), ns, "a direct publish"); err != nil {
		return err
	}
	if err := h.lintDirect(r.Context(), ns, wr); err != nil {
		return err
	}
	rev, err := h.write(r.Context(), ns, wr, body.AbortRollout, func() (int64, error) { return h.cfg.Store.Publish(r.Context(), ns, wr) })
	if err != nil {
		return err
	}
	h.log.Info("control: published", "ns", ns, "revision", rev, "actor", wr.Actor, "on_behalf_of", wr.OnBehalfOf)
	writeJSON(w, http.StatusOK, controlapi.RevisionReply{Revision: rev})
	return nil
}

func (h *Handler) rollback(w http.ResponseWriter, r *http.Request) error {
	var body controlapi.RollbackRequest
	ns, err := namespaceBody(w, r, maxControlBytes, &body, false)
	if err != nil {
		return err
	}
	if err := checkAudit(body.Actor, body.Reason); err != nil {
		return err
	}
	switch {
	case body.To == nil:
		return badRequest("to_revision is required")
	case *body.To < 1:
		return badRequest("to_revision %d: want a revision of at least 1", *body.To)
	case body.IfRevision != nil && *body.IfRevision < 0:
		return badRequest("if_revision %d is negative", *body.IfRevision)
	}
	if err := h.guarded(r.Context(), ns, "a rollback"); err != nil {
		return err
	}
	wr := Write{Reason: body.Reason, IfRevision: body.IfRevision}
	wr.Actor, wr.OnBehalfOf = actors(r, body.Actor)
	rev, err := h.write(r.Context(), ns, wr, false, func() (int64, error) { return h.cfg.Store.Rollback(r.Context(), ns, *body.To, wr) })
	if err != nil {
		return err
	}
	h.log.Info("control: rolled back", "ns", ns, "to", *body.To, "revision", rev, "actor", wr.Actor, "on_behalf_of", wr.OnBehalfOf)
	writeJSON(w, http.StatusOK, controlapi.RevisionReply{Revision: rev})
	return nil
}

// write runs commit, a plain write of ns, which the store refuses while a
// rollout runs there: with abort, the rollout is reverted first (if the
// write passes its checks: one that would fail aborts nothing) and the
// write tried again.
func (h *Handler) write(ctx context.Context, ns string, wr Write, abort bool, commit func() (int64, error)) (int64, error) {
	for attempt := 0; ; attempt++ {
		rev, err := commit()
		var running *RolloutRunningError
		if !errors.As(err, &running) {
			return rev, err
		}
		if !abort || attempt >= maxAbortAttempts {
			return 0, err
		}
		if err := h.cfg.Store.Check(ctx, ns, wr); err != nil {
			return 0, err
		}
		rec, err := h.cfg.Store.Rollouts().Abort(ctx, ns, running.ID, rolloutActor(wr.Actor, wr.OnBehalfOf), "aborted by a publish")
		switch {
		case errors.Is(err, controller.ErrEnded), errors.Is(err, controller.ErrUnknown):
		case err != nil:
			return 0, err
		default:
			h.log.Info("control: rollout aborted by a publish", "ns", ns, "rollout", running.ID, "revision", rec.Revisions[len(rec.Revisions)-1])
		}
	}
}

func (h *Handler) putSchema(w http.ResponseWriter, r *http.Request) error {
	ns, err := pathNamespace(r)
	if err != nil {
		return err
	}
	if err := h.guarded(r.Context(), ns, "a schema change"); err != nil {
		return err
	}
	data, err := readBody(w, r, h.cfg.MaxPublishBytes)
	if err != nil {
		return err
	}
	sch, err := schema.Compile(data)
	if err != nil {
		return err
	}
	if err := h.cfg.Store.SetSchema(r.Context(), ns, data, sch); err != nil {
		return err
	}
	h.log.Info("control: schema set", "ns", ns)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (h *Handler) getSchema(w http.ResponseWriter, r *http.Request) error {
	ns, err := pathNamespace(r)
	if err != nil {
		return err
	}
	if _, err := query(r); err != nil {
		return err
	}
	data, err := h.cfg.Store.Schema(r.Context(), ns)
	if err != nil {
		return schemaError(ns, err)
	}
	w.Header().Set("Content-Type", "application/schema+json")
	_, _ = w.Write(data)
	return nil
}

func (h *Handler) deleteSchema(w http.ResponseWriter, r *http.Request) error {
	ns, err := pathNamespace(r)
	if err != nil {
		return err
	}
	if err := h.guarded(r.Context(), ns, "a schema change"); err != nil {
		return err
	}
	if err := h.cfg.Store.DeleteSchema(r.Context(), ns); err != nil {
		return schemaError(ns, err)
	}
	h.log.Info("control: schema deleted", "ns", ns)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func schemaError(ns string, err error) error {
	if errors.Is(err, ErrNoSchema) {
		return &httpError{status: http.StatusNotFound, code: transport.CodeNotFound, msg: fmt.Sprintf("namespace %q has no schema", ns)}
	}
	return err
}
