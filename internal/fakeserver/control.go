package fakeserver

import (
	"errors"
	"net/http"
	"slices"
	"time"

	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/authlimit"
	"github.com/holdfast-dev/holdfast/internal/console"
	"github.com/holdfast-dev/holdfast/internal/controlplane"
	"github.com/holdfast-dev/holdfast/internal/dataplane"
	"github.com/holdfast-dev/holdfast/internal/presence"
	"github.com/holdfast-dev/holdfast/transport"
)

// maxControlBytes limits a faults body.
const maxControlBytes = 64 << 10

// controlRoutes is the control API (package controlplane over the
// server's store, controlstore.go) with the server's own faults route,
// and the console at /console/ over it,
// which the data plane mounts beside itself (dataplane.WithRoutes) and
// authenticates (WithTokens).
func (s *Server) controlRoutes() ([]dataplane.Route, error) {
	cfg := controlplane.Config{
		Store:           controlStore{s},
		Lints:           &s.lints,
		Changes:         changeStore{s},
		MaxPublishBytes: s.opts.maxPublishBytes,
		StoreID:         s.StoreID,
		MapError:        mapError,
		Logger:          s.log,
		Extra:           []controlplane.Extra{{Pattern: "POST /control/faults", Serve: s.handleFaults}},
	}
	if s.opts.tokens != nil {
		cfg.Authenticator = s.opts.tokens
	}
	h, err := controlplane.New(cfg)
	if err != nil {
		return nil, err
	}
	// Mounted for every method the API has: the handler answers 404 and
	// 405 as holdfast server does.
	var routes []dataplane.Route
	for _, m := range []string{"GET", "POST", "PUT", "DELETE"} {
		routes = append(routes, dataplane.Route{Method: m, Path: "/control/", Handler: h.ServeHTTP})
	}
	// The console, a client of the same handler; sessions in memory.
	ccfg := console.Config{API: h, Logger: s.log}
	if s.opts.tokens != nil {
		ccfg.Authenticator, ccfg.AuthLimit = s.opts.tokens, authlimit.New(authlimit.Config{})
	}
	con, err := console.New(ccfg)
	if err != nil {
		return nil, err
	}
	for _, m := range []string{"GET", "POST"} {
		routes = append(routes, dataplane.Route{Method: m, Path: "/console/", Handler: con.ServeHTTP})
	}
	return routes, nil
}

// mapError maps the reference server's own errors to their replies.
func mapError(err error) (int, transport.ErrorBody, bool) {
	switch {
	case errors.Is(err, ErrRolloutEnded), errors.Is(err, errStoreChanged):
		return http.StatusConflict, transport.ErrorBody{Error: transport.CodeConflict, Message: err.Error()}, true
	case errors.Is(err, ErrUnknownRollout), errors.Is(err, ErrNoRevision):
		return http.StatusNotFound, transport.ErrorBody{Error: transport.CodeNotFound, Message: err.Error()}, true
	}
	return 0, transport.ErrorBody{}, false
}

// NamespaceStatus is the reply of GET /control/namespaces/{ns}/status: the
// namespace's revision and how many clients reported it.
type NamespaceStatus = controlapi.NamespaceStatus

// Status returns namespace ns's status: its counts of clients are of the
// live ones (presence), the stale ones counted apart.
func (s *Server) Status(ns string) (NamespaceStatus, error) {
	if err := transport.ValidateNamespace(ns); err != nil {
		return NamespaceStatus{}, err
	}
	rev, ok := s.store.NsRevision(ns)
	if !ok {
		return NamespaceStatus{}, ErrUnknownNamespace
	}
	id, head, compact := s.store.Info()
	st := NamespaceStatus{Namespace: ns, StoreID: id, Revision: rev, Head: head, CompactRevision: compact, Servers: 1}
	clients := s.Clients()
	presence.Count(&st, slices.DeleteFunc(clients, func(c ClientState) bool { return c.Namespace != ns }))
	st.Streams = s.dp.StreamsOf(ns)
	return st, nil
}

func (s *Server) handleFaults(w http.ResponseWriter, r *http.Request) error {
	var body controlapi.FaultsRequest
	if err := controlplane.ReadJSON(w, r, maxControlBytes, &body, false); err != nil {
		return err
	}
	// Check everything before changing anything.
	var retryAfter, latency time.Duration
	var err error
	if f := body.Fail; f != nil {
		if f.Count < 0 || f.Count > 0 && (f.Status < 400 || f.Status > 599) {
			return errors.Join(ErrInvalid, errors.New("fail: want count >= 0 and a status in 400..599"))
		}
		if f.RetryAfter != "" {
			if retryAfter, err = dataplane.ParseDuration(f.RetryAfter); err != nil {
				return err
			}
		}
	}
	if body.Latency != nil {
		if latency, err = dataplane.ParseDuration(*body.Latency); err != nil {
			return err
		}
	}
	if body.RestoreTo != nil && body.ResetStore {
		return errors.Join(ErrInvalid, errors.New("restore_to and reset_store exclude each other"))
	}
	// The one change that can still fail (a revision outside the history)
	// goes first.
	if body.RestoreTo != nil {
		if err := s.RestoreTo(*body.RestoreTo); err != nil {
			return err
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
	dataplane.WriteJSON(w, http.StatusOK, controlapi.FaultsReply{StoreID: s.StoreID()})
	return nil
}
