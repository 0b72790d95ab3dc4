package fakeserver

import (
	"context"
	"fmt"
	"net/http"
	"slices"

	"github.com/holdfast-dev/holdfast/access"
	"github.com/holdfast-dev/holdfast/internal/dataplane"
)

// Access control (docs/PROTOCOL.md, "Access control"): with WithTokens
// every request is authenticated once, on its way into the mux (the data
// plane's); the control API then needs a token with control scope over
// the namespace of the path (controlGate), and the data plane one with
// data scope over each namespace it reads (package dataplane).

// WithTokens makes the server require a token of t on the data plane and
// the control API (see package access for the scopes). Without it (and
// without WithBearerToken) both are open to anyone who can reach them, and
// Start says so in a warning. It excludes WithBearerToken.
func WithTokens(t *access.Tokens) Option { return optionFunc(func(o *options) { o.tokens = t }) }

// identityFrom returns the name of the identity a request authenticated
// as (WithTokens), for the records of what it changed.
func identityFrom(ctx context.Context) (name string, ok bool) {
	id, ok := access.FromContext(ctx)
	return id.Name, ok
}

// guard is what every control route's handler is wrapped in: with
// WithTokens, the control scope (the data plane authenticates).
func (s *Server) guard(path string, h http.HandlerFunc) http.HandlerFunc {
	if s.opts.tokens == nil {
		return h
	}
	return s.controlGate(path, h)
}

// controlGate refuses a control request whose token may not do it: a
// namespace's endpoint needs control of that namespace; a store-wide one
// (compact, faults) control of every namespace, the pattern "*"; GET
// /control/clients any control scope (it lists only the namespaces the
// token controls).
func (s *Server) controlGate(path string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, ok := access.FromContext(r.Context())
		var err error
		switch ns := r.PathValue("ns"); {
		case !ok:
			w.Header().Set("WWW-Authenticate", `Bearer realm="holdfast"`)
			err = dataplane.NewAccessError(http.StatusUnauthorized, "the control API needs a bearer token with control scope")
		case !id.HasControl():
			err = dataplane.NewAccessError(http.StatusForbidden, fmt.Sprintf("token %q has no control scope", id.Name))
		case ns != "":
			if !id.MayControl(ns) {
				err = dataplane.NewAccessError(http.StatusForbidden, fmt.Sprintf("token %q may not control namespace %q", id.Name, ns))
			}
		case path == "/control/clients":
		case !id.MayControlAll():
			err = dataplane.NewAccessError(http.StatusForbidden, fmt.Sprintf("token %q may not run store-wide operations (they need the control pattern \"*\")", id.Name))
		}
		if err != nil {
			s.replyError(w, err)
			return
		}
		h(w, r)
	}
}

// controlled keeps the clients of namespaces the request's token may
// control (all without WithTokens).
func (s *Server) controlled(r *http.Request, clients []ClientState) []ClientState {
	id, ok := access.FromContext(r.Context())
	if s.opts.tokens == nil || ok && id.MayControlAll() {
		return clients
	}
	return slices.DeleteFunc(clients, func(c ClientState) bool { return !id.MayControl(c.Namespace) })
}

// logAccess says at start whether access is controlled.
func (s *Server) logAccess() {
	switch {
	case s.opts.tokens != nil:
		s.log.Info("fakeserver: access control on", "tokens", s.opts.tokens.Names())
	case s.opts.token != "":
		s.log.Warn("fakeserver: no tokens configured: the data plane takes one bearer token, and the control API is open to anyone who can reach it")
	default:
		s.log.Warn("fakeserver: no tokens configured: the data plane and the control API are open to anyone who can reach them")
	}
}
