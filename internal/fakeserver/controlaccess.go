package fakeserver

import (
	"github.com/holdfast-dev/holdfast/access"
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
