package controlplane

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/holdfast-dev/holdfast/access"
	"github.com/holdfast-dev/holdfast/internal/authlimit"
	"github.com/holdfast-dev/holdfast/internal/dataplane"
	"github.com/holdfast-dev/holdfast/internal/rollout/controller"
	"github.com/holdfast-dev/holdfast/schema"
	"github.com/holdfast-dev/holdfast/transport"
)

// Defaults of Config.
const (
	DefaultMaxPublishBytes = 640 << 10
	// DefaultTimeout bounds a request's work with the store: a store that
	// does not answer gets a 503, not a request that hangs.
	DefaultTimeout = 10 * time.Second
	// maxControlBytes bounds the bodies other than a publish's, a schema's
	// and a rollout's.
	maxControlBytes = 64 << 10
	// maxTokenSyncBytes bounds a relay's sync body (its names used).
	maxTokenSyncBytes = 2 << 20
)

// Authenticator tells who sends a request (*access.Tokens is one).
type Authenticator interface {
	AuthenticateRequest(r *http.Request) (access.Identity, bool)
}

// Config configures a Handler.
type Config struct {
	Store Store
	// Tokens, when set, serves /control/tokens; without, those routes
	// answer 404.
	Tokens TokenStore
	// Lints, when set, serves /control/lints and runs the lints it keeps;
	// without, those routes answer 404.
	Lints LintStore
	// Changes, when set, serves /control/changes and /control/policies
	// (the change workflow) and enforces the policies; without, those
	// routes answer 404.
	Changes ChangeStore
	// Authenticator, when set, makes every request need an identity with
	// the scope of its route (a namespace's control, the pattern "*" for
	// a store-wide route, any control scope for GET /control/clients and
	// GET /control/namespaces (each showing the namespaces it covers), the
	// admin scope for token management, the relay scope for the relays'
	// sync). It puts the identity on the request's context unless one is
	// there already (a front end authenticated it).
	Authenticator Authenticator
	// AuthLimit, with an Authenticator, slows down a peer that keeps
	// sending tokens that are not accepted: past its failures its
	// requests get 429 with Retry-After before their token is looked at,
	// save one it had accepted from that peer lately (share the data plane's, to count a peer's failures on both). Nil:
	// none.
	AuthLimit *authlimit.Limiter
	// MaxPublishBytes bounds a publish's, a schema's and a rollout's body
	// (default DefaultMaxPublishBytes).
	MaxPublishBytes int64
	// Timeout bounds each request's work (default DefaultTimeout).
	Timeout time.Duration
	// StoreID, when set, is put in every error body.
	StoreID func() string
	// MapError maps the store's own errors (ok false: not one of them)
	// before the handler's mapping.
	MapError func(err error) (status int, body transport.ErrorBody, ok bool)
	// Extra are a server's own routes under /control/, beside the API's
	// (the reference server's faults): store-wide, behind the same gate,
	// their errors replied as the API's.
	Extra  []Extra
	Logger *slog.Logger
}

// route is one route of the control API.
type route struct {
	pattern string // "METHOD /path"
	handler http.HandlerFunc
}

// Extra is a route a server adds beside the API's: its pattern, as
// http.ServeMux takes it, with its method (the reference server's faults).
type Extra struct {
	Pattern string
	Serve   func(http.ResponseWriter, *http.Request) error
}

// Handler serves the control API.
type Handler struct {
	cfg    Config
	log    *slog.Logger
	routes []route
	mux    *http.ServeMux
	// lintCache keeps the lints compiled (lintsFor).
	lintCache lintCache
}

// New returns the control API over cfg.Store.
func New(cfg Config) (*Handler, error) {
	if cfg.Store == nil {
		return nil, errors.New("controlplane: nil store")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxPublishBytes <= 0 {
		cfg.MaxPublishBytes = DefaultMaxPublishBytes
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	h := &Handler{cfg: cfg, log: cfg.Logger}
	for _, rt := range []struct {
		pattern string
		fn      func(http.ResponseWriter, *http.Request) error
	}{
		{"POST /control/namespaces/{ns}/publish", h.publish},
		{"POST /control/namespaces/{ns}/rollback", h.rollback},
		{"PUT /control/namespaces/{ns}/schema", h.putSchema},
		{"GET /control/namespaces/{ns}/schema", h.getSchema},
		{"DELETE /control/namespaces/{ns}/schema", h.deleteSchema},
		{"GET /control/namespaces/{ns}/status", h.status},
		{"GET /control/namespaces/{ns}/policies", h.namespacePolicies},
		{"GET /control/namespaces/{ns}/history", h.history},
		{"GET /control/namespaces/{ns}/values", h.values},
		{"GET /control/namespaces/{ns}/diff", h.diff},
		{"POST /control/namespaces/{ns}/rollouts", h.startRollout},
		{"GET /control/namespaces/{ns}/rollouts", h.listRollouts},
		{"GET /control/namespaces/{ns}/rollouts/{id}", h.getRollout},
		{"POST /control/namespaces/{ns}/rollouts/{id}/abort", h.rolloutAction},
		{"POST /control/namespaces/{ns}/rollouts/{id}/promote", h.rolloutAction},
		{"POST /control/compact", h.compact},
		{"GET /control/clients", h.clients},
		{"GET /control/namespaces", h.namespaces},
		{"POST /control/tokens", h.createToken},
		{"GET /control/tokens", h.listTokens},
		{"GET /control/tokens/{name}", h.getToken},
		{"DELETE /control/tokens/{name}", h.revokeToken},
		{"POST /control/tokens/sync", h.syncTokens},
		{"PUT /control/lints/{name}", h.putLint},
		{"GET /control/lints/{name}", h.getLint},
		{"DELETE /control/lints/{name}", h.deleteLint},
		{"GET /control/lints", h.listLints},
		{"POST /control/lints/{name}/test", h.testLint},
		{"POST /control/changes", h.proposeChange},
		{"GET /control/changes", h.listChanges},
		{"GET /control/changes/{id}", h.getChange},
		{"POST /control/changes/{id}/approve", h.changeAction},
		{"POST /control/changes/{id}/reject", h.changeAction},
		{"POST /control/changes/{id}/withdraw", h.changeAction},
		{"POST /control/changes/{id}/rebase", h.changeAction},
		{"POST /control/changes/{id}/publish", h.publishChange},
		{"PUT /control/policies/{name}", h.putPolicy},
		{"GET /control/policies/{name}", h.getPolicy},
		{"DELETE /control/policies/{name}", h.deletePolicy},
	} {
		h.routes = append(h.routes, route{rt.pattern, h.serve(h.gate(rt.pattern, rt.fn))})
	}
	for _, rt := range cfg.Extra {
		h.routes = append(h.routes, route{rt.Pattern, h.serve(h.gate(rt.Pattern, rt.Serve))})
	}
	h.mux = h.newMux()
	return h, nil
}

// ServeHTTP serves /control/... requests: a known path asked with another
// method gets 405, an unknown one 404.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

func (h *Handler) newMux() *http.ServeMux {
	mux := http.NewServeMux()
	var methods []string
	for _, rt := range h.routes {
		mux.HandleFunc(rt.pattern, rt.handler)
		if method, _, _ := strings.Cut(rt.pattern, " "); !slices.Contains(methods, method) {
			methods = append(methods, method)
		}
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		// A path a route has with another method: 405, with them.
		var allow []string
		for _, m := range methods {
			probe := *r
			probe.Method = m
			if _, pattern := mux.Handler(&probe); pattern != "/" {
				allow = append(allow, m)
			}
		}
		if len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			h.writeError(w, r, &httpError{status: http.StatusMethodNotAllowed, code: transport.CodeBadRequest, msg: "method not allowed; use " + strings.Join(allow, ", ")})
			return
		}
		h.writeError(w, r, &httpError{status: http.StatusNotFound, code: transport.CodeNotFound, msg: "no such endpoint: " + r.URL.Path})
	})
	return mux
}

// serve adapts a handler that returns an error: the one place that
// writes an error reply; it bounds the request's work.
func (h *Handler) serve(fn func(http.ResponseWriter, *http.Request) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), h.cfg.Timeout)
		defer cancel()
		if err := fn(w, r.WithContext(ctx)); err != nil {
			h.writeError(w, r, err)
		}
	}
}

func (h *Handler) writeError(w http.ResponseWriter, r *http.Request, err error) {
	status, body := h.errorReply(err)
	if ns := r.PathValue("ns"); ns != "" && errors.Is(err, dataplane.ErrUnknownNamespace) {
		// The data plane's words are a program's.
		body.Message = fmt.Sprintf("namespace %q not found", ns)
	}
	if status >= 500 {
		h.log.Warn("control: request failed", "method", r.Method, "path", r.URL.Path, "status", status, "err", err)
	}
	if h.cfg.StoreID != nil {
		body.StoreID = h.cfg.StoreID()
	}
	dataplane.WriteError(w, status, body)
}

// gate authenticates a request (when the handler has an Authenticator)
// and checks its identity's scope for the route of pattern.
func (h *Handler) gate(pattern string, fn func(http.ResponseWriter, *http.Request) error) func(http.ResponseWriter, *http.Request) error {
	if h.cfg.Authenticator == nil {
		return fn
	}
	method, path, _ := strings.Cut(pattern, " ")
	tokenSync := path == "/control/tokens/sync"
	// Lints: set and deleted by an admin, read by any control scope,
	// tested by one that controls the namespace (checked by the route).
	lints := strings.HasPrefix(path, "/control/lints")
	admin := !tokenSync && strings.HasPrefix(path, "/control/tokens") ||
		lints && (method == http.MethodPut || method == http.MethodDelete)
	// Policies need the admin scope; a change, control of each of its
	// namespaces (checked by its handler).
	admin = admin || strings.HasPrefix(path, "/control/policies")
	changes := strings.HasPrefix(path, "/control/changes")
	// The lists of clients and of namespaces take any control scope, and
	// show what it covers.
	storeWide := !admin && !tokenSync && !lints && !changes && !strings.Contains(path, "{ns}") && path != "/control/clients" && path != "/control/namespaces"
	return func(w http.ResponseWriter, r *http.Request) error {
		id, ok := access.FromContext(r.Context())
		if !ok {
			var err error
			if r, id, ok, err = h.authenticate(w, r); err != nil {
				return err
			}
		}
		switch ns := r.PathValue("ns"); {
		case !ok:
			w.Header().Set("WWW-Authenticate", `Bearer realm="holdfast"`)
			return &httpError{status: http.StatusUnauthorized, code: transport.CodeUnauthorized, msg: unauthenticated(r)}
		case tokenSync && !id.IsRelay():
			return forbidden("token %q has no relay scope", id.Name)
		case admin && !id.IsAdmin():
			return forbidden("token %q has no admin scope (managing tokens, lints and policies needs it)", id.Name)
		case tokenSync || admin:
		case !id.HasControl():
			return forbidden("token %q has no control scope", id.Name)
		case ns != "" && !id.MayControl(ns):
			return forbidden("token %q may not control namespace %q", id.Name, ns)
		case storeWide && !id.MayControlAll():
			return forbidden("token %q may not control the whole store (it needs the pattern \"*\")", id.Name)
		}
		return fn(w, r)
	}
}

// authenticate authenticates r, within the failure limit of its peer
// (Config.AuthLimit): a peer past it is refused (429) before its token is
// looked at, save a token accepted from that peer lately. It returns r
// with the identity on its context.
func (h *Handler) authenticate(w http.ResponseWriter, r *http.Request) (*http.Request, access.Identity, bool, error) {
	id, ok, wait, refused := h.cfg.AuthLimit.Authenticate(r, h.cfg.Authenticator.AuthenticateRequest)
	switch {
	case refused:
		return r, id, false, &httpError{status: http.StatusTooManyRequests, code: transport.CodeUnavailable, msg: authlimit.Refusal(w, wait)}
	case ok:
		r = r.WithContext(access.NewContext(r.Context(), id))
	}
	return r, id, ok, nil
}

// unauthenticated says why r has no identity: a token or certificate it
// sent was not accepted, or it sent none.
func unauthenticated(r *http.Request) string {
	switch {
	case r.Header.Get("Authorization") != "":
		return "the bearer token was not accepted (unknown, revoked, expired or mistyped)"
	case r.TLS != nil && len(r.TLS.PeerCertificates) > 0:
		return "the client certificate was not accepted: the store has no identity of its subject"
	}
	return "the control API needs a bearer token"
}

func forbidden(format string, args ...any) error {
	return &httpError{status: http.StatusForbidden, code: transport.CodeForbidden, msg: fmt.Sprintf(format, args...)}
}

// actors returns the actor a write records and whom it acted for: the
// authenticated identity, and the actor the request names (when it is
// not the identity's own name). On an open store there is no identity to
// record: the actor is the one the request names, unverified.
func actors(r *http.Request, named string) (actor, onBehalfOf string) {
	id, ok := access.FromContext(r.Context())
	switch {
	case !ok || id.Name == access.Anonymous:
		return named, ""
	case named == id.Name:
		return id.Name, ""
	}
	return id.Name, named
}

// httpError is an error with its reply.
type httpError struct {
	status  int
	code    string
	msg     string
	details []string
}

func (e *httpError) Error() string { return e.msg }

func badRequest(format string, args ...any) error {
	return &httpError{status: http.StatusBadRequest, code: transport.CodeBadRequest, msg: fmt.Sprintf(format, args...)}
}

// errorReply maps an error to its status and body: the store's own
// (Config.MapError), then the vocabulary of this package, of the
// rollouts, the schemas and package transport. A caller's mistake is
// never a 500.
func (h *Handler) errorReply(err error) (int, transport.ErrorBody) {
	var he *httpError
	if errors.As(err, &he) {
		return he.status, transport.ErrorBody{Error: he.code, Message: he.msg, Details: he.details}
	}
	if h.cfg.MapError != nil {
		if status, body, ok := h.cfg.MapError(err); ok {
			return status, body
		}
	}
	var ce *transport.CompactedError
	var cfe *ConflictError
	var se *SchemaError
	var ve *schema.ValidationError
	var mbe *http.MaxBytesError
	var rre *RolloutRunningError
	switch {
	case errors.As(err, &cfe):
		return http.StatusConflict, transport.ErrorBody{Error: transport.CodeConflict, Message: err.Error(), Revision: cfe.Revision}
	case errors.As(err, &rre):
		return http.StatusConflict, transport.ErrorBody{Error: transport.CodeConflict, Message: rre.Error()}
	case errors.As(err, &ce):
		return http.StatusGone, transport.ErrorBody{Error: transport.CodeCompacted, Message: err.Error(), CompactRevision: ce.CompactRevision}
	case errors.As(err, &se):
		return http.StatusUnprocessableEntity, transport.ErrorBody{Error: transport.CodeSchemaViolation, Message: err.Error(), Details: se.Failures}
	case errors.As(err, &ve):
		details := make([]string, 0, len(ve.Failures))
		for _, f := range ve.Failures {
			details = append(details, f.String())
		}
		return http.StatusUnprocessableEntity, transport.ErrorBody{Error: transport.CodeSchemaViolation, Message: err.Error(), Details: details}
	case errors.As(err, &mbe):
		return http.StatusRequestEntityTooLarge, transport.ErrorBody{Error: transport.CodeTooLarge, Message: "body larger than " + strconv.FormatInt(mbe.Limit, 10) + " bytes"}
	case errors.Is(err, transport.ErrTooLarge):
		return http.StatusRequestEntityTooLarge, transport.ErrorBody{Error: transport.CodeTooLarge, Message: err.Error()}
	case errors.Is(err, ErrExists), errors.Is(err, controller.ErrRunning), errors.Is(err, controller.ErrEnded), errors.Is(err, controller.ErrConflict):
		return http.StatusConflict, transport.ErrorBody{Error: transport.CodeConflict, Message: err.Error()}
	case errors.Is(err, ErrFull):
		return http.StatusInsufficientStorage, transport.ErrorBody{Error: transport.CodeTooLarge, Message: err.Error()}
	case errors.Is(err, ErrNotFound), errors.Is(err, transport.ErrNotFound), errors.Is(err, dataplane.ErrUnknownNamespace), errors.Is(err, controller.ErrUnknown):
		return http.StatusNotFound, transport.ErrorBody{Error: transport.CodeNotFound, Message: err.Error()}
	case errors.Is(err, ErrInvalid), errors.Is(err, dataplane.ErrInvalid), errors.Is(err, controller.ErrInvalid),
		errors.Is(err, transport.ErrInvalidNamespace), errors.Is(err, transport.ErrInvalidKey), errors.Is(err, access.ErrInvalid),
		errors.Is(err, schema.ErrInvalidSchema), errors.Is(err, schema.ErrExternalRef), errors.Is(err, schema.ErrInvalidValue):
		return http.StatusBadRequest, transport.ErrorBody{Error: transport.CodeBadRequest, Message: err.Error()}
	case errors.Is(err, ErrUnavailable), errors.Is(err, dataplane.ErrClosed), errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable, transport.ErrorBody{Error: transport.CodeUnavailable, Message: err.Error()}
	}
	return http.StatusInternalServerError, transport.ErrorBody{Error: transport.CodeInternal, Message: err.Error()}
}
