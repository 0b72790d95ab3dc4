package control

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/holdfast-dev/holdfast/access"
	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/rollout/controller"
	"github.com/holdfast-dev/holdfast/transport"
	"github.com/holdfast-dev/holdfast/transport/etcd"
)

func (h *Handler) status(w http.ResponseWriter, r *http.Request) error {
	ns, err := pathNamespace(r)
	if err != nil {
		return err
	}
	snap, err := h.cfg.Source.Snapshot(r.Context(), transport.SnapshotRequest{Namespace: ns})
	if err != nil {
		return err
	}
	st := controlapi.NamespaceStatus{Namespace: ns, StoreID: snap.StoreID, Revision: snap.Revision, Head: snap.Cursor, Streams: h.cfg.Streams(ns)}
	if _, st.CompactRevision, err = Points(r.Context(), h.cli); err != nil {
		return err
	}
	clients, servers, err := h.fleetClients(r.Context(), ns)
	if err != nil {
		return err
	}
	st.Servers = 1 + len(servers)
	for _, c := range clients {
		st.Clients++
		switch {
		case c.AckedRevision >= snap.Revision:
			st.Acked++
		case c.NackedRevision >= snap.Revision:
			st.Nacked++
			st.Behind++
		default:
			st.Behind++
		}
	}
	writeJSON(w, http.StatusOK, st)
	return nil
}

func (h *Handler) compact(w http.ResponseWriter, r *http.Request) error {
	var body controlapi.CompactRequest
	if err := readJSON(w, r, maxControlBytes, &body, true); err != nil {
		return err
	}
	if body.Revision < 0 {
		return badRequest("revision must not be negative")
	}
	k, err := Compact(r.Context(), h.cli, body.Revision)
	if err != nil {
		return err
	}
	h.log.Info("control: compacted", "revision", k)
	writeJSON(w, http.StatusOK, controlapi.CompactReply{CompactRevision: k})
	return nil
}

func (h *Handler) clients(w http.ResponseWriter, r *http.Request) error {
	resp, err := h.cli.Get(r.Context(), etcd.StoreIDKey, clientv3.WithKeysOnly())
	if err != nil {
		return fmt.Errorf("control: head: %w", err)
	}
	clients, servers, err := h.fleetClients(r.Context(), "")
	if err != nil {
		return err
	}
	if id, ok := access.FromContext(r.Context()); ok && !id.MayControlAll() {
		// Only the namespaces the token controls.
		clients = slices.DeleteFunc(clients, func(c controlapi.ClientState) bool { return !id.MayControl(c.Namespace) })
		servers = slices.DeleteFunc(servers, func(s controlapi.ServerReports) bool { return !id.MayControl(s.Namespace) })
	}
	writeJSON(w, http.StatusOK, controlapi.Clients{Head: resp.Header.Revision, Clients: clients, Server: h.cfg.ServerID, Servers: servers})
	return nil
}

// fleetClients returns the clients' reports on ns (every namespace: "")
// across the fleet: this server's ack table merged with the other
// servers' summaries in the store (docs/SERVER.md, "Rollouts"), each
// client's newest report, with the namespace's revision this server
// serves; and the summaries merged.
func (h *Handler) fleetClients(ctx context.Context, ns string) ([]controlapi.ClientState, []controlapi.ServerReports, error) {
	type entry struct {
		r      controller.Report
		server string
	}
	merged := make(map[ackKey]*entry)
	local := h.cfg.Acks.reportsByNS()
	for n, reps := range local {
		if ns != "" && n != ns {
			continue
		}
		for _, rep := range reps {
			merged[ackKey{rep.ClientID, n}] = &entry{r: rep, server: h.cfg.ServerID}
		}
	}
	remote, err := h.reports.summaries(ctx)
	if err != nil {
		return nil, nil, err
	}
	var servers []controlapi.ServerReports
	for _, s := range remote {
		if ns != "" && s.ns != ns {
			continue
		}
		servers = append(servers, controlapi.ServerReports{Server: s.Server, Namespace: s.ns, At: s.At, Clients: len(s.Reports), Truncated: s.Truncated})
		for _, rep := range s.Reports {
			k := ackKey{rep.ClientID, s.ns}
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
			Lag: max(0, head-e.r.Acked), UpdatedAt: e.r.Seen, Server: e.server})
	}
	slices.SortFunc(out, func(x, y controlapi.ClientState) int {
		return cmp.Or(strings.Compare(x.ClientID, y.ClientID), strings.Compare(x.Namespace, y.Namespace))
	})
	slices.SortFunc(servers, func(x, y controlapi.ServerReports) int {
		return cmp.Or(strings.Compare(x.Namespace, y.Namespace), strings.Compare(x.Server, y.Server))
	})
	return out, servers, nil
}
