package control

import (
	"context"

	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/controlplane"
	"github.com/holdfast-dev/holdfast/internal/presence"
	"github.com/holdfast-dev/holdfast/server/store"
)

// Namespaces lists a page of the store's index of namespaces (which every
// publish keeps in its transaction), with each namespace's live clients.
func (s etcdStore) Namespaces(ctx context.Context, q controlplane.NamespaceQuery) (controlapi.Namespaces, error) {
	entries, more, err := s.h.cfg.Namespaces.List(ctx, store.ListOptions{Prefix: q.Prefix, After: q.After, Limit: q.Limit, Match: q.Match})
	if err != nil {
		return controlapi.Namespaces{}, err
	}
	live, err := s.h.liveClients(ctx)
	if err != nil {
		return controlapi.Namespaces{}, err
	}
	page := controlapi.Namespaces{Namespaces: make([]controlapi.NamespaceInfo, 0, len(entries))}
	for _, e := range entries {
		page.Namespaces = append(page.Namespaces, controlapi.NamespaceInfo{Namespace: e.Namespace, Revision: e.Revision,
			CommittedAt: e.CommittedAt, Actor: e.Actor, OnBehalfOf: e.OnBehalfOf, Reason: e.Reason, Kind: e.Kind,
			LiveClients: live[e.Namespace]})
	}
	if more && len(entries) > 0 {
		page.Next = entries[len(entries)-1].Namespace
	}
	return page, nil
}

// liveClients counts each namespace's live clients as Status counts them:
// the one place the list of namespaces learns it.
func (h *Handler) liveClients(ctx context.Context) (map[string]int, error) {
	clients, _, err := h.fleetClients(ctx, "")
	if err != nil {
		return nil, err
	}
	return presence.LiveByNamespace(clients), nil
}
