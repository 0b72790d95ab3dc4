package controlplane

import (
	"net/http"
	"strings"

	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/rollout/controller"
)

func (h *Handler) startRollout(w http.ResponseWriter, r *http.Request) error {
	var body controlapi.RolloutRequest
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
	if err := h.guarded(r.Context(), ns, "a rollout's start"); err != nil {
		return err
	}
	// Durations may be Go durations or whole seconds.
	for _, d := range []struct {
		name string
		v    *string
	}{{"bake", &body.Bake}, {"report_timeout", &body.ReportTimeout}, {"stage_timeout", &body.StageTimeout}} {
		v, err := durationParam(d.name, *d.v)
		if err != nil {
			return err
		}
		if *d.v != "" {
			*d.v = v.String()
		}
	}
	spec, err := controller.SpecOf(&body)
	if err != nil {
		return err
	}
	if _, err := controller.CheckSpec(ns, spec); err != nil {
		return err
	}
	// A staged change needs a base: a namespace without a revision is 404.
	// Base plus change must pass the schema now (422), as a publish must;
	// the promotion checks again, against the schema then.
	if err := h.cfg.Store.Check(r.Context(), ns, Write{Puts: spec.Puts, Deletes: spec.Deletes}); err != nil {
		return err
	}
	actor, onBehalfOf := actors(r, body.Actor)
	rec, err := h.cfg.Store.Rollouts().Start(r.Context(), ns, spec, rolloutActor(actor, onBehalfOf), body.Reason)
	if err != nil {
		return err
	}
	h.log.Info("control: rollout started", "ns", ns, "rollout", rec.ID, "revision", rec.Revisions[0], "actor", rec.Actor)
	writeJSON(w, http.StatusCreated, controlapi.RolloutStarted{ID: rec.ID, Revision: rec.Revisions[0]})
	return nil
}

func (h *Handler) listRollouts(w http.ResponseWriter, r *http.Request) error {
	ns, err := pathNamespace(r)
	if err != nil {
		return err
	}
	if _, err := query(r); err != nil {
		return err
	}
	recs, err := h.cfg.Store.Rollouts().List(r.Context(), ns)
	if err != nil {
		return err
	}
	if recs == nil {
		recs = []controlapi.RolloutRecord{}
	}
	writeJSON(w, http.StatusOK, controlapi.RolloutList{Rollouts: recs})
	return nil
}

func (h *Handler) getRollout(w http.ResponseWriter, r *http.Request) error {
	ns, err := pathNamespace(r)
	if err != nil {
		return err
	}
	if _, err := query(r); err != nil {
		return err
	}
	rec, err := h.cfg.Store.Rollouts().Get(r.Context(), ns, r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, rec)
	return nil
}

// rolloutAction is POST .../rollouts/{id}/abort and .../promote; the
// body, if any, names the actor and the reason.
func (h *Handler) rolloutAction(w http.ResponseWriter, r *http.Request) error {
	var body controlapi.RolloutActionRequest
	ns, err := namespaceBody(w, r, maxControlBytes, &body, true)
	if err != nil {
		return err
	}
	if err := checkAudit(body.Actor, body.Reason); err != nil {
		return err
	}
	ro := h.cfg.Store.Rollouts()
	act := ro.Abort
	if strings.HasSuffix(r.URL.Path, "/promote") {
		act = ro.Promote
	}
	actor := rolloutActor(actors(r, body.Actor))
	rec, err := act(r.Context(), ns, r.PathValue("id"), actor, body.Reason)
	if err != nil {
		return err
	}
	h.log.Info("control: rollout ended by an operator", "ns", ns, "rollout", rec.ID, "state", rec.State, "actor", actor)
	writeJSON(w, http.StatusOK, rec)
	return nil
}

// rolloutActor is who acts on a rollout: the authenticated identity, and
// whom it acts for, if another ("bot for alice"), as the history shows a
// publish's.
func rolloutActor(actor, onBehalfOf string) string {
	if onBehalfOf == "" {
		return actor
	}
	return actor + " for " + onBehalfOf
}
