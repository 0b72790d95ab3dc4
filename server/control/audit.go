package control

import (
	"net/http"

	"github.com/holdfast-dev/holdfast/server/store"
)

func (h *Handler) history(w http.ResponseWriter, r *http.Request) error {
	ns, err := pathNamespace(r)
	if err != nil {
		return err
	}
	q, err := query(r, "limit", "before")
	if err != nil {
		return err
	}
	limit, _, err := intParam(q, "limit", 1)
	if err != nil {
		return err
	}
	if limit > store.MaxHistoryLimit {
		return badRequest("limit %d is above %d", limit, store.MaxHistoryLimit)
	}
	before, _, err := intParam(q, "before", 1)
	if err != nil {
		return err
	}
	hist, err := h.cfg.Namespaces.History(r.Context(), ns, store.HistoryOptions{Limit: int(limit), Before: before})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, hist)
	return nil
}

func (h *Handler) values(w http.ResponseWriter, r *http.Request) error {
	ns, err := pathNamespace(r)
	if err != nil {
		return err
	}
	q, err := query(r, "revision", "at")
	if err != nil {
		return err
	}
	_, hasRev := q["revision"]
	at, hasAt := q["at"]
	if hasRev == hasAt {
		return badRequest("give one of revision=R and at=RFC3339")
	}
	var v *store.NamespaceValues
	if hasAt {
		t, err := timeParam("at", at)
		if err != nil {
			return err
		}
		v, err = h.cfg.Namespaces.ValuesAtTime(r.Context(), ns, t)
		if err != nil {
			return err
		}
	} else {
		rev, _, err := intParam(q, "revision", 1)
		if err != nil {
			return err
		}
		if v, err = h.cfg.Namespaces.ValuesAt(r.Context(), ns, rev); err != nil {
			return err
		}
	}
	writeJSON(w, http.StatusOK, v)
	return nil
}

func (h *Handler) diff(w http.ResponseWriter, r *http.Request) error {
	ns, err := pathNamespace(r)
	if err != nil {
		return err
	}
	q, err := query(r, "from", "to")
	if err != nil {
		return err
	}
	from, okFrom, err := intParam(q, "from", 1)
	if err != nil {
		return err
	}
	to, okTo, err := intParam(q, "to", 1)
	if err != nil {
		return err
	}
	if !okFrom || !okTo {
		return badRequest("give both from=R1 and to=R2")
	}
	d, err := h.cfg.Namespaces.Diff(r.Context(), ns, from, to)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, d)
	return nil
}
