package controlplane

import (
	"cmp"
	"net/http"
	"slices"

	"github.com/holdfast-dev/holdfast/access"
	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/dataplane"
	"github.com/holdfast-dev/holdfast/internal/presence"
)

// MaxHistoryLimit is the most audit records one page of history holds.
const MaxHistoryLimit = 1000

func writeJSON(w http.ResponseWriter, status int, v any) { dataplane.WriteJSON(w, status, v) }

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
	if limit > MaxHistoryLimit {
		return badRequest("limit %d is above %d", limit, MaxHistoryLimit)
	}
	before, _, err := intParam(q, "before", 1)
	if err != nil {
		return err
	}
	hist, err := h.cfg.Store.History(r.Context(), ns, int(limit), before)
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
	var v *controlapi.NamespaceValues
	if hasAt {
		t, err := timeParam("at", at)
		if err != nil {
			return err
		}
		if v, err = h.cfg.Store.ValuesAtTime(r.Context(), ns, t); err != nil {
			return err
		}
	} else {
		rev, _, err := intParam(q, "revision", 1)
		if err != nil {
			return err
		}
		if v, err = h.cfg.Store.ValuesAt(r.Context(), ns, rev); err != nil {
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
	d, err := h.cfg.Store.Diff(r.Context(), ns, from, to)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, d)
	return nil
}

func (h *Handler) status(w http.ResponseWriter, r *http.Request) error {
	ns, err := pathNamespace(r)
	if err != nil {
		return err
	}
	if _, err := query(r); err != nil {
		return err
	}
	st, err := h.cfg.Store.Status(r.Context(), ns)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, st)
	return nil
}

func (h *Handler) compact(w http.ResponseWriter, r *http.Request) error {
	var body controlapi.CompactRequest
	if err := ReadJSON(w, r, maxControlBytes, &body, true); err != nil {
		return err
	}
	if body.Revision < 0 {
		return badRequest("revision must not be negative")
	}
	k, err := h.cfg.Store.Compact(r.Context(), body.Revision)
	if err != nil {
		return err
	}
	h.log.Info("control: compacted", "revision", k)
	writeJSON(w, http.StatusOK, controlapi.CompactReply{CompactRevision: k})
	return nil
}

func (h *Handler) clients(w http.ResponseWriter, r *http.Request) error {
	q, err := query(r, "ns", "state", "offset", "limit", "summary")
	if err != nil {
		return err
	}
	offset, _, err := intParam(q, "offset", 0)
	if err != nil {
		return err
	}
	limit, paged, err := intParam(q, "limit", 1)
	switch {
	case err != nil:
		return err
	case limit > controlapi.MaxClientsLimit:
		return badRequest("limit %d is above %d", limit, controlapi.MaxClientsLimit)
	case !paged && offset > 0:
		return badRequest("offset needs a limit")
	}
	c, err := h.cfg.Store.Clients(r.Context())
	if err != nil {
		return err
	}
	id, ok := access.FromContext(r.Context())
	mine := !ok || h.cfg.Authenticator == nil || id.MayControlAll()
	ns, state := q["ns"], q["state"]
	if !mine || ns != "" || state != "" {
		// Only the namespaces the identity controls, and those the query
		// asks for.
		c.Clients = slices.DeleteFunc(c.Clients, func(c controlapi.ClientState) bool {
			return !mine && !id.MayControl(c.Namespace) || ns != "" && c.Namespace != ns || state != "" && c.State != state
		})
		c.Servers = slices.DeleteFunc(c.Servers, func(s controlapi.ServerReports) bool {
			return !mine && !id.MayControl(s.Namespace) || ns != "" && s.Namespace != ns
		})
	}
	if _, ok := q["summary"]; ok {
		c.Summary = summarize(c.Clients)
	}
	if paged {
		// A page of the clients in the order of namespace and id.
		slices.SortFunc(c.Clients, func(a, b controlapi.ClientState) int {
			return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.ClientID, b.ClientID))
		})
		c.Total = len(c.Clients)
		from := int(min(offset, int64(len(c.Clients))))
		c.Clients = c.Clients[from:min(from+int(limit), len(c.Clients))]
	}
	if c.Clients == nil {
		c.Clients = []controlapi.ClientState{}
	}
	writeJSON(w, http.StatusOK, c)
	return nil
}

// summarize counts clients by state and by namespace, and groups their
// nacks by namespace, revision and reason, the most first.
func summarize(clients []controlapi.ClientState) *controlapi.ClientSummary {
	sum := &controlapi.ClientSummary{States: map[string]int{}, Nacks: []controlapi.NackGroup{}}
	groups := map[controlapi.NackGroup]int{}
	byNS := map[string][]controlapi.ClientState{}
	for _, cl := range clients {
		sum.States[cl.State]++
		if cl.NackedRevision > 0 {
			groups[controlapi.NackGroup{Namespace: cl.Namespace, Revision: cl.NackedRevision, Error: cl.NackError}]++
		}
		byNS[cl.Namespace] = append(byNS[cl.Namespace], cl)
	}
	sum.Namespaces = make(map[string]controlapi.NamespaceClients, len(byNS))
	for ns, cls := range byNS {
		// Every client of a namespace carries its revision now.
		st := controlapi.NamespaceStatus{Revision: cls[0].HeadRevision}
		presence.Count(&st, cls)
		sum.Namespaces[ns] = controlapi.NamespaceClients{Live: st.Live, Acked: st.Acked, Nacked: st.Nacked, Behind: st.Behind, Stale: st.Stale}
	}
	for g, n := range groups {
		g.Count = n
		sum.Nacks = append(sum.Nacks, g)
	}
	slices.SortFunc(sum.Nacks, func(a, b controlapi.NackGroup) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Revision, b.Revision), cmp.Compare(a.Error, b.Error))
	})
	return sum
}

// maxNamespacePrefix bounds the prefix and after of GET
// /control/namespaces: a namespace's name is at most as long.
const maxNamespacePrefix = 256

// namespaces lists the namespaces, a page at a time, as the store's index
// has them: those the identity controls, when there is one that does not
// control the whole store.
func (h *Handler) namespaces(w http.ResponseWriter, r *http.Request) error {
	q, err := query(r, "prefix", "after", "limit")
	if err != nil {
		return err
	}
	limit, ok, err := intParam(q, "limit", 1)
	switch {
	case err != nil:
		return err
	case !ok:
		limit = controlapi.DefaultNamespacesLimit
	case limit > controlapi.MaxNamespacesLimit:
		return badRequest("limit %d is above %d", limit, controlapi.MaxNamespacesLimit)
	}
	nq := NamespaceQuery{Prefix: q["prefix"], After: q["after"], Limit: int(limit)}
	if len(nq.Prefix) > maxNamespacePrefix || len(nq.After) > maxNamespacePrefix {
		return badRequest("prefix and after are at most %d bytes", maxNamespacePrefix)
	}
	if id, ok := access.FromContext(r.Context()); ok && h.cfg.Authenticator != nil && !id.MayControlAll() {
		nq.Match = id.MayControl
	}
	page, err := h.cfg.Store.Namespaces(r.Context(), nq)
	if err != nil {
		return err
	}
	if page.Namespaces == nil {
		page.Namespaces = []controlapi.NamespaceInfo{}
	}
	writeJSON(w, http.StatusOK, page)
	return nil
}
