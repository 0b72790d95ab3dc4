package fakeserver

import (
	"context"
	"slices"
	"strings"

	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/controlplane"
	"github.com/holdfast-dev/holdfast/internal/presence"
)

// Namespaces lists a page of the namespaces that have a revision, from
// the store's map of them (its index: no value is read), with each one's
// last audit record and its live clients as Status counts them.
func (c controlStore) Namespaces(_ context.Context, q controlplane.NamespaceQuery) (controlapi.Namespaces, error) {
	page := c.s.store.namespaces(q)
	live := presence.LiveByNamespace(c.s.Clients())
	for i := range page.Namespaces {
		page.Namespaces[i].LiveClients = live[page.Namespaces[i].Namespace]
	}
	return page, nil
}

func (st *store) namespaces(q controlplane.NamespaceQuery) controlapi.Namespaces {
	st.mu.Lock()
	var names []string
	for name, n := range st.nss {
		if n.rev > 0 && strings.HasPrefix(name, q.Prefix) && name > q.After && (q.Match == nil || q.Match(name)) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	page := controlapi.Namespaces{Namespaces: []controlapi.NamespaceInfo{}}
	if len(names) > q.Limit {
		names = names[:q.Limit]
		page.Next = names[len(names)-1]
	}
	for _, name := range names {
		n := st.nss[name]
		info := controlapi.NamespaceInfo{Namespace: name, Revision: n.rev}
		if recs := n.audit.recs; len(recs) > 0 && recs[len(recs)-1].Revision == n.rev {
			r := recs[len(recs)-1]
			info.CommittedAt, info.Actor, info.OnBehalfOf, info.Reason, info.Kind = r.CommittedAt, r.Actor, r.OnBehalfOf, r.Reason, r.Kind
		}
		page.Namespaces = append(page.Namespaces, info)
	}
	st.mu.Unlock()
	return page
}
