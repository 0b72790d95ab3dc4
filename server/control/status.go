package control

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/presence"
	"github.com/holdfast-dev/holdfast/internal/rollout/controller"
	"github.com/holdfast-dev/holdfast/server/store"
	"github.com/holdfast-dev/holdfast/transport"
	"github.com/holdfast-dev/holdfast/transport/etcd"
)

func (s etcdStore) Status(ctx context.Context, ns string) (controlapi.NamespaceStatus, error) {
	h := s.h
	snap, err := h.cfg.Source.Snapshot(ctx, transport.SnapshotRequest{Namespace: ns})
	if err != nil {
		return controlapi.NamespaceStatus{}, store.NamespaceNotFound(ns, err)
	}
	st := controlapi.NamespaceStatus{Namespace: ns, StoreID: snap.StoreID, Revision: snap.Revision, Head: snap.Cursor, Streams: h.cfg.Streams(ns)}
	if _, st.CompactRevision, err = Points(ctx, h.cli); err != nil {
		return controlapi.NamespaceStatus{}, err
	}
	clients, servers, err := h.fleetClients(ctx, ns)
	if err != nil {
		return controlapi.NamespaceStatus{}, err
	}
	st.Servers = 1 + len(servers)
	st.Propagation = h.cfg.Acks.prop.status(ns, snap.Revision)
	presence.Count(&st, clients)
	return st, nil
}

func (s etcdStore) Clients(ctx context.Context) (controlapi.Clients, error) {
	h := s.h
	resp, err := h.cli.Get(ctx, etcd.StoreIDKey, clientv3.WithKeysOnly())
	if err != nil {
		return controlapi.Clients{}, fmt.Errorf("control: head: %w", err)
	}
	clients, servers, err := h.fleetClients(ctx, "")
	if err != nil {
		return controlapi.Clients{}, err
	}
	return controlapi.Clients{Head: resp.Header.Revision, Clients: clients, Server: h.cfg.ServerID, Servers: servers,
		Dropped: h.cfg.Acks.Evicted() + h.cfg.Dropped()}, nil
}

// fleetClients returns the clients' reports on ns (every namespace: "")
// across the fleet: this server's ack table merged with the other
// servers' summaries in the store (docs/SERVER.md, "Rollouts"), each
// client's newest report, with the namespace's revision this server
// serves and the client's presence across the servers (gone clients
// past presence.Forget left out); and the summaries merged.
func (h *Handler) fleetClients(ctx context.Context, ns string) ([]controlapi.ClientState, []controlapi.ServerReports, error) {
	type clientKey struct{ client, ns string }
	type entry struct {
		r      controller.Report
		server string
	}
	merged := make(map[clientKey]*entry)
	local := h.cfg.Acks.ByNamespace()
	for n, reps := range local {
		if ns != "" && n != ns {
			continue
		}
		for _, rep := range reps {
			merged[clientKey{rep.ClientID, n}] = &entry{r: rep, server: h.cfg.ServerID}
		}
	}
	remote, err := h.reports.summaries(ctx)
	if err != nil {
		return nil, nil, err
	}
	var servers []controlapi.ServerReports
	at := make(map[[2]string]int) // server, namespace → its place in servers (a summary's parts are one)
	for _, s := range remote {
		if ns != "" && s.ns != ns {
			continue
		}
		if i, ok := at[[2]string{s.Server, s.ns}]; ok {
			servers[i].Clients += len(s.Reports)
			if s.At.After(servers[i].At) {
				servers[i].At = s.At
			}
		} else {
			at[[2]string{s.Server, s.ns}] = len(servers)
			servers = append(servers, controlapi.ServerReports{Server: s.Server, Namespace: s.ns, At: s.At, Clients: len(s.Reports), Truncated: s.Truncated})
		}
		for _, rep := range s.Reports {
			k := clientKey{rep.ClientID, s.ns}
			e := merged[k]
			if e == nil {
				merged[k] = &entry{r: rep, server: s.Server}
				continue
			}
			if rep.Seen.After(e.r.Seen) {
				e.server = s.Server
			}
			e.r.Merge(rep)
		}
	}
	out := make([]controlapi.ClientState, 0, len(merged))
	for k, e := range merged {
		head, _ := h.cfg.Revision(k.ns)
		out = append(out, controlapi.ClientState{ClientID: k.client, Namespace: k.ns, AckedRevision: e.r.Acked,
			NackedRevision: e.r.Nacked, NackError: e.r.NackError, HeadRevision: head, Behind: e.r.Acked < head,
			Lag: max(0, head-e.r.Acked), UpdatedAt: e.r.Seen, Server: e.server, SDKVersion: e.r.SDKVersion})
	}
	present, err := h.reports.fleetPresence(ctx)
	if err != nil {
		return nil, nil, err
	}
	out = presence.Annotate(out, present, time.Now())
	slices.SortFunc(out, func(x, y controlapi.ClientState) int {
		return cmp.Or(strings.Compare(x.ClientID, y.ClientID), strings.Compare(x.Namespace, y.Namespace))
	})
	slices.SortFunc(servers, func(x, y controlapi.ServerReports) int {
		return cmp.Or(strings.Compare(x.Namespace, y.Namespace), strings.Compare(x.Server, y.Server))
	})
	return out, servers, nil
}
