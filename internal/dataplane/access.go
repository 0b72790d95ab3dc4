package dataplane

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/holdfast-dev/holdfast/access"
	"github.com/holdfast-dev/holdfast/internal/authlimit"
	"github.com/holdfast-dev/holdfast/internal/wire"
	"github.com/holdfast-dev/holdfast/transport"
)

// Access control (docs/PROTOCOL.md, "Access control"): with WithTokens
// every request is authenticated once, on its way into the mux
// (authenticate); the data plane then needs a token with data scope over
// each namespace it reads (mayRead), checked before the namespace is
// looked at, so that a refusal says nothing of it. Other routes
// (WithRoutes) check their own scope.

// WithTokens makes the server require a token of t on the data plane
// (see package access for the scopes), and authenticates the requests of
// other routes. Without it (and without WithBearerToken) the data plane
// is open to anyone who can reach it. It excludes WithBearerToken.
func WithTokens(t *access.Tokens) Option { return optionFunc(func(o *options) { o.tokens = t }) }

// accessError refuses a request for its credentials: 401 without a valid
// token, 403 outside its scope. Its message names the token, never its
// secret.
type accessError struct {
	status int
	msg    string
}

func (e *accessError) Error() string { return e.msg }

func (e *accessError) code() string {
	if e.status == http.StatusUnauthorized {
		return transport.CodeUnauthorized
	}
	return transport.CodeForbidden
}

// authenticate puts the identity a request proves (its bearer token, else its
// client certificate: access.Tokens.AuthenticateRequest), if WithTokens knows
// it, on the request's context. A peer that sent too many tokens that were
// not accepted (WithAuthFailureLimit) is refused first, with 429, save a
// token accepted from that peer lately.
func (s *Server) authenticate(h http.HandlerFunc) http.HandlerFunc {
	if s.opts.tokens == nil {
		return h
	}
	return func(w http.ResponseWriter, r *http.Request) {
		id, ok, wait, refused := s.opts.authLimit.Authenticate(r, s.opts.tokens.AuthenticateRequest)
		switch {
		case refused:
			// Refused before its token is looked at: a peer guessing
			// tokens learns nothing more until it may try again.
			writeError(w, http.StatusTooManyRequests, transport.ErrorBody{Error: transport.CodeUnavailable, Message: authlimit.Refusal(w, wait)})
			return
		case ok:
			r = r.WithContext(access.NewContext(r.Context(), id))
		}
		h(w, r)
	}
}

// admitted reports whether a data-plane request's credentials let it in:
// any token of WithTokens', WithBearerToken's, or none needed.
func (s *Server) admitted(r *http.Request) bool {
	switch {
	case s.opts.tokens != nil:
		_, ok := access.FromContext(r.Context())
		return ok
	case s.opts.token != "":
		// Digests: equal lengths, so the comparison does not tell the
		// token's length either.
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		gd, wd := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(s.opts.token))
		return subtle.ConstantTimeCompare(gd[:], wd[:]) == 1 && ok
	}
	return true
}

// mayRead refuses (403) a data-plane read or ack of ns by a token without
// data scope over it; nil when allowed, or without WithTokens.
func (s *Server) mayRead(r *http.Request, ns string) error {
	if s.opts.tokens == nil {
		return nil
	}
	id, _ := access.FromContext(r.Context())
	if id.MayRead(ns) {
		return nil
	}
	return &accessError{http.StatusForbidden, fmt.Sprintf("token %q may not read namespace %q", id.Name, ns)}
}

// splitForbidden takes the namespaces a stream's token may not read out
// of reqs: each is an ended event of its own, the others stream on.
func (s *Server) splitForbidden(r *http.Request, reqs []SinceReq) ([]SinceReq, []wire.NamespaceEndedBody) {
	if s.opts.tokens == nil {
		return reqs, nil
	}
	var ended []wire.NamespaceEndedBody
	kept := reqs[:0:0]
	for _, q := range reqs {
		if err := s.mayRead(r, q.Name); err != nil {
			ended = append(ended, wire.NamespaceEndedBody{Namespace: q.Name, Code: transport.CodeForbidden, Message: err.Error()})
			continue
		}
		kept = append(kept, q)
	}
	return kept, ended
}

// readableAcks checks the namespaces of acks against the request's data
// scope: a single ack outside it is refused (403); a batch's acks outside
// it are dropped, the others kept (one namespace's trouble does not refuse
// the others), in place.
func (s *Server) readableAcks(r *http.Request, acks []transport.Ack, batch bool) ([]transport.Ack, error) {
	if s.opts.tokens == nil {
		return acks, nil
	}
	if !batch {
		if err := s.mayRead(r, acks[0].Namespace); err != nil {
			return nil, err
		}
		return acks, nil
	}
	return slices.DeleteFunc(acks, func(a transport.Ack) bool { return s.mayRead(r, a.Namespace) != nil }), nil
}
