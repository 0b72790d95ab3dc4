package control

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/holdfast-dev/holdfast/access"
	"github.com/holdfast-dev/holdfast/internal/rollout/controller"
	"github.com/holdfast-dev/holdfast/schema"
	"github.com/holdfast-dev/holdfast/server/store"
	"github.com/holdfast-dev/holdfast/server/tokens"
	"github.com/holdfast-dev/holdfast/transport"
	"github.com/holdfast-dev/holdfast/transport/etcd"
)

// Defaults.
const (
	// DefaultMaxPublishBytes keeps a publish's transaction, which holds
	// its values twice (the keys and the audit record), below etcd's
	// default request limit of 1.5 MiB.
	DefaultMaxPublishBytes = 640 << 10
	maxControlBytes        = 64 << 10
)

// SchemaRoot is the key prefix of the namespaces' schemas: namespace N's
// is SchemaRoot + N. Outside etcd.KeyRoot, so no namespace watch sees it.
const SchemaRoot = "/holdfast-schema/"

// Config configures a Handler.
type Config struct {
	Source *etcd.Source // the store, through holdfast's etcd source
	// Namespaces is the store's write path and audit log, over the same
	// client.
	Namespaces *store.Namespaces
	Logger     *slog.Logger
	// MaxPublishBytes bounds a publish or schema body (default
	// DefaultMaxPublishBytes).
	MaxPublishBytes int64
	// Acks is the table of the clients' acks that /control/clients reads.
	Acks *Acks
	// AuditRetention is how many audit records each namespace keeps
	// (default DefaultAuditRetention); older ones fold into its base.
	AuditRetention int
	// AuditRetentionBytes bounds the bytes of each namespace's audit
	// records too (default DefaultAuditRetentionBytes; negative: no bound).
	AuditRetentionBytes int64
	// Tokens, when set, require a bearer token with control scope on
	// every request (as the data plane's, from the same file): a
	// namespace's endpoint needs control of it, a store-wide one (compact)
	// the pattern "*", GET /control/clients any control scope. The
	// token's name is the actor of every write; the actor a request names
	// is recorded as on_behalf_of.
	Tokens *access.Tokens
	// Revision reports the revision of a namespace the server's data
	// plane serves (ok false: not followed), for status and clients.
	Revision func(ns string) (rev int64, ok bool)
	// Streams counts the data plane's open watches of a namespace, for
	// status.
	Streams func(ns string) int
	// TokenStore, when set, serves /control/tokens: token management
	// (admin scope) and the relays' copy of the records (relay scope).
	TokenStore *tokens.Store
	// ServerID names this server among the store's (its rollout reports'
	// summary); default random.
	ServerID string
	// Liveness is how long a client of a rollout's stage may be silent
	// before it holds the stage no more (default 10s: two heartbeats; at
	// least 3s, so that a report through another server arrives first).
	Liveness time.Duration
	// Gates builds a rollout's metric gates from their JSON in the
	// rollout's spec (nil: a rollout with gates is refused).
	Gates func(raw json.RawMessage) (Gate, error)
}

// Gate is a check a rollout's stage must pass while it bakes (a metric
// gate): Check says whether it is breached, with the figures for the
// rollout's decisions and the audit.
type Gate = controller.Gate

// Handler serves the control API.
type Handler struct {
	cfg Config
	cli *clientv3.Client
	mux *http.ServeMux
	log *slog.Logger

	schemas   schemaCache
	publishes atomic.Int64
	trim      *trimmer
	rollouts  *controller.Controller
	reports   *reportSync
	active    *activeRollouts
}

// Close stops the handler's background work (the audit log's trimming,
// the rollout reports' summaries) and waits for it. Call it once the
// handler serves no more.
func (h *Handler) Close() {
	h.trim.close()
	h.reports.close()
	h.active.close()
	h.rollouts.Close()
}

// Publishes counts the publishes and rollbacks this handler committed.
func (h *Handler) Publishes() int64 { return h.publishes.Load() }

// New returns the control API over cfg.Source.
func New(cfg Config) (*Handler, error) {
	if cfg.Source == nil {
		return nil, errors.New("control: nil source")
	}
	if cfg.Namespaces == nil {
		return nil, errors.New("control: nil namespaces")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxPublishBytes <= 0 {
		cfg.MaxPublishBytes = DefaultMaxPublishBytes
	}
	if cfg.AuditRetention <= 0 {
		cfg.AuditRetention = DefaultAuditRetention
	}
	if cfg.AuditRetentionBytes == 0 {
		cfg.AuditRetentionBytes = DefaultAuditRetentionBytes
	}
	if cfg.Acks == nil {
		cfg.Acks = NewAcks(DefaultMaxAckEntries)
	}
	if cfg.Revision == nil {
		cfg.Revision = func(string) (int64, bool) { return 0, false }
	}
	if cfg.Streams == nil {
		cfg.Streams = func(string) int { return 0 }
	}
	if cfg.ServerID == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		cfg.ServerID = hex.EncodeToString(b[:])
	}
	if cfg.Liveness <= 0 {
		cfg.Liveness = 10 * time.Second
	}
	// A report through another server reaches the leader within two
	// summary intervals: a client must not count as gone before.
	cfg.Liveness = max(cfg.Liveness, 3*reportsEvery)
	h := &Handler{cfg: cfg, cli: cfg.Source.Client(), mux: http.NewServeMux(), log: cfg.Logger,
		trim: newTrimmer(cfg.Namespaces, cfg.Logger, store.AuditLimit{Records: cfg.AuditRetention, Bytes: max(0, cfg.AuditRetentionBytes)})}
	h.active = newActiveRollouts(h.cli, cfg.Logger)
	h.reports = newReportSync(h.cli, cfg.Acks, h.active, cfg.ServerID, cfg.Logger)
	h.rollouts = controller.New(controller.Config{Store: rolloutStore{h}, Reports: h.reports.reports, Gates: cfg.Gates,
		Liveness: cfg.Liveness, Settle: 2 * reportsEvery, Logger: cfg.Logger})
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
		{"POST /control/tokens", h.createToken},
		{"GET /control/tokens", h.listTokens},
		{"GET /control/tokens/{name}", h.getToken},
		{"DELETE /control/tokens/{name}", h.revokeToken},
		{"POST /control/tokens/sync", h.syncTokens},
	} {
		h.mux.Handle(rt.pattern, handlerFunc(h.log, h.gate(rt.pattern, rt.fn)))
	}
	h.mux.Handle("/control/", handlerFunc(h.log, func(w http.ResponseWriter, r *http.Request) error {
		return &httpError{status: http.StatusNotFound, code: transport.CodeNotFound, msg: "no such endpoint: " + r.URL.Path}
	}))
	return h, nil
}

// ServeHTTP serves /control/... requests.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// gate authenticates a request and checks its identity's scope (when
// the handler has tokens): a namespace's endpoint needs control of it, a
// store-wide one the control pattern "*", GET /control/clients any
// control scope, token management the admin scope, the relays' sync the
// relay scope.
func (h *Handler) gate(pattern string, fn func(http.ResponseWriter, *http.Request) error) func(http.ResponseWriter, *http.Request) error {
	if h.cfg.Tokens == nil {
		return fn
	}
	tokenSync := strings.HasSuffix(pattern, "/control/tokens/sync")
	admin := !tokenSync && strings.Contains(pattern, "/control/tokens")
	storeWide := !admin && !tokenSync && !strings.Contains(pattern, "{ns}") && !strings.HasSuffix(pattern, "/control/clients")
	return func(w http.ResponseWriter, r *http.Request) error {
		id, ok := h.identify(r)
		ns := r.PathValue("ns")
		switch {
		case !ok:
			w.Header().Set("WWW-Authenticate", `Bearer realm="holdfast"`)
			return &httpError{status: http.StatusUnauthorized, code: transport.CodeUnauthorized, msg: "the control API needs a bearer token"}
		case tokenSync:
			if !id.IsRelay() {
				return &httpError{status: http.StatusForbidden, code: transport.CodeForbidden, msg: fmt.Sprintf("token %q has no relay scope", id.Name)}
			}
		case admin:
			if !id.IsAdmin() {
				return &httpError{status: http.StatusForbidden, code: transport.CodeForbidden, msg: fmt.Sprintf("token %q has no admin scope (token management needs it)", id.Name)}
			}
		case !id.HasControl():
			return &httpError{status: http.StatusForbidden, code: transport.CodeForbidden, msg: fmt.Sprintf("token %q has no control scope", id.Name)}
		case ns != "" && !id.MayControl(ns):
			return &httpError{status: http.StatusForbidden, code: transport.CodeForbidden, msg: fmt.Sprintf("token %q may not control namespace %q", id.Name, ns)}
		case storeWide && !id.MayControlAll():
			return &httpError{status: http.StatusForbidden, code: transport.CodeForbidden, msg: fmt.Sprintf("token %q may not control the whole store (it needs the pattern \"*\")", id.Name)}
		}
		return fn(w, r.WithContext(access.NewContext(r.Context(), id)))
	}
}

// identify returns who is calling: the identity of the request's
// credentials (access.Tokens.AuthenticateRequest: its bearer token
// today; a client certificate's subject is to be added there).
func (h *Handler) identify(r *http.Request) (access.Identity, bool) {
	return h.cfg.Tokens.AuthenticateRequest(r)
}

// actors returns the actor a write records and whom it acted for: the
// authenticated identity, and the actor the request names (when it is
// not the identity's own name). On an open store (access.Anonymous) there
// is no identity to record: the actor is the one the request names,
// unverified.
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

// requestTimeout bounds a control request's work with the store: a store
// that does not answer gets a 503, not a request that hangs.
const requestTimeout = 10 * time.Second

// handlerFunc adapts a handler that returns an error: the one place that
// writes an error reply.
func handlerFunc(log *slog.Logger, fn func(http.ResponseWriter, *http.Request) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
		defer cancel()
		err := fn(w, r.WithContext(ctx))
		if err == nil {
			return
		}
		status, body := errorReply(err)
		if status >= 500 {
			log.Warn("control: request failed", "method", r.Method, "path", r.URL.Path, "status", status, "err", err)
		}
		if status == http.StatusServiceUnavailable || status == http.StatusTooManyRequests {
			w.Header().Set("Retry-After", "1")
		}
		writeJSON(w, status, body)
	})
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

// errorReply maps an error to its status and body; a caller's mistake is
// never a 500, and a store that does not answer is a 503.
func errorReply(err error) (int, transport.ErrorBody) {
	var he *httpError
	var ce *transport.CompactedError
	var conflict *store.ConflictError
	var ve *schema.ValidationError
	var mbe *http.MaxBytesError
	switch {
	case errors.Is(err, errStoredSchema):
		return http.StatusInternalServerError, transport.ErrorBody{Error: transport.CodeInternal, Message: err.Error()}
	case errors.As(err, &he):
		return he.status, transport.ErrorBody{Error: he.code, Message: he.msg, Details: he.details}
	case errors.As(err, &conflict):
		return http.StatusConflict, transport.ErrorBody{Error: transport.CodeConflict, Message: err.Error(), Revision: conflict.Revision}
	case errors.As(err, &ce):
		return http.StatusGone, transport.ErrorBody{Error: transport.CodeCompacted, Message: err.Error(), CompactRevision: ce.CompactRevision}
	case errors.As(err, &ve):
		details := make([]string, 0, len(ve.Failures))
		for _, f := range ve.Failures {
			details = append(details, f.String())
		}
		return http.StatusUnprocessableEntity, transport.ErrorBody{Error: transport.CodeSchemaViolation, Message: err.Error(), Details: details}
	case errors.As(err, &mbe):
		return http.StatusRequestEntityTooLarge, transport.ErrorBody{Error: transport.CodeTooLarge, Message: "body larger than " + strconv.FormatInt(mbe.Limit, 10) + " bytes"}
	case errors.Is(err, transport.ErrTooLarge), errors.Is(err, rpctypes.ErrRequestTooLarge), errors.Is(err, rpctypes.ErrTooManyOps):
		return http.StatusRequestEntityTooLarge, transport.ErrorBody{Error: transport.CodeTooLarge, Message: err.Error()}
	case errors.Is(err, transport.ErrNotFound):
		return http.StatusNotFound, transport.ErrorBody{Error: transport.CodeNotFound, Message: err.Error()}
	case errors.Is(err, store.ErrInvalidArgument), errors.Is(err, transport.ErrInvalidNamespace), errors.Is(err, transport.ErrInvalidKey),
		errors.Is(err, schema.ErrInvalidSchema), errors.Is(err, schema.ErrExternalRef), errors.Is(err, schema.ErrInvalidValue):
		return http.StatusBadRequest, transport.ErrorBody{Error: transport.CodeBadRequest, Message: err.Error()}
	case errors.Is(err, rpctypes.ErrNoSpace):
		return http.StatusInsufficientStorage, transport.ErrorBody{Error: transport.CodeUnavailable, Message: "the store is out of space (etcd's quota): writes are refused until it is compacted, defragmented or given a larger quota"}
	case storeDown(err):
		return http.StatusServiceUnavailable, transport.ErrorBody{Error: transport.CodeUnavailable, Message: "the store did not answer: " + err.Error()}
	}
	return http.StatusInternalServerError, transport.ErrorBody{Error: transport.CodeInternal, Message: err.Error()}
}

// storeDown reports whether err says the store did not answer (as
// opposed to refusing the request).
func storeDown(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, etcd.ErrClosed) || errors.Is(err, store.ErrClosed) || errors.Is(err, rpctypes.ErrNoLeader) ||
		errors.Is(err, rpctypes.ErrTimeout) || errors.Is(err, rpctypes.ErrTimeoutDueToLeaderFail) {
		return true
	}
	// clientv3 turns some gRPC errors into rpctypes.EtcdError, which
	// carries the code but no gRPC status: a leader change, a member
	// stopping, too many requests.
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) && (ee.Code() == codes.Unavailable || ee.Code() == codes.DeadlineExceeded || ee.Code() == codes.ResourceExhausted && !errors.Is(err, rpctypes.ErrRequestTooLarge)) {
		return true
	}
	for e := err; e != nil; e = errors.Unwrap(e) {
		if st, ok := status.FromError(e); ok && (st.Code() == codes.Unavailable || st.Code() == codes.DeadlineExceeded) {
			return true
		}
	}
	return false
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"internal","message":"encoding the reply failed"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// pathNamespace reads and checks the {ns} path segment.
func pathNamespace(r *http.Request) (string, error) {
	ns := r.PathValue("ns")
	if err := transport.ValidateNamespace(ns); err != nil {
		return "", badRequest("%v", err)
	}
	return ns, nil
}

// readJSON decodes a body of at most limit bytes into v, refusing
// unknown fields and trailing data. An empty body leaves v as it is when
// emptyOK.
func readJSON(w http.ResponseWriter, r *http.Request, limit int64, v any, emptyOK bool) error {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var mbe *http.MaxBytesError
	if err != nil && !errors.As(err, &mbe) {
		return badRequest("reading the body: %v", err) // cut short: the caller's
	}
	if err != nil {
		return err
	}
	if len(data) == 0 && emptyOK {
		return nil
	}
	if !utf8.Valid(data) {
		// JSON text is UTF-8: a value of invalid UTF-8 would be stored
		// as it came and served as JSON that is not.
		return badRequest("body: not valid UTF-8 (JSON text must be)")
	}
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return badRequest("body: %v", err)
	}
	if dec.More() {
		return badRequest("body: trailing data after the JSON object")
	}
	return nil
}

// query reads a request's query, refusing parameters other than allowed.
func query(r *http.Request, allowed ...string) (map[string]string, error) {
	q := r.URL.Query()
	out := make(map[string]string, len(q))
	for k, v := range q {
		ok := false
		for _, a := range allowed {
			ok = ok || a == k
		}
		if !ok {
			return nil, badRequest("unknown query parameter %q (known: %s)", k, strings.Join(allowed, ", "))
		}
		if len(v) != 1 {
			return nil, badRequest("query parameter %q given %d times", k, len(v))
		}
		out[k] = v[0]
	}
	return out, nil
}

// intParam parses q[name] as an integer of at least lowest.
func intParam(q map[string]string, name string, lowest int64) (n int64, ok bool, err error) {
	s, ok := q[name]
	if !ok {
		return 0, false, nil
	}
	n, err = strconv.ParseInt(s, 10, 64)
	if err != nil || n < lowest {
		return 0, true, badRequest("%s=%q: want an integer of at least %d", name, s, lowest)
	}
	return n, true, nil
}

// timeParam parses an RFC 3339 time; a "+" of a zone offset that came
// unescaped (curl) reads as a space, which RFC 3339 never holds.
func timeParam(name, s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, strings.ReplaceAll(s, " ", "+"))
	if err != nil {
		return time.Time{}, badRequest("%s=%q: want an RFC 3339 time, e.g. 2026-12-01T14:03:00Z", name, s)
	}
	return t, nil
}
