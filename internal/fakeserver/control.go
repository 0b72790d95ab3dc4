package fakeserver

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/dataplane"
	"github.com/holdfast-dev/holdfast/internal/rollout/controller"
	"github.com/holdfast-dev/holdfast/transport"
)

// controlRoutes is the control API, which the data plane mounts beside
// itself (dataplane.WithRoutes), each route behind its scope (guard).
func (s *Server) controlRoutes() []dataplane.Route {
	routes := []dataplane.Route{
		{Method: "POST", Path: "/control/namespaces/{ns}/publish", Handler: s.handlePublish},
		{Method: "POST", Path: "/control/namespaces/{ns}/rollback", Handler: s.handleRollback},
		{Method: "PUT", Path: "/control/namespaces/{ns}/schema", Handler: s.handleSchema},
		{Method: "GET", Path: "/control/namespaces/{ns}/status", Handler: s.handleStatus},
		{Method: "GET", Path: "/control/namespaces/{ns}/history", Handler: s.handleHistory},
		{Method: "GET", Path: "/control/namespaces/{ns}/values", Handler: s.handleValues},
		{Method: "GET", Path: "/control/namespaces/{ns}/diff", Handler: s.handleDiff},
		{Method: "POST", Path: "/control/namespaces/{ns}/rollouts", Handler: s.handleStartRollout},
		{Method: "GET", Path: "/control/namespaces/{ns}/rollouts", Handler: s.handleRollouts},
		{Method: "GET", Path: "/control/namespaces/{ns}/rollouts/{id}", Handler: s.handleRollout},
		{Method: "POST", Path: "/control/namespaces/{ns}/rollouts/{id}/abort", Handler: s.handleRolloutAction},
		{Method: "POST", Path: "/control/namespaces/{ns}/rollouts/{id}/promote", Handler: s.handleRolloutAction},
		{Method: "POST", Path: "/control/compact", Handler: s.handleCompact},
		{Method: "GET", Path: "/control/clients", Handler: s.handleClients},
		{Method: "POST", Path: "/control/faults", Handler: s.handleFaults},
	}
	for i := range routes {
		routes[i].Handler = s.guard(routes[i].Path, routes[i].Handler)
	}
	return routes
}

// readBody reads a request body of at most limit bytes, which must be
// UTF-8 (JSON text is): a value of invalid UTF-8 would be stored as it
// came and served as JSON that is not.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err == nil && !utf8.Valid(data) {
		return nil, fmt.Errorf("%w: the body is not valid UTF-8 (JSON text must be)", ErrInvalid)
	}
	return data, err
}

// pathNamespace reads and checks the {ns} path segment.
func pathNamespace(r *http.Request) (string, error) {
	ns := r.PathValue("ns")
	return ns, transport.ValidateNamespace(ns)
}

// namespaceBody reads a control request's {ns} and its body of at most
// limit bytes, or answers the request with what is wrong (ok false).
func (s *Server) namespaceBody(w http.ResponseWriter, r *http.Request, limit int64) (ns string, data []byte, ok bool) {
	ns, err := pathNamespace(r)
	if err == nil {
		data, err = readBody(w, r, limit)
	}
	if err != nil {
		s.replyError(w, err)
		return "", nil, false
	}
	return ns, data, true
}

// revisionReply is the reply of publish and rollback.
type revisionReply struct {
	Revision int64 `json:"revision"`
}

func (s *Server) handlePublish(w http.ResponseWriter, r *http.Request) {
	ns, data, ok := s.namespaceBody(w, r, s.opts.maxPublishBytes)
	if !ok {
		return
	}
	puts, deletes, opts, err := parsePublish(ns, data)
	if err != nil {
		s.replyError(w, err)
		return
	}
	opts.Actor, opts.OnBehalfOf = actors(r, opts.Actor)
	rev, err := s.commit(ns, puts, deletes, opts)
	if err != nil {
		s.replyError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, revisionReply{Revision: rev})
}

func (s *Server) handleRollback(w http.ResponseWriter, r *http.Request) {
	ns, data, ok := s.namespaceBody(w, r, maxControlBytes)
	if !ok {
		return
	}
	var body struct {
		To     *int64 `json:"to_revision"`
		Actor  string `json:"actor"`
		Reason string `json:"reason"`
	}
	if err := decodeJSON(data, &body, true); err != nil {
		s.replyError(w, err)
		return
	}
	if body.To == nil {
		s.replyError(w, errors.Join(ErrInvalid, errors.New("to_revision is required")))
		return
	}
	if err := checkMeta(body.Actor, body.Reason); err != nil {
		s.replyError(w, err)
		return
	}
	actor, onBehalfOf := actors(r, body.Actor)
	rev, err := s.rollback(ns, *body.To, commitMeta{Actor: actor, OnBehalfOf: onBehalfOf, Reason: body.Reason})
	if err != nil {
		s.replyError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, revisionReply{Revision: rev})
}

func (s *Server) handleSchema(w http.ResponseWriter, r *http.Request) {
	ns, data, ok := s.namespaceBody(w, r, s.opts.maxPublishBytes)
	if !ok {
		return
	}
	if err := s.SetSchema(ns, data); err != nil {
		s.replyError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// compactReply is the reply of POST /control/compact.
type compactReply struct {
	CompactRevision int64 `json:"compact_revision"`
}

func (s *Server) handleCompact(w http.ResponseWriter, r *http.Request) {
	data, err := readBody(w, r, maxControlBytes)
	if err != nil {
		s.replyError(w, err)
		return
	}
	var body struct {
		Revision int64 `json:"revision"`
	}
	if len(data) > 0 { // an empty body compacts to the head
		if err := decodeJSON(data, &body, true); err != nil {
			s.replyError(w, err)
			return
		}
	}
	k, err := s.Compact(body.Revision)
	if err != nil {
		s.replyError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, compactReply{CompactRevision: k})
}

func (s *Server) handleClients(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, struct {
		Head    int64         `json:"head"`
		Clients []ClientState `json:"clients"`
	}{s.Head(), s.controlled(r, s.Clients())})
}

// NamespaceStatus is the reply of GET /control/namespaces/{ns}/status: the
// namespace's revision and how many clients reported it.
type NamespaceStatus = controlapi.NamespaceStatus

// Status returns namespace ns's status.
func (s *Server) Status(ns string) (NamespaceStatus, error) {
	if err := transport.ValidateNamespace(ns); err != nil {
		return NamespaceStatus{}, err
	}
	rev, ok := s.store.NsRevision(ns)
	if !ok {
		return NamespaceStatus{}, ErrUnknownNamespace
	}
	id, head, compact := s.store.Info()
	st := NamespaceStatus{Namespace: ns, StoreID: id, Revision: rev, Head: head, CompactRevision: compact}
	for _, c := range s.Clients() {
		if c.Namespace != ns {
			continue
		}
		st.Clients++
		switch {
		case c.AckedRevision >= rev:
			st.Acked++
		case c.NackedRevision >= rev:
			st.Nacked++
			st.Behind++
		default:
			st.Behind++
		}
	}
	st.Streams = s.dp.StreamsOf(ns)
	return st, nil
}

func (s *Server) handleStatus(w http.ResponseWriter, r *http.Request) {
	st, err := s.Status(r.PathValue("ns"))
	if err != nil {
		s.replyError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// faultsBody is the body of POST /control/faults; every field is optional.
type faultsBody struct {
	Fail *struct {
		Count      int    `json:"count"`
		Status     int    `json:"status"`
		RetryAfter string `json:"retry_after"`
	} `json:"fail"`
	Latency     *string `json:"latency"`
	DropStreams bool    `json:"drop_streams"`
	Blackhole   *bool   `json:"blackhole"`
	ResetStore  bool    `json:"reset_store"`
	RestoreTo   *int64  `json:"restore_to"`
}

func (s *Server) handleFaults(w http.ResponseWriter, r *http.Request) {
	data, err := readBody(w, r, maxControlBytes)
	if err != nil {
		s.replyError(w, err)
		return
	}
	var body faultsBody
	if err := decodeJSON(data, &body, true); err != nil {
		s.replyError(w, err)
		return
	}
	// Check everything before changing anything.
	var retryAfter, latency time.Duration
	if f := body.Fail; f != nil {
		if f.Count < 0 || f.Count > 0 && (f.Status < 400 || f.Status > 599) {
			s.replyError(w, errors.Join(ErrInvalid, errors.New("fail: want count >= 0 and a status in 400..599")))
			return
		}
		if f.RetryAfter != "" {
			if retryAfter, err = parseDuration(f.RetryAfter); err != nil {
				s.replyError(w, err)
				return
			}
		}
	}
	if body.Latency != nil {
		if latency, err = parseDuration(*body.Latency); err != nil {
			s.replyError(w, err)
			return
		}
	}
	if body.RestoreTo != nil && body.ResetStore {
		s.replyError(w, errors.Join(ErrInvalid, errors.New("restore_to and reset_store exclude each other")))
		return
	}
	// The one change that can still fail (a revision outside the history)
	// goes first.
	if body.RestoreTo != nil {
		if err := s.RestoreTo(*body.RestoreTo); err != nil {
			s.replyError(w, err)
			return
		}
	}
	if f := body.Fail; f != nil {
		s.FailNext(f.Count, f.Status, retryAfter)
	}
	if body.Latency != nil {
		s.SetLatency(latency)
	}
	if body.Blackhole != nil {
		s.SetBlackhole(*body.Blackhole)
	}
	if body.DropStreams {
		s.DropStreams()
	}
	if body.ResetStore {
		s.ResetStore()
	}
	writeJSON(w, http.StatusOK, struct {
		StoreID string `json:"store_id"`
	}{s.StoreID()})
}

// startReply is the reply of POST /control/namespaces/{ns}/rollouts: the
// rollout's id and its first stage's revision.
type startReply struct {
	ID       string `json:"id"`
	Revision int64  `json:"revision"`
}

func (s *Server) handleStartRollout(w http.ResponseWriter, r *http.Request) {
	ns, data, ok := s.namespaceBody(w, r, s.opts.maxPublishBytes)
	if !ok {
		return
	}
	spec, actor, reason, err := parseRollout(data)
	if err != nil {
		s.replyError(w, err)
		return
	}
	rec, err := s.startRollout(r.Context(), ns, spec, rolloutActor(r, actor), reason)
	if err != nil {
		s.replyError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, startReply{ID: rec.ID, Revision: rec.Revisions[0]})
}

// rolloutActor is who acts on a rollout: the authenticated identity, and
// whom it acts for ("bot for alice"), as holdfast server records it.
func rolloutActor(r *http.Request, named string) string {
	actor, onBehalfOf := actors(r, named)
	if onBehalfOf == "" {
		return actor
	}
	return actor + " for " + onBehalfOf
}

func (s *Server) handleRollouts(w http.ResponseWriter, r *http.Request) {
	ns, err := pathNamespace(r)
	if err != nil {
		s.replyError(w, err)
		return
	}
	recs, err := s.rolloutRecords(r.Context(), ns)
	if err != nil {
		s.replyError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Rollouts []controller.Record `json:"rollouts"`
	}{recs})
}

func (s *Server) handleRollout(w http.ResponseWriter, r *http.Request) {
	ns, err := pathNamespace(r)
	if err != nil {
		s.replyError(w, err)
		return
	}
	rec, err := s.rolloutRecord(r.Context(), ns, r.PathValue("id"))
	if err != nil {
		s.replyError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, rec)
}

// handleRolloutAction is POST .../rollouts/{id}/abort and .../promote; a
// body, if any, names the actor and the reason.
func (s *Server) handleRolloutAction(w http.ResponseWriter, r *http.Request) {
	ns, data, ok := s.namespaceBody(w, r, maxControlBytes)
	if !ok {
		return
	}
	var body controller.ActionRequest
	if len(bytes.TrimSpace(data)) > 0 {
		if err := decodeJSON(data, &body, true); err != nil {
			s.replyError(w, err)
			return
		}
	}
	rec, err := s.endRollout(r.Context(), ns, r.PathValue("id"), strings.HasSuffix(r.URL.Path, "/promote"), rolloutActor(r, body.Actor), body.Reason)
	if err != nil {
		s.replyError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, rec)
}
