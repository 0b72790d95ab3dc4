package control

import (
	"fmt"
	"net/http"
	"slices"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/holdfast-dev/holdfast/access"
	"github.com/holdfast-dev/holdfast/controlapi"
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
	for _, c := range h.cfg.Acks.Clients(ns, func(string) int64 { return snap.Revision }) {
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
	clients := h.cfg.Acks.Clients("", func(ns string) int64 {
		rev, _ := h.cfg.Revision(ns)
		return rev
	})
	if id, ok := access.FromContext(r.Context()); ok && !id.MayControlAll() {
		// Only the namespaces the token controls.
		clients = slices.DeleteFunc(clients, func(c controlapi.ClientState) bool { return !id.MayControl(c.Namespace) })
	}
	writeJSON(w, http.StatusOK, controlapi.Clients{Head: resp.Header.Revision, Clients: clients})
	return nil
}
